"""parasim's compiled helpers (`_native.c`, built by `pip install`) bound through ctypes: the replay's
loops (levelling rounds, the longest-path recurrence over many schedule shapes, the replay tables of a
shape) and three array helpers of the sweep kernel (left-to-right row sums, first-appearance group
numbers, per-rank sums).

A package of its own below every other: it imports only numpy and the standard library, so the
schedules, the pipeline replay, dedup, structure and the kernel can all use it without importing
each other.

Why C through ctypes and not a JIT: the loops are short and hold no Python objects; a JIT's import
and first-call compile cost every process more than the loops' work, while a shared library loads in
about a millisecond. ctypes releases the GIL during each call, so Python threads run rows in
parallel.

`LIB` is None when the library was not built (no C compiler at install time; the build marks it
optional). Callers then use their numpy references, which give the same numbers more slowly
(`warn_slow` says so once per process). `PARASIM_NO_NATIVE=1` forces that path (tests).
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import warnings

import numpy as np

_i64, _i32, _f64 = (np.ctypeslib.ndpointer(dtype=t, flags="C_CONTIGUOUS") for t in (np.int64, np.int32, np.float64))
_u8 = np.ctypeslib.ndpointer(dtype=np.uint8, flags="C_CONTIGUOUS")
_n = ctypes.c_int64
_p = ctypes.c_void_p


def _address(a: np.ndarray) -> int:
    """The data address of a C-contiguous array (the caller keeps the array alive during the call)."""
    return a.__array_interface__["data"][0]


def _load():
    if os.environ.get("PARASIM_NO_NATIVE", "") not in ("", "0"):
        return None
    try:
        spec = importlib.util.find_spec(f"{__package__}._native")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith((".so", ".pyd", ".dylib")):
        return None
    try:
        lib = ctypes.CDLL(spec.origin)
    except OSError:
        return None
    lib.parasim_levels.restype = _n
    lib.parasim_levels.argtypes = [_n, _i64, _i64, _i64, _n, _i64, _i64, _i64, _i64]
    lib.parasim_replay_multi.restype = _n
    lib.parasim_replay_multi.argtypes = [_n] * 3 + [_i64] * 2 + [_i32] * 5 + [_i64] * 4 + [_f64] * 8
    lib.parasim_row_sums.restype = None
    lib.parasim_row_sums.argtypes = [_n, _n, _f64, _f64]
    lib.parasim_first_ids.restype = _n
    lib.parasim_first_ids.argtypes = [_n, _i64, _i64, _i64]
    lib.parasim_fsdp_forward.restype = None
    lib.parasim_fsdp_forward.argtypes = [_n, _f64, _f64, _f64, _n, _f64, _f64]
    lib.parasim_fsdp_backward.restype = None
    lib.parasim_fsdp_backward.argtypes = [_n, _f64, _f64, _f64, _f64, _n, _f64, _f64]
    lib.parasim_rank_sum.restype = None
    lib.parasim_rank_sum.argtypes = [_n] * 3 + [_f64] + [_i64] * 3 + [_u8, _n, _f64, _f64]
    # a sweep makes hundreds of shapes, many small: these take raw addresses (`_address`) of arrays the
    # wrappers below make or check themselves (dtype, C order), skipping ndpointer's per-argument checks
    lib.parasim_flush_counts.restype = _n
    lib.parasim_flush_counts.argtypes = [_n] * 3 + [_p] * 4
    lib.parasim_flush_columns.restype = None
    lib.parasim_flush_columns.argtypes = [_n] * 3 + [_p] * 7
    lib.parasim_shape_tables.restype = _n
    lib.parasim_shape_tables.argtypes = [_n] * 4 + [_p] * 15
    lib.parasim_flush_tables.restype = _n
    lib.parasim_flush_tables.argtypes = [_n] * 4 + [_p, _n] + [_p] * 3
    return lib


LIB = _load()
_warned = False


def warn_slow() -> None:
    """One warning per process that the numpy replay stands in for the compiled one."""
    global _warned
    if not _warned:
        _warned = True
        warnings.warn("parasim's compiled replay (simulator/native/_native.c) is not built: using the numpy "
                      "replay, same results but slower on long sweeps; reinstall with a C compiler to build it",
                      RuntimeWarning, stacklevel=3)


def levels(ends: np.ndarray, dep: np.ndarray, dep2: np.ndarray, starts: np.ndarray, n: int):
    """(level_ops (n,), level_offsets (levels + 1,), rank pointers, ok) of `pipeline.compiled._levels_numpy`'s
    rounds; on deadlock ok is False and the pointers hold each rank's stuck op."""
    level = np.empty(n + 1, dtype=np.int64)
    ptr = np.array(starts, dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    offs = np.empty(n + 1, dtype=np.int64)
    k = LIB.parasim_levels(len(ptr), np.ascontiguousarray(ends, dtype=np.int64), dep, dep2, n, level, ptr, out, offs)
    if k < 0:
        return None, None, ptr, False
    return out, offs[:k + 1], ptr, True


def row_sums(x: np.ndarray) -> np.ndarray:
    """Sums along axis 1 of a 2-D array, each row left to right: the zeros padding a row change none of
    its bits (numpy's pairwise `sum` regroups rows of 8 or more values). Without the C library,
    np.cumsum's last column: the same additions in the same order, slower."""
    x = np.ascontiguousarray(x, dtype=float)
    if LIB is None or x.ndim != 2:
        return np.cumsum(x, axis=-1)[..., -1] if x.shape[-1] else np.zeros(x.shape[:-1])
    out = np.empty(len(x))
    LIB.parasim_row_sums(x.shape[0], x.shape[1], x, out)
    return out


def fsdp_makespan(c, g, r, units, prefetch: int, backward: bool):
    """The makespan of cost/fsdp.py's forward (r unused) or backward pass for every element of the
    broadcast inputs, by the C loop; None without the C library (the caller runs its numpy loop)."""
    if LIB is None:
        return None
    shape = np.broadcast(c, g, r, units).shape
    flat = [np.ascontiguousarray(np.broadcast_to(np.asarray(x, dtype=float), shape)).ravel() for x in (c, g, r, units)]
    out = np.empty(flat[0].size)
    ring = np.empty(int(prefetch) + 1)
    if backward:
        LIB.parasim_fsdp_backward(out.size, flat[0], flat[1], flat[2], flat[3], int(prefetch), ring, out)
    else:
        LIB.parasim_fsdp_forward(out.size, flat[0], flat[1], flat[3], int(prefetch), ring, out)
    return out.reshape(shape)


def first_ids(code: np.ndarray):
    """(inv, first) of int64 codes: each code's group, numbered in order of first appearance (the
    numbering of pandas.factorize, by a hash table in C), and each group's first row; None without the
    C library (the caller factorizes)."""
    if LIB is None:
        return None
    code = np.ascontiguousarray(code, dtype=np.int64)
    inv, first = np.empty(len(code), dtype=np.int64), np.empty(len(code), dtype=np.int64)
    groups = LIB.parasim_first_ids(len(code), code, inv, first)
    if groups < 0:
        raise MemoryError("distinct-rows hash table")
    return inv, first[:groups]


def rank_sum(x: np.ndarray, shape_index: np.ndarray, stage_rank: np.ndarray, mirror_rank: np.ndarray,
             stage_valid: np.ndarray, padded_ranks: int, mirrored: bool):
    """PipelineTable.rank_sum from its per-shape (U, S) arrays and each row's shape, without gathering
    them to the rows: (N, P), the same additions in the same order as its bincounts; None without the
    C library."""
    if LIB is None:
        return None
    x = np.ascontiguousarray(x, dtype=np.float64)
    n, S = x.shape
    out = np.empty((n, int(padded_ranks)))
    LIB.parasim_rank_sum(n, S, int(padded_ranks), x, np.ascontiguousarray(shape_index, dtype=np.int64),
                         np.ascontiguousarray(stage_rank, dtype=np.int64),
                         np.ascontiguousarray(mirror_rank, dtype=np.int64),
                         np.ascontiguousarray(stage_valid, dtype=bool).view(np.uint8), int(bool(mirrored)),
                         np.empty(2 * max(int(padded_ranks), 1)), out)
    return out


def object_ids(values: np.ndarray):
    """first_ids of a 1-D object array by the identity of its elements (the PyObject pointers the array
    holds, read in place: no element is touched): equal values held by different objects land in
    different groups, which the caller merges. None without the C library."""
    if LIB is None:
        return None
    values = np.ascontiguousarray(values, dtype=object)
    if values.ndim != 1 or not len(values):
        return None
    pointers = np.ctypeslib.as_array((ctypes.c_int64 * len(values)).from_address(values.ctypes.data))
    return first_ids(pointers)  # (values stays alive, and unchanged, until this returns)


def replay_multi(tables: tuple, sid, F, B, W, P, out_mk, out_mk0, out_busy) -> None:
    """Rows of many shapes (`pipeline.multi.makespan_multi`'s packed `tables`); fills the three outputs, which
    may be row slices of larger C-contiguous arrays."""
    N, S = F.shape
    if LIB.parasim_replay_multi(N, S, out_busy.shape[1], sid, *tables, F, B, W, P, out_mk, out_mk0, out_busy):
        raise MemoryError("replay scratch memory")


def flush_columns(warm: np.ndarray, kinds: np.ndarray, offsets: np.ndarray, tail_from: np.ndarray, m: int):
    """(kind, stage, microbatch, ops per rank) of `schedules.op.flush_columns`'s flushed schedule: warm,
    tail_from (R,), slot kinds (ns,) and microbatch offsets (ns, R), all C-contiguous int64. None
    without the C library."""
    if LIB is None:
        return None
    warm, kinds, offsets, tail_from = (np.ascontiguousarray(x, dtype=np.int64)
                                       for x in (warm, kinds, offsets, tail_from))
    R, ns = len(warm), len(kinds)
    if offsets.shape != (ns, R) or tail_from.shape != (R,):
        raise ValueError(f"flush_columns: offsets {offsets.shape} and tail_from {tail_from.shape} do not fit "
                         f"{ns} slots of {R} ranks")
    counts = np.empty(R, dtype=np.int64)
    w, o, t = _address(warm), _address(offsets), _address(tail_from)
    n = LIB.parasim_flush_counts(R, m, ns, w, o, t, _address(counts))
    kind, stage, mb = np.empty((3, n), dtype=np.int64)
    LIB.parasim_flush_columns(R, m, ns, w, _address(kinds), o, t, _address(kind), _address(stage), _address(mb))
    return kind, stage, mb, counts


def shape_tables(columns: tuple, num_stages: int, num_microbatches: int):
    """`pipeline.multi.ShapeTables` fields from a builder's op columns (kind, stage, microbatch, includes W,
    paired, ops per rank): (packed (5 int32 arrays in level order), busy (rank (E,), stage (E,), op
    counts (E, 4)), in-flight peaks (R,) int64), or None if the columns break a rule or deadlock (the
    numpy path then raises with the message)."""
    kind, stage, mb, incw, paired, counts = columns
    kind, stage, mb, counts = (x if type(x) is np.ndarray and x.dtype == np.int64 and x.flags.c_contiguous
                               else np.ascontiguousarray(x, dtype=np.int64) for x in (kind, stage, mb, counts))
    incw, paired = (np.ascontiguousarray(x, dtype=bool).view(np.uint8) for x in (incw, paired))
    n, R, S = len(kind), len(counts), num_stages
    packed = np.empty((5, n), dtype=np.int32)
    b_rank, b_stage, inflight = (np.empty(k, dtype=np.int64) for k in (R * S, R * S, R))
    b_count = np.empty((R * S, 4))
    E = LIB.parasim_shape_tables(R, S, num_microbatches, n, *map(_address, (kind, stage, mb, incw, paired, counts)),
                                 *(_address(packed) + 4 * n * k for k in range(5)),
                                 *map(_address, (b_rank, b_stage, b_count, inflight)))
    if E == -1:
        raise MemoryError("schedule tables scratch memory")
    return (tuple(packed), (b_rank[:E], b_stage[:E], b_count[:E]), inflight) if E >= 0 else None


def flush_tables(warm: np.ndarray, kinds: np.ndarray, offsets: np.ndarray, tail_from: np.ndarray, m: int,
                 split: bool):
    """`shape_tables`'s fields of a flushed schedule straight from its description (`flush_columns`'s
    arguments), in one C call: what a sweep does for each GPipe, 1F1B and ZB-H1/H2 shape it meets.
    None without the C library (or if the schedule deadlocks, which these do not)."""
    if LIB is None:
        return None
    R, ns = len(warm), len(kinds)
    if np.shape(offsets) != (ns, R) or np.shape(tail_from) != (R,):
        raise ValueError(f"flush_tables: offsets {np.shape(offsets)} and tail_from {np.shape(tail_from)} do not fit "
                         f"{ns} slots of {R} ranks")
    spec = np.concatenate([warm, tail_from, kinds, np.ravel(offsets)]).astype(np.int64, copy=False)
    at = _address(spec)
    n = LIB.parasim_flush_counts(R, m, ns, at, at + 8 * (2 * R + ns), at + 8 * R, None)
    packed, ints = np.empty((5, n), dtype=np.int32), np.empty(2 * R * R + R, dtype=np.int64)
    b_count = np.empty((R * R, 4))
    E = LIB.parasim_flush_tables(R, m, ns, int(split), at, n, _address(packed), _address(ints), _address(b_count))
    if E == -1:
        raise MemoryError("schedule tables scratch memory")
    if E < 0:
        return None
    return tuple(packed), (ints[:E], ints[R * R:R * R + E], b_count[:E]), ints[2 * R * R:]
