"""1F1B (PipeDream-Flush / DAPPLE; Megatron ``schedules.py``): warm-up forwards, then one forward and
one backward alternately, then the remaining backwards; a flush ends the step.

Rank r (stage r) runs ``min(m, p-r-1)`` warm-up forwards (Narayanan et al. 2021 §2.2.1; formulas.md
§5.3), which bounds its in-flight microbatches to ``min(m, p-r)`` (formulas.md §3.5).
Closed form (uniform stages, zero p2p): bubble = (p-1)/(m+p-1) of the makespan (§5.2).
"""
import numpy as np

from ..errors import InputError
from .op import check_counts, make_schedule, rank_columns, steps


def one_f_one_b_rank(r: int, *, pp: int, microbatches: int, split: bool = False, weight_delay=None):
    """Op order of rank r as (kind index, stage, microbatch) arrays. With `split`, each B is followed by
    W; `weight_delay` d (ZB-H1) makes the W of microbatch j run right after the B of microbatch j+d
    instead (leftovers at the end)."""
    m = microbatches
    warm = min(m, pp - r - 1)
    d = weight_delay or 0
    j = np.arange(m)
    slots = [(0, j + warm, j + warm < m), (1, j, np.ones(m, bool))]  # step j: F(j + warm), B(j), [W(j - d)]
    if split:
        slots.append((2, j - d, j >= d))
    kind, mb = steps(*slots)
    tail = np.arange(max(0, m - d), m) if split else np.zeros(0, np.int64)  # the W's not run yet
    kind = np.concatenate([np.zeros(warm, np.int64), kind, np.full(len(tail), 2)])
    mb = np.concatenate([np.arange(warm), mb, tail])
    return kind, np.full(len(kind), r), mb


def build_1f1b(*, pp: int, microbatches: int, vpp: int = 1):
    """Megatron's non-interleaved 1F1B with full backwards."""
    check_counts("1f1b", pp=pp, microbatches=microbatches, vpp=vpp)
    if vpp != 1:
        raise InputError(f"1f1b: vpp must be 1, got {vpp} (use 'interleaved' for virtual stages)")
    cols = rank_columns([one_f_one_b_rank(r, pp=pp, microbatches=microbatches) for r in range(pp)], split=False)
    return make_schedule("1f1b", columns=cols, num_stages=pp, num_microbatches=microbatches, chunks_per_rank=1)
