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
from ..errors import InputError
from .op import Op, check_counts, make_schedule


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

    def fwd(r, k):
        chunk = (k // G) % v
        return Op(kind="F", stage=r + chunk * pp, microbatch=(k // (G * v)) * G + k % G, rank=r)

    def bwd(r, k):
        chunk = v - 1 - (k // G) % v
        return Op(kind="B", stage=r + chunk * pp, microbatch=(k // (G * v)) * G + k % G, rank=r,
                  includes_weight=True)

    ranks = []
    for r in range(pp):
        warm = min(total, (v - 1) * G + 2 * (pp - r - 1))
        ops = [fwd(r, k) for k in range(warm)]
        for k in range(total - warm):
            ops.append(fwd(r, warm + k))
            ops.append(bwd(r, k))
        ops += [bwd(r, k) for k in range(total - warm, total)]
        ranks.append(ops)
    return make_schedule("interleaved", ranks, num_stages=pp * v, num_microbatches=m, chunks_per_rank=v)
