"""How many CPU cores this process may use (its affinity mask on Linux; the CPU count elsewhere)."""
from __future__ import annotations

import os


def available_cores() -> int:
    """Cores this process may run on: the sweep starts one worker process per core, the replay one
    thread per core."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
