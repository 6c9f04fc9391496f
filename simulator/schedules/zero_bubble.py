"""Handcrafted zero-bubble schedules ZB-H1 and ZB-H2 (Qi et al. 2024, "Zero Bubble Pipeline
Parallelism", ICLR, §2.1-2.2): the backward is split into B (input gradient, on the critical path)
and W (weight gradient, free to move).

ZB-H1: 1F1B's warm-up and F/B alternation; rank r runs the W of microbatch j after the B of
microbatch j+r, so the W's fill the drain. Same peak memory as 1F1B (p microbatches on rank 0);
idle per rank (uniform stages, zero p2p) = (p-1)(F+B-W) (paper §2.1; formulas.md §5.2). This is
the op order of `torch.distributed.pipelining.ScheduleInterleavedZeroBubble` with one stage per rank.

ZB-H2: rank r runs ``min(m, 2(p-r)-1)`` warm-up forwards (peak 2p-1 microbatches on rank 0, paper
§2.2), then cycles ``B_j, W_(j-r), F_(j+warm-up)``, then the remaining W's. The paper's zero bubble
for ZB-H2 also needs its optimizer post-validation, which lets one step's tail overlap the next
step's warm-up; within one flushed step the last rank still waits (p-1)F for its first input, and
our replays find ZB-H2's flushed makespan equal to ZB-H1's when F ≥ min(B, W) (docs/pipeline.md).

ZB-H1's makespan with a p2p delay δ per hop (uniform stages; t = F + B + W, n = p − 1,
L(x) = (x − 1) − ⌈(x − 1)/p⌉, 1F1B's steady-state loop count over x microbatches):
  m > p:  m·t + max( n·(B + 2δ),
                     n·(F + 3δ) + max(0, n·(B − W + δ)) + L(m − p)·max(0, 2δ − W) )
  m ≤ p:  m·t + max( (p − m)·F + n·B + 2n·δ,  n·F + (p − m)·B + (2p + m − 5)·δ,
                     n·(F + B) − (m − 1)·W + (2p + 2m − 6)·δ )
exact for every p, m ≥ 1, δ ≥ 0. At δ = 0 (m > p): m·t + n·max(B, F + max(0, B − W)), the paper's
m·t + n·(F + B − W) when W ≤ min(F, B). Derivation (the longest path of the op DAG), for m > p:
- n·(B + 2δ): microbatch 0 down to the last rank and back up (2n hops), then rank 0's ops back to back
  to the end (its n warm-up forwards replaced on the path by the other ranks' F and B of microbatch 0);
- n·(F + 3δ): the same round trip, rank 0 up to its last forward, that microbatch down to the last
  rank (n more hops) and the last rank's remaining ops (its delayed W's);
- n·(F + B − W + 4δ): as the previous, but back up with the last microbatch's B's (n more hops) to
  rank 0's final W;
- + L(m − p)·(2δ − W) when 2δ > W: rank r follows B(j) by W(j − r) and F(j + p − r), so a path can
  replace part of a rank's stretch by 1F1B's loops (module one_f_one_b): a loop of length L costs
  L(F + B) + W + 2(L − 1)δ instead of L·t, each microbatch after a loop's first trading its W for two
  hops; microbatches p .. m−1 hold L(m − p) of them. The steady state's cycle is thus
  F + B + max(W, (W + 2nδ)/p) per microbatch.
For m ≤ p the W's of rank r wait for its B of microbatch r: no steady state, the three endings with
the warm-up's counts. The symbolic longest path over every path's (n_F, n_B, n_W, n_hops)
(tests/test_pipeline_p2p_closed_forms.py) equals this for p ≤ 6, m ≤ 3p + 2 (no other form is longer);
seeded replays check larger shapes. ZB-H2: no closed form with p2p here (its longest paths form a
family of linear forms that grows with p, about a dozen at p = 5); `makespan_zb_h2` adds 2(p − 1)·δ,
the replay's slope in δ at small δ in most cases we tried (p − 1 when F > B and W > B). Its δ = 0 part is
the flushed replay's exact m·t + (p − 1)·max(B − F, F + max(0, B − W)) for m ≥ 2p − 1, the paper's ZB-2p
form below that (docs/pipeline.md).
"""
import numpy as np

from ..errors import InputError
from .one_f_one_b import one_f_one_b_spec
from .op import FlushSpec, check_counts, flush_columns, make_schedule
from .family import ScheduleFamily, exact_everywhere


def spec_zb_h1(*, pp: int, microbatches: int) -> FlushSpec:
    """ZB-H1 as a flushed schedule (`op.flush_columns`): 1F1B's, each rank r delaying its W's by r."""
    return one_f_one_b_spec(pp=pp, microbatches=microbatches, split=True, weight_delay=np.arange(pp))


def spec_zb_h2(*, pp: int, microbatches: int) -> FlushSpec:
    """ZB-H2 as a flushed schedule: min(m, 2(p-r)-1) warm-up forwards, then step j runs B(j), then
    W(j - r) as ZB-H1, then F(j + warm); leftover W's at the end."""
    m = microbatches
    r = np.arange(pp)
    warm = np.minimum(m, 2 * (pp - r) - 1)
    return FlushSpec(warm, [(1, 0), (2, -r), (0, warm)], np.maximum(0, m - r), m, True)


def build_zb_h1(*, pp: int, microbatches: int, vpp: int = 1):
    check_counts("zb-h1", pp=pp, microbatches=microbatches, vpp=vpp)
    if vpp != 1:
        raise InputError(f"zb-h1: vpp must be 1, got {vpp} (zb-v holds two chunks per rank)")
    cols = flush_columns(*spec_zb_h1(pp=pp, microbatches=microbatches))
    return make_schedule("zb-h1", columns=cols, num_stages=pp, num_microbatches=microbatches, chunks_per_rank=1)


def build_zb_h2(*, pp: int, microbatches: int, vpp: int = 1):
    check_counts("zb-h2", pp=pp, microbatches=microbatches, vpp=vpp)
    if vpp != 1:
        raise InputError(f"zb-h2: vpp must be 1, got {vpp}")
    cols = flush_columns(*spec_zb_h2(pp=pp, microbatches=microbatches))
    return make_schedule("zb-h2", columns=cols, num_stages=pp, num_microbatches=microbatches,
                         chunks_per_rank=1)


def inflight_zb_h1(p, m, i, v=1):
    """min(m, p) on every rank: the postponed W's keep microbatches alive (Qi et al. 2024 §2.1: each
    worker's peak at most 1F1B's p·M_B)."""
    return np.minimum(m, p) + 0 * i


def makespan_zb_h1(p, m, v, t, f, b, w, d=0.0):
    """m·t + the larger of ZB-H1's endings (module docstring; Qi et al. 2024 §2.1: m·t + (p − 1)(F + B − W)
    at d = 0 when W ≤ min(F, B))."""
    p, m = np.asarray(p, dtype=float), np.asarray(m, dtype=float)
    n = p - 1.0
    x = np.maximum(m - p, 1.0)
    loops = (x - 1) - np.ceil((x - 1) / p)  # L(m − p), 0 when m ≤ p + 1
    steady = np.maximum(n * (b + 2 * d),
                        n * (f + 3 * d) + np.maximum(0.0, n * (b - w + d)) + loops * np.maximum(0.0, 2 * d - w))
    short = np.maximum.reduce([(p - m) * f + n * b + 2 * n * d, n * f + (p - m) * b + (2 * p + m - 5) * d,
                               n * (f + b) - (m - 1) * w + (2 * p + 2 * m - 6) * d])
    return m * t + np.where(m > p, steady, short)


def inflight_zb_h2(p, m, i, v=1):
    """min(m, 2p − 1 − i) (Qi et al. 2024 §2.2: peak 2p − 1 on the first stage)."""
    return np.minimum(m, 2 * p - 1 - i)


def makespan_zb_h2(p, m, v, t, f, b, w, d=0.0):
    """This flushed ZB-H2's makespan on uniform stages: for m ≥ 2p − 1 (every rank reaches its steady
    cycle) m·t + (p − 1)·max(B − F, F + max(0, B − W)), the symbolic longest path of its op DAG (module
    docstring; equal to the replay, tests/test_pipeline_p2p_closed_forms.py); for fewer microbatches the
    paper's ZB-2p form m·t + (p − 1)·max(0, F + B − 2W) (Qi et al. 2024 §2.2), approximate; + 2(p − 1)·d,
    approximate (no closed form with p2p)."""
    n = p - 1.0
    steady = m * t + n * np.maximum(b - f, f + np.maximum(0.0, b - w))
    paper = m * t + n * np.maximum(0.0, f + b - 2 * w)
    return np.where(np.asarray(m) >= 2 * np.asarray(p) - 1, steady, paper) + 2 * n * d

FAMILIES = (ScheduleFamily(name="zb-h1", order=3, build=build_zb_h1, split_backward=True, flush_spec=spec_zb_h1,
                           inflight=inflight_zb_h1, makespan=makespan_zb_h1, p2p_exact=exact_everywhere,
                           source="Qi et al. 2024 §2.1"),
            ScheduleFamily(name="zb-h2", order=4, build=build_zb_h2, split_backward=True, flush_spec=spec_zb_h2,
                           inflight=inflight_zb_h2, makespan=makespan_zb_h2,
                           source="Qi et al. 2024 §2.2"))
