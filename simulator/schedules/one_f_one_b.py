"""1F1B (PipeDream-Flush / DAPPLE; Megatron ``schedules.py``): warm-up forwards, then one forward and
one backward alternately, then the remaining backwards; a flush ends the step.

Rank r (stage r) runs ``min(m, p-r-1)`` warm-up forwards (Narayanan et al. 2021 §2.2.1; formulas.md
§5.3), which bounds its in-flight microbatches to ``min(m, p-r)`` (formulas.md §3.5).
Closed form (uniform stages, zero p2p): bubble = (p-1)/(m+p-1) of the makespan (§5.2).
"""
import numpy as np

from ..errors import InputError
from .op import FlushSpec, check_counts, flush_columns, make_schedule
from .family import ScheduleFamily


def one_f_one_b_spec(*, pp: int, microbatches: int, split: bool = False, weight_delay=None) -> FlushSpec:
    """The flushed-schedule description (`op.flush_columns`) of 1F1B: rank r runs ``min(m, p-r-1)``
    warm-up forwards, then step j runs F(j + warm-up) and B(j); with `split` each B is followed by a
    W; `weight_delay` d (per rank, ZB-H1: d = r) makes the W of microbatch j run right after the B of
    microbatch j+d instead (leftovers at the end)."""
    m = microbatches
    warm = np.minimum(m, pp - np.arange(pp) - 1)
    d = np.zeros(pp, np.int64) if weight_delay is None else np.asarray(weight_delay, dtype=np.int64).reshape(pp)
    slots = [(0, warm), (1, 0)]  # step j: F(j + warm-up), B(j) (then W(j - d))
    if split:
        slots.append((2, -d))
    tail = np.maximum(0, m - d) if split else np.full(pp, m)  # the W's not run yet
    return FlushSpec(warm, slots, tail, m, split)


def spec_1f1b(*, pp: int, microbatches: int) -> FlushSpec:
    """Megatron's non-interleaved 1F1B with full backwards, as a flushed schedule."""
    return one_f_one_b_spec(pp=pp, microbatches=microbatches)


def build_1f1b(*, pp: int, microbatches: int, vpp: int = 1):
    """Megatron's non-interleaved 1F1B with full backwards."""
    check_counts("1f1b", pp=pp, microbatches=microbatches, vpp=vpp)
    if vpp != 1:
        raise InputError(f"1f1b: vpp must be 1, got {vpp} (use 'interleaved' for virtual stages)")
    cols = flush_columns(*spec_1f1b(pp=pp, microbatches=microbatches))
    return make_schedule("1f1b", columns=cols, num_stages=pp, num_microbatches=microbatches, chunks_per_rank=1)


def inflight_1f1b(p, m, i, v=1):
    """min(m, p − i): rank i runs p − i − 1 warm-up forwards, then one more before its first backward
    (Megatron schedules.py)."""
    return np.minimum(m, p - i)


def makespan_1f1b(p, m, v, t, f, b, w):
    """(m + p − 1)·t (Narayanan et al. 2021 §2.2.1)."""
    return (m + (p - 1.0)) * t

FAMILIES = (ScheduleFamily(name="1f1b", order=1, build=build_1f1b, flush_spec=spec_1f1b,
                           inflight=inflight_1f1b, makespan=makespan_1f1b,
                           source="Narayanan et al. 2021 §2.2.1 (PipeDream-Flush)"),)
