"""DualPipe and DualPipeV (DeepSeek-AI 2024, DeepSeek-V3 technical report §3.2.1, Table 2;
the per-rank step program of ``deepseek-ai/DualPipe : dualpipe/dualpipe.py``).

DualPipe: p ranks (p even) and p stages; half of the m microbatches enter at rank 0 and run stage s
on rank s, the other half enter at rank p-1 and run stage s on rank p-1-s (each rank holds two copies
of stage weights: 2x parameters). DualPipeV ("cut in half"): the same step program on a V —
p ranks, 2p stages, rank r holds stages r and 2p-1-r (as ZB-V); every microbatch goes down and back
up. Both share one step program per rank, with H the number of "half ranks" (p/2 for DualPipe, p
for DualPipeV), h = the rank's position in it, C microbatches per phase (m/2, or m), phase 0 = the
rank's first chunk, phase 1 = its second:

  1. 2(H-h-1) x F0                    5. (H-h-1) x (B1, F1, B0)
  2. (h+1) x (F0, F1)                 6. (h+1) x (B1, B0), switching to split B (input gradient
  3. (H-h-1) x (B1 split, W, F1)         only, W queued) half way
  4. (C-2H+h+1) x (F0, B1, F1, B0)    7. (H-h-1) x (W, B0 split)
                                      8. (h+1) x W
W's run in first-in first-out order of their B's; unsplit B's are full backwards. The overlapped
"F&B" pairs of steps 4-5 (all but the middle ranks' first one) run back to back on one compute
stream here, and, as in dualpipe.py (both receives are committed before the pair computes), the F
of a pair also waits for its B's input (`Op.paired`). Their overlap hides communication, which this
replay does not model inside an op, so F&B = F + B here.
Bubble (DeepSeek-V3 Table 2, B = full backward): (p/2-1)(F&B + B - 3W).
No closed form with p2p here: the makespans add 2(p − 1)·δ (the old first-forward / last-backward
term); the replay's slope in δ is 9-16 at p = 4 and 37-40 at p = 8 for DualPipe, 16-34 and 68-82 for
DualPipeV (m = 2p-4p; docs/pipeline.md): an underestimate.
"""
import numpy as np

from ..errors import InputError
from .op import check_counts, make_schedule, running_count, tiled
from .family import ScheduleFamily


_F, _B, _W, _P = 0, 1, 2, 3  # step kinds; P = F overlapped with the following B (waits for both inputs)


def _program(H: int, h: int, C: int) -> np.ndarray:
    """The step program of one rank, (n, 3) rows (kind, phase, split) with kind in F/B/W/P (phase −1: W)."""
    n4 = C - 2 * H + h + 1
    split = 0  # step 6 switches to split backwards half way (the odd ranks one B earlier)
    n6 = h + 1
    six = []
    for i in range(n6):
        if i == n6 // 2 and h % 2 == 1:
            split = 1
        six.append((_B, 1, split))
        if i == n6 // 2 and h % 2 == 0:
            split = 1
        six.append((_B, 0, split))
    return tiled(([(_F, 0, 0)], 2 * (H - h - 1)),
                 ([(_F, 0, 0), (_F, 1, 0)], h + 1),
                 ([(_B, 1, 1), (_W, -1, 0), (_F, 1, 0)], H - h - 1),
                 # step 4; the middle ranks' first F is a plain F
                 ([(_F if h == H - 1 else _P, 0, 0), (_B, 1, 0), (_P, 1, 0), (_B, 0, 0)], min(n4, 1)),
                 ([(_P, 0, 0), (_B, 1, 0), (_P, 1, 0), (_B, 0, 0)], n4 - 1),
                 ([(_B, 1, 0), (_P, 1, 0), (_B, 0, 0)], H - h - 1),
                 (six, 1),
                 ([(_W, -1, 0), (_B, 0, split)], H - h - 1),
                 ([(_W, -1, 0)], h + 1))


def _realise(progs: list, phase_stage: np.ndarray, phase_mb_offset: np.ndarray, microbatches_per_phase: int) -> tuple:
    """Turn every rank's step program into `Schedule.columns` (kind index, stage, microbatch, includes
    weight, paired; ops per rank), all ranks at once: per-(rank, kind, phase) microbatch counters
    (`phase_stage`, `phase_mb_offset`: (ranks, 2) per phase); each W takes its rank's oldest pending
    split B (first in, first out: the k-th W of a rank is the weight gradient of its k-th split B)."""
    counts = np.array([len(p) for p in progs], dtype=np.int64)
    rank = np.repeat(np.arange(len(progs)), counts)
    kind, phase, split = np.concatenate(progs).T
    paired = kind == _P
    kind = np.where(paired, _F, kind)
    fb = kind != _W
    ph = np.maximum(phase, 0)
    j = running_count(np.where(fb, 4 * rank + 2 * kind + ph, -1))  # W's counts are not used
    assert (j[fb] < microbatches_per_phase).all()
    stage = np.asarray(phase_stage)[rank, ph]
    mb = np.asarray(phase_mb_offset)[rank, ph] + j
    is_w = kind == _W
    split_b = (kind == _B) & (split == 1)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    done_b, done_w = np.cumsum(split_b), np.cumsum(is_w)  # per rank: minus the count before its first op
    done_b, done_w = done_b - (done_b - split_b)[first][rank], done_w - (done_w - is_w)[first][rank]
    if (done_b[is_w] < done_w[is_w]).any():  # the k-th W of a rank needs k split B's of that rank before it
        raise AssertionError("dualpipe: W with no pending split backward")
    if (np.bincount(rank[is_w], minlength=len(progs)) != np.bincount(rank[split_b], minlength=len(progs))).any():
        raise AssertionError("dualpipe: a split backward without its W")
    src = np.flatnonzero(split_b)  # rank by rank, in order: the k-th W overall is the k-th split B overall
    stage[is_w], mb[is_w] = stage[src], mb[src]
    return kind, stage, mb, (kind == _B) & (split == 0), paired, counts


def build_dualpipe(*, pp: int, microbatches: int, vpp: int = 1):
    check_counts("dualpipe", pp=pp, microbatches=microbatches, vpp=vpp)
    if vpp not in (1, 2):
        raise InputError(f"dualpipe: holds two stage copies per rank; vpp must be 1 or 2, got {vpp}")
    if pp % 2:
        raise InputError(f"dualpipe: pp must be even, got {pp}")
    if microbatches % 2 or microbatches < 2 * pp:
        raise InputError(f"dualpipe: microbatches must be even and >= 2*pp = {2 * pp}, got {microbatches}")
    H, C = pp // 2, microbatches // 2
    r = np.arange(pp)
    h = np.minimum(r, pp - 1 - r)  # ranks r and p-1-r run the same program
    progs = [_program(H, int(x), C) for x in range(H)]
    # phase 0's direction: 0 (entering at rank 0, stage s on rank s) on the first half of the ranks, 1
    # (entering at rank p-1, stage s on rank p-1-s) on the second; phase 1 the other one
    direction = np.stack([r >= H, r < H], axis=1).astype(np.int64)
    stage = np.where(direction == 0, r[:, None], pp - 1 - r[:, None])
    return make_schedule("dualpipe", num_stages=pp, num_microbatches=microbatches, chunks_per_rank=2,
                         columns=_realise([progs[x] for x in h], stage, direction * C, C))


def build_dualpipev(*, pp: int, microbatches: int, vpp: int = 2):
    check_counts("dualpipev", pp=pp, microbatches=microbatches, vpp=vpp)
    if vpp not in (1, 2):
        raise InputError(f"dualpipev: holds exactly 2 chunks per rank; vpp must be 1 or 2, got {vpp}")
    if microbatches < 2 * pp:
        raise InputError(f"dualpipev: microbatches must be >= 2*pp = {2 * pp}, got {microbatches}")
    r = np.arange(pp)
    return make_schedule("dualpipev", num_stages=2 * pp, num_microbatches=microbatches, chunks_per_rank=2,
                         columns=_realise([_program(pp, int(x), microbatches) for x in r],
                                          np.stack([r, 2 * pp - 1 - r], axis=1), np.zeros((pp, 2), dtype=np.int64),
                                          microbatches))


def inflight_dualpipe(p, m, i, v=2):
    """min(m, p + 1)/2: p + 1 chunk microbatches of L/p layers, in units of the rank's two chunks
    (DeepSeek-V3 report Table 2; deepseek-ai/DualPipe README)."""
    return np.minimum(m, p + 1) / 2 + 0 * i


def inflight_dualpipev(p, m, i, v=2):
    """min(2m, 2p + 1)/2: DualPipe on 2p chunks of L/(2p) layers (deepseek-ai/DualPipe README)."""
    return np.minimum(2 * m, 2 * p + 1) / 2 + 0 * i


def _overlap_bubble(p, f, b, w):
    """(p/2 − 1)·(F&B + B − 3W) with F&B ≈ F + B, per chunk (DeepSeek-V3 Table 2; its "B" is our B + W)."""
    f, b, w = f / 2, b / 2, w / 2
    return (np.asarray(p) / 2 - 1) * np.maximum(0.0, f + 2 * b - 2 * w)


def makespan_dualpipe(p, m, v, t, f, b, w, d=0.0):
    """m/2·t + the overlap bubble: each direction runs half the microbatches, t a rank's two chunks;
    + 2(p − 1)·d (approximate: module docstring)."""
    return m / 2 * t + _overlap_bubble(p, f, b, w) + 2 * (p - 1.0) * d


def makespan_dualpipev(p, m, v, t, f, b, w, d=0.0):
    """m·t + the overlap bubble: every microbatch runs down and back up the V; + 2(p − 1)·d (approximate)."""
    return m * t + _overlap_bubble(p, f, b, w) + 2 * (p - 1.0) * d

FAMILIES = (ScheduleFamily(name="dualpipe", order=6, build=build_dualpipe, geometry="mirror", chunks=2,
                           split_backward=True, hides_ep_comm=True, even_pp=True,
                           inflight=inflight_dualpipe, makespan=makespan_dualpipe, source="DeepSeek-V3 report §3.2.1, Table 2"),
            ScheduleFamily(name="dualpipev", order=7, build=build_dualpipev, geometry="v", chunks=2,
                           split_backward=True, hides_ep_comm=True, even_pp=True,
                           inflight=inflight_dualpipev, makespan=makespan_dualpipev, source="deepseek-ai/DualPipe README (DualPipeV)"))
