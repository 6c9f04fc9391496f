"""Megatron-Core's `--account-for-embedding-in-pipeline-split` / `--account-for-loss-in-pipeline-split`
(spec.placement.megatron_split): the rule against Megatron's own unit-test cases, its divisibility errors
through the CLI (exit 2, one line naming the flag and what to pass), and memory / estimate / sweep
following the split it gives.

Megatron-LM sources of the expected values: tests/unit_tests/transformer/test_transformer_block.py
(`TestPipelineParallelTransformerBlock.test_layer_builder`: which (L, pp, vpp, flags) build and which
raise), tests/unit_tests/transformer/test_cuda_graphs.py (first/last layer number of every virtual stage),
tests/functional_tests/.../gpt3_mcore_te_tp1_pp4_vp2_account_for_embedding_loss_in_pipeline_split
(L = 6, pp = 4, vpp = 2, both flags: stages that build no transformer layer).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from simulator.cli import main
from simulator.errors import InputError
from simulator.spec.load import load_model
from simulator.spec.placement import megatron_split, stage_layer_split, stage_placement, uneven_split
from simulator.spec.scenario import load_scenario
from simulator.sweep import SweepSpace
from simulator.spec.layout import Layout
from simulator.spec.validate import validate
from simulator.sweep.empty_reason import empty_space_reason
from simulator.sweep.enumerate import enumerate_layouts

EMB = "--account-for-embedding-in-pipeline-split"
LOSS = "--account-for-loss-in-pipeline-split"
# llama3-8b (32 layers): 33 = 3·11 splits over pp 3 with one flag; the default split of 32 over pp 3 is
# 11,11,10 (uneven_split: the last stage one layer fewer)
FLAGS_8B = ["--model", "llama3-8b", "--hardware", "dgx-h100", "--gpus", "3", "--pp", "3", "--seq", "4096",
            "--global-batch", "12"]
# llama3-70b (80 layers) on 24 GPUs, TP8 PP3: 81 = 3·27 with one flag, 82 with both
FLAGS_70B = ["--model", "llama3-70b", "--hardware", "dgx-h100", "--gpus", "24", "--tp", "8", "--pp", "3",
             "--seq", "4096", "--global-batch", "12", "--recompute", "full"]


def run(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


# ---- the rule ------------------------------------------------------------------------------------
@pytest.mark.parametrize("L, pp, vpp, emb, loss, expected", [
    # Llama 3 405B: 126 layers + embedding + loss = 128 = 16 x 8; 7 + 14 x 8 + 7 (Dubey et al. 2024 §3.3.2)
    (126, 16, 1, True, True, (7,) + (8,) * 14 + (7,)),
    # test_transformer_block.py: 63 + 1 = 64 = 4 x 16, the flagged end one fewer
    (63, 4, 1, True, False, (15, 16, 16, 16)),
    (63, 4, 1, False, True, (16, 16, 16, 15)),
    (62, 4, 1, True, True, (15, 16, 16, 15)),
    # 62 + 2 = 64 = 4 ranks x 2 virtual stages x 8: virtual stage 0 (rank 0) and 7 (rank 3) one fewer
    (62, 4, 2, True, True, (7,) + (8,) * 6 + (7,)),
    # even VPP without flags: 64 / (4 x 8) = 2
    (64, 4, 8, False, False, (2,) * 32),
])
def test_split_matches_megatrons_layer_builder(L, pp, vpp, emb, loss, expected):
    split = megatron_split(L, pp, vpp, embedding=emb, loss=loss)
    assert split == expected
    assert sum(split) == L  # Megatron's test: total layers built == num_layers


@pytest.mark.parametrize("L, pp, vpp, first, last", [
    # test_cuda_graphs.py, both flags: 1-based first/last layer number of each virtual stage in layer order
    (14, 4, 1, [1, 4, 8, 12], [3, 7, 11, 14]),
    (14, 4, 2, [1, 2, 4, 6, 8, 10, 12, 14], [1, 3, 5, 7, 9, 11, 13, 14]),
])
def test_layer_numbers_match_megatrons_offsets(L, pp, vpp, first, last):
    split = np.array(megatron_split(L, pp, vpp, embedding=True, loss=True))
    ends = np.cumsum(split)
    assert (ends - split + 1).tolist() == first  # get_transformer_layer_offset + 1
    assert ends.tolist() == last


def test_a_stage_may_build_no_transformer_layer():
    # Megatron's functional test: L = 6, pp = 4, vpp = 2, both flags: 8 / 8 = 1 per virtual stage, so the
    # first holds only the embedding and the last only the loss
    assert megatron_split(6, 4, 2, embedding=True, loss=True) == (0, 1, 1, 1, 1, 1, 1, 0)


def test_both_flags_give_the_default_uneven_split_of_llama3_405b():
    # the sweep's default (uneven_split: first and last one fewer) is what Megatron's flags give here
    assert megatron_split(126, 16, embedding=True, loss=True) == uneven_split(126, 16)


@pytest.mark.parametrize("L, pp, vpp, emb, loss, needles", [
    # test_transformer_block.py: 65 + 2 = 67 is not divisible by 4
    (65, 4, 1, True, True, [EMB, LOSS, "67", "pp(4)"]),
    # 80 + 1 = 81 over pp 4: only the even split works -> say to drop the flag
    (80, 4, 1, True, False, [EMB, "81", "drop", "20 per stage"]),
    # 126 + 1 = 127 over pp 16: both flags work -> say to pass them
    (126, 16, 1, True, False, [EMB, "127", f"pass only {EMB} and {LOSS}"]),
    # 62 + 2 = 64 = 16 per rank over pp 4, not divisible by vpp 3 (Megatron's second check)
    (62, 4, 3, True, True, ["16 per pipeline rank", "vpp(3)", "must divide 64"]),
])
def test_divisibility_error_names_the_flag_and_what_to_pass(L, pp, vpp, emb, loss, needles):
    with pytest.raises(InputError) as exc:
        megatron_split(L, pp, vpp, embedding=emb, loss=loss)
    msg = str(exc.value)
    assert "\n" not in msg
    for n in needles:
        assert n in msg, msg


# ---- placement -------------------------------------------------------------------------------------
def test_per_virtual_stage_split_puts_the_missing_layer_on_rank_0s_first_chunk():
    model = load_model("llama3-70b")  # 80 layers; 81 = 3 ranks x 3 chunks x 9
    split = megatron_split(80, 3, 3, embedding=True)
    assert split == (8,) + (9,) * 8
    dense, moe = stage_layer_split(model, pp=3, vpp=3, schedule="interleaved", layers_per_stage=split)
    assert dense.tolist() == list(split) and not moe.any()
    pl = stage_placement(model, pp=3, vpp=3, schedule="interleaved", layers_per_stage=split)
    assert pl.layers.tolist() == [26, 27, 27]  # rank 0: 8 + 9 + 9
    assert pl.embedding.tolist() == [1, 0, 0] and pl.head.tolist() == [0, 0, 1]


# ---- scenario keys --------------------------------------------------------------------------------
def test_layout_keys_set_the_split(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text('[model]\npreset = "llama3-8b"\n[hardware]\npreset = "dgx-h100"\nnum_gpus = 3\n'
                 '[training]\nseq_length = 4096\nglobal_batch_size = 12\n'
                 '[layout]\npp = 3\naccount_for_loss_in_pipeline_split = true\n')
    sc = load_scenario(str(p))
    assert sc.layout.layers_per_stage == (11, 11, 10)  # 33 / 3 = 11, the last one fewer
    assert sc.layout.accounted_in_split == ("loss",)
    sc = load_scenario(str(p), account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=False)
    assert sc.layout.layers_per_stage == (10, 11, 11)


def test_a_layout_with_the_flag_carries_megatrons_split():
    sc = load_scenario(None, model="llama3-8b", hardware="dgx-h100", num_gpus=3, seq_length=4096,
                       global_batch_size=12, pp=3, account_for_loss_in_pipeline_split=True)
    validate(sc.model, sc.training, sc.layout)
    for split in (None, (11, 11, 10)[::-1]):  # none (an even split would be used), or another one
        lay = Layout(num_gpus=3, pp=3, account_for_loss_in_pipeline_split=True, layers_per_stage=split)
        with pytest.raises(InputError, match="account_for_loss_in_pipeline_split"):
            validate(sc.model, sc.training, lay)


# ---- CLI: errors ------------------------------------------------------------------------------------
BAD = {
    "one flag, pp does not divide L + 1": (["memory", *FLAGS_70B, "--pp", "4", "--gpus", "32", EMB], [EMB, "81"]),
    "both flags, pp does not divide L + 2": (["estimate", *FLAGS_70B, EMB, LOSS], [EMB, LOSS, "82", "pp(3)"]),
    "vpp does not divide the layers per rank": (["memory", *FLAGS_70B, "--pp", "2", "--gpus", "16", "--schedule",
                                                 "interleaved", "--vpp", "3", EMB, LOSS], ["vpp(3)", EMB]),
    "a split given too": (["memory", *FLAGS_8B, EMB, "--layers-per-stage", "10,11,11"], ["--layers-per-stage", EMB]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_split_is_one_line_naming_the_flag_with_exit_2(case, capsys):
    argv, needles = BAD[case]
    code, out, err = run(argv, capsys)
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and out == "", err
    for n in needles:
        assert n in err, err


def test_bad_scenario_key_value_is_one_line(tmp_path, capsys):
    p = tmp_path / "s.toml"
    p.write_text('[model]\npreset = "llama3-8b"\n[hardware]\npreset = "dgx-h100"\nnum_gpus = 3\n'
                 '[training]\nseq_length = 4096\nglobal_batch_size = 12\n'
                 '[layout]\npp = 3\naccount_for_embedding_in_pipeline_split = "yes"\n')
    code, _, err = run(["memory", str(p)], capsys)
    assert code == 2 and err.count("\n") == 1 and "account_for_embedding_in_pipeline_split" in err, err


# ---- CLI: memory and estimate follow the split ---------------------------------------------------
def _per_stage(argv, capsys):
    code, out, err = run(["memory", *argv, "--format", "json"], capsys)
    assert code == 0, err
    return json.loads(out)["memory"]["per_stage"]


def test_memory_first_stage_holds_one_layer_fewer_with_the_embedding_flag(capsys):
    default = _per_stage(FLAGS_8B, capsys)
    accounted = _per_stage([*FLAGS_8B, EMB], capsys)
    assert [s["layers"] for s in default] == [11, 11, 10]  # uneven_split(32, 3)
    assert [s["layers"] for s in accounted] == [10, 11, 11]  # (32 + 1) / 3 = 11, the first one fewer
    # one transformer layer's activations fewer on stage 0, one more on the last stage
    assert accounted[0]["activations_bytes"] < default[0]["activations_bytes"]
    assert accounted[2]["activations_bytes"] > default[2]["activations_bytes"]
    assert accounted[1]["activations_bytes"] == default[1]["activations_bytes"]


def test_memory_table_names_the_split(capsys):
    code, out, err = run(["memory", *FLAGS_8B, EMB], capsys)
    assert code == 0, err
    assert "layers per stage 10,11,11 (Megatron split: embedding counted as a layer)" in out.splitlines()[0]


def test_estimate_says_which_split_it_used_with_interleaving(capsys):
    argv = [*FLAGS_70B, "--schedule", "interleaved", "--vpp", "3", EMB]
    code, out, err = run(["estimate", *argv], capsys)
    assert code == 0, err
    split = ",".join(map(str, (8,) + (9,) * 8))  # 81 = 3 ranks x 3 chunks x 9, virtual stage 0 one fewer
    assert f"layers per virtual stage {split} (Megatron split: embedding counted as a layer)" in out
    code, out, err = run(["estimate", *argv, "--format", "json"], capsys)
    lay = json.loads(out)["layout"]
    assert lay["layers_per_stage"] == [8] + [9] * 8
    assert lay["account_for_embedding_in_pipeline_split"] and not lay["account_for_loss_in_pipeline_split"]
    stages = _per_stage(argv, capsys)
    assert [s["layers"] for s in stages] == [26, 27, 27]


def test_standalone_embedding_and_loss_stages_are_evaluated(tmp_path, capsys):
    # Megatron's functional test layout (L = 6, pp = 4, vpp = 2, both flags) on a small inline model
    p = tmp_path / "tiny.toml"
    p.write_text('[model]\nhidden_size = 512\nnum_hidden_layers = 6\nnum_attention_heads = 8\n'
                 'intermediate_size = 2048\nvocab_size = 32000\nmodel_type = "llama"\n'
                 '[hardware]\npreset = "dgx-h100"\nnum_gpus = 8\n'
                 '[training]\nseq_length = 1024\nglobal_batch_size = 16\n'
                 '[layout]\npp = 4\nvpp = 2\nschedule = "interleaved"\n'
                 'account_for_embedding_in_pipeline_split = true\naccount_for_loss_in_pipeline_split = true\n')
    assert [s["layers"] for s in _per_stage([str(p)], capsys)] == [1, 2, 2, 1]
    code, out, err = run(["estimate", str(p), "--format", "json"], capsys)
    assert code == 0, err
    d = json.loads(out)
    assert d["layout"]["layers_per_stage"] == [0, 1, 1, 1, 1, 1, 1, 0]
    assert d["time"]["step_s"] > 0 and d["feasible"]


# ---- sweep ----------------------------------------------------------------------------------------
def test_sweep_keeps_the_layouts_megatrons_check_allows_with_their_split():
    model = load_model("llama3-8b")  # 32 layers + 2 = 34 = 2 x 17
    training = load_scenario(None, model="llama3-8b", hardware="dgx-h100", num_gpus=8, seq_length=4096,
                     global_batch_size=16, require_layout=False).training
    space = SweepSpace.from_table({"account_for_embedding_in_pipeline_split": True,
                                   "account_for_loss_in_pipeline_split": True, "tp": [1], "zero": [0],
                                   "recompute": ["full"], "micro_batch_size": [1]})
    c = enumerate_layouts(model, training, 8, space)
    assert len(c) and set(c["pp"]) == {1, 2}  # pp 4 and 8 do not divide 34
    for _, r in c.iterrows():
        chunks = r["vpp"] if r["schedule"] == "interleaved" else 1
        assert 34 % (r["pp"] * chunks) == 0
        expected = "" if r["pp"] == 1 else ",".join(map(str, megatron_split(32, r["pp"], chunks, embedding=True,
                                                                             loss=True)))
        assert r["layers_per_stage"] == expected
    assert "16,16" in set(c["layers_per_stage"])  # 1f1b pp 2: 17 - 1 each


def test_sweep_flag_reaches_the_space(capsys):
    argv = ["sweep", "--model", "llama3-8b", "--hardware", "dgx-h100", "--gpus", "8", "--seq", "4096",
            "--global-batch", "16", "--tp", "1", "--pp", "2", "--zero", "0", "--recompute", "full",
            "--micro-batch", "1", "--schedule", "1f1b", "--sequence-parallel", "false", EMB, LOSS, "--format", "json"]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    rows = json.loads(out)
    assert rows and {r["layers_per_stage"] for r in rows} == {"16,16"}  # (32 + 2) / 2 = 17, one fewer at each end


def test_sweep_with_no_layout_left_names_megatrons_check():
    model = load_model("llama3-8b")  # 32 + 1 = 33: neither pp 2 nor pp 4 (times any vpp) divides it
    training = load_scenario(None, model="llama3-8b", hardware="dgx-h100", num_gpus=8, seq_length=4096,
                             global_batch_size=16, require_layout=False).training
    space = SweepSpace(pp=(2, 4), account_for_embedding_in_pipeline_split=True)
    assert len(enumerate_layouts(model, training, 8, space)) == 0
    assert "divides 33 (Megatron's split" in empty_space_reason(model, training, 8, space)
