"""Scenario = ModelSpec + HardwareProfile + Training + Layout (+ a sweep space), from TOML and/or flags.

File format (DESIGN.md): sections [model] (preset, hf_config, or inline Hugging Face keys), [hardware]
(preset or path, num_gpus), [training], [layout] (dp may be omitted), optional [sweep] and [stack]
(preset = "megatron" | "torchtitan" | ..., plus any Stack field to override: spec/stack.py; carried
by Training.stack) and [run] (the run plan's tokens and assumptions: spec/run.py, used by `estimate`).
Flags override the file (--stack, --compile). Unknown keys are rejected with the closest known name.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from pathlib import Path

from ..errors import InputError
from .hf import load_hf_config, model_from_hf
from .layout import Layout
from .load import load_model
from .model import ModelSpec
from .presets import check_keys, read_toml, resolve, resolve_named
from .rules import check_count, check_text, check_written_integer
from .run import run_table
from .stack import US_KEYS, Stack, load_stack, seconds_from_us
from .training import Training
from .validate import precision_problem, training_problem, validate

SECTIONS = ("model", "hardware", "training", "layout", "sweep", "stack", "run", "name", "description")
TRAINING_KEYS = tuple(f.name for f in fields(Training) if f.name != "stack")  # the stack: [stack] / --stack
STACK_FIELDS = tuple(f.name for f in fields(Stack) if f.name not in ("name", "source"))
# the Stack fields a command-line flag may set (cli/common.py STACK_FLAGS)
STACK_FLAG_KEYS = ("compiled", "tp_comm_overlap", "moe_shared_expert_overlap", "moe_a2a_overlap", "moe_delay_wgrad",
                   "fsdp_unit_layers", "fsdp_prefetch", "fsdp_reshard_after_forward", "fsdp_reduce",
                   "fsdp_reduce_dtype", "dp_bucket_mb", "grad_buffer", "grad_accumulation", "recompute_modules",
                   "moe_dispatcher", "cuda_graphs")
LAYOUT_KEYS = tuple(f.name for f in fields(Layout) if f.name != "num_gpus")
# the keys whose values are integers (a Layout or Training field typed int; layers_per_stage a list of them): a file
# writes them as integers, 8 and not 8.0 (`rules.check_written_integer`), as a hardware profile writes its counts
INTEGER_KEYS = tuple(f.name for f in fields(Layout) + fields(Training) if f.type.startswith(("int", "tuple[int")))


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """Everything one estimate needs. `layout` is None for a scenario that only defines a sweep space."""

    name: str
    model: ModelSpec
    hardware: object  # HardwareProfile (spec/hardware.py)
    training: Training
    layout: Layout | None
    num_gpus: int
    micro_batch_size: int = 1
    sweep: dict = field(default_factory=dict)
    run: dict = field(default_factory=dict)  # the checked [run] table (spec/run.py), {} without one

    @property
    def num_microbatches(self) -> int:
        return self.layout.num_microbatches(self.training.global_batch_size)


def _load_model_table(table: dict, base: Path | None, where: str) -> ModelSpec:
    """The [model] table's ModelSpec; `mtp_layers` (with a preset, a config.json or inline keys) trains that many
    multi-token-prediction modules (ModelSpec.mtp_layers: Megatron-Core --mtp-num-layers), which a released
    config does not build."""
    table = dict(table)
    mtp = table.pop("mtp_layers", None)
    return _with_mtp(_model_of_table(table, base, where), mtp, f"mtp_layers in {where}")


def _with_mtp(model: ModelSpec, mtp, what: str) -> ModelSpec:
    """`model` training `mtp` multi-token-prediction modules (None: as it is); `what` names the key or flag."""
    if mtp is None:
        return model
    if isinstance(mtp, bool) or not isinstance(mtp, int) or not 0 <= mtp <= 16:
        raise InputError(f"{what} must be an integer from 0 to 16, got {mtp!r}")
    return model.with_(mtp_layers=mtp)


def _model_of_table(table: dict, base: Path | None, where: str) -> ModelSpec:
    if "preset" in table or "hf_config" in table:
        check_keys(table, where=where, optional=("preset", "hf_config", "name"))
        if "preset" in table and "hf_config" in table:
            raise InputError(f"give either preset or hf_config in {where}, not both")
        if "preset" in table:
            return load_model(str(table["preset"]))
        if not isinstance(table["hf_config"], str) or not table["hf_config"].strip():
            raise InputError(f"hf_config in {where} must be a path to a config.json, got {table['hf_config']!r}")
        p = Path(table["hf_config"])
        if base is not None and not p.is_absolute():
            p = base / p
        return load_hf_config(p, name=table.get("name"))
    if "name" in table:
        check_text(table["name"], f"name in {where}")
    return model_from_hf(table, name=str(table.get("name", "inline")), strict=True, where=where)


def _load_hardware(table: dict, base: Path | None, where: str):
    from .hardware import hardware_from_dict, load_hardware

    table = {k: v for k, v in table.items() if k != "num_gpus"}
    if "preset" in table or "path" in table:
        check_keys(table, where=where, optional=("preset", "path"))
        if "preset" in table and "path" in table:
            raise InputError(f"{where}: give preset or path, not both (preset = {table['preset']!r}, "
                             f"path = {table['path']!r})")
        ref = table["preset"] if "preset" in table else table["path"]
        if not isinstance(ref, str) or not ref.strip():
            raise InputError(f"{where}: the hardware preset or path must be a non-empty name, got {ref!r}")
        if "path" in table and base is not None and not Path(ref).is_absolute():
            ref = str(base / ref)
        key = "preset" if "preset" in table else "path"  # (an unknown preset names the flag or the file's key)
        resolve_named("hardware_profiles", ref, where if where.startswith("--") else f"{key} in {where}")
        return load_hardware(ref)
    if not table:
        raise InputError(f"missing key 'preset' in {where}")
    return hardware_from_dict(table, where=where)


def load_scenario(path: str | None = None, **overrides) -> Scenario:
    """Build a Scenario from a TOML file (or scenario preset name) and/or flag overrides.

    Overrides use the flag names' long forms: model, hardware, num_gpus, seq_length, global_batch_size,
    micro_batch_size, any Training field, any Layout field. None values are ignored. A scenario with no
    layout fields at all and `require_layout=False` returns layout=None (sweep spaces). `batch_per_replica` (estimate
    --inference --batch B) gives global_batch_size B x dp when neither the file nor a flag gives one.
    """
    require_layout = overrides.pop("require_layout", True)
    per_replica = overrides.pop("batch_per_replica", None)
    overrides = {k: v for k, v in overrides.items() if v is not None}
    doc, base, where = _read_scenario_file(path)
    written = {sec: {k: v for k, v in doc.get(sec, {}).items() if k in INTEGER_KEYS and k not in overrides}
               for sec in ("hardware", "training", "layout")}  # the file's integer keys (a flag's value wins)
    for key in ("name", "description"):
        if key in doc:
            check_text(doc[key], f"{key} in {where}", empty=key == "description")
    model = _scenario_model(doc, base, where, overrides)
    hardware, num_gpus = _scenario_hardware(doc, base, where, overrides)
    stack_table = doc["stack"] if isinstance(doc.get("stack"), dict) else {}  # (_scenario_stack: else no table)
    stack_keys = tuple(k for k in stack_table if k not in overrides)  # (a flag's value wins)
    stack = _scenario_stack(doc, where, overrides)
    file_keys = tuple(k for k in doc.get("training", {}) if k not in overrides)
    tr, lay = _training_and_layout_tables(doc, where, overrides)
    if per_replica is not None and "global_batch_size" not in tr:
        tr["global_batch_size"] = per_replica * _replicas(num_gpus, lay)
    training = _scenario_training(tr, where, model, stack, file_keys=(file_keys, stack_keys))
    if problem := precision_problem(training, hardware):  # (the GPU's: a [training] or a [stack] value of the file)
        raise _naming_sections(InputError(problem), (file_keys, stack_keys), where)
    sweep = dict(doc.get("sweep", {}))
    run = run_table(doc["run"], where) if "run" in doc else {}
    layout = _scenario_layout(doc, lay, num_gpus, model, training, where, require_layout,
                              file_keys=(file_keys, stack_keys))
    for section, table in written.items():  # (after the checks of their values, which name their ranges)
        _integers_as_written(table, section, where)
    return Scenario(name=str(doc.get("name", Path(str(path)).stem if path else model.name)), model=model,
                    hardware=hardware, training=training, layout=layout, num_gpus=int(num_gpus),
                    micro_batch_size=int(lay.get("micro_batch_size", 1)), sweep=sweep, run=run)


def _read_scenario_file(path: str | None) -> tuple[dict, Path | None, str]:
    """(document, folder relative paths are read from, name used in messages) of the scenario file,
    with its sections checked; ({}, None, "flags") without one."""
    if path is None:
        return {}, None, "flags"
    p = resolve("scenarios", str(path))
    doc = read_toml(p)
    where = str(p)
    unknown = [k for k in doc if k not in SECTIONS]
    if unknown:
        raise InputError(f"unknown section [{unknown[0]}] in {where}; expected {', '.join(SECTIONS[:7])} "
                         f"(and the keys {', '.join(SECTIONS[7:])})")
    for sec in ("model", "hardware", "training", "layout", "sweep"):
        if sec in doc and not isinstance(doc[sec], dict):
            raise InputError(f"{sec} in {where} must be a table [{sec}]")
    return doc, p.parent, where


def _scenario_model(doc: dict, base: Path | None, where: str, overrides: dict) -> ModelSpec:
    """The model of --model (taken out of `overrides`), else of the [model] section; --mtp-layers over either."""
    mtp = overrides.pop("mtp_layers", None)
    if "model" in overrides:
        model = load_model(str(overrides.pop("model")))
    elif "model" in doc:
        model = _load_model_table(doc["model"], base, f"[model] of {where}")
    else:
        raise InputError(f"no model: give --model or a [model] section in {where}")
    return _with_mtp(model, mtp, "--mtp-layers")


def _scenario_hardware(doc: dict, base: Path | None, where: str, overrides: dict):
    """(hardware profile, num_gpus): --hardware and --gpus (taken out of `overrides`) over the
    [hardware] section."""
    hw_table = dict(doc.get("hardware", {}))
    if "hardware" in overrides:
        hardware = _load_hardware({"preset": overrides.pop("hardware")}, None, "--hardware")
    elif hw_table:
        hardware = _load_hardware(hw_table, base, f"[hardware] of {where}")
    else:
        raise InputError(f"no hardware: give --hardware or a [hardware] section in {where}")
    num_gpus = overrides.pop("num_gpus", hw_table.get("num_gpus"))
    if num_gpus is None:
        raise InputError(f"missing num_gpus: give --gpus or num_gpus in [hardware] of {where}")
    return hardware, check_count("num_gpus", num_gpus)  # (a swept layout never reaches Layout's check)


def _training_and_layout_tables(doc: dict, where: str, overrides: dict) -> tuple[dict, dict]:
    """The [training] and [layout] keyword tables with the remaining flag overrides merged in
    (micro_batch_size from [training] moves to the layout); InputError for a flag that is neither."""
    tr = dict(doc.get("training", {}))
    check_keys(tr, where=f"[training] of {where}", optional=TRAINING_KEYS + ("micro_batch_size",))
    lay = dict(doc.get("layout", {}))
    check_keys(lay, where=f"[layout] of {where}", optional=LAYOUT_KEYS)
    if "micro_batch_size" in tr:
        mbs = tr.pop("micro_batch_size")
        if "micro_batch_size" in lay and lay["micro_batch_size"] != mbs:
            raise InputError(f"micro_batch_size in {where} is {mbs!r} in [training] and {lay['micro_batch_size']!r} "
                             f"in [layout]: give it once")
        lay.setdefault("micro_batch_size", mbs)
    for k in list(overrides):
        if k in TRAINING_KEYS:
            tr[k] = overrides.pop(k)
        elif k in LAYOUT_KEYS:
            lay[k] = overrides.pop(k)
    if overrides:
        raise InputError(f"unknown setting {sorted(overrides)[0]!r}")
    return tr, lay


def _integers_as_written(table: dict, section: str, where: str) -> None:
    """InputError naming the key, its value and the file for a key of `table` (the file's [section]) whose value is
    not written as an integer (`rules.check_written_integer`)."""
    for key, value in table.items():
        try:
            check_written_integer(value, key)
        except InputError as exc:
            raise _naming_file(exc, [key], section, where) from None


def _scenario_stack(doc: dict, where: str, overrides: dict) -> Stack:
    """The software stack: `--stack NAME` (taken out of `overrides`), else [stack] preset = "NAME" (default
    DEFAULT_STACK), with the [stack] table's other keys and `--compile` (overrides' `compiled`) on top."""
    if "stack" in doc and not isinstance(doc["stack"], dict):
        raise InputError(f"stack in {where} must be a table [stack] (preset = \"megatron\", ...), got {doc['stack']!r}")
    table = dict(doc.get("stack", {}))
    flag, preset = overrides.pop("stack", None), table.pop("preset", None)
    for key, v in (("stack", flag), (f"preset in [stack] of {where}", preset)):
        if v is not None and (not isinstance(v, str) or not v.strip()):  # not the default stack in silence
            raise InputError(f"{key} must be a stack preset name or a stack TOML path, got {v!r}")
    name = preset if flag is None else flag
    seconds = seconds_from_us(table, where=f"[stack] of {where}")
    table = {k: v for k, v in table.items() if k not in US_KEYS} | seconds
    flags = {key: overrides.pop(key) for key in STACK_FLAG_KEYS if overrides.get(key) is not None}
    bad = sorted(set(table) - set(STACK_FIELDS))
    if bad:
        raise InputError(f"unknown key {bad[0]!r} in [stack] of {where}")
    if name is not None:  # an unknown preset or a missing file names the flag or the file's key
        resolve_named("stacks", name, "--stack" if flag is not None else f"preset in [stack] of {where}")
    try:  # --compile, --fsdp-prefetch, ...: the flags win over the [stack] table
        return load_stack(name, **(table | flags))
    except InputError as exc:  # a [stack] value the stack's checks refused: name the file it came from (a flag's
        # value is named by its flag)
        raise _naming_file(exc, [k for k in table if k not in flags], "stack", where, anywhere=True) from None


def _naming_file(exc: InputError, keys, section: str, where: str, *, anywhere: bool = False) -> InputError:
    """`exc` with "(in [section] of FILE)" added when its message names one of `keys`, the values that came from
    the file's [section] table (at its start, or `anywhere` in it), and not the file already: a value the checks
    refused is named by where the user wrote it."""
    msg = str(exc)
    named = any((k in msg) if anywhere else re.match(rf"{re.escape(k)}\b", msg) for k in keys)
    return InputError(f"{msg} (in [{section}] of {where})") if named and where not in msg else exc


def _naming_sections(exc: InputError, file_keys, where: str) -> InputError:
    """`_naming_file` for a rule between the model, the training, the hardware and the layout: `file_keys` = (the
    keys of the file's [training], those of its [stack]); the section whose key the message begins with is named."""
    training_keys, stack_keys = file_keys
    named = _naming_file(exc, training_keys, "training", where)
    return named if named is not exc else _naming_file(exc, stack_keys, "stack", where)


GIVEN_BY = {"seq_length": "--seq", "global_batch_size": "--global-batch"}


def _scenario_training(tr: dict, where: str, model: ModelSpec, stack: Stack, file_keys=((), ())) -> Training:
    """Training from its table; seq_length and global_batch_size are required. `dropout` left out
    follows the model's config: on when its config.json sets a dropout probability > 0. A value the checks
    refuse that came from the file's [training] or [stack] table (`file_keys`: `_naming_sections`) names the file,
    as a [stack] value the stack's own checks refuse does."""
    for key in ("seq_length", "global_batch_size"):
        if key not in tr:
            raise InputError(f"missing {GIVEN_BY[key]} (or {key} in a scenario file's [training])" if where == "flags"
                             else f"missing key {key!r} in [training] of {where} (or give {GIVEN_BY[key]})")
    if "dropout" not in tr and model.config_dropout > 0:
        tr = {**tr, "dropout": True}
    try:
        training = Training(**tr, stack=stack)
        problem = training_problem(model, training)
        if problem:
            raise InputError(problem)
        return training
    except TypeError as exc:
        raise InputError(f"[training] of {where}: {exc}") from None
    except InputError as exc:
        raise _naming_sections(exc, file_keys, where) from None


def _scenario_layout(doc: dict, lay: dict, num_gpus, model: ModelSpec, training: Training, where: str,
                     require_layout: bool, file_keys=((), ())) -> Layout | None:
    """The validated Layout, or None when the scenario gives no layout fields and none is required. A rule broken by a
    value of the file's [training] or [stack] table (`file_keys`: offload_optimizer with zero 0) names the file. A
    recompute_layers given is a count of layers, > 0 (its default 0, every layer, is not written)."""
    has_layout = bool(doc.get("layout")) or any(k in lay for k in ("tp", "pp", "dp", "cp", "ep"))
    if not (has_layout or require_layout):
        return None
    lay = _default_layer_split(model, lay, training.stack.runs.pipeline_split)
    if lay.get("etp") is not None and not model.is_moe:  # (even equal to tp: the user set it for nothing)
        problem = f"etp({lay['etp']}) applies to routed experts; {model.name or 'this model'} is dense (no experts)"
        raise _naming_file(InputError(problem), doc.get("layout") or {}, "layout", where)
    if "etp" not in lay and model.is_moe and training.stack.whole_experts_with_ep and lay.get("ep", 1) > 1:
        lay = {**lay, "etp": 1}  # the stack keeps experts whole under expert parallelism (torchtitan)
    try:
        if "recompute_layers" in lay:
            check_count("recompute_layers", lay["recompute_layers"])
        layout = Layout(num_gpus=num_gpus, **lay)
    except TypeError as exc:
        raise InputError(f"[layout] of {where}: {exc}") from None
    except InputError as exc:  # a value the checks refused that came from the file's [layout]: name the file
        raise _naming_file(exc, doc.get("layout") or {}, "layout", where) from None
    layout = _accounted_split(model, layout)
    try:
        validate(model, training, layout)
    except InputError as exc:
        raise _naming_sections(exc, file_keys, where) from None
    return layout


def _replicas(num_gpus, lay: dict) -> int:
    """The data-parallel replicas of the layout table `lay` (1 when it is no layout: its checks say why later)."""
    try:
        return Layout(num_gpus=num_gpus, **lay).dp
    except (InputError, TypeError):
        return 1


def _accounted_split(model: ModelSpec, layout: Layout) -> Layout:
    """`layout` with Megatron's split (spec.placement.megatron_split) as layers_per_stage when it counts
    the embedding or the loss as a layer; InputError when a split is given too (Megatron-Core refuses
    both: transformer_config.py) or when Megatron's divisibility check fails."""
    from dataclasses import replace

    from ..schedules import family
    from .placement import ACCOUNT_FLAGS, megatron_split

    on = [k for k in ACCOUNT_FLAGS if getattr(layout, k)]
    if not on:
        return layout
    if layout.layers_per_stage is not None:
        raise InputError(f"--layers-per-stage ({','.join(map(str, layout.layers_per_stage))}) cannot be given "
                         f"with --{on[0].replace('_', '-')}: that flag sets the split")
    chunks = family(layout.schedule).num_stages(layout.pp, layout.vpp) // layout.pp
    split = megatron_split(model.num_layers, layout.pp, chunks,
                           embedding=layout.account_for_embedding_in_pipeline_split,
                           loss=layout.account_for_loss_in_pipeline_split)
    return replace(layout, layers_per_stage=split)


def _default_layer_split(model: ModelSpec, lay: dict, rule: str = "first-last") -> dict:
    """`lay` with the framework's uneven split (spec.placement.default_split under the stack's [runs]
    pipeline_split `rule`: the first and last stage one layer fewer with one stage per rank, or torchtitan's
    split over any schedule's stages) when the stages do not divide the layers, no split was given and no
    part is counted as a layer (Megatron's split: `_accounted_split`): the layout the sweep ranks is the one
    estimate and memory then evaluate (the split used is part of their output)."""
    from ..schedules import family
    from .placement import ACCOUNT_FLAGS, default_split

    pp, sched, vpp = lay.get("pp", 1), lay.get("schedule", "1f1b"), lay.get("vpp", 1)
    if lay.get("layers_per_stage") is not None or not isinstance(pp, int) or isinstance(pp, bool) or pp < 2 \
            or not isinstance(vpp, int) or isinstance(vpp, bool) or vpp < 1 \
            or any(lay.get(k) is True for k in ACCOUNT_FLAGS):
        return lay
    try:
        fam = family(sched)
        chunks = fam.num_stages(pp, vpp) // pp  # (DualPipe's mirrored copies: one stage per rank)
    except (InputError, ZeroDivisionError):
        return lay  # (Layout names the bad schedule or vpp)
    split = default_split(model.num_layers, pp, chunks, rule)
    return {**lay, "layers_per_stage": split} if split else lay