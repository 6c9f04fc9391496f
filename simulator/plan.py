"""Plan a whole run over lists of GPU counts and hardware presets: for each (hardware, GPU count) the sweep's
best layout (sweep/run.py: every layout, ranked), turned into days, GPU-hours, cost and energy
(run_plan.plan_run), then the candidates ranked for the user's goal:

- `objective="cost"`: the lowest cost (USD when every candidate has a price, else GPU-hours) among the
  candidates that finish within `max_days` and `max_usd`;
- `objective="days"`: the shortest wall clock within the same limits.

A candidate without a layout that fits, or over a limit, stays in the table with the reason. The sweeps run
one after another in this process, or on Dask (`executor`, `scheduler`, `workers`: sweep/run.py), and give
the same rows either way: each sweep's ranking is deterministic.
"""
from __future__ import annotations

import math
import os
import time
from contextlib import contextmanager
from dataclasses import replace

import pandas as pd

from .errors import InputError
from .run_plan import DAY, checkpoint_bytes, plan_run
from .spec.hardware import load_hardware
from .spec.validate import precision_problem
from .spec.run import RunSpec
from .sweep import run_sweep

OBJECTIVES = ("cost", "days")
LAYOUT_COLUMNS = ("label", "tp", "pp", "dp", "cp", "ep", "vpp", "zero", "recompute", "schedule", "micro_batch_size")


def _check(gpu_counts, hardware_names, objective, max_days, max_usd) -> None:
    if objective not in OBJECTIVES:
        raise InputError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if not gpu_counts or not hardware_names:
        raise InputError("a plan needs at least one GPU count and one hardware preset")
    for name, v in (("max_days", max_days), ("max_usd", max_usd)):
        if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise InputError(f"{name} must be a finite number > 0, got {v!r}")


def _best_layout(scenario, space, sweep_kw) -> tuple[dict | None, int, float]:
    """(the best feasible row of the scenario's sweep or None, layouts evaluated, seconds)."""
    t0 = time.perf_counter()
    df = run_sweep(scenario, space, **sweep_kw)
    seconds = time.perf_counter() - t0
    fits = df[df["feasible"]]
    return (fits.iloc[0].to_dict() if len(fits) else None), len(df), seconds


def _candidate(scenario, spec: RunSpec, row: dict | None, n_layouts: int, seconds: float) -> dict:
    """One plan row: the hardware and GPU count, the layout, the run's days / GPU-hours / USD / MWh."""
    hw, tr, n = scenario.hardware, scenario.training, scenario.num_gpus
    base = {"hardware": hw.name, "gpus": n, "layouts": n_layouts, "sweep_s": seconds}
    if row is None:
        return {**base, "feasible": False, "reason": "no layout fits on this hardware and GPU count"}
    plan = plan_run(spec, step_s=float(row["step_s"]), tokens_per_step=tr.tokens_per_step, num_gpus=n,
                    gpus_per_node=hw.gpus_per_node, hardware=hw,
                    ckpt_bytes=checkpoint_bytes(scenario.model.total_params(), tr.param_bytes, tr.optimizer_bytes))
    return {**base, "feasible": True, "reason": "", **{k: row[k] for k in LAYOUT_COLUMNS if k in row},
            "step_s": float(row["step_s"]), "mfu": float(row["mfu"]), "peak_bytes": row["peak_bytes"],
            "days": plan.wall_s / DAY, "gpu_hours": plan.gpu_hours, "usd": plan.usd, "energy_mwh": plan.energy_mwh,
            "usd_per_gpu_hour": plan.usd_per_gpu_hour}


def _rank(df: pd.DataFrame, objective: str, max_days, max_usd) -> pd.DataFrame:
    """Limits applied (a candidate over one becomes infeasible with the reason), then ranked."""
    df = df.copy()
    for col, limit, unit in (("days", max_days, "days"), ("usd", max_usd, "USD")):
        if limit is None or col not in df:
            continue
        over = df["feasible"] & (pd.to_numeric(df[col], errors="coerce") > limit)
        df.loc[over, "reason"] = [f"{col} {v:,.1f} > {limit:,.1f} {unit}" for v in df.loc[over, col]]
        df.loc[over, "feasible"] = False
    priced = "usd" in df and df.loc[df["feasible"], "usd"].notna().all() and df["feasible"].any()
    key = "days" if objective == "days" else ("usd" if priced else "gpu_hours")
    order = [c for c in ("feasible", key, "days", "gpus", "hardware") if c in df]
    df = df.sort_values(order, ascending=[False] + [True] * (len(order) - 1), kind="stable", na_position="last")
    df = df.reset_index(drop=True)
    df.insert(0, "rank", range(1, len(df) + 1))
    df.attrs["ranked_by"] = key
    return df


@contextmanager
def _scheduler(executor: str, scheduler, workers):
    """The Dask scheduler every sweep of the plan shares: the given one, one local cluster for the whole
    plan (`executor="dask"` or `workers` > 1 without a scheduler), or None (in this process)."""
    if scheduler is not None or (executor != "dask" and not (workers and workers > 1)):
        yield scheduler
        return
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise InputError("executor 'dask' (or workers > 1) needs dask[distributed] installed") from None
    n = workers or os.cpu_count() or 1
    try:
        cluster = LocalCluster(n_workers=n, processes=True, threads_per_worker=1, dashboard_address=None)
    except Exception as exc:  # noqa: BLE001 (the cluster's own start errors: one line, not a traceback)
        raise InputError(f"could not start a local Dask cluster of {n} workers: {exc}") from None
    client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def plan_runs(scenario, spec: RunSpec, *, gpu_counts, hardware_names, space=None, objective: str = "cost",
              max_days: float | None = None, max_usd: float | None = None, executor: str = "local", scheduler=None,
              workers: int | None = None, chunk_size: int = 50_000, hardware_fn=None) -> pd.DataFrame:
    """The plan table: one row per (hardware preset, GPU count) with its best layout and the run's days,
    GPU-hours, USD and MWh for `spec.tokens`, ranked for `objective` within `max_days` / `max_usd`
    (module docstring). `scenario` gives the model, training and sweep space; its hardware and GPU count
    are replaced by each candidate's; `hardware_fn(profile)` adjusts each loaded preset (the CLI's
    --gpu-speed-cv)."""
    _check(gpu_counts, hardware_names, objective, max_days, max_usd)
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise InputError(f"workers must be an integer >= 1, got {workers!r}")  # (sweep/run.py's rule)
    hardware_fn = hardware_fn or (lambda hw: hw)
    hardware_fn(scenario.hardware)  # (a bad adjustment fails before any sweep)
    with _scheduler(executor, scheduler, workers) as sched:
        kw = dict(executor="dask", scheduler=sched) if sched is not None else dict(executor="local")
        rows = _candidates(scenario, spec, space, gpu_counts, hardware_names, {**kw, "chunk_size": chunk_size},
                           hardware_fn)
    return _rank(pd.DataFrame(rows), objective, max_days, max_usd)


def _candidates(scenario, spec, space, gpu_counts, hardware_names, sweep_kw, hardware_fn) -> list[dict]:
    """One row per (hardware preset, GPU count), in that order (_candidate)."""
    rows = []
    for name in hardware_names:
        hw = hardware_fn(load_hardware(name))
        cannot = precision_problem(scenario.training, hw)  # (a GPU that cannot run the precision: no layout runs)
        for n in gpu_counts:
            sc = replace(scenario, hardware=hw, num_gpus=int(n), layout=None)
            try:
                if cannot:
                    raise InputError(cannot)
                best, count, seconds = _best_layout(sc, space, sweep_kw)
            except InputError as exc:  # e.g. a GPU count no layout divides
                rows.append({"hardware": hw.name, "gpus": int(n), "feasible": False,
                             "reason": str(exc).splitlines()[0], "layouts": 0, "sweep_s": 0.0})
                continue
            rows.append(_candidate(sc, spec, best, count, seconds))
    return rows
