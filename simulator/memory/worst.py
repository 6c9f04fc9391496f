"""The worst stage of many layouts without building their (N, P) per-stage arrays (the sweep's path of
`breakdown.stage_memory_arrays(worst_of=...)`): the same operations as the per-stage arrays, in fewer
passes, so every value is the same to the last bit (tests/test_memory.py checks it).
"""
from __future__ import annotations

import numpy as np

from ..dedup import distinct_rows, gather_rows
from ..errors import InputError
from .overheads import overhead_bytes

CONSUMER_FIELDS = ("peak_bytes", "params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
                   "kv_cache_bytes", "other_bytes")


def at_worst_stage(stages: dict, valid) -> dict:
    """`worst_stage` (the highest peak among the `valid` stages, the first on ties) and CONSUMER_FIELDS
    there, from per-stage arrays (..., P) (broadcast to the peak's shape): shape (...)."""
    peak = stages["peak_bytes"]
    w = np.argmax(np.where(valid, peak, -np.inf), axis=-1)

    def at(x):
        return np.take_along_axis(np.broadcast_to(x, peak.shape), w[..., None], axis=-1)[..., 0]

    return {"worst_stage": w, **{k: at(stages[k]) for k in CONSUMER_FIELDS}}

def peak_terms(overheads, params, grads, opt, act, *, kv=None, gather=None, cached=None, ostep=None, grads_off=None,
               **degrees) -> dict:
    """The peak and its consumers, elementwise, from the states (params, grads, opt), the activations `act`,
    the KV cache, the buffers alive with the activations (`gather`), the framework's cached step segments,
    the optimizer step's own buffers (`ostep`, states.optimizer_step_bytes) and the gradients not yet
    allocated at the activation peak (`grads_off`, `absent_grad_bytes`); None: none. Two phases hold the
    step's largest live set (formulas.md §3.1, §3.8; MemoryBreakdown), each with the BLAS workspaces ws
    (`Overheads.blas_workspace_bytes`, counted in `other`):

        activation phase A:     tensor_A = params + (grads − grads_off) + opt + act + kv + gather + ws
        optimizer step phase S: tensor_S = params + grads + opt + ostep + ws  (activations freed by then)
        tensor = max(tensor_A, tensor_S),  peak = tensor + overhead_bytes(tensor) + cached

    The consumers are those alive in the peak's phase (in S: all gradients, no activations, `other` = the
    step's buffers + overheads + cached), so they add up to the peak. Without ostep and grads_off only
    phase A exists, computed as before (zero terms are left out: adding +0.0 changes nothing, so every
    memory path gives the same values to the last bit). Returns tensor, overhead, peak, grads, activations,
    other."""
    ws = overheads.blas_workspace_bytes  # alive in every phase (overheads.py)
    g_a = grads if grads_off is None else grads - grads_off
    base = params + g_a + opt + act
    if kv is not None:
        base = base + kv
    tensor_a = base + gather if gather is not None else base
    if ws:
        tensor_a = tensor_a + ws
    phased = ostep is not None or grads_off is not None
    if phased:
        tensor_s = params + grads + opt
        if ostep is not None:
            tensor_s = tensor_s + ostep
        if ws:
            tensor_s = tensor_s + ws
        in_s = tensor_s > tensor_a
        tensor = np.where(in_s, tensor_s, tensor_a)
    else:
        tensor = tensor_a
    over = overhead_bytes(overheads, tensor_bytes=tensor, **degrees)
    other = gather + over if gather is not None else over
    if ws:
        other = other + ws
    if cached is not None:
        other = other + cached
    if not phased:
        return {"tensor": tensor, "overhead": over, "peak": base + other, "grads": grads, "activations": act,
                "other": other}
    other_s = ostep + over if ostep is not None else over
    if ws:
        other_s = other_s + ws
    if cached is not None:
        other_s = other_s + cached
    grads_at, act_at = np.where(in_s, grads, g_a), np.where(in_s, 0.0, act)
    other = np.where(in_s, other_s, other)
    peak = params + grads_at + opt + act_at
    if kv is not None:
        peak = peak + kv
    return {"tensor": tensor, "overhead": over, "peak": peak + other, "grads": grads_at, "activations": act_at,
            "other": other}

def _at_worst(st, at, cls, t) -> dict:
    """The six consumers and the peak at column `at` (N,) of the `peak_terms` arrays `t` (per rank or
    per class), with params and optimizer of class `cls` (N,) (st holds them per class)."""
    rows = np.arange(len(at))

    def of_class(x):
        return np.broadcast_to(x, (len(at), np.shape(x)[-1]))[rows, cls]

    def col(x):
        return np.broadcast_to(x, t["peak"].shape)[rows, at]

    return {"peak_bytes": col(t["peak"]), "params_bytes": of_class(st["params"]), "grads_bytes": col(t["grads"]),
            "optimizer_bytes": of_class(st["optimizer"]), "activations_bytes": col(t["activations"]),
            "kv_cache_bytes": np.zeros(len(at)), "other_bytes": col(t["other"])}

def _optional(x, shape):
    """x broadcast to `shape`, None where it is all zero (a term `peak_terms` leaves out)."""
    return np.broadcast_to(x, shape) if np.any(x) else None

def worst_stage_of_ranks(overheads, st, act, to_rank, rank_class, worst_of, grads_off=None, **degrees) -> dict:
    """`stage_memory_arrays(worst_of=...)` of training rows with rank classes, in fewer passes over the
    (N, P) rank arrays: the states gathered from their classes (the gather only indexes, so every value
    is the same to the last bit), the peak by `peak_terms`; the consumers at the worst stage (the first on
    ties)."""
    def ranks(k):
        return to_rank(st[k]).reshape(act.shape)

    params, grads, opt = ranks("params"), ranks("grads"), ranks("optimizer")
    gather, cached, ostep = (ranks(k) if np.any(st.get(k, 0.0)) else None
                             for k in ("gather", "cached", "optimizer_step"))
    t = peak_terms(overheads, params, grads, opt, act, gather=gather, cached=cached, ostep=ostep, grads_off=grads_off,
                   **degrees)
    w = np.argmax(np.where(worst_of, t["peak"], -np.inf), axis=-1)
    return {"worst_stage": w, **_at_worst(st, w, rank_class[np.arange(len(w)), w], t)}

def worst_stage_by_class(overheads, st, per_mb, head, ws, loss_m, inflight, key, rank_class, worst_of, **degrees):
    """The worst stage per rank class (None where this shortcut would not be exact).

    Within a class every rank holds the same contents, so its peak (`peak_terms`) differs only through its
    in-flight microbatches i: activations = i·per_mb + min(loss_m, max(i, 1))·head (+ the full-
    recompute working set `ws`; formulas.md §3.4-3.5), and overhead_bytes grows with the tensor bytes.
    With per_mb > 0 the peak rises strictly with i (where the optimizer step's phase may hold a class's
    peak, its ranks may tie and this shortcut steps aside), so the class's worst rank is its first with the
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
    params, grads, opt = (np.broadcast_to(st[k], act.shape) for k in ("params", "grads", "optimizer"))
    gather = _optional(st["gather"], act.shape)
    cached = _optional(st.get("cached", 0.0), act.shape)
    ostep = _optional(st["optimizer_step"], act.shape)
    if ostep is not None and np.any(np.where(has, ostep >= act, False)):
        return None  # a class whose step phase may be its peak: its ranks may tie, take the long way
    t = peak_terms(overheads, params, grads, opt, act, gather=gather, cached=cached, ostep=ostep, **degrees)
    peak = t["peak"]
    best = np.max(np.where(has, peak, -np.inf), axis=1)
    c = np.argmin(np.where(has & (peak == best[:, None]), rep, np.iinfo(np.int64).max), axis=1)  # lowest rank wins
    return {"worst_stage": rep[rows, c], **_at_worst(st, c, c, t)}
