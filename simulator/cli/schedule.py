"""`parasim schedule`: replay a pipeline schedule with given per-microbatch stage times."""
import json

import click

from ..errors import InputError
from ..schedules import SCHEDULE_NAMES
from . import check_output
from .common import stage_times_s

PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def _check_files(plot, trace, pp):
    if plot:
        from ..report.gantt import MAX_RANKS

        check_output("--plot", plot, PLOT_SUFFIXES)
        if pp > MAX_RANKS:
            raise InputError(f"--plot draws at most {MAX_RANKS} ranks (half an inch each), got --pp {pp}; "
                             f"--trace has no such limit")
    if trace:
        check_output("--trace", trace, (".json",))


def _summary(sch, tl, forward, backward, weight, p2p) -> dict:
    """The JSON output: `Timeline.to_dict` with the times per op, idle times and bubbles that cannot be
    negative printed as 0 when a rounding residue made them so."""
    from ..report.tables import nonnegative

    out = tl.to_dict()
    span = tl.makespan_s
    out["bubble_fraction"] = nonnegative(out["bubble_fraction"])
    out["bubble_fraction_per_rank"] = [nonnegative(x) for x in out["bubble_fraction_per_rank"]]
    out["idle_s_per_rank"] = [nonnegative(x, span) for x in out["idle_s_per_rank"]]
    out.update({"vpp": sch.chunks_per_rank, "forward_s": forward, "backward_s": backward, "weight_s": weight,
                "p2p_s": p2p})
    return out


def _table(sch, tl, out, pp, microbatches) -> str:
    lines = [f"schedule {sch.name}  pp={pp}  microbatches={microbatches}  stages={sch.num_stages}  ops={out['num_ops']}",
             f"makespan_s {tl.makespan_s:.6g}   bubble_fraction {out['bubble_fraction']:.4f}",
             f"{'rank':>4} {'busy_s':>12} {'idle_s':>12} {'bubble':>8} {'peak_inflight':>13}"]
    for r in range(pp):
        lines.append(f"{r:>4} {tl.busy_s_per_rank[r]:>12.6g} {out['idle_s_per_rank'][r]:>12.6g} "
                     f"{out['bubble_fraction_per_rank'][r]:>8.4f} {tl.peak_inflight_microbatches_per_rank[r]:>13d}")
    if tl.steady_state_time_per_microbatch_s is not None:
        lines.append(f"asynchronous: steady-state time per microbatch {tl.steady_state_time_per_microbatch_s:.6g} s; "
                     f"stashed weight versions per rank {list(tl.stashed_weight_versions_per_rank)}")
    return "\n".join(lines)


@click.command("schedule")
@click.option("--schedule", "name", required=True, help=", ".join(SCHEDULE_NAMES))
@click.option("--pp", type=int, required=True, help="pipeline ranks (at most 4096)")
@click.option("--microbatches", type=int, required=True,
              help="microbatches per step (pp × chunks per rank × microbatches at most 1,048,576)")
@click.option("--vpp", type=int, default=None, help="chunks per rank (interleaved; default 2 there, else 1)")
@click.option("--forward", type=float, default=1.0, show_default=True, help="F time per microbatch per rank (all its chunks), s")
@click.option("--backward", type=float, default=2.0, show_default=True, help="B (input-gradient) time per microbatch per rank, s")
@click.option("--weight", type=float, default=0.0, show_default=True, help="W (weight-gradient) time per microbatch per rank, s; 0: B is the whole backward")
@click.option("--p2p", type=float, default=0.0, show_default=True, help="p2p transfer time between stages, s")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="write a Gantt chart (.png, .svg or .pdf; at most 256 ranks)")
@click.option("--trace", type=click.Path(dir_okay=False), default=None, help="write a Chrome/Perfetto trace (.json)")
def schedule_cmd(name, pp, microbatches, vpp, forward, backward, weight, p2p, fmt, plot, trace):
    """Replay a pipeline schedule and report makespan, bubble and in-flight microbatches.

    Times are per microbatch for one rank's whole share of the model; ranks holding several chunks
    (interleaved, zb-v, dualpipev) split it evenly between their chunks. With --weight 0 a split
    schedule (zb-*) gets W = 0. Size bounds (time and memory of the replay): pp <= 4096 and
    pp × chunks per rank × microbatches <= 1,048,576 (2-3 ops each).

    \b
    Example:
      parasim schedule --schedule 1f1b --pp 8 --microbatches 32
      parasim schedule --schedule zb-h1 --pp 4 --microbatches 8 --forward 1 --backward 1 --weight 1 --plot g.png
    """
    from ..report.bubble import replay_rank_share

    stage_times_s(forward=forward, backward=backward, weight=weight, p2p=p2p)
    _check_files(plot, trace, pp)
    sch, tl = replay_rank_share(str(name).strip().lower(), pp=pp, microbatches=microbatches, vpp=vpp,
                                forward_s=forward, backward_s=backward, weight_s=weight, p2p_s=p2p)
    out = _summary(sch, tl, forward, backward, weight, p2p)
    click.echo(json.dumps(out, indent=2) if fmt == "json" else _table(sch, tl, out, pp, microbatches))
    if plot:
        from ..report.gantt import save_gantt

        save_gantt(tl, plot)
        click.echo(f"wrote {plot}", err=fmt == "json")
    if trace:
        from ..report.trace import write_trace

        write_trace(tl, trace)
        click.echo(f"wrote {trace}", err=fmt == "json")


COMMANDS = [schedule_cmd]
