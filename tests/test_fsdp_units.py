"""FSDP / ZeRO-3 per unit (cost/fsdp.py and its use in the kernel): the two-stream replay against closed
forms on uniform units, its invariants on random inputs, and the stack's FSDP policies in the step time."""
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cost.fsdp import backward_pass, forward_pass, unit_count
from simulator.kernel import evaluate_layouts
from simulator.spec.hardware import load_hardware
from simulator.spec.load import load_model
from simulator.spec.stack import load_stack
from simulator.spec.training import Training

H100 = load_hardware("dgx-h100")
times = st.floats(min_value=1e-6, max_value=1.0)


@given(c=times, g=times, L=st.integers(1, 40), d=st.integers(1, 4))
def test_forward_with_prefetch_exposes_the_first_gather_and_the_excess_of_each_later_one(c, g, L, d):
    # uniform units, prefetch >= 1: makespan = g + (L-1)·max(g, c) + c (a two-stage flow shop)
    exposed, hidden = forward_pass(c, g, L, d)
    assert exposed == pytest.approx(g + (L - 1) * max(0.0, g - c), rel=1e-9, abs=1e-12)
    assert exposed + hidden == pytest.approx(L * g, rel=1e-9, abs=1e-12)


@given(c=times, g=times, r=times, L=st.integers(1, 40))
def test_without_prefetch_every_collective_is_exposed(c, g, r, L):
    assert forward_pass(c, g, L, 0)[0] == pytest.approx(L * g, rel=1e-9)
    assert backward_pass(c, g, r, L, 0)[0] == pytest.approx(L * (g + r), rel=1e-9)


@given(c=times, r=times, L=st.integers(1, 40), d=st.integers(0, 3))
def test_backward_reduce_scatters_alone_expose_the_last_one_and_the_excess(c, r, L, d):
    # parameters kept after forward (no backward gathers): RS_j after unit j, one at a time
    exposed, _ = backward_pass(c, 0.0, r, L, d)
    assert exposed == pytest.approx(r + (L - 1) * max(0.0, r - c), rel=1e-9, abs=1e-12)


@given(c=times, frac_g=st.floats(0.0, 0.5), frac_r=st.floats(0.0, 0.5), L=st.integers(1, 40))
def test_backward_hides_all_but_the_first_gather_and_last_reduce_when_compute_dominates(c, frac_g, frac_r, L):
    g, r = frac_g * c, frac_r * c  # g + r <= c
    assert backward_pass(c, g, r, L, 1)[0] == pytest.approx(g + r, rel=1e-9, abs=1e-12)


@settings(max_examples=300)
@given(c=times, g=times, r=times, L=st.integers(1, 30), d=st.integers(0, 5))
def test_exposed_is_between_the_unhideable_part_and_everything(c, g, r, L, d):
    ef, hf = forward_pass(c, g, L, d)
    eb, hb = backward_pass(c, g, r, L, d)
    eps = 1e-12 * L * (c + g + r)  # rounding of makespan − L·c
    assert g - eps <= ef <= L * g + eps  # the first gather can never hide
    assert max(g, r) - eps <= eb <= L * (g + r) + eps
    assert hf >= 0 and hb >= 0
    # prefetching never makes it worse than not prefetching
    assert ef <= forward_pass(c, g, L, 0)[0] + eps
    assert eb <= backward_pass(c, g, r, L, 0)[0] + eps


def test_vectorised_rows_with_different_unit_counts_match_one_by_one():
    rng = np.random.default_rng(0)
    c, g, r = rng.uniform(0.1, 2, (3, 50))
    L = rng.integers(1, 30, 50)
    ef, hf = forward_pass(c, g, L, 1)
    eb, hb = backward_pass(c, g, r, L, 2)
    for i in range(50):
        assert ef[i] == forward_pass(c[i], g[i], L[i], 1)[0]
        assert eb[i] == backward_pass(c[i], g[i], r[i], L[i], 2)[0]


def test_unit_count_rounds_up_and_keeps_one_unit_for_an_embedding_only_stage():
    assert unit_count(np.array([32, 31, 0]), 2).tolist() == [16, 16, 1]


def _z3(stack, **kw):
    m = load_model("llama3-8b")
    t = Training(seq_length=4096, global_batch_size=kw.pop("gbs", 512), stack=stack)
    return evaluate_layouts(m, t, H100, **{"num_gpus": 256, "dp": 256, "zero": 3, **kw})


def test_per_layer_collectives_pay_latency_so_fsdp_exposes_more_with_more_units():
    one = _z3(load_stack("torchtitan", fsdp_unit_layers=32))  # the whole model one unit: one collective
    per_layer = _z3(load_stack("torchtitan"))
    assert per_layer.exposed_zero3_s[0] > 0
    # one big unit cannot prefetch anything: its gather is entirely exposed
    assert one.exposed_zero3_s[0] > per_layer.exposed_zero3_s[0]


def test_reduce_dtype_fp32_moves_twice_the_bytes_of_bf16():
    fp32 = _z3(load_stack("torchtitan", fsdp_prefetch=0))
    bf16 = _z3(load_stack("torchtitan", fsdp_prefetch=0, fsdp_reduce_dtype="bf16"))
    assert fp32.exposed_zero3_s[0] > bf16.exposed_zero3_s[0]


def test_keeping_parameters_after_forward_drops_the_backward_gathers():
    yes = _z3(load_stack("fsdp", fsdp_prefetch=0))
    no = _z3(load_stack("fsdp", fsdp_prefetch=0, fsdp_reshard_after_forward="no"))
    assert no.exposed_zero3_s[0] < yes.exposed_zero3_s[0]


def test_reducing_once_per_step_costs_less_than_every_microbatch():
    every = _z3(load_stack("fsdp", fsdp_prefetch=0), micro_batch_size=1)
    once = _z3(load_stack("fsdp", fsdp_prefetch=0, fsdp_reduce="once"), micro_batch_size=1)
    assert every.num_microbatches[0] == 2
    assert once.exposed_zero3_s[0] < every.exposed_zero3_s[0]
    # the breakdown still adds up with the once-per-step part in it
    for df in (every, once):
        r = df.iloc[0]
        assert r.step_s == pytest.approx(r.compute_s + r.exposed_comm_s + r.bubble_s, rel=1e-12)


def test_torchtitan_keeps_parameters_and_reduces_once_when_pipelined():
    tt = load_stack("torchtitan")
    assert tt.fsdp_reshards([1, 4]).tolist() == [True, False]
    assert tt.fsdp_reduces_every_microbatch([1, 4]).tolist() == [True, False]


def test_a_pipelined_stage_exposes_all_its_once_per_step_reduce_scatters():
    # torch.distributed.pipelining reduce-scatters a stage's gradients after its last backward, with no compute
    # left to hide them: the stage's exposure is at least its units' reduce-scatters, whatever the compute
    # (recompute adds backward compute) and the micro-batch count (m = 2 or 4 per step)
    from simulator.cost import collectives as C
    from simulator.cost.topology import group_span

    m = load_model("llama3-8b")
    tt = load_stack("torchtitan")
    rows = [evaluate_layouts(m, Training(seq_length=4096, global_batch_size=g, stack=tt), H100, num_gpus=16, pp=2,
                             dp=8, zero=3, recompute=rc).iloc[0] for g in (32, 64) for rc in ("none", "full")]
    exposed = [r.exposed_zero3_s for r in rows]
    assert exposed == pytest.approx([exposed[0]] * 4, rel=1e-12)
    assert rows[2].compute_s > 1.9 * rows[0].compute_s and rows[1].compute_s > rows[0].compute_s
    layer = (m.total_params() - 2 * m.vocab_size * m.hidden_size) / m.num_layers  # a layer's parameters
    span = group_span(H100, group="dp", dp=8, pp=2)
    units = m.num_layers // 2
    r = float(C.reduce_scatter_s(H100, layer * tt.fsdp_reduce_bytes(4), span))  # fp32 reduce (torchtitan)
    g = float(C.all_gather_s(H100, layer * 2, span))
    assert units * r <= exposed[0] <= units * 1.1 * (r + g)  # every reduce-scatter; at most every collective
    # without the pipeline, the reductions run every micro-batch behind the backward and hide
    flat = evaluate_layouts(m, Training(seq_length=4096, global_batch_size=16, stack=tt), H100, num_gpus=8, dp=8,
                            zero=3).iloc[0]
    assert flat.exposed_zero3_s < 0.25 * units * 2 * r


@pytest.mark.parametrize("key, value", [("fsdp_prefetch", -1), ("fsdp_unit_layers", 0),
                                        ("fsdp_reshard_after_forward", "maybe"), ("fsdp_reduce", "sometimes"),
                                        ("fsdp_reduce_dtype", "fp8"), ("fsdp_prefetch", 1.5)])
def test_bad_fsdp_settings_are_refused_naming_the_key(key, value):
    from simulator.errors import InputError

    with pytest.raises(InputError, match=key):
        load_stack("torchtitan", **{key: value})


def test_parameters_kept_after_forward_stay_in_memory_until_backward():
    m = load_model("llama3-8b")
    kw = dict(num_gpus=64, dp=32, pp=2, zero=3)
    keep = evaluate_layouts(m, Training(seq_length=4096, global_batch_size=64, stack=load_stack("torchtitan")), H100, **kw)
    free = evaluate_layouts(m, Training(seq_length=4096, global_batch_size=64,
                                       stack=load_stack("torchtitan", fsdp_reshard_after_forward="yes")), H100, **kw)
    # the kept stage holds all of its ~4e9 parameters unsharded in bf16 (~8 GB) instead of two layers
    extra = keep.peak_bytes[0] - free.peak_bytes[0]
    assert 6e9 < extra < 9e9


@given(c=times, r=times, n=st.integers(1, 60))
def test_bucket_closed_form_is_the_replay_of_reductions_behind_compute(c, r, n):
    from simulator.cost.fsdp import reduce_behind_compute_exposed_s

    assert reduce_behind_compute_exposed_s(c, r, n) == pytest.approx(backward_pass(c, 0.0, r, n, 1)[0],
                                                                     rel=1e-9, abs=1e-12)


def test_ddp_exposes_at_least_its_last_gradient_bucket():
    m = load_model("llama3-8b")
    kw = dict(num_gpus=64, dp=64, zero=0)
    exp = {}
    for mb in (25, 1000):
        t = Training(seq_length=4096, global_batch_size=64, stack=load_stack("fsdp", dp_bucket_mb=mb))
        exp[mb] = evaluate_layouts(m, t, H100, **kw).exposed_dp_s[0]
    from simulator.cost import collectives as C
    from simulator.cost.topology import group_span

    for mb in (25, 1000):  # (small buckets can expose more: each all-reduce pays its latency at 64 GPUs)
        assert exp[mb] >= C.all_reduce_s(H100, mb * 1e6, group_span(H100, group="dp", dp=64)) * 0.999


@given(c=times, g=times, n=st.integers(1, 16))
def test_chunked_tp_overlap_is_the_forward_replay_of_its_chunks(c, g, n):
    from simulator.cost.fsdp import chunked_overlap_exposed_s

    # n chunks of c/n communication, each feeding g/n of GEMM: the forward pass of n units, prefetch 1
    assert chunked_overlap_exposed_s(c, g, n) == pytest.approx(forward_pass(g / n, c / n, n, 1)[0], rel=1e-9, abs=1e-12)


def test_tp_comm_overlap_hides_most_tp_communication_but_never_the_first_chunk():
    m = load_model("llama3-70b")
    kw = dict(num_gpus=8, tp=8, dp=1, pp=1, sequence_parallel=True, recompute="selective")
    rows = {}
    for on in (False, True):
        t = Training(seq_length=8192, global_batch_size=1, stack=load_stack("megatron", tp_comm_overlap=on))
        rows[on] = evaluate_layouts(m, t, H100, **kw).iloc[0]
    off, on = rows[False], rows[True]
    assert 0 < on.exposed_tp_s < 0.5 * off.exposed_tp_s
    # at least the first of tp chunks of each of the 4 collectives per layer, forward and backward
    assert on.exposed_tp_s >= off.exposed_tp_s / 8 * 0.999
    assert on.contention_s > 0  # what it hides slows the GEMMs (SM contention)


def test_the_compiled_passes_give_the_numpy_replay_to_the_last_bit():
    from simulator import native
    from simulator.cost import fsdp

    if native.LIB is None:
        pytest.skip("compiled helpers not built")
    rng = np.random.default_rng(1)
    c, g, r = rng.uniform(0.0, 2.0, (3, 400))
    g[::7] = 0.0  # units kept after forward: no gathers
    L = rng.integers(1, 60, 400).astype(float)
    for d in (0, 1, 2, 5):
        shape = c.shape
        assert np.array_equal(native.fsdp_makespan(c, g, 0.0, L, d, backward=False),
                              fsdp._forward_makespan(c, g, L, d, shape))
        assert np.array_equal(native.fsdp_makespan(c, g, r, L, d, backward=True),
                              fsdp._backward_makespan(c, g, r, L, d, shape))


def test_exposed_plus_hidden_is_all_the_communication_overlap_could_not_remove():
    from simulator.options import EstimateOptions

    no_contention = EstimateOptions(comm_slowdown=0.0)
    m = load_model("llama3-8b")
    kw = dict(num_gpus=64, dp=64, zero=3, options=no_contention)
    t = lambda **s: Training(seq_length=4096, global_batch_size=128, stack=load_stack("fsdp", **s))  # noqa: E731
    pre = evaluate_layouts(m, t(), H100, **kw).iloc[0]
    serial = evaluate_layouts(m, t(fsdp_prefetch=0), H100, **kw).iloc[0]
    assert serial.hidden_zero3_s == pytest.approx(0.0, abs=1e-12) and pre.hidden_zero3_s > 1e-6  # (float residue)
    assert pre.exposed_zero3_s + pre.hidden_zero3_s == pytest.approx(serial.exposed_zero3_s, rel=1e-9)
    # DDP: the buckets hidden under the last backward + the exposed ones = the reduction with no overlap
    ddp = dict(num_gpus=64, dp=64, zero=0)
    over = evaluate_layouts(m, t(), H100, **ddp, options=no_contention).iloc[0]
    flat = evaluate_layouts(m, t(), H100, **ddp, options=EstimateOptions(comm_slowdown=0.0, grad_reduce_overlap=False)).iloc[0]
    assert over.hidden_dp_s > 0 == flat.hidden_dp_s
    assert over.exposed_dp_s + over.hidden_dp_s == pytest.approx(flat.exposed_dp_s, rel=1e-9)


def test_each_tp_collective_hides_behind_its_own_gemm_not_the_layers_average():
    """Pairing (kernel_layer_comm._tp_collective_gemms): a collective longer than the GEMM it feeds stays partly
    exposed however long the layer's other GEMMs are. max(0, t_c − t_g) is convex in t_g, so pairing never
    hides more than sharing the layer's GEMM time equally, and hides less when the QKV and projection GEMMs are
    shorter than their collectives (Llama-3-70B, TP 8, SP, 16 x 8192 tokens: 3.6 and 2.9 ms of GEMM against
    ~5 ms collectives)."""
    from types import SimpleNamespace

    from simulator.cost.compute import layer_op_times
    from simulator.cost.fsdp import chunked_overlap_exposed_s
    from simulator.kernel_layer_comm import _tp_chunked_hidden
    from simulator.options import EstimateOptions

    m = load_model("llama3-70b")
    t = Training(seq_length=8192, global_batch_size=16, stack=load_stack("torchtitan", tp_comm_overlap=True))
    tp, cp, mbs = np.array([8]), np.array([1]), np.array([16])
    comm = SimpleNamespace(forward_s=np.array([4 * 5.0e-3]), backward_s=np.array([4 * 5.0e-3]))
    hf, hb = _tp_chunked_hidden(m, t, H100, EstimateOptions(), tp, cp, mbs, True, comm)
    ops = [o for o in layer_op_times(m, t, H100, tp=8.0, cp=1.0, micro_batch_size=16.0, sequence_parallel=True)
           if o.kind == "gemm"]
    g = sum(float(o.forward_s) for o in ops)
    equal = 4 * 5.0e-3 - 4 * float(chunked_overlap_exposed_s(5.0e-3, g / 4, 8.0))
    assert hf[0] < equal  # the QKV and projection GEMMs are shorter than their collectives
    short = [float(o.forward_s) for o in ops if o.name in ("qkv_proj", "out_proj")]
    assert all(s < 5.0e-3 for s in short)
    assert 0 < hb[0] <= 4 * 5.0e-3 and 0 < hf[0]


@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-v3 without q_lora", "mixtral-8x7b", "gpt3-175b"])
@pytest.mark.parametrize("sp", [True, False])
def test_tp_overlap_finds_the_gemms_of_every_attention_and_mlp(name, sp):
    # MLA's attention input is its down and up projections (or q_proj without a query LoRA); MoE and GeLU
    # layers keep an up and a down GEMM
    m = load_model(name.split()[0])
    if "without" in name:
        m = m.with_(q_lora_rank=0)
    kw = dict(num_gpus=64, tp=8, pp=1, sequence_parallel=sp, recompute="selective")
    rows = {}
    for on in (False, True):
        t = Training(seq_length=4096, global_batch_size=64, stack=load_stack("megatron", tp_comm_overlap=on))
        rows[on] = evaluate_layouts(m, t, H100, **kw).iloc[0]
    assert 0 < rows[True].exposed_tp_s < rows[False].exposed_tp_s


def test_fsdp2_copies_are_compute_per_unit_and_micro_batch():
    # FSDP2 copies each all-gather's output into the parameters and each unit's gradients into the
    # reduce-scatter input on the compute stream: torchtitan's step grows by, per micro-batch and unit,
    # a copy-out in forward, another in backward (parameters resharded after forward) and a copy-in; FSDP1
    # (the fsdp stack) has none; the breakdown still adds up, the copies counted as compute
    from simulator.cost.fsdp import fsdp_copy_s

    m = load_model("llama3-8b")
    off = load_stack("torchtitan", fsdp_copies=False)
    rows = {}
    for name, st in (("on", load_stack("torchtitan")), ("off", off)):
        t = Training(seq_length=4096, global_batch_size=16, stack=st)
        rows[name] = evaluate_layouts(m, t, H100, num_gpus=8, dp=8, zero=3).iloc[0]
    on, no = rows["on"], rows["off"]
    assert on.num_microbatches == 2
    unit = m.total_params() / m.num_layers  # (the units share the embedding and head evenly: kernel_comm)
    co, ci = (float(x) for x in fsdp_copy_s(H100, unit, param_bytes=2.0, reduce_bytes=4.0))  # bf16, fp32 reduce
    expected = on.num_microbatches * m.num_layers * (2 * co + ci)
    assert on.compute_s - no.compute_s == pytest.approx(expected, rel=1e-9)
    assert on.step_s - no.step_s == pytest.approx(on.compute_s - no.compute_s, rel=0.2)
    for r in (on, no):
        assert r.step_s == pytest.approx(r.compute_s + r.exposed_comm_s + r.bubble_s, rel=1e-12)
    assert not load_stack("fsdp").fsdp_copies and load_stack("torchtitan").fsdp_copies


def test_fsdp2_copies_one_gather_output_per_gather_and_one_reduce_input_per_unit(free_port):
    # torch itself (two gloo ranks on CPU): per forward + backward of 4 resharded units, 8 copy-outs of a unit's
    # bf16 parameters (4 forward, 4 backward gathers) and 4 copy-ins into an fp32 reduce-scatter input: the
    # counts and sizes fsdp_copy_s times (each copy reads one buffer and writes one of these sizes)
    pytest.importorskip("torch")
    import json
    import subprocess
    import sys
    from pathlib import Path

    helper = Path(__file__).parent / "helpers" / "fsdp2_copies.py"
    r = subprocess.run([sys.executable, str(helper), str(free_port())], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    units, psi = got["units"], got["unit_params"]
    assert got["copy_out"] == [2 * psi] * (2 * units)  # bf16 parameters, forward and backward gathers
    assert got["copy_in"] == [4 * psi] * units  # the fp32 reduce dtype
