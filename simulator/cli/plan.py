"""`parasim plan`: the cheapest (or fastest) way to train on N tokens over lists of GPU counts and hardware
presets (simulator/plan.py)."""
from __future__ import annotations

import json

import click

from ..errors import InputError
from .common import GPU_SPEED_CV_HELP, scenario_from_options, scenario_options, with_gpu_speed_cv
from .flagnames import flag_names
from .lists import MAX_GPUS, comma_ints, comma_names
from .run_options import run_options, run_spec


def _layout(r: dict) -> str:
    """'TP2-CP1-PP8-DP64 z1' (the label and the ZeRO stage), '-' without a layout."""
    z = r.get("zero")
    return "-" if r.get("label") is None or r.get("label") != r.get("label") else f"{r['label']} z{int(z)}"


def _table(df, top: int, ranked_by: str) -> str:
    lines = [f"ranked by {ranked_by} (feasible first)",
             f"{'rank':>4} {'hardware':<14} {'GPUs':>6} {'layout':<26} {'days':>8} {'GPU-hours':>12} {'USD':>14} "
             f"{'MWh':>8} {'MFU':>6}  feasible"]
    num = lambda x, spec: f"{x:{spec}}" if x is not None and x == x else "-"  # noqa: E731
    for r in df.head(top).to_dict("records"):
        lines.append(f"{r['rank']:>4} {r['hardware']:<14} {r['gpus']:>6} {_layout(r):<26} "
                     f"{num(r.get('days'), '>8.1f')} {num(r.get('gpu_hours'), '>12,.0f')} "
                     f"{num(r.get('usd'), '>14,.0f')} "
                     f"{num(r.get('energy_mwh'), '>8,.0f')} {num(r.get('mfu'), '>6.1%')}  "
                     f"{'yes' if r['feasible'] else 'no: ' + str(r['reason'])}")
    return "\n".join(lines)


@click.command("plan")
@scenario_options
@run_options
@click.option("--gpu-counts", required=True, help="comma-separated GPU counts to plan over, e.g. 512,1024,2048")
@click.option("--hardware-presets", default=None,
              help="comma-separated hardware presets (default: the scenario's / --hardware)")
@click.option("--objective", type=click.Choice(["cost", "days"]), default="cost", show_default=True,
              help="cost: cheapest within the limits (USD with a price, else GPU-hours); days: fastest")
@click.option("--max-days", type=float, default=None, help="finish within this many days")
@click.option("--max-usd", type=float, default=None, help="spend at most this many USD")
@click.option("--executor", type=click.Choice(["local", "dask"]), default="local", show_default=True)
@click.option("--workers", type=int, default=None, help="processes for the sweeps (a local Dask cluster)")
@click.option("--top", type=int, default=10, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--gpu-speed-cv", type=float, default=None, help=GPU_SPEED_CV_HELP)
def plan(gpu_counts, hardware_presets, objective, max_days, max_usd, executor, workers, top, fmt, gpu_speed_cv,
         **kwargs):
    """Plan a whole run: for every hardware preset x GPU count, the best layout of the sweep, its days,
    GPU-hours, cost and energy for --tokens, ranked for --objective within --max-days / --max-usd.

    \b
    Examples:
      parasim plan scenarios/llama3-70b-512xh100.toml --tokens 15e12 --gpu-counts 512,1024,2048 \\
          --hardware-presets dgx-h100,dgx-h200,b300 --usd-per-gpu-hour 2.5 --max-days 90
      parasim plan --model llama3-8b --hardware dgx-h100 --seq 8192 --global-batch 512 --tokens 1e12 \\
          --gpu-counts 64,128,256 --objective days
    """
    from ..plan import plan_runs
    from ..spec.presets import resolve_named

    run_keys = {k: kwargs.pop(k) for k in list(kwargs) if k in ("tokens", "usd_per_gpu_hour", "checkpoint_interval_h",
                                                                 "mtbf_gpu_h", "restart_min",
                                                                 "checkpoint_write_gb_per_s", "board_power_w")}
    counts = tuple(dict.fromkeys(comma_ints("--gpu-counts", gpu_counts, most=MAX_GPUS, example="64,128,256")))
    names = (comma_names("--hardware-presets", hardware_presets, example="dgx-h100,b300")
             if hardware_presets is not None else None)
    for name in names or ():  # an unknown preset names the flag, before any sweep
        resolve_named("hardware_profiles", name, "--hardware-presets")
    if kwargs.get("scenario") is None:  # flags alone need one of each; every candidate sets its own
        kwargs["num_gpus"] = counts[0] if kwargs.get("num_gpus") is None else kwargs["num_gpus"]
        kwargs["hardware"] = names[0] if kwargs.get("hardware") is None and names else kwargs.get("hardware")
    sc = scenario_from_options(kwargs, require_layout=False)
    spec = run_spec(getattr(sc, "run", {}) or {}, run_keys)
    if spec is None:
        raise InputError("parasim plan needs --tokens (or [run] tokens in the scenario)")
    names = names or [sc.hardware.name]
    if top < 0:
        raise InputError(f"--top must be >= 0, got {top}")
    with flag_names({"max_days": "--max-days", "max_usd": "--max-usd", "workers": "--workers"}):
        df = plan_runs(sc, spec, gpu_counts=counts, hardware_names=names, objective=objective, max_days=max_days,
                       max_usd=max_usd, executor=executor, workers=workers,
                       hardware_fn=lambda hw: with_gpu_speed_cv(hw, gpu_speed_cv))
    if fmt == "json":
        click.echo(json.dumps(json.loads(df.head(top).to_json(orient="records")), indent=2))
    elif fmt == "csv":
        click.echo(df.head(top).to_csv(index=False), nl=False)
    else:
        click.echo(f"{sc.model.name}: {spec.tokens:,.0f} tokens, {len(df)} candidates "
                   f"({int(df['layouts'].sum()):,} layouts in {df['sweep_s'].sum():.1f} s)")
        click.echo(_table(df, top, df.attrs.get("ranked_by", objective)))


COMMANDS = [plan]
