"""Replay of many layouts of many schedule shapes in one compiled pass (`makespan_multi`, the sweep's
fast path) and the per-shape tables it reads (`ShapeTables`, from `shape_tables` or
`flush_shape_tables`).

Split from replay.py, which replays one schedule into a Timeline and holds the reference evaluator
(`evaluate_levels`): this module runs the same recurrence (replay.py's module docstring) over each
shape's ops packed in level order, in the C loop of simulator/native (blocks of rows in threads,
without the GIL) or, without the C library, by `evaluate_levels` itself (`_multi_numpy`, also the
tests' oracle for the C loop). Makespans are bit-identical to `replay`'s (tests compare them). The
tables are a pure function of the schedule shape; pipeline/cache.py keeps them on disk.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .. import native
from ..schedules import Schedule
from .compiled import CompiledSchedule
from .replay import _as_compiled, busy_per_rank, evaluate_levels, inflight_profile, op_delays, op_durations


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
