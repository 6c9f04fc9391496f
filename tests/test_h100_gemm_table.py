"""dgx-h100's bf16 GEMM table in the state a training step keeps the GPU in (validation/h100_gemm_table.py): the
presets hold what the script builds, the two measured states differ as the power limit makes them differ, the
back-to-back fit predicts shapes it was not fitted to, and docs/compute.md shows the current comparison."""
import csv
import sys
from pathlib import Path

import pytest

from simulator.spec.hardware import load_hardware

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))
import h100_gemm_table as T  # noqa: E402


def test_the_presets_hold_the_built_table_with_its_source():
    assert T.check() == []
    # the check can fail: a preset whose text the render would change is named, and nothing is written without write
    assert T.rewrite_presets(lambda text, name: text + "# changed\n", write=False) == [f"{n}.toml" for n in T.GH100_SXM]
    assert T.check() == []
    x, e, state = T.shipped()
    # every GH100 SXM preset (the H200 SXM and H800 SXM have the H100's compute die and 700 W limit): one table, in
    # one state of the GPU, so that comparing them compares their memory and networks; the FP8 table likewise
    assert set(T.GH100_SXM) == {"dgx-h100", "gcp-a3-mega", "dgx-h200", "dgx-h800"}
    fp8 = load_hardware("dgx-h100").efficiency_curve("gemm_fp8")
    for name in T.GH100_SXM:
        hw = load_hardware(name)
        px, pe = hw.efficiency_curve("gemm")
        assert list(px) == pytest.approx(list(x), rel=1e-9) and list(pe) == pytest.approx(list(e), abs=1e-4)
        assert "gemm_queued.csv" in hw.efficiency["gemm"].source
        assert ("compute die" in hw.efficiency["gemm"].source) == (name in T.SAME_DIE)
        assert [list(v) for v in hw.efficiency_curve("gemm_fp8")] == [list(v) for v in fp8]
    # one back-to-back fit: the graphed kernels (+ the eager gap) up to 5e10 FLOPs, the queued calls above
    assert state[0] == "graphed + eager gap" and state[-1] == "queued"
    assert sorted(state, key=lambda s: s == "queued") == list(state)  # one switch
    assert "gpu_graphed.py" in load_hardware("dgx-h100").efficiency["gemm"].source


def test_back_to_back_gemms_run_about_ten_percent_slower_than_after_an_idle():
    """The raw timings, no fit: the same shapes above 1e12 FLOPs, queued back to back on the two later leases,
    against the calibration's one-call times after an idle on the first: 1.05-1.15x at the median on each lease
    (the 8192³ GEMM loses 8-13 % back to back at the 700 W limit, power_step.csv)."""
    first = {}
    with open(ROOT / "validation" / "h100" / "calib_points.csv") as f:
        for r in csv.DictReader(f):
            if r["measurement"] == "gemm" and float(r["flops"]) > 1e12:
                first[(r["m"], r["n"], r["k"])] = float(r["time_s"])
    for path in T.BACK:
        with open(path) as f:
            ratios = sorted(float(r["queued_s"]) / first[k] for r in csv.DictReader(f)
                            if r["dtype"] == "bf16" and (k := (r["m"] + ".0", r["n"] + ".0", r["k"] + ".0")) in first)
        assert len(ratios) > 30 and 1.05 <= ratios[len(ratios) // 2] <= 1.15, (path, ratios[len(ratios) // 2])


def test_the_back_to_back_fit_predicts_the_held_out_tp_degrees():
    from simulator.calibrate.fit import efficiency_at

    f = T.back_fit(T.back_points(held_out=False))
    big = sorted(abs(float(efficiency_at(f.x, f.efficiency, [x])[0]) / e - 1)
                 for x, e in T.back_points(held_out=True) if x >= 1e11)
    assert len(big) > 50 and big[len(big) // 2] <= 0.06 and big[-1] <= 0.4


def test_docs_show_the_current_comparison():
    assert "\n".join(T.comparison_lines()) in (ROOT / "docs" / "compute.md").read_text()
