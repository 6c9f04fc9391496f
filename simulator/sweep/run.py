"""Run a sweep: evaluate the candidates in chunks (resumable), in this process or on Dask, and rank.

Chunk k is candidate rows [k·size, (k+1)·size). Each chunk is one call of the vectorised kernel
(`kernel.evaluate_layouts`, every layout field an array); with `out`, each finished chunk is written
atomically into `<out>.parts/` (parts.py), so an interrupted sweep resumes without losing
or duplicating rows. The kernel works row by row, so a row's numbers do not depend on the chunk it is
evaluated in (tests/test_sweep.py checks it to the bit). Parallelism beyond this process is Dask's:
`executor="dask"`, or `workers` > 1, which starts a local Dask cluster of that many processes.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import os
import shutil
from dataclasses import fields
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Callable

import numpy as np
import pandas as pd

from ..dedup import distinct_rows
from ..errors import InputError
from ..frames import text_column
from .enumerate import CANDIDATE_COLUMNS, empty_candidates, enumerate_layouts
from .parts import chunk_path, open_parts, write_atomic_pickle
from .rank import rank_results
from .results import TEXT_COLUMNS, check_suffix, with_asynchronous, write_results
from .space import SweepSpace
from .supported import leave_out_unsupported


def _default_evaluator():
    from ..kernel import evaluate_layouts

    return evaluate_layouts


@lru_cache(maxsize=8192)
def schedule_refusal(schedule: str, pp: int, vpp: int, microbatches: int) -> str:
    """'' if the schedule builder accepts this schedule shape, else its one-line reason (e.g. dualpipe
    needs an even m >= 2·pp). Asking the builder keeps its rules in one place; an accepted shape's
    tables are kept by the kernel's cache, so the replay reuses them."""
    from ..kernel_pipeline import schedule_shape_tables

    try:
        schedule_shape_tables(str(schedule), int(pp), int(microbatches), int(vpp))
    except InputError as exc:
        return str(exc).splitlines()[0]
    return ""


def _call(evaluator, model, training, hardware, num_gpus, col: dict, rows) -> pd.DataFrame:
    """The evaluator on candidate rows `rows`, every layout field an array."""
    split = col["layers_per_stage"][rows]
    res = evaluator(model, training, hardware, num_gpus=int(num_gpus), pp=col["pp"][rows], vpp=col["vpp"][rows],
                    schedule=col["schedule"][rows], zero=col["zero"][rows], recompute=col["recompute"][rows],
                    sequence_parallel=col["sequence_parallel"][rows].astype(bool), tp=col["tp"][rows],
                    dp=col["dp"][rows], cp=col["cp"][rows], ep=col["ep"][rows], etp=col["etp"][rows],
                    micro_batch_size=col["micro_batch_size"][rows],
                    layers_per_stage=np.where(split == "", None, split).astype(object))
    if len(res) != len(rows):
        raise AssertionError(f"evaluator returned {len(res)} rows for {len(rows)} layouts")
    return res.reset_index(drop=True)


def evaluate_candidates(model, training, hardware, num_gpus: int, cands: pd.DataFrame, *,
                        evaluator: Callable | None = None) -> pd.DataFrame:
    """The candidate columns followed by the evaluator's, in the candidates' order (index 0..n-1), plus
    `memory_headroom_bytes`. Rows whose schedule shape the builder refuses (`schedule_refusal`) are not
    evaluated: they come back infeasible with the builder's reason; if the evaluator refuses a call
    (InputError), its rows are evaluated per distinct shape and categorical fields, and the groups it
    refuses come back infeasible with its one-line reason."""
    evaluator = evaluator or _default_evaluator()
    cands = cands.reset_index(drop=True)
    n = len(cands)
    col = {c: cands[c].to_numpy() for c in CANDIDATE_COLUMNS}
    why = np.full(n, "", dtype=object)
    if n:
        keys = [col[k] for k in ("schedule", "pp", "vpp", "num_microbatches")]
        first, inv = distinct_rows(*keys)  # the builder is asked once per shape
        why = np.array([schedule_refusal(*(k[i] for k in keys)) for i in first], dtype=object)[inv]
    ok = np.flatnonzero(why == "")
    parts = []
    if len(ok):
        try:
            parts.append((ok, _call(evaluator, model, training, hardware, num_gpus, col, ok)))
        except InputError:
            group = [col[k][ok] for k in ("schedule", "pp", "vpp", "num_microbatches", "recompute",
                                         "sequence_parallel", "layers_per_stage")]
            _, g = distinct_rows(*group)
            for u in range(g.max() + 1):
                rows = ok[g == u]
                try:
                    parts.append((rows, _call(evaluator, model, training, hardware, num_gpus, col, rows)))
                except InputError as exc:
                    why[rows] = str(exc).splitlines()[0]
    if parts:
        res = pd.concat([r.set_axis(rows) for rows, r in parts]).reindex(np.arange(n))
    else:
        res = pd.DataFrame({"tokens_per_s": np.full(n, np.nan)})
    refused = why != ""
    res["feasible"] = np.where(refused, False, res["feasible"].to_numpy() if "feasible" in res else False).astype(bool)
    res["reason"] = text_column(np.where(refused, why, res["reason"].to_numpy() if "reason" in res else ""))
    res = res.drop(columns=[c for c in res.columns if c in cands.columns])
    out = pd.concat([cands, res.reset_index(drop=True)], axis=1)
    if "peak_bytes" in out and getattr(hardware, "hbm_bytes", None) is not None:
        out["memory_headroom_bytes"] = float(hardware.hbm_bytes) - out["peak_bytes"].to_numpy(dtype=float)
    return out


def _timing(evaluator: Callable, time_infeasible: bool) -> Callable:
    """`evaluator` with its `time_infeasible` keyword set, when it has one (kernel.evaluate_layouts)."""
    fn = getattr(evaluator, "func", evaluator)
    try:
        takes = "time_infeasible" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a callable without a signature
        takes = False
    return functools.partial(evaluator, time_infeasible=time_infeasible) if takes else evaluator


def _blocks(evaluator: Callable, recompute_layers: int) -> Callable:
    """`evaluator` with `recompute_layers` set (full-recompute rows re-run the first N layers of each stage,
    kernel.evaluate_layouts); InputError when N > 0 and the evaluator cannot take it."""
    if not recompute_layers:
        return evaluator
    fn = getattr(evaluator, "func", evaluator)
    try:
        takes = "recompute_layers" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        takes = False
    if not takes:
        raise InputError("recompute_layers: this sweep's evaluator recomputes every layer")
    return functools.partial(evaluator, recompute_layers=recompute_layers)


# ---- resumable chunks ------------------------------------------------------------------------------
def _fingerprint(model, training, hardware, num_gpus, cands: pd.DataFrame, settings) -> str:
    h = hashlib.sha256()
    h.update(repr((model, training, getattr(hardware, "name", repr(hardware)), num_gpus, settings)).encode())
    h.update(repr(hardware).encode())
    h.update(pd.util.hash_pandas_object(cands, index=False).to_numpy().tobytes())
    return h.hexdigest()


# ---- the run ---------------------------------------------------------------------------------------
def run_sweep(scenario, space: SweepSpace | None = None, *, executor: str = "local", scheduler=None,
              out: str | os.PathLike | None = None, chunk_size: int = 50_000, resume: bool = True,
              progress: bool | Callable[[int], None] = False, evaluator: Callable | None = None,
              keep_parts: bool = False, stop_after_chunks: int | None = None,
              workers: int | None = None, time_infeasible: bool = False,
              tidy: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
              allow_unsupported: bool = False) -> pd.DataFrame:
    """Enumerate, evaluate and rank every layout of `scenario` within `space`.

    - `space`: default `SweepSpace.from_table(scenario.sweep)`.
    - `executor`: "local" (this process; with `workers` > 1, a local Dask cluster of that many
      processes) or "dask" (`scheduler`: a Dask scheduler address, a `distributed.Client`, or None for
      a local cluster of `workers` processes, default one per core). Chunks are the unit of
      distribution: keep `chunk_size` well below the number of layouts to use many workers.
    - `out`: results file (.csv/.parquet). Finished chunks go to `<out>.parts/chunk-NNNNNN.pkl`
      (written atomically); with `resume` the chunks already there are reused (the parts folder
      carries a fingerprint of the sweep and is refused if it belongs to a different one); the
      folder is removed once `out` is written unless `keep_parts`.
    - `progress`: True for a tqdm bar on stderr, or a callable receiving the rows finished.
    - `evaluator`: the vectorised kernel (default `simulator.kernel.evaluate_layouts`).
    - `stop_after_chunks`: evaluate at most this many new chunks, then raise KeyboardInterrupt
      (tests and demos of resumption).
    - `time_infeasible`: also work out the step time of the layouts that do not fit (default: their
      time and throughput columns are NaN; memory is evaluated first and the time only where it fits).
    - `tidy`: a function of the ranked table applied once, before it is written to `out` and returned
      (the CLI passes `report.tables.tidy_frame`: the file and the rows it prints are one table).
    - `allow_unsupported`: also evaluate the layouts the scenario's stack's framework cannot run (by
      default they are left out before evaluation: `supported.leave_out_unsupported`, the stack's [runs]).
    - `space.recompute_module_sets`: one sweep per set of selective-recompute modules, ranked together
      (sweep/module_sets.py; resumable chunks are not kept for these).
    Returns the ranked DataFrame (`rank.rank_results`), one row per layout; `df.attrs["left_out"]` is
    {reason: layouts left out} ({} with `allow_unsupported`) and `df.attrs["stack"]` the stack's name.
    """
    _check_run_args(executor, chunk_size, workers, out)
    space = space if space is not None else SweepSpace.from_table(getattr(scenario, "sweep", {}))
    if space.recompute_module_sets:  # one sweep per set of recompute modules, ranked together
        from .module_sets import sweep_module_sets

        df = sweep_module_sets(run_sweep, scenario, space, tidy=tidy, executor=executor, scheduler=scheduler,
                               chunk_size=chunk_size, progress=progress, evaluator=evaluator, workers=workers,
                               time_infeasible=time_infeasible, allow_unsupported=allow_unsupported)
        if out is not None:
            write_results(df, out)
        return df
    model, training, hardware, N = scenario.model, scenario.training, scenario.hardware, scenario.num_gpus
    evaluator = _blocks(_timing(evaluator or _default_evaluator(), bool(time_infeasible)), space.recompute_layers)
    cands = enumerate_layouts(model, training, N, space, hardware=hardware)
    stack = training.stack
    left_out: dict[str, int] = {}
    if not allow_unsupported:
        cands, left_out = leave_out_unsupported(cands, stack, model)
    n = len(cands)
    nchunks = -(-n // chunk_size)
    results: dict[int, pd.DataFrame] = {}
    parts = None
    if out is not None:
        fp = _fingerprint(model, training, hardware, N, cands, (chunk_size, bool(time_infeasible),
                                                               space.recompute_layers or 0))
        parts, results = open_parts(out, fp, nchunks, {"rows": n, "chunk_size": chunk_size, "chunks": nchunks},
                                     resume)
    todo = [k for k in range(nchunks) if k not in results]
    budget = len(todo) if stop_after_chunks is None else stop_after_chunks
    bar, tick = _progress(progress, n, sum(len(r) for r in results.values()))
    try:
        _run_chunks(todo[:budget], cands, chunk_size, results, parts, tick, (model, training, hardware, N, evaluator),
                    executor, scheduler, workers)
        if budget < len(todo):
            raise KeyboardInterrupt(f"stopped after {budget} chunks")
    finally:
        if bar is not None:
            bar.close()
    df = _ranked(results, nchunks, n)
    if tidy is not None:
        df = tidy(df)
    df.attrs.update(left_out=left_out, stack=stack.name)
    if out is not None:
        write_results(df, out)
        if not keep_parts:
            shutil.rmtree(parts, ignore_errors=True)
    return df


def _check_run_args(executor, chunk_size, workers, out) -> None:
    """InputError for an unknown executor, a chunk_size or workers that is not an integer >= 1, or an
    `out` whose suffix write_results cannot write (checked before any work)."""
    if executor not in ("local", "dask"):
        raise InputError(f"executor must be local or dask, got {executor!r}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise InputError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise InputError(f"workers must be an integer >= 1, got {workers!r}")
    if out is not None:
        check_suffix(out)


def _progress(progress, total: int, initial: int) -> tuple:
    """(tqdm bar or None, tick(rows) or None) for run_sweep's `progress` argument."""
    if progress is True:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, initial=initial, unit="layout", unit_scale=True, desc="sweep", leave=False)
        return bar, bar.update
    if callable(progress):
        return None, progress
    return None, None


def _run_chunks(chunks: list[int], cands: pd.DataFrame, chunk_size: int, results: dict, parts: Path | None, tick,
                ctx: tuple, executor: str, scheduler, workers: int | None) -> None:
    """Evaluate candidate chunks `chunks` here or on Dask; each finished chunk goes into `results`, its
    parts file (when `parts`) and `tick`. ctx: (model, training, hardware, num_gpus, evaluator)."""
    def finish(k, df):
        results[k] = df
        if parts is not None:
            write_atomic_pickle(df, chunk_path(parts, k))
        if tick:
            tick(len(df))

    def chunk(k):
        return cands.iloc[k * chunk_size:(k + 1) * chunk_size]

    if executor == "dask" or (workers or 1) > 1:
        _run_dask(chunks, chunk, finish, ctx, scheduler, workers)
    else:
        model, training, hardware, N, evaluator = ctx
        for k in chunks:
            finish(k, evaluate_candidates(model, training, hardware, N, chunk(k), evaluator=evaluator))


def _ranked(results: dict[int, pd.DataFrame], nchunks: int, n: int) -> pd.DataFrame:
    """The chunks' rows in order (an empty table of the result columns when there are none), ranked,
    with the text columns as text."""
    if n == 0:
        df = empty_candidates().assign(feasible=pd.Series([], dtype=bool), reason=pd.Series([], dtype=object),
                                       tokens_per_s=pd.Series([], dtype=float))
    else:
        df = pd.concat([results[k] for k in range(nchunks)], ignore_index=True)
    df = with_asynchronous(rank_results(df))
    return df.assign(**{c: text_column(df[c].to_numpy(dtype=object)) for c in TEXT_COLUMNS
                        if c in df and df[c].dtype != object})


# ---- Dask ------------------------------------------------------------------------------------------
def _portable(obj):
    """A picklable stand-in for a frozen spec whose Mapping fields are read-only proxies (which
    pickle refuses): the class and its init fields, rebuilt by `_rebuild` on a Dask worker."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        kw = {}
        for f in fields(obj):
            if not f.init:
                continue
            v = getattr(obj, f.name)
            kw[f.name] = dict(v) if isinstance(v, MappingProxyType) else v
        return ("__portable__", type(obj), kw)
    return obj


def _rebuild(obj):
    if isinstance(obj, tuple) and len(obj) == 3 and obj[0] == "__portable__":
        return obj[1](**obj[2])
    return obj


def _evaluate_chunk_task(ctx, cands: pd.DataFrame) -> pd.DataFrame:
    model, training, hardware, num_gpus, evaluator = (_rebuild(x) for x in ctx)
    return evaluate_candidates(model, training, hardware, num_gpus, cands, evaluator=evaluator)


def _run_dask(todo: list[int], chunk, finish, ctx, scheduler, workers: int | None) -> None:
    """The chunks `todo` as Dask tasks, at most two per worker thread in flight; `finish(k, rows)` as
    each comes back. Without a scheduler: a local cluster of `workers` single-threaded processes
    (default one per core: the kernel's numpy code holds the GIL)."""
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise InputError("executor 'dask' (or workers > 1) needs dask[distributed] installed") from None
    own = None
    if scheduler is None:
        own = client = Client(LocalCluster(n_workers=workers, processes=True, threads_per_worker=1,
                                           dashboard_address=None))
    elif isinstance(scheduler, str):
        try:
            own = client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError) as exc:  # no scheduler listening there
            why = str(exc).splitlines()[0] if str(exc) else "no answer"
            raise InputError(f"cannot reach the Dask scheduler at --scheduler {scheduler!r} "
                             f"({type(exc).__name__}: {why})") from None
    else:
        client = scheduler
    try:
        ctx_f = client.scatter([_portable(x) for x in ctx], broadcast=True)
        window = 2 * max(1, sum(client.nthreads().values()))
        pending, it, ac = {}, iter(todo), as_completed()

        def submit_next():
            k = next(it, None)
            if k is not None:
                f = client.submit(_evaluate_chunk_task, ctx_f, chunk(k), pure=False)
                pending[f] = k
                ac.add(f)

        for _ in range(window):
            submit_next()
        for f in ac:
            finish(pending.pop(f), f.result())
            submit_next()
    finally:
        if own is not None:
            cluster = getattr(own, "cluster", None)
            own.close()
            if cluster is not None:
                cluster.close()
