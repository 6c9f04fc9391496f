"""Result-table helpers shared by the kernel and the sweep."""
from __future__ import annotations

import numpy as np
import pandas as pd


def text_column(values) -> pd.Series:
    """A column of Python strings kept as object dtype: pandas 3 would convert it to arrow strings,
    and every kernel call back, at ~10x the cost of the column itself."""
    return pd.Series(np.asarray(values, dtype=object), dtype=object, copy=False)
