"""`parasim estimate --trace trace.json / --plot gantt.png`: the estimated step drawn as a timeline
(report/step_timeline.py). The paths are checked before any work; the writers run after the estimate."""
import click

from . import check_output

PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def check_step_outputs(trace, plot) -> None:
    """InputError (one line) unless the paths can be written (suffix, folder)."""
    if trace:
        check_output("--trace", trace, (".json",))
    if plot:
        check_output("--plot", plot, PLOT_SUFFIXES)


def check_traceable(scenario, pipeline: str, inference: bool = False) -> None:
    """InputError (one line) when the scenario's estimate is not a replayed training step to draw."""
    from ..errors import InputError
    from ..report.step_timeline import check_traceable as check

    if inference:
        raise InputError("--trace/--plot draw the training step; leave out --inference")
    if scenario.layout is not None:
        check(scenario.layout, pipeline)


def write_step_outputs(est, *, trace, plot, to_stderr: bool) -> None:
    """Write the trace and/or the Gantt chart of `est` (made with keep_stage_times=True); `wrote PATH`
    for each, on stderr when stdout carries JSON or CSV."""
    from ..report.step_timeline import step_timeline

    if not (trace or plot):
        return
    st = step_timeline(est)
    if trace:
        from ..report.step_trace import write_step_trace

        write_step_trace(st, trace)
        click.echo(f"wrote {trace}", err=to_stderr)
    if plot:
        from ..report.step_gantt import save_step_gantt

        save_step_gantt(st, plot)
        click.echo(f"wrote {plot}", err=to_stderr)
