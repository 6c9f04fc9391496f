"""PipeDream (asynchronous 1F1B with weight stashing; Narayanan et al. 2019, SOSP, §3.2-3.3).

The op order of one window of m microbatches is 1F1B's (startup, then one forward and one backward
alternately), but there is no flush: the next step's forwards follow directly, so what matters is
the steady-state time per microbatch (the slowest stage's F+B when p2p is hidden) and the weight
versions each stage stashes: one per microbatch in flight, ``p - r`` on stage r (§3.3: "the number
of weight versions stashed is at most the number of in-flight microbatches").
"""
import numpy as np

from ..errors import InputError
from .one_f_one_b import spec_1f1b
from .op import check_counts, flush_columns, make_schedule
from .family import ScheduleFamily


def build_pipedream(*, pp: int, microbatches: int, vpp: int = 1):
    check_counts("pipedream", pp=pp, microbatches=microbatches, vpp=vpp)
    if vpp != 1:
        raise InputError(f"pipedream: vpp must be 1, got {vpp}")
    cols = flush_columns(*spec_1f1b(pp=pp, microbatches=microbatches))
    return make_schedule("pipedream", columns=cols, num_stages=pp, num_microbatches=microbatches,
                         chunks_per_rank=1, asynchronous=True,
                         notes="asynchronous: no flush; read the steady state, not the makespan")


def inflight_pipedream(p, m, i, v=1):
    """min(m, p − i): 1F1B's order without the flush (§3.3: one stashed version per microbatch in flight)."""
    return np.minimum(m, p - i)

FAMILIES = (ScheduleFamily(name="pipedream", order=8, build=build_pipedream, synchronous=False,
                           inflight=inflight_pipedream,
                           source="Narayanan et al. 2019, SOSP §3.2-3.3"),)
