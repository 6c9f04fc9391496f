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
our replays find ZB-H2's flushed makespan equal to ZB-H1's (docs/pipeline.md).
"""
import numpy as np

from ..errors import InputError
from .one_f_one_b import one_f_one_b_spec
from .op import FlushSpec, check_counts, flush_columns, make_schedule
from .family import ScheduleFamily


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


def makespan_zb_h1(p, m, v, t, f, b, w):
    """m·t + (p − 1)·(F + B − W) (Qi et al. 2024 §2.1)."""
    return m * t + (p - 1.0) * (f + b - w)


def inflight_zb_h2(p, m, i, v=1):
    """min(m, 2p − 1 − i) (Qi et al. 2024 §2.2: peak 2p − 1 on the first stage)."""
    return np.minimum(m, 2 * p - 1 - i)


def makespan_zb_h2(p, m, v, t, f, b, w):
    """m·t + (p − 1)·max(0, F + B − 2W) (Qi et al. 2024 §2.2)."""
    return m * t + (p - 1.0) * np.maximum(0.0, f + b - 2 * w)

FAMILIES = (ScheduleFamily(name="zb-h1", order=3, build=build_zb_h1, split_backward=True, flush_spec=spec_zb_h1,
                           inflight=inflight_zb_h1, makespan=makespan_zb_h1,
                           source="Qi et al. 2024 §2.1"),
            ScheduleFamily(name="zb-h2", order=4, build=build_zb_h2, split_backward=True, flush_spec=spec_zb_h2,
                           inflight=inflight_zb_h2, makespan=makespan_zb_h2,
                           source="Qi et al. 2024 §2.2"))
