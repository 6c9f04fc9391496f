"""Kernels timed inside CUDA graphs on the lent H100 and H200 (validation/h100_graphed/, validation/h200_graphed/,
validation/graphed.py) against the tables fitted to them and against what those fits never saw."""
from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))

import graphed as G  # noqa: E402


@pytest.mark.parametrize("gpu", ["H100", "H200"])
def test_the_graph_floor_and_the_eager_gap_are_a_few_microseconds(gpu):
    # a one-element add back to back in a graph: about a microsecond; an eager launch adds 1-2.5 us per kernel
    assert 0.5e-6 < G.floor_s(gpu) < 1.5e-6
    assert 0.5e-6 < G.eager_gap_s(gpu, "memory") < 2.5e-6
    # and the queued calls of small kernels are the host's issue, several times the kernel's graph time
    small = [r for r in G.rows(gpu) if r["what"] == "memory" and r["kernel"] == "add"
             and float(r["bytes_moved"]) <= 2**20]
    assert all(float(r["queued_s"]) > 4 * float(r["graph_s"]) for r in small)


@pytest.mark.parametrize("gpu", ["H100", "H200"])
def test_the_memory_table_t0_lies_between_the_fitted_kernels_small_calls(gpu):
    # t = t0 + x/B fitted on add and SiLU: t0 between the fastest and the slowest small call's eager time, and
    # the fit reproduces the large calls (HBM-bound) within 10 %
    import h100_memory_table as M

    t0, b = M.fit(gpu)
    pts = G.memory_points(gpu)
    small = [p["t_eager_s"] for p in pts if p["bytes_moved"] <= G.L2_FREE_MAX_BYTES]
    assert min(small) < t0 < max(small)
    large = [(t0 + p["bytes_moved"] / b) / p["t_eager_s"] - 1 for p in pts if p["bytes_moved"] >= G.HBM_MIN_BYTES]
    assert len(large) >= 6 and max(abs(e) for e in large) < 0.10


@pytest.mark.parametrize("gpu", ["H100", "H200"])
def test_the_memory_table_predicts_an_earlier_leases_queued_large_kernels(gpu):
    # held out: copy, add and SiLU queued on the earlier leases (a different protocol and machine), from 128 MiB
    # moved, where the queued calls are the GPU's time: measured 0.96-1.01 (H100), 0.92-1.06 (H200)
    import pandas as pd

    import h100_memory_table as M

    t0, b = M.fit(gpu)
    q = pd.read_csv(M.LEASES[gpu].data / "memory_queued.csv")
    q = q[q["kernel"].isin(["copy", "add", "silu"]) & (q["bytes_moved"] >= 2**27)]
    r = (t0 + q["bytes_moved"] / b) / q["queued_s"]
    assert len(r) >= 12 and abs(r.median() - 1) < 0.04 and (r - 1).abs().max() < 0.10


def test_the_gh100_gemm_table_predicts_the_h200s_graphed_gemms():
    # held out: dgx-h200 holds the table fitted to the H100's graphed and queued points; the H200's graphed bf16
    # GEMMs (1e8-2e10 FLOPs) are predicted at median 1.04x their eager time (the host-bound table before: 1.8-4.9x)
    from simulator.calibrate.fit import efficiency_at
    from simulator.spec.hardware import load_hardware

    hw = load_hardware("dgx-h200")
    x, e = hw.efficiency_curve("gemm")
    p = G.gemm_points("H200", "bfloat16")
    f = np.array([q["flops"] for q in p])
    t = np.array([q["t_eager_s"] for q in p])
    r = f / (hw.peak_flops("bf16") * np.asarray(efficiency_at(x, e, f))) / t
    assert len(r) > 100 and abs(np.median(r) - 1) < 0.10 and np.median(np.abs(r - 1)) < 0.15


def test_the_gemm_tables_small_end_is_the_graphed_kernels_not_the_hosts_issue():
    # below 5e10 FLOPs the shipped bf16 and FP8 tables describe the graphed kernels' eager time: within 15 % at the
    # median per decade, where the one-call / queued times they held were 1.3-8.5x
    import h100_fp8_table as F8
    import h100_gemm_table as T
    from simulator.calibrate.fit import efficiency_at
    from simulator.spec.hardware import load_hardware

    hw = load_hardware("dgx-h100")
    for table, dtype, peak in (("gemm", "bfloat16", "bf16"), ("gemm_fp8", "fp8", "fp8")):
        x, e = hw.efficiency_curve(table)
        p = [q for q in G.gemm_points("H100", dtype) if q["flops"] <= G.GRAPH_MAX_FLOPS]
        f = np.array([q["flops"] for q in p])
        r = f / (hw.peak_flops(peak) * np.asarray(efficiency_at(x, e, f))) / np.array([q["t_eager_s"] for q in p])
        for lo in (1e9, 1e10):
            m = (f > lo) & (f <= 10 * lo)
            assert m.sum() > 40 and abs(np.median(r[m]) - 1) < 0.15, (table, lo, np.median(r[m]))
    assert T.check() == [] and F8.check() == []


def test_the_h200_dropout_factors_hold_on_the_h100_and_the_suspect_point_is_settled():
    # validation/h100_graphed/attention_dropout.csv (not used to fit): every factor within 11 %, median 1.3 %; the
    # flash backward at 1x24x2048 rerun on the H200 with 10 warm-up calls is 1.15, not the 0.89 left out of the fit
    from simulator.cost.attention import DROPOUT_FACTORS

    family = {backend: k for k, (backend, _, _) in DROPOUT_FACTORS.items()}

    def factors(path):
        with open(path) as f:
            d = {(r["backend"], r["batch"], r["heads"], r["seq"], float(r["dropout_p"])): r for r in csv.DictReader(f)}
        out = {}
        for k, r in d.items():
            if k[4] > 0:
                r0 = d[k[:4] + (0.0,)]
                fwd = float(r["fwd_s"]) / float(r0["fwd_s"])
                bwd = ((float(r["fwd_bwd_s"]) - float(r["fwd_s"]))
                       / (float(r0["fwd_bwd_s"]) - float(r0["fwd_s"])))
                out[k[:4]] = (fwd, bwd)
        return out

    errs = []
    for (backend, *_), (fwd, bwd) in factors(ROOT / "validation/h100_graphed/attention_dropout.csv").items():
        _, f_model, b_model = DROPOUT_FACTORS[family[backend]]
        errs += [f_model / fwd - 1, b_model / bwd - 1]
    errs = np.abs(errs)
    assert len(errs) == 24 and np.median(errs) < 0.03 and errs.max() < 0.11
    rerun = factors(ROOT / "validation/h200_graphed/attention_dropout_rerun.csv")
    assert rerun[("flash", "1", "24", "2048")][1] == pytest.approx(DROPOUT_FACTORS["flash2"][2], rel=0.05)
