"""Bubble fraction against the microbatch count, per schedule, from replays (not closed forms).

Size bounds of one replay (`check_replay_size`, applied by `replay_rank_share`, hence by
`parasim schedule` and `parasim plot timeline|bubble`):
- pp × chunks per rank × microbatches <= MAX_STAGE_MICROBATCHES = 2**20 (1,048,576). Each such
  (stage, microbatch) pair is 2 or 3 ops (F, B, W), so at the bound a replay has 2.1-3.1 M ops and
  takes 2.6-4.8 s and 0.55-0.75 GiB of memory (2-core VM, 2026-11-26: 1f1b pp 8 × 131072
  microbatches 2.6 s, 543 MiB; zb-h1 the same 4.8 s, 738 MiB), its trace 300-450 MB. Beyond it time
  and memory grow in proportion (pp 8 × 10**7 microbatches: an out-of-memory error after minutes),
  and no schedule question needs more: the bubble of m microbatches has converged long before.
- pp <= MAX_PP = 4096. The replay also takes steps per rank and per dependency level: at 2**20 pairs
  1f1b takes 1.5 s with pp 4096, 9 s with pp 16384 and over a minute with pp 65536. A pipeline stage
  holds at least one layer, and models have hundreds of layers, not thousands.

Backward split (`split_backward`, used by `bubble_vs_microbatches`, hence `parasim plot bubble`): when no
weight-gradient time W is given, the backward is split into B and W in the ratio of the Zero Bubble paper,
so that zero-bubble schedules have the W they fill bubbles with (with W = 0 zb-h1 replays exactly as
1f1b). An explicit W, 0 included, is used as given.
"""
from __future__ import annotations

from numbers import Integral
from typing import Iterable

import pandas as pd

from ..errors import InputError

MAX_STAGE_MICROBATCHES = 2**20
MAX_PP = 4096
# W's share of a transformer layer's backward when none is given: Qi et al. 2024, Zero Bubble Pipeline
# Parallelism (ICLR 2024, arXiv 2401.10241), Table 1: the backward's GEMMs split into input-gradient (B)
# and weight-gradient (W) halves of equal FLOPs, 24·b·s·h² each (B also has the attention-score terms,
# 8·b·s²·h, which W lacks), and §2 analyses the handcrafted schedules with T_F = T_B = T_W. An
# idealisation: the paper's profiled A100 times (Table 9) have W at 0.5-0.75 of B.
DEFAULT_W_SHARE = 0.5
W_SPLIT_SOURCE = "Qi et al. 2024"


def check_replay_size(name: str, *, pp, microbatches, vpp=None) -> None:
    """InputError when replaying schedule `name` would exceed the bounds of the module docstring.
    Values that are not integers >= 1, or an unknown name, are left to the schedule builder to refuse."""
    from ..schedules import FAMILIES

    key = str(name).strip().lower()
    vals = (pp, microbatches, 1 if vpp is None else vpp)
    if key not in FAMILIES or any(isinstance(v, bool) or not isinstance(v, Integral) or v < 1 for v in vals):
        return
    pp, microbatches = int(pp), int(microbatches)
    if pp > MAX_PP:
        raise InputError(f"pp {pp} is above the limit of {MAX_PP} pipeline ranks a replay takes "
                         f"(time grows with the ranks; a stage holds at least one layer)")
    fam = FAMILIES[key]
    chunks = int(fam.chunks_per_rank(fam.default_vpp if vpp is None else vpp))
    pairs = pp * chunks * microbatches
    if pairs > MAX_STAGE_MICROBATCHES:
        per_rank = f"vpp {chunks} × " if fam.takes_vpp else (f"{chunks} chunks per rank × " if chunks > 1 else "")
        raise InputError(f"pp {pp} × {per_rank}microbatches {microbatches} = {pairs:,} (stage, microbatch) pairs "
                         f"is above the replay limit of {MAX_STAGE_MICROBATCHES:,} (2-3 ops each: seconds and "
                         f"GiB of memory there)")


def replay_rank_share(name: str, *, pp: int, microbatches: int, vpp: int | None = None, forward_s: float,
                      backward_s: float, weight_s: float = 0.0, p2p_s: float = 0.0):
    """(schedule, Timeline) of schedule `name` replayed with `forward_s`, `backward_s`, `weight_s` per
    microbatch for one rank's whole share of the model, split evenly over the parts it is cut into
    (`ScheduleFamily.layer_parts_per_rank`); `vpp` None: the family's default. InputError from the
    builder for a shape it cannot run."""
    from ..pipeline import replay
    from ..schedules import FAMILIES, build, family

    check_replay_size(name, pp=pp, microbatches=microbatches, vpp=vpp)
    if vpp is None:
        vpp = family(name).default_vpp if name in FAMILIES else 1  # (an unknown name: build says so)
    sch = build(name, pp=pp, microbatches=microbatches, vpp=vpp)
    per = family(sch.name).layer_parts_per_rank(sch.chunks_per_rank)
    return sch, replay(sch, forward_s=forward_s / per, backward_s=backward_s / per, weight_s=weight_s / per,
                       p2p_s=p2p_s)


def split_backward(backward_s: float, weight_s: float | None = None) -> tuple[float, float, bool]:
    """(B, W, split) per microbatch. `weight_s` given: B = `backward_s` (the input-gradient part) and
    W = `weight_s`, as given. None: `backward_s` is the whole backward and is split, W = DEFAULT_W_SHARE
    of it (Qi et al. 2024: B = W), so schedules that do not split the backward replay the same B + W."""
    if weight_s is not None:
        return float(backward_s), float(weight_s), False
    w = DEFAULT_W_SHARE * float(backward_s)
    return float(backward_s) - w, w, True


def bubble_vs_microbatches(schedules: Iterable[str], *, pp: int, microbatches: Iterable[int], vpp: int = 2,
                           forward_s: float = 1.0, backward_s: float = 2.0, weight_s: float | None = None,
                           p2p_s: float = 0.0) -> pd.DataFrame:
    """Bubble fraction (1 − busy / (ranks × makespan)) of each schedule for each microbatch count,
    replayed on the pipeline engine (not a closed form). Times are per microbatch for one rank's
    whole share of the model, split evenly over its chunks (as `parasim schedule` does); `weight_s`
    None splits `backward_s` into B and W (`split_backward`), so zero-bubble schedules show what they
    buy; `vpp` applies to 'interleaved'. Combinations a schedule cannot run (e.g. dualpipe with
    m < 2·pp) are left out. Columns: schedule, pp, vpp, microbatches, bubble_fraction, makespan_s, and
    the times replayed: forward_s, backward_s (B), weight_s (W), w_split (True: W from the default split)."""
    from ..schedules import FAMILIES, family

    backward_s, weight_s, w_split = split_backward(backward_s, weight_s)
    times = {"forward_s": float(forward_s), "backward_s": backward_s, "weight_s": weight_s, "w_split": w_split}
    rows = []
    microbatches = list(microbatches)
    for name in schedules:
        key = str(name).strip().lower()
        if microbatches:  # a point over the size bounds is an error, not a point left out
            check_replay_size(key, pp=pp, microbatches=max(microbatches),
                              vpp=vpp if key in FAMILIES and family(key).takes_vpp else None)
        for m in microbatches:
            try:
                sch, tl = replay_rank_share(key, pp=int(pp), microbatches=int(m),
                                            vpp=int(vpp) if family(key).takes_vpp else 1, forward_s=forward_s,
                                            backward_s=backward_s, weight_s=weight_s, p2p_s=p2p_s)
            except InputError:
                continue
            rows.append({"schedule": key, "pp": int(pp), "vpp": int(sch.chunks_per_rank), "microbatches": int(m),
                         "bubble_fraction": float(tl.bubble_fraction), "makespan_s": float(tl.makespan_s), **times})
    return pd.DataFrame(rows, columns=["schedule", "pp", "vpp", "microbatches", "bubble_fraction", "makespan_s",
                                       *times])
