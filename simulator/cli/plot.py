"""`parasim plot ...`: charts from sweep results files and from replayed schedules (PNG or SVG)."""
from __future__ import annotations

import click

from ..errors import InputError
from . import check_output
from .lists import comma_ints, comma_names


def _out_option(fn):
    return click.option("--out", required=True, type=click.Path(dir_okay=False), help="chart.png or chart.svg")(fn)


def _title_option(fn):
    return click.option("--title", default=None, help="chart title")(fn)


def _check_out(out):
    check_output("--out", out, (".png", ".svg"))


@click.group("plot")
def plot():
    """Charts: MFU heatmap, Pareto front, bubble vs microbatches, memory of the top layouts, Gantt.

    \b
    Examples:
      parasim sweep scenarios/llama3-70b-512xh100.toml --out r.csv
      parasim plot mfu r.csv --out mfu.png
      parasim plot pareto r.csv --out pareto.svg
      parasim plot memory r.csv --top 8 --out memory.png
      parasim plot bubble --pp 8 --microbatches 8,16,32,64 --schedules 1f1b,interleaved,zb-h1 --out bubble.png
      parasim plot timeline --schedule interleaved --pp 4 --vpp 2 --microbatches 8 --out gantt.png
    """


@plot.command("mfu")
@click.argument("results")
@_out_option
@_title_option
def plot_mfu(results, out, title):
    """Heatmap of the best MFU per TP × PP from a sweep results file (.csv or .parquet)."""
    from ..report.sweep_plots import mfu_heatmap, save_figure
    from ..sweep import read_results

    _check_out(out)
    save_figure(mfu_heatmap(read_results(results), title=title), out)
    click.echo(f"wrote {out}")


@plot.command("pareto")
@click.argument("results")
@_out_option
@_title_option
def plot_pareto(results, out, title):
    """Throughput vs memory headroom of the feasible layouts, with the Pareto front."""
    from ..report.sweep_plots import pareto_chart, save_figure
    from ..sweep import read_results

    _check_out(out)
    save_figure(pareto_chart(read_results(results), title=title), out)
    click.echo(f"wrote {out}")


@plot.command("memory")
@click.argument("results")
@click.option("--top", type=int, default=8, show_default=True, help="layouts to draw (best first)")
@click.option("--all-rows", is_flag=True, help="include infeasible rows (default: feasible only)")
@_out_option
@_title_option
def plot_memory(results, top, all_rows, out, title):
    """Stacked per-GPU memory of the top layouts of a sweep results file."""
    from ..report.sweep_plots import memory_bars, save_figure
    from ..sweep import read_results

    _check_out(out)
    if top < 1:
        raise InputError(f"--top must be >= 1, got {top}")
    df = read_results(results)
    if not all_rows and "feasible" in df:
        df = df[df["feasible"].astype(bool)]
    save_figure(memory_bars(df, top=top, title=title), out)
    click.echo(f"wrote {out}")


def _schedule_times(fn, *, split_w: bool = False):
    """The --forward/--backward/--weight/--p2p options. `split_w`: --weight has no default, and without it
    --backward is the whole backward, split into B and W (report.bubble.split_backward: B = W, Qi et al.
    2024), so that the bubble chart shows what zero-bubble schedules buy; otherwise W defaults to 0."""
    fn = click.option("--p2p", type=float, default=0.0, show_default=True, help="p2p time between stages, s")(fn)
    if split_w:
        fn = click.option("--weight", type=float, default=None,
                          help="W (weight-gradient) time per microbatch per rank, s; default: half of --backward "
                               "(B = W, Zero Bubble paper, Qi et al. 2024)")(fn)
        back_help = "backward time per microbatch per rank, s: B + W without --weight, B (input-gradient) with it"
    else:
        fn = click.option("--weight", type=float, default=0.0, show_default=True,
                          help="W (weight-gradient) time per microbatch per rank, s")(fn)
        back_help = "B (input-gradient) time per microbatch per rank, s"
    fn = click.option("--backward", type=float, default=2.0, show_default=True, help=back_help)(fn)
    fn = click.option("--forward", type=float, default=1.0, show_default=True,
                      help="F time per microbatch per rank, s")(fn)
    return fn


def _bubble_times(fn):
    return _schedule_times(fn, split_w=True)


def _check_times(**kw):
    from .common import stage_times_s

    stage_times_s(**kw)


@plot.command("bubble")
@click.option("--pp", type=int, required=True, help="pipeline ranks")
@click.option("--microbatches", default="4,8,16,32,64", show_default=True, help="comma list of microbatch counts")
@click.option("--schedules", default="gpipe,1f1b,interleaved,zb-h1,zb-h2", show_default=True,
              help="comma list of schedules")
@click.option("--vpp", type=int, default=2, show_default=True, help="chunks per rank for interleaved")
@_bubble_times
@_out_option
@_title_option
def plot_bubble(pp, microbatches, schedules, vpp, forward, backward, weight, p2p, out, title):
    """Bubble fraction vs microbatches per schedule, each point replayed on the pipeline engine. Without
    --weight the backward is split B = W (Zero Bubble paper), as the chart's caption says."""
    from ..report.sweep_plots import bubble_chart, save_figure
    from ..report.bubble import bubble_vs_microbatches

    _check_out(out)
    _check_times(forward=forward, backward=backward, p2p=p2p, **({} if weight is None else {"weight": weight}))
    if pp < 1:
        raise InputError(f"--pp must be >= 1, got {pp}")
    from ..schedules import SCHEDULE_NAMES

    names = [s.lower() for s in comma_names("--schedules", schedules, example="1f1b,gpipe")]
    unknown = [n for n in names if n not in SCHEDULE_NAMES]
    if unknown:
        raise InputError(f"--schedules must name schedules among {', '.join(SCHEDULE_NAMES)}, got {schedules!r}")
    if vpp < 1:
        raise InputError(f"--vpp must be >= 1, got {vpp}")
    counts = comma_ints("--microbatches", microbatches, example="4,8,16")
    t = bubble_vs_microbatches(names, pp=pp, microbatches=counts, vpp=vpp,
                               forward_s=forward, backward_s=backward, weight_s=weight, p2p_s=p2p)
    missing = sorted(set(names) - set(t["schedule"]))
    if len(missing) == len(set(names)):
        raise InputError(f"no schedule of --schedules {schedules!r} runs with --pp {pp} and --microbatches "
                         f"{microbatches} (--vpp {vpp})")
    if missing:
        click.echo(f"note: no valid point for {', '.join(missing)} with pp={pp}", err=True)
    save_figure(bubble_chart(t, title=title), out)
    click.echo(f"wrote {out}")


@plot.command("timeline")
@click.option("--schedule", "name", required=True, help="gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v, dualpipe, ...")
@click.option("--pp", type=int, required=True, help="pipeline ranks")
@click.option("--microbatches", type=int, required=True, help="microbatches per step")
@click.option("--vpp", type=int, default=None, help="chunks per rank (interleaved; default 2 there)")
@_schedule_times
@_out_option
@_title_option
def plot_timeline(name, pp, microbatches, vpp, forward, backward, weight, p2p, out, title):
    """Gantt chart of one replayed schedule (the same replay as `parasim schedule --plot`)."""
    from ..report.bubble import replay_rank_share
    from ..report.gantt import MAX_RANKS, gantt_figure
    from ..report.sweep_plots import save_figure

    _check_out(out)
    _check_times(forward=forward, backward=backward, weight=weight, p2p=p2p)
    if pp > MAX_RANKS:
        raise InputError(f"a Gantt chart draws at most {MAX_RANKS} ranks (half an inch each), got --pp {pp}")
    _, tl = replay_rank_share(name.strip().lower(), pp=pp, microbatches=microbatches, vpp=vpp, forward_s=forward,
                              backward_s=backward, weight_s=weight, p2p_s=p2p)
    save_figure(gantt_figure(tl, title=title), out)
    click.echo(f"wrote {out}")


COMMANDS = [plot]
