"""ModelSpec from a Hugging Face `config.json` (or an inline [model] table using the same key names).

Supported `model_type`s: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, gemma, gemma2,
deepseek_v3 (and deepseek_v2), gpt2, gpt_neox. An inline table without `model_type` is read as a
Llama-style model whose FFN, norm and biases can be set with the parasim keys `mlp`, `norm`, `bias`.
Each architecture's fixed choices (biases, norms, tied embeddings) follow the HF modelling code.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import InputError
from .model import ModelSpec

# Keys parasim understands in an inline [model] table (HF names) or a config.json.
HF_KEYS = {
    "model_type", "architectures", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size", "tie_word_embeddings",
    "num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
    "shared_expert_intermediate_size", "n_shared_experts", "first_k_dense_replace", "moe_layer_freq",
    "decoder_sparse_step", "mlp_only_layers", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
    "qk_rope_head_dim", "v_head_dim", "attention_bias", "mlp_bias", "max_position_embeddings",
    # GPT-2 names
    "n_embd", "n_layer", "n_head", "n_inner", "n_positions",
}
PARASIM_KEYS = {"mlp", "norm", "bias", "name", "source", "qkv_bias", "qk_norm"}

SUPPORTED = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
             "deepseek_v2", "deepseek_v3", "gpt2", "gpt_neox")


def load_hf_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """Read a Hugging Face config.json file into a ModelSpec (malformed JSON: InputError with line)."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(f"file not found: {path}") from None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON in {path}: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(cfg, dict):
        raise InputError(f"{path}: a config.json must hold a JSON object")
    return model_from_hf(cfg, name=name or path.parent.name or path.stem, strict=False, where=str(path))


def _int(cfg: dict, key: str, where: str, default=None):
    v = cfg.get(key, default)
    if v is None:
        if default is None:
            raise InputError(f"missing key {key!r} in {where}")
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise InputError(f"{key} in {where} must be an integer, got {v!r}")
    return int(v)


def _bool(cfg: dict, key: str, where: str, default: bool) -> bool:
    v = cfg.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise InputError(f"{key} in {where} must be true or false, got {v!r}")
    return v


def model_from_hf(cfg: dict, *, name: str = "custom", strict: bool = True, where: str = "[model]") -> ModelSpec:
    """Build a ModelSpec from HF config keys.

    strict=True (inline scenario tables) rejects keys parasim does not know; a real config.json
    carries many irrelevant keys (rope_theta, eps, ...) and is read with strict=False.
    """
    if strict:
        _check_known_keys(cfg, where)
    mt = _model_type(cfg, where)
    if mt == "gpt2":
        return _gpt2_model(cfg, name, where)

    kw, attention_bias, mlp_bias, ffn = _common_kw(cfg, mt, where)
    _architecture_kw(cfg, mt, kw, attention_bias, mlp_bias, ffn, where)
    _hf_moe_kw(cfg, mt, kw, where)
    if mt == "llama" and "model_type" not in cfg:
        _inline_kw(cfg, kw, ffn, where)
    kw["ffn_hidden_size"] = _ffn_hidden_size(mt, kw, ffn, where)
    return ModelSpec(name=str(cfg.get("name", name)), source=str(cfg.get("source", "")), **kw)


def _check_known_keys(cfg: dict, where: str) -> None:
    """InputError naming the first key parasim does not know, with the closest known one."""
    unknown = sorted(set(cfg) - HF_KEYS - PARASIM_KEYS)
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], sorted(HF_KEYS | PARASIM_KEYS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InputError(f"unknown key {unknown[0]!r} in {where}{hint}")


def _model_type(cfg: dict, where: str) -> str:
    """The config's model_type (llama when absent); InputError if it is not SUPPORTED."""
    mt = cfg.get("model_type")
    if mt is not None and mt not in SUPPORTED:
        raise InputError(f"unsupported model_type {mt!r} in {where}; supported: {', '.join(SUPPORTED)}")
    return mt or "llama"


def _gpt2_model(cfg: dict, name: str, where: str) -> ModelSpec:
    """GPT-2: its own key names (n_embd, n_layer, ...), GELU MLP, LayerNorm, biases everywhere,
    learned position embeddings, tied embeddings by default."""
    h = _int(cfg, "n_embd", where, cfg.get("hidden_size"))
    kw = dict(hidden_size=h, num_layers=_int(cfg, "n_layer", where, cfg.get("num_hidden_layers")),
              num_heads=_int(cfg, "n_head", where, cfg.get("num_attention_heads")),
              ffn_hidden_size=_int(cfg, "n_inner", where, 4 * h), vocab_size=_int(cfg, "vocab_size", where),
              mlp="gelu", norm="layernorm", qkv_bias=True, out_bias=True, mlp_bias=True,
              tie_word_embeddings=_bool(cfg, "tie_word_embeddings", where, True),
              learned_position_embeddings=_int(cfg, "n_positions", where, 1024))
    return ModelSpec(name=cfg.get("name", name), source=cfg.get("source", ""), **kw)


def _common_kw(cfg: dict, mt: str, where: str) -> tuple[dict, bool, bool, int]:
    """(ModelSpec keywords every non-GPT-2 architecture shares, attention_bias, mlp_bias,
    intermediate_size or 0), the keys read in this order."""
    kw = dict(
        hidden_size=_int(cfg, "hidden_size", where),
        num_layers=_int(cfg, "num_hidden_layers", where),
        num_heads=_int(cfg, "num_attention_heads", where),
        num_kv_heads=_int(cfg, "num_key_value_heads", where, 0) or None,
        head_dim=_int(cfg, "head_dim", where, 0) or None,
        vocab_size=_int(cfg, "vocab_size", where),
    )
    attention_bias = _bool(cfg, "attention_bias", where, False)
    mlp_bias = _bool(cfg, "mlp_bias", where, False)
    defaults_tied = {"gemma": True, "gemma2": True}
    kw["tie_word_embeddings"] = _bool(cfg, "tie_word_embeddings", where, defaults_tied.get(mt, False))
    ffn = _int(cfg, "intermediate_size", where, 0)
    return kw, attention_bias, mlp_bias, ffn


def _architecture_kw(cfg: dict, mt: str, kw: dict, attention_bias: bool, mlp_bias: bool, ffn: int,
                     where: str) -> None:
    """Add to `kw` the model_type's fixed choices (biases, norms, MLP) and its own keys (Mixtral
    experts, DeepSeek MLA ranks and MoE layout), as the HF modelling code has them."""
    h = kw["hidden_size"]
    if mt in ("llama", "mistral"):
        kw.update(qkv_bias=attention_bias, out_bias=attention_bias, mlp_bias=mlp_bias)
    elif mt == "mixtral":
        kw.update(num_experts=_int(cfg, "num_local_experts", where), experts_per_token=_int(cfg, "num_experts_per_tok", where),
                  moe_ffn_hidden_size=ffn)
    elif mt in ("qwen2", "qwen2_moe"):
        kw.update(qkv_bias=_bool(cfg, "qkv_bias", where, True))
    elif mt in ("qwen3", "qwen3_moe"):
        kw.update(qkv_bias=attention_bias, out_bias=attention_bias, qk_norm=True)
    elif mt in ("gemma", "gemma2"):
        kw.update(mlp="geglu", qkv_bias=attention_bias, out_bias=attention_bias, norms_per_layer=4 if mt == "gemma2" else 2)
    elif mt == "gpt_neox":
        kw.update(mlp="gelu", norm="layernorm", qkv_bias=_bool(cfg, "attention_bias", where, True),
                  out_bias=_bool(cfg, "attention_bias", where, True), mlp_bias=True)
    elif mt in ("deepseek_v2", "deepseek_v3"):
        kw.update(qkv_bias=attention_bias, out_bias=attention_bias,
                  q_lora_rank=_int(cfg, "q_lora_rank", where, 0), kv_lora_rank=_int(cfg, "kv_lora_rank", where),
                  qk_nope_head_dim=_int(cfg, "qk_nope_head_dim", where), qk_rope_head_dim=_int(cfg, "qk_rope_head_dim", where),
                  v_head_dim=_int(cfg, "v_head_dim", where))
        kw["head_dim"] = None if kw["num_heads"] and h % kw["num_heads"] == 0 else kw["qk_nope_head_dim"] + kw["qk_rope_head_dim"]
        if "n_routed_experts" in cfg and cfg["n_routed_experts"]:
            fe = _int(cfg, "moe_intermediate_size", where)
            kw.update(num_experts=_int(cfg, "n_routed_experts", where), experts_per_token=_int(cfg, "num_experts_per_tok", where),
                      moe_ffn_hidden_size=fe, shared_expert_ffn_hidden_size=_int(cfg, "n_shared_experts", where, 0) * fe,
                      first_k_dense=_int(cfg, "first_k_dense_replace", where, 0), moe_layer_freq=_int(cfg, "moe_layer_freq", where, 1))


def _hf_moe_kw(cfg: dict, mt: str, kw: dict, where: str) -> None:
    """Add to `kw` the experts of a Qwen MoE (or a llama config with num_experts): num_experts,
    decoder_sparse_step, mlp_only_layers, and Qwen2-MoE's gated shared expert."""
    if mt in ("qwen2_moe", "qwen3_moe") or (mt == "llama" and cfg.get("num_experts")):
        n_exp = _int(cfg, "num_experts", where, 0)
        if n_exp:
            kw.update(num_experts=n_exp, experts_per_token=_int(cfg, "num_experts_per_tok", where),
                      moe_ffn_hidden_size=_int(cfg, "moe_intermediate_size", where),
                      moe_layer_freq=_int(cfg, "decoder_sparse_step", where, 1),
                      dense_layers=tuple(int(i) for i in (cfg.get("mlp_only_layers") or ())))
            if mt == "qwen2_moe":
                kw.update(shared_expert_ffn_hidden_size=_int(cfg, "shared_expert_intermediate_size", where, 0),
                          shared_expert_gate=bool(cfg.get("shared_expert_intermediate_size")))


def _inline_kw(cfg: dict, kw: dict, ffn: int, where: str) -> None:
    """Add to `kw` the parasim keys of an inline table without model_type (bias, qkv_bias, qk_norm,
    mlp, norm) and the generic MoE keys (Mixtral or DeepSeek names) when no expert count is set yet."""
    bias = cfg.get("bias")
    if bias is not None:
        if not isinstance(bias, bool):
            raise InputError(f"bias in {where} must be true or false, got {bias!r}")
        kw.update(qkv_bias=bias, out_bias=bias, mlp_bias=bias)
    if "qkv_bias" in cfg:
        kw["qkv_bias"] = _bool(cfg, "qkv_bias", where, False)
    if "qk_norm" in cfg:
        kw["qk_norm"] = _bool(cfg, "qk_norm", where, False)
    for key in ("mlp", "norm"):
        if key in cfg:
            kw[key] = cfg[key]
    n_exp = _int(cfg, "num_local_experts", where, 0) or _int(cfg, "n_routed_experts", where, 0)
    if n_exp and not kw.get("num_experts"):
        fe = _int(cfg, "moe_intermediate_size", where, ffn)
        kw.update(num_experts=n_exp, experts_per_token=_int(cfg, "num_experts_per_tok", where), moe_ffn_hidden_size=fe,
                  shared_expert_ffn_hidden_size=_int(cfg, "shared_expert_intermediate_size", where,
                                                     _int(cfg, "n_shared_experts", where, 0) * fe),
                  first_k_dense=_int(cfg, "first_k_dense_replace", where, 0),
                  moe_layer_freq=_int(cfg, "moe_layer_freq", where, _int(cfg, "decoder_sparse_step", where, 1)))


def _ffn_hidden_size(mt: str, kw: dict, ffn: int, where: str) -> int:
    """intermediate_size, or when it is absent on an all-MoE model (Mixtral, or experts on every layer)
    the expert FFN size (4·h without one); InputError when a dense layer needs it."""
    if ffn == 0:
        if mt == "mixtral" or (kw.get("num_experts") and not kw.get("first_k_dense") and kw.get("moe_layer_freq", 1) == 1
                               and not kw.get("dense_layers")):
            ffn = kw.get("moe_ffn_hidden_size") or 4 * kw["hidden_size"]
        else:
            raise InputError(f"missing key 'intermediate_size' in {where}")
    return ffn
