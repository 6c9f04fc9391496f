"""Rank a sweep's results: feasible first, tokens/s descending, a total order on the layout fields.

The order (the same on every run, whatever order the rows were evaluated in):
1. feasible before infeasible;
2. layouts that fit: tokens_per_s descending, then peak memory ascending (of two equally fast layouts the
   one with more memory headroom first); layouts that do not fit: peak memory ascending (closest to
   fitting first), then tokens_per_s descending (NaN, untimed, last; peak NaN last);
3. then label, schedule, vpp, micro_batch_size, zero, recompute, sequence_parallel, ep and
   layers_per_stage ascending (strings in sorted order), then the candidates' own order.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..dedup import distinct_rows, factorize
from ..frames import text_column
from ..spec.layout import layout_label

TIE_COLUMNS = ("schedule", "vpp", "micro_batch_size", "zero", "recompute", "sequence_parallel", "ep", "etp",
               "layers_per_stage")
FIRST_COLUMNS = ("rank", "label", "tp", "cp", "pp", "dp", "ep", "etp", "vpp", "micro_batch_size", "num_microbatches",
                 "zero", "recompute", "sequence_parallel", "schedule", "layers_per_stage", "feasible", "reason",
                 "tokens_per_s", "mfu", "step_s", "peak_bytes", "memory_headroom_bytes")
LABEL_FIELDS = ("tp", "cp", "pp", "dp", "ep", "vpp", "etp")  # layout_label's arguments, in order


def layout_labels(df: pd.DataFrame) -> np.ndarray:
    """The `label` of every row (`spec.layout.layout_label`), built once per distinct layout."""
    if len(df) == 0:
        return np.array([], dtype=object)
    # (a table without `etp`, e.g. written before it was a layout field: the experts' TP is tp)
    keys = np.stack([df[c if c in df else "tp"].to_numpy(dtype=np.int64) for c in LABEL_FIELDS], axis=1)
    first, inv = distinct_rows(*keys.T)
    distinct = np.array([layout_label(*k) for k in keys[first].tolist()], dtype=object)
    return distinct[inv]


def _sort_key(values) -> np.ndarray:
    """A key that sorts like `values`: numbers as they are, strings by the rank of their sorted value
    (missing values first, as pandas' sorted codes put them)."""
    v = np.asarray(values)
    if v.dtype == bool or np.issubdtype(v.dtype, np.number):
        return v
    codes, uniques = factorize(v)
    try:
        order = np.argsort(uniques, kind="stable")
    except TypeError:  # mixed types: compare as text
        order = np.argsort(uniques.astype(str), kind="stable")
    rank = np.full(len(uniques) + 1, -1, dtype=np.int64)  # (the last entry: a missing value's code -1)
    rank[order] = np.arange(len(uniques))
    return rank[codes]


def rank_order(df: pd.DataFrame, labels: np.ndarray) -> np.ndarray:
    """The rows of `df` in rank order (module docstring), as positions."""
    infeasible = ~df["feasible"].to_numpy(dtype=bool)
    tput = df["tokens_per_s"].to_numpy(dtype=float)
    by_tput = -np.where(np.isnan(tput), -np.inf, tput)
    peak = df["peak_bytes"].to_numpy(dtype=float) if "peak_bytes" in df else np.zeros(len(df))
    by_peak = np.where(np.isnan(peak), np.inf, peak)
    first = np.where(infeasible, by_peak, by_tput)  # fits: throughput first; does not fit: peak first
    second = np.where(infeasible, by_tput, by_peak)
    ties = [_sort_key(labels)] + [_sort_key(df[c].to_numpy()) for c in TIE_COLUMNS if c in df]
    return np.lexsort([*ties[::-1], second, first, infeasible])  # (the last key sorts first; stable)


def column_order(columns) -> list:
    """The result table's column order: FIRST_COLUMNS, then the others as they come."""
    return [c for c in FIRST_COLUMNS if c in columns] + [c for c in columns if c not in FIRST_COLUMNS]


def rank_results(df: pd.DataFrame) -> pd.DataFrame:
    """`df` sorted in rank order, with a 1-based `rank` and the `label` first, columns in `column_order`."""
    labels = df["label"].to_numpy(dtype=object) if "label" in df else layout_labels(df)
    order = rank_order(df, labels)
    out = df.drop(columns=[c for c in ("rank", "label") if c in df]).take(order).reset_index(drop=True)
    out.insert(0, "label", text_column(labels[order]))
    out.insert(0, "rank", np.arange(1, len(out) + 1))
    return out[column_order(list(out.columns))]
