"""`parasim sweep`: evaluate every valid layout of a scenario and rank them by throughput."""
from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import click

from ..errors import InputError
from ..spec.layout import recompute_label
from ..spec.rules import RECOMPUTE
from ..spec.scenario import STACK_FLAG_KEYS
from .common import GPU_SPEED_CV_HELP, STACK_SWITCHES, flags, pipeline_split_options, stack_switches, with_gpu_speed_cv
from .flagnames import flag_names, given_flags

_ON_OFF = tuple(dest for _, dest, _ in STACK_SWITCHES)  # the stack's --x/--no-x switches
# scenario flags passed through to load_scenario (not layout fields: those are lists here)
_SCENARIO_FLAGS = flags("model", "mtp_layers", "hardware", "stack", "num_gpus", "seq_length", "global_batch_size", "precision",
                        "optimizer", "grad_dtype", "cross_entropy", "moe_capacity_factor", "moe_imbalance",
                        *(k for k in STACK_FLAG_KEYS if k not in _ON_OFF))  # on/off below
# sweep axes: comma lists or "auto"
_LIST_FLAGS = [
    ("--tp", "tp", "tensor-parallel degrees, e.g. 1,2,4,8"),
    ("--pp", "pp", "pipeline-parallel degrees"),
    ("--dp", "dp", "data-parallel degrees (default: whatever is left)"),
    ("--cp", "cp", "context-parallel degrees"),
    ("--ep", "ep", "expert-parallel degrees (MoE)"),
    ("--etp", "etp", "expert tensor-parallel degrees (MoE; default: tp and, with ep > 1, 1)"),
    ("--vpp", "vpp", "virtual pipeline chunks (interleaved schedule)"),
    ("--micro-batch", "micro_batch_size", "micro-batch sizes"),
    ("--zero", "zero", "ZeRO stages 0-3 (3 = FSDP full shard)"),
    ("--recompute", "recompute", f"recompute modes: {','.join(RECOMPUTE)} (full: every layer, or the first N "
                                 f"per stage with --recompute-layers N)"),
    ("--schedule", "schedule", "pipeline schedules, e.g. 1f1b,interleaved,zb-h1"),
    ("--sequence-parallel", "sequence_parallel", "sequence parallelism: true,false"),
]
_INT_FLAGS = [
    ("--max-tp", "max_tp", "largest TP degree"),
    ("--max-pp", "max_pp", "largest PP degree"),
    ("--max-cp", "max_cp", "largest CP degree"),
    ("--max-ep", "max_ep", "largest EP degree"),
    ("--max-vpp", "max_vpp", "largest vpp"),
    ("--min-micro-batch", "min_micro_batch_size", "smallest micro-batch size (default 1)"),
    ("--max-micro-batch", "max_micro_batch_size", "largest micro-batch size (default 8)"),
    ("--recompute-layers", "recompute_layers", "with full recompute: only the first N layers of each stage "
                                               "(Megatron --recompute-method block); 0 = every layer"),
]
_MODULE_SETS_HELP = ("sets of selective-recompute modules to sweep, separated by ';', e.g. "
                     "'core_attn;mla_up_proj;mla_up_proj,mlp' (quote it): each set is swept with its own stack and the "
                     "rows ranked together, the column recompute_modules naming each row's (default: the stack's one "
                     "set, --recompute-modules)")


def _options(fn):
    for flag, dest, hlp in reversed(_INT_FLAGS):
        fn = click.option(flag, dest, type=int, default=None, help=hlp)(fn)
    for flag, dest, hlp in reversed(_LIST_FLAGS):
        fn = click.option(flag, dest, type=str, default=None, metavar="LIST|auto", help=hlp)(fn)
    fn = click.option("--flash-attention/--no-flash-attention", "flash_attention", default=None,
                      help="FlashAttention (no a·s² tensors stored)")(fn)
    fn = stack_switches(fn)
    fn = click.option("--recompute-module-sets", "recompute_module_sets", default=None, help=_MODULE_SETS_HELP)(fn)
    for flag, dest, typ, hlp in reversed(_SCENARIO_FLAGS):
        fn = click.option(flag, dest, type=typ, default=None, help=hlp)(fn)
    return click.argument("scenario", required=False)(fn)


def chart_paths(plot: str) -> dict[str, Path]:
    """`--plot FILE`: FILE gets the MFU heatmap; FILE's stem + -pareto / -memory the other charts. FILE is checked
    as every output path is (`check_output`: suffix, folder, writable) before the sweep runs."""
    from . import check_output

    check_output("--plot", plot, (".png", ".svg"))
    p = Path(plot)
    return {"mfu": p, "pareto": p.with_name(f"{p.stem}-pareto{p.suffix}"),
            "memory": p.with_name(f"{p.stem}-memory{p.suffix}")}


def layers_text(row, num_layers: int) -> str:
    """The layers each pipeline rank holds, as the row gives them: its `layers_per_stage` ("31,32,32,31",
    the sweep's `spec.placement.uneven_split`) where the split is uneven, a run of 3 or more equal counts
    written once with its length ("3,4x30,3" for 126 layers on pp 32), else the even count num_layers / pp
    (the sweep leaves `layers_per_stage` empty only where pp divides the layers)."""
    split = str(row.get("layers_per_stage", "") or "")
    if not split:
        return str(int(num_layers) // int(row["pp"]))
    runs: list[list] = []
    for x in split.split(","):
        if runs and runs[-1][0] == x:
            runs[-1][1] += 1
        else:
            runs.append([x, 1])
    return ",".join(f"{x}x{n}" if n >= 3 else ",".join([x] * n) for x, n in runs)


def _fmt_table(df, top: int, num_layers: int) -> str:
    from ..report.winner import short_variant

    # a frame in which no row was timed has no time columns: "-" cells (round 5 met one as a KeyError traceback)
    df = df.reindex(columns=list(df.columns) + [c for c in ("tokens_per_s", "mfu", "step_s", "bubble_s")
                                                  if c not in df.columns])

    d = df.head(top)
    layers = [layers_text(r, num_layers) for _, r in d.iterrows()]
    w = max([len("layers/stage"), *map(len, layers)])
    lw = max([24, *(len(x) for x in d["label"])])  # (an -EP and -ETP label is longer)
    choices = [short_variant(r) for _, r in d.iterrows()]
    cw = max([32, *map(len, choices)])  # (a row's recompute modules make it longer)
    head = (f"{'rank':>5} {'label':<{lw}} {'choices':<{cw}} {'layers/stage':<{w}} {'tokens/s':>12} {'MFU':>6} "
            f"{'step s':>9} {'bubble':>7} {'peak GiB':>9}  feasible")
    lines = [head]

    def num(x, spec, width):  # "-" where there is no value (a layout that does not fit is not timed)
        return f"{x:{spec}}" if x == x else f"{'-':>{width}}"

    for (_, r), lay, choice in zip(d.iterrows(), layers, choices):
        # the pipeline bubble as estimate prints it: the share of the step the busiest rank waits on other
        # stages (bubble_s / step_s); bubble_fraction, the idle share over all ranks, is in --format json/csv
        bub = r["bubble_s"] / r["step_s"] if r["step_s"] == r["step_s"] and r["step_s"] > 0 else float("nan")
        lines.append(f"{int(r['rank']):>5} {r['label']:<{lw}} {choice:<{cw}} {lay:<{w}} "
                     f"{num(r['tokens_per_s'], '>12,.0f', 12)} {num(r['mfu'], '>6.1%', 6)} "
                     f"{num(r['step_s'], '>9.3f', 9)} {num(bub, '>7.1%', 7)} {r['peak_bytes'] / 2**30:>9.1f}  "
                     f"{'yes' if r['feasible'] else 'no: ' + str(r['reason'])}")
    return "\n".join(lines)


def _winner_not_modelled(sc, w) -> str:
    """The caveat of an estimate (estimate.not_modelled) for the winner's layout, "" when none applies."""
    from types import SimpleNamespace

    from ..estimate import not_modelled

    lay = SimpleNamespace(tp=int(w["tp"]), cp=int(w["cp"]), ep=int(w["ep"]), etp=int(w["etp"]),
                          micro_batch_size=int(w["micro_batch_size"]), sequence_parallel=bool(w["sequence_parallel"]))
    return "\n".join(f"Not modelled: {c}" for c in not_modelled(sc.model, sc.training, lay))


def _echo_rows(df, fmt: str, top: int, sc, space, *, seconds: float, out, time_infeasible: bool,
               allow_unsupported: bool) -> None:
    """The top `top` rows of the (tidied) table as JSON, CSV, or the text table with a summary line, the
    layouts the stack's framework cannot run (on stderr with JSON and CSV) and the winner's explanation."""
    from ..report.tables import integer_bytes
    from ..report.winner import explain_winner
    from ..sweep.empty_reason import empty_space_reason
    from ..sweep.supported import left_out_text

    left = left_out_text(df.attrs.get("left_out", {}), sc.training.stack.name)
    if left and fmt != "table":
        click.echo(left, err=True)
    if fmt == "json":  # (integer_bytes: a byte column with an empty cell is float, its values whole)
        click.echo(json.dumps(integer_bytes(json.loads(df.head(top).to_json(orient="records"))), indent=2))
        return
    if fmt == "csv":
        click.echo(df.head(top).to_csv(index=False), nl=False)
        return
    nfeas = int(df["feasible"].sum()) if len(df) else 0
    untimed = "" if time_infeasible or nfeas == len(df) else " (only those timed; --time-infeasible times all)"
    blocks = (f"; full recompute: the first {space.recompute_layers} layers of each stage"
              if space.recompute_layers else "")
    selective = recompute_label("selective", 0, sc.training.stack.recompute_modules)
    sets = space.recompute_module_sets
    if sets:  # (sweep/module_sets.py: one sweep per set, the rows' recompute_modules column)
        blocks += f"; selective recompute of the module sets {' | '.join(sets)}"
    elif selective != "selective":
        blocks += f"; recompute {selective}"
    click.echo(f"{sc.name}: {len(df):,} layouts on {sc.num_gpus} GPUs, {nfeas:,} fit{untimed}{blocks}; "
               f"{seconds:.2f} s ({len(df) / seconds if seconds > 0 else 0:,.0f} layouts/s)")
    if left and len(df):  # (an empty table says it below, naming the rules)
        click.echo(left)
    if len(df) and top:
        click.echo(_fmt_table(df, top, sc.model.num_layers))
    empty = "" if len(df) else empty_space_reason(sc.model, sc.training, sc.num_gpus, space, hardware=sc.hardware,
                                                  stack=None if allow_unsupported else sc.training.stack)
    click.echo(explain_winner(df, empty_reason=empty))
    caveats = _winner_not_modelled(sc, df.iloc[0]) if len(df) and bool(df["feasible"].iloc[0]) else ""
    if caveats:
        click.echo(caveats)
    if out:
        click.echo(f"wrote {out}")


@click.command("sweep")
@_options
@pipeline_split_options
@click.option("--max-tp-within-node", is_flag=True, default=None, help="keep TP inside one node (tp <= gpus per node)")
@click.option("--uneven-layers/--no-uneven-layers", default=None,
              help="allow a pp that does not divide the layers when the first/last stage can hold one layer "
                   "fewer (default: allowed)")
@click.option("--top", "top", type=int, default=10, show_default=True, help="rows to print")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="write all rows to results.csv or .parquet")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="charts: FILE.png|svg gets the MFU heatmap, FILE-pareto and FILE-memory the others")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True,
              help="format of the top-K rows on stdout")
@click.option("--executor", type=click.Choice(["local", "dask"]), default="local", show_default=True)
@click.option("--workers", type=int, default=None,
              help="processes: 1 (default with --executor local) evaluates in this process; more starts a "
                   "local Dask cluster of that many (default with --executor dask: one per core)")
@click.option("--scheduler", default=None, help="Dask scheduler address (default: a local cluster)")
@click.option("--chunk-size", type=int, default=50_000, show_default=True,
              help="layouts per resumable chunk (and per Dask task)")
@click.option("--resume/--no-resume", default=True, show_default=True,
              help="reuse finished chunks in OUT.parts/ of an interrupted run")
@click.option("--progress/--no-progress", default=None, help="progress bar on stderr (default: when a terminal)")
@click.option("--emit", type=click.Choice(["megatron", "torchtitan", "deepspeed"]), default=None,
              help="also write the winner's layout as that framework's flags / TOML / JSON (docs/import-export.md; "
                   "on stderr with --format json or csv)")
@click.option("--time-infeasible", is_flag=True, default=False,
              help="also work out the step time of layouts that do not fit in memory (default: their time "
                   "columns are empty; memory is checked first)")
@click.option("--allow-unsupported", is_flag=True, default=False,
              help="also evaluate the layouts the stack's framework cannot run (default: they are left out and "
                   "counted per rule; the rules and their sources are each stack's [runs], docs/stacks.md)")
@click.option("--gpu-speed-cv", type=float, default=None, help=GPU_SPEED_CV_HELP)
def sweep(scenario, top, out, plot, fmt, executor, workers, scheduler, chunk_size, resume, progress, max_tp_within_node,
          uneven_layers, time_infeasible, allow_unsupported, gpu_speed_cv, **kwargs):
    """Evaluate every valid layout (tp·cp·pp·dp, ep, vpp, micro-batch, ZeRO, recompute, sequence
    parallelism, schedule) and rank them by tokens/s among those that fit.

    The space comes from the scenario's [sweep] table; flags override it (comma lists or 'auto').
    Only the layouts the stack's framework can run are evaluated (--stack, default megatron; the others
    are counted per rule: --allow-unsupported evaluates them too).
    An interrupted run (Ctrl-C) resumes from OUT.parts/ when run again with the same arguments.

    \b
    Examples:
      parasim sweep scenarios/llama3-70b-512xh100.toml --top 10 --out results.csv --plot mfu.png
      parasim sweep --model llama3-8b --hardware dgx-h100 --gpus 16 --seq 4096 --global-batch 64 \\
          --tp 1,2,4,8 --schedule 1f1b,interleaved,zb-h1 --out r.parquet
    """
    from ..spec.scenario import load_scenario
    from ..report.tables import tidy_frame
    from ..sweep import LIST_FIELDS, SweepSpace, run_sweep

    if top < 0:
        raise InputError(f"--top must be >= 0, got {top}")
    emit = kwargs.pop("emit")
    over = {dest: kwargs.pop(dest) for _, dest, _, _ in _SCENARIO_FLAGS}
    over["flash_attention"] = kwargs.pop("flash_attention")
    over.update({k: kwargs.pop(k) for k in _ON_OFF})
    with flag_names(given_flags(_SCENARIO_FLAGS, over)):  # an error about a flag's value names the flag
        sc = load_scenario(scenario, require_layout=False, **over)
    sc = replace(sc, hardware=with_gpu_speed_cv(sc.hardware, gpu_speed_cv))
    space = SweepSpace.from_table(sc.sweep, where=f"[sweep] of {scenario}" if scenario else "[sweep]")
    changes = {k: kwargs.pop(k) for k in list(kwargs)
               if k in LIST_FIELDS or k.startswith(("max_", "min_", "account_"))
               or k in ("recompute_layers", "recompute_module_sets")}
    changes["max_tp_within_node"] = max_tp_within_node
    changes["uneven_layers"] = uneven_layers
    with flag_names(given_flags(_LIST_FLAGS + _INT_FLAGS, changes),
                    relations={dest: flag for flag, dest, _ in _INT_FLAGS}):
        space = space.replace(**changes)
    if plot:
        chart_paths(plot)  # check the path before the work
    if out:
        from . import check_output

        check_output("--out", out, (".csv", ".parquet"))
    if progress is None:
        progress = sys.stderr.isatty()
    t0 = time.perf_counter()
    with flag_names({"chunk_size": "--chunk-size", "workers": "--workers"}):
        # tidy_frame, once: the --out file, the table, the JSON and the CSV below are the same rows
        df = run_sweep(sc, space, executor=executor, scheduler=scheduler, out=out, chunk_size=chunk_size,
                       resume=resume, progress=progress, workers=workers, time_infeasible=time_infeasible,
                       tidy=tidy_frame, allow_unsupported=allow_unsupported)
    _echo_rows(df, fmt, top, sc, space, seconds=time.perf_counter() - t0, out=out, time_infeasible=time_infeasible,
               allow_unsupported=allow_unsupported)
    nfeas = int(df["feasible"].sum()) if len(df) else 0
    if emit:
        from .io import emit_winner

        emit_winner(df, sc, space, emit, err=fmt != "table")
    if plot and len(df):
        from ..report.sweep_plots import memory_bars, mfu_heatmap, pareto_chart, save_figure

        paths = chart_paths(plot)
        save_figure(mfu_heatmap(df, title=f"{sc.name}: best MFU per TP × PP"), paths["mfu"])
        save_figure(pareto_chart(df, title=f"{sc.name}: throughput vs memory headroom"), paths["pareto"])
        save_figure(memory_bars(df[df["feasible"]].head(max(top, 1)) if nfeas else df, top=min(max(top, 1), 12),
                                hbm_bytes=sc.hardware.hbm_bytes), paths["memory"])
        if fmt == "table":
            click.echo("charts: " + ", ".join(str(p) for p in paths.values()))


COMMANDS = [sweep]
