"""Reading a sweep's ranked results: why the winner wins, the Pareto front, the best row per group."""
from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

# step-time components compared by `winner_comparison` (those the kernel returns)
TIME_COMPONENTS = ("compute_s", "bubble_s", "exposed_comm_s")


def pareto_mask(df: pd.DataFrame, *, x: str = "memory_headroom_bytes", y: str = "tokens_per_s") -> np.ndarray:
    """True for rows on the Pareto front maximising both `x` and `y` (feasible rows only):
    no other feasible row has x' >= x and y' >= y with one strictly greater."""
    mask = np.zeros(len(df), dtype=bool)
    feas = np.flatnonzero(df["feasible"].astype(bool).to_numpy())
    if not len(feas):
        return mask
    xv = df[x].to_numpy(dtype=float)[feas]
    yv = df[y].to_numpy(dtype=float)[feas]
    order = np.lexsort((-xv, -yv))  # y descending, then x descending
    best_x = -np.inf
    for i in order:
        if xv[i] > best_x:
            mask[feas[i]] = True
            best_x = xv[i]
    return mask


def winner_comparison(df: pd.DataFrame) -> pd.DataFrame | None:
    """Step-time components of the winner (rank 1) and the runner-up: the best feasible row with a
    different label (else the second feasible row). Columns: component, winner_s, runner_up_s,
    difference_s (runner-up minus winner), sorted by |difference|. None without two feasible rows."""
    feas = df[df["feasible"].astype(bool)]
    if len(feas) < 2:
        return None
    w = feas.iloc[0]
    other = feas[feas["label"] != w["label"]]
    r = other.iloc[0] if len(other) else feas.iloc[1]
    comps = [c for c in df.columns if c.endswith("_s") and c != "step_s"
             and (c in TIME_COMPONENTS or c.startswith("exposed_")) and c != "exposed_comm_s"]
    comps = [c for c in TIME_COMPONENTS if c in df] + [c for c in comps if c not in TIME_COMPONENTS]
    rows = [{"component": c, "winner_s": float(w[c]), "runner_up_s": float(r[c]),
             "difference_s": float(r[c]) - float(w[c])} for c in comps]
    t = pd.DataFrame(rows, columns=["component", "winner_s", "runner_up_s", "difference_s"])
    t = t.reindex(t["difference_s"].abs().sort_values(ascending=False, kind="mergesort").index).reset_index(drop=True)
    t.attrs["winner"] = w.to_dict()
    t.attrs["runner_up"] = r.to_dict()
    return t


def short_variant(row) -> str:
    """The non-label layout choices of a row, e.g. `1f1b mbs1 Z1 sel-rc SP`."""
    rec = {"none": "no-rc", "selective": "sel-rc", "full": "full-rc", "op": "op-rc"}.get(str(row["recompute"]), str(row["recompute"]))
    if str(row.get("recompute_modules", "") or ""):  # (a sweep over module sets: sweep/module_sets.py)
        rec += f"({row['recompute_modules']})"
    sp = " SP" if bool(row["sequence_parallel"]) else ""
    return f"{row['schedule']} mbs{int(row['micro_batch_size'])} Z{int(row['zero'])} {rec}{sp}"


def _describe(row) -> str:
    sp = "SP" if bool(row.get("sequence_parallel", False)) else "no SP"
    modules = str(row.get("recompute_modules", "") or "")
    return (f"{row['label']} ({row['schedule']}, mbs {row['micro_batch_size']}, ZeRO-{row['zero']}, "
            f"recompute {row['recompute']}{f' ({modules})' if modules else ''}, {sp})")


def is_asynchronous(row) -> bool:
    """The row's `asynchronous` column, else whether its schedule has no flush (schedule family's
    `synchronous` False: PipeDream, Narayanan et al. 2019 SOSP §3.2-3.3)."""
    if "asynchronous" in row and not pd.isna(row["asynchronous"]):
        return bool(row["asynchronous"])
    from ..schedules import family

    return not family(str(row["schedule"])).synchronous


def asynchronous_note(winner, runner_up) -> str:
    """A warning line when the winner or the runner-up is asynchronous ('' when neither is): its backward
    uses stashed, stale weight versions and there is no flush, so it does not train the same thing as a
    flushed (synchronous) schedule and the comparison is not like for like."""
    which = [name for name, row in (("winner", winner), ("runner-up", runner_up)) if is_asynchronous(row)]
    if not which:
        return ""
    return (f"Note: the {' and the '.join(which)} {'is' if len(which) == 1 else 'are'} asynchronous "
            f"(PipeDream: no flush, stale stashed weights): not the same training as a flushed schedule; "
            f"compare convergence, not only tokens/s.")


def explain_winner(df: pd.DataFrame, *, empty_reason: str = "") -> str:
    """A short text: the winner, the runner-up, and the step-time components where they differ most.
    An empty table (no layout in the space) says so, with `empty_reason` when given
    (`sweep.empty_reason.empty_space_reason`: the constraint that emptied the space)."""
    if not len(df):
        return "No layout in the space" + (f": {empty_reason}." if empty_reason else ".")
    t = winner_comparison(df)
    if t is None:
        nfeas = int(df["feasible"].astype(bool).sum()) if len(df) else 0
        if nfeas == 1:
            return f"Only one feasible layout: {_describe(df.iloc[0])}."
        reasons = df["reason"].astype(str).value_counts().head(3) if len(df) else pd.Series(dtype=int)
        common = "; ".join(f"{k} ({v})" for k, v in reasons.items())
        return "No feasible layout." + (f" Most common reasons: {common}." if common else "")
    w, r = t.attrs["winner"], t.attrs["runner_up"]
    gain = w["tokens_per_s"] / r["tokens_per_s"] - 1 if r["tokens_per_s"] else float("inf")
    lines = [f"Winner:    {_describe(w)}: {w['tokens_per_s']:,.0f} tokens/s, MFU {100 * w['mfu']:.1f}%, "
             f"step {w['step_s']:.3f} s",
             f"Runner-up: {_describe(r)}: {r['tokens_per_s']:,.0f} tokens/s, MFU {100 * r['mfu']:.1f}%, "
             f"step {r['step_s']:.3f} s ({100 * gain:+.1f}% for the winner)",
             "Largest differences in step time [s]: winner vs runner-up (runner-up minus winner)"]
    for _, row in t.head(4).iterrows():
        lines.append(f"  {row['component']:<28} {round(row['winner_s'], 4) + 0.0:9.4f} vs {round(row['runner_up_s'], 4) + 0.0:9.4f} "
                     f"({round(row['difference_s'], 4) + 0.0:+.4f})")
    note = asynchronous_note(w, r)
    return "\n".join(lines + ([note] if note else []))


def best_per(df: pd.DataFrame, by: Iterable[str], value: str = "mfu") -> pd.DataFrame:
    """The best feasible row (highest `value`) for each combination of the `by` columns."""
    by = list(by)
    feas = df[df["feasible"].astype(bool)]
    if feas.empty:
        return feas
    idx = feas.groupby(by, sort=True)[value].idxmax()
    return feas.loc[idx.to_numpy()].reset_index(drop=True)

