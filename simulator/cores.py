"""The CPU cores this process may use (its affinity mask on Linux; the CPU count elsewhere)."""
from __future__ import annotations

import os


def core_ids() -> list[int] | None:
    """The cores this process may run on (Linux), or None where the OS does not say."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return None


def available_cores() -> int:
    """How many cores this process may run on: the sweep starts one worker process per core, the
    replay one thread per core."""
    ids = core_ids()
    return len(ids) if ids is not None else (os.cpu_count() or 1)
