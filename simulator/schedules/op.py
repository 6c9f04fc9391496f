"""Pipeline schedules as plain data: frozen `Op` records, ordered per rank, and the one dependency rule.

Glossary (DESIGN.md): a *rank* is one pipeline device; a *stage* is one contiguous block of layers
(a "virtual stage" or chunk when a rank holds several); a *microbatch* is one slice of the batch.
Stages are numbered in the order a microbatch's forward visits them (0 .. num_stages-1), whatever
rank they live on (Megatron interleaving, V shapes, DualPipe's two directions).

Kinds: ``F`` forward; ``B`` backward — the input-gradient part when the schedule splits the
backward (then a ``W`` weight-gradient op follows), or the full backward when ``includes_weight``;
``W`` weight-gradient. Text notation (as in the zero-bubble scheduler and
`torch.distributed.pipelining`): ``<stage><letter><microbatch>`` with letters ``F``, ``B`` (full
backward), ``I`` (input-gradient only), ``W``; e.g. ``0F0 0F1 0B0``.

Dependency rule (one rule for every schedule; formulas.md §5.3, sail-sg ``zb.py: build_graph``):
``F(s, j)`` waits for ``F(s-1, j)``; ``B(s, j)`` waits for ``B(s+1, j)``, or for ``F(s, j)`` on
the last stage; ``W(s, j)`` waits for ``B(s, j)``. Add a p2p transfer when the two ops run on
different ranks. Everything else — which op a rank runs next — is the per-rank order, which is
what distinguishes one schedule from another.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

import numpy as np

from ..errors import InputError

KINDS = ("F", "B", "W")
KIND_INDEX = {"F": 0, "B": 1, "W": 2}


class Op(NamedTuple):
    """One compute op of one microbatch on one (virtual) stage, run by `rank` (an immutable record; a
    NamedTuple because long schedules build millions of them and tuples are the cheapest to make)."""

    kind: str
    stage: int
    microbatch: int
    rank: int
    includes_weight: bool = False  # a B that also computes the weight gradient (full backward)
    paired: bool = False  # overlapped with the next op on the rank (DualPipe F&B): also waits for its input

    @property
    def label(self) -> str:
        """Compact notation: ``0F0``, ``3B1`` (full backward), ``3I1`` (input-gradient), ``3W1``."""
        letter = self.kind if self.kind != "B" else ("B" if self.includes_weight else "I")
        return f"{self.stage}{letter}{self.microbatch}"


def dependency(kind: str, stage: int, microbatch: int, *, num_stages: int):
    """The op that `(kind, stage, microbatch)` waits for, as `(kind, stage, microbatch)`, or None.

    F(s,j) <- F(s-1,j); B(s,j) <- B(s+1,j), last stage: F(s,j); W(s,j) <- B(s,j).
    Source: formulas.md §5.3 (sail-sg zero-bubble ``scheduler/zb.py: build_graph``).
    """
    if kind == "F":
        return ("F", stage - 1, microbatch) if stage > 0 else None
    if kind == "B":
        return ("B", stage + 1, microbatch) if stage < num_stages - 1 else ("F", stage, microbatch)
    if kind == "W":
        return ("B", stage, microbatch)
    raise InputError(f"op kind must be one of F, B, W, got {kind!r}")


@dataclass(frozen=True)
class OpArrays:
    """The schedule flattened in rank order (rank 0's ops, then rank 1's, ...) as integer arrays.

    `dep[i]` is the index of the op that op i waits for (-1: none); `boundary[i]` the stage boundary
    its input crosses (boundary b lies between stages b and b+1), -1 when the dependency is on the
    same rank (no p2p); `rank_prev[i]` the previous op on the same rank (-1: first).
    """

    kind: np.ndarray
    stage: np.ndarray
    microbatch: np.ndarray
    rank: np.ndarray
    includes_weight: np.ndarray
    dep: np.ndarray
    boundary: np.ndarray
    rank_prev: np.ndarray
    rank_offsets: np.ndarray
    dep2: np.ndarray = None       # second dependency (paired ops: the partner's input), -1: none
    boundary2: np.ndarray = None  # ops of rank r are [rank_offsets[r], rank_offsets[r+1])


@dataclass(frozen=True, kw_only=True, eq=False)
class Schedule:
    """Per-rank ordered op lists of one pipeline schedule (data only; no timing).

    `num_ranks` devices, `num_stages` (virtual) stages, `num_microbatches` microbatches,
    `chunks_per_rank` stages held by each rank (1; vpp for interleaved; 2 for V shapes and DualPipe).
    `asynchronous`: no flush at the end of a step (PipeDream).
    The ops are given either as Op records per rank (`rank_ops`) or as columns in rank order
    (`columns`: kind index, stage, microbatch, includes_weight, paired — one entry per op — and the
    op count of each rank), which long generated schedules use; `ranks` is the per-rank Op view
    either way (built from the columns on first use).
    """

    name: str
    num_ranks: int
    num_stages: int
    num_microbatches: int
    chunks_per_rank: int
    rank_ops: tuple[tuple[Op, ...], ...] | None = None
    columns: tuple | None = field(default=None, repr=False)
    asynchronous: bool = False
    notes: str = field(default="")

    def __post_init__(self):
        given = len(self.rank_ops) if self.rank_ops is not None else (
            len(self.columns[5]) if self.columns is not None else None)
        if given is None:
            raise InputError(f"schedule {self.name}: no ops given")
        if given != self.num_ranks:
            raise InputError(f"schedule {self.name}: {given} rank lists for {self.num_ranks} ranks")

    @cached_property
    def ranks(self) -> tuple[tuple[Op, ...], ...]:
        """Per-rank ordered Op records."""
        if self.rank_ops is not None:
            return self.rank_ops
        kind, stage, mb, incw, paired, counts = self.columns
        rank = np.repeat(np.arange(len(counts)), counts)
        ops = list(map(Op._make, zip(np.array(KINDS, dtype=object)[kind].tolist(), stage.tolist(), mb.tolist(),
                                     rank.tolist(), incw.astype(bool).tolist(), paired.astype(bool).tolist())))
        bounds = np.concatenate([[0], np.cumsum(counts)]).tolist()
        return tuple(tuple(ops[bounds[r]:bounds[r + 1]]) for r in range(len(counts)))

    @property
    def num_ops(self) -> int:
        return sum(len(r) for r in self.ranks)

    @property
    def split_backward(self) -> bool:
        """True when at least one backward is split into B (input gradient) and W."""
        return any(op.kind == "W" for ops in self.ranks for op in ops)

    def notation(self, rank: int) -> str:
        """The rank's op order in compact text, e.g. ``0F0 0F1 0B0 0F2 0B1 0B2``."""
        return " ".join(op.label for op in self.ranks[rank])

    def notation_rows(self) -> list[str]:
        return [self.notation(r) for r in range(self.num_ranks)]

    @cached_property
    def arrays(self) -> OpArrays:
        """Flatten, resolve every op's dependency (the one rule) and check the schedule is complete.

        Raises InputError if an op is duplicated, a microbatch misses an op, or an op sits on a
        rank different from the one its stage's other ops of the same microbatch use.
        """
        S, M = self.num_stages, self.num_microbatches
        kind, stage, mb, rank, incw, paired, counts = self._flat_columns()
        n = len(kind)
        offsets = np.concatenate([[0], np.cumsum(counts)])
        _check_placement(self.name, stage, mb, rank, counts, S, M, self.num_ranks)
        table = _op_index_table(self.name, kind, stage, mb, rank, incw, S, M)
        _check_complete(self.name, table, kind, stage, mb, incw, S, M)
        dep, boundary = _dependencies(table, kind, stage, mb, rank, S, M)
        rank_prev = np.arange(n) - 1
        rank_prev[offsets[:-1][counts > 0]] = -1
        dep2, boundary2 = _paired_dependencies(self.name, paired, rank, dep, boundary)
        return OpArrays(kind, stage, mb, rank, incw, dep, boundary, rank_prev, offsets, dep2, boundary2)

    def _flat_columns(self) -> tuple:
        """(kind index, stage, microbatch, rank, includes_weight, paired, ops per rank) as arrays in rank
        order, from `columns` or from the Op records."""
        if self.columns is not None:
            kind, stage, mb, incw, paired, counts = (np.asarray(x, dtype=np.int64) for x in self.columns)
            rank = np.repeat(np.arange(len(counts)), counts)
            return kind, stage, mb, rank, incw.astype(bool), paired.astype(bool), counts
        ops = [op for r in self.ranks for op in r]
        n = len(ops)
        # one pass over the records (ops are tuples: kind, stage, microbatch, rank, includes_weight, paired)
        table = np.array([(KIND_INDEX[o[0]],) + o[1:] for o in ops], dtype=np.int64).reshape(n, 6)
        kind, stage, mb, rank = (np.ascontiguousarray(table[:, j]) for j in range(4))
        incw = table[:, 4].astype(bool)
        paired = table[:, 5].astype(bool)
        counts = np.array([len(r) for r in self.ranks], dtype=np.int64)
        return kind, stage, mb, rank, incw, paired, counts


def _check_placement(name: str, stage, mb, rank, counts, S: int, M: int, num_ranks: int) -> None:
    """InputError if an op's stage or microbatch is out of range, or its rank is not the list holding it."""
    if len(stage) and ((stage < 0).any() or (stage >= S).any() or (mb < 0).any() or (mb >= M).any()):
        raise InputError(f"schedule {name}: an op's stage or microbatch is out of range")
    expect_rank = np.repeat(np.arange(num_ranks), counts)
    if not np.array_equal(rank, expect_rank):
        raise InputError(f"schedule {name}: an op's rank differs from the list holding it")


def _op_index_table(name: str, kind, stage, mb, rank, incw, S: int, M: int) -> np.ndarray:
    """(kind, stage, microbatch) -> op index (-1: absent), flat of length 3·S·M; InputError naming the
    first op that appears more than once."""
    n = len(kind)
    key = (kind * S + stage) * M + mb
    table = np.full(3 * S * M, -1, dtype=np.int64)
    table[key] = np.arange(n)
    if (np.bincount(key, minlength=3 * S * M) > 1).any():
        dup = int(np.flatnonzero(np.bincount(key, minlength=3 * S * M)[key] > 1)[0])
        label = Op(KINDS[kind[dup]], int(stage[dup]), int(mb[dup]), int(rank[dup]), bool(incw[dup])).label
        raise InputError(f"schedule {name}: op {label} appears more than once")
    return table


def _check_complete(name: str, table: np.ndarray, kind, stage, mb, incw, S: int, M: int) -> None:
    """Every (stage, microbatch) needs F and B; W exactly when its B does not include the weight
    (InputError naming the first missing or unexpected op, F's before B's before W's)."""
    need_w = np.zeros(S * M, dtype=bool)
    is_b = kind == 1
    need_w[(stage * M + mb)[is_b & ~incw]] = True
    for k, need in ((0, np.ones(S * M, bool)), (1, np.ones(S * M, bool)), (2, need_w)):
        have = table[k * S * M:(k + 1) * S * M] >= 0
        if not np.array_equal(have, need):
            bad = int(np.flatnonzero(have != need)[0])
            s, j = divmod(bad, M)
            what = "missing" if need[bad] else "unexpected"
            raise InputError(f"schedule {name}: {what} op {s}{'FBW'[k] if k != 1 else 'B'}{j}")


def _dependencies(table: np.ndarray, kind, stage, mb, rank, S: int, M: int) -> tuple[np.ndarray, np.ndarray]:
    """(dep, boundary) of every op: the one dependency rule (`dependency`), vectorised."""
    dkind = np.where(kind == 0, 0, np.where(kind == 1, np.where(stage == S - 1, 0, 1), 1))
    dstage = np.where(kind == 0, stage - 1, np.where(kind == 1, np.where(stage == S - 1, stage, stage + 1), stage))
    has_dep = ~((kind == 0) & (stage == 0))
    dkey = (dkind * S + np.clip(dstage, 0, S - 1)) * M + mb
    dep = np.where(has_dep, table[dkey], -1)
    cross = has_dep & (rank[np.maximum(dep, 0)] != rank)
    bnd = np.where(kind == 0, stage - 1, stage)  # F crosses s-1|s, B crosses s|s+1
    boundary = np.where(cross & (kind != 2), bnd, -1)
    return dep, boundary


def _paired_dependencies(name: str, paired, rank, dep, boundary) -> tuple[np.ndarray, np.ndarray]:
    """(dep2, boundary2): paired (overlapped) ops start only when the partner's (the next op on the
    rank) input is there too; -1 elsewhere. InputError if a paired op is the last op of its rank."""
    n = len(paired)
    dep2 = np.full(n, -1, dtype=np.int64)
    boundary2 = np.full(n, -1, dtype=np.int64)
    if paired.any():
        idx = np.flatnonzero(paired)
        nxt = idx + 1
        if (nxt >= n).any() or (rank[np.minimum(nxt, n - 1)] != rank[idx]).any():
            raise InputError(f"schedule {name}: a paired op is the last op of its rank")
        dep2[idx] = dep[nxt]
        boundary2[idx] = boundary[nxt]
    return dep2, boundary2


def make_schedule(name: str, per_rank: list[list[Op]] | None = None, *, num_stages: int, num_microbatches: int,
                  chunks_per_rank: int, asynchronous: bool = False, notes: str = "", columns=None) -> Schedule:
    """Freeze per-rank op lists (or op columns in rank order, see `Schedule`) into a `Schedule`."""
    if columns is not None:
        return Schedule(name=name, num_ranks=len(columns[5]), num_stages=num_stages,
                        num_microbatches=num_microbatches, chunks_per_rank=chunks_per_rank,
                        columns=tuple(columns), asynchronous=asynchronous, notes=notes)
    return Schedule(name=name, num_ranks=len(per_rank), num_stages=num_stages,
                    num_microbatches=num_microbatches, chunks_per_rank=chunks_per_rank,
                    rank_ops=tuple(tuple(r) for r in per_rank), asynchronous=asynchronous, notes=notes)


def check_counts(name: str, *, pp, microbatches, vpp=1):
    """Validate the integer shape arguments of a schedule builder (InputError naming the value)."""
    for label, v in (("pp", pp), ("microbatches", microbatches), ("vpp", vpp)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise InputError(f"{name}: {label} must be an integer, got {v!r}")
        if v < 1:
            raise InputError(f"{name}: {label} must be >= 1, got {v}")


class FlushSpec(NamedTuple):
    """A one-stage-per-rank flushed schedule, as `flush_columns` lays it out (GPipe, 1F1B, ZB-H1/H2):
    warm (R,), slots [(kind index, microbatch offset: int or (R,))], tail_from (R,), m, split."""

    warm: np.ndarray
    slots: list
    tail_from: np.ndarray
    m: int
    split: bool


def flush_columns(warm, slots, tail_from, m: int, split: bool) -> tuple:
    """`Schedule.columns` of a one-stage-per-rank flushed schedule (GPipe, 1F1B, ZB-H1/H2, PipeDream's
    window), all ranks at once: rank r runs min(warm[r], m) warm-up forwards (microbatches 0, 1, ...),
    then steps j = 0..m-1, each running slot 0's op, slot 1's, ... where its microbatch lies in [0, m),
    then the W's of microbatches tail_from[r]..m-1. slots: (kind index, microbatch offset: an int or
    (R,) per rank), the slot's op at step j running microbatch j + offset. Every B includes the weight
    gradient unless `split`. Built by the compiled loop when it is there (a sweep's hundreds of shapes),
    else with numpy (the same columns; tests compare them)."""
    from .. import native

    warm, kinds, offsets, tail_from = flush_arrays(warm, slots, tail_from)
    got = native.flush_columns(warm, kinds, offsets, tail_from, m)
    if got is None:
        got = _flush_columns_numpy(warm, kinds, offsets, tail_from, m)
    kind, stage, mb, counts = got
    return kind, stage, mb, (kind == 1) & (not split), np.zeros(len(kind), bool), counts


def flush_arrays(warm, slots, tail_from) -> tuple:
    """warm (R,), slot kinds (ns,), slot offsets (ns, R) and tail_from (R,) as int64 arrays."""
    warm, tail_from = np.asarray(warm, dtype=np.int64), np.asarray(tail_from, dtype=np.int64)
    R = len(warm)
    kinds = np.array([k for k, _ in slots], dtype=np.int64)
    offsets = np.array([np.broadcast_to(o, (R,)) for _, o in slots], dtype=np.int64).reshape(len(slots), R)
    return warm, kinds, offsets, tail_from


def _flush_columns_numpy(warm, kinds, offsets, tail_from, m: int) -> tuple:
    """(kind, stage, microbatch, ops per rank) of `flush_columns` with numpy: every (rank, slot, step) op
    laid out in order with a validity mask, then the valid ones taken row by row."""
    R, ns = len(warm), len(kinds)
    j = np.arange(m)[None, :]
    full = (R, m)
    mb = np.concatenate([np.broadcast_to(j, full),
                         (j[:, :, None] + offsets.T[:, None, :]).reshape(R, m * ns), np.broadcast_to(j, full)], axis=1)
    kind = np.concatenate([np.zeros(full, np.int64), np.broadcast_to(np.tile(kinds, m), (R, m * ns)),
                           np.full(full, 2)], axis=1)
    ok = np.concatenate([j < warm[:, None], (mb[:, m:m + m * ns] >= 0) & (mb[:, m:m + m * ns] < m),
                         j >= tail_from[:, None]], axis=1)
    counts = ok.sum(axis=1)
    return kind[ok], np.repeat(np.arange(R), counts), mb[ok], counts


def tiled(*segments) -> np.ndarray:
    """A step program from (rows, times) segments: each segment's rows (tuples of ints, all the same
    length) repeated `times` times (segments with times <= 0 left out), concatenated in order."""
    segments = [(np.array(rows, dtype=np.int64).reshape(len(rows), -1), times) for rows, times in segments if times > 0]
    out = np.empty((sum(len(r) * t for r, t in segments), segments[0][0].shape[1]), dtype=np.int64)
    at = 0
    for rows, times in segments:  # the rows repeated `times` times, as np.tile, written in place
        n = len(rows) * times
        out[at:at + n].reshape(times, len(rows), -1)[:] = rows
        at += n
    return out


def running_count(key: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... within each distinct value of `key`, in order of position: the microbatch
    counters of a step program (the j-th forward of a chunk runs microbatch j)."""
    key = np.asarray(key)
    order = np.argsort(key, kind="stable")
    k = key[order]
    new = np.ones(len(k), dtype=bool)
    new[1:] = k[1:] != k[:-1]
    start = np.flatnonzero(new)
    out = np.empty(len(key), dtype=np.int64)
    out[order] = np.arange(len(key)) - np.repeat(start, np.diff(start, append=len(key)))
    return out
