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

def _peak(overheads, pgo, act, gather, cached=None, **degrees):
    """(peak, other) from params + grads + optimizer `pgo`, activations `act`, the gather buffers
    (None: none) and the framework's cached step segments (None: none; framework.py), elementwise:
    peak = params + grads + optimizer + activations (+ KV cache, zero in training) + other, other =
    gather buffers + overhead_bytes(tensor bytes) + cached (MemoryBreakdown; formulas.md §3.1, §3.8).
    Zero terms are left out of the sums (adding +0.0 changes nothing), so every value equals the full
    per-stage arrays' to the last bit."""
    base = pgo + act
    tensor = base + gather if gather is not None else base
    over = overhead_bytes(overheads, tensor_bytes=tensor, **degrees)
    other = gather + over if gather is not None else over
    if cached is not None:
        other = other + cached
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

def worst_stage_of_ranks(overheads, st, act, to_rank, rank_class, worst_of, **degrees) -> dict:
    """`stage_memory_arrays(worst_of=...)` of training rows with rank classes, in fewer passes over the
    (N, P) rank arrays: params + grads + optimizer summed per class, then gathered (the gather commutes
    with the sums, so every value is the same to the last bit), the peak by `_peak`; the consumers at
    the worst stage (the first on ties) read from their class."""
    pgo = to_rank(st["params"] + st["grads"] + st["optimizer"]).reshape(act.shape)
    gather = to_rank(st["gather"]).reshape(act.shape) if np.any(st["gather"]) else None
    cached = to_rank(st["cached"]).reshape(act.shape) if np.any(st.get("cached", 0.0)) else None
    peak, other = _peak(overheads, pgo, act, gather, cached, **degrees)
    w = np.argmax(np.where(worst_of, peak, -np.inf), axis=-1)
    return {"worst_stage": w, **_at_worst(st, w, rank_class[np.arange(len(w)), w], peak, act, other)}

def worst_stage_by_class(overheads, st, per_mb, head, ws, loss_m, inflight, key, rank_class, worst_of, **degrees):
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
    cached = np.broadcast_to(st["cached"], act.shape) if np.any(st.get("cached", 0.0)) else None
    peak, other = _peak(overheads, pgo, act, gather, cached, **degrees)
    best = np.max(np.where(has, peak, -np.inf), axis=1)
    c = np.argmin(np.where(has & (peak == best[:, None]), rep, np.iinfo(np.int64).max), axis=1)  # lowest rank wins
    return {"worst_stage": rep[rows, c], **_at_worst(st, c, c, peak, act, other)}
