"""`parasim validate RUNS.csv`: predicted vs measured step time, tokens/s and memory per run."""
from __future__ import annotations

import math

import click

from ..errors import InputError


def _pct(v) -> str:
    return "" if v is None or not math.isfinite(v) else f"{100 * v:+.1f}%"


def _abs(v) -> str:
    return "" if v is None or not math.isfinite(v) else f"{100 * v:.1f}%"


def format_results(res):
    """Per-row table with units in the headers (report layer: units formatted here only)."""
    import pandas as pd

    return pd.DataFrame({
        "run_id": res["run_id"], "layout": res["label"], "hardware": res["hardware"],
        "meas step [s]": res["measured_step_s"].map(lambda v: f"{v:.3f}"),
        "pred step [s]": res["predicted_step_s"].map(lambda v: f"{v:.3f}"),
        "step err": res["step_error"].map(_pct),
        "step basis": res["step_basis"].str.slice(0, 40),
        "meas tok/s": res["measured_tokens_per_s"].map(lambda v: f"{v:,.0f}" if math.isfinite(v) else ""),
        "pred tok/s": res["predicted_tokens_per_s"].map(lambda v: f"{v:,.0f}" if math.isfinite(v) else ""),
        "meas mem [GiB]": res["measured_mem_bytes"].map(lambda v: f"{v / 2**30:.1f}" if math.isfinite(v) else ""),
        "pred mem [GiB]": res["predicted_mem_bytes"].map(lambda v: f"{v / 2**30:.1f}" if math.isfinite(v) else ""),
        "mem err": res["mem_error"].map(_pct),
        "feasible": res["feasible"],
    })


@click.command("validate")
@click.argument("runs", type=click.Path(dir_okay=False))
@click.option("--hardware", default=None, help="hardware preset/profile for every row (default: from gpu_type)")
@click.option("--source", "sources", multiple=True, help="only rows of this source_id (repeatable)")
@click.option("--plot", type=click.Path(dir_okay=False), default=None, help="write a predicted-vs-measured scatter")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="write the per-row results CSV")
@click.option("--max-error", type=float, default=None,
              help="exit 1 if any |step error| exceeds this fraction (e.g. 0.2)")
@click.option("--max-median-error", type=float, default=None, help="exit 1 if the median |step error| exceeds this")
@click.option("--format", "fmt", type=click.Choice(["table", "csv"]), default="table")
def validate(runs, hardware, sources, plot, out, max_error, max_median_error, fmt):
    """Predict every run of RUNS.csv (columns of published_runs.csv) and compare with the measurement:
    per-row predicted vs measured step time (measured step_time_s, else from tokens/s, else the
    labelled derived value), tokens/s and memory; median and max |error| and Spearman rank correlation.

    \b
    Examples:
      parasim validate validation/published_runs.csv --plot scatter.png
      parasim validate runs.csv --hardware dgx-h100 --max-error 0.2
    """
    from ..validate import error_summary, predict_runs, read_runs

    df = read_runs(runs)
    if sources:
        df = df[df["source_id"].isin(sources)]
        if df.empty:
            raise InputError(f"no row with source_id in {', '.join(sources)}")
    res, skipped = predict_runs(df, hardware=hardware)
    if out:
        res.to_csv(out, index=False)
    if fmt == "csv":
        click.echo(res.to_csv(index=False), nl=False)
    else:
        click.echo(format_results(res).to_string(index=False))
    summ = error_summary(res)
    s = summ.iloc[0]
    click.echo(f"\nruns compared: {int(s.step_runs)} of {len(df)} (skipped {len(skipped)})", err=fmt == "csv")
    click.echo(f"step time: median |error| {_abs(s.median_abs_step_error)}, max |error| {_abs(s.max_abs_step_error)}, "
               f"mean {_pct(s.mean_step_error)}, Spearman {s.step_spearman:.3f}", err=fmt == "csv")
    click.echo(f"memory ({int(s.mem_runs)} runs): median |error| {_abs(s.median_abs_mem_error)}, "
               f"max |error| {_abs(s.max_abs_mem_error)}, mean {_pct(s.mean_mem_error)}", err=fmt == "csv")
    if len(res) and res["source_id"].nunique() > 1:
        for _, g in error_summary(res, by="source_id").iterrows():
            mem = (f"memory {int(g.mem_runs)} runs, median |error| {_abs(g.median_abs_mem_error)}, "
                   f"mean {_pct(g.mean_mem_error)}") if g.mem_runs else "no memory figures"
            click.echo(f"  {g.group}: step {int(g.step_runs)} runs, median |error| {_abs(g.median_abs_step_error)}, "
                       f"mean {_pct(g.mean_step_error)}; {mem}", err=fmt == "csv")
    for _, r in skipped.iterrows():
        click.echo(f"skipped {r.run_id}: {r.reason}", err=fmt == "csv")
    if plot:
        from ..report.scatter import save_scatter

        save_scatter(res, plot)
        click.echo(f"wrote {plot}", err=fmt == "csv")
    failed = []
    if max_error is not None and not (s.max_abs_step_error <= max_error):
        failed.append(f"max |step error| {_abs(s.max_abs_step_error)} > {100 * max_error:.1f}%")
    if max_median_error is not None and not (s.median_abs_step_error <= max_median_error):
        failed.append(f"median |step error| {_abs(s.median_abs_step_error)} > {100 * max_median_error:.1f}%")
    if failed:
        click.echo("FAIL: " + "; ".join(failed), err=True)
        return 1
    return 0


COMMANDS = [validate]
