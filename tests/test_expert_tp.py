"""Expert tensor parallelism (Layout.etp; Megatron-Core --expert-tensor-parallel-size): the expert layers regroup
a pipeline stage's tp·cp·dp ranks as etp × ep × expert-dp. Checked against closed forms: executed FLOPs do not
depend on how experts are split, every expert is held once per expert grid, Megatron's grid divisibility, and
the layouts NVIDIA's published DeepSeek-V3 recipe runs (dgxc-benchmarking 6be5ea0: TP 2, EP 64, ETP 1)."""
import json
import subprocess
import sys

import pytest

from simulator.cost import flops as F
from simulator.errors import InputError
from simulator.spec.layout import Layout
from simulator.spec.load import load_model
from simulator.spec.placement import params_per_rank, stage_param_split, stage_placement
from simulator.spec.rules import shard_degrees
from simulator.spec.training import Training
from simulator.spec.validate import validate

DSV3 = load_model("deepseek-v3")
TR = Training(seq_length=4096, global_batch_size=8192)


def _ops(**kw):
    return {o.name: o for o in F.moe_ops(DSV3, seq_length=4096, micro_batch_size=1, sequence_parallel=True, **kw)}


@pytest.mark.parametrize("tp,ep,etp", [(2, 64, 1), (2, 32, 2), (4, 8, 1), (4, 8, 4), (8, 16, 2)])
def test_expert_flops_per_rank_do_not_depend_on_how_the_experts_are_split(tp, ep, etp):
    # closed form, per rank and MoE layer forward: 2·k·T·c_f·h·f_e / t (T = b·s tokens; the t ranks of a TP group
    # together route all T tokens once), whatever ep and etp are
    ops = _ops(tp=tp, ep=ep, etp=etp)
    k, h, fe = DSV3.experts_per_token, DSV3.hidden_size, DSV3.moe_ffn_hidden_size
    want = 2 * k * 4096 * DSV3.glu_matrices * h * fe / tp
    got = sum(float(ops[n].forward_flops) for n in ("expert_up", "expert_down"))
    assert got == pytest.approx(want, rel=1e-12)


def test_expert_gemm_shapes_follow_the_expert_grid():
    # etp = 1 with tp = 2: each expert is whole (n = f_e), and it sees the tokens of half as many TP shards
    whole, split = _ops(tp=2, ep=64, etp=1)["expert_up"], _ops(tp=2, ep=64, etp=2)["expert_up"]
    assert float(whole.n) == pytest.approx(2 * float(split.n))
    assert float(whole.m) == pytest.approx(float(split.m) / 2)


def test_every_expert_is_held_once_per_expert_grid():
    pl = stage_placement(DSV3, pp=1)
    split = stage_param_split(DSV3, pl)
    for tp, ep, etp in ((2, 64, 1), (4, 8, 4), (8, 4, 2)):
        _, expert = params_per_rank(split, tp=tp, ep=ep, etp=etp)
        # the etp·ep ranks of one grid hold all routed expert weights between them, each shard once
        assert float(expert.sum() * ep * etp) == pytest.approx(float(split["exp"].sum()), rel=1e-12)


def test_expert_states_shard_over_the_expert_data_parallel_group():
    # NVIDIA's DeepSeek-V3 recipe on 1024 H100s: TP 2, PP 16, DP 32, EP 64, ETP 1: expert-DP = 2·32/64 = 1
    d, d_e = shard_degrees(dp=32, cp=1, ep=64, tp=2, etp=1)
    assert float(d) == 32 and float(d_e) == 1
    # etp = tp is the old rule, dp·cp/ep
    assert float(shard_degrees(dp=32, cp=2, ep=8, tp=4, etp=4)[1]) == 8
    assert float(shard_degrees(dp=32, cp=2, ep=8, tp=4, etp=1)[1]) == 32


def test_the_expert_grid_must_divide_the_stage_ranks():
    Layout(num_gpus=1024, tp=2, pp=16, ep=64, etp=1, sequence_parallel=True)  # 2·32 = 64 = 1·64·1
    grid = r"etp\(4\) \* ep\(64\) = 256 must divide tp\(2\) \* cp\(1\) \* dp\(32\)"
    with pytest.raises(InputError, match=grid):
        Layout(num_gpus=1024, tp=2, pp=16, ep=64, etp=4)
    with pytest.raises(InputError, match=r"ep\(64\) must divide dp\(32\) \* cp\(1\)"):
        Layout(num_gpus=1024, tp=2, pp=16, ep=64)  # etp = tp: Megatron's EP-within-DP rule
    whole = Layout(num_gpus=1024, tp=2, pp=16, ep=64, etp=1, sequence_parallel=True)
    assert whole.label == "TP2-CP1-PP16-DP32-EP64-ETP1"
    assert Layout(num_gpus=64, tp=2, ep=8).label == "TP2-CP1-PP1-DP32-EP8"  # etp = tp: not named


def test_expert_tp_needs_experts_and_sequence_parallelism():
    lay = Layout(num_gpus=16, tp=2, ep=8, etp=1, sequence_parallel=True)
    validate(DSV3, TR, lay)
    with pytest.raises(InputError, match="needs sequence_parallel"):
        validate(DSV3, TR, Layout(num_gpus=16, tp=2, ep=8, etp=1))
    with pytest.raises(InputError, match="dense"):
        validate(load_model("llama3-8b"), Training(seq_length=4096, global_batch_size=64),
                 Layout(num_gpus=8, tp=2, etp=1, sequence_parallel=True))


def _estimate(*extra):
    args = [sys.executable, "-c", "from simulator.cli import main; main()", "estimate", "--model", "qwen3-30b-a3b",
            "--hardware", "dgx-h100", "--gpus", "16", "--tp", "2", "--ep", "8", "--seq", "4096", "--global-batch", "64",
            "--sequence-parallel", "--format", "json", *extra]
    r = subprocess.run(args, capture_output=True, text=True)
    return r


def test_estimate_with_whole_experts_moves_the_ffn_collectives_off_the_tp_group():
    split, whole = (json.loads(_estimate(*x).stdout) for x in ((), ("--etp", "1")))
    assert whole["layout"]["etp"] == 1 and split["layout"]["etp"] == 2
    assert "ETP1" in whole["layout"]["label"]
    # with etp = 1 an MoE layer keeps only the attention's pair of TP collectives: less TP traffic
    assert whole["time"]["exposed_comm_by_group_s"]["tp"] < split["time"]["exposed_comm_by_group_s"]["tp"]
    # whole experts: twice the expert weights per rank (E/ep experts, unsplit), the same FLOPs
    assert whole["memory"]["params_bytes"] > split["memory"]["params_bytes"]
    assert whole["throughput"]["model_tflops_per_gpu"] * whole["time"]["step_s"] == pytest.approx(
        split["throughput"]["model_tflops_per_gpu"] * split["time"]["step_s"], rel=1e-9)


def test_bad_expert_tp_exits_2_with_one_line():
    r = _estimate("--etp", "3")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "etp" in r.stderr and "3" in r.stderr


def test_megatron_import_and_emit_carry_the_expert_tp(tmp_path):
    # NVIDIA's DeepSeek-V3 recipe on 1024 H100s: TP 2, PP 16, EP 64, ETP 1 (tests/helpers/megatron_dsv3.py)
    from helpers.megatron_dsv3 import import_then_emit

    sc, emitted = import_then_emit(tmp_path)
    assert (sc.layout.tp, sc.layout.ep, sc.layout.etp, sc.layout.dp) == (2, 64, 1, 32)
    assert "--expert-tensor-parallel-size 1" in emitted


def test_the_sweep_tries_whole_experts_and_says_when_etp_cannot_apply():
    from simulator.sweep import SweepSpace, enumerate_layouts
    from simulator.sweep.empty_reason import empty_space_reason

    tr = Training(seq_length=4096, global_batch_size=64)
    mix = load_model("mixtral-8x7b")
    df = enumerate_layouts(mix, tr, 16, SweepSpace(tp=(2,), pp=(1,), cp=(1,)))
    assert set(df.etp) == {1, 2} and set(df[df.etp == 1].ep) >= {8}  # EP 8 over DP 8 x TP 2 with whole experts
    assert df[(df.etp == 1)].sequence_parallel.all()
    with pytest.raises(InputError, match="dense"):
        enumerate_layouts(load_model("llama3-8b"), tr, 8, SweepSpace(etp=(1,)))
    # an etp no expert grid of 16 GPUs takes: the reason names it, not ep
    assert "no etp in {3}" in empty_space_reason(mix, tr, 16, SweepSpace(etp=(3,)))
