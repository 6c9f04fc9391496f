"""Evaluate once per distinct input: group the rows of a batch of layouts by equal key columns.

The kernel evaluates each step once per distinct combination of the inputs it reads and gathers the
result back to the rows (`x[first][inverse] == x` row by row). `once_per_distinct` derives the grouping
from the step itself: a step's inputs are its keyword-only parameters, it is called with exactly those
columns (of the distinct rows), so it cannot read an input its grouping leaves out; a step that needs
another step's result declares that step's row index (e.g. `comm_id`) as one of its inputs.
"""
from __future__ import annotations

import inspect
from functools import lru_cache

import numpy as np
import pandas as pd

from . import native


def distinct_rows(*keys):
    """(index of the first row of each distinct combination of the (N,) key arrays, inverse (N,)):
    rows with equal keys share one evaluation. Groups are numbered in order of first appearance
    (hash-based, O(N)). Small non-negative integer keys are combined arithmetically (mixed radix),
    others factorized first; the combined code is re-numbered before it could overflow."""
    code, radix = np.zeros(len(keys[0]), dtype=np.int64), 1
    for k in keys:
        k = np.asarray(k)
        if k.dtype.kind in "iub" and len(k) and 0 <= k.min() and k.max() < 2**20:
            c, r = k.astype(np.int64), int(k.max()) + 1
        else:
            c, u = factorize(k)
            r = max(len(u), 1)
        if radix * r >= 2**62:  # re-number: the code then stays < N
            code, first = _renumber(code)
            radix = max(len(first), 1)
        code, radix = code * r + c, radix * r
    if not len(code):
        return np.zeros(0, dtype=np.int64), code
    code, first = _renumber(code)
    return first, code


def factorize(values, *, missing_as_value: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """pandas.factorize(values, use_na_sentinel=not missing_as_value): (codes (N,) int64 numbered in order
    of first appearance, the distinct values in that order). An object array (the sweep's schedule,
    recompute and layer-split columns: a handful of strings shared by every row) is grouped by the
    identity of its elements in C (`native.object_ids`), then the few groups are merged by value, as
    a dict compares them (hash and ==, as pandas does), instead of pandas' hash of every element.
    Missing values (NaN, NA, NaT; None unless
    `missing_as_value`, which keeps None as a value and returns it as None, where pandas' uniques say
    NaN) and arrays of many distinct objects go to pandas."""
    v = np.asarray(values)
    if v.dtype == object and v.ndim == 1:
        got = native.object_ids(v)
        if got is not None and len(got[1]) <= 4096:
            inv, first = got
            reps = v[first]
            na = pd.isna(reps)
            if missing_as_value:
                na &= np.array([r is not None for r in reps], dtype=bool)
            seen: dict = {}
            try:
                merged = None if na.any() else np.array([seen.setdefault(r, len(seen)) for r in reps.tolist()],
                                                        dtype=np.int64)
            except TypeError:  # unhashable elements: pandas says so
                merged = None
            if merged is not None:
                uniques = np.empty(len(seen), dtype=object)
                uniques[:] = list(seen)
                return merged[inv], uniques
    c, u = pd.factorize(v, use_na_sentinel=not missing_as_value)
    return np.asarray(c, dtype=np.int64), np.asarray(u)


def gather_rows(x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """x[rows] along the first axis: values worked out once per distinct input, gathered back to the rows
    (`rows`: distinct_rows' inverse). np.take gives the same values as fancy indexing, faster when x's
    rows are narrow (a few values per rank or class)."""
    return np.take(x, rows, axis=0)


def _renumber(code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes 0, 1, ... in order of first appearance, each one's first row): native.first_ids,
    else pandas.factorize."""
    got = native.first_ids(code)
    if got is not None:
        return got
    c, _ = pd.factorize(code)
    c = np.asarray(c, dtype=np.int64)
    new = np.empty(len(c), dtype=bool)  # codes first appear in increasing order
    if len(c):
        new[0] = True
        new[1:] = c[1:] > np.maximum.accumulate(c)[:-1]
    return c, np.flatnonzero(new)


@lru_cache(maxsize=None)
def step_inputs(fn) -> tuple[str, ...]:
    """The row columns step `fn` reads: its keyword-only parameters, in order."""
    return tuple(p.name for p in inspect.signature(fn).parameters.values() if p.kind == p.KEYWORD_ONLY)


def once_per_distinct(fn, columns: dict, /, **fixed):
    """(fn's result for each distinct combination of its inputs, each row's index into those results).

    The inputs are `step_inputs(fn)` less the `fixed` keywords (values shared by every row, such as the
    model); each is an (N,) column of `columns`, and fn gets them for the first row of each distinct
    combination. A missing column is a KeyError, never a silently shared result."""
    names = [k for k in step_inputs(fn) if k not in fixed]
    first, inv = distinct_rows(*(columns[k] for k in names))
    return fn(**fixed, **{k: np.asarray(columns[k])[first] for k in names}), inv


def categories(*keys):
    """[(values, row indices)] for each distinct combination of the (N,) key arrays."""
    first, inv = distinct_rows(*keys)
    order = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(len(first) + 1))
    return [(tuple(k[first[u]] for k in keys), order[bounds[u]:bounds[u + 1]]) for u in range(len(first))]
