"""The kernel's communication and per-rank-class steps (kernel.py composes them; the per-layer TP/CP/EP
communication and the PP p2p time are kernel_layer_comm.py's): ZeRO-3/FSDP parameter gathers, the
data-parallel tail (its traffic and what of it the last backward hides) and the optimizer step. Each step's
keyword-only parameters are the row columns it reads (`dedup.once_per_distinct` evaluates it once per distinct
combination of them); the rules are in cost/comm.py, cost/collectives.py, cost/topology.py, spec/placement.py and spec/rules.py.
"""
from __future__ import annotations

import numpy as np

from .cost import collectives as C
from .cost import comm
from .cost.fsdp import backward_pass, forward_pass, fsdp_copy_s, reduce_behind_compute_exposed_s, unit_count
from .cost.gradients import accumulation_share, grad_accumulation_s, grad_zeroing_s
from .cost.optimizer import optimizer_params_step_s
from .cost.topology import group_span
from .cost.variability import slowest_gpu_factor
from .dedup import distinct_rows, gather_rows, once_per_distinct
from .memory.states import zero_state_bytes_per_param
from .spec.layout import expert_dp
from .spec.placement import params_per_rank, stage_param_split
from .spec.rules import shard_degrees


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
    span = _dp_spans(hardware, opt.placement, tp=tp, cp=cp, ep=ep, dp=dp, pp=pp,
                     shard_group_size=shard_group_size)[0].column()
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
        t1, n1 = comm.bucketed(fn, hardware, bytes_ne, span_ne.rows(rows).column(), bucket)
        t2, n2 = comm.bucketed(fn, hardware, bytes_ex, span_ex.rows(rows).column(), bucket)
        rs[rows], nb[rows] = t1 + t2, n1 + n2

    r0 = np.flatnonzero(zz == 0)
    if len(r0):  # DDP
        reduce(C.all_reduce_s, r0, ne_rank[r0] * gb, ex_rank[r0] * gb, span_dp, span_edp)
    r12 = np.flatnonzero((zz == 1) | (zz == 2))
    if len(r12):  # ZeRO-1/2
        reduce(C.reduce_scatter_s, r12, ne_rank[r12] * gb, ex_rank[r12] * gb, span_dp, span_edp)
        if not opt.param_gather_overlap:
            d, e = span_dp.rows(r12).column(), span_edp.rows(r12).column()
            ag[r12] = C.all_gather_s(hardware, ne_rank[r12] * pb, d) + C.all_gather_s(hardware, ex_rank[r12] * pb, e)
    r3 = np.flatnonzero(zz == 3)
    if replica is not None and len(r3):  # HSDP: all-reduce of the gradient shard across the replicas
        t, n = comm.bucketed(C.all_reduce_s, hardware, ne_rank[r3] * gb / shard_group_size,
                             replica.rows(r3).column(), bucket)
        rs[r3], nb[r3] = t, n
    return rs, ag, nb


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
