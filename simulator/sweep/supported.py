"""The layouts a stack's framework cannot run, left out of a sweep (the stack's [runs] rules,
spec/framework.py).

`leave_out_unsupported` applies the rules to the candidate table in one vectorised pass (`first_refusal`
over its columns) and counts the rows each rule removed; `left_out_text` says so in one line, and
`emptied_by` names the rules when they leave nothing. The sweep evaluates ring context parallelism under
DDP without hybrid sharding, so those are the `cp_algorithm`, `dp_mode` and `hsdp` the rules see.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..spec.framework import first_refusal

# the candidate columns the rules read (spec.framework.COLUMNS less the ones the sweep fixes)
RULE_COLUMNS = ("tp", "cp", "pp", "dp", "ep", "etp", "vpp", "micro_batch_size", "num_microbatches", "zero",
                "recompute", "sequence_parallel", "schedule")


def leave_out_unsupported(cands: pd.DataFrame, stack, model) -> tuple[pd.DataFrame, dict[str, int]]:
    """(the candidates `stack`'s framework runs, in their order and renumbered 0..n-1; {reason: rows left
    out}, most rows first, ties in rule order). Each row counts once, under the first rule refusing it."""
    if not len(cands) or not stack.runs.refusals:
        return cands, {}
    cols = {c: cands[c].to_numpy() for c in RULE_COLUMNS}
    idx = first_refusal(stack.runs, **cols, moe=bool(model.is_moe))
    keep = idx < 0
    if keep.all():
        return cands, {}
    counts = np.bincount(idx[~keep], minlength=len(stack.runs.refusals))
    order = sorted(np.flatnonzero(counts), key=lambda i: (-counts[i], i))
    left_out: dict[str, int] = {}
    for i in order:  # rules sharing a reason (none do in the presets) add up
        reason = stack.runs.refusals[i].reason
        left_out[reason] = left_out.get(reason, 0) + int(counts[i])
    return cands[keep].reset_index(drop=True), left_out


def _reasons(left_out: dict[str, int], most: int = 4) -> str:
    shown = [f"{r} ({n:,})" for r, n in list(left_out.items())[:most]]
    rest = sum(list(left_out.values())[most:])
    return ", ".join(shown) + (f", other rules ({rest:,})" if rest else "")


def left_out_text(left_out: dict[str, int], stack_name: str) -> str:
    """'N layouts the <stack> framework cannot run were left out: reason (count), ...', or '' for none."""
    if not left_out:
        return ""
    n = sum(left_out.values())
    return (f"{n:,} layout{'s' if n != 1 else ''} the {stack_name} framework cannot run "
            f"{'were' if n != 1 else 'was'} left out: {_reasons(left_out)} (--allow-unsupported keeps them)")


def emptied_by(cands: pd.DataFrame, stack, model) -> str:
    """'' if `stack`'s framework runs some of `cands`, else why it runs none: the rules that left them out."""
    kept, left_out = leave_out_unsupported(cands, stack, model)
    if len(kept) or not left_out:
        return ""
    return (f"the {stack.name} framework runs none of its {len(cands):,} layouts: {_reasons(left_out)} "
            f"(--allow-unsupported keeps them)")
