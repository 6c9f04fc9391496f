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


COUNT_COLUMNS = ("rank", "tp", "cp", "pp", "dp", "ep", "etp", "vpp", "micro_batch_size", "num_microbatches", "zero",
                 "worst_stage")  # whole numbers, read back as int
FLAG_COLUMNS = ("sequence_parallel", "feasible", "asynchronous")  # written True/False


def read_results(path: str | os.PathLike) -> pd.DataFrame:
    """Read a results table written by `write_results` (.csv or .parquet); InputError (one line naming the file,
    and the column and value where one is at fault) for a file that is not such a table (`_checked`)."""
    p = Path(path)
    if p.is_dir() or (p.exists() and not p.is_file()):
        raise InputError(f"{path}: not a regular file")
    if not p.is_file():
        raise InputError(f"file not found: {path}")
    try:
        return _checked(_read(p, path), path)
    except InputError:
        raise
    except Exception as exc:  # pandas / pyarrow parse errors: a file that is not a results table
        raise InputError(f"{path}: not a readable results table ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''})") from None


def _checked(df: pd.DataFrame, path) -> pd.DataFrame:
    """`df` if every column outside TEXT_COLUMNS and FLAG_COLUMNS holds finite numbers or blanks, the count columns
    whole numbers >= 0 (tp, pp, ...: a layout's degrees); else InputError naming the first offending column and
    value. A results table with no rows or no columns is refused too (nothing to rank or plot)."""
    if df.empty or not len(df.columns):
        raise InputError(f"{path}: no rows in the results table")
    for c in df.columns:
        if c in TEXT_COLUMNS or c in FLAG_COLUMNS or df[c].dtype == bool:
            continue
        col = df[c]
        num = col if pd.api.types.is_numeric_dtype(col) else pd.to_numeric(col, errors="coerce")
        text = col.astype(str).str.strip().str.lower()
        bad = col[num.isna() & col.notna() & (text != "") & (text != "nan")]
        if len(bad):
            raise InputError(f"{path}: column {c!r} holds {bad.iloc[0]!r}, not a number")
        v = num.to_numpy(dtype=float)
        fin = np.isfinite(v) | np.isnan(v)
        if not fin.all():
            raise InputError(f"{path}: column {c!r} holds {float(v[~fin][0])!r}, not a finite number")
        if c in COUNT_COLUMNS:
            w = v[~np.isnan(v)]
            off = w[(w < 0) | (w != np.round(w))]
            if len(off):
                raise InputError(f"{path}: column {c!r} holds {off[0]:g}, not a whole number >= 0")
        df[c] = num
    return df


def _read(p: Path, path) -> pd.DataFrame:
    if p.suffix.lower() == ".csv":
        df = pd.read_csv(p, keep_default_na=False, na_values=[""], dtype={c: str for c in TEXT_COLUMNS})
        for c in TEXT_COLUMNS:  # as the sweep returns them: object strings, "" where empty
            if c in df:
                df[c] = _text(df[c].astype(object).where(df[c].notna(), "").to_numpy(dtype=object))
        if "asynchronous" in df and df["asynchronous"].dtype != bool:  # written True/False, read as text if empty
            df["asynchronous"] = df["asynchronous"].astype(str).str.lower().eq("true")
        for c in df.columns:  # a float column of whole numbers (all 0, say) reads back as int: restore it
            if c not in COUNT_COLUMNS and df[c].dtype.kind in "iu":
                df[c] = df[c].astype(float)
        return df
    if p.suffix.lower() in (".parquet", ".pq"):
        df = pd.read_parquet(p)
        for c in TEXT_COLUMNS:
            if c in df:
                df[c] = _text(df[c].to_numpy(dtype=object))
        return df
    raise InputError(f"results file must be .csv or .parquet, got {str(path)!r}")


