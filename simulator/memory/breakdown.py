"""Compose the per-GPU, per-stage memory breakdown (no formulas of its own).

    peak = params + grads + optimizer + activations + kv_cache + other
    params = P·Ψ_rank (+ PipeDream's stashed weight versions, P·Ψ_rank·(in_flight − 1): stashed_weight_bytes)
    other = runtime overheads (overheads.py) + transient ZeRO-3/FSDP gather buffers (states.py)
            + the stack's framework buffers (framework.py: DeepSpeed's, with the activations, and the
              segments its optimizer step keeps cached)
    allocated = max(the larger phase's tensors, states + the framework's step buffers): what
                torch.cuda.max_memory_allocated sees (no context, NCCL or reserve)
The consumers are those alive in the step's larger phase (worst.py `peak_terms`): the activation phase
(without the gradients where the stack frees them between steps and no backward ran before the peak:
states.absent_grad_bytes) or the optimizer step's (all states + the step's own buffers,
states.optimizer_step_bytes; no activations). The training metrics' evaluation after a micro-batch's backward
(head_activations.train_metric_bytes: the kept logits and their log-probabilities) holds the states and no
activations either: it counts in that phase, as the larger of it and the step's buffers.
    activations = in_flight · (per-micro-batch bytes of the rank's layers + embedding extras)
                  + loss_in_flight · (head + logits)
                  [+ max(what a recomputed layer's backward re-creates: the whole layer (full) or its
                         modules' bytes (selective), the loss's backward working set on the head stage)]

Two forms: `stage_memory_arrays` (layout fields as numpy arrays of shape (N,), results of shape
(N, pp); with `worst_of`, only each layout's worst stage: worst.py) for the kernel, and
`memory_breakdown` (one Layout -> MemoryResult, result.py: per-stage breakdowns, the worst stage, the
verdict and `to_dict()` following the JSON contract of DESIGN.md).

Inference (`inference=True`): weights only (no gradients or optimizer state; data parallelism
replicates, ZeRO settings are ignored), a KV cache for global_batch_size/dp sequences of seq_length
tokens (each DP replica serves its share of the batch; pipeline stages hold the cache of their
layers), one layer's forward working set for a micro-batch, and last-token logits on the head rank.
"""
from __future__ import annotations

import numpy as np

from ..dedup import factorize
from ..errors import InputError
from ..schedules import family
from ..spec.layout import SCHEDULES, Layout
from ..spec.model import ModelSpec
from ..spec.placement import stage_placement
from ..spec.rules import RECOMPUTE, check_choices, check_zero
from ..spec.training import Training
from .activations import layer_activation_bytes, layer_weight_grad_bytes
from .head_activations import (embedding_activation_bytes, head_activation_bytes, head_weight_grad_bytes,
                               loss_backward_bytes, train_metric_bytes)
from .framework import pipe_output_bytes, with_framework_terms
from .mode_rows import ModeRows
from .inflight import combined_1f1b_inflight, inflight_microbatches, loss_inflight_microbatches
from .kv_cache import kv_cache_bytes
from .overheads import Overheads, context_bytes
from .result import MemoryResult, memory_result
from .states import absent_grad_bytes, model_state_bytes
from .worst import at_worst_stage, peak_terms, worst_stage_by_class, worst_stage_of_ranks


def _check_inflight(inflight_per_stage, pp: int) -> np.ndarray:
    a = np.asarray(inflight_per_stage, dtype=float)
    if a.ndim == 0 or a.shape[-1] != pp:
        raise InputError(f"inflight_per_stage must have one entry per stage (pp={pp}), got shape {a.shape}")
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise InputError(f"inflight_per_stage must be finite and >= 0, got {a.tolist()}")
    return a

def _without_experts(fn):
    """`fn` via `ModeRows.per_mode`, whose arguments carry the experts' `etp` (the embedding and head have none)."""
    return lambda model, training, etp=None, **kw: fn(model, training, **kw)


def _check_categorical(*, recompute, schedule, zero) -> None:
    check_choices("recompute", recompute, RECOMPUTE)
    check_choices("schedule", schedule, SCHEDULES)
    check_zero(zero)

def stage_activation_split(model: ModelSpec, training: Training, *, tp, pp: int, cp=1, vpp: int = 1,
                           micro_batch_size=1, recompute: str = "none", sequence_parallel: bool = False,
                           schedule: str = "1f1b", layers_per_stage=None, etp=None) -> dict[str, np.ndarray]:
    """Activation bytes of ONE micro-batch on each stage, split for zero-bubble accounting
    (formulas.md §3.5, sail-sg zerobubble/runtime.py): F allocates `forward_bytes`; B frees
    `backward_free_bytes` = forward − weight; W frees `weight_free_bytes` (GEMM inputs and output
    gradients kept for the weight gradient, at most what F allocated). Without a B/W split, B frees
    everything. Shapes (pp,) or (N, pp). Full recompute: F keeps only layer inputs; B re-creates the
    rest, so W's share is capped by F's.
    """
    _check_categorical(recompute=recompute, schedule=schedule, zero=0)
    pl = stage_placement(model, pp=pp, vpp=vpp, schedule=schedule, layers_per_stage=layers_per_stage)
    kw = dict(tp=tp, cp=cp, micro_batch_size=micro_batch_size, sequence_parallel=sequence_parallel)
    a_d = layer_activation_bytes(model, training, recompute=recompute, moe=False, **kw)[..., None]
    a_m = layer_activation_bytes(model, training, recompute=recompute, moe=True, etp=etp, **kw)[..., None]
    w_d = layer_weight_grad_bytes(model, training, moe=False, **kw)[..., None]
    w_m = layer_weight_grad_bytes(model, training, moe=True, etp=etp, **kw)[..., None]
    emb = embedding_activation_bytes(model, training, **kw)[..., None]
    head = head_activation_bytes(model, training, **kw)[..., None]
    w_head = head_weight_grad_bytes(model, training, **kw)[..., None]
    fwd = pl.dense_layers * a_d + pl.moe_layers * a_m + pl.embedding * emb + pl.head * head
    if training.stack.pipe_buffers == "deepspeed":  # the engine keeps the stage output until B (framework.py)
        fwd = fwd + (1 - pl.head) * pipe_output_bytes(model, training, tp=tp, cp=cp,
                                                      micro_batch_size=micro_batch_size)[..., None]
    w = pl.dense_layers * w_d + pl.moe_layers * w_m + pl.head * w_head
    w = np.minimum(w, fwd)
    return {"forward_bytes": fwd, "backward_free_bytes": fwd - w, "weight_free_bytes": w}

def _rank_gather(rank_class, nq: int):
    """(to_rank, width): with rank classes (N, P), terms of a rank's contents are computed per class
    (nq columns) and `to_rank` gathers them to the P ranks; without, the columns are the stages."""
    if rank_class is None:
        return (lambda x: x), nq
    flat = []  # the flat gather index, made on first use (the worst-by-class path needs none)

    def to_rank(x):
        if not flat:
            flat.append(rank_class + (np.arange(len(rank_class)) * nq)[:, None])
        return np.ascontiguousarray(np.broadcast_to(x, (len(rank_class), nq))).ravel()[flat[0]]

    return to_rank, rank_class.shape[-1]


def _inference_terms(model, training, pl, working_set, to_rank, zeros, *, tp, dp, cp, micro_batch_size):
    """(activations, KV cache) per stage in inference: one layer's forward working set plus last-token
    fp32 logits on the head rank, and the KV cache of the stage's layers for global_batch_size/dp
    sequences of seq_length tokens (module docstring)."""
    t = np.asarray(tp, dtype=float)[..., None]
    last_logits = 4.0 * model.vocab_size * np.asarray(micro_batch_size, dtype=float)[..., None] / t
    act = zeros + to_rank(working_set + pl.head * last_logits)
    batch = training.global_batch_size / np.asarray(dp, dtype=float)
    kv = zeros + to_rank(kv_cache_bytes(model, layers=pl.layers, batch=batch, context=training.seq_length,
                                        tp=tp, cp=cp, dtype_bytes=training.activation_bytes))
    return act, kv


def asynchronous_rows(schedule) -> np.ndarray:
    """True where the schedule has no flush (`simulator.schedules.family(name).synchronous` False:
    PipeDream); `schedule` a name or an array of names, result of its shape."""
    names = np.asarray(schedule, dtype=object)
    codes, distinct = factorize(names.ravel())
    flags = np.array([not family(str(x)).synchronous for x in distinct], dtype=bool)
    return flags[codes].reshape(names.shape)


def stashed_weight_bytes(params_bytes, inflight_microbatches) -> np.ndarray:
    """Extra GPU bytes of PipeDream's weight stashing on a rank (Narayanan et al. 2019, SOSP §3.3):

        stash = P·Ψ_rank · max(n − 1, 0)

    with n the microbatches in flight on the rank (the memory model's `inflight_microbatches`, p − r on
    stage r of p when m ≥ p): "the number of weight versions stashed is at most the number of in-flight
    microbatches", one of them the current weights already counted in params_bytes = P·Ψ_rank (the
    weights the rank keeps on the GPU, in the parameter dtype, after any ZeRO-3 sharding). Only the
    weights are versioned: PipeDream stashes weights for the backward of each in-flight microbatch;
    gradients and optimizer state are kept once (§3.3, "weight stashing"). Shapes broadcast."""
    return np.asarray(params_bytes, dtype=float) * np.maximum(np.asarray(inflight_microbatches, dtype=float) - 1.0, 0.0)


def _with_stash(st, to_rank, stash, shape) -> dict:
    """The model states gathered to the ranks (shape (N, P)), the stashed weight versions added to
    'params' (params + stash, once: both memory paths read these same values)."""
    out = {k: np.broadcast_to(to_rank(v), shape) for k, v in st.items()}
    out["params"] = out["params"] + stash
    return out


def _stage_arrays(overheads, st, pl, act, kv, inflight, zeros, to_rank, worst_of, *, tp, pp, dp, cp, ep,
                  to_rank_state=None, grads_off=None, grads_off_allocated=None) -> dict:
    """The per-stage arrays (or, with `worst_of`, the consumers at each layout's worst stage) from the
    model states `st` (per class; per rank with `to_rank_state` the identity), activations, KV cache,
    in-flight counts and the gradients absent at the activation peak (`grads_off`, per rank; None: none):
    the peak and its consumers by `peak_terms` (module docstring). `grads_off_allocated`: those absent from
    the allocated peak where they differ (states.absent_grad_bytes, counter "allocated": ZeRO-2/3 gradients
    set to None; None: the same as grads_off)."""
    to_rank_state = to_rank if to_rank_state is None else to_rank_state
    params, grads, opt, transient, cached, ostep = (
        np.broadcast_to(to_rank_state(st[k]), zeros.shape)
        for k in ("params", "grads", "optimizer", "gather", "cached", "optimizer_step"))
    t = peak_terms(overheads, params, grads, opt, act, kv=kv, gather=transient, cached=cached,
                   ostep=ostep if np.any(ostep) else None, grads_off=grads_off, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep)
    if worst_of is not None:  # the consumers at each layout's worst stage only
        return at_worst_stage({"peak_bytes": t["peak"], "params_bytes": params, "grads_bytes": t["grads"],
                               "optimizer_bytes": opt, "activations_bytes": t["activations"], "kv_cache_bytes": kv,
                               "other_bytes": t["other"]}, worst_of)
    st = {k: to_rank_state(v) for k, v in st.items()
          if k not in ("params", "grads", "optimizer", "gather", "cached", "optimizer_step")}
    params, opt, transient = (zeros + x for x in (params, opt, transient))
    tensor = t["tensor"] if grads_off_allocated is None else peak_terms(
        overheads, params, grads, opt, act, kv=kv, gather=transient, cached=cached,
        ostep=ostep if np.any(ostep) else None, grads_off=grads_off_allocated, tp=tp, pp=pp, dp=dp, cp=cp,
        ep=ep)["tensor"]
    step = params + grads + opt + st["step"]  # the framework's step phase (framework.py)
    if overheads.blas_workspace_bytes:
        step = step + overheads.blas_workspace_bytes
    allocated = np.maximum(tensor, step)  # the larger phase
    ctx = zeros + np.asarray(context_bytes(overheads, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep))[..., None]
    return {"params_bytes": params, "grads_bytes": zeros + t["grads"], "optimizer_bytes": opt,
            "activations_bytes": zeros + t["activations"], "kv_cache_bytes": kv, "other_bytes": zeros + t["other"],
            "peak_bytes": zeros + t["peak"], "host_bytes": zeros + st["host"],
            "overhead_bytes": zeros + t["overhead"], "transient_bytes": transient, "inflight_microbatches": inflight,
            "layers": zeros + to_rank(pl.layers), "params": zeros + st["params_count"],
            "framework_bytes": zeros + st["framework"], "context_bytes": ctx, "allocated_bytes": allocated,
            "optimizer_step_bytes": zeros + ostep}


def stage_memory_arrays(model: ModelSpec, training: Training, *, tp, pp: int, dp, cp=1, ep=1, etp=None, vpp: int = 1,
                        micro_batch_size=1, num_microbatches=1, zero: int = 0,
                        shard_group_size: int | None = None, recompute: str = "none",
                        sequence_parallel: bool = False, schedule: str = "1f1b", layers_per_stage=None,
                        inference: bool = False, inflight_per_stage=None,
                        overheads: Overheads | None = None, placement=None, rank_class=None,
                        worst_of=None, inflight_key=None, recompute_layers: int = 0, recompute_group: int = 1,
                        dp_mode: str = "ddp") -> dict[str, np.ndarray]:
    """Per-stage memory of many layouts at once (vectorisation contract of the sweep).

    tp, dp, cp, ep, etp (the routed experts' tensor-parallel degree; None: tp), micro_batch_size,
    num_microbatches, zero, schedule, recompute and sequence_parallel are scalars or arrays of shape (N,) (dp_mode
    a scalar: DDP keeps its bucket copy of the gradients, memory/states.py `ddp_bucket_bytes`). The pipeline shape
    comes from pp, vpp, schedule and layers_per_stage (scalars), or from `placement`: a StagePlacement whose arrays are
    (N, P) (structure.pipeline_table pads layouts of different pp to P ranks; pp is then (N,)).
    With `rank_class` (N, P), `placement` holds one column per rank class (structure.PipelineTable):
    model states and per-microbatch activations are computed per class and gathered to the ranks.
    Every returned array has shape (pp,) or (N, pp) (P with `placement`):
    params_bytes, grads_bytes, optimizer_bytes, activations_bytes, kv_cache_bytes, other_bytes,
    peak_bytes, host_bytes, overhead_bytes, transient_bytes, inflight_microbatches, layers, params.
    With `worst_of` (a mask of the real stages, shape of the result), only each layout's worst stage
    (highest peak among them, the first on ties): `worst_stage` and the six consumers and peak there,
    shape (N,) — what a sweep keeps, without building the other per-stage arrays. With rank classes,
    `worst_of`, `inflight_per_stage` and `inflight_key` ((N,) integers; rows with equal keys have equal
    in-flight, rank-class and `worst_of` rows, e.g. one key per schedule shape and microbatch count),
    the worst stage is found per class (`worst_stage_by_class`), never building (N, P) arrays.
    (Longer than most: that shortcut takes the training terms per class, between computing them and
    gathering them to the ranks, so they stay in one scope.)
    """
    overheads = Overheads.for_stack(training.stack) if overheads is None else overheads
    _check_categorical(recompute=recompute, schedule=schedule, zero=zero)
    pl = placement if placement is not None else stage_placement(model, pp=pp, vpp=vpp, schedule=schedule,
                                                                 layers_per_stage=layers_per_stage)
    etp = tp if etp is None else etp
    st = model_state_bytes(model, training, pl, tp=tp, dp=dp, cp=cp, ep=ep, etp=etp, zero=zero, dp_mode=dp_mode,
                           shard_group_size=shard_group_size, inference=inference, pp=pp,
                           num_microbatches=num_microbatches)
    st = with_framework_terms(st, model, training, pl, tp=tp, dp=dp, cp=cp, zero=zero,
                              micro_batch_size=micro_batch_size, inference=inference)
    if training.stack.train_metric_losses and not inference:  # a phase with the states only, as the step's buffers
        metric = train_metric_bytes(model, training, tp=tp, cp=cp, micro_batch_size=micro_batch_size)[..., None]
        st = {**st, "optimizer_step": np.maximum(st["optimizer_step"], pl.head * metric)}
    to_rank, width = _rank_gather(rank_class, int(np.shape(pl.layers)[-1]))
    shape = np.broadcast_shapes(*(np.shape(x) for x in (tp, dp, cp, ep, micro_batch_size, num_microbatches)))
    shape = shape + (width,)
    kw = dict(tp=tp, cp=cp, micro_batch_size=micro_batch_size, etp=etp)
    has_dense = (pl.dense_layers > 0)
    has_moe = (pl.moe_layers > 0)
    to_rank_state = None  # the identity once the states are per rank (PipeDream's stashed weights)

    modes = ModeRows(recompute, sequence_parallel, kw)

    def per_mode(fn, rc=None, **extra):  # fn(recompute?, sequence_parallel) for scalar or per-row modes
        return modes.per_mode(fn, model, training, rc, **extra)

    def none_bytes():  # one layer's bytes without recompute, dense and MoE
        return tuple(per_mode(layer_activation_bytes, rc="none", moe=m)[..., None] for m in (False, True))

    def working_set():
        wd, wm = none_bytes()
        return np.maximum(wd * has_dense, wm * has_moe)

    if inference:
        zeros = np.zeros(shape)
        act, kv = _inference_terms(model, training, pl, working_set(), to_rank, zeros, tp=tp, dp=dp, cp=cp,
                                   micro_batch_size=micro_batch_size)
        inflight, grads_off, grads_off_allocated = zeros + 1.0, None, None
    else:
        # (a read-only view of the given counts: the per-class path below reads them, never copies them)
        inflight = np.broadcast_to(_check_inflight(inflight_per_stage, width) if inflight_per_stage is not None
                                   else inflight_microbatches(schedule, pp=pp, num_microbatches=num_microbatches,
                                                              vpp=vpp), shape)
        if training.stack.moe_a2a_overlap:  # its extra warm-up forward
            inflight = np.broadcast_to(combined_1f1b_inflight(inflight, pp=pp, vpp=vpp,
                                                              num_microbatches=num_microbatches), shape)
        a_d = per_mode(layer_activation_bytes, moe=False)[..., None]
        a_m = per_mode(layer_activation_bytes, moe=True)[..., None]
        if recompute_layers and np.any(np.asarray(recompute) == "full"):  # the other layers keep everything
            a_d, a_m = (_block_recompute(a, per_mode(layer_activation_bytes, rc="none", moe=moe)[..., None], pl,
                                         recompute, recompute_layers) for a, moe in ((a_d, False), (a_m, True)))
        group = _grouped(pl, recompute, recompute_group)  # (1, 1 where no group of layers shares a checkpoint)
        a_d, a_m = a_d * group[0], a_m * group[0]
        emb = per_mode(_without_experts(embedding_activation_bytes), rc=False)[..., None]
        head = per_mode(_without_experts(head_activation_bytes), rc=False)[..., None]
        loss_m = np.asarray(loss_inflight_microbatches(schedule, num_microbatches=num_microbatches))[..., None]
        per_mb = pl.dense_layers * a_d + pl.moe_layers * a_m + pl.embedding * emb  # one microbatch's bytes
        if model.mtp_layers:  # the MTP modules' layers, on the head stage, of the last layer's kind
            per_mb = per_mb + pl.head * model.mtp_layers * (a_m if model.mtp_layer_is_moe else a_d)
        if training.stack.pipe_buffers == "deepspeed":  # the engine keeps each stage output (framework.py)
            per_mb = per_mb + (1 - pl.head) * pipe_output_bytes(model, training, tp=tp, cp=cp,
                                                                micro_batch_size=micro_batch_size)[..., None]
        full = np.isin(np.asarray(recompute), ("full", "op"))
        rebuilt = None  # what one layer's backward re-creates: the whole layer (full, op) or its modules (selective)
        if full.any() or np.any(np.asarray(recompute) == "selective"):
            wd, wm = none_bytes()
            part = np.maximum((wd - a_d) * has_dense, (wm - a_m) * has_moe)
            rebuilt = np.where(full[..., None] if full.ndim else full,
                               np.maximum(wd * has_dense, wm * has_moe) * group[1], part)
            rebuilt = rebuilt if rebuilt.any() else None
        # the loss's backward working set, once, on the head stage (0 for losses without one:
        # loss_backward_bytes); it and a full-recompute layer's working set are never alive together: the
        # larger counts
        loss = loss_backward_bytes(model, training, tp=tp, cp=cp, micro_batch_size=micro_batch_size)[..., None]
        loss = loss if np.any(loss) else None
        stashing = asynchronous_rows(schedule)
        if stashing.any():  # PipeDream: weight versions per rank, so the states are per rank, not per class
            stash = stashed_weight_bytes(to_rank(st["params"]), inflight) * stashing[..., None]
            st, to_rank_state = _with_stash(st, to_rank, stash, shape), (lambda x: x)
        grads_off = grads_off_allocated = None
        if training.stack.grad_buffer == "set-to-none":  # (persistent buffers: nothing to gather)
            rank = to_rank_state or to_rank  # DDP's bucket copy stays allocated: only the .grad tensors are freed
            kw_off = dict(inflight=inflight, num_microbatches=num_microbatches, zero=zero)
            g_rank = np.broadcast_to(rank(st["grads"] - st["grad_buckets"]), shape)
            off = absent_grad_bytes(g_rank, training.stack, **kw_off)
            grads_off = off if np.any(off) else None
            if np.any(np.asarray(zero) >= 2):  # sharded gradients leave the allocated peak, not the reserved one
                off_a = absent_grad_bytes(g_rank, training.stack, counter="allocated", **kw_off)
                grads_off_allocated = off_a if np.any(off_a != off) else None
        if (worst_of is not None and rank_class is not None and inflight_key is not None
                and inflight_per_stage is not None and to_rank_state is None and grads_off is None):
            ws = rebuilt
            if loss is not None:
                ws = pl.head * loss if ws is None else np.maximum(ws, pl.head * loss)
            got = worst_stage_by_class(overheads, st, per_mb, pl.head * head, ws, loss_m, inflight, inflight_key,
                                       rank_class, worst_of, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep)
            if got is not None:
                return got
        act = inflight * to_rank(per_mb)
        act = act + np.minimum(loss_m, np.maximum(inflight, 1.0)) * to_rank(pl.head * head)  # head: 0 or 1
        extra = to_rank(rebuilt) if rebuilt is not None else None
        if loss is not None:
            extra = to_rank(pl.head * loss) if extra is None else np.maximum(extra, to_rank(pl.head * loss))
        if extra is not None:
            act = act + extra
        zeros = np.zeros(shape)
        kv, inflight = zeros, zeros + inflight
    if worst_of is not None and rank_class is not None and not inference:
        if to_rank_state is not None:  # states per rank: each rank its own class
            return worst_stage_of_ranks(overheads, st, act, to_rank_state, np.broadcast_to(np.arange(width), shape),
                                        worst_of, grads_off=grads_off, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep)
        return worst_stage_of_ranks(overheads, st, act, to_rank, rank_class, worst_of, grads_off=grads_off, tp=tp,
                                    pp=pp, dp=dp, cp=cp, ep=ep)
    return _stage_arrays(overheads, st, pl, act, kv, inflight, zeros, to_rank, worst_of,
                         tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, to_rank_state=to_rank_state, grads_off=grads_off,
                         grads_off_allocated=grads_off_allocated)


def _block_recompute(a_full, a_none, pl, recompute, recompute_layers: int) -> np.ndarray:
    """Per-layer bytes of a rank whose chunks recompute only their first `recompute_layers` layers (full
    recompute): share·a_full + (1 − share)·a_none, share = recomputed_layer_share of a chunk's layers
    (cost/recompute.py; the rank's layers spread evenly over its chunks). Rows without full recompute
    keep `a_full` (their own mode's bytes)."""
    from ..cost.recompute import recomputed_layer_share

    chunks = np.maximum(np.asarray(getattr(pl, "chunks", 1), dtype=float), 1.0)
    chunks = chunks[..., None] if chunks.ndim else chunks
    share = recomputed_layer_share(np.asarray(pl.layers, dtype=float) / chunks, recompute_layers)
    full = np.asarray(recompute) == "full"
    full = full[..., None] if full.ndim else full
    return np.where(full, share * a_full + (1.0 - share) * a_none, a_full)


def _grouped(pl, recompute, recompute_group: int):
    """(checkpoint share, layers re-created at once) of full recompute with a checkpoint every N = `recompute_group`
    layers (Megatron --recompute-method uniform --recompute-num-layers N: `checkpoint` over each group of N layers
    of a chunk): a chunk of L layers keeps ceil(L/N) layer inputs instead of L, ceil(L/N)/L of the per-layer bytes;
    its backward re-creates a whole group, min(N, L) layers, before it frees them. (1, 1) for N = 1 and the rows
    without full recompute."""
    if recompute_group <= 1:
        return 1.0, 1.0
    chunks = np.maximum(np.asarray(getattr(pl, "chunks", 1), dtype=float), 1.0)
    L = np.asarray(pl.layers, dtype=float) / (chunks[..., None] if chunks.ndim else chunks)
    full = np.asarray(recompute) == "full"
    full = full[..., None] if full.ndim else full
    share = np.divide(np.ceil(L / recompute_group), L, out=np.ones_like(L), where=L > 0)
    return np.where(full, share, 1.0), np.where(full, np.maximum(np.minimum(float(recompute_group), L), 1.0), 1.0)


def memory_breakdown(model: ModelSpec, training: Training, layout: Layout, hardware=None, *,
                     inference: bool = False, inflight_per_stage=None,
                     overheads: Overheads | None = None) -> MemoryResult:
    """Per-stage memory of one layout and its verdict against `hardware.hbm_bytes` (None: no verdict,
    feasible=True, reason 'no hardware given'). Overheads default to the stack's CUDA context and the hardware's
    BLAS workspaces (`Overheads.for_stack`)."""
    if overheads is None:
        overheads = Overheads.for_stack(training.stack, hardware, inference=inference)
    arrays = stage_memory_arrays(
        model, training, tp=layout.tp, pp=layout.pp, dp=layout.dp, cp=layout.cp, ep=layout.ep, vpp=layout.vpp,
        micro_batch_size=layout.micro_batch_size, num_microbatches=layout.num_microbatches(training.global_batch_size),
        zero=layout.zero, shard_group_size=layout.shard_group_size, recompute=layout.recompute,
        recompute_layers=layout.recompute_layers, recompute_group=layout.recompute_group,
        sequence_parallel=layout.sequence_parallel, schedule=layout.schedule,
        layers_per_stage=layout.layers_per_stage, inference=inference, inflight_per_stage=inflight_per_stage,
        overheads=overheads, dp_mode=layout.dp_mode)
    return memory_result(arrays, model, training, layout, hardware, inference=inference)
