"""Megatron-Core's --moe-shared-expert-overlap (Stack.moe_shared_expert_overlap; cost/moe_overlap.py): the shared
experts on a second stream beside the dispatcher's all-to-alls. Checked against the limits of the overlap (a
collective hides under at most the work beside it, and all of it under enough work), the breakdown's sums, the
settings Megatron refuses, and the import / emit of the flag."""
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from helpers.megatron_roundtrip import DSV3, round_trip
from simulator.cost.compute import layer_op_times
from simulator.cost.moe_overlap import shared_expert_hidden_s
from simulator.errors import InputError
from simulator.estimate import estimate
from simulator.spec.hardware import load_hardware
from simulator.spec.layout import Layout
from simulator.spec.load import load_model
from simulator.spec.stack import load_stack
from simulator.spec.training import Training

SPLIT = (3,) + (4,) * 14 + (2,)  # DeepSeek-V3's 61 layers over 16 stages


def _time(model, overlap, *, hardware="dgx-h100", recompute="none", modules="core_attn"):
    st = load_stack("megatron", moe_shared_expert_overlap=overlap, recompute_modules=modules)
    tr = Training(seq_length=4096, global_batch_size=512, stack=st)
    lay = Layout(num_gpus=1024, tp=2, pp=16, ep=64, etp=1, sequence_parallel=True, layers_per_stage=SPLIT,
                 recompute=recompute)
    return estimate(model, tr, lay, load_hardware(hardware)).to_dict()["time"]


def test_the_overlap_rule_at_its_limits():
    """Each all-to-all hides under at most the GEMMs beside it, and all of it under longer ones."""
    d, c = np.array([4.0, 4.0, 1.0]), np.array([3.0, 3.0, 1.0])
    fwd, bwd = shared_expert_hidden_s(d, c, np.array([1.0, 9.0, 2.0]), np.array([0.5, 9.0, 0.5]),
                                      np.array([2.0, 9.0, 2.0]), np.array([1.0, 9.0, 0.5]))
    assert list(fwd) == [1.5, 7.0, 1.5]  # min(t_d, U_f) + min(t_c, D_f)
    assert list(bwd) == [3.0, 6.0, 1.5]  # min(t_c, D_b) + min(t_c, U_b): two gradient all-to-alls of t_c each


def test_enough_shared_work_hides_every_all_to_all():
    """A shared expert 128x DeepSeek-V3's (width 262144) outlasts each all-to-all beside it (its FC2 alone takes
    about twice the combine's time over 8 nodes): the EP group's exposed time goes to 0, and what was exposed
    without the overlap is now reported hidden."""
    wide = replace(load_model("deepseek-v3"), shared_expert_ffn_hidden_size=128 * 2048)
    off, on = _time(wide, False), _time(wide, True)
    assert off["exposed_comm_by_group_s"]["ep"] > 1.0
    assert on["exposed_comm_by_group_s"]["ep"] == pytest.approx(0.0, abs=1e-9)
    assert on["hidden_comm_by_group_s"]["ep"] == pytest.approx(off["exposed_comm_by_group_s"]["ep"], rel=1e-9)


def test_deepseek_v3_hides_at_most_its_shared_gemms_and_the_breakdown_adds_up():
    """At DeepSeek-V3's own width the all-to-alls over 8 nodes outlast the shared GEMMs: the hidden time is what
    the overlap moved (exposed + hidden is conserved), and it is below the shared GEMMs' time. The step shortens by
    at most what each micro-batch's stage hid, replayed on the critical path: the busiest rank's m micro-batches
    and the pp − 1 stage passes of the 1F1B fill and drain, (m + pp − 1) / m x the hidden time."""
    m = load_model("deepseek-v3")
    off, on = _time(m, False), _time(m, True)
    hid = on["hidden_comm_by_group_s"]["ep"]
    assert 0.0 < hid < off["exposed_comm_by_group_s"]["ep"]
    assert on["exposed_comm_by_group_s"]["ep"] + hid == pytest.approx(off["exposed_comm_by_group_s"]["ep"], rel=1e-9)
    mbs = 512 // 32  # micro-batches: the global batch over dp 32
    assert 0.0 < off["step_s"] - on["step_s"] <= hid * (mbs + 16 - 1) / mbs
    # nor more than the shared GEMMs beside the all-to-alls: their timed forward and backward on the busiest stage
    # (4 MoE layers) for each of its micro-batches
    tr = Training(seq_length=4096, global_batch_size=512, stack=load_stack("megatron"))
    ops = [o for o in layer_op_times(m, tr, load_hardware("dgx-h100"), moe=True, tp=2, micro_batch_size=1,
                                     sequence_parallel=True) if o.name.startswith("shared_")]
    gemms = sum(float(o.forward_s) + float(o.backward_s) + float(o.weight_s) for o in ops)
    assert len(ops) == 2 and hid <= gemms * 4 * mbs * (1 + 1e-9)


def test_a_model_without_shared_experts_is_unchanged():
    """Megatron: 'Only effective when moe-shared-expert-intermediate-size is set'."""
    m = replace(load_model("deepseek-v3"), shared_expert_ffn_hidden_size=0)
    assert _time(m, True) == _time(m, False)


def test_shared_experts_recompute_with_the_overlap_is_refused():
    """transformer_config.py: 'shared_experts recompute cannot work with --moe-shared-expert-overlap'."""
    with pytest.raises(InputError, match="shared_experts recompute cannot work"):
        _time(load_model("deepseek-v3"), True, recompute="selective", modules="core_attn,shared_experts")
    assert _time(load_model("deepseek-v3"), False, recompute="selective", modules="core_attn,shared_experts")


def test_a_non_boolean_value_is_refused():
    with pytest.raises(InputError, match="moe_shared_expert_overlap must be true or false"):
        load_stack("megatron", moe_shared_expert_overlap="yes")


def test_the_flag_on_the_command_line_and_in_megatron_scripts(tmp_path):
    """--moe-shared-expert-overlap on estimate changes the EP exposure; a Megatron script's flag is imported into
    the scenario's stack and emitted back; a refused combination exits 2 with one line naming the module."""
    base = [sys.executable, "-c", "from simulator.cli import main; main()", "estimate", "--model", "deepseek-v3",
            "--hardware", "dgx-h100", "--gpus", "1024", "--tp", "2", "--pp", "16", "--ep", "64", "--etp", "1",
            "--sequence-parallel", "--layers-per-stage", ",".join(map(str, SPLIT)), "--seq", "4096",
            "--global-batch", "512", "--format", "json"]
    import json

    out = {f: json.loads(subprocess.run(base + [f], capture_output=True, text=True, check=True).stdout)
           for f in ("--moe-shared-expert-overlap", "--no-moe-shared-expert-overlap")}
    on, off = (out[f]["time"]["exposed_comm_by_group_s"]["ep"] for f in out)
    assert 0 < on < off
    bad = subprocess.run(base + ["--moe-shared-expert-overlap", "--recompute", "selective", "--recompute-modules",
                                 "shared_experts"], capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "--recompute-modules shared_experts" in bad.stderr

    text, flags, _ = round_trip(
        tmp_path, f"{DSV3} --tensor-model-parallel-size 2 --pipeline-model-parallel-size 16 "
                  "--expert-model-parallel-size 64 --expert-tensor-parallel-size 1 --sequence-parallel "
                  "--decoder-first-pipeline-num-layers 3 --decoder-last-pipeline-num-layers 2 "
                  "--moe-shared-expert-overlap")
    assert "moe_shared_expert_overlap = true" in text
    assert "--moe-shared-expert-overlap" in flags
