"""Composition of the per-stage breakdown: KV cache, overheads, inference, feasibility, JSON contract,
vectorised sweep form, zero-bubble split."""
import json

import numpy as np
import pytest

from simulator.errors import InputError
from simulator.memory import MemoryResult, Overheads, memory_breakdown, stage_memory_arrays
from simulator.memory.breakdown import stage_activation_split
from simulator.memory.result import feasible_mask
from simulator.memory.kv_cache import kv_cache_bytes
from simulator.memory.overheads import overhead_bytes
from simulator.spec.layout import Layout
from simulator.spec.stack import load_stack
from simulator.spec.load import load_model
from simulator.spec.training import Training
from simulator.units import GiB, KiB


class HBM:
    """Stand-in for a HardwareProfile: only the capacity matters here."""

    def __init__(self, gib):
        self.hbm_bytes = gib * GiB


def _l70(**kw):
    return load_model("llama3-70b"), Training(seq_length=8192, global_batch_size=64, **kw)


# ---- KV cache --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, per_token", [("llama3-8b", 128 * KiB), ("llama3-70b", 320 * KiB),
                                             ("llama3.1-405b", 504 * KiB), ("deepseek-v3", 70_272)])
def test_kv_cache_per_token_matches_published_sizes(name, per_token):
    # formulas.md §3.7: Llama-3 8B/70B/405B 128/320/504 KiB per token in bf16; DeepSeek-V3 MLA 70,272 B
    m = load_model(name)
    got = float(kv_cache_bytes(m, layers=[m.num_layers], batch=1, context=1, tp=1)[0])
    assert got == per_token


def test_kv_cache_shards_heads_over_tp_and_replicates_when_tp_exceeds_kv_heads():
    m = load_model("llama3-70b")  # 8 KV heads
    full = float(kv_cache_bytes(m, layers=[80], batch=4, context=8192, tp=1)[0])
    assert float(kv_cache_bytes(m, layers=[80], batch=4, context=8192, tp=8)[0]) == full / 8
    assert float(kv_cache_bytes(m, layers=[80], batch=4, context=8192, tp=16)[0]) == full / 8  # 1 head/rank


def test_inference_has_weights_and_kv_cache_but_no_grads_or_optimizer():
    m = load_model("llama3-8b")
    tr = Training(seq_length=8192, global_batch_size=16)
    lay = Layout(num_gpus=8, tp=8, pp=1, micro_batch_size=1)
    r = memory_breakdown(m, tr, lay, HBM(80), inference=True)
    s = r.worst
    assert s.grads_bytes == 0 and s.optimizer_bytes == 0
    # 16 sequences / dp 1, 8192 tokens, 128 KiB per token split over 8 ranks
    assert s.kv_cache_bytes == pytest.approx(16 * 8192 * 128 * KiB / 8)
    assert s.params_bytes == pytest.approx(2 * (m.total_params() - 2 * m.hidden_size * 32 - m.hidden_size) / 8
                                           + 2 * (2 * m.hidden_size * 32 + m.hidden_size), rel=1e-9)


# ---- overheads ------------------------------------------------------------------------------------
def test_overheads_are_documented_defaults_and_can_be_turned_off():
    o = Overheads()
    got = overhead_bytes(o, tensor_bytes=np.array([10 * GiB]), tp=8, pp=1, dp=4, cp=1, ep=1)
    assert float(got[0]) == pytest.approx(o.cuda_context_bytes + 2 * o.nccl_bytes_per_group + 0.05 * 10 * GiB)
    m, tr = _l70()
    lay = Layout(num_gpus=64, tp=8, pp=2, zero=1)
    r = memory_breakdown(m, tr, lay, HBM(80), overheads=Overheads.none())
    assert all(s.other_bytes == 0 for s in r.per_stage)
    with pytest.raises(InputError, match="allocator_reserve_fraction"):
        Overheads(allocator_reserve_fraction=float("nan"))


# ---- breakdown --------------------------------------------------------------------------------------
def test_peak_is_the_sum_of_the_consumers_and_stages_differ():
    m, tr = _l70()
    lay = Layout(num_gpus=64, tp=8, pp=4, zero=1, sequence_parallel=True)
    r = memory_breakdown(m, tr, lay, HBM(80))
    for s in r.per_stage:
        parts = s.params_bytes + s.grads_bytes + s.optimizer_bytes + s.activations_bytes + s.kv_cache_bytes + s.other_bytes
        assert s.peak_bytes == pytest.approx(parts)
    st = r.per_stage
    assert st[0].params_bytes > st[1].params_bytes  # embedding on the first stage
    assert st[3].params_bytes > st[1].params_bytes  # LM head on the last
    assert st[0].activations_bytes > st[1].activations_bytes > st[2].activations_bytes  # 1F1B p − i
    assert [s.inflight_microbatches for s in st] == [4, 3, 2, 1]


def test_infeasible_layout_names_the_biggest_consumer():
    m, tr = _l70()
    r = memory_breakdown(m, tr, Layout(num_gpus=8, tp=8, pp=1), HBM(80))
    assert not r.feasible
    name, b = r.worst.biggest_consumer()
    assert r.reason.startswith(f"{name}: ") and "GiB HBM" in r.reason
    ok = memory_breakdown(m, tr, Layout(num_gpus=64, tp=8, pp=4, zero=1, sequence_parallel=True,
                                        recompute="full"), HBM(80))
    assert ok.feasible and ok.reason == ""


def test_full_recompute_and_sequence_parallel_shrink_activations():
    m, tr = _l70()
    base = dict(num_gpus=64, tp=8, pp=4, zero=1)
    a = memory_breakdown(m, tr, Layout(**base), HBM(80)).worst.activations_bytes
    sp = memory_breakdown(m, tr, Layout(sequence_parallel=True, **base), HBM(80)).worst.activations_bytes
    full = memory_breakdown(m, tr, Layout(recompute="full", sequence_parallel=True, **base), HBM(80)).worst.activations_bytes
    assert a > sp > full


def test_inflight_override_replaces_the_closed_form():
    m, tr = _l70()
    lay = Layout(num_gpus=64, tp=8, pp=4, zero=1, sequence_parallel=True)
    r = memory_breakdown(m, tr, lay, HBM(80), inflight_per_stage=[1, 1, 1, 1])
    assert [s.inflight_microbatches for s in r.per_stage] == [1, 1, 1, 1]
    with pytest.raises(InputError, match="inflight_per_stage"):
        memory_breakdown(m, tr, lay, HBM(80), inflight_per_stage=[1, 1])
    with pytest.raises(InputError, match="inflight_per_stage"):
        memory_breakdown(m, tr, lay, HBM(80), inflight_per_stage=[1, 1, float("nan"), 1])


def test_to_dict_follows_the_json_contract():
    m, tr = _l70()
    lay = Layout(num_gpus=64, tp=8, pp=2, zero=1)
    d = json.loads(json.dumps(memory_breakdown(m, tr, lay, HBM(80)).to_dict()))
    assert d["model"] == {"name": "llama3-70b", "params": m.total_params(), "active_params": m.active_params()}
    for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "zero", "recompute", "micro_batch_size", "global_batch_size",
              "num_microbatches", "schedule"):
        assert k in d["layout"]
    keys = ("peak_bytes", "params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
            "kv_cache_bytes", "other_bytes")
    assert len(d["memory"]["per_stage"]) == 2
    worst = max(d["memory"]["per_stage"], key=lambda s: s["peak_bytes"])
    for k in keys:
        assert d["memory"][k] == worst[k]
    assert isinstance(d["feasible"], bool) and isinstance(d["reason"], str)


def test_sweep_form_equals_the_scalar_form_row_by_row():
    m, tr = _l70()
    tp = np.array([8, 4, 2, 8])
    dp = np.array([8, 16, 32, 4])
    cp = np.array([1, 1, 1, 2])
    mbs = np.array([1, 1, 2, 1])
    mb = tr.global_batch_size // (dp * mbs)
    arr = stage_memory_arrays(m, tr, tp=tp, pp=2, dp=dp, cp=cp, ep=1, micro_batch_size=mbs, num_microbatches=mb,
                              zero=1, recompute="selective", sequence_parallel=True)
    assert arr["peak_bytes"].shape == (4, 2)
    for i in range(4):
        lay = Layout(num_gpus=int(tp[i] * dp[i] * cp[i] * 2), tp=int(tp[i]), pp=2, cp=int(cp[i]), zero=1,
                     micro_batch_size=int(mbs[i]), recompute="selective", sequence_parallel=True)
        r = memory_breakdown(m, tr, lay, HBM(80))
        np.testing.assert_allclose(arr["peak_bytes"][i], [s.peak_bytes for s in r.per_stage])
    assert feasible_mask(arr, 80 * GiB).shape == (4,)


def test_worst_stage_form_picks_the_per_stage_maximum():
    # `worst_of` keeps only each layout's worst real stage: it must be the per-stage arrays at their
    # argmax (first on ties), padded stages never chosen
    m, tr = _l70()
    tp, dp = np.array([8, 4, 2, 8, 1]), np.array([8, 16, 32, 4, 64])
    mb = tr.global_batch_size // dp
    kw = dict(tp=tp, pp=4, dp=dp, cp=1, ep=1, micro_batch_size=1, num_microbatches=mb, zero=np.array([0, 1, 2, 3, 1]),
              recompute=np.array(["none", "selective", "full", "none", "full"], dtype=object), sequence_parallel=False)
    full = stage_memory_arrays(m, tr, **kw)
    real = np.ones((5, 4), dtype=bool)
    real[1, 0] = real[4, :2] = False  # pretend some stages are padding
    worst = stage_memory_arrays(m, tr, **kw, worst_of=real)
    w = np.argmax(np.where(real, full["peak_bytes"], -np.inf), axis=1)
    assert np.array_equal(worst["worst_stage"], w) and w[1] != 0 and w[4] >= 2
    for k in ("peak_bytes", "params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "kv_cache_bytes",
              "other_bytes"):
        assert np.array_equal(worst[k], full[k][np.arange(5), w]), k


@pytest.mark.parametrize("phases", [False, True])
@pytest.mark.parametrize("flat", [False, True])
@pytest.mark.parametrize("zero", [0, 1, 3])
def test_worst_stage_form_with_rank_classes_equals_the_per_rank_arrays(zero, flat, phases):
    # the sweep's form (rank classes + worst_of) takes shorter paths (state summed per class, zero terms
    # left out; with an in-flight key, each class evaluated only at its first rank with the most
    # microbatches in flight); they must give the per-rank arrays' values at their worst stage, bit
    # for bit, with and without ZeRO-3 gather buffers, for pipelines of different depths padded
    # together, with in-flight counts falling along the pipeline (1F1B) or equal on every rank (GPipe:
    # ranks of a class tie, the first one is the worst), rows sharing a key counted once
    from simulator.structure import pipeline_table

    # (phases: foreach AdamW's step buffers, gradients set to None and DDP's bucket copy of them, so some ranks
    # peak in the optimizer step and some without their .grad tensors: worst.peak_terms' two phases)
    phased = load_stack("megatron", optimizer_impl="foreach", grad_buffer="set-to-none", ddp_bucket_view=False)
    m, tr = _l70(stack=phased) if phases else _l70()
    pp, tp = np.tile([2, 4, 8, 4], 2), np.tile([8, 4, 2, 8], 2)
    dp = 512 // (pp * tp)
    mb = tr.global_batch_size // dp
    sched = np.tile(np.array(["1f1b", "interleaved", "1f1b", "zb-h1"], dtype=object), 2)
    chunks = np.where(sched == "interleaved", 2, 1)
    split = [None, None, None, (19, 21, 21, 19)] * 2  # the last layout's interior ranks hold the most layers
    pt = pipeline_table(m, schedule=sched, pp=pp, chunks=chunks, layers_per_stage=split)
    P = pt.padded_ranks
    per_rank = np.full((len(pp), P), 3.0) if flat else np.minimum(pp[:, None] - np.arange(P), mb[:, None])
    inflight = np.where(pt.rank_valid, per_rank, 0.0)
    kw = dict(tp=tp, pp=pp, dp=dp, cp=1, ep=1, vpp=chunks, micro_batch_size=1, num_microbatches=mb, zero=zero,
              recompute=np.tile(np.array(["none", "selective", "full", "selective"], dtype=object), 2),
              sequence_parallel=False, schedule=sched, inflight_per_stage=inflight, placement=pt.classes,
              rank_class=pt.rank_class)
    full = stage_memory_arrays(m, tr, **kw)
    w = np.argmax(np.where(pt.rank_valid, full["peak_bytes"], -np.inf), axis=1)
    rows = np.arange(len(w))
    for key in (None, np.tile(np.arange(4), 2)):
        worst = stage_memory_arrays(m, tr, **kw, worst_of=pt.rank_valid, inflight_key=key)
        assert np.array_equal(worst["worst_stage"], w)
        for k in ("peak_bytes", "params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
                  "kv_cache_bytes", "other_bytes"):
            assert np.array_equal(worst[k], full[k][rows, w]), k
    assert (full["transient_bytes"] > 0).any() == (zero == 3)  # both branches of the short paths ran
    if phases and zero < 3:  # both phases and the absent gradients occur among the ranks compared (ZeRO-3's
        # sharded gradients are small beside the activations, and stay counted: absent_grad_bytes); under ZeRO-0
        # the bucket copy stays where the .grad tensors are absent
        in_step = (full["activations_bytes"] == 0) & pt.rank_valid
        no_grads = (full["grads_bytes"] == (full["params"] * 4.0 if zero == 0 else 0.0)) & pt.rank_valid
        assert in_step.any() and (~in_step & pt.rank_valid).any() and no_grads.any()
    if flat:  # equal in-flight counts: the first rank of a class wins its ties (rank 1 of ranks 1 and 2)
        assert w[3] == w[7] == 1


def test_worst_stage_form_refuses_a_bad_inflight_key():
    from simulator.structure import pipeline_table

    m, tr = _l70()
    pp = np.array([2, 4])
    pt = pipeline_table(m, schedule=np.array(["1f1b", "1f1b"], dtype=object), pp=pp, chunks=np.array([1, 1]))
    inflight = np.where(pt.rank_valid, 1.0, 0.0)
    kw = dict(tp=8, pp=pp, dp=512 // (8 * pp), cp=1, ep=1, micro_batch_size=1, num_microbatches=8, zero=1,
              schedule="1f1b", inflight_per_stage=inflight, placement=pt.classes, rank_class=pt.rank_class,
              worst_of=pt.rank_valid)
    for key in (np.array([0, 1, 2]), np.array([0.5, 1.0])):
        with pytest.raises(InputError, match="inflight_key must be 2 integers") as e:
            stage_memory_arrays(m, tr, **kw, inflight_key=key)
        assert "\n" not in str(e.value)


def test_sweep_form_evaluates_a_million_layouts_quickly():
    import time

    m, tr = _l70()
    n = 1_000_000
    rng = np.random.default_rng(0)
    tp = rng.choice([1, 2, 4, 8], n)
    dp = rng.choice([1, 2, 4, 8, 16], n)
    t0 = time.perf_counter()
    arr = stage_memory_arrays(m, tr, tp=tp, pp=4, dp=dp, cp=1, ep=1, micro_batch_size=1, num_microbatches=8,
                              zero=1, sequence_parallel=True)
    elapsed = time.perf_counter() - t0
    assert arr["peak_bytes"].shape == (n, 4)
    assert elapsed < 20  # measured ≈ 1 s on 2 shared cores; generous bound for a loaded machine


def test_moe_expert_parallel_reduces_weights_per_gpu():
    m = load_model("mixtral-8x7b")
    tr = Training(seq_length=4096, global_batch_size=64)
    lays = [Layout(num_gpus=64, tp=2, pp=1, ep=ep, zero=1, sequence_parallel=True) for ep in (1, 8)]
    w = [memory_breakdown(m, tr, lay, HBM(80)).worst.params_bytes for lay in lays]
    assert w[1] < w[0] / 4


def test_zero_bubble_split_frees_everything_between_b_and_w():
    m = load_model("gpt3-175b")
    tr = Training(seq_length=2048, global_batch_size=64, flash_attention=False, dropout=True, precision="fp16")
    sp = stage_activation_split(m, tr, tp=1, pp=8)
    np.testing.assert_allclose(sp["backward_free_bytes"] + sp["weight_free_bytes"], sp["forward_bytes"])
    # middle stage, per layer: M_B = sbh(34 + 5as/h) (+ norm stats), M_W = 32·sbh (ZB runtime)
    s, h, a, L = 2048, m.hidden_size, m.num_heads, m.num_layers // 8
    assert float(sp["weight_free_bytes"][3]) == L * 32 * s * h
    assert float(sp["forward_bytes"][3]) == pytest.approx(L * s * h * (34 + 5 * a * s / h), rel=5e-4)


def test_result_is_frozen():
    m, tr = _l70()
    r = memory_breakdown(m, tr, Layout(num_gpus=64, tp=8, pp=2, zero=1), HBM(80))
    assert isinstance(r, MemoryResult)
    with pytest.raises(Exception):
        r.feasible = True


@pytest.mark.parametrize("kw, word", [(dict(recompute="most"), "recompute"), (dict(schedule="zigzag"), "schedule"),
                                      (dict(zero=4), "zero")])
def test_sweep_form_rejects_unknown_categorical_values(kw, word):
    m, tr = _l70()
    with pytest.raises(InputError, match=word):
        stage_memory_arrays(m, tr, tp=8, pp=2, dp=4, **kw)


def test_the_torch_loss_working_set_is_counted_once_on_the_last_stage():
    # cross_entropy = torch-fp32 adds 8·T·V once to the last stage's activations (not per micro-batch in
    # flight, not on other stages); with full recompute only the larger of it and a layer's working set
    from simulator.memory.head_activations import loss_backward_bytes

    m = load_model("llama3-8b")
    for schedule in ("1f1b", "gpipe"):
        for recompute in ("none", "full"):
            lay = Layout(num_gpus=2, pp=2, micro_batch_size=1, schedule=schedule, recompute=recompute)
            base = Training(seq_length=4096, global_batch_size=8)
            torch_ce = Training(seq_length=4096, global_batch_size=8, cross_entropy="torch-fp32")
            a, b = (memory_breakdown(m, tr, lay, HBM(80), overheads=Overheads.none()) for tr in (base, torch_ce))
            assert b.per_stage[0].activations_bytes == a.per_stage[0].activations_bytes
            work = float(loss_backward_bytes(m, torch_ce, tp=1, cp=1, micro_batch_size=1))
            assert work == 8 * 4096 * m.vocab_size
            grew = b.per_stage[1].activations_bytes - a.per_stage[1].activations_bytes
            if recompute == "none":
                assert grew == pytest.approx(work)
            else:  # a.per_stage[1] already holds one layer's working set w: max(w, work) − w
                assert 0 < grew < work
