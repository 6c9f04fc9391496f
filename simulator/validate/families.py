"""The rule type of a published source and the defaults every source shares: `SourceRules` (what the rows of
one source leave out, filled from its framework; the entries are in sources.py), the family architecture table
(`FAMILIES`), the family defaults for a source without an entry (`_generic_rules`), Megatron's vocabulary padding
(`pad_vocab`) and the gpu_type -> hardware preset table (`GPU_PRESETS`, `hardware_for_gpu`).

Family and hardware defaults (every source; a source's table entry overrides the family defaults):
- gpu_type -> hardware preset: A100 80GB -> dgx-a100-80g, A100 40GB -> dgx-a100-40g, H100 -> dgx-h100,
  H800 -> dgx-h800, H200 -> dgx-h200, B200 -> dgx-b200, GB200 -> gb200-nvl72, MI300X -> mi300x
  (`hardware=` overrides it for every row).
- model family from the name: Llama/Mistral/Qwen -> SwiGLU, RMSNorm, no biases, RoPE, untied; MPT,
  GPT, BLOOM -> GeLU, LayerNorm, biases, tied (GPT and MPT with learned positions).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InputError
from .cells import _text

GPU_PRESETS = (  # (regex on gpu_type, preset), first match wins
    (r"a100.*40", "dgx-a100-40g"),
    (r"a100", "dgx-a100-80g"),
    (r"h800", "dgx-h800"),
    (r"h200", "dgx-h200"),
    (r"h100", "dgx-h100"),
    (r"gb200", "gb200-nvl72"),
    (r"b200", "dgx-b200"),
    (r"mi300", "mi300x"),
)

_BIASED = dict(qkv_bias=True, out_bias=True, mlp_bias=True)
FAMILIES = {  # architecture kwargs of ModelSpec per family (positions and tying come from SourceRules)
    "gpt": dict(mlp="gelu", norm="layernorm", **_BIASED),
    "bloom": dict(mlp="gelu", norm="layernorm", embedding_norm=True, **_BIASED),
    "mpt": dict(mlp="gelu", norm="layernorm", **_BIASED),
    "llama": dict(mlp="swiglu", norm="rmsnorm"),
    "nemotron": dict(mlp="squared-relu", norm="layernorm"),  # Nemotron-4: relu(x)², LayerNorm, no biases
}


@dataclass(frozen=True, kw_only=True)
class SourceRules:
    """What the rows of one source leave out, filled from the source's framework (module docstring).

    `grad_dtype` is a tuple of (regex on the precision cell, gradient dtype), first match wins.
    `statements` are the assumption lines each row of the source records (with their sources).
    """

    source_id: str
    family: str
    tie_word_embeddings: bool
    learned_positions: bool  # a position table of seq_len rows
    vocab_base: int | None = None  # when the vocab cell is blank or gives no exact number
    vocab_pad_per_tp: int = 0  # pad the vocabulary to a multiple of vocab_pad_per_tp·tp (0: as given)
    flash_attention: bool = True
    dropout: bool = False
    grad_dtype: tuple[tuple[str, str], ...] = ((r".", "fp32"),)
    precision_unstated: str | None = None  # precision when the cell names none ('mixed (not stated)')
    stack: str = "megatron"  # the software stack preset (stacks/) the source ran
    stack_overrides: tuple[tuple[str, object], ...] = ()  # Stack fields the source's runs set otherwise
    training_overrides: tuple[tuple[str, object], ...] = ()  # Training fields the source's runs set (MoE routing)
    model_presets: tuple[tuple[str, str], ...] = ()  # (regex on the model cell, preset) for shapes no cell holds
    hardware: str | None = None  # the preset of the source's cluster, when its gpu_type's preset is not it
    # (regex on the row's notes, Stack field, value): every match applies, after stack_overrides (rows of one
    # source that ran different kernels, compiled or not, with TP overlap or not)
    stack_by_notes: tuple[tuple[str, str, object], ...] = ()
    # (regex on the row's notes, Training field, value): likewise, after training_overrides (token drop or not)
    training_by_notes: tuple[tuple[str, str, object], ...] = ()
    # HardwareProfile fields the source's GPUs had otherwise than the preset's (SI units), stated
    hardware_overrides: tuple[tuple[str, float], ...] = ()
    statements: tuple[str, ...] = ()

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise InputError(f"source rules {self.source_id}: unknown family {self.family!r}")


def hardware_for_gpu(gpu_type: str) -> str:
    """Hardware preset for a gpu_type cell (GPU_PRESETS); InputError when none matches."""
    g = _text(gpu_type).lower()
    for pat, preset in GPU_PRESETS:
        if re.search(pat, g):
            return preset
    raise InputError(f"no hardware preset for gpu_type {gpu_type!r}")


def pad_vocab(vocab: int, multiple: int) -> int:
    """Megatron's padded vocabulary: the smallest multiple of `multiple` >= vocab
    (`_vocab_size_with_padding`: make_vocab_size_divisible_by × tp)."""
    if multiple <= 0:
        raise InputError(f"vocab padding multiple must be > 0, got {multiple!r}")
    return -(-int(vocab) // multiple) * multiple


def _family(model: str) -> str:
    m = model.lower()
    if "llama" in m or "mistral" in m or "qwen" in m:
        return "llama"
    for fam in ("mpt", "bloom", "gpt"):
        if fam in m:
            return fam
    raise InputError(f"unknown model family {model!r} (expected Llama, MPT, GPT or BLOOM)")


def _generic_rules(family: str) -> SourceRules:
    """Family defaults for a source without an entry in SOURCE_RULES (generic rules, docstring)."""
    return SourceRules(source_id="generic", family=family, tie_word_embeddings=family != "llama",
                       learned_positions=family in ("gpt", "mpt"))
