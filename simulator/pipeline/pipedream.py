"""Steady state of the asynchronous PipeDream pipeline (Narayanan et al. 2019, SOSP, §3).

Without a flush, step after step the pipeline settles into a periodic regime; its time per
microbatch is the spacing of consecutive forwards on rank 0 once the startup transient has passed.
With p2p hidden and stage r costing F_r + B_r per microbatch, that spacing is max_r (F_r + B_r): the
slowest stage sets the throughput (§3.1). Stashed weight versions per stage = microbatches in flight
(§3.3), read from the replayed order.
"""
import numpy as np


def steady_state_time_per_microbatch(schedule, start_s) -> float:
    """Mean spacing of rank 0's forward starts over the window [m/2, m - p) of the replayed order
    (after the startup ramp, before the last microbatches, which a flushed window would drain).

    Exact once the max-plus recurrence is periodic; needs m >= 2p + 2 for a window of >= 2 forwards,
    else falls back to the whole run (first to last forward).
    """
    a = schedule.arrays
    m, p = schedule.num_microbatches, schedule.num_ranks
    sel = (a.rank == 0) & (a.kind == 0)
    starts = np.empty(m)
    starts[a.microbatch[sel]] = start_s[sel]
    lo, hi = m // 2, m - p
    if hi - lo < 2:
        lo, hi = 0, m - 1
    if hi <= lo:
        return float("nan")
    return float((starts[hi] - starts[lo]) / (hi - lo))
