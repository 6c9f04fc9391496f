"""`parasim memory`: per-GPU memory breakdown per pipeline stage."""
import dataclasses
import json

import click

from ..spec.layout import recompute_label
from . import check_output
from .common import scenario_from_options, scenario_options, split_text

_COLS = (("params_bytes", "parameters"), ("grads_bytes", "grads"), ("optimizer_bytes", "optim"),
         ("activations_bytes", "activ"), ("kv_cache_bytes", "kv"), ("other_bytes", "other"),
         ("peak_bytes", "peak"), ("host_bytes", "host"))


def _width(label: str) -> int:
    return max(11, len(label) + 4)


def _table(result) -> str:
    from ..report.tables import nonnegative
    from ..units import GiB

    lay, modules = result.layout, result.training.stack.recompute_modules
    head = f"{'stage':>5} {'layers':>6} {'in-flight':>9} " + " ".join(f"{lbl + ' GiB':>{_width(lbl)}}" for _, lbl in _COLS)
    lines = [f"{result.model.name}: {lay.label}, zero={lay.zero}, "
             f"recompute={recompute_label(lay.recompute, lay.recompute_layers, modules, lay.recompute_group)}, "
             f"schedule={lay.schedule}, micro-batch={lay.micro_batch_size}, "
             f"seq={result.training.seq_length}{', inference' if result.inference else ''}"
             + split_text(dataclasses.asdict(lay)), head]
    for s in result.per_stage:
        lines.append(f"{s.stage:>5} {s.layers:>6} {s.inflight_microbatches:>9.2f} "
                     + " ".join(f"{nonnegative(getattr(s, k), s.peak_bytes) / GiB:>{_width(lbl)}.2f}"
                                for k, lbl in _COLS))
    hbm = result.hbm_bytes
    lines.append(f"HBM capacity: {hbm / GiB:.2f} GiB per GPU" if hbm else "HBM capacity: unknown")
    w = result.worst
    verdict = "fits" if result.feasible else "does NOT fit"
    lines.append(f"worst stage {w.stage}: peak {w.peak_bytes / GiB:.2f} GiB -> {verdict}"
                 + (f" ({result.reason})" if result.reason else ""))
    note = _phase_note(result, w)
    if note:
        lines.append(note)
    return "\n".join(lines)


def _phase_note(result, w) -> str:
    """Which moment of the step the worst stage's consumers are from, where it is not the activation peak with
    every state alive (memory/worst.py `peak_terms`); '' otherwise."""
    from ..units import GiB

    if result.inference:
        return ""
    if w.activations_bytes == 0.0 and w.optimizer_step_bytes > 0.0:
        return (f"peak at the optimizer step: activations freed, its own buffers "
                f"{w.optimizer_step_bytes / GiB:.2f} GiB in other (stack optimizer_impl "
                f"{result.training.stack.optimizer_impl!r})")
    if w.grads_bytes == 0.0 and result.training.stack.grad_buffer == "set-to-none":
        return ("peak before the step's first backward: gradients not yet allocated (stack grad_buffer "
                "'set-to-none': zero_grad frees them between steps)")
    return ""


@click.command("memory")
@scenario_options
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--inference", is_flag=True, default=False,
              help="inference memory: parameters + KV cache (batch global_batch/dp, context seq) + one layer")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="write stacked bars per stage with the HBM line (.png or .svg)")
def memory(fmt, inference, plot, **kwargs):
    """Per-GPU memory per pipeline stage: parameters, gradients, optimizer, activations, KV cache, other.
    Byte counts print as integers (GiB in the table).

    \b
    Examples:
      parasim memory scenarios/llama3-70b-64xh100.toml
      parasim memory --model llama3-70b --hardware dgx-h100 --gpus 64 --tp 8 --pp 2 --zero 1 \\
          --micro-batch 1 --seq 8192 --global-batch 64 --sequence-parallel --format json
      parasim memory --model llama3-8b --hardware dgx-h100 --gpus 8 --tp 8 --seq 8192 \\
          --global-batch 32 --inference --plot memory.png
    """
    from ..memory import memory_breakdown

    if plot:
        check_output("--plot", plot, (".png", ".svg", ".pdf"))
    sc = scenario_from_options(kwargs)
    inflight = None
    if not inference and sc.layout.pp > 1:  # in-flight microbatches from the replayed schedule order
        from ..kernel_pipeline import replayed_inflight_per_rank

        inflight = replayed_inflight_per_rank(sc.layout, sc.training.global_batch_size)
    result = memory_breakdown(sc.model, sc.training, sc.layout, sc.hardware, inference=inference,
                              inflight_per_stage=inflight)
    from ..report.tables import integer_bytes, integer_bytes_frame

    if fmt == "json":
        click.echo(json.dumps(integer_bytes(result.to_dict()), indent=2))
    elif fmt == "csv":
        click.echo(integer_bytes_frame(result.to_frame()).to_csv(index=False), nl=False)
    else:
        click.echo(_table(result))
    if plot:
        from ..report.memory_plot import save_memory_plot

        save_memory_plot(result, plot)
        click.echo(f"wrote {plot}", err=fmt != "table")


COMMANDS = [memory]
