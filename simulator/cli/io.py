"""`parasim import` (a Megatron-LM / NeMo, torchtitan or DeepSpeed job as a scenario) and `parasim emit`
(a scenario's layout as the framework's flags, TOML or JSON); `emit_winner` serves `sweep --emit`.
The translations live in simulator/frameworks/ (docs/import-export.md)."""
from __future__ import annotations

import functools
from pathlib import Path

import click

from ..errors import InputError
from .common import scenario_from_options, scenario_options

FRAMEWORKS = ("megatron", "torchtitan", "deepspeed")
DEFAULT_HARDWARE = "dgx-h100"


def _import_options(fn):
    @click.option("--out", type=click.Path(dir_okay=False), default=None,
                  help="write the scenario to OUT.toml (default: stdout; the report then goes to stderr)")
    @click.option("--hardware", default=None, help=f"hardware preset or profile (default {DEFAULT_HARDWARE}: "
                                                   f"no framework config names it)")
    @click.option("--gpus", type=int, default=None, help="GPU count, where the config does not give it")
    @click.option("--model", default=None, help="a model preset or config.json instead of the config's model")
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


_BOUNDED = {"gpus": "num_gpus", "seq": "seq_length", "micro_batch": "micro_batch_size",
            "global_batch": "global_batch_size"}  # the flag's count in spec/rules.py BOUNDS


def _counts(**flags) -> None:
    """A count flag given as 0 or less is an error naming it (not taken as 'not given'), as is one past its bound."""
    from ..errors import check_positive
    from ..spec.rules import check_count

    for name, v in flags.items():
        flag = f"--{name.replace('_', '-')}"
        if v is not None and name in _BOUNDED:
            check_count(_BOUNDED[name], v, label=flag)
        elif v is not None:
            check_positive(flag, v, integer=True)


def _read(path: str) -> str:
    from ..spec.presets import read_text

    return read_text(path)


def _finish(doc: dict, rep, *, source: str, out: str | None, hardware_given: bool, command: str) -> None:
    """Check the scenario loads, write it (to `out` or stdout) with the report as comments, and print
    the report (stderr when the scenario goes to stdout)."""
    from ..frameworks.scenario_doc import check_scenario, toml_text, with_paths_from
    from . import check_output

    if out:
        check_output("--out", out, (".toml",))
    if not hardware_given:
        rep.assumptions.insert(0, f"hardware {DEFAULT_HARDWARE}: the config names none (give --hardware)")
    check_scenario(doc, source)
    header = [f"parasim {command} {source}"] + [f"  {line}" for line in rep.lines()]
    text = toml_text(with_paths_from(doc, out), header)
    report = "\n".join([f"{source}: {len(rep.not_understood)} not understood, {len(rep.not_modelled)} not "
                        f"expressible, {len(rep.assumptions)} assumptions, {len(rep.ignored)} ignored"] + rep.lines())
    if out:
        Path(out).write_text(text, encoding="utf-8")
        click.echo(report)
        click.echo(f"wrote {out}")
    else:
        click.echo(text, nl=False)
        click.echo(report, err=True)


@click.group("import")
def import_group():
    """Read a framework's job configuration as a parasim scenario (docs/import-export.md).

    Every field not understood, every one ignored and every assumption is printed; none is dropped silently.

    \b
    Examples:
      parasim import megatron train_llama3_70b.sh --out llama3-70b.toml
      parasim import megatron megatron_gpt_config.yaml
      parasim import torchtitan llama3_8b.toml --gpus 64
      parasim import deepspeed ds_config.json --hf-config config.json --gpus 16 --seq 4096
    """


@import_group.command("megatron")
@click.argument("args", nargs=-1, type=click.UNPROCESSED, required=True)
@_import_options
@click.option("--vocab-size", type=int, default=None,
              help="the tokenizer's vocabulary (before Megatron's padding), when the arguments do not give it")
def import_megatron(args, out, hardware, gpus, model, vocab_size):
    """A Megatron-LM command line (a launch script or a text file of arguments; or the arguments after --)
    or a NeMo YAML config (.yaml) as a scenario.

    \b
    Examples:
      parasim import megatron pretrain_llama3_70b.sh --out llama3-70b.toml
      parasim import megatron --gpus 64 -- --tensor-model-parallel-size 8 --num-layers 80 ...
    """
    from ..frameworks.megatron import megatron_import
    from ..frameworks.megatron_args import read_command_line, read_nemo_yaml, world_size

    _counts(gpus=gpus, vocab_size=vocab_size)
    if len(args) == 1 and not args[0].startswith("--"):
        source, text = args[0], _read(args[0])
    else:
        source, text = "the command line", " ".join(args)
    if source.lower().endswith((".yaml", ".yml")):
        f, launched, kind = read_nemo_yaml(text, source), None, "NeMo config"
    else:
        f, launcher = read_command_line(text, source)
        launched, kind = world_size(launcher, source), "Megatron-LM command line"
    if gpus is not None and launched is not None and gpus != launched:
        raise InputError(f"{source}: --gpus {gpus} but torchrun launches {launched}")
    doc, rep = megatron_import(f, gpus=gpus or launched, hardware=hardware or DEFAULT_HARDWARE, model=model,
                               vocab_size=vocab_size, source=source, kind=kind)
    if source == "the command line":
        doc["name"] = "megatron-job"
    _finish(doc, rep, source=source, out=out, hardware_given=hardware is not None, command="import megatron")


@import_group.command("torchtitan")
@click.argument("job_toml")
@_import_options
def import_torchtitan(job_toml, out, hardware, gpus, model):
    """A torchtitan job config (TOML: [model], [training], [parallelism], [activation_checkpoint], [compile])
    as a scenario.

    \b
    Example:
      parasim import torchtitan torchtitan/models/llama3/train_configs/llama3_8b.toml --gpus 64
    """
    from ..frameworks.torchtitan import toml_fields, torchtitan_import
    from ..spec.presets import read_toml

    f = toml_fields(read_toml(job_toml), job_toml)
    _counts(gpus=gpus)
    doc, rep = torchtitan_import(f, gpus=gpus, hardware=hardware or DEFAULT_HARDWARE, model=model, source=job_toml)
    _finish(doc, rep, source=job_toml, out=out, hardware_given=hardware is not None, command="import torchtitan")


@import_group.command("deepspeed")
@click.argument("ds_config")
@_import_options
@click.option("--hf-config", default=None, help="the model's Hugging Face config.json (or give --model)")
@click.option("--seq", type=int, default=None, help="sequence length (not in a DeepSpeed config; default 4096)")
@click.option("--micro-batch", type=int, default=None, help="micro-batch per GPU, where the config says 'auto'")
@click.option("--global-batch", type=int, default=None, help="global batch, where the config says 'auto'")
@click.option("--recompute", type=click.Choice(["none", "selective", "full"]), default=None,
              help="activation recomputation of the training script (default none)")
def import_deepspeed(ds_config, out, hardware, gpus, model, hf_config, seq, micro_batch, global_batch, recompute):
    """A DeepSpeed config (ds_config.json) and the model's config.json as a scenario.

    \b
    Example:
      parasim import deepspeed ds_config.json --hf-config config.json --gpus 16 --seq 4096
    """
    from ..frameworks.deepspeed import deepspeed_import, read_ds_config
    from ..spec.hf import load_hf_config
    from ..spec.load import load_model

    _counts(gpus=gpus, seq=seq, micro_batch=micro_batch, global_batch=global_batch)
    if (hf_config is None) == (model is None):
        raise InputError("give the model with --hf-config config.json or --model PRESET (one of them)")
    spec = load_hf_config(hf_config) if hf_config else load_model(model)
    if hf_config:
        p = Path(hf_config).resolve()
        table = {"hf_config": str(p), "name": p.parent.name if p.stem == "config" else p.stem}
    else:
        table = {"hf_config" if model.endswith(".json") else "preset": model}
    f = read_ds_config(_read(ds_config), ds_config)
    doc, rep = deepspeed_import(f, spec=spec, model_table=table, gpus=gpus, seq=seq, micro_batch=micro_batch,
                                global_batch=global_batch, recompute=recompute,
                                hardware=hardware or DEFAULT_HARDWARE, source=ds_config)
    _finish(doc, rep, source=ds_config, out=out, hardware_given=hardware is not None, command="import deepspeed")


def emit_text(framework: str, sc, layout, *, with_model: bool = False) -> tuple[str, list[str]]:
    """(the framework's configuration of `layout`, notes on what it cannot express)."""
    from ..frameworks.emit_deepspeed import emit_deepspeed
    from ..frameworks.emit_megatron import emit_megatron
    from ..frameworks.emit_torchtitan import emit_torchtitan

    fn = {"megatron": emit_megatron, "torchtitan": emit_torchtitan, "deepspeed": emit_deepspeed}[framework]
    return fn(sc, layout, with_model=with_model)


def _echo_notes(framework: str, notes: list[str], err: bool) -> None:
    for note in notes:
        click.echo(f"not expressible in {framework}: {note}", err=err)


@click.command("emit")
@click.argument("framework", type=click.Choice(FRAMEWORKS))
@scenario_options
@click.option("--with-model", is_flag=True, default=False, help="also write the model's arguments (Megatron flags, "
                                                                "torchtitan [model] flavor)")
def emit(framework, with_model, **kwargs):
    """Write a scenario's layout as FRAMEWORK's configuration: Megatron-LM flags, a torchtitan TOML fragment
    or a DeepSpeed JSON fragment; what the framework cannot express is named on stderr.

    \b
    Examples:
      parasim emit megatron scenarios/llama3-70b-64xh100.toml
      parasim emit torchtitan scenarios/llama3-8b-8xh100.toml --with-model
    """
    sc = scenario_from_options(kwargs)
    text, notes = emit_text(framework, sc, sc.layout, with_model=with_model)
    click.echo(text, nl=False)
    _echo_notes(framework, notes, err=True)


def layout_from_row(row, sc, space):
    """The Layout of one sweep result row (the sweep's layout columns; the split flags from the space)."""
    from ..spec.layout import Layout
    from ..sweep import LIST_FIELDS

    kw = {k: row[k] for k in LIST_FIELDS if k in row}
    kw = {k: (bool(v) if k == "sequence_parallel" else v if isinstance(v, str) else int(v)) for k, v in kw.items()}
    split = str(row.get("layers_per_stage", "") or "")
    accounted = {k: bool(getattr(space, k, False)) for k in ("account_for_embedding_in_pipeline_split",
                                                             "account_for_loss_in_pipeline_split")}
    blocks = int(getattr(space, "recompute_layers", None) or 0) if kw.get("recompute") == "full" else 0
    return Layout(num_gpus=sc.num_gpus, **kw, **accounted, recompute_layers=blocks,
                  layers_per_stage=tuple(int(x) for x in split.split(",")) if split else None)


def emit_winner(df, sc, space, framework: str, *, err: bool) -> None:
    """`sweep --emit`: the best feasible row's layout as `framework`'s configuration."""
    feas = df[df["feasible"].astype(bool)] if len(df) else df
    if not len(feas):
        click.echo(f"--emit {framework}: no layout fits, nothing to write", err=err)
        return
    row = feas.iloc[0]
    if str(row.get("recompute_modules", "") or ""):  # (the winner's set of a sweep over module sets)
        from dataclasses import replace

        stack = replace(sc.training.stack, recompute_modules=str(row["recompute_modules"]))
        sc = replace(sc, training=replace(sc.training, stack=stack))
    text, notes = emit_text(framework, sc, layout_from_row(row, sc, space))
    if sc.training.stack.name != framework:
        notes.insert(0, f"the sweep ran the {sc.training.stack.name} stack, not {framework}'s: --stack {framework} "
                        f"ranks the layouts {framework} runs, with its kernels and overlap")
    click.echo(f"\nthe winner, {row['label']}, as {framework} configuration:", err=err)
    click.echo(text, nl=False, err=err)
    _echo_notes(framework, notes, err=err)


COMMANDS = [import_group, emit]
