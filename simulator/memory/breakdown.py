"""Compose the per-GPU, per-stage memory breakdown (no formulas of its own).

    peak = params + grads + optimizer + activations + kv_cache + other
    other = runtime overheads (overheads.py) + transient ZeRO-3/FSDP gather buffers (states.py)
    activations = in_flight · (per-micro-batch bytes of the rank's layers + embedding extras)
                  + loss_in_flight · (head + logits)
                  [+ max(one layer's working set with full recompute, the loss's backward working set
                         on the head stage with cross_entropy = "torch-fp32")]

Two forms: `stage_memory_arrays` (numeric layout fields as numpy arrays of shape (N,), categorical
fields scalar, results of shape (N, pp)) for sweeps, and `memory_breakdown` (one Layout ->
MemoryResult with a per-stage list, the worst stage, a feasibility verdict and `to_dict()` following
the JSON contract of DESIGN.md).

Inference (`inference=True`): weights only (no gradients or optimizer state; data parallelism
replicates, ZeRO settings are ignored), a KV cache for global_batch_size/dp sequences of seq_length
tokens (each DP replica serves its share of the batch; pipeline stages hold the cache of their
layers), one layer's forward working set for a micro-batch, and last-token logits on the head rank.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

import numpy as np

from ..dedup import distinct_rows, factorize, gather_rows
from ..errors import InputError
from ..spec.layout import SCHEDULES, Layout
from ..spec.rules import RECOMPUTE, check_choices, check_zero
from ..spec.model import ModelSpec
from ..spec.training import Training
from .activations import (embedding_activation_bytes, head_activation_bytes, head_weight_grad_bytes,
                          layer_activation_bytes, layer_weight_grad_bytes, loss_backward_bytes)
from .inflight import inflight_microbatches, loss_inflight_microbatches
from .kv_cache import kv_cache_bytes
from .overheads import Overheads, overhead_bytes
from ..spec.placement import stage_placement
from .states import model_state_bytes

CONSUMERS = ("params", "grads", "optimizer", "activations", "kv_cache", "other")


def _check_inflight(inflight_per_stage, pp: int) -> np.ndarray:
    a = np.asarray(inflight_per_stage, dtype=float)
    if a.ndim == 0 or a.shape[-1] != pp:
        raise InputError(f"inflight_per_stage must have one entry per stage (pp={pp}), got shape {a.shape}")
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise InputError(f"inflight_per_stage must be finite and >= 0, got {a.tolist()}")
    return a


class _ModeRows:
    """The distinct rows of (recompute, SP, the array-valued `kw`) of N layouts, found once: per-row
    activation terms are then evaluated on those rows only and gathered back (`per_mode`)."""

    def __init__(self, recompute, sequence_parallel, kw: dict):
        self.kw = kw
        self.scalar = np.ndim(recompute) == 0 and np.ndim(sequence_parallel) == 0
        if self.scalar:
            self.recompute, self.sp = recompute, sequence_parallel
            return
        n = max(len(np.atleast_1d(x)) for x in (recompute, sequence_parallel))
        rc = np.broadcast_to(np.asarray(recompute, dtype=object), (n,))
        sp = np.broadcast_to(np.asarray(sequence_parallel, dtype=bool), (n,))
        rc_code = factorize(rc)[0]
        cols = [np.broadcast_to(np.asarray(v), (n,)) for v in kw.values() if np.ndim(v)]
        first, self.inv = distinct_rows(rc_code, sp, *cols)
        self.recompute, self.sp = rc[first], sp[first]
        self.args = {k: (np.broadcast_to(np.asarray(v), (n,))[first] if np.ndim(v) else v) for k, v in kw.items()}
        self.modes = rc_code[first] * 2 + self.sp

    def per_mode(self, fn, model, training, rc=None, **extra) -> np.ndarray:
        """fn(model, training, recompute=..., sequence_parallel=..., **kw) per layout, once per distinct
        (recompute, SP) pair (rc: a scalar recompute for every row; False: fn takes no recompute)."""
        def call(r, sp, args):
            r = {} if r is False else {"recompute": r}
            return np.asarray(fn(model, training, sequence_parallel=bool(sp), **r, **args, **extra), dtype=float)

        if self.scalar:
            return call(self.recompute if rc is None else rc, self.sp, self.kw)
        vals = np.empty(len(self.modes))
        for c in np.unique(self.modes):
            idx = np.flatnonzero(self.modes == c)
            args = {k: (v[idx] if np.ndim(v) else v) for k, v in self.args.items()}
            vals[idx] = np.broadcast_to(call(self.recompute[idx[0]] if rc is None else rc, self.sp[idx[0]], args),
                                        (len(idx),))
        return vals[self.inv]


def _check_categorical(*, recompute, schedule, zero) -> None:
    check_choices("recompute", recompute, RECOMPUTE)
    check_choices("schedule", schedule, SCHEDULES)
    check_zero(zero)


def stage_activation_split(model: ModelSpec, training: Training, *, tp, pp: int, cp=1, vpp: int = 1,
                           micro_batch_size=1, recompute: str = "none", sequence_parallel: bool = False,
                           schedule: str = "1f1b", layers_per_stage=None) -> dict[str, np.ndarray]:
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
    a_m = layer_activation_bytes(model, training, recompute=recompute, moe=True, **kw)[..., None]
    w_d = layer_weight_grad_bytes(model, training, moe=False, **kw)[..., None]
    w_m = layer_weight_grad_bytes(model, training, moe=True, **kw)[..., None]
    emb = embedding_activation_bytes(model, training, **kw)[..., None]
    head = head_activation_bytes(model, training, **kw)[..., None]
    w_head = head_weight_grad_bytes(model, training, **kw)[..., None]
    fwd = pl.dense_layers * a_d + pl.moe_layers * a_m + pl.embedding * emb + pl.head * head
    w = pl.dense_layers * w_d + pl.moe_layers * w_m + pl.head * w_head
    w = np.minimum(w, fwd)
    return {"forward_bytes": fwd, "backward_free_bytes": fwd - w, "weight_free_bytes": w}


def stage_memory_arrays(model: ModelSpec, training: Training, *, tp, pp: int, dp, cp=1, ep=1, vpp: int = 1,
                        micro_batch_size=1, num_microbatches=1, zero: int = 0,
                        shard_group_size: int | None = None, recompute: str = "none",
                        sequence_parallel: bool = False, schedule: str = "1f1b", layers_per_stage=None,
                        inference: bool = False, inflight_per_stage=None,
                        overheads: Overheads | None = None, placement=None, rank_class=None,
                        worst_of=None, inflight_key=None) -> dict[str, np.ndarray]:
    """Per-stage memory of many layouts at once (vectorisation contract of the sweep).

    tp, dp, cp, ep, micro_batch_size, num_microbatches, zero, schedule, recompute and
    sequence_parallel are scalars or arrays of shape (N,). The pipeline shape comes from pp, vpp,
    schedule and layers_per_stage (scalars), or from `placement`: a StagePlacement whose arrays are
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
    the worst stage is found per class (`_worst_by_class`), never building (N, P) arrays.
    """
    overheads = Overheads() if overheads is None else overheads
    _check_categorical(recompute=recompute, schedule=schedule, zero=zero)
    pl = placement if placement is not None else stage_placement(model, pp=pp, vpp=vpp, schedule=schedule,
                                                                 layers_per_stage=layers_per_stage)
    st = model_state_bytes(model, training, pl, tp=tp, dp=dp, cp=cp, ep=ep, zero=zero,
                           shard_group_size=shard_group_size, inference=inference)
    if rank_class is not None:  # terms of a rank's contents are computed per class, then gathered to the ranks
        nq = np.shape(pl.layers)[-1]
        width = rank_class.shape[-1]
        flat = []  # the flat gather index, made on first use (the worst-by-class path needs none)

        def to_rank(x):
            if not flat:
                flat.append(rank_class + (np.arange(len(rank_class)) * nq)[:, None])
            return np.ascontiguousarray(np.broadcast_to(x, (len(rank_class), nq))).ravel()[flat[0]]
    else:
        width = int(np.shape(pl.layers)[-1])

        def to_rank(x):
            return x
    shape = np.broadcast_shapes(*(np.shape(x) for x in (tp, dp, cp, ep, micro_batch_size, num_microbatches)))
    shape = shape + (width,)
    kw = dict(tp=tp, cp=cp, micro_batch_size=micro_batch_size)
    has_dense = (pl.dense_layers > 0)
    has_moe = (pl.moe_layers > 0)

    modes = _ModeRows(recompute, sequence_parallel, kw)

    def per_mode(fn, rc=None, **extra):  # fn(recompute?, sequence_parallel) for scalar or per-row modes
        return modes.per_mode(fn, model, training, rc, **extra)

    def working_set():
        wd = per_mode(layer_activation_bytes, rc="none", moe=False)[..., None]
        wm = per_mode(layer_activation_bytes, rc="none", moe=True)[..., None]
        return np.maximum(wd * has_dense, wm * has_moe)

    if inference:
        t = np.asarray(tp, dtype=float)[..., None]
        last_logits = 4.0 * model.vocab_size * np.asarray(micro_batch_size, dtype=float)[..., None] / t
        zeros = np.zeros(shape)
        act = zeros + to_rank(working_set() + pl.head * last_logits)
        batch = training.global_batch_size / np.asarray(dp, dtype=float)
        kv = zeros + to_rank(kv_cache_bytes(model, layers=pl.layers, batch=batch, context=training.seq_length,
                                            tp=tp, cp=cp, dtype_bytes=training.activation_bytes))
        inflight = zeros + 1.0
    else:
        # (a read-only view of the given counts: the per-class path below reads them, never copies them)
        inflight = np.broadcast_to(_check_inflight(inflight_per_stage, width) if inflight_per_stage is not None
                                   else inflight_microbatches(schedule, pp=pp, num_microbatches=num_microbatches,
                                                              vpp=vpp), shape)
        a_d = per_mode(layer_activation_bytes, moe=False)[..., None]
        a_m = per_mode(layer_activation_bytes, moe=True)[..., None]
        emb = per_mode(embedding_activation_bytes, rc=False)[..., None]
        head = per_mode(head_activation_bytes, rc=False)[..., None]
        loss_m = np.asarray(loss_inflight_microbatches(schedule, num_microbatches=num_microbatches))[..., None]
        per_mb = pl.dense_layers * a_d + pl.moe_layers * a_m + pl.embedding * emb  # one microbatch's bytes
        full = np.asarray(recompute) == "full"
        # the loss's backward working set, once, on the head stage (0 unless training.cross_entropy is
        # torch-fp32); it and a full-recompute layer's working set are never alive together: the larger counts
        loss = None
        if training.cross_entropy == "torch-fp32":
            loss = loss_backward_bytes(model, training, tp=tp, cp=cp, micro_batch_size=micro_batch_size)[..., None]
        if (worst_of is not None and rank_class is not None and inflight_key is not None
                and inflight_per_stage is not None):
            ws = working_set() * (full[..., None] if full.ndim else 1.0) if full.any() else None
            if loss is not None:
                ws = pl.head * loss if ws is None else np.maximum(ws, pl.head * loss)
            got = _worst_by_class(overheads, st, per_mb, pl.head * head, ws, loss_m, inflight, inflight_key,
                                  rank_class, worst_of, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep)
            if got is not None:
                return got
        act = inflight * to_rank(per_mb)
        act = act + np.minimum(loss_m, np.maximum(inflight, 1.0)) * to_rank(pl.head * head)  # head: 0 or 1
        extra = to_rank(working_set()) * (full[..., None] if full.ndim else 1.0) if full.any() else None
        if loss is not None:
            extra = to_rank(pl.head * loss) if extra is None else np.maximum(extra, to_rank(pl.head * loss))
        if extra is not None:
            act = act + extra
        zeros = np.zeros(shape)
        kv, inflight = zeros, zeros + inflight
    if worst_of is not None and rank_class is not None and not inference:
        return _worst_stage(overheads, st, act, to_rank, rank_class, worst_of, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep)
    params, grads, opt, transient = (np.broadcast_to(to_rank(st[k]), zeros.shape)
                                     for k in ("params", "grads", "optimizer", "gather"))
    tensor = params + grads + opt + act + kv + transient
    over = overhead_bytes(overheads, tensor_bytes=tensor, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep)
    other = transient + over
    peak = params + grads + opt + act + kv + other
    if worst_of is not None:  # the consumers at each layout's worst stage only
        w = np.argmax(np.where(worst_of, peak, -np.inf), axis=-1)

        def at_worst(x):
            return np.take_along_axis(np.broadcast_to(x, zeros.shape), w[..., None], axis=-1)[..., 0]

        return {"worst_stage": w, "peak_bytes": at_worst(peak), **{name: at_worst(x) for name, x in (
            ("params_bytes", params), ("grads_bytes", grads), ("optimizer_bytes", opt), ("activations_bytes", act),
            ("kv_cache_bytes", kv), ("other_bytes", other))}}
    st = {k: to_rank(v) for k, v in st.items() if k not in ("params", "grads", "optimizer", "gather")}
    params, grads, opt, transient = (zeros + x for x in (params, grads, opt, transient))
    return {"params_bytes": params, "grads_bytes": grads, "optimizer_bytes": opt, "activations_bytes": act,
            "kv_cache_bytes": kv, "other_bytes": other, "peak_bytes": peak, "host_bytes": zeros + st["host"],
            "overhead_bytes": over, "transient_bytes": transient, "inflight_microbatches": inflight,
            "layers": zeros + to_rank(pl.layers), "params": zeros + st["params_count"]}


def _peak(overheads, pgo, act, gather, **degrees):
    """(peak, other) from params + grads + optimizer `pgo`, activations `act` and the gather buffers
    (None: none), elementwise: peak = params + grads + optimizer + activations (+ KV cache, zero in
    training) + other, other = gather buffers + overhead_bytes(tensor bytes) (MemoryBreakdown;
    formulas.md §3.1, §3.8). Without ZeRO-3 the zero gather buffers are left out of the sums (adding
    +0.0 changes nothing), so every value equals the full per-stage arrays' to the last bit."""
    base = pgo + act
    tensor = base + gather if gather is not None else base
    over = overhead_bytes(overheads, tensor_bytes=tensor, **degrees)
    other = gather + over if gather is not None else over
    return base + other, other


def _at_worst(st, at, cls, peak, act, other) -> dict:
    """The six consumers and the peak at column `at` (N,) of peak, act and other (per rank or per
    class), with params, grads and optimizer of class `cls` (N,) (st holds them per class)."""
    rows = np.arange(len(at))

    def of_class(x):
        return np.broadcast_to(x, (len(at), np.shape(x)[-1]))[rows, cls]

    return {"peak_bytes": peak[rows, at], "params_bytes": of_class(st["params"]),
            "grads_bytes": of_class(st["grads"]), "optimizer_bytes": of_class(st["optimizer"]),
            "activations_bytes": act[rows, at], "kv_cache_bytes": np.zeros(len(at)), "other_bytes": other[rows, at]}


def _worst_stage(overheads, st, act, to_rank, rank_class, worst_of, **degrees) -> dict:
    """`stage_memory_arrays(worst_of=...)` of training rows with rank classes, in fewer passes over the
    (N, P) rank arrays: params + grads + optimizer summed per class, then gathered (the gather commutes
    with the sums, so every value is the same to the last bit), the peak by `_peak`; the consumers at
    the worst stage (the first on ties) read from their class."""
    pgo = to_rank(st["params"] + st["grads"] + st["optimizer"]).reshape(act.shape)
    gather = to_rank(st["gather"]).reshape(act.shape) if np.any(st["gather"]) else None
    peak, other = _peak(overheads, pgo, act, gather, **degrees)
    w = np.argmax(np.where(worst_of, peak, -np.inf), axis=-1)
    return {"worst_stage": w, **_at_worst(st, w, rank_class[np.arange(len(w)), w], peak, act, other)}


def _worst_by_class(overheads, st, per_mb, head, ws, loss_m, inflight, key, rank_class, worst_of, **degrees):
    """The worst stage per rank class (None where this shortcut would not be exact).

    Within a class every rank holds the same contents, so its peak (`_peak`) differs only through its
    in-flight microbatches i: activations = i·per_mb + min(loss_m, max(i, 1))·head (+ the full-
    recompute working set `ws`; formulas.md §3.4-3.5), and overhead_bytes grows with the tensor bytes.
    With per_mb > 0 the peak rises strictly with i, so the class's worst rank is its first with the
    most microbatches in flight; those ranks depend only on `key` (found once per distinct key), and
    each class's terms are evaluated there with the same operations as the per-rank arrays (the same
    values to the last bit). The worst stage is the class peaks' maximum, the lowest rank on ties (as
    the per-rank argmax)."""
    n, q = len(rank_class), np.shape(per_mb)[-1]
    if np.shape(key) != (n,) or np.asarray(key).dtype.kind not in "iu":
        raise InputError(f"inflight_key must be {n} integers, one per layout, got shape {np.shape(key)} "
                         f"of {np.asarray(key).dtype}")
    rows = np.arange(n)
    first, inv = distinct_rows(key)
    infl_u, cls_u, ok_u = (np.asarray(x)[first] for x in (inflight, rank_class, worst_of))
    rep_u = np.zeros((len(first), q), dtype=np.int64)  # each class's first rank with the most in flight
    has_u = np.zeros((len(first), q), dtype=bool)
    for c in range(q):
        mine = ok_u & (cls_u == c)
        rep_u[:, c], has_u[:, c] = np.argmax(np.where(mine, infl_u, -np.inf), axis=1), mine.any(axis=1)
    rep, has = gather_rows(rep_u, inv), gather_rows(has_u, inv)
    per_mb = np.broadcast_to(per_mb, (n, q))
    if not (np.where(has, per_mb, 1.0) > 0).all():  # a class with nothing in flight: ranks tie, take the long way
        return None
    i = np.asarray(inflight)[rows[:, None], rep]
    act = i * per_mb
    act = act + np.minimum(loss_m, np.maximum(i, 1.0)) * head
    if ws is not None:
        act = act + ws
    pgo = st["params"] + st["grads"] + st["optimizer"]
    gather = np.broadcast_to(st["gather"], act.shape) if np.any(st["gather"]) else None
    peak, other = _peak(overheads, pgo, act, gather, **degrees)
    best = np.max(np.where(has, peak, -np.inf), axis=1)
    c = np.argmin(np.where(has & (peak == best[:, None]), rep, np.iinfo(np.int64).max), axis=1)  # lowest rank wins
    return {"worst_stage": rep[rows, c], **_at_worst(st, c, c, peak, act, other)}


# ---- one layout ---------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class MemoryBreakdown:
    """Memory of one GPU of one pipeline stage, bytes. peak = the six consumers above `peak_bytes`.

    other_bytes = overhead_bytes (CUDA context, NCCL, allocator reserve) + transient_bytes (ZeRO-3
    gather buffers). host_bytes: CPU memory per GPU for offloaded states (not part of peak).
    """

    stage: int
    layers: int
    params: float  # parameters resident on the GPU before ZeRO sharding (count)
    inflight_microbatches: float
    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    kv_cache_bytes: float
    other_bytes: float
    peak_bytes: float
    host_bytes: float
    overhead_bytes: float
    transient_bytes: float

    def biggest_consumer(self) -> tuple[str, float]:
        """(name, bytes) of the largest of params, grads, optimizer, activations, kv_cache, other."""
        vals = [(getattr(self, f"{c}_bytes"), c) for c in CONSUMERS]
        b, name = max(vals)
        return name, b

    def to_dict(self) -> dict:
        return asdict(self)


_COMPONENT_LABEL = {"params_bytes": "params", "grads_bytes": "grads", "optimizer_bytes": "optimizer",
                    "activations_bytes": "activations", "kv_cache_bytes": "kv cache", "other_bytes": "other"}


def infeasibility_reasons(out: dict, feasible: np.ndarray, worst_stage: np.ndarray, hbm_bytes: float) -> np.ndarray:
    """The one reason text of a layout that does not fit: '' where it fits; else '<biggest consumer>: X GiB
    of Y GiB peak > Z GiB HBM (stage i)' on the worst stage. `out`: the worst stage's `<consumer>_bytes`
    and `peak_bytes`, (N,) arrays; formatted once per distinct message."""
    reason = np.full(len(feasible), "", dtype=object)
    bad = np.flatnonzero(~feasible)
    if bad.size == 0:
        return reason
    comps = [k for k in _COMPONENT_LABEL if k in out]
    stack = np.stack([np.asarray(out[k], dtype=float)[bad] for k in comps], axis=1)
    big = np.argmax(stack, axis=1)
    gib = 2.0**30
    big_d = np.round(stack[np.arange(bad.size), big] / gib * 10).astype(np.int64)  # tenths of GiB
    peak_d = np.round(np.asarray(out["peak_bytes"], dtype=float)[bad] / gib * 10).astype(np.int64)
    stage = worst_stage[bad]
    first, inv = distinct_rows(big, big_d, peak_d, stage)  # many rows share a message: format each once
    hbm = f"{hbm_bytes / gib:.1f}"
    names = [_COMPONENT_LABEL[c] for c in comps]
    text = np.empty(len(first), dtype=object)
    text[:] = [f"{names[b]}: {x // 10}.{x % 10} GiB of {y // 10}.{y % 10} GiB peak > {hbm} GiB HBM (stage {j})"
               for b, x, y, j in zip(*(a[first].tolist() for a in (big, big_d, peak_d, stage)))]
    reason[bad] = text[inv]
    return reason


@dataclass(frozen=True, kw_only=True)
class MemoryResult:
    """Per-stage breakdowns of one layout, the worst stage, and the verdict against HBM."""

    per_stage: tuple[MemoryBreakdown, ...]
    hbm_bytes: float | None
    feasible: bool
    reason: str
    inference: bool
    model: ModelSpec = field(repr=False)
    training: Training = field(repr=False)
    layout: Layout = field(repr=False)

    @property
    def worst(self) -> MemoryBreakdown:
        """The stage with the highest peak (first one on ties)."""
        return max(self.per_stage, key=lambda s: (s.peak_bytes, -s.stage))

    @property
    def peak_bytes(self) -> float:
        return self.worst.peak_bytes

    def to_frame(self):
        """One row per stage; columns are the MemoryBreakdown field names."""
        import pandas as pd

        return pd.DataFrame([s.to_dict() for s in self.per_stage])

    def to_dict(self) -> dict:
        """The JSON contract of DESIGN.md: model, layout, memory (worst-stage values + per_stage),
        feasible, reason; plus `hbm_bytes` and `inference`."""
        lay, tr, m = self.layout, self.training, self.model
        keys = [f"{c}_bytes" for c in CONSUMERS] + ["peak_bytes"]
        w = self.worst
        memory = {"peak_bytes": w.peak_bytes}
        memory.update({k: getattr(w, k) for k in keys if k != "peak_bytes"})
        memory.update({"host_bytes": w.host_bytes, "worst_stage": w.stage, "hbm_bytes": self.hbm_bytes,
                       "per_stage": [s.to_dict() for s in self.per_stage]})
        return {
            "model": {"name": m.name, "params": m.total_params(), "active_params": m.active_params()},
            "layout": {"tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "cp": lay.cp, "ep": lay.ep, "vpp": lay.vpp,
                       "zero": lay.zero, "recompute": lay.recompute, "micro_batch_size": lay.micro_batch_size,
                       "global_batch_size": tr.global_batch_size,
                       "num_microbatches": lay.num_microbatches(tr.global_batch_size),
                       "schedule": lay.schedule, "sequence_parallel": lay.sequence_parallel,
                       "shard_group_size": lay.shard_group_size, "label": lay.label},
            "memory": memory,
            "inference": self.inference,
            "feasible": self.feasible,
            "reason": self.reason,
        }


def memory_breakdown(model: ModelSpec, training: Training, layout: Layout, hardware=None, *,
                     inference: bool = False, inflight_per_stage=None,
                     overheads: Overheads | None = None) -> MemoryResult:
    """Per-stage memory of one layout and its verdict against `hardware.hbm_bytes` (None: no verdict,
    feasible=True, reason 'no hardware given')."""
    arrays = stage_memory_arrays(
        model, training, tp=layout.tp, pp=layout.pp, dp=layout.dp, cp=layout.cp, ep=layout.ep, vpp=layout.vpp,
        micro_batch_size=layout.micro_batch_size, num_microbatches=layout.num_microbatches(training.global_batch_size),
        zero=layout.zero, shard_group_size=layout.shard_group_size, recompute=layout.recompute,
        sequence_parallel=layout.sequence_parallel, schedule=layout.schedule,
        layers_per_stage=layout.layers_per_stage, inference=inference, inflight_per_stage=inflight_per_stage,
        overheads=overheads)
    return memory_result(arrays, model, training, layout, hardware, inference=inference)


def memory_result(arrays: dict, model: ModelSpec, training: Training, layout: Layout, hardware=None, *,
                  inference: bool = False) -> MemoryResult:
    """The MemoryResult of one layout from its per-stage arrays (stage_memory_arrays' names, at least
    layout.pp entries each: a row of the kernel's per-stage output, or one layout's arrays), with the
    verdict against `hardware.hbm_bytes` (None: no verdict, feasible=True, reason 'no hardware given')."""
    names = [f.name for f in fields(MemoryBreakdown) if f.name != "stage"]
    stages = []
    for i in range(layout.pp):
        vals = {k: float(arrays[k][i]) for k in names}
        vals["layers"] = int(round(vals["layers"]))
        stages.append(MemoryBreakdown(stage=i, **vals))
    stages = tuple(stages)
    hbm = getattr(hardware, "hbm_bytes", None) if hardware is not None else None
    if hbm is None:
        feasible, reason = True, "no hardware given"
    else:
        worst = max(stages, key=lambda s: (s.peak_bytes, -s.stage))
        feasible = worst.peak_bytes <= float(hbm)
        row = {f"{c}_bytes": np.array([getattr(worst, f"{c}_bytes")]) for c in CONSUMERS}
        reason = str(infeasibility_reasons({**row, "peak_bytes": np.array([worst.peak_bytes])}, np.array([feasible]),
                                           np.array([worst.stage]), float(hbm))[0])
    return MemoryResult(per_stage=stages, hbm_bytes=None if hbm is None else float(hbm), feasible=feasible,
                        reason=reason, inference=inference, model=model, training=training, layout=layout)


def feasible_mask(arrays: dict[str, np.ndarray], hbm_bytes: float) -> np.ndarray:
    """Vectorised verdict for sweeps: True where every stage's peak fits in `hbm_bytes`; shape (N,) or ()."""
    return np.all(arrays["peak_bytes"] <= hbm_bytes, axis=-1)
