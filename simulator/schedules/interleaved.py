"""Interleaved 1F1B (Megatron virtual pipeline; Narayanan et al. 2021 §2.2.2).

Rank r holds the v chunks (virtual stages) ``r, r+p, ..., r+(v-1)p``. Forwards visit chunks in
groups of G microbatches: the k-th forward of a rank is chunk ``(k // G) % v`` of microbatch
``(k // (G v)) G + k % G``; backwards visit chunks in reverse order. Warm-up:
``min(m v, (v-1) G + 2 (p-r-1))`` forwards, then 1F1B, then the remaining backwards
(Megatron ``schedules.py``; formulas.md §5.3). G = m / rounds with rounds = max(1, m // p), the
relaxation of Megatron's ``m % p == 0`` that `torch.distributed.pipelining.ScheduleInterleaved1F1B`
uses; it requires m % rounds == 0.
Closed form (uniform chunks, zero p2p, m % p == 0): bubble = (p-1)/(v m + p - 1) of the makespan.
"""
import numpy as np

from ..errors import InputError
from .op import check_counts, make_schedule
from .family import ScheduleFamily


def microbatch_group_size(pp: int, microbatches: int) -> int:
    """G: microbatches per round (torch's ``microbatches_per_round``); InputError if m % rounds."""
    rounds = max(1, microbatches // pp)
    if microbatches % rounds:
        raise InputError(f"interleaved: microbatches ({microbatches}) must be a multiple of "
                         f"max(1, microbatches // pp) = {rounds}")
    return microbatches // rounds


def build_interleaved(*, pp: int, microbatches: int, vpp: int = 2):
    check_counts("interleaved", pp=pp, microbatches=microbatches, vpp=vpp)
    m, v = microbatches, vpp
    G = microbatch_group_size(pp, m)
    total = m * v

    # every rank runs 2·total ops: position i of rank r is a warm-up forward (i < warm_r), then F/B pairs,
    # then the remaining backwards; k is the rank's forward / backward counter at that position
    r = np.arange(pp)[:, None]
    i = np.arange(2 * total)[None, :]
    warm = np.minimum(total, (v - 1) * G + 2 * (pp - r - 1))
    steady = total - warm
    d = i - warm
    in_warm, in_pair = i < warm, (d >= 0) & (d < 2 * steady)
    is_b = ~in_warm & ~(in_pair & (d % 2 == 0))
    k = np.where(in_warm, i, np.where(in_pair, np.where(d % 2 == 0, warm + d // 2, d // 2), d - steady))
    chunk = np.where(is_b, v - 1 - (k // G) % v, (k // G) % v)
    is_b = is_b.ravel()
    columns = (is_b.astype(np.int64), (r + chunk * pp).ravel(), ((k // (G * v)) * G + k % G).ravel(),
               is_b, np.zeros(len(is_b), bool), np.full(pp, 2 * total))  # every B includes W
    return make_schedule("interleaved", columns=columns, num_stages=pp * v, num_microbatches=m, chunks_per_rank=v)


def inflight_interleaved(p, m, i, v=1):
    """min(v·m, 2(p − i − 1) + (v − 1)·p + 1) / v: the warm-up forwards of rank i plus one, in chunk
    microbatches, over its v chunks (Megatron schedules.py warm-up; theoretical_memory_usage.py: rank 0
    holds p·(1 + (p − 1)/(p·v)) microbatches' worth)."""
    return np.minimum(v * m, 2 * (p - i - 1) + (v - 1) * p + 1) / v


def makespan_interleaved(p, m, v, t, f, b, w):
    """(v·m + p − 1)·t/v, t/v one chunk's F+B+W (Narayanan et al. 2021 §2.2.2)."""
    v = np.asarray(v, dtype=float)
    return (v * m + (p - 1.0)) * (t / v)

FAMILIES = (ScheduleFamily(name="interleaved", order=2, build=build_interleaved, chunks=None,
                           inflight=inflight_interleaved, makespan=makespan_interleaved,
                           source="Narayanan et al. 2021 §2.2.2"),)
