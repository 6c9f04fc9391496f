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
"""
import numpy as np

from ..errors import InputError
from .op import check_counts, make_schedule, running_count, tiled


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


def _realise(prog: np.ndarray, phase_stage, phase_mb_offset, microbatches_per_phase) -> np.ndarray:
    """Turn a step program into op rows (kind index, stage, microbatch, includes_weight, paired):
    per-(kind, phase) microbatch counters; each W takes the oldest pending split B (first in, first
    out: the k-th W of the rank is the weight gradient of its k-th split B)."""
    kind, phase, split = prog.T
    paired = kind == _P
    kind = np.where(paired, _F, kind)
    fb = kind != _W
    j = running_count(np.where(fb, kind * 2 + np.maximum(phase, 0), -1))  # W's counts are not used
    assert (j[fb] < microbatches_per_phase).all()
    ph = np.maximum(phase, 0)
    stage = np.asarray(phase_stage)[ph]
    mb = np.asarray(phase_mb_offset)[ph] + j
    is_w = kind == _W
    split_b = (kind == _B) & (split == 1)
    if (np.cumsum(split_b)[is_w] < np.arange(1, int(is_w.sum()) + 1)).any():  # the k-th W needs k split B's before it
        raise AssertionError("dualpipe: W with no pending split backward")
    if is_w.sum() != split_b.sum():
        raise AssertionError("dualpipe: a split backward without its W")
    src = np.flatnonzero(split_b)
    stage[is_w], mb[is_w] = stage[src], mb[src]
    return np.stack([kind, stage, mb, (kind == _B) & (split == 0), paired], axis=1).astype(np.int64)


def _columns(ranks: list[np.ndarray]) -> tuple:
    """`Schedule.columns` from per-rank op rows."""
    table = np.concatenate(ranks)
    return (table[:, 0], table[:, 1], table[:, 2], table[:, 3].astype(bool), table[:, 4].astype(bool),
            np.array([len(ops) for ops in ranks], dtype=np.int64))


def build_dualpipe(*, pp: int, microbatches: int, vpp: int = 1):
    check_counts("dualpipe", pp=pp, microbatches=microbatches, vpp=vpp)
    if vpp not in (1, 2):
        raise InputError(f"dualpipe: holds two stage copies per rank; vpp must be 1 or 2, got {vpp}")
    if pp % 2:
        raise InputError(f"dualpipe: pp must be even, got {pp}")
    if microbatches % 2 or microbatches < 2 * pp:
        raise InputError(f"dualpipe: microbatches must be even and >= 2*pp = {2 * pp}, got {microbatches}")
    H, C = pp // 2, microbatches // 2
    ranks = []
    for r in range(pp):
        h = min(r, pp - 1 - r)
        second_half = r >= H
        # direction 0 enters at rank 0 (stage s on rank s), direction 1 at rank p-1 (stage s on p-1-s)
        direction = {0: int(second_half), 1: 1 - int(second_half)}
        stage = [r if direction[ph] == 0 else pp - 1 - r for ph in (0, 1)]
        offset = [direction[ph] * C for ph in (0, 1)]
        ranks.append(_realise(_program(H, h, C), stage, offset, C))
    return make_schedule("dualpipe", num_stages=pp, num_microbatches=microbatches, chunks_per_rank=2,
                         columns=_columns(ranks))


def build_dualpipev(*, pp: int, microbatches: int, vpp: int = 2):
    check_counts("dualpipev", pp=pp, microbatches=microbatches, vpp=vpp)
    if vpp not in (1, 2):
        raise InputError(f"dualpipev: holds exactly 2 chunks per rank; vpp must be 1 or 2, got {vpp}")
    if microbatches < 2 * pp:
        raise InputError(f"dualpipev: microbatches must be >= 2*pp = {2 * pp}, got {microbatches}")
    ranks = []
    for r in range(pp):
        ranks.append(_realise(_program(pp, r, microbatches), [r, 2 * pp - 1 - r], [0, 0], microbatches))
    return make_schedule("dualpipev", num_stages=2 * pp, num_microbatches=microbatches, chunks_per_rank=2,
                         columns=_columns(ranks))
