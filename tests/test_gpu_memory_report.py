"""parasim against the step's memory phases measured on one H100 rank (validation/gpu_memory_report.py): every
measured case is mapped and predicted, the cases parasim claims to model are within the stated tolerance, each
rule's effect (a difference between two cases of one configuration) matches its measurement, and the section
renders."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "validation"))

import gpu_memory_report as R  # noqa: E402


@pytest.fixture(scope="module")
def res():
    return R.compared()


@pytest.fixture(scope="module")
def checks(res):
    return R.rule_checks(res)


def test_every_measured_case_is_mapped_and_predicted(res):
    import gpu_memory_phases

    assert len(res) == 2 * len(gpu_memory_phases.CASES)  # both files, every case measured ok
    for f in R.FILES:
        cases = [(r["wrap"], r["optimizer_impl"], r["grad_buffer"]) for r in res if r["file"] == f]
        assert cases == list(gpu_memory_phases.CASES)
    assert {r["wrap"] for r in res} == set(R.CASE_MAP)
    for r in res:
        model, training, layout = R.case_specs(r)
        assert 2 * model.total_params() == r["param_bytes"]  # the harness's model, in bf16
        assert training.stack.optimizer_impl == r["optimizer_impl"]
        assert training.stack.grad_buffer == r["grad_buffer"]
        assert layout.num_gpus == 1 and layout.zero == (3 if r["wrap"] == "fsdp2" else 0)
        assert training.stack.ddp_bucket_view == (r["wrap"] != "ddp")
        assert r["pred_allocated"] > 0.0


def test_the_cases_parasim_claims_are_within_the_tolerance(res):
    claimed = [r for r in res if r["claimed"]]
    assert len(claimed) == 12
    for r in claimed:
        assert abs(r["error"]) <= R.CLAIMED_TOLERANCE, (r["run_id"], r["wrap"], r["error"])
    # FSDP2 on one rank is reported, not claimed: far outside it (finding 6)
    assert all(abs(r["error"]) > R.CLAIMED_TOLERANCE for r in res if not r["claimed"])


def test_the_allocator_basis_is_compare_train_steps_own(res):
    # memory_counter_bytes('torch-allocated') equals compare_train_steps' peak - overhead wherever no gradient
    # counts differently on the two bases (all but FSDP2 with gradients set to None)
    for r in res:
        w = R.predicted(r)["worst"]
        if not (r["wrap"] == "fsdp2" and r["grad_buffer"] == "set-to-none"):
            assert r["pred_allocated"] == pytest.approx(float(w.peak_bytes - w.overhead_bytes), rel=1e-12)


def test_foreach_step_buffer_is_one_second_moment_copy(checks):
    b = checks["foreach", R.FILES[1]]
    assert b["step_phase"] and b["kept_vs_none"] == 0  # the step phase holds the peak
    assert b["above_states"] == pytest.approx(b["buffer"], rel=0.03)  # one bf16 moment (+ 65 MiB unexplained)
    assert b["above_states"] - b["buffer"] < 128 * R.MIB
    a = checks["foreach", R.FILES[0]]  # the activation phase holds both peaks there
    assert a["predicted"] == 0.0 and abs(a["measured"]) < 16 * R.MIB


def test_set_to_none_gradients_are_absent_at_the_activation_peak(checks):
    for impl in ("foreach", "fused"):
        a = checks[f"set-to-none {impl}", R.FILES[0]]
        assert a["predicted"] == pytest.approx(a["grad"], rel=1e-6)
        assert a["measured"] == pytest.approx(a["predicted"], rel=0.01)
    b = checks["set-to-none fused", R.FILES[1]]  # the step phase takes over: less than the gradients drop
    assert b["measured"] == pytest.approx(b["predicted"], rel=0.05) and b["predicted"] < b["grad"]
    fb = checks["set-to-none foreach", R.FILES[1]]  # its step phase holds every gradient
    assert fb["measured"] == 0 and fb["predicted"] == 0.0


def test_ddp_on_one_rank_keeps_its_bucket_copy_and_parasim_now_says_so(checks, res):
    for f in R.FILES:
        d = checks["ddp", f]
        assert d["measured"] == pytest.approx(d["grad"], rel=0.001)
        assert d["predicted"] == pytest.approx(d["grad"], rel=1e-6) and d["before"] == 0.0
    for r in res:
        if r["wrap"] == "ddp":
            assert abs(r["error"]) < abs(r["error_before"]) and abs(r["error_before"]) > 0.1


def test_fsdp2_set_to_none_leaves_the_allocated_peak_but_mostly_not_the_reserved_one(checks):
    a = checks["fsdp2", R.FILES[0]]
    assert a["measured"] == pytest.approx(a["grad"], rel=0.01)  # the allocated peak drops by the gradients
    assert a["predicted"] == pytest.approx(a["measured"], rel=0.01)
    for f in R.FILES:
        c = checks["fsdp2", f]
        assert c["predicted_reserved"] == pytest.approx(0.0, abs=1.0)  # parasim's peak keeps them
        assert 0 < c["measured_reserved"] < 0.3 * c["grad"]  # the device keeps 76-85 % of them reserved
        assert c["measured_reserved"] < c["measured"]


def test_section_renders_a_row_per_case_and_the_findings():
    lines = R.section()
    assert lines[0].startswith("## Memory phases: ")
    rows = [x for x in lines if x.startswith("| L")]
    assert len(rows) == 16 and all(x.count("|") == 11 for x in rows)
    text = "\n".join(lines)
    for word in ("confirmed", "refuted", "not claimed", "ddp_one_rank", 'counter="allocated"'):
        assert word in text
    assert sum(x.startswith(f"{i}. ") for i in range(1, 8) for x in lines) == 7
    assert "nan" not in text and "inf " not in text
