"""Bubble fraction against the microbatch count, per schedule, from replays (not closed forms)."""
from __future__ import annotations

from typing import Iterable

import pandas as pd

from ..errors import InputError


def bubble_vs_microbatches(schedules: Iterable[str], *, pp: int, microbatches: Iterable[int], vpp: int = 2,
                           forward_s: float = 1.0, backward_s: float = 2.0, weight_s: float = 0.0,
                           p2p_s: float = 0.0) -> pd.DataFrame:
    """Bubble fraction (1 − busy / (ranks × makespan)) of each schedule for each microbatch count,
    replayed on the pipeline engine (not a closed form). Times are per microbatch for one rank's
    whole share of the model, split evenly over its chunks (as `parasim schedule` does); `vpp`
    applies to 'interleaved'. Combinations a schedule cannot run (e.g. dualpipe with m < 2·pp)
    are left out. Columns: schedule, pp, vpp, microbatches, bubble_fraction, makespan_s."""
    from ..pipeline import replay
    from ..schedules import build

    rows = []
    for name in schedules:
        key = str(name).strip().lower()
        for m in microbatches:
            try:
                sch = build(key, pp=int(pp), microbatches=int(m), vpp=int(vpp) if key == "interleaved" else 1)
            except InputError:
                continue
            per = sch.num_stages // sch.num_ranks if key != "dualpipe" else 1
            tl = replay(sch, forward_s=forward_s / per, backward_s=backward_s / per, weight_s=weight_s / per,
                        p2p_s=p2p_s)
            rows.append({"schedule": key, "pp": int(pp), "vpp": int(sch.chunks_per_rank), "microbatches": int(m),
                         "bubble_fraction": float(tl.bubble_fraction), "makespan_s": float(tl.makespan_s)})
    return pd.DataFrame(rows, columns=["schedule", "pp", "vpp", "microbatches", "bubble_fraction", "makespan_s"])
