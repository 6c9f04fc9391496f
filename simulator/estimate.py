"""Estimate: memory + step time + throughput of one layout, composed from the parts (no formulas here).

Composition (formulas.md §7.4, made concrete):

1. Per (virtual) stage and microbatch, compute times F, B (input gradient + recompute forward), W
   (weight gradient) come from cost/compute.py.
2. Communication inside those ops (cost/comm.py over the links each group spans, cost/topology.py):
   - TP all-reduce / all-gather + reduce-scatter: on the critical path of F and B (Megatron runs them
     between GEMMs); `tp_overlap` of it may be hidden (default 0: none).
   - CP ring p2p: overlapped with the core-attention kernel of the same layer (Megatron CP); only the
     excess is exposed. Ulysses all-to-all: exposed.
   - EP dispatch/combine all-to-all: exposed, except `ep_overlap` of it (default 1 for dualpipe /
     dualpipev, whose F&B pairs hide it — DeepSeek-V3 §3.2.1 — else 0).
   - ZeRO-3/FSDP parameter all-gathers (forward and backward) and gradient reduce-scatters per
     microbatch: prefetched under the same pass; only the excess over the pass is exposed.
   The exposed parts are added to F and B.
3. The pipeline: the schedule's op order replayed on those durations with the PP p2p time per
   boundary (pipeline/makespan_batch: the engine's exact fast path), giving the makespan, busy time
   per rank and the peak in-flight microbatches per rank (which the memory model uses).
   PipeDream (asynchronous, no flush) runs at its steady state: m × the slowest stage's F+B+W.
4. The data-parallel tail: DDP all-reduce / ZeRO-1,2 reduce-scatter (+ parameter all-gather) of the
   gradients, overlapped with the last microbatch's backward when `grad_reduce_overlap` (Megatron
   `--overlap-grad-reduce`); the ZeRO-1/2 parameter all-gather is exposed unless
   `param_gather_overlap`. Asynchronous DP waits for nothing; single-process DataParallel is serial.
5. The optimizer step (memory-bound, cost/compute.py), then the step ends.

Breakdown (adds up exactly): step_s = compute_s + exposed_comm_s + bubble_s, where, on the busiest
pipeline rank r*: compute_s = m·Σ(F+B+W) + optimizer_s; exposed_comm_s = comm inside its ops + the
PP p2p wait (makespan with p2p − makespan without) + the exposed DP tail; bubble_s = the rest of the
makespan (idle waiting on other stages). `bubble_fraction` is the engine's
1 − Σ busy / (ranks × makespan).

MFU/HFU: PaLM App. B — model FLOPs (no recompute; causal convention of `training.attention_flops`)
or executed FLOPs, per step, / (step_s × GPUs × dense peak of the GEMM dtype).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np
import pandas as pd

from .cost import collectives as C
from .cost import comm
from .cost.compute import (layer_op_times, mfu_peak_flops, optimizer_step_s, rank_param_counts, stage_compute_times,
                           stage_rank_matrix)
from .cost.flops import step_flops
from .cost.topology import group_span
from .errors import InputError
from .memory.breakdown import memory_breakdown, stage_memory_arrays
from .spec.layout import Layout
from .spec.model import ModelSpec
from .spec.training import Training
from .spec.validate import validate

SPLIT_SCHEDULES = ("zb-h1", "zb-h2", "zb-v", "dualpipe", "dualpipev")
MEMORY_FIELDS = ("peak_bytes", "params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
                 "kv_cache_bytes", "other_bytes")
EXPOSED = ("tp", "cp", "ep", "pp", "dp", "zero3")


@dataclass(frozen=True, kw_only=True)
class EstimateOptions:
    """What overlaps with what (module docstring), and modelling switches. Defaults follow Megatron-LM."""

    tp_overlap: float = 0.0  # fraction of TP communication hidden under GEMMs (--tp-comm-overlap: ~1)
    cp_overlap: bool = True  # ring-attention p2p under the attention kernel
    ep_overlap: float | None = None  # None: 1 for dualpipe/dualpipev, else 0
    grad_reduce_overlap: bool = True  # DP gradient reduction under the last microbatch's backward
    param_gather_overlap: bool = False  # ZeRO-1/2 parameter all-gather under the next forward
    zero3_prefetch: bool = True  # FSDP/ZeRO-3 all-gathers prefetched under compute
    comm_slowdown: float = 0.0  # overlapped comm slows the compute it hides under by this fraction
    roofline: bool = True  # op time = max(compute, memory) (False: their sum, Calculon's no_overlap)
    pipeline: str = "replay"  # "replay": the engine's fast path; "analytic": closed-form bubbles (faster)
    bucket_bytes: float = 25e6  # DDP gradient bucket (PyTorch default 25 MB)
    placement: tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")

    def __post_init__(self):
        for name in ("tp_overlap", "comm_slowdown"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0.0 <= v <= 1.0):
                raise InputError(f"{name} must be in [0, 1], got {v!r}")
        if self.pipeline not in ("replay", "analytic"):
            raise InputError(f"pipeline must be 'replay' or 'analytic', got {self.pipeline!r}")
        if self.ep_overlap is not None and not 0.0 <= self.ep_overlap <= 1.0:
            raise InputError(f"ep_overlap must be in [0, 1], got {self.ep_overlap!r}")


@lru_cache(maxsize=512)
def _compiled(schedule: str, pp: int, m: int, vpp: int):
    """The schedule's op order compiled for the fast replay (pure function of its shape; memoised)."""
    from .pipeline import compile_schedule
    from .schedules import build

    return compile_schedule(build(schedule, pp=pp, microbatches=m, vpp=vpp if schedule == "interleaved" else 1))


def _chunks_per_rank(schedule: str, vpp: int) -> int:
    """Model chunks each rank holds: the engine counts in-flight (chunk, microbatch) pairs, the memory
    model counts microbatches of a whole rank's layers, so the replayed count is divided by this."""
    return {"interleaved": vpp, "zb-v": 2, "dualpipev": 2, "dualpipe": 2}.get(schedule, 1)


def replayed_inflight_per_rank(layout: Layout, global_batch_size: int) -> np.ndarray | None:
    """Peak in-flight microbatches per pipeline rank from the replayed schedule order (whole-rank units),
    which replaces the memory model's closed forms; None for PipeDream (closed form: p − i)."""
    if layout.schedule == "pipedream":
        return None
    from .pipeline import inflight_profile

    sched = _compiled(layout.schedule, layout.pp, layout.num_microbatches(global_batch_size), layout.vpp)
    return np.asarray(inflight_profile(sched.schedule), dtype=float) / _chunks_per_rank(layout.schedule, layout.vpp)


def _arr(x, n):
    return np.broadcast_to(np.asarray(x), (n,)).astype(np.int64)


def evaluate_layouts(model: ModelSpec, training: Training, hardware, *, num_gpus: int, pp: int, vpp: int = 1,
                     schedule: str = "1f1b", zero: int = 0, recompute: str = "none", sequence_parallel: bool = False,
                     cp_algorithm: str = "ring", dp_mode: str = "ddp", shard_group_size: int | None = None,
                     layers_per_stage=None, tp=1, dp=1, cp=1, ep=1, micro_batch_size=1,
                     options: EstimateOptions | None = None, inference: bool = False) -> pd.DataFrame:
    """Memory and time of N layouts that share the scalar fields (pp, vpp, schedule, recompute, sp, ...);
    tp, dp, cp, ep, micro_batch_size and zero are int arrays (N,) or scalars. One row per layout.

    The caller guarantees validity (spec/validate.py); rows that do not fit HBM are `feasible=False`
    with a `reason`, never an exception.
    """
    opt = options or EstimateOptions()
    n = int(np.broadcast(np.asarray(tp), np.asarray(dp), np.asarray(cp), np.asarray(ep),
                         np.asarray(micro_batch_size), np.asarray(zero)).size)
    if np.ndim(zero) and (shard_group_size or dp_mode == "dataparallel") and len(np.unique(zero)) > 1:
        # rare combinations: one call per ZeRO stage, rows put back in order
        zero = np.broadcast_to(np.asarray(zero), (n,))
        kw = dict(num_gpus=num_gpus, pp=pp, vpp=vpp, schedule=schedule, recompute=recompute,
                  sequence_parallel=sequence_parallel, cp_algorithm=cp_algorithm, dp_mode=dp_mode,
                  shard_group_size=shard_group_size, layers_per_stage=layers_per_stage, options=opt,
                  inference=inference)
        parts = []
        for zv in np.unique(zero):
            idx = np.flatnonzero(zero == zv)
            sub = evaluate_layouts(model, training, hardware, zero=int(zv),
                                   **{k: np.broadcast_to(np.asarray(v), (n,))[idx] for k, v in
                                      dict(tp=tp, dp=dp, cp=cp, ep=ep, micro_batch_size=micro_batch_size).items()},
                                   **kw)
            parts.append(sub.set_index(idx))
        return pd.concat(parts).sort_index().reset_index(drop=True)
    tp, dp, cp, ep, mbs, zz = (_arr(x, n) for x in (tp, dp, cp, ep, micro_batch_size, zero))
    B, s = training.global_batch_size, training.seq_length
    m = B // (dp * mbs)
    chunks_vpp = vpp if schedule == "interleaved" else 1
    kw_layout = dict(pp=pp, vpp=chunks_vpp, schedule=schedule, layers_per_stage=layers_per_stage)

    # 1. compute per virtual stage per microbatch: (n, S)
    st = stage_compute_times(model, training, hardware=hardware, tp=tp, cp=cp, ep=ep, micro_batch_size=mbs,
                             recompute=recompute, sequence_parallel=sequence_parallel, cp_algorithm=cp_algorithm,
                             roofline=opt.roofline, **kw_layout)
    S = st.forward_s.shape[-1]
    F = np.broadcast_to(st.forward_s, (n, S))
    Bk = np.broadcast_to(st.backward_s + st.recompute_s, (n, S))
    W = np.broadcast_to(st.weight_s, (n, S))
    layers = (st.dense_layers + st.moe_layers).astype(float)  # (S,)
    moe_layers = st.moe_layers.astype(float)

    # 2. communication inside the ops
    ab = training.activation_bytes
    place = dict(order=opt.placement)
    col = lambda x: np.asarray(x, dtype=float)[:, None]  # noqa: E731
    span_tp = group_span(hardware, group="tp", tp=tp, cp=cp, ep=1, dp=dp, pp=pp, **place)
    tpc = comm.tp_comm(hardware, _col_span(span_tp), hidden_size=model.hidden_size, seq_length=s,
                       micro_batch_size=col(mbs), num_layers=layers[None, :], bytes_per_element=ab,
                       sequence_parallel=sequence_parallel, recompute=recompute, cp=col(cp))
    exp_tp_f = (1 - opt.tp_overlap) * np.broadcast_to(tpc.forward_s, (n, S))
    exp_tp_b = (1 - opt.tp_overlap) * np.broadcast_to(tpc.backward_s, (n, S))
    # communication hidden under compute, per op (it may slow that compute: opt.comm_slowdown)
    hid_f = opt.tp_overlap * np.broadcast_to(tpc.forward_s, (n, S))
    hid_b = opt.tp_overlap * np.broadcast_to(tpc.backward_s, (n, S))

    exp_cp_f = exp_cp_b = np.zeros((n, S))
    if (cp > 1).any():
        span_cp = group_span(hardware, group="cp", tp=tp, cp=cp, ep=1, dp=dp, pp=pp, **place)
        cpc = comm.cp_comm(hardware, _col_span(span_cp), seq_length=s, micro_batch_size=col(mbs),
                           num_layers=layers[None, :], kv_hidden=model.num_kv_heads * model.head_dim,
                           hidden_size=model.hidden_size, bytes_per_element=ab, algorithm=cp_algorithm)
        cf, cb = np.broadcast_to(cpc.forward_s, (n, S)), np.broadcast_to(cpc.backward_s, (n, S))
        if cp_algorithm == "ring" and opt.cp_overlap:
            af, abk = _core_attention_s(model, training, hardware, tp, cp, mbs, sequence_parallel, opt.roofline)
            ef = np.maximum(0.0, cf - af[:, None] * layers[None, :])
            eb = np.maximum(0.0, cb - abk[:, None] * layers[None, :])
            hid_f, hid_b = hid_f + (cf - ef), hid_b + (cb - eb)
            cf, cb = ef, eb
        exp_cp_f, exp_cp_b = cf, cb

    exp_ep_f = exp_ep_b = np.zeros((n, S))
    if model.is_moe and (ep > 1).any():
        span_ep = group_span(hardware, group="ep", tp=tp, cp=cp, ep=ep, dp=np.maximum(dp // ep, 1), pp=pp, **place)
        disp_bytes = 1 if training.precision == "fp8" else ab
        epc = comm.ep_comm(hardware, _col_span(span_ep), tokens_per_rank=col(mbs * s / cp / np.where(sequence_parallel, tp, 1)),
                           hidden_size=model.hidden_size, top_k=model.experts_per_token,
                           num_moe_layers=moe_layers[None, :], dispatch_bytes_per_element=disp_bytes,
                           combine_bytes_per_element=ab,
                           capacity_factor=training.moe_capacity_factor or None)
        ov = opt.ep_overlap if opt.ep_overlap is not None else (1.0 if schedule in ("dualpipe", "dualpipev") else 0.0)
        exp_ep_f = (1 - ov) * np.broadcast_to(epc.forward_s, (n, S))
        exp_ep_b = (1 - ov) * np.broadcast_to(epc.backward_s, (n, S))
        hid_f = hid_f + ov * np.broadcast_to(epc.forward_s, (n, S))
        hid_b = hid_b + ov * np.broadcast_to(epc.backward_s, (n, S))

    # parameters per rank (virtual stage -> rank) for DP/ZeRO traffic
    ne_rank, ex_rank = (np.broadcast_to(x, (n, pp)) for x in rank_param_counts(model, tp=tp, ep=ep, **kw_layout))
    M = stage_rank_matrix(pp, chunks_vpp, schedule)  # (S, pp)
    span_dp = group_span(hardware, group="dp", tp=tp, cp=1, ep=1, dp=dp * cp, pp=pp, **place)
    # expert-data-parallel group: dp·cp/ep ranks (Megatron), strided over the expert-parallel block
    span_edp = group_span(hardware, group="dp", tp=tp, cp=1, ep=ep, dp=np.maximum(dp * cp // ep, 1), pp=pp, **place)
    replica = None
    if shard_group_size and (zz >= 1).any():  # then every row has zero >= 1 (mixed stages were split above)
        replica = group_span(hardware, group="dp", tp=tp, cp=cp, ep=1, dp=np.maximum(dp // shard_group_size, 1), pp=pp,
                             **place)
        span_dp = group_span(hardware, group="dp", tp=tp, cp=cp, ep=1, dp=np.full(n, shard_group_size), pp=pp, **place)

    exp_z3_f = exp_z3_b = np.zeros((n, S))
    z3 = (zz == 3)[:, None]
    if z3.any():
        from .cost.compute import stage_rank

        # each chunk's share of its rank's parameters is gathered around that chunk's compute
        ne_stage = ne_rank[:, stage_rank(pp, chunks_vpp, schedule)] / _chunks_per_rank(schedule, vpp)
        z = comm.dp_comm(hardware, _col_span(span_dp), params_per_rank=ne_stage, grad_bytes_per_element=training.grad_bytes,
                         param_bytes_per_element=training.param_bytes, zero=3, num_microbatches=1,
                         bucket_bytes=None, replica_span=None)
        zf, zb = np.broadcast_to(z.forward_s, (n, S)), np.broadcast_to(z.backward_s, (n, S))
        zf, zb = zf * z3, zb * z3  # only the ZeRO-3 rows gather parameters per microbatch
        if opt.zero3_prefetch:
            ef, eb = np.maximum(0.0, zf - F), np.maximum(0.0, zb - (Bk + W))
            hid_f, hid_b = hid_f + (zf - ef), hid_b + (zb - eb)
            zf, zb = ef, eb
        exp_z3_f, exp_z3_b = zf, zb

    # Overlapped communication occupies SMs and slows the compute it hides under (Calculon's
    # `processor_usage`; formulas.md §7.1): that compute takes comm_slowdown × the hidden time longer.
    F_eff = F + exp_tp_f + exp_cp_f + exp_ep_f + exp_z3_f + opt.comm_slowdown * hid_f
    B_eff = Bk + exp_tp_b + exp_cp_b + exp_ep_b + exp_z3_b + opt.comm_slowdown * hid_b
    if schedule not in SPLIT_SCHEDULES:
        B_eff, W_eff = B_eff + W, np.zeros_like(W)
    else:
        W_eff = W

    # PP p2p per stage boundary: one activation (gradient) message over the PP span
    if pp > 1:
        span_pp = group_span(hardware, group="pp", tp=tp, cp=cp, ep=1, dp=dp, pp=pp, **place)
        msg = ab * mbs * (s / cp) * model.hidden_size / np.where(sequence_parallel, tp, 1)
        p2p = C.p2p_s(hardware, msg.astype(float), span_pp)
    else:
        p2p = np.zeros(n)

    # 3. pipeline replay (fast path), per distinct microbatch count
    makespan = np.zeros(n)
    makespan0 = np.zeros(n)
    busy = np.zeros((n, pp))
    inflight = np.zeros((n, pp))
    if opt.pipeline == "analytic" and schedule != "pipedream":
        makespan, makespan0, busy = _analytic_pipeline(schedule, pp, vpp, m, F_eff, B_eff, W_eff, p2p, M)
        inflight = None
    elif schedule == "pipedream":
        per_rank = (F_eff + B_eff + W_eff) @ M
        makespan = m * per_rank.max(axis=1)
        makespan0 = makespan.copy()
        busy = m[:, None] * per_rank
        inflight = np.broadcast_to(np.minimum(pp - np.arange(pp), m[:, None]), (n, pp)).astype(float)
    else:
        from .pipeline import makespan_batch

        for mv in np.unique(m):
            idx = np.flatnonzero(m == mv)
            sched = _compiled(schedule, pp, int(mv), vpp)
            k = len(idx)
            if pp > 1:  # with and without the p2p delays in one call: their difference is the exposed PP time
                r = makespan_batch(sched, np.concatenate([F_eff[idx], F_eff[idx]]), np.concatenate([B_eff[idx], B_eff[idx]]),
                                   np.concatenate([W_eff[idx], W_eff[idx]]), np.concatenate([p2p[idx], np.zeros(k)]))
                makespan[idx], makespan0[idx], busy[idx] = r.makespan_s[:k], r.makespan_s[k:], r.busy_s_per_rank[:k]
            else:
                r = makespan_batch(sched, F_eff[idx], B_eff[idx], W_eff[idx], p2p[idx])
                makespan[idx] = makespan0[idx] = r.makespan_s
                busy[idx] = r.busy_s_per_rank
            inflight[idx] = r.peak_inflight_microbatches_per_rank / _chunks_per_rank(schedule, vpp)

    # 4. data-parallel tail (per rank: its non-expert params over dp·cp, expert params over the EDP group)
    last_bwd = (B_eff + W_eff) @ M  # one microbatch's backward on each rank
    if dp_mode == "dataparallel":
        d = comm.data_parallel_single_process_comm(hardware, n_gpus=dp[:, None], params=ne_rank + ex_rank,
                                                   param_bytes_per_element=training.param_bytes,
                                                   grad_bytes_per_element=training.grad_bytes,
                                                   input_bytes=8.0 * mbs[:, None] * s * m[:, None],
                                                   output_bytes=ab * mbs[:, None] * s * m[:, None] * model.hidden_size)
        dp_tail = np.broadcast_to(d.forward_s + d.backward_s, (n, pp))
    else:
        # DDP: all-reduce of the gradients; ZeRO-1/2 (Megatron distributed optimizer): reduce-scatter of the
        # gradients + all-gather of the updated parameters (formulas.md §4.6, ZeRO §7). Non-expert params
        # over the dp·cp group, expert params over the expert-data-parallel group dp·cp/ep.
        gb, pb = training.grad_bytes, training.param_bytes
        sp_dp, sp_edp = _col_span(span_dp), _col_span(span_edp)
        zc = zz[:, None]
        rs = np.zeros((n, pp))
        ag = np.zeros((n, pp))
        if (zc == 0).any():  # DDP
            ar = C.all_reduce_s(hardware, ne_rank * gb, sp_dp) + C.all_reduce_s(hardware, ex_rank * gb, sp_edp)
            rs = np.where(zc == 0, ar, rs)
        if ((zc == 1) | (zc == 2)).any():  # ZeRO-1/2
            z12 = (zc == 1) | (zc == 2)
            r12 = C.reduce_scatter_s(hardware, ne_rank * gb, sp_dp) + C.reduce_scatter_s(hardware, ex_rank * gb, sp_edp)
            a12 = C.all_gather_s(hardware, ne_rank * pb, sp_dp) + C.all_gather_s(hardware, ex_rank * pb, sp_edp)
            rs = np.where(z12, r12, rs)
            ag = np.where(z12, a12 * (0.0 if opt.param_gather_overlap else 1.0), ag)
        if replica is not None and (zc == 3).any():  # ZeRO-3: per-microbatch traffic is inside the ops;
            rr = C.all_reduce_s(hardware, ne_rank * gb / shard_group_size, _col_span(replica))  # HSDP replica AR
            rs = np.where(zc == 3, rr, rs)
        if opt.grad_reduce_overlap:
            exposed_rs = np.maximum(0.0, rs - last_bwd)
            rs = exposed_rs + opt.comm_slowdown * (rs - exposed_rs)  # the hidden part slows the last backward
        tail = (rs + ag) * (0.0 if dp_mode == "async" else 1.0)
        dp_tail = np.broadcast_to(tail, (n, pp))
    opt_s = np.zeros((n, pp))
    for sharded in np.unique(zz >= 1):  # the optimizer step depends on ZeRO only through sharded or not
        rows_z = np.flatnonzero((zz >= 1) == sharded)
        opt_s[rows_z] = np.broadcast_to(optimizer_step_s(
            model, training, hardware=hardware, tp=tp[rows_z], pp=pp, dp=dp[rows_z], cp=cp[rows_z], ep=ep[rows_z],
            vpp=chunks_vpp, zero=int(sharded), shard_group_size=shard_group_size, schedule=schedule,
            layers_per_stage=layers_per_stage), (len(rows_z), pp))
    tail_rank = dp_tail + opt_s
    step = makespan + tail_rank.max(axis=1)

    # breakdown on the busiest rank
    r_star = np.argmax(busy, axis=1)
    rows = np.arange(n)
    # microbatches each virtual stage runs on a rank that holds it: all m, except DualPipe, whose ranks hold
    # stage r and stage p-1-r and run each for the m/2 microbatches entering from that end
    mb = m / 2.0 if schedule == "dualpipe" else m.astype(float)
    pure = mb * ((F + Bk + W) @ M)[rows, r_star]
    per_cat = {
        "tp": (exp_tp_f + exp_tp_b) @ M, "cp": (exp_cp_f + exp_cp_b) @ M, "ep": (exp_ep_f + exp_ep_b) @ M,
        "zero3": (exp_z3_f + exp_z3_b) @ M,
    }
    exposed = {k: mb * v[rows, r_star] for k, v in per_cat.items()}
    exposed["pp"] = makespan - makespan0
    exposed["dp"] = dp_tail[rows, np.argmax(tail_rank, axis=1)]
    optimizer = opt_s[rows, np.argmax(tail_rank, axis=1)]
    compute_s = pure + optimizer
    exposed_comm = sum(exposed.values())
    bubble_s = step - compute_s - exposed_comm
    with np.errstate(invalid="ignore", divide="ignore"):
        bubble_fraction = np.where(makespan > 0, 1.0 - busy.sum(axis=1) / (pp * makespan), 0.0)

    # 5. memory with the replayed in-flight microbatches
    mem = {}
    for zv in np.unique(zz):
        rz = np.flatnonzero(zz == zv)
        part = stage_memory_arrays(model, training, tp=tp[rz], pp=pp, dp=dp[rz], cp=cp[rz], ep=ep[rz], vpp=chunks_vpp,
                                   micro_batch_size=mbs[rz], num_microbatches=m[rz], zero=int(zv),
                                   shard_group_size=shard_group_size, recompute=recompute,
                                   sequence_parallel=sequence_parallel, schedule=schedule,
                                   layers_per_stage=layers_per_stage, inference=inference,
                                   inflight_per_stage=None if inflight is None else inflight[rz])
        for k in MEMORY_FIELDS:
            if k in part:
                mem.setdefault(k, np.zeros((n, pp)))[rz] = np.broadcast_to(np.asarray(part[k]), (len(rz), pp))
    peak = np.asarray(mem["peak_bytes"])
    worst = np.argmax(peak, axis=1)
    out = {k: np.asarray(mem[k])[rows, worst] for k in MEMORY_FIELDS if k in mem}
    feasible = out["peak_bytes"] <= hardware.hbm_bytes
    reason = _reasons(out, feasible, worst, hardware.hbm_bytes)

    model_flops, hw_flops = step_flops(model, training, recompute=recompute)
    peak_flops = mfu_peak_flops(hardware, training)
    tokens = B * s
    df = pd.DataFrame({
        "tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": ep, "vpp": vpp, "micro_batch_size": mbs,
        "num_microbatches": m, "zero": zz, "recompute": recompute, "sequence_parallel": sequence_parallel,
        "schedule": schedule,
        "step_s": step, "compute_s": compute_s, "exposed_comm_s": exposed_comm, "bubble_s": bubble_s,
        "bubble_fraction": bubble_fraction, "optimizer_s": optimizer,
        **{f"exposed_{k}_s": exposed[k] for k in EXPOSED},
        "tokens_per_s": tokens / step,
        "model_tflops_per_gpu": model_flops / (step * num_gpus) / 1e12,
        "hardware_tflops_per_gpu": hw_flops / (step * num_gpus) / 1e12,
        "mfu": model_flops / (step * num_gpus * peak_flops),
        "hfu": hw_flops / (step * num_gpus * peak_flops),
        **out, "worst_stage": worst, "feasible": feasible, "reason": reason,
    })
    return df


def _analytic_pipeline(schedule, pp, vpp, m, F, B, W, p2p, M):
    """Closed-form makespan (labelled 'analytic'; the replay is the default). With t = the slowest rank's
    F+B+W per microbatch (F, B, W of that rank's stages) and P = p − 1 (formulas.md §5.2):
    GPipe, 1F1B: (m + P)·t (Huang 2019; Narayanan 2021 §2.2.1); interleaved: (m + P/v)·t (§2.2.2);
    ZB-H1: m·t + P·(F + B − W); ZB-H2 and ZB-V: m·t + P·max(0, F + B − 2W) (Qi et al. 2024 §2);
    DualPipe(V): m/2·t_pair + (p/2 − 1)·(F + 2B − 2W) with F&B ≈ F + B (DeepSeek-V3 Table 2; B here is
    the input-gradient part, its "B" is B + W). Plus 2P p2p hops (first forward down, last backward up).
    Exact for uniform stages without p2p (the tests check it against the replay); an approximation otherwise.
    """
    mf = m.astype(float)
    per = (F + B + W) @ M  # (n, pp): per-microbatch busy time of each rank
    r = np.argmax(per, axis=1)
    rows = np.arange(len(mf))
    t = per[rows, r]
    f, b, w = ((X @ M)[rows, r] for X in (F, B, W))
    P = pp - 1.0
    if schedule in ("gpipe", "1f1b"):
        mk0 = (mf + P) * t
    elif schedule == "interleaved":
        f, b, w, t = f / vpp, b / vpp, w / vpp, t / vpp  # per chunk
        mk0 = (vpp * mf + P) * t
    elif schedule == "zb-h1":
        mk0 = mf * t + P * (f + b - w)
    elif schedule in ("zb-h2", "zb-v"):
        if schedule == "zb-v":
            f, b, w = f / 2, b / 2, w / 2
        mk0 = mf * t + P * np.maximum(0.0, f + b - 2 * w)
    else:  # dualpipe, dualpipev: a rank's two chunks; m microbatches in all
        f, b, w = f / 2, b / 2, w / 2
        mk0 = mf / 2 * t + (pp / 2 - 1) * np.maximum(0.0, f + 2 * b - 2 * w)
    mb = mf / 2 if schedule == "dualpipe" else mf
    busy = mb[:, None] * per
    return mk0 + 2 * P * p2p, mk0, busy


def _col_span(span):
    """A GroupSpan whose array fields get a trailing axis, to broadcast against (n, S) stage arrays."""
    kw = {f: (np.asarray(getattr(span, f))[..., None] if np.ndim(getattr(span, f)) else getattr(span, f))
          for f in span.__dataclass_fields__ if f != "group"}
    return replace(span, **kw)


def _core_attention_s(model, training, hardware, tp, cp, mbs, sequence_parallel, roofline):
    """Forward and backward time of one layer's core attention per microbatch, (n,) arrays."""
    ops = layer_op_times(model, training, hardware, tp=tp[:, None].astype(float), cp=cp[:, None].astype(float),
                         micro_batch_size=mbs[:, None].astype(float), sequence_parallel=sequence_parallel,
                         roofline=roofline)
    f = sum(np.asarray(o.forward_s, dtype=float) for o in ops if o.core_attention)
    b = sum(np.asarray(o.backward_s, dtype=float) for o in ops if o.core_attention)
    n = len(tp)
    return np.broadcast_to(np.reshape(f, (-1,))[:n] if np.size(f) >= n else f, (n,)), \
        np.broadcast_to(np.reshape(b, (-1,))[:n] if np.size(b) >= n else b, (n,))


_COMPONENT_LABEL = {"params_bytes": "params", "grads_bytes": "grads", "optimizer_bytes": "optimizer",
                    "activations_bytes": "activations", "kv_cache_bytes": "kv cache", "other_bytes": "other"}


def _reasons(out: dict, feasible: np.ndarray, worst_stage: np.ndarray, hbm_bytes: float) -> np.ndarray:
    """'' where the layout fits; else '<biggest consumer>: X GiB of Y GiB peak > Z GiB HBM (stage i)'."""
    reason = np.full(len(feasible), "", dtype=object)
    bad = np.flatnonzero(~feasible)
    if bad.size == 0:
        return reason
    comps = [k for k in _COMPONENT_LABEL if k in out]
    stack = np.stack([np.asarray(out[k], dtype=float)[bad] for k in comps], axis=1)
    big = np.argmax(stack, axis=1)
    labels = np.array([_COMPONENT_LABEL[k] for k in comps], dtype=object)[big]
    gib = 2.0**30
    big_gib = np.round(stack[np.arange(bad.size), big] / gib, 1).astype(str)
    peak_gib = np.round(np.asarray(out["peak_bytes"], dtype=float)[bad] / gib, 1).astype(str)
    hbm = f"{hbm_bytes / gib:.1f}"
    reason[bad] = (labels + ": " + big_gib.astype(object) + " GiB of " + peak_gib.astype(object) + " GiB peak > "
                   + hbm + " GiB HBM (stage " + worst_stage[bad].astype(str).astype(object) + ")")
    return reason


# ---- one layout --------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Estimate:
    """Memory + time of one layout; `to_dict()` follows DESIGN.md's JSON contract."""

    model: ModelSpec
    training: Training
    layout: Layout
    hardware_name: str
    row: dict
    memory: object  # MemoryResult (per stage)
    pipeline: str = "replayed"  # how the pipeline part was obtained

    def __getattr__(self, name):
        row = object.__getattribute__(self, "row")
        if name in row:
            return row[name]
        raise AttributeError(name)

    @property
    def feasible(self) -> bool:
        return bool(self.row["feasible"])

    @property
    def reason(self) -> str:
        return str(self.row["reason"])

    def to_dict(self) -> dict:
        lay, r = self.layout, self.row
        mem = self.memory.to_dict()["memory"]
        return {
            "model": {"name": self.model.name, "params": self.model.total_params(),
                      "active_params": self.model.active_params()},
            "hardware": self.hardware_name,
            "layout": {"label": lay.label, "num_gpus": lay.num_gpus, "tp": lay.tp, "pp": lay.pp, "dp": lay.dp,
                       "cp": lay.cp, "ep": lay.ep, "vpp": lay.vpp, "zero": lay.zero, "recompute": lay.recompute,
                       "sequence_parallel": lay.sequence_parallel,
                       "micro_batch_size": lay.micro_batch_size, "global_batch_size": self.training.global_batch_size,
                       "num_microbatches": lay.num_microbatches(self.training.global_batch_size),
                       "schedule": lay.schedule},
            "memory": mem,
            "time": {"step_s": r["step_s"], "compute_s": r["compute_s"], "exposed_comm_s": r["exposed_comm_s"],
                     "bubble_s": r["bubble_s"], "bubble_fraction": r["bubble_fraction"],
                     "optimizer_s": r["optimizer_s"],
                     "exposed_comm_by_group_s": {k: r[f"exposed_{k}_s"] for k in EXPOSED},
                     "pipeline": self.pipeline},
            "throughput": {"tokens_per_s": r["tokens_per_s"], "model_tflops_per_gpu": r["model_tflops_per_gpu"],
                           "hardware_tflops_per_gpu": r["hardware_tflops_per_gpu"], "mfu": r["mfu"], "hfu": r["hfu"],
                           "mfu_formula": "PaLM App. B: model FLOPs per step (no recompute, attention "
                                          f"'{self.training.attention_flops}' convention) / (step_s x GPUs x dense "
                                          f"{self.training.precision} peak)"},
            "feasible": self.feasible, "reason": self.reason,
        }


def estimate(model: ModelSpec, training: Training, layout: Layout, hardware, *,
             options: EstimateOptions | None = None) -> Estimate:
    """Memory + step time + throughput of one layout (validated first; InputError on a broken rule)."""
    validate(model, training, layout)
    row = evaluate_layouts(model, training, hardware, num_gpus=layout.num_gpus, pp=layout.pp, vpp=layout.vpp,
                           schedule=layout.schedule, zero=layout.zero, recompute=layout.recompute,
                           sequence_parallel=layout.sequence_parallel, cp_algorithm=layout.cp_algorithm,
                           dp_mode=layout.dp_mode, shard_group_size=layout.shard_group_size,
                           layers_per_stage=layout.layers_per_stage, tp=layout.tp, dp=layout.dp, cp=layout.cp,
                           ep=layout.ep, micro_batch_size=layout.micro_batch_size, options=options).iloc[0].to_dict()
    mem = memory_breakdown(model, training, layout, hardware,
                           inflight_per_stage=replayed_inflight_per_rank(layout, training.global_batch_size))
    how = "replayed schedule (engine fast path)" if (options or EstimateOptions()).pipeline == "replay" \
        else "analytic closed form (formulas.md §5.2)"
    return Estimate(model=model, training=training, layout=layout, hardware_name=getattr(hardware, "name", ""),
                    row=row, memory=mem, pipeline=how)


def estimate_scenario(scenario, *, options: EstimateOptions | None = None) -> Estimate:
    """`estimate` of a loaded Scenario (spec/scenario.py)."""
    if scenario.layout is None:
        raise InputError("the scenario has no [layout]; use `parasim sweep` for a sweep space")
    return estimate(scenario.model, scenario.training, scenario.layout, scenario.hardware, options=options)
