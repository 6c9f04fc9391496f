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
"""
import numpy as np

from ..errors import InputError
from .op import KIND_INDEX, check_counts, make_schedule, rank_columns, running_count, tiled


def build_zb_v(*, pp: int, microbatches: int, vpp: int = 2):
    check_counts("zb-v", pp=pp, microbatches=microbatches, vpp=vpp)
    if vpp not in (1, 2):
        raise InputError(f"zb-v: holds exactly 2 chunks per rank; vpp must be 1 or 2, got {vpp}")
    m = microbatches
    n = max(m, 2 * pp - 1)
    F, B, W = KIND_INDEX["F"], KIND_INDEX["B"], KIND_INDEX["W"]
    ranks = []
    for r in range(pp):
        c0, c1 = r, 2 * pp - 1 - r
        # phase 4 runs while forwards remain: first with a c0 forward each (until n are in), then without
        # until c1 has caught up with c0
        f0, f1 = 2 * (pp - r) - 1 + r, pp
        a = max(0, n - f0)
        t = tiled(([(F, c0)], 2 * (pp - r) - 1),
                  ([(F, c1), (F, c0)], r),
                  ([(F, c1), (B, c1), (W, c1)], pp - r),
                  ([(F, c0), (B, c0), (W, c0), (F, c1), (B, c1), (W, c1)], a),
                  ([(B, c0), (W, c0), (F, c1), (B, c1), (W, c1)], max(0, max(f0, n) - (f1 + a))),
                  ([(B, c0), (B, c1)], r),
                  ([(B, c0), (W, c0)], pp - r))
        kind, chunk = t[:, 0], t[:, 1]
        j = running_count(kind * 2 * pp + chunk)  # microbatch numbers: per-(kind, chunk) running counts
        # trailing W's: c1 first, then c0
        tail = [(np.full(hi - lo, W), np.full(hi - lo, c), np.arange(lo, hi)) for c in (c1, c0)
                for lo, hi in [(int(((kind == W) & (chunk == c)).sum()), int(((kind == B) & (chunk == c)).sum()))]]
        kind = np.concatenate([kind] + [x[0] for x in tail])
        chunk = np.concatenate([chunk] + [x[1] for x in tail])
        j = np.concatenate([j] + [x[2] for x in tail])
        keep = j < m  # slots beyond the m microbatches are dropped
        ranks.append((kind[keep], chunk[keep], j[keep]))
    return make_schedule("zb-v", num_stages=2 * pp, num_microbatches=m, chunks_per_rank=2,
                         columns=rank_columns(ranks, split=True))
