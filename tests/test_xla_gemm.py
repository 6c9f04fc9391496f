"""GEMM tables from OpenXLA's published kernel timings (validation/xla_gemm.py): the presets hold what the
script derives, docs/compute.md shows its current comparison, and the data agrees with the independent
measurements it can be held against (the lent H100's calibrations, the MAMF maxima)."""
import csv
import sys
from pathlib import Path

import pytest

from simulator.spec.hardware import load_hardware

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))
import xla_gemm  # noqa: E402


def test_presets_hold_the_tables_the_script_derives():
    assert xla_gemm.check() == []
    for kind, presets in xla_gemm.PRESETS.items():
        for preset in presets:
            x, e = load_hardware(preset).efficiency_curve(kind)
            want_x, want_e = xla_gemm.preset_table(preset, kind)
            assert list(x) == pytest.approx(want_x) and list(e) == pytest.approx(want_e, abs=1e-4)
            assert "OpenXLA" in load_hardware(preset).efficiency[kind].source


def test_transfer_by_kernel_time_predicts_the_b200_from_the_h100():
    """Held out: the H100's kernels moved to the B200 by ideal time at peak and the MAMF ratio
    (xla_gemm.transfer) against the B200's own measured kernels, 6.7e7-5.5e11 FLOPs (the range where both
    GPUs' tables hold the moved point): median |error| <= 10 %, every knot within 25 %."""
    xh, eh, _ = xla_gemm.table("sm_90")
    xb, eb, _ = xla_gemm.table("sm_100")
    ratio = xla_gemm.mamf_fraction("B200-SXM") / xla_gemm.mamf_fraction("H100-SXM")
    moved = dict(zip(*xla_gemm.transfer(xh, eh, peak_source=989.4e12, peak_target=2250e12, mamf_ratio=ratio)))
    errs = [xla_gemm._interp(moved, x) / e - 1 for x, e in zip(xb, eb) if min(moved) <= x <= max(moved)]
    assert len(errs) >= 13
    errs = sorted(abs(v) for v in errs)
    assert errs[len(errs) // 2] <= 0.10 and errs[-1] <= 0.25, errs


def test_docs_show_the_current_comparison():
    doc = (ROOT / "docs" / "compute.md").read_text()
    assert "\n".join(xla_gemm.comparison_lines()) in doc


def test_the_csv_is_the_full_grid_once():
    rows = list(csv.DictReader(open(xla_gemm.DATA)))
    keys = [(r["arch"], r["b"], r["m"], r["n"], r["k"], r["dtype"]) for r in rows]
    assert len(keys) == len(set(keys))
    for arch in ("sm_90", "sm_100"):
        assert len(xla_gemm.points(arch)) == 3 * 5 ** 3  # b in {1, 2, 4}; m, n, k in {256, ..., 4096}
        # a measured FLOP rate never exceeds the dense peak it is divided by
        assert max(e for *_, e in xla_gemm.points(arch)) < 1.0


def test_large_gemms_agree_with_the_lent_h100s_own_measurement():
    """Two independent measurements (XLA's CUPTI kernel times; torch.matmul timed with CUDA events on the
    lent H100, two calibrations) agree within 10 % from 1e11 FLOPs, where one call's host time is small
    against its kernel; below 3e10 the event-timed single call is host time and reads far slower."""
    # the calibration's burst table (the GPU idle before each shape: XLA's short traced runs are that state too);
    # dgx-h100 ships the back-to-back state above 1.6e11 FLOPs (validation/h100_gemm_table.py)
    from h100_gemm_table import burst_table

    from simulator.calibrate.fit import efficiency_at

    bx, be = burst_table()
    for x, e, _ in zip(*xla_gemm.table("sm_90")):
        ratio = float(efficiency_at(bx, be, [x])[0]) / e
        if x >= 1e11:
            assert 0.9 <= ratio <= 1.05, (x, ratio)
        elif 5e8 <= x <= 3e10:
            assert ratio < 0.75, (x, ratio)


@pytest.mark.parametrize("gpu,arch,peak,kind", [("H100-SXM", "sm_90", 989.4, "gemm"), ("B200-SXM", "sm_100", 2250, "gemm"),
                                               ("B200-SXM", "sm_100", 4500, "gemm_fp8")])
def test_the_mamf_search_maximum_sits_just_above_the_median_shape(shared_data, gpu, arch, peak, kind):
    """stas00's MAMF finder (torch.mm or torch._scaled_mm, the best of a shape search; kernel_benchmarks.csv)
    is at least the XLA median at its best shape's FLOP count and within 25 % of it."""
    dtype, kernel = ("bf16", "torch.mm") if kind == "gemm" else ("fp8_e4m3fn", "fp8-scaled-mm")
    with open(shared_data("kernel_benchmarks.csv")) as f:
        (row,) = [r for r in csv.DictReader(f) if (r["kind"], r["gpu"], r["dtype"]) == ("gemm", gpu, dtype)
                  and r["kernel"].startswith(kernel)]
    mamf = float(row["tflops"]) * 1e12 / peak / 1e12
    x = 2.0 * int(row["m"]) * int(row["n"]) * int(row["k"])
    xs, es, _ = xla_gemm.table(arch, kind)
    median_there = xla_gemm._interp(dict(zip(xs, es)), x)
    assert median_there <= mamf <= 1.25 * median_there, (mamf, median_there)


def test_b200_small_gemms_are_slower_than_the_datasheet_curve_said():
    """At 1e9-3e10 FLOPs the B200 kernels reach 0.07-0.52 of peak; Calculon's curve put 0.50-0.75 there."""
    b200 = load_hardware("dgx-b200")
    for x in (1.07e9, 4.29e9, 1.72e10):
        assert float(b200.interp_efficiency("gemm", x)) < 0.45
    # the kernels' burst state (the preset holds it times the sustained factor: tests/test_sustained_gemm.py)
    assert xla_gemm._interp(dict(zip(*xla_gemm.burst_table("dgx-b200"))), 2.75e11) == pytest.approx(0.652, abs=0.01)


def test_fp8_gains_nothing_on_small_gemms_and_about_two_on_large_ones():
    """The B200's measured FP8 kernels (XLA) against its bf16 ones at the same shapes: about 1x below 5e9
    FLOPs (fixed per-kernel costs), about 2x from 1e11 (the peak ratio); the table the model now reads."""
    x8, e8, _ = xla_gemm.table("sm_100", "gemm_fp8")
    _, e16, _ = xla_gemm.table("sm_100")
    speed = {x: a * 4500 / (b * 2250) for x, a, b in zip(x8, e8, e16)}
    assert all(0.85 <= v <= 1.25 for x, v in speed.items() if x < 5e9)
    assert all(1.8 <= v <= 2.2 for x, v in speed.items() if x >= 1e11)
    assert xla_gemm._interp(dict(zip(*xla_gemm.burst_table("dgx-b200", "gemm_fp8"))), 1.07e9) == \
        pytest.approx(0.0368, abs=1e-3)
