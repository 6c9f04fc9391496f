"""Bubble fraction against the microbatch count, per schedule, from replays (not closed forms)."""
from __future__ import annotations

from typing import Iterable

import pandas as pd

from ..errors import InputError


def replay_rank_share(name: str, *, pp: int, microbatches: int, vpp: int | None = None, forward_s: float,
                      backward_s: float, weight_s: float = 0.0, p2p_s: float = 0.0):
    """(schedule, Timeline) of schedule `name` replayed with `forward_s`, `backward_s`, `weight_s` per
    microbatch for one rank's whole share of the model, split evenly over the parts it is cut into
    (`ScheduleFamily.layer_parts_per_rank`); `vpp` None: the family's default. InputError from the
    builder for a shape it cannot run."""
    from ..pipeline import replay
    from ..schedules import FAMILIES, build, family

    if vpp is None:
        vpp = family(name).default_vpp if name in FAMILIES else 1  # (an unknown name: build says so)
    sch = build(name, pp=pp, microbatches=microbatches, vpp=vpp)
    per = family(sch.name).layer_parts_per_rank(sch.chunks_per_rank)
    return sch, replay(sch, forward_s=forward_s / per, backward_s=backward_s / per, weight_s=weight_s / per,
                       p2p_s=p2p_s)


def bubble_vs_microbatches(schedules: Iterable[str], *, pp: int, microbatches: Iterable[int], vpp: int = 2,
                           forward_s: float = 1.0, backward_s: float = 2.0, weight_s: float = 0.0,
                           p2p_s: float = 0.0) -> pd.DataFrame:
    """Bubble fraction (1 − busy / (ranks × makespan)) of each schedule for each microbatch count,
    replayed on the pipeline engine (not a closed form). Times are per microbatch for one rank's
    whole share of the model, split evenly over its chunks (as `parasim schedule` does); `vpp`
    applies to 'interleaved'. Combinations a schedule cannot run (e.g. dualpipe with m < 2·pp)
    are left out. Columns: schedule, pp, vpp, microbatches, bubble_fraction, makespan_s."""
    from ..schedules import family

    rows = []
    for name in schedules:
        key = str(name).strip().lower()
        for m in microbatches:
            try:
                sch, tl = replay_rank_share(key, pp=int(pp), microbatches=int(m),
                                            vpp=int(vpp) if family(key).takes_vpp else 1, forward_s=forward_s,
                                            backward_s=backward_s, weight_s=weight_s, p2p_s=p2p_s)
            except InputError:
                continue
            rows.append({"schedule": key, "pp": int(pp), "vpp": int(sch.chunks_per_rank), "microbatches": int(m),
                         "bubble_fraction": float(tl.bubble_fraction), "makespan_s": float(tl.makespan_s)})
    return pd.DataFrame(rows, columns=["schedule", "pp", "vpp", "microbatches", "bubble_fraction", "makespan_s"])
