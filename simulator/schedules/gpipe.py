"""GPipe: all forwards, then all backwards (Huang et al. 2019, "GPipe", §2.3; the order of
`torch.distributed.pipelining.ScheduleGPipe`: backwards in microbatch order 0..m-1).

Closed form (uniform stages, zero p2p): bubble = (p-1)/(m+p-1) of the makespan; peak in-flight
microbatches = m on every rank (formulas.md §3.5, §5.2).
"""
from .op import Op, check_counts, make_schedule


def build_gpipe(*, pp: int, microbatches: int, vpp: int = 1):
    """Rank r holds stage r: ``rF0 .. rF(m-1) rB0 .. rB(m-1)`` (full backwards)."""
    check_counts("gpipe", pp=pp, microbatches=microbatches, vpp=vpp)
    if vpp != 1:
        from ..errors import InputError
        raise InputError(f"gpipe: vpp must be 1, got {vpp} (use 'interleaved' for virtual stages)")
    ranks = []
    for r in range(pp):
        ops = [Op(kind="F", stage=r, microbatch=j, rank=r) for j in range(microbatches)]
        ops += [Op(kind="B", stage=r, microbatch=j, rank=r, includes_weight=True) for j in range(microbatches)]
        ranks.append(ops)
    return make_schedule("gpipe", ranks, num_stages=pp, num_microbatches=microbatches, chunks_per_rank=1)
