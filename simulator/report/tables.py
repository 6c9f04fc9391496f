"""Numbers and text as the commands print them (the output edge; the library keeps full floats).

- `nonnegative`: a quantity that cannot be negative (an idle time, a bubble, a fraction of time) that
  came out as a rounding residue of a difference (makespan − busy: −8.9e-16 s, or +7.8e-16 s where there
  is no pipeline at all) or as −0.0 prints as 0; a clearly negative value is left as it is (a bug to
  see, not to hide).
- `integer_bytes` / `integer_bytes_frame`: byte counts (keys and columns ending in `_bytes`) and
  parameter counts (`params`) as integers: a per-GPU overhead of 5 % of a byte count is a fraction
  of a byte that no allocator hands out.
- `tidy_frame`: both for a results table (a sweep's rows, an estimate's row): integer bytes, no residues.
- `tidy_dict`: the same for a JSON-ready dict (an estimate's `to_dict()`), its residues relative to the
  step time.
- `shorten_words`: text cut to a width at a word boundary, with an ellipsis, never mid-word.
"""
from __future__ import annotations

import math

# a residue of a difference of sums of n float64 terms is a few ulps of the sum per term: 1e-9 of the
# scale (the makespan, the step time) is far above that and far below anything a table shows
RELATIVE_RESIDUE = 1e-9


def nonnegative(x, scale=1.0):
    """`x` (a float that cannot be negative) for printing: 0.0 when it lies in [−1e-9·|scale|, +1e-9·|scale|]
    (a residue of either sign, and −0.0); else `x` unchanged. None and NaN pass through."""
    if x is None:
        return None
    x = float(x)
    if math.isnan(x):
        return x
    tol = RELATIVE_RESIDUE * (abs(float(scale)) if scale is not None and math.isfinite(scale) else 1.0)
    return 0.0 if abs(x) <= tol else x


def count_key(key) -> bool:
    """Whether a key or column holds a byte count (`*_bytes`) or a parameter count (`params`)."""
    return isinstance(key, str) and (key.endswith("_bytes") or key == "params")


def time_key(key) -> bool:
    """Whether a key or column holds a time (`*_s`) or a fraction of one (`*_fraction`)."""
    return isinstance(key, str) and (key.endswith("_s") or key.endswith("_fraction"))


def _as_int(v):
    if isinstance(v, float) and math.isfinite(v):
        return int(round(v))
    return v


def integer_bytes(obj):
    """A copy of a JSON-ready dict/list in which the finite float values of `*_bytes` and `params` keys
    (and lists under them) are rounded to integers; everything else unchanged."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if count_key(k) and isinstance(v, list):
                out[k] = [_as_int(x) for x in v]
            elif count_key(k):
                out[k] = _as_int(v)
            else:
                out[k] = integer_bytes(v)
        return out
    if isinstance(obj, list):
        return [integer_bytes(v) for v in obj]
    return obj


def integer_bytes_frame(df):
    """A copy of a DataFrame with its `*_bytes` and `params` float columns rounded to integers (columns
    holding a NaN stay float, their other values rounded: a missing value is not a number of bytes)."""
    import numpy as np

    cols = {}
    for c in df.columns:
        if count_key(c) and df[c].dtype.kind == "f":
            v = np.round(df[c].to_numpy(dtype=float))
            cols[c] = v.astype(np.int64) if np.isfinite(v).all() else v
    return df.assign(**cols) if cols else df


def tidy_frame(df, *, scale: str = "step_s"):
    """A copy of a results table as printed or written: byte and parameter counts as integers
    (`integer_bytes_frame`), and every time (`*_s`) and `*_fraction` column's rounding residues (within
    ±1e-9 × the row's `scale` column, or × 1 without it) and −0.0 as 0.0."""
    import numpy as np

    df = integer_bytes_frame(df)
    ref = np.abs(df[scale].to_numpy(dtype=float)) if scale in df.columns else np.ones(len(df))
    tol = RELATIVE_RESIDUE * np.where(np.isfinite(ref), ref, 1.0)
    cols = {}
    for c in df.columns:
        if time_key(c) and df[c].dtype.kind == "f":
            v = df[c].to_numpy(dtype=float)
            cols[c] = np.where(np.abs(v) <= tol, 0.0, v)
    return df.assign(**cols) if cols else df


def tidy_dict(obj, *, scale=1.0):
    """A copy of a JSON-ready dict/list as printed: `integer_bytes`, and the number values of every time
    (`*_s`) and `*_fraction` key (also in lists and dicts under such a key, as `exposed_comm_by_group_s`)
    through `nonnegative` with `scale` (an estimate's step time)."""
    def residues(v, timed: bool):
        if isinstance(v, dict):
            return {k: residues(x, timed or time_key(k)) for k, x in v.items()}
        if isinstance(v, list):
            return [residues(x, timed) for x in v]
        if timed and isinstance(v, float):
            return nonnegative(v, scale)
        return v

    return residues(integer_bytes(obj), False)


def shorten_words(text, width: int, placeholder: str = "…") -> str:
    """`text` if it fits in `width` characters, else its longest prefix of whole words that fits with
    `placeholder` after it (a first word longer than the width is the one thing cut)."""
    text = "" if text is None else " ".join(str(text).split())
    if len(text) <= width:
        return text
    room = width - len(placeholder)
    cut = text.rfind(" ", 0, room + 1)
    head = text[:cut] if cut > 0 else text[:room]
    return head.rstrip(" ,;:") + placeholder
