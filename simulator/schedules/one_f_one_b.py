"""1F1B (PipeDream-Flush / DAPPLE; Megatron ``schedules.py``): warm-up forwards, then one forward and
one backward alternately, then the remaining backwards; a flush ends the step.

Rank r (stage r) runs ``min(m, p-r-1)`` warm-up forwards (Narayanan et al. 2021 §2.2.1; formulas.md
§5.3), which bounds its in-flight microbatches to ``min(m, p-r)`` (formulas.md §3.5).
Closed form (uniform stages, zero p2p): bubble = (p-1)/(m+p-1) of the makespan (§5.2).
"""
from ..errors import InputError
from .op import Op, check_counts, make_schedule


def one_f_one_b_rank(r: int, *, pp: int, microbatches: int, split: bool = False, weight_delay=None):
    """Op order of rank r. With `split`, each B is followed by W; `weight_delay` d (ZB-H1) makes
    the W of microbatch j run right after the B of microbatch j+d instead (leftovers at the end)."""
    m = microbatches
    warm = min(m, pp - r - 1)
    ops = [Op(kind="F", stage=r, microbatch=j, rank=r) for j in range(warm)]
    next_w = 0
    for j in range(m):
        if j + warm < m:
            ops.append(Op(kind="F", stage=r, microbatch=j + warm, rank=r))
        ops.append(Op(kind="B", stage=r, microbatch=j, rank=r, includes_weight=not split))
        if split and j >= (weight_delay or 0):
            ops.append(Op(kind="W", stage=r, microbatch=next_w, rank=r))
            next_w += 1
    if split:
        ops += [Op(kind="W", stage=r, microbatch=j, rank=r) for j in range(next_w, m)]
    return ops


def build_1f1b(*, pp: int, microbatches: int, vpp: int = 1):
    """Megatron's non-interleaved 1F1B with full backwards."""
    check_counts("1f1b", pp=pp, microbatches=microbatches, vpp=vpp)
    if vpp != 1:
        raise InputError(f"1f1b: vpp must be 1, got {vpp} (use 'interleaved' for virtual stages)")
    ranks = [one_f_one_b_rank(r, pp=pp, microbatches=microbatches) for r in range(pp)]
    return make_schedule("1f1b", ranks, num_stages=pp, num_microbatches=microbatches, chunks_per_rank=1)
