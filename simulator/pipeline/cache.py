"""An on-disk cache of schedule shapes' replay tables (`multi.ShapeTables`), shared by every process.

A sweep replays tens to hundreds of schedule shapes (schedule, pp, microbatches, chunks). A shape
whose op lists are built in Python (interleaved, ZB-V, DualPipe, DualPipeV: the builder's op order,
then its dependency and level tables in C) costs much more to build than to read back, so those
tables are kept on disk and read by later commands, sweep workers and notebooks. The flushed
one-stage-per-rank schedules (GPipe, 1F1B, ZB-H1/H2: most shapes of a sweep) are made from their
description in one C call instead (`multi.flush_shape_tables`) and not kept: writing their tables
cost a first sweep more than making them, and reading them back would save a later one little
(measurements: docs/sweep.md, Speed).

- Where: `$PARASIM_CACHE_DIR`, else `$XDG_CACHE_HOME/parasim`, else `~/.cache/parasim`, in a folder
  named after a hash of the code that makes the tables (the schedule builders, the replay and the
  compiled loops, byte for byte), so tables of other code are never read; folders of other code are
  removed when a new one is made. `PARASIM_NO_CACHE=1` turns the cache off.
- What: one file per shape, raw arrays after a fixed header (no pickle: reading runs no code). A file
  that is short, long or from another layout is ignored and rebuilt. Writes go to a temporary file
  renamed into place, so concurrent processes never read half a file.
- Only tables of the compiled path are kept (the numpy fallback's hold its compiled schedule).
  Any OS error (read-only home, full disk) leaves the cache out: the tables are then built.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import struct
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np

from .multi import ShapeTables, flush_shape_tables, shape_tables

_MAGIC = b"parasim-shape-1\n"
_HEAD = struct.Struct("=5q")  # num_ops, num_stages, num_ranks, busy entries, ranks in the in-flight peaks
_I4, _I8, _F8 = np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.float64)  # native: the key holds the byte order
_PACKED = 5  # code, dep, dep2, rank predecessor, hop (int32 each, num_ops long)


def _code_files() -> list[Path]:
    """The files whose bytes fix the tables: schedule builders, replay and compiled loops."""
    here = Path(__file__).resolve().parent
    native = here.parent / "native"
    files = sorted((here.parent / "schedules").glob("*.py"))
    files += [here / f for f in ("replay.py", "multi.py", "compiled.py", "cache.py")] + [native / "__init__.py"]
    files += sorted(p for p in native.glob("_native*") if p.suffix in (".so", ".pyd", ".dylib", ".c"))
    return files


@lru_cache(maxsize=1)
def code_key() -> str:
    """Hash of the code that makes the tables (and of this machine's byte order)."""
    h = hashlib.sha256(sys.byteorder.encode())
    for p in _code_files():
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def cache_dir() -> Path | None:
    """The folder for this code's tables, or None when the cache is off."""
    got = _folder_now()
    return None if got is None else Path(got)


def _folder_now() -> str | None:
    env = os.environ
    return _folder(env.get("PARASIM_NO_CACHE", ""), env.get("PARASIM_CACHE_DIR", ""), env.get("XDG_CACHE_HOME", ""),
                   env.get("HOME", ""))


@lru_cache(maxsize=8)
def _folder(no_cache: str, cache_dir: str, xdg: str, home: str) -> str | None:
    """The folder for these settings (memoised: a sweep asks once per shape)."""
    if no_cache not in ("", "0"):
        return None
    root = cache_dir or os.path.join(xdg or os.path.join(home or os.path.expanduser("~"), ".cache"), "parasim")
    return os.path.join(root, f"shapes-{code_key()}")


def tables(schedule: str, pp: int, microbatches: int, chunks: int) -> ShapeTables:
    """The replay tables of a schedule shape (`chunks`: model chunks per rank, used by interleaved).
    A flushed one-stage-per-rank schedule's (GPipe, 1F1B, ZB-H1/H2) are made in one C call from its
    description (`multi.flush_shape_tables`); any other's are read from the cache, else built from
    its op lists (`schedules.build`, `multi.shape_tables`) and kept. InputError if the builder
    refuses the shape (refusals are not cached)."""
    from ..schedules import FLUSH_SPECS, build, family
    from ..schedules.op import check_counts

    spec = FLUSH_SPECS.get(schedule)
    if spec is not None and chunks == 1:
        check_counts(schedule, pp=pp, microbatches=microbatches)
        got = flush_shape_tables(spec(pp=pp, microbatches=microbatches))
        if got is not None:
            return got
    got = load(schedule, pp, microbatches, chunks)
    if got is None:
        got = shape_tables(build(schedule, pp=pp, microbatches=microbatches,
                                 vpp=chunks if family(schedule).takes_vpp else 1))
        store(schedule, pp, microbatches, chunks, got)
    return got


def _name(schedule: str, pp: int, microbatches: int, chunks: int) -> str:
    return f"{schedule}-p{pp}-m{microbatches}-c{chunks}.bin"


def load(schedule: str, pp: int, microbatches: int, chunks: int) -> ShapeTables | None:
    """The cached tables of this shape, or None (no cache, no file, or a file not written whole)."""
    folder = _folder_now()
    if folder is None:
        return None
    try:
        with open(os.path.join(folder, _name(schedule, pp, microbatches, chunks)), "rb") as f:
            data = f.read()
    except OSError:
        return None
    return _decode(data)


def store(schedule: str, pp: int, microbatches: int, chunks: int, tables: ShapeTables) -> None:
    """Keep the tables of this shape (compiled path only; silently skipped on any OS error)."""
    folder = cache_dir()
    if folder is None or tables.compiled is not None:
        return
    try:
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            for old in folder.parent.glob("shapes-*"):  # tables of other code: never read again
                if old != folder:
                    shutil.rmtree(old, ignore_errors=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_encode(tables))
            os.replace(tmp, folder / _name(schedule, pp, microbatches, chunks))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return


def _arrays(t: ShapeTables) -> list[np.ndarray]:
    b_rank, b_stage, b_count = t.busy
    return [*(np.asarray(p, dtype=_I4) for p in t.packed), np.asarray(b_rank, dtype=_I8),
            np.asarray(b_stage, dtype=_I8), np.asarray(b_count, dtype=_F8).reshape(-1, 4),
            np.asarray(t.inflight, dtype=_I8)]


def _encode(t: ShapeTables) -> bytes:
    head = _HEAD.pack(t.num_ops, t.num_stages, t.num_ranks, len(t.busy[0]), len(t.inflight))
    return b"".join([_MAGIC, head, *(np.ascontiguousarray(a).tobytes() for a in _arrays(t))])


def _decode(data: bytes) -> ShapeTables | None:
    """ShapeTables from `_encode`'s bytes (read-only arrays viewing them), None if they do not fit."""
    at = len(_MAGIC) + _HEAD.size
    if len(data) < at or not data.startswith(_MAGIC):
        return None
    n, S, R, E, I = _HEAD.unpack_from(data, len(_MAGIC))
    if min(n, S, R, E, I) < 0 or len(data) != at + 4 * _PACKED * n + 8 * (6 * E + I):
        return None
    # three views instead of nine (a sweep reads hundreds of shapes): the packed int32 rows, the int64
    # busy ranks, stages and in-flight peaks, the float64 op counts
    packed = tuple(np.frombuffer(data, dtype=_I4, count=_PACKED * n, offset=at).reshape(_PACKED, n))
    at += 4 * _PACKED * n
    ints = np.frombuffer(data, dtype=_I8, count=2 * E, offset=at)
    b_count = np.frombuffer(data, dtype=_F8, count=4 * E, offset=at + 16 * E).reshape(E, 4)
    inflight = np.frombuffer(data, dtype=_I8, count=I, offset=at + 48 * E)
    return ShapeTables(n, S, R, packed, (ints[:E], ints[E:], b_count), inflight)
