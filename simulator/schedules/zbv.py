"""ZB-V (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", §6 / sail-sg README "ZB-V"): two chunks
per rank in a V — rank r holds stage r (going down) and stage 2p-1-r (coming back up), so the first
and the last stage both live on rank 0 — with B/W split. Peak activation memory equals 1F1B's.

Per-rank phases (the order of `torch.distributed.pipelining.ScheduleZBVZeroBubble`), with
``c0 = r``, ``c1 = 2p-1-r`` and n = max(m, 2p-1) microbatch slots (slots >= m are dropped):
  1. ``2(p-r)-1`` forwards of c0;
  2. r pairs (F c1, F c0);
  3. p-r triples (F c1, B c1, W c1);
  4. while forwards remain: (F c0 if any left, B c0, W c0, F c1, B c1, W c1);
  5. r pairs (B c0, B c1), then p-r pairs (B c0, W c0 of the oldest pending);
  6. the pending W's of c1, then of c0.
No closed form with p2p here: `makespan_zb_v` adds 2(p − 1)·δ (the old first-forward / last-backward
term), while every microbatch's forward and backward each cross 2(p − 1) rank boundaries in the V and
the replay's slope in δ is 13-17 at p = 4 and 33-41 at p = 8 (docs/pipeline.md): an underestimate.
"""
import numpy as np

from ..errors import InputError
from .op import KIND_INDEX, check_counts, make_schedule, running_count, tiled
from .family import ScheduleFamily


def build_zb_v(*, pp: int, microbatches: int, vpp: int = 2):
    check_counts("zb-v", pp=pp, microbatches=microbatches, vpp=vpp)
    if vpp not in (1, 2):
        raise InputError(f"zb-v: holds exactly 2 chunks per rank; vpp must be 1 or 2, got {vpp}")
    m = microbatches
    n = max(m, 2 * pp - 1)
    F, B, W = KIND_INDEX["F"], KIND_INDEX["B"], KIND_INDEX["W"]
    progs = []
    for r in range(pp):
        c0, c1 = r, 2 * pp - 1 - r
        # phase 4 runs while forwards remain: first with a c0 forward each (until n are in), then without
        # until c1 has caught up with c0
        f0, f1 = 2 * (pp - r) - 1 + r, pp
        a = max(0, n - f0)
        progs.append(tiled(([(F, c0)], 2 * (pp - r) - 1),
                           ([(F, c1), (F, c0)], r),
                           ([(F, c1), (B, c1), (W, c1)], pp - r),
                           ([(F, c0), (B, c0), (W, c0), (F, c1), (B, c1), (W, c1)], a),
                           ([(B, c0), (W, c0), (F, c1), (B, c1), (W, c1)], max(0, max(f0, n) - (f1 + a))),
                           ([(B, c0), (B, c1)], r),
                           ([(B, c0), (W, c0)], pp - r)))
    # every rank at once: a chunk belongs to one rank, so per-(kind, chunk) running counts are the
    # microbatch numbers of each rank's program
    rank = np.repeat(np.arange(pp), [len(t) for t in progs])
    kind, chunk = np.concatenate(progs).T
    j = running_count(kind * 2 * pp + chunk)
    # trailing W's of each rank: chunk c1's pending ones, then c0's (microbatches #W..#B-1 of the chunk)
    done_w = np.bincount(chunk[kind == W], minlength=2 * pp)
    pend = np.bincount(chunk[kind == B], minlength=2 * pp) - done_w
    tail_chunk = np.stack([2 * pp - 1 - np.arange(pp), np.arange(pp)], axis=1).ravel()  # rank-major: c1, c0
    size = pend[tail_chunk]
    t_chunk = np.repeat(tail_chunk, size)
    t_j = np.arange(size.sum()) - np.repeat(np.cumsum(size) - size, size) + np.repeat(done_w[tail_chunk], size)
    t_rank = np.repeat(np.arange(pp), size.reshape(pp, 2).sum(axis=1))
    order = np.argsort(np.concatenate([rank, t_rank]), kind="stable")  # each rank: its program, then its W's
    kind, chunk, j, rank = (np.concatenate(x)[order] for x in ((kind, np.full(len(t_chunk), W)), (chunk, t_chunk),
                                                               (j, t_j), (rank, t_rank)))
    keep = j < m  # slots beyond the m microbatches are dropped
    n_ops = int(keep.sum())  # B and W split (no B includes W); no paired ops
    columns = (kind[keep], chunk[keep], j[keep], np.zeros(n_ops, bool), np.zeros(n_ops, bool),
               np.bincount(rank[keep], minlength=pp))
    return make_schedule("zb-v", num_stages=2 * pp, num_microbatches=m, chunks_per_rank=2, columns=columns)


def inflight_zb_v(p, m, i, v=1):
    """min(m, p) on every rank (Qi et al. 2024 §4: ZB-V's peak is p·M_B, balanced)."""
    return np.minimum(m, p) + 0 * i


def makespan_zb_v(p, m, v, t, f, b, w, d=0.0):
    """m·t + (p − 1)·max(0, F + B − 2W) with F, B, W of one chunk (half the rank's; Qi et al. 2024 §4),
    + 2(p − 1)·d: approximate (module docstring)."""
    f, b, w = f / 2, b / 2, w / 2
    return m * t + (p - 1.0) * np.maximum(0.0, f + b - 2 * w) + 2 * (p - 1.0) * d

FAMILIES = (ScheduleFamily(name="zb-v", order=5, build=build_zb_v, geometry="v", chunks=2, split_backward=True,
                           inflight=inflight_zb_v, makespan=makespan_zb_v, source="Qi et al. 2024 §4 (ZB-V)"),)
