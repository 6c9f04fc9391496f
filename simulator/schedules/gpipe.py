"""GPipe: all forwards, then all backwards (Huang et al. 2019, "GPipe", §2.3; the order of
`torch.distributed.pipelining.ScheduleGPipe`: backwards in microbatch order 0..m-1).

Closed form (uniform stages, zero p2p): bubble = (p-1)/(m+p-1) of the makespan; peak in-flight
microbatches = m on every rank (formulas.md §3.5, §5.2).
"""
import numpy as np

from .op import FlushSpec, check_counts, flush_columns, make_schedule
from .family import ScheduleFamily


def build_gpipe(*, pp: int, microbatches: int, vpp: int = 1):
    """Rank r holds stage r: ``rF0 .. rF(m-1) rB0 .. rB(m-1)`` (full backwards)."""
    check_counts("gpipe", pp=pp, microbatches=microbatches, vpp=vpp)
    if vpp != 1:
        from ..errors import InputError
        raise InputError(f"gpipe: vpp must be 1, got {vpp} (use 'interleaved' for virtual stages)")
    cols = flush_columns(*spec_gpipe(pp=pp, microbatches=microbatches))
    return make_schedule("gpipe", columns=cols, num_stages=pp, num_microbatches=microbatches, chunks_per_rank=1)


def spec_gpipe(*, pp: int, microbatches: int) -> FlushSpec:
    """GPipe as a flushed schedule (`op.flush_columns`): all m forwards as the warm-up, then one
    backward per step."""
    m = microbatches
    return FlushSpec(np.full(pp, m), [(1, 0)], np.full(pp, m), m, False)


def inflight_gpipe(p, m, i, v=1):
    """m on every rank: all forwards run before any backward (Huang et al. 2019 §2.3)."""
    return m + 0 * i


def makespan_gpipe(p, m, v, t, f, b, w):
    """(m + p − 1)·t (Huang et al. 2019)."""
    return (m + (p - 1.0)) * t

FAMILIES = (ScheduleFamily(name="gpipe", order=0, build=build_gpipe, flush_spec=spec_gpipe, forwards_first=True,
                           inflight=inflight_gpipe, makespan=makespan_gpipe,
                           source="Huang et al. 2019, GPipe §2.3"),)
