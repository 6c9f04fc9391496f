"""Replay a pipeline schedule with per-op costs: the timeline, makespan, bubbles, critical path and
the in-flight microbatches (activation memory) per rank.

Timing rule (one longest-path recurrence over the op DAG; formulas.md §5.3):
    start(op) = max(end(previous op on its rank), end(dep(op)) + p2p(boundary crossed))
    end(op)   = start(op) + duration(op)
with duration F = forward_s[stage], B = backward_s[stage] (+ weight_s[stage] when the B includes
the weight gradient, i.e. the schedule does not split), W = weight_s[stage]. Two evaluators of
that one recurrence: `evaluate_levels` (numpy over the compiled levels: the reference, used by
`replay` and by `makespan_multi` without the C library) and the C loop behind `makespan_multi`
(simulator/native; the tests compare it with the reference bit for bit). `makespan_multi`, the
many-shapes fast path, and its per-shape tables are in multi.py.

Bubble fraction = 1 - total busy / (ranks x makespan) (DESIGN.md, the "of total" convention of
formulas.md §5.2 disagreement 5.a); per rank, 1 - busy_r / makespan.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..schedules import Schedule
from .compiled import CompiledSchedule, compile_schedule


# -- inputs ------------------------------------------------------------------------------------
def per_stage_array(name: str, value, num_stages: int) -> np.ndarray:
    """A scalar or per-stage sequence -> float array (num_stages,).

    InputError names the value when it is negative, not finite, or has the wrong length.
    """
    arr = np.asarray(value, dtype=float) if not isinstance(value, str) else None
    if arr is None:
        raise InputError(f"{name} must be a number or an array of numbers, got {value!r}")
    if arr.ndim > 1 or (arr.ndim == 1 and arr.shape[0] not in (1, num_stages)):
        raise InputError(f"{name} must be a scalar or have {num_stages} entries (one per stage), got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise InputError(f"{name} must be finite, got {value!r}")
    if (arr < 0).any():
        raise InputError(f"{name} must be >= 0, got {value!r}")
    return np.broadcast_to(arr, (num_stages,)).astype(float) if arr.ndim == 0 or arr.shape[0] == 1 else arr


def op_durations(schedule: Schedule, forward_s, backward_s, weight_s) -> np.ndarray:
    """Duration of every op (rank order); works on (S,) or (N, S) stage arrays (last axis = stage)."""
    a = schedule.arrays
    f, b, w = (np.asarray(x)[..., a.stage] for x in (forward_s, backward_s, weight_s))
    return np.where(a.kind == 0, f, np.where(a.kind == 1, b + np.where(a.includes_weight, w, 0.0), w))


def op_delays(schedule: Schedule, p2p_s, *, second: bool = False) -> np.ndarray:
    """p2p delay before every op (rank order): p2p_s[boundary] for cross-rank inputs, else 0.
    `p2p_s` has shape (S-1,) or (N, S-1). `second`: for the paired ops' second dependency."""
    a = schedule.arrays
    bnd = a.boundary2 if second else a.boundary
    p = np.asarray(p2p_s, dtype=float)
    if p.shape[-1] == 0:
        return np.zeros(p.shape[:-1] + (len(a.kind),))
    return np.where(bnd >= 0, p[..., np.maximum(bnd, 0)], 0.0)


def _p2p_array(p2p_s, num_stages: int) -> np.ndarray:
    nb = max(num_stages - 1, 0)
    arr = np.asarray(p2p_s, dtype=float)
    if arr.ndim > 1 or (arr.ndim == 1 and arr.shape[0] not in (1, nb)):
        raise InputError(f"p2p_s must be a scalar or have {nb} entries (one per stage boundary), got shape {arr.shape}")
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise InputError(f"p2p_s must be finite and >= 0, got {p2p_s!r}")
    return np.broadcast_to(arr.reshape(-1)[:1] if arr.ndim == 0 or arr.size == 1 else arr, (nb,)).copy()


# -- evaluation --------------------------------------------------------------------------------
def evaluate_levels(compiled: CompiledSchedule, dur: np.ndarray, delay: np.ndarray, delay2=None) -> np.ndarray:
    """End time of every op by the recurrence in the module docstring, level by level.

    `dur`, `delay`: (n,) or (N, n). Returns end times of the same shape.
    """
    n = compiled.num_ops
    lead = dur.shape[:-1]
    end = np.zeros(lead + (n + 1,))
    ops, offs = compiled.level_ops, compiled.level_offsets
    rp, dp = compiled.rank_prev_s, compiled.dep_s
    # pre-gather per-op operands in level order so each level is contiguous slices
    rp_l, dp_l = rp[ops], dp[ops]
    dur_l, delay_l = dur[..., ops], delay[..., ops]
    if delay2 is not None and (compiled.dep2_s < n).any():
        d2_l, delay2_l = compiled.dep2_s[ops], delay2[..., ops]
        for k in range(len(offs) - 1):
            lo, hi = offs[k], offs[k + 1]
            ready = np.maximum(end[..., dp_l[lo:hi]] + delay_l[..., lo:hi], end[..., d2_l[lo:hi]] + delay2_l[..., lo:hi])
            end[..., ops[lo:hi]] = np.maximum(end[..., rp_l[lo:hi]], ready) + dur_l[..., lo:hi]
        return end[..., :n]
    for k in range(len(offs) - 1):
        lo, hi = offs[k], offs[k + 1]
        idx = ops[lo:hi]
        end[..., idx] = np.maximum(end[..., rp_l[lo:hi]], end[..., dp_l[lo:hi]] + delay_l[..., lo:hi]) + dur_l[..., lo:hi]
    return end[..., :n]


# -- derived quantities (order only) -----------------------------------------------------------
def inflight_profile(schedule: Schedule, weights=None):
    """Peak over each rank's op order of resident activations: +w at F(s, j), -w at the last backward
    op of (s, j) (W, or a B that includes the weight gradient). `weights` per stage (default 1: counts
    (stage, microbatch) activations). Depends only on the order. Returns an array (num_ranks,)."""
    a = schedule.arrays
    w = np.ones(schedule.num_stages) if weights is None else np.asarray(weights, dtype=float)
    frees = (a.kind == 2) | ((a.kind == 1) & a.includes_weight)
    delta = np.where(a.kind == 0, w[a.stage], np.where(frees, -w[a.stage], 0.0))
    peaks = np.zeros(schedule.num_ranks)
    for r in range(schedule.num_ranks):
        lo, hi = a.rank_offsets[r], a.rank_offsets[r + 1]
        if hi > lo:
            peaks[r] = max(0.0, float(np.cumsum(delta[lo:hi]).max()))
    return peaks


def critical_path(schedule: Schedule, start, end, delay, delay2=None) -> tuple:
    """Op indices (rank order numbering) of one longest chain, first to last: from the op that ends
    last, step to whichever predecessor (the dependency, else the previous op on the rank) fixed its
    start, until an op starts at time 0."""
    a = schedule.arrays
    if len(end) == 0:
        return ()
    i = int(np.argmax(end))
    path = [i]
    while start[i] > 0:
        d, rp = a.dep[i], a.rank_prev[i]
        d2 = a.dep2[i]
        if d >= 0 and end[d] + delay[i] == start[i]:
            i = int(d)
        elif d2 >= 0 and delay2 is not None and end[d2] + delay2[i] == start[i]:
            i = int(d2)
        elif rp >= 0 and end[rp] == start[i]:
            i = int(rp)
        else:  # pragma: no cover - the recurrence always has a binding predecessor
            raise AssertionError("critical path: no binding predecessor")
        path.append(i)
    return tuple(reversed(path))


# -- results -----------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True, eq=False)
class Timeline:
    """A replayed schedule. Arrays follow the schedule's rank order (`ops`)."""

    schedule: Schedule
    start_s: np.ndarray
    end_s: np.ndarray
    duration_s: np.ndarray
    makespan_s: float
    busy_s_per_rank: tuple
    bubble_fraction: float
    bubble_fraction_per_rank: tuple
    critical_path: tuple
    peak_inflight_microbatches_per_rank: tuple
    peak_activation_bytes_per_rank: tuple | None = None
    steady_state_time_per_microbatch_s: float | None = None
    stashed_weight_versions_per_rank: tuple | None = None

    @property
    def ops(self):
        return [op for r in self.schedule.ranks for op in r]

    @property
    def idle_s_per_rank(self) -> tuple:
        return tuple(self.makespan_s - b for b in self.busy_s_per_rank)

    def labels(self, idx=None) -> list[str]:
        """Compact labels (``0F0``, ``3B1``, ``3I1``, ``3W1``; `Op.label`) of the ops at rank-order
        indices `idx` (all when None), read from the schedule's op arrays: linear, no Op records."""
        a = self.schedule.arrays
        idx = np.arange(len(a.kind)) if idx is None else np.asarray(idx, dtype=np.int64)
        letter = np.where((a.kind[idx] == 1) & ~a.includes_weight[idx], 3, a.kind[idx])  # I: split-off B
        text = np.array(("F", "B", "W", "I"))[letter].tolist()
        return [f"{s}{c}{m}" for s, c, m in zip(a.stage[idx].tolist(), text, a.microbatch[idx].tolist())]

    def to_dict(self) -> dict:
        """JSON-ready summary (SI units); linear in the op count."""
        d = {
            "schedule": self.schedule.name,
            "pp": self.schedule.num_ranks,
            "num_stages": self.schedule.num_stages,
            "microbatches": self.schedule.num_microbatches,
            "num_ops": len(self.end_s),
            "makespan_s": self.makespan_s,
            "bubble_fraction": self.bubble_fraction,
            "bubble_fraction_per_rank": list(self.bubble_fraction_per_rank),
            "busy_s_per_rank": list(self.busy_s_per_rank),
            "idle_s_per_rank": list(self.idle_s_per_rank),
            "peak_inflight_microbatches_per_rank": [int(x) for x in self.peak_inflight_microbatches_per_rank],
            "critical_path": self.labels(self.critical_path),
        }
        if self.peak_activation_bytes_per_rank is not None:
            d["peak_activation_bytes_per_rank"] = list(self.peak_activation_bytes_per_rank)
        if self.steady_state_time_per_microbatch_s is not None:
            d["steady_state_time_per_microbatch_s"] = self.steady_state_time_per_microbatch_s
            d["stashed_weight_versions_per_rank"] = list(self.stashed_weight_versions_per_rank)
        return d


def _as_compiled(schedule) -> CompiledSchedule:
    if isinstance(schedule, CompiledSchedule):
        return schedule
    if not isinstance(schedule, Schedule):
        raise InputError(f"replay needs a Schedule, got {type(schedule).__name__}")
    return compile_schedule(schedule)


def replay(schedule, *, forward_s, backward_s, weight_s=0.0, p2p_s=0.0, activation_bytes=None) -> Timeline:
    """Replay `schedule` (a Schedule or a CompiledSchedule) with per-microbatch op durations.

    forward_s, backward_s (input-gradient part), weight_s: scalars or arrays with one entry per
    (virtual) stage; for schedules that do not split the backward, B lasts backward_s + weight_s.
    p2p_s: scalar or one entry per stage boundary (boundary b between stages b and b+1), added when
    an op's input comes from another rank. activation_bytes: per stage, per microbatch -> peak bytes
    per rank.
    """
    compiled = _as_compiled(schedule)
    sch = compiled.schedule
    S = sch.num_stages
    f = per_stage_array("forward_s", forward_s, S)
    b = per_stage_array("backward_s", backward_s, S)
    w = per_stage_array("weight_s", weight_s, S)
    p = _p2p_array(p2p_s, S)
    dur = op_durations(sch, f, b, w)
    delay = op_delays(sch, p)
    delay2 = op_delays(sch, p, second=True)
    end = evaluate_levels(compiled, dur, delay, delay2)
    start = _starts(sch, end, delay, delay2)
    return _timeline(sch, start, end, dur, delay, delay2, activation_bytes)


def busy_per_rank(sch, dur):
    """Sum of op durations per rank; `dur` (..., n) in rank order -> (..., ranks), each rank's ops added
    in order (replay, and makespan_multi without the C library)."""
    offs = sch.arrays.rank_offsets
    # sequential (cumsum) sums: numpy's pairwise .sum() groups 1-D and 2-D rows differently
    return np.stack([np.cumsum(dur[..., offs[r]:offs[r + 1]], axis=-1)[..., -1] if offs[r + 1] > offs[r]
                     else np.zeros(dur.shape[:-1]) for r in range(sch.num_ranks)], axis=-1)


def _starts(sch, end, delay, delay2):
    """start = max(end(rank predecessor), end(dep) + delay, end(dep2) + delay2): the recurrence's
    own value (not end - duration, which can differ in the last bit)."""
    a = sch.arrays
    ext = np.concatenate([end, [0.0]])
    n = len(end)
    rp = np.where(a.rank_prev >= 0, a.rank_prev, n)
    d1 = np.where(a.dep >= 0, a.dep, n)
    d2 = np.where(a.dep2 >= 0, a.dep2, n)
    return np.maximum(np.maximum(ext[rp], ext[d1] + delay), ext[d2] + delay2)


def _timeline(sch, start, end, dur, delay, delay2, activation_bytes) -> Timeline:
    makespan = float(end.max()) if len(end) else 0.0
    busy = busy_per_rank(sch, dur)
    R = sch.num_ranks
    bubble = float(1.0 - np.cumsum(busy, axis=-1)[..., -1] / (R * makespan)) if makespan > 0 else 0.0
    per_rank = tuple(float(1.0 - x / makespan) if makespan > 0 else 0.0 for x in busy)
    inflight = inflight_profile(sch)
    act = None
    if activation_bytes is not None:
        ab = per_stage_array("activation_bytes", activation_bytes, sch.num_stages)
        act = tuple(float(x) for x in inflight_profile(sch, ab))
    try:
        cp = critical_path(sch, start, end, delay, delay2)
    except AssertionError:
        cp = ()
    steady = stash = None
    if sch.asynchronous:
        from .pipedream import steady_state_time_per_microbatch
        steady = steady_state_time_per_microbatch(sch, start)
        stash = tuple(int(x) for x in inflight)
    return Timeline(schedule=sch, start_s=start, end_s=end, duration_s=dur, makespan_s=makespan,
                    busy_s_per_rank=tuple(float(x) for x in busy), bubble_fraction=bubble,
                    bubble_fraction_per_rank=per_rank, critical_path=cp,
                    peak_inflight_microbatches_per_rank=tuple(int(round(x)) for x in inflight),
                    peak_activation_bytes_per_rank=act, steady_state_time_per_microbatch_s=steady,
                    stashed_weight_versions_per_rank=stash)
