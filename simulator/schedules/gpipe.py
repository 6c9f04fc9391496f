"""GPipe: all forwards, then all backwards (Huang et al. 2019, "GPipe", §2.3; the order of
`torch.distributed.pipelining.ScheduleGPipe`: backwards in microbatch order 0..m-1).

Closed form (uniform stages, zero p2p): bubble = (p-1)/(m+p-1) of the makespan; peak in-flight
microbatches = m on every rank (formulas.md §3.5, §5.2).

Makespan with a p2p delay δ per hop (uniform stages, B' = B + W the full backward):
    makespan = (m + p − 1)·(F + B') + 2(p − 1)·δ          exact for every p, m ≥ 1, δ ≥ 0.
Derivation (the longest path of the op DAG): F(r, j) waits for F(r, j−1) on its rank and for
F(r−1, j) + δ, so its end is the longest monotone lattice path to (r, j): each has j steps along the
rank (F each) and r steps down (F + δ each), end = (j + 1)F + r(F + δ), whichever path. The backwards
are the mirror image, entered when the last rank's forwards end (B(p−1, 0) follows F(p−1, m−1) on its
rank; the other ranks' own F(r, m−1) end earlier): B(0, m−1) ends at mF + (p−1)(F + δ) + mB' +
(p−1)(B' + δ). Only the first forward's and the last backward's hops are exposed, whatever m: GPipe has
no steady state in which a transfer could stretch the cycle.
"""
import numpy as np

from .op import FlushSpec, check_counts, flush_columns, make_schedule
from .family import ScheduleFamily, exact_everywhere


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


def makespan_gpipe(p, m, v, t, f, b, w, d=0.0):
    """(m + p − 1)·t + 2(p − 1)·d (Huang et al. 2019; the p2p term: module docstring)."""
    return (m + (p - 1.0)) * t + 2 * (p - 1.0) * d


FAMILIES = (ScheduleFamily(name="gpipe", order=0, build=build_gpipe, flush_spec=spec_gpipe, forwards_first=True,
                           inflight=inflight_gpipe, makespan=makespan_gpipe, p2p_exact=exact_everywhere,
                           source="Huang et al. 2019, GPipe §2.3"),)
