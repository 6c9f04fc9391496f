"""dgx-h100's table for indexed writes (index_put_; validation/h100_indexed_table.py), fitted to queued
microbenchmarks on the lent H100, checked on the index_put_ kernels of profiled MPT blocks it did not see."""
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))

import h100_indexed_table as I  # noqa: E402


def test_the_presets_carry_the_fitted_table():
    import published_memory_tables as P

    assert I.check() == [] and P.check() == []


def test_the_fit_is_the_queued_points_and_predicts_the_profiled_step():
    # every queued point from 16 MiB streams at 0.84-0.98 TB/s (row order does not matter), below the strided
    # loop's 1.64 TB/s; the profiled MPT blocks' index_put_ (201 and 235 MB per call, inside a training step)
    # are predicted within 15 %
    p = I.points()
    assert len(p) == 8 and (p["rate"] > 0.8e12).all() and (p["rate"] < 1.0e12).all()
    h = I.held_out()
    assert len(h) == 2 and h["error"].abs().max() < 0.15


def test_an_indexed_write_takes_its_table_and_other_kernels_do_not():
    from simulator.cost.elementwise_ops import Op
    from simulator.cost.memory_ops import _memory_time, kernel_table
    from simulator.spec.hardware import load_hardware

    assert kernel_table(Op("index_put_", ("a",), ("b",), indexed=True)) == "memory_indexed"
    assert kernel_table(Op("gather", ("a",), ("b",))) == "memory"
    h100, mi300x = load_hardware("dgx-h100"), load_hardware("mi300x")
    by = np.array([2.0 * 2 * 28672 * 2048])  # MPT-1b's pad_input index_put_, 235 MB
    t = float(_memory_time(by, 1.0, h100, "memory_indexed")[0])
    assert t == pytest.approx(by[0] / 0.86e12, rel=0.05)
    assert float(_memory_time(by, 1.0, h100, "memory_strided")[0]) < 0.6 * t
    # a profile without the table times it as any memory-bound kernel (not measured there)
    assert "memory_indexed" not in mi300x.efficiency
    assert _memory_time(by, 1.0, mi300x, "memory_indexed")[0] == _memory_time(by, 1.0, mi300x)[0]
