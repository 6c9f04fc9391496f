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
from ..errors import InputError
from .op import Op, check_counts, make_schedule


def _program(H: int, h: int, C: int):
    """The step program of one rank as a list of (kind, phase, split) with kind in F/B/W."""
    prog = []
    prog += [("F", 0, False)] * (2 * (H - h - 1))
    prog += [("F", 0, False), ("F", 1, False)] * (h + 1)
    prog += [("B", 1, True), ("W", None, False), ("F", 1, False)] * (H - h - 1)
    n4 = C - 2 * H + h + 1
    for i in range(n4):  # "P" = F overlapped with the following B (waits for both inputs)
        prog += [("F", 0, False) if (i == 0 and h == H - 1) else ("P", 0, False), ("B", 1, False),
                 ("P", 1, False), ("B", 0, False)]
    prog += [("B", 1, False), ("P", 1, False), ("B", 0, False)] * (H - h - 1)
    split = False
    n6 = h + 1
    for i in range(n6):
        if i == n6 // 2 and h % 2 == 1:
            split = True
        prog.append(("B", 1, split))
        if i == n6 // 2 and h % 2 == 0:
            split = True
        prog.append(("B", 0, split))
    prog += [("W", None, False), ("B", 0, split)] * (H - h - 1)
    prog += [("W", None, False)] * (h + 1)
    return prog


def _realise(rank: int, prog, phase_stage, phase_mb_offset, microbatches_per_phase):
    """Turn a step program into Ops: per-phase microbatch counters, W's FIFO over split B's."""
    nxt = {("F", 0): 0, ("F", 1): 0, ("B", 0): 0, ("B", 1): 0}
    pending = []
    ops = []
    for kind, phase, split in prog:
        if kind == "W":
            if not pending:
                raise AssertionError("dualpipe: W with no pending split backward")
            st, j = pending.pop(0)
            ops.append(Op(kind="W", stage=st, microbatch=j, rank=rank))
            continue
        paired = kind == "P"
        kind = "F" if paired else kind
        j = nxt[(kind, phase)]
        nxt[(kind, phase)] = j + 1
        assert j < microbatches_per_phase
        mb = phase_mb_offset[phase] + j
        st = phase_stage[phase]
        if kind == "F":
            ops.append(Op(kind="F", stage=st, microbatch=mb, rank=rank, paired=paired))
        else:
            ops.append(Op(kind="B", stage=st, microbatch=mb, rank=rank, includes_weight=not split))
            if split:
                pending.append((st, mb))
    assert not pending
    return ops


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
        stage = {ph: (r if direction[ph] == 0 else pp - 1 - r) for ph in (0, 1)}
        offset = {ph: direction[ph] * C for ph in (0, 1)}
        ranks.append(_realise(r, _program(H, h, C), stage, offset, C))
    return make_schedule("dualpipe", ranks, num_stages=pp, num_microbatches=microbatches, chunks_per_rank=2)


def build_dualpipev(*, pp: int, microbatches: int, vpp: int = 2):
    check_counts("dualpipev", pp=pp, microbatches=microbatches, vpp=vpp)
    if vpp not in (1, 2):
        raise InputError(f"dualpipev: holds exactly 2 chunks per rank; vpp must be 1 or 2, got {vpp}")
    if microbatches < 2 * pp:
        raise InputError(f"dualpipev: microbatches must be >= 2*pp = {2 * pp}, got {microbatches}")
    ranks = []
    for r in range(pp):
        stage = {0: r, 1: 2 * pp - 1 - r}
        ranks.append(_realise(r, _program(pp, r, microbatches), stage, {0: 0, 1: 0}, microbatches))
    return make_schedule("dualpipev", ranks, num_stages=2 * pp, num_microbatches=microbatches,
                         chunks_per_rank=2)
