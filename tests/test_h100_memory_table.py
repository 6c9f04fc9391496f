"""dgx-h100's memory-bound kernel table (validation/h100_memory_table.py): fitted to add and SiLU timed inside CUDA
graphs on a lent H100 (validation/graphed.py), checked against what the fit never saw (the CUPTI times of tiny kernels, the two calibration leases'
one-call timings of large kernels, where the host's issue of a call is small beside the kernel)."""
import csv
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))

import h100_memory_table as M  # noqa: E402


def test_the_presets_carry_the_fitted_table():
    assert M.check() == []


def test_the_fits_per_kernel_cost_is_the_cupti_time_of_tiny_kernels():
    # launch.csv: a one-element add, a LayerNorm of 8x1024 and a small linear take 1.2-3.4 us on the GPU (CUPTI);
    # the fit's fixed cost per kernel (graph time + the eager launch gap) lands in that range
    t0, b = M.fit()
    rows = list(csv.DictReader(open(ROOT / "validation" / "h100_owed" / "launch.csv")))
    k = [float(r["kernel_us"]) * 1e-6 for r in rows]
    assert min(k) <= t0 <= max(k)
    assert 2.7e12 < b < 3.35e12  # a stream below HBM's 3.35 TB/s
    r = M.residuals()
    # one t0 for two kernels whose small calls differ (add 1.2, SiLU 1.9 us inside a graph): about 11 % each side
    assert r["error"].abs().median() < 0.13 and r["error"].abs().max() < 0.2


@pytest.mark.parametrize("points,lo,hi", [("calib_points.csv", -0.16, 0.0), ("calib_points2.csv", -0.05, 0.05)])
def test_large_streaming_kernels_of_both_calibration_leases_are_predicted(points, lo, hi):
    # one call at a time on two other leases, inputs of 256 MiB and 1 GiB (the host's issue under 2 % of the call):
    # copy, add and SiLU on the second lease within 3 % (2.89-3.05 TB/s); the first lease streamed 8-15 % slower
    # (2.59-2.87 TB/s), predicted at -5 to -15 %; RMSNorm, a reduction, runs 30-45 % slower than the streaming fit
    import pandas as pd

    from simulator.cost.memory_ops import _memory_time
    from simulator.spec.hardware import load_hardware

    hw = load_hardware("dgx-h100")
    c = pd.read_csv(ROOT / "validation" / "h100" / points)
    c = c[(c["measurement"] == "memory") & (c["size_bytes"] >= 2**28)]
    err = np.array([float(_memory_time(x, 1.0, hw)) for x in c["bytes_moved"]]) / c["time_s"].to_numpy() - 1
    stream = (c["kernel"] != "rmsnorm").to_numpy()
    assert stream.sum() == 6 and np.all((err[stream] > lo) & (err[stream] < hi)), err
    assert np.all(err[~stream] < -0.25)
