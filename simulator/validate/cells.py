"""Cell readers shared by the validate modules: blank test, integer and text of one CSV cell.

A runs CSV read by pandas gives NaN for empty cells and may give floats for integer columns; these
three readers are the one place that decides what "blank", "an integer" and "the text" of a cell
mean, so that the mapping (mapping.py) and the measured quantities (predict.py) read cells alike.
Kept apart so that every other module of the package can import them without importing each other.
"""
from __future__ import annotations

import math

from ..errors import InputError, check_positive


def _blank(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def _int(v, what: str) -> int:
    if _blank(v):
        raise InputError(f"{what} is blank")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise InputError(f"{what} is not a number: {v!r}") from None
    if not f.is_integer():
        raise InputError(f"{what} is not an integer: {v!r}")
    return check_positive(what, int(f), integer=True)  # (every integer column is a count or a size)


def _text(v) -> str:
    return "" if _blank(v) else str(v).strip()
