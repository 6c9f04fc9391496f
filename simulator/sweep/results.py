"""Read and write a sweep's result table (.csv or .parquet), every value reading back as written."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from ..frames import text_column as _text

# columns of strings, held as object dtype (frames.text_column)
TEXT_COLUMNS = ("label", "recompute", "schedule", "layers_per_stage", "reason")
SUFFIXES = (".csv", ".parquet", ".pq")


def asynchronous_column(schedule) -> np.ndarray:
    """The `asynchronous` column: True where the row's schedule has no pipeline flush
    (`simulator.schedules.family(name).synchronous` False: PipeDream, Narayanan et al. 2019 SOSP §3.2-3.3,
    whose backward of a microbatch uses a stashed, older weight version: stale weights, not the same
    training as a flushed schedule's). Ranked with the others, such a row is a different algorithm."""
    from ..schedules import family

    names = np.asarray(schedule, dtype=object)
    distinct = {x: not family(str(x)).synchronous for x in set(names.tolist())}
    return np.array([distinct[x] for x in names.tolist()], dtype=bool)


def with_asynchronous(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with the boolean `asynchronous` column last (`asynchronous_column` of its `schedule`); every
    other column and its order kept."""
    if "schedule" not in df:
        return df
    out = df.drop(columns=["asynchronous"]) if "asynchronous" in df else df
    return out.assign(asynchronous=asynchronous_column(out["schedule"].to_numpy(dtype=object)))


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
        if "asynchronous" in df and df["asynchronous"].dtype != bool:  # written True/False, read as text if empty
            df["asynchronous"] = df["asynchronous"].astype(str).str.lower().eq("true")
        counts = ("rank", "tp", "cp", "pp", "dp", "ep", "etp", "vpp", "micro_batch_size", "num_microbatches", "zero",
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


