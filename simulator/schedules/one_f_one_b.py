"""1F1B (PipeDream-Flush / DAPPLE; Megatron ``schedules.py``): warm-up forwards, then one forward and
one backward alternately, then the remaining backwards; a flush ends the step.

Rank r (stage r) runs ``min(m, p-r-1)`` warm-up forwards (Narayanan et al. 2021 §2.2.1; formulas.md
§5.3), which bounds its in-flight microbatches to ``min(m, p-r)`` (formulas.md §3.5).
Closed form (uniform stages, zero p2p): bubble = (p-1)/(m+p-1) of the makespan (§5.2).

Makespan with a p2p delay δ per hop (uniform stages, B' = B + W the full backward):
    makespan = (m + p − 1)·(F + B') + [2(p − 1) + 2(m − 1 − ⌈(m − 1)/p⌉)]·δ
exact for every p, m ≥ 1, δ ≥ 0: one linear form (1F1B on uniform stages has no slack at δ = 0, every
cross-rank edge on its longest path is tight, so each hop on it is exposed in full).
Derivation (the longest path of the op DAG). In the steady state rank r follows B(j) with
F(j + p − r), so a path can leave rank r at B(j), take F(j + p − r) down to the last rank (F then B
there) and come back up to rank r's B(j + p − r): a *loop* of length L = p − r, L·(F + B') +
2(L − 1)·δ for L microbatches; staying on rank r (B(j), F, B(j + 1)) is a loop of length 1, no hop.
The longest path is microbatch 0's forward down to the last rank (p − 1 hops), loops that carry it
from microbatch 0 to m − 1, and microbatch m − 1's backward back up (p − 1 hops). Every such path has
m + p − 1 F's and as many B's; the loops' lengths add up to m − 1 with L ≤ p, so at least
⌈(m − 1)/p⌉ loops and at most 2((m − 1) − ⌈(m − 1)/p⌉) hops in them. The steady state's critical
cycle is the loop through all p ranks: F + B' + 2(p − 1)δ/p per microbatch (not F + B'), which is why
2(p − 1)·δ alone (fill and drain) is far too small when m ≫ p. The symbolic longest path over every
path's (n_F, n_B, n_W, n_hops) (tests/test_pipeline_p2p_closed_forms.py) confirms that no other path is
longer for p ≤ 6, m ≤ 3p + 2; seeded replays check larger shapes.
"""
import numpy as np

from ..errors import InputError
from .op import FlushSpec, check_counts, flush_columns, make_schedule
from .family import ScheduleFamily, exact_everywhere


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


def loop_hops(p, m):
    """2(m − 1 − ⌈(m − 1)/p⌉): the hops of 1F1B's steady-state loops (module docstring), 0 for m ≤ 2."""
    return 2.0 * np.maximum(0.0, (m - 1.0) - np.ceil((m - 1.0) / p))


def makespan_1f1b(p, m, v, t, f, b, w, d=0.0):
    """(m + p − 1)·t (Narayanan et al. 2021 §2.2.1) + [2(p − 1) + loop hops]·d (module docstring)."""
    return (m + (p - 1.0)) * t + (2 * (p - 1.0) + loop_hops(p, m)) * d

FAMILIES = (ScheduleFamily(name="1f1b", order=1, build=build_1f1b, flush_spec=spec_1f1b,
                           inflight=inflight_1f1b, makespan=makespan_1f1b, p2p_exact=exact_everywhere,
                           source="Narayanan et al. 2021 §2.2.1 (PipeDream-Flush)"),)
