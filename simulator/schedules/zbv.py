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
from .op import KIND_INDEX, check_counts, make_schedule, rank_columns


def build_zb_v(*, pp: int, microbatches: int, vpp: int = 2):
    check_counts("zb-v", pp=pp, microbatches=microbatches, vpp=vpp)
    if vpp not in (1, 2):
        raise InputError(f"zb-v: holds exactly 2 chunks per rank; vpp must be 1 or 2, got {vpp}")
    m = microbatches
    n = max(m, 2 * pp - 1)
    ranks = []
    for r in range(pp):
        c0, c1 = r, 2 * pp - 1 - r
        seq = []  # (kind, chunk) in order; microbatch numbers come from per-(kind, chunk) counters
        seq += [("F", c0)] * (2 * (pp - r) - 1)
        seq += [("F", c1), ("F", c0)] * r
        seq += [("F", c1), ("B", c1), ("W", c1)] * (pp - r)
        f0 = 2 * (pp - r) - 1 + r
        f1 = r + (pp - r)
        while f1 < f0 or f0 < n:
            if f0 < n:
                seq.append(("F", c0))
                f0 += 1
            seq += [("B", c0), ("W", c0), ("F", c1), ("B", c1), ("W", c1)]
            f1 += 1
        seq += [("B", c0), ("B", c1)] * r
        seq += [("B", c0), ("W", c0)] * (pp - r)
        counters = {}
        ops = []
        for kind, chunk in seq:
            j = counters.get((kind, chunk), 0)
            counters[(kind, chunk)] = j + 1
            ops.append((KIND_INDEX[kind], chunk, j))
        # trailing W's: c1 first, then c0
        for chunk in (c1, c0):
            for j in range(counters.get(("W", chunk), 0), counters[("B", chunk)]):
                ops.append((2, chunk, j))
        t = np.array(ops, dtype=np.int64)
        t = t[t[:, 2] < m]  # slots beyond the m microbatches are dropped
        ranks.append((t[:, 0], t[:, 1], t[:, 2]))
    return make_schedule("zb-v", num_stages=2 * pp, num_microbatches=m, chunks_per_rank=2,
                         columns=rank_columns(ranks, split=True))
