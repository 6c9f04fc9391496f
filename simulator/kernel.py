"""The vectorised kernel: memory + step time + throughput of N layouts, composed from the parts (no
formulas here). `estimate.estimate` is this kernel for one layout; `sweep` runs it over chunks.

Composition (formulas.md §7.4, made concrete):

1. Per (virtual) stage and microbatch, compute times F, B (input gradient + recompute forward), W
   (weight gradient) come from cost/compute.py.
2. Communication inside those ops (cost/comm.py over the links each group spans, cost/topology.py):
   - TP all-reduce / all-gather + reduce-scatter: on the critical path of F and B (Megatron runs them
     between GEMMs); with the stack's `tp_comm_overlap` each collective runs in tp chunks pipelined
     with its GEMM and only the first/last chunk and each chunk's excess are exposed (cost/fsdp.py
     chunked_overlap_exposed_s); an explicit `tp_overlap` fraction overrides it (default: the stack's).
   - CP ring p2p: overlapped with the core-attention kernel of the same layer (Megatron CP); only the
     excess is exposed. Ulysses all-to-all: exposed.
   - EP dispatch/combine all-to-all: exposed, except `ep_overlap` of it (default 1 for dualpipe /
     dualpipev, whose F&B pairs hide it — DeepSeek-V3 §3.2.1 — else 0) and, with the stack's
     `moe_shared_expert_overlap`, what runs beside the shared experts; with `moe_a2a_overlap` (combined 1F1B)
     the share its merged passes hide (cost/moe_overlap.py).
   - ZeRO-3/FSDP parameter all-gathers (forward and backward) and gradient reduce-scatters, one
     collective per FSDP unit (a layer by default), replayed beside the compute on a communication
     stream with the stack's prefetch depth, reshard-after-forward and reduce policy (cost/fsdp.py):
     the first gather and the last reduce of a pass are exposed, and the excess of each unit's
     collectives over its compute; collectives the stack runs once per step (reduce-scatter with
     gradient sync off until the last micro-batch, gathers of parameters kept unsharded across a
     pipelined step) are exposed once, in the tail.
   The exposed parts are added to F and B.
3. The pipeline: the schedule's op order replayed on those durations with the PP p2p time per
   boundary (pipeline.makespan_multi: the engine's exact fast path, all schedule shapes in one
   compiled pass), giving the makespan and the busy time per rank. PipeDream (asynchronous, no
   flush) runs at its steady state: m × the slowest stage's F+B+W.
4. The data-parallel tail: DDP all-reduce / ZeRO-1,2 reduce-scatter (+ parameter all-gather) of the
   gradients, overlapped with the last microbatch's backward when `grad_reduce_overlap` (Megatron
   `--overlap-grad-reduce`); the ZeRO-1/2 parameter all-gather is exposed unless
   `param_gather_overlap`. Asynchronous DP waits for nothing; single-process DataParallel is serial.
5. The optimizer step (memory-bound, cost/compute.py), then the step ends.

Memory (memory/breakdown.py) comes before all of this: it needs only the peak in-flight microbatches
per rank, which the replayed op order fixes whatever the durations (the schedule shape's tables count
them), so a sweep can skip steps 1-5 for the layouts that do not fit (`time_infeasible=False`).

Breakdown (adds up exactly): step_s = compute_s + exposed_comm_s + bubble_s, where, on the busiest
pipeline rank r*: compute_s = m·Σ(F+B+W) + contention_s + optimizer_s (contention_s: the compute's
slowdown under the communication it hides, comm_slowdown × the hidden time); exposed_comm_s = comm inside its ops + the
PP p2p wait (makespan with p2p − makespan without) + the exposed DP tail; bubble_s = the rest of the
makespan (idle waiting on other stages). `bubble_fraction` is the engine's
1 − Σ busy / (ranks × makespan).

MFU/HFU: PaLM App. B — model FLOPs (no recompute; causal convention of `training.attention_flops`)
or executed FLOPs, per step, / (step_s × GPUs × dense peak of the GEMM dtype).

Vectorisation (docs/sweep.md): every layout field is an array; layouts of different pipeline shapes
are padded to a common width (structure.py), per-rank contents are computed per rank class, and every
physical quantity is evaluated once per distinct input it depends on (dedup.py), then gathered to the
rows: per-stage op times once per base row (every field but the ZeRO stage and the schedule, plus the
stage contents), the pipeline once per time row (base row, shape, ZeRO-3 gather exposure).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .batch import LayoutBatch
from .options import EstimateOptions
from .cost.compute import BASIS_KEYS, layer_basis_times_by_mode
from .cost.moe_overlap import combined_1f1b_share
from .cost.variability import slowest_gpu_factor
from .cost.recompute import recomputed_layer_share
from .kernel_throughput import recomputed_share, throughput
from .dedup import categories, distinct_rows, factorize, gather_rows, once_per_distinct
from .frames import text_column
from .kernel_comm import _dp_tail, _grad_accumulation_times, _optimizer_times, _zero3_exposure
from .kernel_layer_comm import _layer_comm
from .kernel_pipeline import family_column, inflight_per_rank, pipeline_times
from .memory.breakdown import stage_memory_arrays
from .memory.overheads import Overheads
from .memory.result import host_verdict, infeasibility_reasons
from .memory.states import model_state_bytes
from .memory.worst import CONSUMER_FIELDS, at_worst_stage
from .spec.model import ModelSpec
from .spec.training import Training
from .structure import pipeline_table

MEMORY_FIELDS = CONSUMER_FIELDS
EXPOSED = ("tp", "cp", "ep", "pp", "dp", "zero3")
HIDDEN = ("tp", "cp", "ep", "dp", "zero3")  # what overlap hid, per group (no p2p: the replay has no overlap of it)
TIME_FIELDS = ("step_s", "compute_s", "exposed_comm_s", "bubble_s", "bubble_fraction", "optimizer_s", "contention_s",
               *(f"exposed_{k}_s" for k in EXPOSED), *(f"hidden_{k}_s" for k in HIDDEN))


def _stage_times(model, training, hardware, opt, cp_algorithm, pt, comm_table, shard_group_size, *, tp, cp, ep, etp,
                 mbs, sp, rec, ep_ov, content, comm_id, gpus, dp, pp, zero, m, shape,
                 recompute_layers: int = 0) -> dict:
    """Per virtual stage and microbatch, (K, S) arrays for K rows: compute F, B (input gradient +
    recompute forward), W (weight gradient) = per-block basis times x the block counts of the stages of
    `content` (`pt.content_counts`; cost/compute.py), and the TP/CP/EP communication inside them (per
    layer: row `comm_id` of `comm_table`, from _layer_comm, times the stage's layers, plus its MoE-layer
    difference `tp_moe_*` times the MoE layers where the experts' etp is not tp): exposed
    forward/backward per category (`tp_f`, `tp_b`, ...) and the part hidden under compute (`hid_f`,
    `hid_b`; by category: TP `hid_t_*`, CP `hid_c_*`, EP `hid_e_*`), which slows it when
    `comm_slowdown` > 0. `recompute_layers` N (full-recompute rows): the recompute forward and its re-run
    TP collectives of min(N, L) of a stage's L layers only (cost/recompute.py recomputed_layer_share).
    `gpus`: the layout's GPU count, whose slowest GPU sets the compute's pace (cost/variability.py
    slowest_gpu_factor, with `opt.gpu_speed_cv`; 1 where that is 0, so as not to split the rows by it).
    W includes adding the new weight gradients into the kept ones where autograd does it
    (kernel_comm._grad_accumulation_times: with dp, pp, zero, the step's m micro-batches and the shape)."""
    k = len(tp)
    comm = {key: v[comm_id] for key, v in comm_table.items()}
    basis = np.zeros((len(BASIS_KEYS), k, 4))
    for (spv,), idx in categories(sp):  # the op times once per SP setting; recompute only changes their sum
        modes = tuple(factorize(rec[idx])[1])
        u, inv = distinct_rows(tp[idx], cp[idx], ep[idx], etp[idx], mbs[idx])  # all they depend on besides the modes
        b = layer_basis_times_by_mode(model, training, hardware, tp=tp[idx[u]], cp=cp[idx[u]], ep=ep[idx[u]],
                                      etp=etp[idx[u]], micro_batch_size=mbs[idx[u]], modes=modes,
                                      sequence_parallel=bool(spv), cp_algorithm=cp_algorithm, roofline=opt.roofline)
        for r in modes:
            sel = rec[idx] == r
            basis[:, idx[sel]] = b[r][:, inv[sel]]
    counts = pt.content_counts(content)  # (k, 4, S)
    keys = [BASIS_KEYS.index(x) for x in ("forward_s", "weight_s", "backward_s", "recompute_s")]
    F, W, Bk, R = np.einsum("knb,nbs->kns", basis[keys], counts)
    if training.stack.grad_accumulation == "autograd":
        W = W + _grad_accumulation_times(model, training, hardware, pt, shard_group_size, tp=tp, cp=cp, ep=ep, dp=dp,
                                         pp=pp, zero=zero, m=m, shape=shape, counts=counts, etp=etp)
    slow = slowest_gpu_factor(opt.gpu_speed_cv, gpus)[:, None]
    F, W, Bk, R = F * slow, W * slow, Bk * slow, R * slow
    mtp = model.mtp_layers * counts[:, 3]  # the head stage's MTP modules: a layer's TP, CP and EP collectives each
    layers = counts[:, 0] + counts[:, 1] + mtp
    moe_layers = counts[:, 1] + (mtp if model.mtp_layer_is_moe else 0.0)
    zeros = np.zeros_like(F)
    tpf = comm["tp_f"][:, None] * layers + comm["tp_moe_f"][:, None] * moe_layers
    tpb = comm["tp_b"][:, None] * layers + comm["tp_moe_b"][:, None] * moe_layers
    # what TP overlap hides: the same share of an MoE layer's TP collectives as of a dense layer's
    hidden_share = [np.divide(comm[h], comm[t], out=np.zeros(k), where=comm[t] > 0) for h, t in
                    (("tp_hid_f", "tp_f"), ("tp_hid_b", "tp_b"))]
    hf = comm["tp_hid_f"][:, None] * layers + (hidden_share[0] * comm["tp_moe_f"])[:, None] * moe_layers
    hb = comm["tp_hid_b"][:, None] * layers + (hidden_share[1] * comm["tp_moe_b"])[:, None] * moe_layers
    rerun = comm["tp_rerun_d"][:, None] * (layers - moe_layers) + comm["tp_rerun_m"][:, None] * moe_layers
    tpb, hb = tpb + rerun, hb + hidden_share[0][:, None] * rerun  # selective recompute's MLP / MoE pairs again
    tpf_layer, hf_layer = tpf / np.maximum(layers, 1.0), hf / np.maximum(layers, 1.0)  # per layer, on average
    tpf = tpf + comm["tp_head_f"][:, None] * counts[:, 3]  # the last stage's logits gather (hf stack)
    share = 1.0
    if recompute_layers:  # full recompute of the first N layers per stage: the others re-run nothing
        full = (np.asarray(rec) == "full")[:, None]
        share = np.where(full, recomputed_layer_share(layers, recompute_layers), 1.0)
        kept = np.where(full, layers * (1.0 - share), 0.0)  # layers whose forward (and its TP comm) is not re-run
        R = R * share
        tpb, hb = tpb - tpf_layer * kept, hb - hf_layer * kept
    out = dict(F=F, B=Bk + R, W=W, tp_f=tpf - hf, tp_b=tpb - hb, hid_f=hf, hid_b=hb,
               cp_f=zeros, cp_b=zeros, ep_f=zeros, ep_b=zeros, hid_t_f=hf, hid_t_b=hb,
               hid_c_f=zeros, hid_c_b=zeros, hid_e_f=zeros, hid_e_b=zeros)
    if (cp > 1).any():
        cf, cb = comm["cp_f"][:, None] * layers, comm["cp_b"][:, None] * layers
        if cp_algorithm == "ring" and opt.cp_overlap:  # ring p2p under the core-attention kernel of the layer
            ef = np.maximum(0.0, cf - comm["att_f"][:, None] * layers)
            eb = np.maximum(0.0, cb - comm["att_b"][:, None] * layers)
            out["hid_c_f"], out["hid_c_b"] = cf - ef, cb - eb
            out["hid_f"], out["hid_b"] = out["hid_f"] + out["hid_c_f"], out["hid_b"] + out["hid_c_b"]
            cf, cb = ef, eb
        out["cp_f"], out["cp_b"] = cf, cb
    if model.is_moe and (ep > 1).any():
        ef = comm["ep_f"][:, None] * moe_layers
        eb = (comm["ep_b"][:, None] + comm["ep_rerun"][:, None] * share) * moe_layers  # (recomputed layers again)
        ov = ep_ov[:, None]  # hidden: the ep_overlap share, then what runs beside the shared experts of the rest
        hef = ov * ef + np.minimum((1 - ov) * ef, comm["ep_sh_f"][:, None] * moe_layers)
        heb = ov * eb + np.minimum((1 - ov) * eb, comm["ep_sh_b"][:, None] * moe_layers)
        out["ep_f"], out["ep_b"], out["hid_e_f"], out["hid_e_b"] = ef - hef, eb - heb, hef, heb
        out["hid_f"], out["hid_b"] = out["hid_f"] + out["hid_e_f"], out["hid_b"] + out["hid_e_b"]
    return out


@dataclass(frozen=True)
class Evaluation:
    """What `evaluate` returns: one row per layout (`rows`, the columns of `evaluate_layouts`), and with
    `per_stage=True` the per-stage memory (`stages`: stage_memory_arrays' (N, P) arrays, P the widest
    pipeline; stage i of row k is valid where i < pp[k]), and with `keep_stage_times=True` the parts the
    step was added from (`stage_times`, _step_times: per-stage F, B, W and communication, the durations
    replayed, p2p, the DP tail's parts, the optimizer per rank; report/step_timeline.py draws them)."""

    rows: pd.DataFrame
    stages: dict | None = None
    stage_times: dict | None = None


def evaluate(model: ModelSpec, training: Training, hardware, batch: LayoutBatch, *,
             options: EstimateOptions | None = None, inference: bool = False, time_infeasible: bool = True,
             per_stage: bool = False, keep_stage_times: bool = False) -> Evaluation:
    """Memory and time of the N layouts of `batch`, one row each, in one vectorised pass.

    Layouts of different pipeline shapes are padded to a common width (structure.pipeline_table);
    the replays of all of them run in one compiled pass (pipeline.makespan_multi), once per distinct
    set of stage times. The caller guarantees validity (spec/validate.py); rows that do not fit HBM
    are `feasible=False` with a `reason`, never an exception. Memory comes first (it needs only the
    schedule shape's in-flight counts); with `time_infeasible=False` the time is worked out only for
    the rows that fit, and the time and throughput columns of the others are NaN (a sweep's default:
    most of a large space does not fit, and its time would be that of a run that cannot start).
    `per_stage=True` keeps every stage's memory (what `estimate` reports), from which the worst stage
    is read (the same values to the last bit as the sweep's worst-stage-only path).
    """
    opt = (options or EstimateOptions()).for_hardware(hardware)
    zz = batch.zero
    if (batch.shard_group_size or batch.dp_mode == "dataparallel") and len(np.unique(zz)) > 1:
        return _per_zero_stage(model, training, hardware, batch, opt, inference, time_infeasible, per_stage)
    tp, dp, cp, ep, mbs, ppa, vppa = batch.tp, batch.dp, batch.cp, batch.ep, batch.micro_batch_size, batch.pp, batch.vpp
    etp = batch.etp
    sched, rec, spa = batch.schedule, batch.recompute, batch.sequence_parallel
    n = len(batch)
    B = training.global_batch_size
    m = batch.num_microbatches(B)
    rec_c = factorize(rec)[0]  # integer codes: grouping by them is much faster than by strings
    chunks = np.where(family_column(sched, "takes_vpp"), vppa, 1)  # the builders' vpp
    pt = pipeline_table(model, schedule=sched, pp=ppa, chunks=chunks, layers_per_stage=batch.layers_per_stage)

    # memory first, with the in-flight microbatches of the replayed schedule order (known from the shape)
    inflight = inflight_per_rank(opt, pt, sched=sched, pp=ppa, chunks=chunks, m=m)
    mem = stage_memory_arrays(model, training, tp=tp, pp=ppa, dp=dp, cp=cp, ep=ep, etp=etp, vpp=chunks,
                              micro_batch_size=mbs, num_microbatches=m, zero=zz,
                              shard_group_size=batch.shard_group_size, recompute=rec,
                              recompute_layers=batch.recompute_layers, recompute_group=batch.recompute_group,
                              dp_mode=batch.dp_mode, sequence_parallel=spa, schedule=sched, inference=inference, inflight_per_stage=inflight,
                              placement=pt.classes, rank_class=pt.rank_class,
                              worst_of=None if per_stage else pt.rank_valid,
                              inflight_key=distinct_rows(pt.shape_index, m)[1],  # in-flight: one per (shape, m)
                              overheads=Overheads.for_stack(training.stack, hardware, inference=inference))
    del inflight  # (N, P): not needed for the time
    stages = None
    if per_stage:
        stages, mem = mem, at_worst_stage(mem, pt.rank_valid)
    worst = mem["worst_stage"]
    out = {k: mem[k] for k in MEMORY_FIELDS}
    feasible = out["peak_bytes"] <= hardware.hbm_bytes
    reason = infeasibility_reasons(out, feasible, worst, hardware.hbm_bytes)
    if training.offload_optimizer or training.offload_params:  # offloaded states against the host's RAM
        feasible, reason = _host_check(model, training, hardware, batch, pt, feasible, reason)

    # then the time, of every row or (time_infeasible=False) of the rows that fit
    every = time_infeasible or feasible.all()
    r = slice(None) if every else np.flatnonzero(feasible)
    t = {k: np.full(n, np.nan) for k in TIME_FIELDS}
    if every or len(r):
        got = _step_times(model, training, hardware, opt, batch.cp_algorithm, batch.dp_mode, batch.shard_group_size,
                          pt if every else pt.take(r), tp=tp[r], dp=dp[r], cp=cp[r], ep=ep[r], etp=etp[r], mbs=mbs[r],
                          zz=zz[r],
                          pp=ppa[r], sched=sched[r], rec=rec[r], rec_c=rec_c[r], sp=spa[r], chunks=chunks[r], m=m[r],
                          keep=keep_stage_times, recompute_layers=batch.recompute_layers)
        for k in TIME_FIELDS:
            t[k][r] = got[k]
    step = t["step_s"]
    return Evaluation(rows=pd.DataFrame({
        "tp": tp, "pp": ppa, "dp": dp, "cp": cp, "ep": ep, "etp": etp, "vpp": vppa, "micro_batch_size": mbs,
        "num_microbatches": m, "zero": zz, "recompute": text_column(rec), "sequence_parallel": spa,
        "schedule": text_column(sched), **t,
        **throughput(model, training, hardware, batch.num_gpus, rec, rec_c, step,
                     recomputed_share(pt, rec, batch.recompute_layers)),
        **out, "worst_stage": worst, "feasible": feasible, "reason": text_column(reason),
    }), stages=stages, stage_times=got.get("stage_times") if every or len(r) else None)


def _host_check(model, training, hardware, batch, pt, feasible, reason):
    """(feasible, reason) with memory.result.host_verdict applied: each row's largest offloaded bytes per
    GPU over its ranks (memory.states.model_state_bytes per rank class) against its share of host RAM."""
    st = model_state_bytes(model, training, pt.classes, tp=batch.tp, dp=batch.dp, cp=batch.cp, ep=batch.ep,
                           zero=batch.zero, shard_group_size=batch.shard_group_size)
    host = pt.of_class(st["host"])
    host = np.where(pt.rank_valid, host, -np.inf)
    stage = np.argmax(host, axis=1)
    return host_verdict(feasible, reason, host[np.arange(len(stage)), stage], stage, hardware)


def _per_zero_stage(model, training, hardware, batch, opt, inference, time_infeasible, per_stage) -> Evaluation:
    """`evaluate` once per ZeRO stage, rows put back in order: with hybrid sharding or single-process
    DataParallel the data-parallel groups of different ZeRO stages differ, and a call sizes its groups
    once (rare combinations)."""
    n = len(batch)
    parts, stage_parts = [], []
    for zv in np.unique(batch.zero):
        idx = np.flatnonzero(batch.zero == zv)
        sub = evaluate(model, training, hardware, batch.take(idx), options=opt, inference=inference,
                       time_infeasible=time_infeasible, per_stage=per_stage)
        parts.append(sub.rows.set_index(idx))
        stage_parts.append((idx, sub.stages))
    rows = pd.concat(parts).sort_index().reset_index(drop=True)
    stages = None
    if per_stage:
        width = max(next(iter(st.values())).shape[1] for _, st in stage_parts)
        stages = {k: np.zeros((n, width)) for k in stage_parts[0][1]}
        for idx, st in stage_parts:
            for k, v in st.items():
                stages[k][idx, :v.shape[1]] = v
    return Evaluation(rows=rows, stages=stages)


def evaluate_layouts(model: ModelSpec, training: Training, hardware, *, num_gpus: int, pp=1, vpp=1,
                     schedule="1f1b", zero=0, recompute="none", sequence_parallel=False,
                     cp_algorithm: str = "ring", dp_mode: str = "ddp", shard_group_size: int | None = None,
                     recompute_layers: int = 0,
                     layers_per_stage=None, tp=1, dp=1, cp=1, ep=1, micro_batch_size=1, etp=None,
                     options: EstimateOptions | None = None, inference: bool = False,
                     time_infeasible: bool = True) -> pd.DataFrame:
    """`evaluate(...).rows` of the layouts given as columns (`LayoutBatch.of_columns`: every layout
    field a scalar or an (N,) array; `layers_per_stage` None, one tuple for every row, or an (N,)
    object array of tuples / "a,b,..." strings / None); the sweep's evaluator."""
    batch = LayoutBatch.of_columns(num_gpus=num_gpus, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, vpp=vpp,
                                   micro_batch_size=micro_batch_size, zero=zero, recompute=recompute,
                                   sequence_parallel=sequence_parallel, schedule=schedule,
                                   layers_per_stage=layers_per_stage, cp_algorithm=cp_algorithm, dp_mode=dp_mode,
                                   shard_group_size=shard_group_size, recompute_layers=recompute_layers)
    return evaluate(model, training, hardware, batch, options=options, inference=inference,
                    time_infeasible=time_infeasible).rows


evaluate_layouts.array_fields = True  # sweep.evaluate_candidates: every layout field may be an array


def _step_times(model, training, hardware, opt, cp_algorithm, dp_mode, shard_group_size, pt, *, tp, dp, cp, ep, etp,
                mbs, zz, pp, sched, rec, rec_c, sp, chunks, m, keep=False, recompute_layers: int = 0) -> dict:
    """Steps 1-5 of the module docstring for K rows with pipeline table `pt`: the step time and its
    breakdown on the busiest rank, (K,) arrays named TIME_FIELDS; with `keep`, also `stage_times`, the
    parts they were added from (`Evaluation.stage_times`)."""
    n = len(tp)
    rows = np.arange(n)
    ep_ov = np.zeros(n)
    if model.is_moe and (ep > 1).any():
        ep_ov = (np.full(n, float(opt.ep_overlap)) if opt.ep_overlap is not None
                 else family_column(sched, "hides_ep_comm").astype(float))

    # 1-2. per-stage op times and the communication inside them, each once per distinct combination of the
    # inputs it declares (dedup.once_per_distinct), then gathered: the per-layer communication, and the
    # stage times of each (its own inputs, the stage contents, the communication row it uses)
    gpus = tp * cp * pp * dp if opt.gpu_speed_cv > 0 else np.ones(n, dtype=np.int64)  # (the slowest GPU's pace)
    cols = dict(tp=tp, cp=cp, ep=ep, etp=etp, dp=dp, mbs=mbs, pp=pp, sp=sp, rec=rec_c, ep_ov=ep_ov,
                content=pt.content_index, shape=pt.shape_index, gpus=gpus)
    c, c_inv = once_per_distinct(_layer_comm, {**cols, "rec": rec}, model=model, training=training,
                                 hardware=hardware, opt=opt, cp_algorithm=cp_algorithm)
    if training.stack.moe_a2a_overlap and model.is_moe:  # the merged passes' share of what a merged pair hides
        cols["ep_ov"] = np.maximum(ep_ov, combined_1f1b_share(pp, chunks, m) * c["ep_pair"][c_inv])
    # the stage times read dp, pp, zero, m and the shape only for autograd's gradient accumulation: elsewhere
    # constants, so as not to split the distinct rows by them
    acc = training.stack.grad_accumulation == "autograd"
    only = {k: v if acc else np.zeros_like(v) + (k in ("dp", "pp", "m"))
            for k, v in (("dp", dp), ("pp", pp), ("zero", zz), ("m", m), ("shape", pt.shape_index))}
    st, b_inv = once_per_distinct(_stage_times, {**cols, "rec": rec, "comm_id": c_inv, **only}, model=model,
                                  training=training, hardware=hardware, opt=opt, cp_algorithm=cp_algorithm, pt=pt,
                                  comm_table=c, shard_group_size=shard_group_size, recompute_layers=recompute_layers)

    z3, z3_id, z3_tail = _zero3_exposure(model, training, hardware, opt, shard_group_size, pt, st, b_inv,
                                         {k: v[zz == 3] for k, v in cols.items()}, np.flatnonzero(zz == 3), n)

    # 3. the pipeline, once per distinct set of what it reads: the stage times (b_inv), the shape (schedule,
    # pp, chunks), the ZeRO-3 exposure, the p2p time (c_inv) and the microbatch count
    T, t_inv = distinct_rows(b_inv, pt.shape_index, z3_id, c_inv, m)
    tl = pipeline_times(opt, pt.take(T), st, b_inv[T], z3, z3_id[T], sched=sched[T],
                         pp=pp[T], chunks=chunks[T], m=m[T], p2p=c["p2p"][c_inv[T]])
    makespan, busy_sum = tl["makespan"][t_inv], tl["busy_sum"][t_inv]
    if not keep:  # the durations replayed are kept for the timeline only (a sweep's are large)
        tl = {k: v for k, v in tl.items() if k not in ("F_eff", "B_eff", "W_eff")}

    # 4. data-parallel tail
    dp_tail, dp_parts = _dp_tail(model, training, hardware, opt, dp_mode, shard_group_size, pt, tl["last_bwd"],
                                 t_inv, {**cols, "zero": zz}, m)
    # 5. the optimizer step
    opt_g, g_inv = once_per_distinct(_optimizer_times, {**cols, "zero": zz}, model=model, training=training,
                                     hardware=hardware, pt=pt, shard_group_size=shard_group_size,
                                     speed_cv=opt.gpu_speed_cv)
    opt_s = pt.of_class(gather_rows(opt_g, g_inv))
    if z3_tail is not None:  # the ZeRO-3 collectives run once per step
        dp_tail = dp_tail + z3_tail
    tail_rank = np.where(pt.rank_valid, dp_tail + opt_s, -np.inf)
    t_star = np.argmax(tail_rank, axis=1)
    step = makespan + tail_rank[rows, t_star]

    # breakdown on the busiest rank (per time row, in _pipeline_times)
    exposed = {k: tl["exposed_" + k][t_inv] for k in ("tp", "cp", "ep", "zero3")}
    exposed["pp"] = makespan - tl["makespan0"][t_inv]
    exposed["dp"] = np.asarray(dp_tail)[rows, t_star]
    if z3_tail is not None:
        exposed["zero3"] = exposed["zero3"] + z3_tail[rows, t_star]
        exposed["dp"] = exposed["dp"] - z3_tail[rows, t_star]
    optimizer = opt_s[rows, t_star]
    compute_s = tl["pure"][t_inv] + optimizer
    exposed_comm = sum(exposed.values())
    bubble_s = step - compute_s - exposed_comm
    with np.errstate(invalid="ignore", divide="ignore"):
        # (clipped at 0: busy time and makespan are summed in different orders, so an idle-free pipeline can
        # come out at -1e-16)
        bubble_fraction = np.where(makespan > 0, np.maximum(0.0, 1.0 - busy_sum / (pp * makespan)), 0.0)
    out = {"step_s": step, "compute_s": compute_s, "exposed_comm_s": exposed_comm, "bubble_s": bubble_s,
           "bubble_fraction": bubble_fraction, "optimizer_s": optimizer, "contention_s": tl["contention"][t_inv],
           **{f"exposed_{k}_s": exposed[k] for k in EXPOSED},
           **{f"hidden_{k}_s": tl["hidden_" + k][t_inv] for k in HIDDEN if k != "dp"},
           "hidden_dp_s": np.asarray(dp_parts["reduce_hidden"])[rows, t_star]}
    if keep:  # the parts, gathered to the rows (Evaluation.stage_times)
        at = z3["rows"] if z3 is not None else np.full(n, -1)
        z3 = {k: np.where((at >= 0)[:, None], v[np.maximum(at, 0)], 0.0) for k, v in (z3 or {}).items() if k != "rows"}
        out["stage_times"] = dict(
            stage={k: gather_rows(v, b_inv) for k, v in st.items()}, zero3=z3, p2p=c["p2p"][c_inv],
            **{k: tl[k][t_inv] for k in ("F_eff", "B_eff", "W_eff", "makespan", "makespan0", "r_star")},
            dp_tail=dp_tail, dp=dp_parts, optimizer=opt_s, tail_rank=t_star, table=pt)
    return out
