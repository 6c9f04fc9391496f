"""The key names of a Hugging Face config: every spelling of one setting, the keys that change the
parameter count, the dropout keys, and the checks on them (used by spec/hf.py).

A config is read under one name per setting (the Llama-style name, e.g. `hidden_size`); `canonical_keys`
maps the other spellings onto it, raises InputError when two spellings disagree, and remembers how the
user wrote each key (messages name it so) and which keys the reader used (`check_unread`).
"""
from __future__ import annotations

import json
import warnings

from ..errors import InputError

# `attribute_map` of each supported config class, copied from transformers 5.24.0
# (transformers/models/<model_type>/configuration_<model_type>.py): {spelling: attribute}. A config read
# by transformers takes either spelling; transformers 5 writes the attribute (so a Qwen3-MoE config.json it
# saves says `num_local_experts`, not `num_experts`). The other SUPPORTED classes have none.
# tests/test_hf_keys.py checks this table against the installed transformers.
TRANSFORMERS_ATTRIBUTE_MAPS = {
    "mixtral": {"num_experts": "num_local_experts"},
    "qwen3_moe": {"num_experts": "num_local_experts"},
    "gpt_oss": {"num_experts": "num_local_experts"},
    "deepseek_v2": {"num_experts": "n_routed_experts"},
    "deepseek_v3": {"num_local_experts": "n_routed_experts", "num_mtp_layers": "num_nextn_predict_layers"},
    "gpt2": {"hidden_size": "n_embd", "max_position_embeddings": "n_positions", "num_attention_heads": "n_head",
             "num_hidden_layers": "n_layer"},
    "bloom": {"num_hidden_layers": "n_layer", "num_attention_heads": "n_head"},
}

# parasim's name of each setting: the other spellings it accepts for every model_type. The union of the
# table above and of the same settings' spellings in other transformers config classes' attribute_maps
# (d_model, n_layers, n_heads, num_experts_per_token, moe_topk, num_shared_experts, ... in transformers
# 5.24.0), less the spellings that mean something else in a supported architecture (hidden_dim, dim).
SPELLINGS = {
    "hidden_size": ("n_embd", "d_model", "n_embed"),  # n_embed: BloomConfig's keyword (its config.json)
    "num_hidden_layers": ("n_layer", "n_layers", "num_layers"),
    "num_attention_heads": ("n_head", "n_heads", "num_heads"),
    "intermediate_size": ("n_inner", "ffn_hidden_size"),
    "max_position_embeddings": ("n_positions",),
    "head_dim": ("attention_head_dim", "kv_channels"),
    "num_experts": ("num_local_experts", "n_routed_experts", "moe_num_experts"),
    "num_experts_per_tok": ("num_experts_per_token", "moe_topk", "moe_top_k", "moe_k"),
    "n_shared_experts": ("num_shared_experts",),
    "moe_intermediate_size": ("expert_ffn_hidden_size",),
    "num_nextn_predict_layers": ("num_mtp_layers",),
}
CANONICAL = {s: name for name, spellings in SPELLINGS.items() for s in spellings}
# How a message names a setting the config leaves out: the model_type's own spelling.
NATIVE = {
    "gpt2": {"hidden_size": "n_embd", "num_hidden_layers": "n_layer", "num_attention_heads": "n_head",
             "intermediate_size": "n_inner", "max_position_embeddings": "n_positions"},
    "bloom": {"hidden_size": "n_embed", "num_hidden_layers": "n_layer", "num_attention_heads": "n_head"},
    "mixtral": {"num_experts": "num_local_experts"},
    "gpt_oss": {"num_experts": "num_local_experts"},
    "deepseek_v2": {"num_experts": "n_routed_experts"},
    "deepseek_v3": {"num_experts": "n_routed_experts"},
}

# Keys that change the (total or active) parameter count in some supported architecture, with the
# ModelSpec field each one sets (None: no single field). One that the model_type's reader did not use
# must agree with the model built (or, without a field, be 0 / false / empty): else InputError.
ARCH_KEYS = {
    "num_key_value_heads": "num_kv_heads", "head_dim": "head_dim", "mlp": "mlp", "norm": "norm",
    "attention_bias": "out_bias", "mlp_bias": "mlp_bias", "qkv_bias": "qkv_bias", "bias": None,
    "num_experts": "num_experts", "num_experts_per_tok": "experts_per_token",
    "moe_intermediate_size": "moe_ffn_hidden_size", "shared_expert_intermediate_size": "shared_expert_ffn_hidden_size",
    "n_shared_experts": None, "first_k_dense_replace": "first_k_dense", "moe_layer_freq": "moe_layer_freq",
    "decoder_sparse_step": "moe_layer_freq", "mlp_only_layers": "dense_layers", "q_lora_rank": "q_lora_rank",
    "kv_lora_rank": "kv_lora_rank", "qk_nope_head_dim": "qk_nope_head_dim", "qk_rope_head_dim": "qk_rope_head_dim",
    "v_head_dim": "v_head_dim", "add_cross_attention": None,
}
# Keys parasim reads but does not count, with why: a warning when set (not 0 / false).
WARN_KEYS = {
    "num_nextn_predict_layers": "its multi-token-prediction layers are not counted (transformers' model "
                                "does not build them; DeepSeek-V3's 671B excludes them); to train with them give "
                                "mtp_layers in the scenario's [model]",
}
# Dropout probabilities of the supported configs (transformers 5.24.0 config classes) and of BERT-style
# and generic configs. The largest is ModelSpec.config_dropout.
DROPOUT_KEYS = ("attention_dropout", "hidden_dropout", "resid_pdrop", "attn_pdrop", "embd_pdrop",
                "hidden_dropout_prob", "attention_probs_dropout_prob", "dropout")


def show(value) -> str:
    """A config value as the user wrote it in JSON/TOML (true, [0, 1], 512); Python's repr otherwise."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


class Keys(dict):
    """A config's keys under parasim's names, with how each was written (`spelled`) and which ones the
    reader used (`read`: every key asked for with `get` or `[]`)."""

    def __init__(self, items: dict, spelled: dict, native: dict):
        super().__init__(items)
        self.spelled, self.native, self.read = spelled, native, set()

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def name(self, key: str) -> str:
        """The key as the user wrote it, or the model_type's own spelling when it is absent."""
        return self.spelled.get(key) or self.native.get(key, key)


def canonical_keys(cfg: dict, model_type: str, where: str) -> Keys:
    """`cfg` under parasim's names; InputError when two spellings of one setting hold different values
    (a null spelling gives way to the other)."""
    items, spelled = {}, {}
    for key, value in cfg.items():
        name = CANONICAL.get(key, key)
        old = items.get(name)
        if old is not None and value is not None and old != value:
            raise InputError(f"{spelled[name]} = {show(old)} and {key} = {show(value)} in {where} are two "
                             f"spellings of one setting with different values; keep one")
        if old is None:
            items[name], spelled[name] = value, key
    return Keys(items, spelled, NATIVE.get(model_type, {}))


def _agrees(key: str, value, model) -> bool:
    """Whether an unread architecture key says what the built model already is."""
    if value is None:
        return True
    field = ARCH_KEYS[key]
    if key == "bias":
        return value == model.qkv_bias == model.out_bias == model.mlp_bias
    if field is None:
        return value in (0, False, [])
    built = getattr(model, field)
    return tuple(value) == tuple(built) if isinstance(value, list) and isinstance(built, tuple) else value == built


def check_unread(keys: Keys, model_type: str | None, model, where: str) -> None:
    """InputError for an architecture key the reader did not use and that disagrees with `model` (it
    would change the parameter count); a warning for a WARN_KEYS key that is set."""
    for key, value in dict.items(keys):
        if key in ARCH_KEYS and key not in keys.read and not _agrees(key, value, model):
            what = f"model_type {model_type!r}" if model_type else "a [model] table without model_type"
            raise InputError(f"{keys.name(key)} = {show(value)} in {where} is not modelled for {what} (parasim "
                             f"counts the model without it); remove it or use a model_type that has it")
    for key, why in WARN_KEYS.items():  # after every error: a failing config prints one line
        if dict.get(keys, key) not in (None, 0, False):
            warnings.warn(f"{keys.name(key)} = {show(dict.get(keys, key))} in {where}: {why}", stacklevel=4)


def config_dropout(keys: Keys, where: str) -> float:
    """The largest dropout probability the config sets (0.0 without one); InputError for a value that is
    not a number in [0, 1]."""
    p = 0.0
    for key in DROPOUT_KEYS:
        v = dict.get(keys, key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:  # NaN too
            raise InputError(f"{keys.name(key)} in {where} must be a dropout probability from 0 to 1, got {show(v)}")
        p = max(p, float(v))
    return p
