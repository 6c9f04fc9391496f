"""Zero Bubble paper (Qi et al. 2024, Tables 4, 5, 9; published_runs.csv rows ZB24): replay the
profiled TF/TB/TW/Tcomm and compare bubble rates and throughput with the paper's."""
import pytest

from simulator.pipeline.zb_validation import compare_row, zb_rows


@pytest.fixture(scope="module")
def rows(shared_data):
    """The 48 ZB24 rows of shared/data/published_runs.csv, replayed (skip or fail without it: conftest)."""
    return [compare_row(r) for r in zb_rows(shared_data("published_runs.csv"))]


def test_all_48_profiled_rows_are_replayed(rows):
    assert len(rows) == 48
    assert {r["schedule"] for r in rows} == {"1f1b", "zb-h1", "zb-h2", "interleaved"}


def test_1f1b_and_zb_1p_bubble_rates_match_the_paper(rows):
    # the paper's Table 5 bubble rates are computed from the same profiled times; its values carry
    # 4 decimals, so agreement within 5e-4 (rounding) is expected; ZB-1p's searched schedule equals
    # the handcrafted ZB-H1 at these sizes.
    for r in rows:
        if r["schedule"] in ("1f1b", "zb-h1"):
            assert r["bubble_predicted"] == pytest.approx(r["bubble_measured"], abs=5e-4), r["run_id"]


def test_interleaved_bubble_rates_within_half_a_percent(rows):
    # measured |diff| <= 0.0035 (ours higher: one layer per chunk modelled as equal chunks)
    for r in rows:
        if r["schedule"] == "interleaved":
            assert abs(r["bubble_predicted"] - r["bubble_measured"]) <= 0.005, r["run_id"]


def test_flushed_zb_h2_never_beats_the_papers_zb_2p(rows):
    # ZB-2p relies on optimizer post-validation to overlap steps; one flushed step cannot
    for r in rows:
        if r["schedule"] == "zb-h2":
            assert r["bubble_predicted"] >= r["bubble_measured"], r["run_id"]


def test_throughput_within_the_unmodelled_overheads(rows):
    # the replay has no optimizer step or other per-step overheads, so it should be faster than
    # measured: 1F1B and ZB-1p by 3.7-9.1 %, interleaved 8.5-17.1 %; zb-h2 is 0.95-1.04 of ZB-2p.
    for r in rows:
        lo, hi = (0.90, 1.10) if r["schedule"] == "zb-h2" else (1.0, 1.20)
        assert lo <= r["throughput_ratio"] <= hi, (r["run_id"], r["throughput_ratio"])
