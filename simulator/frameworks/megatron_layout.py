"""Megatron-LM's pipeline flags as layout fields (`pipeline_fields`, for `parasim import megatron`), and Megatron-Core's
`--pipeline-model-parallel-layout`: the layers of every virtual pipeline stage as text, read into parasim's
per-virtual-stage split and written from it.

The grammar (megatron/core/transformer/pipeline_parallel_layer_layout.py `parse_str_to_list`, NVIDIA/Megatron-LM
d98e8a6): stages separated by `|`, in layer order (virtual stage v of rank r is entry v·pp + r); `E` the embedding,
`t` a decoder layer, `m` a multi-token-prediction layer, `L` the loss (final norm, output layer); `(...)*n` and
`x*n` repeat; commas are cosmetic. "Et*3|(tt|)*29,m|L" is DeepSeek-V3's 61 layers and one MTP layer over pp 16 x 2.
Megatron requires the embedding first and the loss last, once each, every decoder layer before the MTP layers, and
the stage count a multiple of pp (`validate_layer_layout`); parasim holds the embedding on the first virtual stage
and the loss and MTP layers on the last one (`LayoutPlacement.problem` says where a layout differs).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InputError
from .fields import Fields, Report

_KINDS = "EtmL"


@dataclass(frozen=True)
class LayoutPlacement:
    """A parsed layout: one string of `E`/`t`/`m`/`L` per virtual stage, in layer order."""

    stages: tuple[str, ...]

    @property
    def layers_per_stage(self) -> tuple[int, ...]:
        """Decoder layers of each virtual stage (Layout.layers_per_stage, one entry per virtual stage)."""
        return tuple(s.count("t") for s in self.stages)

    def problem(self) -> str:
        """Where the layout puts the embedding, the loss or the MTP layers somewhere parasim does not ('' if none)."""
        first, last = self.stages[0], self.stages[-1]
        if not first.startswith("E"):
            return "the embedding is not on the first virtual stage: parasim holds it there"
        mtp = [i for i, s in enumerate(self.stages) if "m" in s]
        if mtp and mtp != [len(self.stages) - 1]:
            return (f"the MTP layers are on virtual stage {mtp[0]}, not with the loss on the last one "
                    f"({len(self.stages) - 1}): parasim runs them on the last stage")
        return "" if last.endswith("L") else "the loss is not on the last virtual stage"


def parse_layout(text: str, *, pp: int, num_layers: int, mtp_layers: int = 0) -> LayoutPlacement:
    """A LayoutPlacement from Megatron's layout text; InputError naming the rule Megatron's own checks apply."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"must be a layout text such as \"Et*3|(tt|)*29,m|L\", got {text!r}")
    s = text.replace(",", "").replace(" ", "")
    if len(s) > 100_000:
        raise InputError(f"is {len(s)} characters long: not a pipeline layout")
    for pattern in (r"\(([^()]+)\)\*(\d{1,4})", r"(.)\*(\d{1,4})"):  # Megatron's two unrolling passes, in order
        s = re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), s)
        if len(s) > 1_000_000:
            raise InputError(f"unrolls to over a million characters: not a pipeline layout ({text!r})")
    bad = sorted(set(s) - set(_KINDS + "|"))
    if bad:
        raise InputError(f"holds {bad[0]!r}: the layer characters are E (embedding), t (decoder layer), m (MTP "
                         f"layer), L (loss), separated by | ({text!r})")
    stages = tuple(s.split("|"))
    flat = "".join(stages)
    if len(stages) % pp:
        raise InputError(f"has {len(stages)} stages, not a multiple of pp ({pp})")
    if not flat.startswith("E") or not flat.endswith("L") or flat.count("E") != 1 or flat.count("L") != 1:
        raise InputError(f"must begin with the embedding E and end with the loss L, once each ({text!r})")
    if flat.count("t") != num_layers:
        raise InputError(f"holds {flat.count('t')} decoder layers (t), the model {num_layers}")
    if flat.count("m") != mtp_layers:
        raise InputError(f"holds {flat.count('m')} MTP layers (m), the model {mtp_layers} (--mtp-num-layers)")
    if "m" in flat and "t" in flat[flat.index("m"):]:
        raise InputError("places a decoder layer after an MTP layer (Megatron: decoder layers come first)")
    return LayoutPlacement(stages)


def layout_text(layers_per_stage, *, mtp_layers: int = 0) -> str:
    """Megatron's layout text for a per-virtual-stage split: the embedding on the first stage, the MTP layers and
    the loss on the last, a run of n equal stages written `(...|)*n`."""
    stages = ["t" * int(n) for n in layers_per_stage]
    stages[0] = "E" + stages[0]
    stages[-1] = stages[-1] + "m" * mtp_layers + "L"
    parts, i = [], 0
    while i < len(stages):
        j = i
        while j + 1 < len(stages) and stages[j + 1] == stages[i]:
            j += 1
        n, last = j - i + 1, j == len(stages) - 1  # (the last stage holds the loss: never in a run)
        parts.append(f"({stages[i]}|)*{n}" if n > 1 else stages[i] + ("" if last else "|"))
        i = j + 1
    return "".join(parts)


# ---- the import: Megatron's pipeline flags as layout fields ---------------------------------------------
def pipeline_fields(f: Fields, layers: int, pp: int, rep: Report) -> dict:
    """The layout fields of Megatron's pipeline flags: schedule, vpp and the layer split (the layout string, the
    accounted split, the uneven first/last stages or the virtual stages)."""
    emb, loss = f.flag("account_for_embedding_in_pipeline_split"), f.flag("account_for_loss_in_pipeline_split")
    out = {k: True for k, on in (("account_for_embedding_in_pipeline_split", emb),
                                 ("account_for_loss_in_pipeline_split", loss)) if on}
    if f.has("pipeline_model_parallel_layout"):
        other = [k for k in ("num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank",
                             "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers") if f.has(k)]
        if other:  # (Megatron's arguments.py: no more than one of them)
            raise f.error("pipeline_model_parallel_layout", f"cannot be given with {f.name(other[0])}: the layout "
                                                            f"sets the split and the virtual stages")
        return _layout(f, layers, pp, rep, out)
    per_virtual = f.int("num_layers_per_virtual_pipeline_stage")
    vpp = f.int("num_virtual_stages_per_pipeline_rank") or f.int("virtual_pipeline_model_parallel_size") or 1
    if per_virtual:
        n = layers + emb + loss
        if n % pp or (n // pp) % per_virtual:
            raise f.error("num_layers_per_virtual_pipeline_stage",
                          f"{per_virtual} does not divide the {n} layers over pp {pp} evenly")
        vpp = n // pp // per_virtual
    if vpp > 1 and pp > 1:
        out.update(vpp=vpp, schedule="interleaved")
    else:
        if vpp > 1:
            rep.assume(f"{vpp} virtual stages with pp 1: no interleaving (Megatron needs pp > 1)")
        out["schedule"] = "1f1b"
    first = f.int("decoder_first_pipeline_num_layers", least=0)
    last = f.int("decoder_last_pipeline_num_layers", least=0)
    if (first is not None or last is not None) and pp > 1:
        if vpp > 1:
            rep.cannot("--decoder-first/last-pipeline-num-layers with virtual stages: parasim's split used")
        else:
            out["layers_per_stage"] = _first_last_split(f, layers, pp, first, last)
    return out


def _layout(f: Fields, layers: int, pp: int, rep: Report, out: dict) -> dict:
    """--pipeline-model-parallel-layout: the decoder layers of each virtual stage (megatron_layout.py); Megatron
    refuses it beside the other split flags (arguments.py), which are then not read."""
    try:
        placed = parse_layout(f.text("pipeline_model_parallel_layout"), pp=pp, num_layers=layers,
                              mtp_layers=f.int("mtp_num_layers", 0))
    except InputError as exc:
        raise f.error("pipeline_model_parallel_layout", str(exc)) from None
    if placed.problem():
        rep.cannot(f"{f.name('pipeline_model_parallel_layout')}: {placed.problem()}")
    if out:  # (--account-for-*-in-pipeline-split: the layout's E and L say where the embedding and loss are)
        rep.assume(f"{', '.join('--' + k.replace('_', '-') for k in out)}: the layout places the embedding and loss")
    vpp = len(placed.stages) // pp
    out = {"layers_per_stage": list(placed.layers_per_stage), "schedule": "1f1b"}
    if vpp > 1 and pp > 1:
        out.update(vpp=vpp, schedule="interleaved")
    return out


def _first_last_split(f: Fields, layers: int, pp: int, first, last) -> list[int]:
    """Megatron's uneven split: the first (last) stage holds the layers given, the others share the rest evenly."""
    middle = pp - (first is not None) - (last is not None)
    rest = layers - (first or 0) - (last or 0)
    if middle == 0 and rest == 0:
        return [first, last]
    if middle < 1 or rest < middle or rest % middle:
        key = "decoder_first_pipeline_num_layers" if first is not None else "decoder_last_pipeline_num_layers"
        raise f.error(key, f"leaves {rest} layers for {middle} stages (they must share them evenly)")
    split = [rest // middle] * pp
    if first is not None:
        split[0] = first
    if last is not None:
        split[-1] = last
    return split
