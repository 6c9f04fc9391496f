"""The kernel's communication and per-rank-class steps (kernel.py composes them): per-layer TP/CP/EP
communication and the PP p2p time, ZeRO-3/FSDP parameter gathers, the data-parallel tail (its traffic
and what of it the last backward hides) and the optimizer step. Each step's keyword-only parameters are
the row columns it reads (`dedup.once_per_distinct` evaluates it once per distinct combination of them);
the rules are in cost/comm.py, cost/collectives.py, cost/topology.py, spec/placement.py and spec/rules.py.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .cost import collectives as C
from .cost import comm
from .cost.compute import layer_op_times
from .cost.fsdp import (backward_pass, chunked_overlap_exposed_s, forward_pass, fsdp_copy_s,
                        reduce_behind_compute_exposed_s, unit_count)
from .cost.gradients import accumulation_share, grad_accumulation_s, grad_zeroing_s
from .cost.optimizer import optimizer_params_step_s
from .cost.topology import group_span
from .cost.variability import slowest_gpu_factor
from .dedup import categories, distinct_rows, gather_rows, once_per_distinct
from .memory.states import zero_state_bytes_per_param
from .spec.layout import expert_dp
from .spec.placement import params_per_rank, stage_param_split
from .spec.rules import shard_degrees


def _take_span(span, idx):
    """The GroupSpan of rows `idx` (every array field indexed)."""
    return replace(span, **{f: np.asarray(getattr(span, f))[idx] for f in span.__dataclass_fields__ if f != "group"})


def _layer_comm(model, training, hardware, opt, cp_algorithm, *, tp, cp, ep, etp, dp, mbs, pp, sp, rec) -> dict:
    """Per-layer, per-microbatch communication of K layouts, (K,) arrays: TP forward/backward
    (cost/comm.tp_comm; `tp_head_f` the last stage's gather of the logits, comm.loss_gather_s), CP
    (cp_comm) and the core-attention time that hides ring CP, EP all-to-all (ep_comm, per MoE layer; `ep_rerun`: its
    forward again where recompute re-runs the MoE block, full or the module moe; `tp_rerun_d`/`_m`: the MLP's/MoE's
    forward TP pair again under the modules mlp/moe), and
    the PP p2p time of one stage boundary (0 without pipelining). `tp_moe_f`/`tp_moe_b`: what an MoE layer's
    TP collectives differ from a dense layer's where the experts' tensor-parallel degree etp is not tp: the
    attention keeps its pair over tp, the FFN's pair runs over the etp group of the expert grid instead
    (none for etp = 1), half of tp_comm each (Megatron-Core: the expert layers' TP group is the expert
    RankGenerator's, parallel_state.py). The EP group is that grid's too: ep ranks etp apart, the grid
    regrouping a stage's tp·cp·dp ranks as etp × ep × expert-dp (with etp = tp and cp = 1, ranks tp apart)."""
    k = len(tp)
    ab = training.activation_bytes
    s = training.seq_length
    place = dict(order=opt.placement)
    out = {key: np.zeros(k) for key in ("tp_f", "tp_b", "tp_hid_f", "tp_hid_b", "cp_f", "cp_b", "att_f", "att_b",
                                        "ep_f", "ep_b", "p2p", "tp_head_f", "tp_moe_f", "tp_moe_b", "tp_rerun_d",
                                        "tp_rerun_m", "ep_rerun")}
    mods = training.stack.recompute_modules
    grid = expert_dp(tp, cp, dp, ep, etp)  # the expert-data-parallel degree of the expert grid
    span_tp = group_span(hardware, group="tp", tp=tp, cp=cp, ep=1, dp=dp, pp=pp, **place)
    if not training.stack.loss_parallel and (tp > 1).any():  # the head's logits gathered for the loss
        out["tp_head_f"][:] = comm.loss_gather_s(hardware, span_tp, vocab_size=model.vocab_size, seq_length=s,
                                                 micro_batch_size=mbs.astype(float), bytes_per_element=ab, cp=cp)
    for (r, spv), idx in categories(rec, sp):
        c = comm.tp_comm(hardware, _take_span(span_tp, idx), hidden_size=model.hidden_size, seq_length=s,
                         micro_batch_size=mbs[idx].astype(float), num_layers=1.0, bytes_per_element=ab,
                         sequence_parallel=bool(spv), recompute=r, cp=cp[idx])
        out["tp_f"][idx], out["tp_b"][idx] = c.forward_s, c.backward_s
        if model.is_moe and (etp[idx] != tp[idx]).any():  # the FFN's pair over the etp group, not tp
            span_etp = group_span(hardware, group="tp", tp=etp[idx], cp=1, ep=ep[idx], dp=grid[idx], pp=pp[idx],
                                  **place)
            ce = comm.tp_comm(hardware, span_etp, hidden_size=model.hidden_size, seq_length=s,
                              micro_batch_size=mbs[idx].astype(float), num_layers=1.0, bytes_per_element=ab,
                              sequence_parallel=bool(spv), recompute=r, cp=cp[idx])
            moved = etp[idx] != tp[idx]
            out["tp_moe_f"][idx] = np.where(moved, 0.5 * (ce.forward_s - c.forward_s), 0.0)
            out["tp_moe_b"][idx] = np.where(moved, 0.5 * (ce.backward_s - c.backward_s), 0.0)
        if r == "selective":  # the recomputed MLP / MoE block re-runs its forward pair (half of a layer's)
            out["tp_rerun_d"][idx] = 0.5 * c.forward_s * ("mlp" in mods)
            out["tp_rerun_m"][idx] = 0.5 * (c.forward_s + 2.0 * out["tp_moe_f"][idx]) * ("moe" in mods)
        if opt.tp_overlap is not None:  # a given fraction hidden
            out["tp_hid_f"][idx], out["tp_hid_b"][idx] = opt.tp_overlap * c.forward_s, opt.tp_overlap * c.backward_s
        elif training.stack.tp_comm_overlap and (tp[idx] > 1).any():
            out["tp_hid_f"][idx], out["tp_hid_b"][idx] = _tp_chunked_hidden(
                model, training, hardware, opt, tp[idx], cp[idx], mbs[idx], bool(spv), c)
    if (cp > 1).any():
        span_cp = group_span(hardware, group="cp", tp=tp, cp=cp, ep=1, dp=dp, pp=pp, **place)
        c = comm.cp_comm(hardware, span_cp, seq_length=s, micro_batch_size=mbs.astype(float), num_layers=1.0,
                         kv_hidden=model.num_kv_heads * model.head_dim, hidden_size=model.hidden_size,
                         bytes_per_element=ab, algorithm=cp_algorithm, tp=tp.astype(float))
        out["cp_f"][:], out["cp_b"][:] = c.forward_s, c.backward_s
        if cp_algorithm == "ring" and opt.cp_overlap:
            for (spv,), idx in categories(sp):  # once per distinct (tp, cp, micro-batch)
                u, inv = distinct_rows(tp[idx], cp[idx], mbs[idx])
                f, b = _core_attention_s(model, training, hardware, tp[idx[u]], cp[idx[u]], mbs[idx[u]], bool(spv),
                                         opt.roofline)
                out["att_f"][idx], out["att_b"][idx] = f[inv], b[inv]
    if model.is_moe and (ep > 1).any():
        span_ep = group_span(hardware, group="ep", tp=etp, cp=1, ep=ep, dp=grid, pp=pp, **place)
        c = comm.ep_comm(hardware, span_ep, tokens_per_rank=mbs * s / cp / np.where(sp, tp, 1),
                         hidden_size=model.hidden_size, top_k=model.experts_per_token, num_moe_layers=1.0,
                         dispatch_bytes_per_element=training.ep_dispatch_bytes,
                         combine_bytes_per_element=ab, load_factor=training.moe_load_factor)
        out["ep_f"][:], out["ep_b"][:] = c.forward_s, c.backward_s
        rerun = (rec == "full") | ((rec == "selective") & ("moe" in mods))  # the layer's or MoE block's forward again
        out["ep_rerun"][:] = np.where(rerun, c.forward_s, 0.0)
    piped = np.flatnonzero(pp > 1)
    if len(piped):
        span_pp = group_span(hardware, group="pp", tp=tp[piped], cp=cp[piped], ep=1, dp=dp[piped], pp=pp[piped], **place)
        msg = comm.pp_message_bytes(hidden_size=model.hidden_size, seq_length=s, micro_batch_size=mbs[piped],
                                    bytes_per_element=ab, tp=tp[piped], cp=cp[piped], sequence_parallel=sp[piped])
        out["p2p"][piped] = C.p2p_s(hardware, np.asarray(msg, dtype=float), span_pp)
    return out


# The GEMMs each TP collective of a layer feeds or drains, as positions in the layer's GEMM list (flops.py:
# the attention projections ending with out_proj, then the MLP's up and down; Megatron-LM / torchtitan TP
# plans). With sequence parallelism: forward all-gather -> the attention's input GEMMs (QKV, or MLA's
# projections) and FC1, reduce-scatter <- out_proj and FC2; backward the transposes, each against the same
# GEMM's input- and weight-gradient products. Without it: one all-reduce after out_proj and one after FC2
# (forward), after the attention-input and FC1 input gradients (backward).
def _tp_collective_gemms(gemms: list, sequence_parallel: bool) -> tuple[tuple, tuple]:
    """(forward groups, backward groups) of OpTimes, one group per TP collective of the layer."""
    attn_in, out, up, down = gemms[:-3], gemms[-3:-2], gemms[-2:-1], gemms[-1:]
    assert out[0].name == "out_proj", [g.name for g in gemms]  # flops.attention_ops ends with it
    if sequence_parallel:
        return (attn_in, out, up, down), (attn_in, out, up, down)
    return (out, down), (attn_in, up)


def _tp_chunked_hidden(model, training, hardware, opt, tp, cp, mbs, sequence_parallel, c):
    """The TP communication per layer that the chunked pipeline of the stack's `tp_comm_overlap` hides,
    (forward, backward): each of the layer's TP collectives (4 with SP, 2 all-reduces without; equal
    messages, s·b·h) split into tp chunks against the GEMM it feeds or drains (`_tp_collective_gemms`:
    forward its forward GEMM, backward its input- and weight-gradient GEMMs), cost/fsdp.py
    chunked_overlap_exposed_s; hidden = total − exposed. A collective whose GEMM is shorter than it stays
    partly exposed whatever the other GEMMs of the layer take."""
    u, inv = distinct_rows(tp, cp, mbs)
    k = 4 if sequence_parallel else 2
    gf, gb = np.zeros((len(u), k)), np.zeros((len(u), k))
    for j, i in enumerate(u):  # scalar layouts: one op table each (few distinct (tp, cp, micro-batch))
        gemms = [o for o in layer_op_times(model, training, hardware, tp=float(tp[i]), cp=float(cp[i]),
                                           micro_batch_size=float(mbs[i]), sequence_parallel=sequence_parallel,
                                           roofline=opt.roofline) if o.kind == "gemm"]
        fwd, bwd = _tp_collective_gemms(gemms, bool(sequence_parallel))
        for q in range(k):
            gf[j, q] = sum(float(o.forward_s) for o in fwd[q])
            gb[j, q] = sum(float(o.backward_s) + float(o.weight_s) for o in bwd[q])
    gf, gb = gf[inv], gb[inv]
    hidden = []
    for total, g in ((np.asarray(c.forward_s, dtype=float), gf), (np.asarray(c.backward_s, dtype=float), gb)):
        total = np.broadcast_to(total, tp.shape)
        exposed = sum(chunked_overlap_exposed_s(total / k, g[:, q], tp.astype(float)) for q in range(k))
        hidden.append(np.where(tp > 1, np.maximum(total - exposed, 0.0), 0.0))
    return hidden[0], hidden[1]


def _dp_spans(hardware, order, *, tp, cp, ep, dp, pp, shard_group_size, etp=None):
    """(DP span, expert-DP span, HSDP replica span or None) of K rows: the DP group is dp·cp ranks (the
    shard group with HSDP); the expert-data-parallel group tp·dp·cp/(etp·ep) ranks (Megatron-Core's expert
    grid, etp = tp by default: dp·cp/ep), strided over the etp × ep block; the HSDP replica group dp/shard ranks."""
    kw = dict(group="dp", tp=tp, pp=pp, order=order)
    etp = tp if etp is None else etp
    span_edp = group_span(hardware, cp=1, ep=ep, dp=expert_dp(tp, cp, dp, ep, etp), **{**kw, "tp": etp})
    if not shard_group_size:
        return group_span(hardware, cp=1, ep=1, dp=dp * cp, **kw), span_edp, None
    replica = group_span(hardware, cp=cp, ep=1, dp=np.maximum(dp // shard_group_size, 1), **kw)
    return group_span(hardware, cp=cp, ep=1, dp=np.full(len(tp), shard_group_size), **kw), span_edp, replica


def _class_params(model, pt, shape, tp, ep, etp=None):
    """(non-expert, expert) parameters per rank class (K, Q) of K rows (spec/placement.py: the one count)."""
    return params_per_rank(stage_param_split(model, pt.of_shapes(shape).classes), tp=tp, ep=ep, etp=etp)


def _zero3_unit_times(model, training, hardware, opt, pt, shard_group_size, *, tp, cp, ep, dp, pp, shape, gpus):
    """ZeRO-3/FSDP per FSDP unit of each virtual stage, (K, S) each: the parameter all-gather time of one
    unit, its gradient reduce-scatter time (in the stack's reduce dtype), the stage's unit count
    (cost/fsdp.py `unit_count`) and, for a stack with FSDP2's compute-stream copies (`fsdp_copies`), one
    unit's copy-out and copy-in time (cost/fsdp.py `fsdp_copy_s`; 0 otherwise). A stage's share of its rank's
    non-expert parameters, split evenly over its units, over the data-parallel (shard) group; every unit is its
    own collective and pays its latency. The copies are compute: at the pace of the slowest of the layout's
    `gpus` (cost/variability.py)."""
    ptg = pt.of_shapes(shape)
    stack = training.stack
    ne_cls, _ = _class_params(model, pt, shape, tp, ep)
    units = unit_count(ptg.layers, stack.fsdp_unit_layers)
    unit_params = ptg.stage_of_rank(ptg.of_class(ne_cls)) / ptg.chunks[:, None] / units
    span = _col_span(_dp_spans(hardware, opt.placement, tp=tp, cp=cp, ep=ep, dp=dp, pp=pp,
                               shard_group_size=shard_group_size)[0])
    live = ptg.stage_valid
    rb = float(stack.fsdp_reduce_bytes(training.grad_bytes))
    g = C.all_gather_s(hardware, unit_params * training.param_bytes, span)
    r = C.reduce_scatter_s(hardware, unit_params * rb, span)
    co = ci = np.zeros_like(g)
    if stack.fsdp_copies:
        co, ci = fsdp_copy_s(hardware, unit_params, param_bytes=float(training.param_bytes), reduce_bytes=rb)
        slow = slowest_gpu_factor(opt.gpu_speed_cv, gpus)[:, None]
        co, ci = co * slow, ci * slow
    return tuple(np.where(live, x, 0.0) for x in (g, r, units, co, ci))


def _dp_tail_traffic(model, training, hardware, opt, pt, shard_group_size, span_shard_group, *, tp, cp, ep, etp, dp,
                     pp, shape, zero):
    """The data-parallel tail's traffic per rank class (_dp_traffic) of K rows."""
    ne_cls, ex_cls = _class_params(model, pt, shape, tp, ep, etp)
    spans = _dp_spans(hardware, opt.placement, tp=tp, cp=cp, ep=ep, dp=dp, pp=pp, shard_group_size=span_shard_group,
                      etp=etp)
    return _dp_traffic(hardware, training, opt, ne_cls, ex_cls, zero, spans, shard_group_size)


def _optimizer_times(model, training, hardware, pt, shard_group_size, speed_cv, *, tp, cp, ep, etp, dp, shape, zero,
                     gpus):
    """Optimizer-step time per rank class (K, Q): the state shards as in memory (spec.rules.shard_degrees)
    from ZeRO-1 on, plus the zeroing of the gradients the rank keeps (their bytes as memory counts them:
    memory/states.py zero_state_bytes_per_param), at the pace of the slowest of the layout's `gpus`
    (cost/variability.py)."""
    ne_cls, ex_cls = _class_params(model, pt, shape, tp, ep, etp)
    d, d_e = shard_degrees(dp=dp, cp=cp, ep=ep, shard_group_size=shard_group_size, tp=tp, etp=etp)
    sharded = zero >= 1
    t = optimizer_params_step_s(training, hardware, non_expert=ne_cls, expert=ex_cls,
                                shard_degree=np.where(sharded, d, 1.0)[:, None],
                                expert_shard_degree=np.where(sharded, d_e, 1.0)[:, None])
    g = [_kept_grad_bytes(training, zero, x)[:, None] for x in (d, d_e)]
    t = t + grad_zeroing_s(training, hardware, grad_bytes=ne_cls * g[0] + ex_cls * g[1])
    return t * slowest_gpu_factor(speed_cv, gpus)[:, None]


def _kept_grad_bytes(training, zero, shard_degree) -> np.ndarray:
    """Gradient bytes per parameter a rank keeps: memory/states.py's rule (sharded from ZeRO-2 on)."""
    return zero_state_bytes_per_param(zero=zero, shard_degree=shard_degree, param_bytes=training.param_bytes,
                                      grad_bytes=training.grad_bytes, optimizer_bytes=0.0)["grads"]


def _grad_accumulation_times(model, training, hardware, pt, shard_group_size, *, tp, cp, ep, dp, pp, zero, m, shape,
                             counts, etp=None):
    """(K, S) per virtual stage and micro-batch: adding its new weight gradients into the gradients kept on its
    rank where autograd does it (cost/gradients.py `grad_accumulation_s`, times `accumulation_share` of the step's
    `m` micro-batches). What is added into: from ZeRO-2 on, when the stack reduces every micro-batch, each
    micro-batch's reduced shard into the kept shard (the memory model's sharded gradient bytes); else the whole
    unsharded gradient (FSDP once per step: in its reduce dtype, as memory/states.py accumulated_grad_bytes).
    A stage's share of its rank's parameters (evenly over the rank's chunks), in one tensor per weight matrix of
    its layers (4 attention + the FFN's) and of its embedding and head (`counts`: pt.content_counts)."""
    stack = training.stack
    ptg = pt.of_shapes(shape)
    ne_cls, ex_cls = _class_params(model, pt, shape, tp, ep, etp)
    d, d_e = shard_degrees(dp=dp, cp=cp, ep=ep, shard_group_size=shard_group_size, tp=tp, etp=etp)
    sharded = (zero >= 2) & stack.fsdp_reduces_every_microbatch(pp)
    full = np.where(zero >= 3, float(stack.fsdp_reduce_bytes(training.grad_bytes)), float(training.grad_bytes))
    per = [np.where(sharded, _kept_grad_bytes(training, zero, x), full)[:, None] for x in (d, d_e)]
    g_rank = ne_cls * per[0] + ex_cls * per[1]
    g_stage = ptg.stage_of_rank(ptg.of_class(g_rank)) / ptg.chunks[:, None]
    tensors = (counts[:, 0] + counts[:, 1]) * (4 + model.glu_matrices) + counts[:, 2] + counts[:, 3]
    t = grad_accumulation_s(training, hardware, grad_bytes=g_stage, tensors=np.maximum(tensors, 1.0))
    return t * accumulation_share(stack, m)[:, None]


def _dp_tail(model, training, hardware, opt, dp_mode, shard_group_size, pt, last_bwd, t_inv, cols, m) -> tuple:
    """(K, P) the data-parallel tail per rank (its non-expert params over dp·cp, expert params over the
    EDP group): DDP all-reduce / ZeRO reduce-scatter (+ parameter all-gather), the gradient buckets
    reduced as the last microbatch's backward (`last_bwd` of time row t_inv) fills them with
    `grad_reduce_overlap` (cost/fsdp.py reduce_behind_compute_exposed_s: the last bucket exposed);
    asynchronous DP waits for nothing; single-process DataParallel scatters and gathers serially. With
    its parts (K, P): the exposed reduction (`reduce`, its contention included), the exposed parameter
    gather (`gather`) and the reduction hidden under the backward (`reduce_hidden`)."""
    tp, ep, etp, dp, mbs, zz = cols["tp"], cols["ep"], cols["etp"], cols["dp"], cols["mbs"], cols["zero"]
    s, ab = training.seq_length, training.activation_bytes
    n = len(tp)
    P = pt.padded_ranks
    if dp_mode == "dataparallel":
        ne_rank, ex_rank = (pt.of_class(x) for x in params_per_rank(stage_param_split(model, pt.classes), tp=tp, ep=ep,
                                                                     etp=etp))
        d = comm.data_parallel_single_process_comm(hardware, n_gpus=dp[:, None], params=ne_rank + ex_rank,
                                                   param_bytes_per_element=training.param_bytes,
                                                   grad_bytes_per_element=training.grad_bytes,
                                                   input_bytes=8.0 * mbs[:, None] * s * m[:, None],
                                                   output_bytes=ab * mbs[:, None] * s * m[:, None] * model.hidden_size)
        dp_tail = np.broadcast_to(d.forward_s + d.backward_s, (n, P))
        parts = dict(reduce=dp_tail, gather=np.zeros((n, P)), reduce_hidden=np.zeros((n, P)))
    else:
        traffic, g_inv = once_per_distinct(_dp_tail_traffic, cols, model=model, training=training,
                                           hardware=hardware, opt=opt, pt=pt, shard_group_size=shard_group_size,
                                           span_shard_group=shard_group_size if (zz >= 1).any() else None)
        rs, ag, nb = (pt.of_class(gather_rows(x, g_inv)) for x in traffic)
        raw, hidden, waits = rs, np.zeros_like(rs), 0.0 if dp_mode == "async" else 1.0
        if opt.grad_reduce_overlap:  # bucket by bucket as the last backward fills them: the last one exposed
            per = np.maximum(nb, 1.0)
            exposed_rs = reduce_behind_compute_exposed_s(gather_rows(last_bwd, t_inv) / per, rs / per, nb)
            hidden = np.maximum(rs - exposed_rs, 0.0)
            rs = exposed_rs + opt.comm_slowdown * hidden  # the hidden part slows it
        dp_tail = (rs + ag) * waits
        parts = dict(reduce=rs * waits, gather=ag * waits, reduce_hidden=hidden if waits else raw)
    return dp_tail, parts


def _dp_traffic(hardware, training, opt, ne_rank, ex_rank, zz, spans, shard_group_size):
    """Per-rank gradient reduction time, parameter all-gather time and gradient buckets (K, P) of the
    data-parallel tail, before overlap. DDP: all-reduce of the gradients; ZeRO-1/2 (Megatron distributed
    optimizer): reduce-scatter of the gradients + all-gather of the updated parameters (formulas.md §4.6,
    ZeRO §7); ZeRO-3: its traffic is per FSDP unit inside the ops, plus the HSDP replica all-reduce. The
    gradients go in buckets of the stack's `dp_bucket_mb`, each its own collective (comm.bucketed).
    Non-expert params over the dp·cp group, expert params over the expert-data-parallel group
    tp·dp·cp/(etp·ep) (`spans`: _dp_spans of the K rows)."""
    gb, pb = training.grad_bytes, training.param_bytes
    bucket = training.stack.dp_bucket_mb * 1e6
    span_dp, span_edp, replica = spans
    rs, ag, nb = np.zeros(ne_rank.shape), np.zeros(ne_rank.shape), np.zeros(ne_rank.shape)

    def reduce(fn, rows, bytes_ne, bytes_ex, span_ne, span_ex):
        t1, n1 = comm.bucketed(fn, hardware, bytes_ne, _col_span(_take_span(span_ne, rows)), bucket)
        t2, n2 = comm.bucketed(fn, hardware, bytes_ex, _col_span(_take_span(span_ex, rows)), bucket)
        rs[rows], nb[rows] = t1 + t2, n1 + n2

    r0 = np.flatnonzero(zz == 0)
    if len(r0):  # DDP
        reduce(C.all_reduce_s, r0, ne_rank[r0] * gb, ex_rank[r0] * gb, span_dp, span_edp)
    r12 = np.flatnonzero((zz == 1) | (zz == 2))
    if len(r12):  # ZeRO-1/2
        reduce(C.reduce_scatter_s, r12, ne_rank[r12] * gb, ex_rank[r12] * gb, span_dp, span_edp)
        if not opt.param_gather_overlap:
            d, e = _col_span(_take_span(span_dp, r12)), _col_span(_take_span(span_edp, r12))
            ag[r12] = C.all_gather_s(hardware, ne_rank[r12] * pb, d) + C.all_gather_s(hardware, ex_rank[r12] * pb, e)
    r3 = np.flatnonzero(zz == 3)
    if replica is not None and len(r3):  # HSDP: all-reduce of the gradient shard across the replicas
        t, n = comm.bucketed(C.all_reduce_s, hardware, ne_rank[r3] * gb / shard_group_size,
                             _col_span(_take_span(replica, r3)), bucket)
        rs[r3], nb[r3] = t, n
    return rs, ag, nb


def _col_span(span):
    """A GroupSpan whose array fields get a trailing axis, to broadcast against (n, S) stage arrays."""
    kw = {f: (np.asarray(getattr(span, f))[..., None] if np.ndim(getattr(span, f)) else getattr(span, f))
          for f in span.__dataclass_fields__ if f != "group"}
    return replace(span, **kw)


def _core_attention_s(model, training, hardware, tp, cp, mbs, sequence_parallel, roofline):
    """Forward and backward time of one layer's core attention per microbatch, (n,) arrays."""
    ops = layer_op_times(model, training, hardware, tp=tp[:, None].astype(float), cp=cp[:, None].astype(float),
                         micro_batch_size=mbs[:, None].astype(float), sequence_parallel=sequence_parallel,
                         roofline=roofline, core_attention_only=True)
    f = sum(np.asarray(o.forward_s, dtype=float) for o in ops if o.core_attention)
    b = sum(np.asarray(o.backward_s, dtype=float) for o in ops if o.core_attention)
    n = len(tp)
    return np.broadcast_to(np.reshape(f, (-1,))[:n] if np.size(f) >= n else f, (n,)), \
        np.broadcast_to(np.reshape(b, (-1,))[:n] if np.size(b) >= n else b, (n,))


def _zero3_exposure(model, training, hardware, opt, shard_group_size, pt, st, b_inv, cols3, r3, n):
    """The ZeRO-3/FSDP collectives of the rows `r3` (their columns `cols3`), per FSDP unit on a
    communication stream beside the compute (cost/fsdp.py), with the stack's unit size, prefetch depth,
    reshard-after-forward and reduce policy. Per micro-batch and virtual stage: the forward's all-gathers
    (every micro-batch, unless pipelined without resharding: then once per step), the backward's
    all-gathers (when resharded after forward) and reduce-scatters (every micro-batch, or once per step).
    The once-per-step collectives are exposed like one micro-batch's: after the last backward (the
    reduction; on a pipelined stage all of it, `accumulated_grad_bytes`' source) and before the first
    forward (the gather). FSDP2's copies (`fsdp_copies`) are compute: they lengthen each unit's compute in the
    replay, and `copy_f`, `copy_b` (K, S) are their time per micro-batch and virtual stage. The unit times once
    per distinct (tp, cp, ep, dp, pipeline shape), the passes once per distinct (base row of `st`, shape).
    Returns (z3, z3_id): per exposure row the exposed and hidden times per micro-batch `f`, `b`, `hid_f`, `hid_b` (K, S) and
    the once-per-step exposure `tail` (K, S) = `tail_ag` (gathers) + `tail_rs` (reduce-scatters); each
    of the n rows' exposure row, −1 where nothing is exposed and nothing slows (it then times like the
    other ZeRO stages); and the once-per-step exposure per rank (n, P), None when there is none."""
    z3_id = np.full(n, -1)
    if not len(r3):
        return None, z3_id, None
    (gu, ru, units, cou, ciu), g_inv = once_per_distinct(_zero3_unit_times, cols3, model=model, training=training,
                                                         hardware=hardware, opt=opt, pt=pt,
                                                         shard_group_size=shard_group_size)
    pf, p_inv = distinct_rows(b_inv[r3], pt.shape_index[r3])
    g, r, L, bb = gu[g_inv[pf]], ru[g_inv[pf]], units[g_inv[pf]], b_inv[r3[pf]]
    stack, d = training.stack, training.stack.fsdp_prefetch
    pp = cols3["pp"][pf]
    reshard = stack.fsdp_reshards(pp)[:, None]
    every_rs = stack.fsdp_reduces_every_microbatch(pp)[:, None]
    every_ag = reshard | (pp <= 1)[:, None]  # kept unsharded across micro-batches only when pipelined
    f_b, b_b, w_b = (gather_rows(st[k], bb) for k in ("F", "B", "W"))
    Lc = np.maximum(L, 1.0)
    # FSDP2's copies run on the compute stream with each micro-batch's collectives: a unit's compute grows by
    # them (copy-out after each gather, copy-in before each reduce-scatter; the once-per-step ones are left out)
    co, ci = cou[g_inv[pf]], ciu[g_inv[pf]]
    copy_f, copy_b = np.where(every_ag, co, 0.0), np.where(reshard, co, 0.0) + np.where(every_rs, ci, 0.0)
    cf, cb = f_b / Lc + copy_f, (b_b + w_b) / Lc + copy_b
    ef, hf = forward_pass(cf, np.where(every_ag, g, 0.0), L, d)
    eb, hb = backward_pass(cb, np.where(reshard, g, 0.0), np.where(every_rs, r, 0.0), L, d)
    tail_ag = np.where(every_ag, 0.0, forward_pass(cf, g, L, d)[0])
    # reduced once per step: with the last micro-batch's backward (overlapped like it), except on pipelined
    # stages, whose reduce-scatters all run after their last backward (torch.distributed.pipelining
    # stage.py run_post_backward), with no compute left to hide them: L·r
    tail_rs = np.where(every_rs, 0.0, np.where((pp > 1)[:, None], L * r, backward_pass(cb, 0.0, r, L, d)[0]))
    tail = tail_ag + tail_rs
    live = L > 0
    z3 = dict(f=np.where(live, ef, 0.0), b=np.where(live, eb, 0.0), hid_f=np.where(live, hf, 0.0),
              hid_b=np.where(live, hb, 0.0), tail=np.where(live, tail, 0.0), tail_ag=np.where(live, tail_ag, 0.0),
              tail_rs=np.where(live, tail_rs, 0.0), copy_f=np.where(live, L * copy_f, 0.0),
              copy_b=np.where(live, L * copy_b, 0.0))
    seen = (z3["f"] + z3["b"] + z3["copy_f"] + z3["copy_b"]).any(axis=1) | (opt.comm_slowdown > 0)
    z3_id[r3] = np.where(seen[p_inv], p_inv, -1)
    z3["rows"] = np.full(n, -1)  # every ZeRO-3 row's exposure row, exposed or not (the timeline's view)
    z3["rows"][r3] = p_inv
    tail_rank = None
    if z3["tail"].any():  # per rank: the sum over the virtual stages it holds
        tail_rank = np.zeros((n, pt.padded_ranks))
        tail_rank[r3] = gather_rows(pt.take(r3[pf]).rank_sum(z3["tail"]), p_inv)
    return z3, z3_id, tail_rank
