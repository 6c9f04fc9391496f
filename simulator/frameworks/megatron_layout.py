"""Megatron-Core's `--pipeline-model-parallel-layout`: the layers of every virtual pipeline stage as text, read into
parasim's per-virtual-stage split and written from it.

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
