"""`parasim validate RUNS.csv`: predicted vs measured step time, tokens/s and memory per run."""
from __future__ import annotations

import math

import click

from ..errors import InputError
from . import check_output


def is_finite_number(v) -> bool:
    return v is not None and math.isfinite(v)


def _pct(v) -> str:
    return f"{round(100 * v, 1) + 0.0:+.1f}%" if is_finite_number(v) else ""  # + 0.0: no "-0.0%"


def _abs(v) -> str:
    return f"{100 * v:.1f}%" if is_finite_number(v) else "-"


def _num(spec):
    return lambda v: format(v, spec) if is_finite_number(v) else ""


def format_results(res):
    """Per-row table with units in the headers (report layer: units formatted here only); text cut at a
    word boundary, blank where a value is missing."""
    import pandas as pd

    from ..report.tables import shorten_words

    gib = (lambda v: f"{v / 2**30:.1f}" if is_finite_number(v) else "")
    return pd.DataFrame({
        "run_id": res["run_id"], "layout": res["label"], "hardware": res["hardware"],
        "meas step [s]": res["measured_step_s"].map(_num(".3f")),
        "pred step [s]": res["predicted_step_s"].map(_num(".3f")),
        "step err": res["step_error"].map(_pct),
        "step basis": res["step_basis"].map(lambda t: shorten_words(t, 40)),
        "meas tok/s": res["measured_tokens_per_s"].map(_num(",.0f")),
        "pred tok/s": res["predicted_tokens_per_s"].map(_num(",.0f")),
        "meas mem [GiB]": res["measured_mem_bytes"].map(gib),
        "pred mem [GiB]": res["predicted_mem_bytes"].map(gib),
        "mem err": res["mem_error"].map(_pct),
        "feasible": res["feasible"],
    })


def _fraction(flag: str, v):
    if v is not None and (not math.isfinite(v) or v < 0):
        raise InputError(f"{flag} must be a finite fraction >= 0 (e.g. 0.2 for 20 %), got {v!r}")
    return v


def accounting_line(acc: dict, reasons: str = "reasons below") -> str:
    """Where every row went, each row counted once: e.g. `315 rows: 309 compared on step time, 4 measured
    out of memory (1 predicted not to fit), 2 skipped (reasons below)`."""
    parts = [f"{acc['step']} compared on step time"]
    if acc["memory_only"]:
        parts.append(f"{acc['memory_only']} on memory only")
    if acc["oom"]:
        parts.append(f"{acc['oom']} measured out of memory ({acc['oom_predicted']} predicted not to fit)")
    if acc["nothing"]:
        parts.append(f"{acc['nothing']} with no measured figure to compare")
    if acc["skipped"]:
        parts.append(f"{acc['skipped']} skipped ({reasons})")
    return f"{acc['rows']} row{'s' if acc['rows'] != 1 else ''}: " + ", ".join(parts)


def _summary(res, acc, echo) -> object:
    """Print the accounting and the error statistics; return the overall summary row."""
    from ..validate import error_summary

    s = error_summary(res).iloc[0]
    rho = f"{s.step_spearman:.3f}" if is_finite_number(s.step_spearman) else "-"
    echo("\n" + accounting_line(acc))
    echo(f"step time ({int(s.step_runs)} runs): median |error| {_abs(s.median_abs_step_error)}, "
         f"max |error| {_abs(s.max_abs_step_error)}, mean {_pct(s.mean_step_error) or '-'}, Spearman {rho}")
    echo(f"memory ({int(s.mem_runs)} runs): median |error| {_abs(s.median_abs_mem_error)}, "
         f"max |error| {_abs(s.max_abs_mem_error)}, mean {_pct(s.mean_mem_error) or '-'}")
    if len(res) and res["source_id"].nunique() > 1:
        for _, g in error_summary(res, by="source_id").iterrows():
            mem = (f"memory {int(g.mem_runs)} runs, median |error| {_abs(g.median_abs_mem_error)}, "
                   f"mean {_pct(g.mean_mem_error) or '-'}") if g.mem_runs else "no memory figures"
            echo(f"  {g.group}: step {int(g.step_runs)} runs, median |error| {_abs(g.median_abs_step_error)}, "
                 f"mean {_pct(g.mean_step_error) or '-'}; {mem}")
    return s


def _failures(s, max_error, max_median_error) -> list[str]:
    failed = []
    if max_error is not None and not (s.max_abs_step_error <= max_error):
        failed.append(f"max |step error| {_abs(s.max_abs_step_error)} > {100 * max_error:.1f}%")
    if max_median_error is not None and not (s.median_abs_step_error <= max_median_error):
        failed.append(f"median |step error| {_abs(s.median_abs_step_error)} > {100 * max_median_error:.1f}%")
    return failed


@click.command("validate")
@click.argument("runs", type=click.Path(dir_okay=False))
@click.option("--hardware", default=None, help="hardware preset/profile for every row (default: from gpu_type)")
@click.option("--source", "sources", multiple=True, help="only rows of this source_id (repeatable)")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="write a predicted-vs-measured scatter (.png, .svg or .pdf)")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="write the per-row results CSV")
@click.option("--max-error", type=float, default=None,
              help="exit 1 if any |step error| exceeds this fraction (e.g. 0.2)")
@click.option("--max-median-error", type=float, default=None, help="exit 1 if the median |step error| exceeds this")
@click.option("--format", "fmt", type=click.Choice(["table", "csv"]), default="table")
def validate(runs, hardware, sources, plot, out, max_error, max_median_error, fmt):
    """Predict every run of RUNS.csv (columns of published_runs.csv) and compare with the measurement:
    per-row predicted vs measured step time (measured step_time_s, else from tokens/s, else the
    labelled derived value), tokens/s and memory; median and max |error| and Spearman rank correlation.
    Exit 2 when no run could be compared, 1 when a --max-* bound is exceeded.

    \b
    Examples:
      parasim validate validation/published_runs.csv --plot scatter.png
      parasim validate runs.csv --hardware dgx-h100 --max-error 0.2
    """
    from ..validate import predict_runs, read_runs
    from ..validate.predict import accounting

    _fraction("--max-error", max_error)
    _fraction("--max-median-error", max_median_error)
    if plot:
        check_output("--plot", plot, (".png", ".svg", ".pdf"))
    if out:
        check_output("--out", out)
    df = read_runs(runs)
    if sources:
        df = df[df["source_id"].isin(sources)]
        if df.empty:
            raise InputError(f"no row with source_id in {', '.join(sources)}")
    res, skipped = predict_runs(df, hardware=hardware)
    acc = accounting(res, skipped)
    echo = (lambda text: click.echo(text, err=fmt == "csv"))
    if acc["step"] + acc["memory_only"] == 0:  # one line: the first row's reason stands for them
        first = f"the first: {skipped.iloc[0].run_id}: {skipped.iloc[0].reason}" if len(skipped) else ""
        raise InputError(f"no run of {runs} could be compared ({accounting_line(acc, first)})")
    if out:
        res.to_csv(out, index=False)
    click.echo(res.to_csv(index=False) if fmt == "csv" else format_results(res).to_string(index=False),
               nl=fmt != "csv")
    s = _summary(res, acc, echo)
    for _, r in skipped.iterrows():
        echo(f"skipped {r.run_id}: {r.reason}")
    if plot:
        from ..report.scatter import save_scatter

        save_scatter(res, plot)
        echo(f"wrote {plot}")
    if out:
        echo(f"wrote {out}")
    failed = _failures(s, max_error, max_median_error)
    if failed:
        click.echo("FAIL: " + "; ".join(failed), err=True)
        return 1
    return 0


COMMANDS = [validate]
