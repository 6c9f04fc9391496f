"""`map_run`: one row of a runs CSV -> ModelSpec, Training, Layout and a hardware preset name.

This is the one mapping of `published_runs.csv` rows to parasim inputs (package docstring). The cells a
row gives are used as given; what it leaves out comes from its source's rules (sources.py), and each
choice is recorded in `MappedRun.assumptions`. A row that cannot be mapped comes back with
`skip_reason` instead of raising. Kept apart from the prediction (predict.py) so that the mapping can
be read, and tested, without an estimator.

Generic cell rules (every source; a source's table entry overrides the family defaults):
- vocab: the number, or the first integer of a text cell; blank -> 51200 [assumption].
- micro_batch blank -> 1 [assumption]; zero_fsdp: none -> 0, ZeRO-k -> k, FSDP SHARD_GRAD_OP -> 2,
  FSDP/FSDP2 full shard -> 3.
- recompute: none / 'none stated' -> none (the latter flagged); full* -> full; 'selective (per op)'
  -> op (torchtitan's op-level SAC); 'selective (per layer)' -> full recompute of every 2nd layer
  (recompute_layers ⌊L/2⌋ per stage; k = 2, torchtitan's default, stated); other selective -> selective
  (Megatron's attention core).
- precision: text containing bf16 / fp16 / fp8 / fp32 -> that; 'mixed (not stated)' -> bf16.
- pipeline_schedule: 1F1B variants -> 1f1b; 'interleaved 1F1B' -> interleaved (vpp column read as
  total chunks when > pp); ZB-V -> zb-v; Zero Bubble p*M_B -> zb-h1, 2p*M_B -> zb-h2; blank -> 1f1b.
- uneven pipelines: notes saying the first and last stages hold one layer fewer (or that the
  embedding has its own PP slot) -> (L+2)/pp − 1, (L+2)/pp, ..., (L+2)/pp − 1; other non-divisible
  splits without chunks -> balanced, the first L mod pp stages one layer more.
- sequence_parallel blank -> off.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from ..cost.recompute import every_kth_layer
from ..errors import InputError
from ..spec.placement import default_split
from .cells import _blank, _int, _text
from .families import FAMILIES, SourceRules, _family, _generic_rules, hardware_for_gpu, pad_vocab
from .sources import SOURCE_RULES

DEFAULT_VOCAB = 51200
DEFAULT_MICRO_BATCH = 1


@dataclass(frozen=True, kw_only=True)
class MappedRun:
    """One CSV row mapped to parasim inputs (or the reason it could not be)."""

    run_id: str
    model: object | None = None
    training: object | None = None
    layout: object | None = None
    hardware_name: str | None = None
    hardware_overrides: tuple[tuple[str, float], ...] = ()  # SourceRules.hardware_overrides
    assumptions: tuple[str, ...] = ()
    skip_reason: str = ""


def _vocab(v, rules: SourceRules | None, tp: int, notes: list[str]) -> int:
    """The vocabulary a row's model used: the cell's number, else the source's base; padded per source."""
    exact = None
    if not _blank(v):
        try:
            exact = _int(v, "vocab")
        except InputError:
            exact = None
    if exact is None:
        if rules is not None and rules.vocab_base:
            base = rules.vocab_base
            notes.append(f"vocab {_text(v) or 'not stated'!s}: {base} ({rules.source_id})")
        elif _blank(v):
            base = DEFAULT_VOCAB
            notes.append(f"vocab not stated: {DEFAULT_VOCAB}")
        else:
            ints = [int(x) for x in re.findall(r"\d{4,}", str(v))]
            ints += [int(x) * 1000 for x in re.findall(r"(\d+)k\b", str(v))]
            if not ints:
                raise InputError(f"vocab {v!r} has no number")
            base = ints[0]
            notes.append(f"vocab read as {base} from {v!r}")
    else:
        base = exact
    if rules is not None and rules.vocab_pad_per_tp:
        padded = pad_vocab(base, rules.vocab_pad_per_tp * tp)
        if padded != base:
            notes.append(f"vocab {base} padded to {padded} ({rules.vocab_pad_per_tp}·tp)")
        return padded
    return base


def _zero(v) -> int:
    t = _text(v).lower()
    if t in ("", "none") or t.startswith("none"):
        return 0
    if "shard_grad_op" in t:  # FSDP's ZeRO-2 (gradients and optimizer states sharded, parameters kept)
        return 2
    if "fsdp" in t or "full_shard" in t or "zero-3" in t:
        return 3
    m = re.search(r"zero-?(\d)", t)
    if m:
        return int(m.group(1))
    raise InputError(f"unknown zero_fsdp {v!r}")


LAYER_SAC_EVERY = 2  # torchtitan's selective_ac_option default ('2') when its layer-level AC names no k


def _recompute(v, notes) -> tuple[str, int]:
    """(recompute mode, k): k > 0 for layer-level selective AC that recomputes every k-th layer."""
    t = _text(v).lower()
    if t in ("", "none"):
        return "none", 0
    if t == "none stated":
        notes.append("recompute not stated: none")
        return "none", 0
    if t.startswith("full"):
        return "full", 0
    if "selective" in t and "per layer" in t:
        notes.append(f"layer-level selective recompute, every k-th layer (k not stated): k = {LAYER_SAC_EVERY}, "
                     f"torchtitan's default selective_ac_option")
        return "full", LAYER_SAC_EVERY
    if t.startswith("selective"):
        if "per op" in t:
            return "op", 0  # torchtitan's op-level selective AC
        return "selective", 0
    raise InputError(f"unknown recompute {v!r}")


def _precision(v, notes, unstated: str | None = None) -> str:
    t = _text(v).lower()
    for p in ("bf16", "fp16", "fp8", "fp32"):
        if p in t:
            return p
    if "mixed" in t and unstated:
        notes.append(f"precision {v!r}: {unstated} (source rule)")
        return unstated
    if "mixed" in t:
        notes.append(f"precision {v!r}: bf16")
        return "bf16"
    raise InputError(f"unknown precision {v!r}")


def _grad_dtype(rules: SourceRules, precision_cell, precision: str, notes) -> str:
    t = f"{_text(precision_cell)} {precision}".lower()
    for pat, dtype in rules.grad_dtype:
        if re.search(pat, t):
            if rules.source_id != "generic":
                notes.append(f"gradients {dtype}")
            return dtype
    return "fp32"


def _schedule(v, pp: int, vpp_cell, notes, num_layers: int) -> tuple[str, int]:
    t = _text(v).lower()
    if pp == 1:
        return "1f1b", 1
    if t in ("", "none"):
        notes.append("pipeline schedule not stated: 1f1b")
        return "1f1b", 1
    if "zb-v" in t:
        return "zb-v", 1
    if "zero bubble" in t:
        if "2p" in t:
            return "zb-h2", 1
        if "p*m" in t:
            return "zb-h1", 1
        raise InputError(f"unknown zero-bubble variant {v!r}")
    if "interleav" in t and "not stated" not in t:
        vpp = _int(vpp_cell, "vpp")
        if vpp > pp and num_layers % (pp * vpp):
            # Megatron's vpp counts chunks per rank; rows such as the Zero Bubble paper's "1 layer per
            # chunk" give the total number of chunks instead (vpp = layers > pp, which pp·vpp layers would
            # not fill evenly): ceil(total / pp) per rank
            per_rank = -(-vpp // pp)
            notes.append(f"vpp={vpp} read as total chunks: {per_rank} per rank")
            vpp = per_rank
        return "interleaved", vpp
    if "1f1b" in t:
        if "not stated" in t:
            notes.append("interleaving not stated: plain 1f1b")
        return "1f1b", 1
    raise InputError(f"unknown pipeline_schedule {v!r}")


def _sp(v) -> bool:
    t = _text(v).lower()
    if t in ("", "no", "false", "off"):
        return False
    if t in ("yes", "true", "on"):
        return True
    raise InputError(f"unknown sequence_parallel {v!r}")


_FIRST_LAST_FEWER = ("one fewer", "own pp slot")  # ZB24 notes; BLOOM 'embedding given its own PP slot'


def _layers_per_stage(L: int, pp: int, chunks: int, notes_cell: str, notes: list[str], rule: str = "first-last"):
    low = notes_cell.lower()
    listed = re.search(r"layers per (?:virtual )?stage ([\d,]+\d)", low)
    if listed:  # the recipe's own split, stage by stage (a Megatron layout or Megatron's accounted split)
        split = tuple(int(x) for x in listed.group(1).split(","))
        if sum(split) == L and len(split) in (pp, pp * chunks):
            notes.append(f"layers per stage {listed.group(1)} (row notes)")
            return split
        raise InputError(f"the notes' layers per stage {listed.group(1)} are not {L} layers over {pp} ranks x "
                         f"{chunks} chunks")
    given = re.search(r"first and last pipeline stages hold (\d+) and (\d+) layers", low)
    if given and pp > 2 and chunks == 1:  # the recipe's own first/last stage sizes, the rest even
        a, b = int(given.group(1)), int(given.group(2))
        per, rest = divmod(L - a - b, pp - 2)
        if not rest and per > 0:
            notes.append(f"first and last stages hold {a} and {b} layers, the others {per} (row notes)")
            return (a,) + (per,) * (pp - 2) + (b,)
    if pp > 1 and any(k in low for k in _FIRST_LAST_FEWER) and (L + 2) % pp == 0:
        per = (L + 2) // pp
        why = "embedding has its own PP slot" if "own pp slot" in low else "row notes"
        notes.append(f"first and last stages hold {per - 1} layer{'s' if per - 1 != 1 else ''} ({why})")
        return tuple([per - 1] + [per] * (pp - 2) + [per - 1])
    if L % (pp * chunks) == 0:
        return None
    if rule == "torchtitan":
        split = default_split(L, pp, chunks, rule)
        if split:
            notes.append(f"{L} layers over {pp * chunks} stages: torchtitan's default split "
                         f"({','.join(map(str, split))}; placement.default_split)")
            return split
    if chunks == 1 and L >= pp:
        base, extra = divmod(L, pp)
        notes.append(f"{L} layers over pp={pp}: balanced uneven split (first {extra} stages +1 layer)")
        return tuple(base + (1 if i < extra else 0) for i in range(pp))
    return None


def map_run(row: Mapping, *, hardware: str | None = None) -> MappedRun:
    """Map one CSV row (dict-like) to ModelSpec, Training, Layout and a hardware preset name.

    Per-source rules (SOURCE_RULES) fill what the row leaves out; every rule applied is recorded in
    `assumptions`. Unmappable rows come back with `skip_reason` (one line) instead of an exception.
    """
    from ..spec.validate import validate

    run_id = _text(row.get("run_id")) or "?"
    source_id = _text(row.get("source_id"))
    notes: list[str] = []
    try:
        seq = _int(row.get("seq_len"), "seq_len")
        name = _text(row.get("model"))
        rules = _row_rules(source_id, name, notes)
        tp = _int(row.get("tp"), "tp")
        if tp < 1:  # (before the vocabulary's padding to a multiple of 128·tp reads it)
            raise InputError(f"tp must be > 0, got {tp}")
        model = _row_model(row, name, seq, tp, rules, notes)
        training = _row_training(row, seq, rules, notes)
        layout = _row_layout(row, model.num_layers, tp, notes, training.stack.runs.pipeline_split)
        validate(model, training, layout)
        hw = hardware or rules.hardware or hardware_for_gpu(_text(row.get("gpu_type")))
    except InputError as exc:
        return MappedRun(run_id=run_id, assumptions=tuple(notes), skip_reason=str(exc).splitlines()[0])
    return MappedRun(run_id=run_id, model=model, training=training, layout=layout, hardware_name=hw,
                     hardware_overrides=() if hardware else rules.hardware_overrides, assumptions=tuple(notes))


def _row_rules(source_id: str, name: str, notes: list[str]) -> SourceRules:
    """The source's rules (their statements noted), or the generic rules of the model's family."""
    rules = SOURCE_RULES.get(source_id)
    if rules is None:
        rules = _generic_rules(_family(name))
        notes.append(f"source {source_id or '?'!s} has no rules: generic {rules.family} family defaults")
    else:
        notes.extend(f"{rules.source_id}: {s}" for s in rules.statements)
    notes.append(f"stack: {rules.stack} (stacks/{rules.stack}.toml)")
    return rules


def _row_model(row: Mapping, name: str, seq: int, tp: int, rules: SourceRules, notes: list[str]):
    """The row's ModelSpec: its shape cells, the vocabulary per `_vocab`, the family's architecture; or the preset
    the source's rules name for the model (`SourceRules.model_presets`), whose shape the cells must agree with;
    with the multi-token-prediction modules the row's notes give (`mtp_num_layers N`)."""
    model = _preset_model(row, name, rules, notes)
    mtp = re.search(r"mtp_num_layers (\d+)", _text(row.get("notes")))
    if model is None:
        model = _shape_model(row, name, seq, tp, rules, notes)
    if mtp and int(mtp.group(1)):
        notes.append(f"multi-token prediction: {mtp.group(1)} module(s) on the last stage (row notes)")
        model = model.with_(mtp_layers=int(mtp.group(1)))
    return model


def _preset_model(row: Mapping, name: str, rules: SourceRules, notes: list[str]):
    """The preset of `rules.model_presets` matching the model cell (None: none), checked against the row's
    layers, hidden and heads cells."""
    from ..spec.load import load_model

    for pattern, preset in rules.model_presets:
        if re.search(pattern, name):
            m = load_model(preset)
            cells = tuple(_int(row.get(k), k) for k in ("layers", "hidden", "heads"))
            if cells != (m.num_layers, m.hidden_size, m.num_heads):
                raise InputError(f"the row's layers, hidden, heads {cells} are not preset {preset}'s")
            notes.append(f"model: parasim's {preset} preset (its vocabulary {m.vocab_size}, as the recipe's tokenizer)")
            return m
    return None


def _shape_model(row: Mapping, name: str, seq: int, tp: int, rules: SourceRules, notes: list[str]):
    """The ModelSpec of the row's shape cells (`_row_model`)."""
    from ..spec.model import ModelSpec

    kv = None if _blank(row.get("kv_heads")) else _int(row.get("kv_heads"), "kv_heads")
    moe = {}
    if not _blank(row.get("moe_experts")):  # every layer routed (Mixtral's layout): ffn_hidden is one expert's
        moe = dict(num_experts=_int(row.get("moe_experts"), "moe_experts"),
                   experts_per_token=_int(row.get("moe_topk"), "moe_topk"),
                   moe_ffn_hidden_size=_int(row.get("ffn_hidden"), "ffn_hidden"))
        notes.append(f"MoE: {moe['num_experts']} experts, top-{moe['experts_per_token']}, every layer routed, "
                     f"ffn_hidden the expert's")
    return ModelSpec(name=name, hidden_size=_int(row.get("hidden"), "hidden"),
                     num_layers=_int(row.get("layers"), "layers"), num_heads=_int(row.get("heads"), "heads"),
                     num_kv_heads=kv, ffn_hidden_size=_int(row.get("ffn_hidden"), "ffn_hidden"),
                     vocab_size=_vocab(row.get("vocab"), rules if rules.source_id != "generic" else None, tp, notes),
                     tie_word_embeddings=rules.tie_word_embeddings,
                     learned_position_embeddings=seq if rules.learned_positions else 0,
                     **FAMILIES[rules.family], **moe)


def _row_training(row: Mapping, seq: int, rules: SourceRules, notes: list[str]):
    """The row's Training: sequence, batch, precision and gradient dtype, the source's attention and dropout."""
    from ..spec.training import Training

    prec = _precision(row.get("precision"), notes, rules.precision_unstated)
    from ..spec.stack import load_stack

    overrides = dict(rules.stack_overrides)
    for pattern, key, value in rules.stack_by_notes:
        if re.search(pattern, _text(row.get("notes"))):
            overrides[key] = value
            notes.append(f"stack {key} = {value} (row notes: {pattern})")
    train = dict(rules.training_overrides)
    for pattern, key, value in rules.training_by_notes:
        if re.search(pattern, _text(row.get("notes"))):
            train[key] = value
            notes.append(f"training {key} = {value} (row notes: {pattern})")
    return Training(seq_length=seq, global_batch_size=_int(row.get("global_batch_seqs"), "global_batch_seqs"),
                    precision=prec, grad_dtype=_grad_dtype(rules, row.get("precision"), prec, notes),
                    flash_attention=rules.flash_attention, dropout=rules.dropout,
                    stack=load_stack(rules.stack, **overrides), **train)


def _row_layout(row: Mapping, num_layers: int, tp: int, notes: list[str], rule: str = "first-last"):
    """The row's Layout: parallel degrees, schedule and vpp, micro-batch, layers per stage (the framework's own
    split where the stack's [runs] pipeline_split `rule` is torchtitan's), ZeRO, recompute and sequence
    parallelism (blank cells per the generic rules)."""
    from ..spec.layout import Layout

    pp = _int(row.get("pp"), "pp")
    sched, vpp = _schedule(row.get("pipeline_schedule"), pp, row.get("vpp"), notes, num_layers)
    if _blank(row.get("micro_batch")):
        notes.append(f"micro_batch not stated: {DEFAULT_MICRO_BATCH}")
        mbs = DEFAULT_MICRO_BATCH
    else:
        mbs = _int(row.get("micro_batch"), "micro_batch")
    chunks = 2 if sched in ("zb-v", "dualpipev") else vpp
    lps = _layers_per_stage(num_layers, pp, chunks, _text(row.get("notes")), notes, rule)
    recompute, every = _recompute(row.get("recompute"), notes)
    blocks = every_kth_layer(num_layers // (pp * chunks), every) if every else 0
    return Layout(num_gpus=_int(row.get("n_gpus"), "n_gpus"), tp=tp, pp=pp,
                  dp=_int(row.get("dp"), "dp"),
                  cp=1 if _blank(row.get("cp")) else _int(row.get("cp"), "cp"),
                  ep=1 if _blank(row.get("ep")) else _int(row.get("ep"), "ep"), vpp=vpp,
                  etp=None if _blank(row.get("etp")) else _int(row.get("etp"), "etp"),
                  micro_batch_size=mbs, zero=_zero(row.get("zero_fsdp")),
                  recompute=recompute, recompute_layers=blocks,
                  sequence_parallel=_sp(row.get("sequence_parallel")), schedule=sched,
                  layers_per_stage=lps)
