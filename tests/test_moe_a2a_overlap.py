"""Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm, Stack.moe_a2a_overlap; cost/moe_overlap.py):
one micro-batch's forward beside another's backward, layer by layer, each one's all-to-alls beside the other's
compute. Checked against a generic two-stream list scheduler fed Megatron's own call order, the limits of the
overlap, the schedule's warm-up counts, the conserved all-to-all time, the extra micro-batch in flight, the
settings Megatron refuses, and the import / emit of its flags."""
import itertools
import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.megatron_roundtrip import DSV3, round_trip
from simulator.cost.moe_overlap import combined_1f1b_share, combined_pair_period_s
from simulator.errors import InputError
from simulator.estimate import estimate
from simulator.spec.hardware import load_hardware
from simulator.spec.layout import Layout
from simulator.spec.load import load_model
from simulator.spec.stack import load_stack
from simulator.spec.training import Training

# TransformerLayerSchedulePlan.run (megatron/core/models/common/model_chunk_schedule_plan.py, d98e8a6), in its
# call order: (op, stream, what it reads: ops of this pair, or of the previous pair with a "prev." prefix)
RUN_ORDER = (
    ("combine_b", "comm", ("prev.pre_b",)),       # b_layer.moe_combine.backward(b_grad)
    ("pre_f", "comp", ("prev.combine_f",)),       # f_layer.pre_dispatch_computation.forward(f_input)
    ("mlp_b", "comp", ("combine_b",)),            # b_layer.mlp.backward(b_grad)
    ("dispatch_f", "comm", ("pre_f",)),           # f_layer.moe_dispatch.forward(f_input)
    ("mlp_dw", "comp", ("mlp_b",)),               # b_layer.mlp.backward_dw()
    ("dispatch_b", "comm", ("mlp_b",)),           # b_layer.moe_dispatch.backward(b_grad)
    ("mlp_f", "comp", ("dispatch_f",)),           # f_layer.mlp.forward(f_input)
    ("combine_f", "comm", ("mlp_f",)),            # f_layer.moe_combine.forward(f_input)
    ("pre_b", "comp", ("dispatch_b",)),           # b_layer.pre_dispatch_computation.backward(b_grad)
    ("pre_dw", "comp", ("pre_b",)),               # b_layer.pre_dispatch_computation.backward_dw()
)
NAMES = ("pre_f", "mlp_f", "pre_b", "pre_dw", "mlp_b", "mlp_dw", "dispatch_f", "combine_f", "dispatch_b", "combine_b")


def _list_schedule(d: dict, pairs: int) -> list[float]:
    """Each op starts when its stream is free and its inputs are done (CUDA streams run in issue order; events
    order the streams): the end of every pair."""
    free, prev, marks = {"comm": 0.0, "comp": 0.0}, {}, []
    for _ in range(pairs):
        done = {}
        for op, stream, reads in RUN_ORDER:
            ready = [prev.get(r[5:], 0.0) if r.startswith("prev.") else done[r] for r in reads]
            done[op] = max([free[stream], *ready]) + d[op]
            free[stream] = done[op]
        prev = done
        marks.append(max(free.values()))
    return marks


durations = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(st.tuples(*[durations] * 10))
def test_the_period_is_the_list_schedule_of_megatrons_call_order(ds):
    d = dict(zip(NAMES, ds))
    marks = _list_schedule(d, 16)
    assert combined_pair_period_s(*ds) == pytest.approx((marks[-1] - marks[7]) / 8, rel=1e-9, abs=1e-12)
    total_comp = sum(d[k] for k in NAMES[:6])
    total_comm = sum(d[k] for k in NAMES[6:])
    period = combined_pair_period_s(*ds)
    # each stream runs its ops one after another, so neither can finish a pair faster; nothing waits for more than
    # both streams' work
    assert max(total_comp, total_comm) - 1e-9 <= period <= total_comp + total_comm + 1e-9


def test_the_limits_of_the_overlap():
    comp = dict(pre_f=3.0, mlp_f=3.0, pre_b=3.0, pre_dw=1.0, mlp_b=3.0, mlp_dw=1.0)
    short = dict(dispatch_f=0.5, combine_f=0.5, dispatch_b=0.5, combine_b=0.5)
    assert combined_pair_period_s(**comp, **short) == 14.0  # all four all-to-alls hidden: the compute's sum
    long = dict(dispatch_f=5.0, combine_f=5.0, dispatch_b=5.0, combine_b=5.0)
    assert combined_pair_period_s(**comp, **long) == 20.0  # the communication's sum
    assert combined_pair_period_s(**comp, **{k: 0.0 for k in short}) == 14.0


def test_the_merged_share_counts_megatrons_warm_up():
    """No pipelining: the first forward and the last backward alone, (m − 1)/m. Interleaved, p = 4, v = 2, m = 16:
    warm-up 2(p − r − 1) + (v − 1)p + 1 = 11, 9, 7, 5 of 32 passes per rank; merged (21 + 23 + 25 + 27)/128."""
    share = combined_1f1b_share(np.array([1, 4, 8]), np.array([1, 2, 2]), np.array([16, 16, 4]))
    assert list(share) == [15 / 16, 96 / 128, 0.0]  # (p = 8, m = 4: every pass in the warm-up)


def _deepseek(hw, *, a2a, ep=64, pp=1, vpp=1, gbs=1024, **stack):
    st_ = load_stack("megatron", moe_a2a_overlap=a2a, **stack)
    tr = Training(seq_length=4096, global_batch_size=gbs, stack=st_)
    split = {} if pp == 1 else {"layers_per_stage": (3,) + (4,) * 14 + (2,), "schedule": "interleaved"}
    lay = Layout(num_gpus=1024, tp=2, pp=pp, vpp=vpp, ep=ep, etp=1, sequence_parallel=True, **split)
    return estimate(load_model("deepseek-v3"), tr, lay, load_hardware(hw)).to_dict()


@pytest.mark.parametrize("hw,ep,whole", [("gb200-nvl72", 64, True), ("dgx-h100", 8, True), ("dgx-h100", 64, False)])
def test_the_all_to_all_time_is_conserved_and_the_merged_share_bounds_what_hides(hw, ep, whole):
    """DeepSeek-V3 without pipelining, 2 micro-batches (share 1/2): inside an NVLink domain every all-to-all is
    shorter than the compute beside it, so exactly half the EP time hides; across 8 H100 nodes less does."""
    off, on = (_deepseek(hw, a2a=a, ep=ep)["time"] for a in (False, True))
    total = off["exposed_comm_by_group_s"]["ep"]
    hid = on["hidden_comm_by_group_s"]["ep"]
    assert on["exposed_comm_by_group_s"]["ep"] + hid == pytest.approx(total, rel=1e-9)
    assert (hid == pytest.approx(total / 2, rel=1e-9)) is whole
    assert 0.0 < hid <= total / 2 * (1 + 1e-9)
    assert on["step_s"] < off["step_s"]


def test_the_extra_warm_up_forward_keeps_one_more_chunk_in_flight():
    """Interleaved, p 8, v 2, 128 micro-batches: every rank holds one more (chunk, micro-batch) pair, 1/v of a
    micro-batch of its layers (schedules.py: 'we schedule one extra micro-batch forward step')."""
    off, on = (_deepseek("dgx-h100", a2a=a, pp=8, vpp=2, gbs=8192)["memory"] for a in (False, True))
    got = np.array([s["inflight_microbatches"] for s in on["per_stage"]])
    want = np.array([s["inflight_microbatches"] for s in off["per_stage"]]) + 0.5
    assert np.allclose(got, want)


def test_the_layouts_megatron_refuses_are_left_out_of_a_sweep():
    import io

    import pandas as pd

    cli = [sys.executable, "-c", "from simulator.cli import main; main()", "sweep", "--model", "deepseek-v3",
           "--hardware", "dgx-h100", "--gpus", "1024", "--seq", "4096", "--global-batch", "1024", "--no-progress",
           "--moe-a2a-overlap", "--format", "csv", "--top", "100000"]
    r = subprocess.run(cli, capture_output=True, text=True, check=True)
    assert "left out" in r.stderr and "moe_a2a_overlap" in r.stderr
    rows = pd.read_csv(io.StringIO(r.stdout))
    assert len(rows) and (rows.ep > 1).all() and (rows.recompute != "full").all()
    assert ((rows.pp == 1) | (rows.vpp > 1)).all()


@pytest.mark.parametrize("extra,needle", [
    (["--pp", "8", "--layers-per-stage", "7,8,8,8,8,8,8,6"], "virtual_pipeline_model_parallel_size"),
    (["--recompute", "full"], "disable full recomputation"),
    (["--moe-shared-expert-overlap"], "disable moe_shared_expert_overlap"),
    (["--no-moe-a2a-overlap", "--moe-delay-wgrad"], "must be enabled when enabling delay_wgrad_compute"),
    (["--mtp-layers", "2"], "MTP supports at most one layer"),
    (["--recompute", "selective", "--recompute-modules", "moe"], "disable moe in recompute_modules"),
])
def test_megatrons_refusals_exit_2_in_one_line(extra, needle):
    cli = [sys.executable, "-c", "from simulator.cli import main; main()", "estimate", "--model", "deepseek-v3",
           "--hardware", "dgx-h100", "--gpus", "1024", "--tp", "2", "--ep", "64", "--etp", "1", "--sequence-parallel",
           "--seq", "4096", "--global-batch", "1024", "--moe-a2a-overlap", *extra]
    r = subprocess.run(cli, capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr


def test_rebuilding_a_stack_keeps_the_rules_once():
    s = load_stack("megatron", moe_a2a_overlap=True)
    from dataclasses import replace

    names = [r.name for r in replace(replace(s, moe_delay_wgrad=True), moe_delay_wgrad=False).runs.refusals]
    assert names.count("moe_a2a_overlap_ep") == 1
    assert "moe_a2a_overlap_ep" not in [r.name for r in replace(s, moe_a2a_overlap=False).runs.refusals]
    with pytest.raises(InputError, match="moe_delay_wgrad needs"):
        load_stack("megatron", moe_delay_wgrad=True)


def test_megatron_flags_round_trip(tmp_path):
    text, flags, estimate_cmd = round_trip(
        tmp_path, f"{DSV3} --tensor-model-parallel-size 2 --expert-model-parallel-size 64 "
                  "--expert-tensor-parallel-size 1 --sequence-parallel --overlap-moe-expert-parallel-comm "
                  "--delay-wgrad-compute")
    assert "moe_a2a_overlap = true" in text and "moe_delay_wgrad = true" in text
    assert {"--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"} <= set(flags)
    est = json.loads(subprocess.run(estimate_cmd, capture_output=True, text=True, check=True).stdout)
    assert est["time"]["hidden_comm_by_group_s"]["ep"] > 0
    assert est["stack"]["overlaps"] == ["moe_a2a_overlap", "moe_delay_wgrad"]  # (what the estimate assumed)


def test_the_share_is_a_fraction_for_any_pipeline():
    for p, v, m in itertools.product((1, 2, 4, 8), (1, 2, 4), (1, 2, 7, 64)):
        s = float(combined_1f1b_share(np.array([p]), np.array([v]), np.array([m]))[0])
        assert 0.0 <= s < 1.0
