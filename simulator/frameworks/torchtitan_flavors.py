"""torchtitan's model registry (`[model] name` + `flavor`) as parasim models, and its pipeline layer split.

Flavors: pytorch/torchtitan 238fa99 (2026-02, the last release with TOML job configs, before #2386 moved
configs to Python): torchtitan/models/llama3/__init__.py `llama3_args` (TransformerModelArgs: the FFN
is int(2·4·dim/3), times ffn_dim_multiplier, rounded up to multiple_of; vocabulary 128256, the
Llama 3 tokenizer's), torchtitan/models/qwen3/__init__.py `qwen3_args`, torchtitan/models/deepseek_v3/
__init__.py. A flavor maps to a parasim preset of the same shapes, or to inline Hugging Face keys; the
`_flex` / `_varlen` variants are the same model with another attention (FlexAttention, varlen).
"""
from __future__ import annotations

from ..errors import InputError


def _llama_ffn(dim: int, multiplier: float | None, multiple_of: int) -> int:
    """TransformerModelArgs' SwiGLU hidden size: 4·dim, 2/3 of it, times the multiplier, rounded up."""
    hidden = int(2 * (4 * dim) / 3)
    if multiplier is not None:
        hidden = int(multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def _qwen3(dim, layers, heads, kv, ffn, tied) -> dict:
    return {"model_type": "qwen3", "hidden_size": dim, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv, "head_dim": 128, "intermediate_size": ffn, "vocab_size": 151936,
            "tie_word_embeddings": tied}


# (name, flavor) -> a preset name (same shapes; checked in tests/test_config_io.py) or inline HF keys
FLAVORS: dict[tuple[str, str], str | dict] = {
    ("llama3", "debugmodel"): {"hidden_size": 256, "num_hidden_layers": 6, "num_attention_heads": 16,
                               "intermediate_size": _llama_ffn(256, None, 256), "vocab_size": 2048,
                               "tie_word_embeddings": False},
    ("llama3", "8B"): "llama3.1-8b",
    ("llama3", "70B"): "llama3.1-70b",
    ("llama3", "405B"): "llama3.1-405b",
    ("qwen3", "0.6B"): _qwen3(1024, 28, 16, 8, 3072, True),
    ("qwen3", "1.7B"): _qwen3(2048, 28, 16, 8, 6144, True),
    ("qwen3", "4B"): _qwen3(2560, 36, 32, 8, 9728, True),
    ("qwen3", "8B"): _qwen3(4096, 36, 32, 8, 12288, False),
    ("qwen3", "14B"): _qwen3(5120, 40, 40, 8, 17408, False),
    ("qwen3", "32B"): _qwen3(5120, 64, 64, 8, 25600, False),
    ("qwen3", "30B-A3B"): "qwen3-30b-a3b",
    ("qwen3", "235B-A22B"): {**_qwen3(4096, 94, 64, 4, 12288, False), "model_type": "qwen3_moe", "num_experts": 128,
                             "num_experts_per_tok": 8, "moe_intermediate_size": 1536, "decoder_sparse_step": 1},
    ("deepseek_v3", "671B"): "deepseek-v3",
}
SOURCE = "pytorch/torchtitan 238fa99 (2026-02) torchtitan/models/*/__init__.py"
ATTENTION_VARIANTS = {"_flex_attn": "triton", "_flex": "triton", "_varlen_attn": "flash2", "_varlen": "flash2"}


def flavor_model(name: str, flavor: str, where: str) -> tuple[dict, str | None]:
    """([model] table, attention kernel of a _flex / _varlen variant or None) of a torchtitan flavor;
    InputError naming the known flavors when parasim has none for it."""
    kernel = None
    base = flavor
    for suffix, k in ATTENTION_VARIANTS.items():
        if flavor.endswith(suffix):
            base, kernel = flavor[: -len(suffix)], k
            break
    entry = FLAVORS.get((name, base))
    if entry is None:
        known = ", ".join(f"{n}/{fl}" for n, fl in FLAVORS)
        raise InputError(f"{where}: [model] name = {name!r}, flavor = {flavor!r} has no parasim model; give --model "
                         f"PRESET|config.json (known: {known})")
    return ({"preset": entry} if isinstance(entry, str) else dict(entry)), kernel


def flavor_of(spec) -> tuple[str, str] | None:
    """The torchtitan (name, flavor) whose model has `spec`'s shapes (ModelSpec equality up to the name)."""
    from dataclasses import replace

    from ..spec.hf import model_from_hf
    from ..spec.load import load_model

    target = replace(spec, name="", source="", config_dropout=0.0)
    for key, entry in FLAVORS.items():
        m = load_model(entry) if isinstance(entry, str) else model_from_hf(entry, name="", strict=True)
        if replace(m, name="", source="", config_dropout=0.0) == target:
            return key
    return None


