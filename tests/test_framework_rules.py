"""What each stack's framework runs (spec/framework.py, the stacks' [runs] tables): every rule refuses
what its source says and nothing else, the sweep leaves those layouts out and says how many and why,
estimate/memory refuse them in one line, and equally fast sweep rows rank by memory headroom."""
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_sweep import DENSE, MOE, FakeHardware, FakeScenario, fake_evaluate_layouts  # noqa: E402

from simulator.cli import main  # noqa: E402
from simulator.errors import InputError  # noqa: E402
from simulator.spec.framework import first_refusal, layout_verdict, refusal, rules_from_table  # noqa: E402
from simulator.spec.stack import load_stack, stack_names  # noqa: E402
from simulator.spec.training import Training  # noqa: E402
from simulator.sweep import SweepSpace, enumerate_layouts, rank_results, run_sweep  # noqa: E402
from simulator.sweep.supported import RULE_COLUMNS, leave_out_unsupported  # noqa: E402

ROW = dict(tp=8, cp=1, pp=1, dp=8, ep=1, vpp=1, micro_batch_size=1, num_microbatches=8, zero=1,
           recompute="none", sequence_parallel=False, schedule="1f1b")


def why(stack: str, **changes) -> str:
    """The stack's reason for refusing ROW with `changes` ('' if its framework runs it)."""
    return refusal(load_stack(stack), **{**ROW, **changes})


def test_every_rule_of_every_preset_names_its_source():
    for name in stack_names():
        st = load_stack(name)
        src = dict(st.source)
        assert st.runs.refusals, name  # every preset says what its framework runs
        for key in st.runs.names + tuple(k for k in st.runs.table if k != "refuse"):
            assert len(src.get(key, "")) > 20, (name, key)


def test_deepspeed_refuses_zero_2_and_3_with_a_pipeline():
    # deepspeed/runtime/pipe/engine.py: assert zero stage < 2 ('ZeRO-2 and ZeRO-3 are incompatible ...')
    assert "pipeline engine asserts ZeRO stage < 2" in why("deepspeed", zero=2, pp=2, dp=4)
    assert why("deepspeed", zero=3, pp=4, dp=2)
    assert why("deepspeed", zero=1, pp=2, dp=4) == "" and why("deepspeed", zero=3, pp=1) == ""
    assert why("deepspeed", zero=2, pp=2, schedule="zb-h1") and why("deepspeed", zero=1, pp=2, schedule="zb-h1") == ""
    assert "schedule interleaved" in why("deepspeed", pp=2, vpp=2, schedule="interleaved")
    # ZeRO-3 refuses MoE layers; DeepSpeed-Ulysses is its context parallelism, not ring attention
    assert "MoE" in why("deepspeed", zero=3, moe=True) and why("deepspeed", zero=3, moe=False) == ""
    assert "ring" in why("deepspeed", cp=2, dp=4) and why("deepspeed", cp=2, dp=4, cp_algorithm="ulysses") == ""
    assert why("deepspeed", cp=2, dp=4, cp_algorithm="ulysses", sequence_parallel=True)
    assert why("deepspeed", pp=2, schedule="zb-h1", sequence_parallel=True)


def test_torchtitan_runs_fsdp_with_a_pipeline_and_its_torch_schedules():
    assert why("torchtitan", zero=3, pp=4, dp=2) == ""
    for sched, vpp in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb-v", 1), ("dualpipev", 1)):
        assert why("torchtitan", zero=3, pp=4, dp=2, schedule=sched, vpp=vpp) == "", sched
    for sched in ("zb-h1", "zb-h2", "dualpipe", "pipedream"):  # one-stage InterleavedZeroBubble: refused
        want = f"schedule {sched} (torchtitan runs schedules gpipe/1f1b/interleaved/zb-v/dualpipev)"
        assert why("torchtitan", zero=3, pp=4, dp=2, schedule=sched) == want
    assert "zero 1" in why("torchtitan", zero=1) and "zero 2" in why("torchtitan", zero=2)  # FSDP2: all or nothing
    assert why("torchtitan", zero=0, tp=8, pp=2) == ""  # replicate-only FSDP2 is DDP, with TP and PP
    assert "CP ranks" in why("torchtitan", zero=0, cp=2, dp=4) and why("torchtitan", zero=3, cp=2, dp=4) == ""


def test_megatron_rules():
    # Megatron-FSDP (ZeRO-2/3) is documented and tested without PP; the distributed optimizer is ZeRO-1
    assert "Megatron-FSDP" in why("megatron", zero=3, pp=2, dp=4) and why("megatron", zero=2, pp=2, dp=4)
    assert why("megatron", zero=3, pp=1) == "" and why("megatron", zero=1, pp=4, dp=2) == ""
    # interleaved: microbatch groups of pp (microbatch_group_size_per_vp_stage = pp): m % pp == 0
    inter = dict(pp=4, dp=2, vpp=2, schedule="interleaved")
    assert "not a multiple of pp" in why("megatron", num_microbatches=6, **inter)
    assert why("megatron", num_microbatches=8, **inter) == ""
    assert why("megatron", pp=4, dp=2, schedule="dualpipe") and why("megatron", pp=4, dp=2, schedule="zb-h1")
    assert "sequence parallelism" in why("megatron", ep=8, tp=2, dp=4)
    assert why("megatron", ep=8, tp=2, dp=4, sequence_parallel=True) == ""
    assert "dp mode async" in why("megatron", dp_mode="async")


def test_plain_fsdp_and_hugging_face_rules():
    assert "tensor parallelism" in why("fsdp", tp=2) and "pipeline" in why("fsdp", tp=1, pp=2)
    assert "zero 1" in why("fsdp", tp=1) and why("fsdp", tp=1, zero=2) == "" and why("fsdp", tp=1, zero=3) == ""
    assert "recompute selective" in why("fsdp", tp=1, zero=3, recompute="selective")
    assert why("hf", tp=1, pp=2) and why("hf", tp=1, zero=0, dp_mode="dataparallel") == ""
    assert "plain DDP" in why("hf", tp=2, zero=0, dp=4) and why("hf", tp=2, zero=3, dp=4) == ""
    assert why("hf", tp=2, zero=0, dp=1) == ""  # TP alone: no DDP replication to compose with
    assert "FSDP2" in why("hf", tp=1, cp=2, dp=4, zero=1) and why("hf", tp=1, cp=2, dp=4, zero=3) == ""
    assert why("hf", tp=2, zero=3, sequence_parallel=True) and why("hf", tp=1, zero=3, sequence_parallel=True) == ""


def test_vectorised_refusal_equals_row_by_row():
    tr = Training(seq_length=4096, global_batch_size=32)
    cands = enumerate_layouts(MOE, tr, 16, SweepSpace(schedule=("1f1b", "interleaved", "zb-h1", "zb-v")),
                              hardware=FakeHardware())
    cols = {c: cands[c].to_numpy() for c in RULE_COLUMNS}
    for name in stack_names():
        st = load_stack(name)
        got = refusal(st, **cols, moe=True)
        rows = [refusal(st, **{c: v[i] for c, v in cols.items()}, moe=True) for i in range(0, len(cands), 7)]
        assert list(got[::7]) == rows and (got != "").any() and (got == "").any(), name


def test_rule_tables_are_checked_and_conditions_parsed():
    rules = rules_from_table({"refuse": [{"name": "odd", "when": {"num_microbatches": "% pp != 0", "pp": "> 1"},
                                          "reason": "m not a multiple of pp"}]}, framework="x", where="t")
    idx = first_refusal(rules, pp=np.array([1, 4, 4]), num_microbatches=np.array([3, 6, 8]))
    assert idx.tolist() == [-1, 0, -1]
    for bad, msg in (({"zero": [4]}, "not one of 0, 1, 2, 3"), ({"schedules": ["zigzag"]}, "zigzag"),
                     ({"tp": "yes"}, "true or false"), ({"zeros": [0]}, "unknown key 'zeros'"),
                     ({"refuse": [{"name": "a", "when": {"tpp": 2}, "reason": "r"}]}, "unknown column 'tpp'"),
                     ({"refuse": [{"name": "a", "when": {"tp": "> two"}, "reason": "r"}]}, "'two'"),
                     ({"refuse": [{"name": "a", "when": {"tp": 2}}]}, "name, when and reason"),
                     ({"refuse": [{"name": "a", "when": {"moe": "> 1"}, "reason": "r"}]}, "true or false"),
                     ({"refuse": [{"name": "a", "when": {"schedule": 3}, "reason": "r"}]}, "must be str")):
        with pytest.raises(InputError, match=msg):
            rules_from_table(bad, framework="x", where="t")


def test_a_scenario_widens_a_presets_rules_and_keeps_the_others():
    from simulator.spec.scenario import load_scenario

    sc = load_scenario("deepseek-v3-2048xh800")  # DualPipe: DeepSeek's framework, not Megatron-LM's
    st = sc.training.stack
    assert st.name == "megatron" and layout_verdict(st, sc.layout, sc.model, sc.training).rule == ""
    assert refusal(st, **{**ROW, "zero": 3, "pp": 2}) != ""  # the preset's other rules still hold
    assert refusal(load_stack("megatron"), **{**ROW, "pp": 16, "schedule": "dualpipe"}) != ""
    # an override replaces the keys it gives; the preset's refusals (list conditions too) stay
    hf = load_stack("hf", runs={"pp": True, "schedules": ["1f1b"]})
    assert refusal(hf, **{**ROW, "tp": 1, "pp": 2, "zero": 3}) == ""
    assert "FSDP2" in refusal(hf, **{**ROW, "tp": 1, "cp": 2, "zero": 1})
    assert "schedule gpipe" in refusal(hf, **{**ROW, "tp": 1, "pp": 2, "zero": 3, "schedule": "gpipe"})


def _scenario(B=32):
    return FakeScenario(model=DENSE, training=Training(seq_length=4096, global_batch_size=B,
                                                       stack=load_stack("deepspeed")),
                        hardware=FakeHardware(hbm_bytes=20e9), num_gpus=16, sweep={})


def test_the_sweep_leaves_out_what_the_framework_cannot_run_and_counts_it():
    space = SweepSpace(schedule=("1f1b", "interleaved", "zb-h1"))
    every = run_sweep(_scenario(), space, evaluator=fake_evaluate_layouts, allow_unsupported=True)
    kept = run_sweep(_scenario(), space, evaluator=fake_evaluate_layouts)
    st = load_stack("deepspeed")
    reasons = refusal(st, **{c: every[c].to_numpy() for c in RULE_COLUMNS}, moe=False)
    assert every.attrs["left_out"] == {} and kept.attrs["stack"] == "deepspeed"
    assert kept.attrs["left_out"] == pd.Series(reasons[reasons != ""]).value_counts().to_dict()
    assert len(kept) == (reasons == "").sum() and not ((kept.zero >= 2) & (kept.pp > 1)).any()
    assert set(kept.schedule) == {"1f1b", "zb-h1"}
    keys = ["tp", "cp", "pp", "dp", "vpp", "micro_batch_size", "zero", "recompute", "sequence_parallel", "schedule"]
    ref = every[reasons == ""].sort_values(keys).reset_index(drop=True)
    pd.testing.assert_frame_equal(kept.sort_values(keys).reset_index(drop=True).drop(columns="rank"),
                                  ref.drop(columns="rank"))


def _run(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


FLAGS = ["--model", "llama3-8b", "--hardware", "dgx-h100", "--gpus", "16", "--seq", "4096", "--global-batch", "64"]


def test_sweep_says_how_many_layouts_it_left_out_and_why(capsys, monkeypatch):
    import simulator.sweep.run as sweep_mod

    monkeypatch.setattr(sweep_mod, "_default_evaluator", lambda: fake_evaluate_layouts)
    code, text, err = _run(["sweep", *FLAGS, "--stack", "deepspeed", "--top", "2"], capsys)
    assert code == 0, err
    line = next(ln for ln in text.splitlines() if "framework cannot run" in ln)
    assert line.split()[1:6] == ["layouts", "the", "deepspeed", "framework", "cannot"]
    assert "ZeRO-2/3 with pipeline parallelism (DeepSpeed's pipeline engine asserts ZeRO stage < 2) (" in line
    code, text, err = _run(["sweep", *FLAGS, "--stack", "deepspeed", "--format", "json", "--top", "2"], capsys)
    assert code == 0 and len(json.loads(text)) == 2 and "framework cannot run" in err  # the count on stderr
    code, text, err = _run(["sweep", *FLAGS, "--stack", "deepspeed", "--allow-unsupported", "--top", "2"], capsys)
    assert code == 0 and "cannot run" not in text
    # a space the framework runs none of names the rule that emptied it
    code, text, err = _run(["sweep", *FLAGS, "--stack", "fsdp", "--tp", "2"], capsys)
    assert code == 0 and "No layout in the space: the fsdp framework runs none of its" in text
    assert "tensor parallelism (fsdp runs none) (" in text


@pytest.mark.parametrize("cmd", ["estimate", "memory"])
def test_estimate_and_memory_refuse_an_unsupported_layout_in_one_line(cmd, capsys):
    args = [cmd, "scenarios/llama3-70b-64xh100.toml", "--zero", "2", "--stack", "deepspeed", "--format", "json"]
    code, out, err = _run(args, capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "the deepspeed stack cannot run TP8-CP1-PP2-DP4: ZeRO-2/3 with pipeline parallelism" in err
    assert "'zero_with_pp'" in err and "--allow-unsupported" in err
    code, out, err = _run(args + ["--allow-unsupported"], capsys)
    assert code == 0 and json.loads(out)["layout"]["zero"] == 2
    code, out, err = _run(args[:4] + ["--format", "json"], capsys)  # the default stack names itself as such
    assert code == 2 and "the megatron stack (the default; --stack names another)" in err


def test_estimate_of_inference_ignores_the_training_rules(capsys):
    code, out, err = _run(["memory", "scenarios/llama3-70b-64xh100.toml", "--zero", "2", "--stack", "deepspeed",
                           "--inference"], capsys)
    assert code == 0, err


def test_equally_fast_layouts_rank_by_memory_headroom():
    # two feasible rows with the same tokens/s: the one with the lower peak (more headroom) first, although
    # its label sorts later; layouts that do not fit: closest to fitting first, even when timed
    df = pd.DataFrame({"label": ["A", "B", "C", "D", "E"], "feasible": [True, True, True, False, False],
                       "tokens_per_s": [100.0, 100.0, 120.0, 500.0, 50.0],
                       "peak_bytes": [70e9, 60e9, 75e9, 90e9, 85e9]})
    assert list(rank_results(df)["label"]) == ["C", "B", "A", "E", "D"]


def test_the_70b_sweep_winner_is_a_layout_megatron_runs():
    """The issue: the 512-GPU Llama-3-70B sweep's winner was ZeRO-2 with PP, which no mainstream framework
    runs; with the default stack's rules the winner is one Megatron-LM runs."""
    from simulator.spec.scenario import load_scenario

    sc = load_scenario("llama3-70b-512xh100", require_layout=False)
    df = run_sweep(sc, SweepSpace.from_table(sc.sweep).replace(micro_batch_size=(1,)))
    w = df.iloc[0]
    assert w["feasible"] and not (w["zero"] >= 2 and w["pp"] > 1)
    assert refusal(load_stack("megatron"), **{c: w[c] for c in RULE_COLUMNS}) == ""
    assert sum(df.attrs["left_out"].values()) > 0
    kept, left = leave_out_unsupported(df[list(RULE_COLUMNS)], load_stack("megatron"), sc.model)
    assert len(kept) == len(df) and left == {}
