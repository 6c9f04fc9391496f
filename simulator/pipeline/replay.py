"""Replay a pipeline schedule with per-op costs: the timeline, makespan, bubbles, critical path and
the in-flight microbatches (activation memory) per rank.

Timing rule (one longest-path recurrence over the op DAG; formulas.md §5.3):
    start(op) = max(end(previous op on its rank), end(dep(op)) + p2p(boundary crossed))
    end(op)   = start(op) + duration(op)
with duration F = forward_s[stage], B = backward_s[stage] (+ weight_s[stage] when the B includes
the weight gradient, i.e. the schedule does not split), W = weight_s[stage]. Two evaluators of
that one recurrence: `evaluate_levels` (numpy over the compiled levels: the reference, used by
`replay` and by `makespan_multi` without the C library) and the C loop behind `makespan_multi`
(simulator/native; the tests compare it with the reference bit for bit).

Bubble fraction = 1 - total busy / (ranks x makespan) (DESIGN.md, the "of total" convention of
formulas.md §5.2 disagreement 5.a); per rank, 1 - busy_r / makespan.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .. import native
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

    def to_dict(self) -> dict:
        """JSON-ready summary (SI units)."""
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
            "critical_path": [self.ops[i].label for i in self.critical_path],
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


# -- many layouts of many schedule shapes ----------------------------------------------------------
@lru_cache(maxsize=4096)  # per compiled schedule (hashed by identity)
def _inflight_counts(compiled: CompiledSchedule) -> np.ndarray:
    """inflight_profile of the order, memoised per compiled schedule (it depends on the order only)."""
    counts = inflight_profile(compiled.schedule).round().astype(int)
    counts.setflags(write=False)
    return counts


@dataclass(frozen=True, eq=False)
class ShapeTables:
    """What `makespan_multi` needs of one schedule shape: its ops packed in level order (`_packed`),
    its op counts per (rank, stage, kind) (`_busy_table`) and its in-flight peak per rank
    (`inflight_profile`, unit weights, as integers). `compiled` is kept when the numpy path built the
    tables (the replay without the C loops needs it)."""

    num_ops: int
    num_stages: int
    num_ranks: int
    packed: tuple
    busy: tuple
    inflight: np.ndarray
    compiled: CompiledSchedule | None = None


def shape_tables(schedule) -> ShapeTables:
    """ShapeTables of a Schedule (from the builder's op columns in one C pass when the C loops are
    built) or of a CompiledSchedule (numpy, from its arrays). Equal either way (tests compare them);
    a schedule breaking a rule of `Schedule.arrays` raises InputError, a deadlocked one DeadlockError."""
    if isinstance(schedule, Schedule) and schedule.columns is not None and native.LIB is not None:
        got = native.shape_tables(schedule.columns, schedule.num_stages, schedule.num_microbatches)
        if got is not None:
            packed, busy, inflight = got
            inflight.setflags(write=False)
            return ShapeTables(len(packed[0]), schedule.num_stages, schedule.num_ranks, packed, busy, inflight)
    c = _as_compiled(schedule)  # the numpy path (raises with the message on a broken or deadlocked order)
    return ShapeTables(c.num_ops, c.schedule.num_stages, c.schedule.num_ranks, _packed(c), _busy_table(c),
                       _inflight_counts(c), c)


def flush_shape_tables(spec) -> ShapeTables | None:
    """ShapeTables of a flushed one-stage-per-rank schedule (GPipe, 1F1B, ZB-H1/H2) from its description
    (`schedules.FlushSpec`) in one C call, its op lists never built: equal to
    `shape_tables(build(...))` (tests compare them). None without the C library."""
    from ..schedules.op import flush_arrays

    got = native.flush_tables(*flush_arrays(spec.warm, spec.slots, spec.tail_from), spec.m, spec.split)
    if got is None:
        return None
    packed, busy, inflight = got
    inflight.setflags(write=False)
    R = len(spec.warm)
    return ShapeTables(len(packed[0]), R, R, packed, busy, inflight)


def makespan_multi(shapes, schedule_index, forward_s, backward_s, weight_s, p2p_s):
    """Replay of N layouts of different schedule shapes in one compiled pass (the sweep's fast path).

    shapes: list of ShapeTables or CompiledSchedule; schedule_index (N,): which one each layout runs;
    forward_s, backward_s, weight_s: (N, S) per virtual stage (S >= each schedule's stage count; extra
    columns unused); p2p_s (N,): the delay of every stage boundary. Same recurrence and float
    operations as `replay` (bit-identical makespans; tests compare them).
    Returns (makespan_s (N,), makespan without p2p (N,), busy_s_per_rank (N, max ranks), 0 past a
    schedule's ranks).
    """
    tabs = [x if isinstance(x, ShapeTables) else shape_tables(x) for x in shapes]
    sid = np.asarray(schedule_index, dtype=np.int64)
    N = len(sid)
    F, B, W = (np.ascontiguousarray(np.broadcast_to(x, (N, np.shape(forward_s)[-1])), dtype=float)
               for x in (forward_s, backward_s, weight_s))
    P = np.ascontiguousarray(np.broadcast_to(np.asarray(p2p_s, dtype=float), (N,)))
    R = max(t.num_ranks for t in tabs)
    mk, mk0, busy = np.zeros(N), np.zeros(N), np.zeros((N, R))
    if N == 0:
        return mk, mk0, busy
    if native.LIB is None:
        native.warn_slow()
        for k, t in enumerate(tabs):
            idx = np.flatnonzero(sid == k)
            if len(idx):
                mk[idx], mk0[idx], busy[idx, :t.num_ranks] = _multi_numpy(t.compiled, F[idx], B[idx], W[idx], P[idx])
        return mk, mk0, busy
    op_off = np.concatenate([[0], np.cumsum([t.num_ops for t in tabs])]).astype(np.int64)
    stage_off = np.concatenate([[0], np.cumsum([t.num_stages for t in tabs])]).astype(np.int64)
    cat = [np.concatenate([t.packed[j] for t in tabs]) for j in range(5)]
    busy_off = np.concatenate([[0], np.cumsum([len(t.busy[0]) for t in tabs])]).astype(np.int64)
    b_rank, b_stage, b_count = (np.concatenate([t.busy[j] for t in tabs]) for j in range(3))
    tables = (op_off, *cat, stage_off, busy_off, b_rank, b_stage, np.ascontiguousarray(b_count))
    # the C loop runs without the GIL: blocks of rows with equal shares of the ops run in threads, started
    # and joined here (no thread outlives the call, so the process can still fork safely)
    work = np.cumsum(np.diff(op_off)[sid])
    nthreads = max(1, min(_cores(), int(work[-1] // 200_000)))  # at most one per core
    cuts = np.searchsorted(work, work[-1] * np.arange(1, nthreads) / nthreads)
    bounds = [0, *[int(c) for c in cuts], N]
    errors = []

    def run(a, b):
        try:
            if b > a:
                native.replay_multi(tables, sid[a:b], F[a:b], B[a:b], W[a:b], P[a:b], mk[a:b], mk0[a:b], busy[a:b])
        except BaseException as exc:  # re-raised by the calling thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(bounds[i], bounds[i + 1])) for i in range(1, nthreads)]
    for t in threads:
        t.start()
    run(bounds[0], bounds[1])
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return mk, mk0, busy


def _multi_numpy(compiled: CompiledSchedule, F, B, W, P):
    """`makespan_multi`'s outputs for rows of one shape by the numpy reference (`evaluate_levels`,
    `busy_per_rank`): the path without the C library, and the tests' oracle for the C loop."""
    sch = compiled.schedule
    S, N = sch.num_stages, len(P)
    dur = op_durations(sch, F[:, :S], B[:, :S], W[:, :S])
    p = np.broadcast_to(P[:, None], (N, max(S - 1, 0)))
    ends = [evaluate_levels(compiled, dur, op_delays(sch, x), op_delays(sch, x, second=True))
            for x in (p, np.zeros(p.shape))]
    mk, mk0 = (e.max(axis=1) if e.shape[1] else np.zeros(N) for e in ends)
    return mk, mk0, busy_per_rank(sch, dur)


def _cores() -> int:
    """How many cores this process may run on (its affinity mask on Linux, else the CPU count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _duration_kind(a) -> np.ndarray:
    """Which duration each op takes: 0 F, 1 B without W, 2 B including W, 3 W (as in `_native.c`)."""
    return np.where(a.kind == 0, 0, np.where(a.kind == 1, np.where(a.includes_weight, 2, 1), 3))


@lru_cache(maxsize=4096)  # per compiled schedule (hashed by identity)
def _packed(compiled: CompiledSchedule) -> tuple:
    """A compiled schedule's ops renumbered in level order, for `native.replay_multi` (memoised): duration
    code 4·stage + {0 F, 1 B, 2 B+W, 3 W}, the level-order positions of the dependency, the second
    dependency and the rank predecessor (n: none), and p2p flags (1: the dependency crosses a stage
    boundary, 2: the second one does). Reading ops sequentially is what makes the replay fast."""
    a = compiled.schedule.arrays
    n = compiled.num_ops
    order = compiled.level_ops
    pos = np.empty(n + 1, dtype=np.int64)
    pos[order] = np.arange(n)
    pos[n] = n
    code = 4 * a.stage[order] + _duration_kind(a)[order]
    bnd2 = a.boundary2 if a.boundary2 is not None else np.full(n, -1)
    hop = (a.boundary[order] >= 0).astype(np.int64) + 2 * (bnd2[order] >= 0)
    table = tuple(x.astype(np.int32) for x in (code, pos[compiled.dep_s[order]], pos[compiled.dep2_s[order]],
                                                 pos[compiled.rank_prev_s[order]], hop))
    return table


@lru_cache(maxsize=4096)  # per compiled schedule (hashed by identity)
def _busy_table(compiled: CompiledSchedule) -> tuple:
    """How many ops of each kind every (rank, virtual stage) pair runs: (rank (E,), stage (E,), counts
    (E, 4)) with counts of F, B without W, B including W, W (memoised per compiled schedule). A rank's
    busy time is Σ counts × durations — equal to summing its ops one by one, in fewer steps."""
    a = compiled.schedule.arrays
    S = compiled.schedule.num_stages
    rank = np.repeat(np.arange(len(a.rank_offsets) - 1), np.diff(a.rank_offsets))
    cat = _duration_kind(a)
    pair = rank * S + a.stage
    keys, inv = np.unique(pair, return_inverse=True)
    counts = np.zeros((len(keys), 4))
    np.add.at(counts, (inv.ravel(), cat), 1.0)
    table = ((keys // S).astype(np.int64), (keys % S).astype(np.int64), counts)
    return table
