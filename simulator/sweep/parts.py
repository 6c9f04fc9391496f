"""A sweep's finished chunks on disk: `<out>.parts/`, a manifest with the sweep's fingerprint and one pickle per
chunk, written atomically, so that an interrupted sweep resumes without evaluating them again (run.py `run_sweep`).
Split from run.py."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd

from ..errors import InputError


def chunk_path(parts: Path, k: int) -> Path:
    """The file of chunk `k` in the parts folder."""
    return parts / f"chunk-{k:06d}.pkl"


def write_atomic_pickle(df: pd.DataFrame, path: Path) -> None:
    """`df` pickled to `path` through a temporary file and os.replace: a crash never leaves half a chunk there."""
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    df.to_pickle(tmp)
    os.replace(tmp, path)


def read_chunk(path: Path) -> pd.DataFrame | None:
    """A finished chunk of an interrupted sweep, or None when there is none or it cannot be read (a damaged or
    truncated file): the chunk is then evaluated again, as if it had never been written."""
    if not path.is_file():
        return None
    try:
        chunk = pd.read_pickle(path)
    except Exception:  # noqa: BLE001 - any unreadable cache file is recomputed, not trusted
        return None
    return chunk if isinstance(chunk, pd.DataFrame) else None


def open_parts(out, fingerprint: str, nchunks: int, meta: dict, resume: bool) -> tuple[Path, dict]:
    """The parts folder of `out` and the chunks already in it (resume); InputError if it holds
    another sweep's chunks."""
    parts = Path(str(out) + ".parts")
    manifest = parts / "manifest.json"
    done: dict[int, pd.DataFrame] = {}
    if parts.exists() and not resume:
        shutil.rmtree(parts)
    if parts.exists():
        try:
            old = json.loads(manifest.read_text())
        except (OSError, ValueError):
            old = {}
        if old.get("fingerprint") != fingerprint:
            raise InputError(f"{parts} holds chunks of a different sweep; delete it or run without resume")
        for k in range(nchunks):
            chunk = read_chunk(chunk_path(parts, k))
            if chunk is not None:
                done[k] = chunk
    else:
        parts.mkdir(parents=True)
        tmp = manifest.with_name("manifest.json.tmp")
        tmp.write_text(json.dumps({"fingerprint": fingerprint, **meta}))
        os.replace(tmp, manifest)
    return parts, done
