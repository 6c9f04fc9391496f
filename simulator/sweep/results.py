"""Read and write a sweep's result table (.csv or .parquet), every value reading back as written."""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from ..errors import InputError
from ..frames import text_column as _text

# columns of strings, held as object dtype (frames.text_column)
TEXT_COLUMNS = ("label", "recompute", "schedule", "layers_per_stage", "reason")
SUFFIXES = (".csv", ".parquet", ".pq")


def check_suffix(out) -> None:
    """InputError unless `out` names a .csv or .parquet file."""
    if Path(out).suffix.lower() not in SUFFIXES:
        raise InputError(f"--out must end in .csv or .parquet, got {str(out)!r}")


def write_results(df: pd.DataFrame, out: str | os.PathLike) -> None:
    """Write a results table to .csv or .parquet (atomically: temp file + os.replace). CSV goes through
    pyarrow's writer: every value reads back exactly (floats in shortest round-trip form), and it is
    several times faster than pandas' on a sweep's float columns."""
    import pyarrow
    import pyarrow.csv

    out = Path(out)
    suffix = out.suffix.lower()
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    check_suffix(out)
    if suffix == ".csv":
        pyarrow.csv.write_csv(pyarrow.Table.from_pandas(df, preserve_index=False), tmp)
    else:
        df.to_parquet(tmp, index=False)
    os.replace(tmp, out)


def read_results(path: str | os.PathLike) -> pd.DataFrame:
    """Read a results table written by `write_results` (.csv or .parquet)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"file not found: {path}")
    if p.suffix.lower() == ".csv":
        df = pd.read_csv(p, keep_default_na=False, na_values=[""], dtype={c: str for c in TEXT_COLUMNS})
        for c in TEXT_COLUMNS:  # as the sweep returns them: object strings, "" where empty
            if c in df:
                df[c] = _text(df[c].astype(object).where(df[c].notna(), "").to_numpy(dtype=object))
        counts = ("rank", "tp", "cp", "pp", "dp", "ep", "vpp", "micro_batch_size", "num_microbatches", "zero",
                  "worst_stage")
        for c in df.columns:  # a float column of whole numbers (all 0, say) reads back as int: restore it
            if c not in counts and df[c].dtype.kind in "iu":
                df[c] = df[c].astype(float)
        return df
    if p.suffix.lower() in (".parquet", ".pq"):
        df = pd.read_parquet(p)
        for c in TEXT_COLUMNS:
            if c in df:
                df[c] = _text(df[c].to_numpy(dtype=object))
        return df
    raise InputError(f"results file must be .csv or .parquet, got {str(path)!r}")


