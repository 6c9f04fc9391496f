"""dgx-h100's table for elementwise kernels on strided or broadcast operands (validation/h100_strided_table.py),
fitted to six kernel families of one profiled H100 training step, and how the cost model uses it."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))

import h100_strided_table as S  # noqa: E402


def test_the_presets_carry_the_fitted_table():
    assert S.check() == []


def test_each_family_is_the_trace_and_near_the_fit():
    # every family's calls per step are the ones its shapes imply (points() refuses otherwise), each family's own
    # rate is below the vectorised kernel's 2.85 TB/s (validation/h100_memory_table.py), and the median rate
    # predicts each family's time within 20 % (silu, the slowest, -17 %)
    p = S.points()
    assert len(p) == 6 and p["calls"].sum() == 216
    assert (p["rate"] < 2.85e12).all() and (p["rate"] > 1.0e12).all()
    assert S.residuals()["error"].abs().max() < 0.20


def test_a_strided_kernel_takes_its_measured_time_and_a_contiguous_one_does_not():
    # the profiled step's vectorised mul of two contiguous [4096, 14336] bf16 tensors (352 MB, 8 calls: 0.931 ms;
    # no table saw it: the memory table is fitted to queued microbenchmarks) and its silu_backward over the strided
    # gate half (352 MB, 8 calls: 1.662 ms; one of the six families the strided table's median rate comes from),
    # per call, read from the trace
    import pandas as pd

    from simulator.cost.memory_ops import _memory_time
    from simulator.spec.hardware import load_hardware

    k = pd.read_csv(S.KERNELS)
    k = k[k["activities"] == "cpu+cuda"]

    def per_call(needle):
        hit = k[k["kernel"].str.contains(needle, regex=False)]
        return float(hit["trace_s"].sum() / hit["calls_per_step"].sum())

    contiguous = per_call("vectorized_elementwise_kernel<8, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
                          "c10::BFloat16, at::native::binary_internal::MulFunctor")
    strided = per_call("silu_backward_kernel")
    h100, mi300x = load_hardware("dgx-h100"), load_hardware("mi300x")
    by = np.array([3 * 2 * 4096 * 14336.0])
    assert float(_memory_time(by, 1.0, h100)[0]) == pytest.approx(contiguous, rel=0.10)
    assert float(_memory_time(by, 1.0, h100, "memory_strided")[0]) == pytest.approx(strided, rel=0.10)
    assert float(_memory_time(by, 1.0, h100)[0]) < 0.65 * strided  # the memory table alone misses it
    # a profile without the table times them as any memory-bound kernel (not measured there)
    assert "memory_strided" not in mi300x.efficiency
    assert _memory_time(by, 1.0, mi300x, "memory_strided")[0] == _memory_time(by, 1.0, mi300x)[0]


def test_profile_step_reads_every_device_activity_from_the_trace(tmp_path):
    # torch 2.11's prof.events() gave no device time to whole kernel families (validation/h100_owed2/README.md);
    # device_kernels reads the exported Chrome trace: kernels, memcpys and memsets, not host events, not empty ones
    import profile_step

    events = [{"ph": "X", "cat": "kernel", "name": "void at::native::elementwise_kernel<128, 4, mul>", "ts": 10.0,
               "dur": 5.0},
              {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 16.0, "dur": 1.0},
              {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 18.0, "dur": 2.0},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "ts": 1.0, "dur": 9.0},
              {"ph": "X", "cat": "kernel", "name": "empty", "ts": 30.0, "dur": 0.0},
              {"ph": "i", "cat": "kernel", "name": "marker", "ts": 31.0}]

    class Prof:
        def export_chrome_trace(self, path):
            Path(path).write_text(json.dumps({"traceEvents": events}))

    got = profile_step.device_kernels(Prof())
    assert got == [("void at::native::elementwise_kernel<128, 4, mul>", 10.0, 5.0), ("Memset (Device)", 16.0, 1.0),
                   ("Memcpy HtoD", 18.0, 2.0)]
