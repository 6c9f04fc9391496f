"""ModelSpec from a Hugging Face `config.json` (or an inline [model] table using the same key names).

Supported `model_type`s: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, gemma, gemma2,
deepseek_v3 (and deepseek_v2), gpt2, gpt_neox, bloom, nemotron, gpt_oss (their sliding windows: WINDOW_RULES).
An inline table without `model_type` is read as a Llama-style model whose FFN, norm and biases can be set with the
parasim keys `mlp`, `norm`, `bias`.
Each architecture's fixed choices (biases, norms, tied embeddings) follow the HF modelling code.
Key spellings, the keys that change the parameter count, and the dropout keys: spec/hf_keys.py (every
spelling transformers reads is one setting; a count-changing key the model_type does not use is an
InputError; the largest dropout probability becomes ModelSpec.config_dropout).
"""
from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from .hf_keys import CANONICAL, DROPOUT_KEYS, Keys, canonical_keys, check_unread, config_dropout, show
from .hf_values import check_hf_values
from .model import MAX_FIELD, ModelSpec
from .presets import parse_json, read_text

# Keys parasim understands in an inline [model] table (HF names) or a config.json.
HF_KEYS = {
    "model_type", "architectures", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size", "tie_word_embeddings",
    "num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
    "shared_expert_intermediate_size", "n_shared_experts", "first_k_dense_replace", "moe_layer_freq",
    "decoder_sparse_step", "mlp_only_layers", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
    "qk_rope_head_dim", "v_head_dim", "attention_bias", "mlp_bias", "max_position_embeddings", "n_group", "topk_group",
    "sliding_window", "layer_types", "use_sliding_window", "max_window_layers",
    # GPT-2 names
    "n_embd", "n_layer", "n_head", "n_inner", "n_positions",
}
PARASIM_KEYS = {"mlp", "norm", "bias", "name", "source", "qkv_bias", "qk_norm"}

SUPPORTED = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
             "deepseek_v2", "deepseek_v3", "gpt2", "gpt_neox", "bloom", "nemotron", "gpt_oss")


def _unique_keys(path: Path):
    """json's object_pairs_hook: a dict of the pairs, InputError naming the file and the key written twice (json keeps
    the last silently; TOML refuses duplicates, and so does this)."""
    def hook(pairs):
        seen = {}
        for k, v in pairs:
            if k in seen:
                raise InputError(f"{path}: key {k!r} is given twice ({seen[k]!r} and {v!r})")
            seen[k] = v
        return seen
    return hook


def load_hf_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """Read a Hugging Face config.json file into a ModelSpec (malformed JSON: InputError with line)."""
    path = Path(path)
    text = read_text(path)  # one wording of every file problem (spec/presets.py)
    cfg = parse_json(text, path, hook=_unique_keys(path))  # (a key given twice: _unique_keys)
    if not isinstance(cfg, dict):
        raise InputError(f"{path}: a config.json must hold a JSON object")
    return model_from_hf(cfg, name=name or path.parent.name or path.stem, strict=False, where=str(path))


def _int(cfg: Keys, key: str, where: str, default=None, *, positive: bool = False):
    """The integer at `key` (`default` when absent or null; InputError naming the key as written when
    it is missing without a default, not an integer (8.0 is none: transformers 5's config classes refuse a float for
    an integer field), negative (or 0 when `positive`), or above ModelSpec's MAX_FIELD)."""
    v = cfg.get(key)
    name = cfg.name(key)
    if v is None:
        if default is None:
            raise InputError(f"missing key {name!r} in {where}")
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise InputError(f"{name} in {where} must be an integer, got {v!r}")
    if v < 0 or (positive and v == 0):
        raise InputError(f"{name} in {where} must be {'> 0' if positive else '>= 0'}, got {v!r}")
    if v > MAX_FIELD:
        raise InputError(f"{name} in {where} must be <= {MAX_FIELD} (2**24), got {v!r}")
    if isinstance(v, float):
        raise InputError(f"{name} in {where} must be an integer, written without a decimal point, got {v!r}")
    return int(v)


def _bool(cfg: Keys, key: str, where: str, default: bool) -> bool:
    v = cfg.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise InputError(f"{cfg.name(key)} in {where} must be true or false, got {v!r}")
    return v


def _layer_list(cfg: Keys, key: str, where: str, num_layers: int) -> tuple[int, ...]:
    """A list of layer indices (Qwen mlp_only_layers): whole numbers from 0 to num_layers - 1."""
    v = cfg.get(key)
    if v is None:
        return ()
    if not isinstance(v, list):
        raise InputError(f"{cfg.name(key)} in {where} must be a list of layer indices, got {show(v)}")
    for i in v:
        if isinstance(i, bool) or not isinstance(i, (int, float)) or (isinstance(i, float) and not i.is_integer()) \
                or not 0 <= i < num_layers:
            raise InputError(f"{cfg.name(key)} in {where} must hold layer indices from 0 to {num_layers - 1}, "
                             f"got {show(i)} in {show(v)}")
    return tuple(sorted({int(i) for i in v}))


def model_from_hf(cfg: dict, *, name: str = "custom", strict: bool = True, where: str = "[model]") -> ModelSpec:
    """Build a ModelSpec from HF config keys.

    strict=True (inline scenario tables) rejects keys parasim does not know; a real config.json
    carries many irrelevant keys (rope_theta, eps, ...) and is read with strict=False. Either way a key
    that would change the parameter count and that the model_type does not use is an InputError
    (hf_keys.check_unread), and two spellings of one setting must agree (hf_keys.canonical_keys).
    """
    if strict:
        _check_known_keys(cfg, where)
    check_hf_values(cfg, where)
    mt = _model_type(cfg, where)
    keys = canonical_keys(cfg, mt, where)
    if mt == "gpt2":
        kw = _gpt2_kw(keys, where)
    elif mt == "bloom":
        kw = _bloom_kw(keys, where)
    else:
        kw, ffn = _common_kw(keys, mt, where)
        _architecture_kw(keys, mt, kw, where)
        _moe_kw(keys, mt, kw, ffn, where)
        if "model_type" not in cfg:
            _inline_kw(keys, kw, ffn, where)
        _window_kw(keys, mt if "model_type" in cfg else None, kw, where, strict)
        kw["ffn_hidden_size"] = _ffn_hidden_size(mt, kw, ffn, where, given=keys.get("intermediate_size") is not None)
    kw["config_dropout"] = config_dropout(keys, where)
    _int(keys, "max_position_embeddings", where, 1, positive=True)  # GPT-2 reads it; a count for every model
    try:
        spec = ModelSpec(name=str(cfg.get("name", name)), source=str(cfg.get("source", "")), **kw)
    except InputError as exc:  # (the model's own rules, e.g. heads and KV heads: named with the file or table)
        msg = str(exc)
        raise InputError(msg if str(where) in msg else f"{where}: {msg}") from None
    check_unread(keys, cfg.get("model_type"), spec, where)
    return spec


def _check_known_keys(cfg: dict, where: str) -> None:
    """InputError naming the first key parasim does not know, with the closest known one."""
    known = HF_KEYS | PARASIM_KEYS | set(CANONICAL) | set(DROPOUT_KEYS)
    unknown = sorted(set(cfg) - known)
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InputError(f"unknown key {unknown[0]!r} in {where}{hint}")


def _model_type(cfg: dict, where: str) -> str:
    """The config's model_type (llama when absent); InputError if it is not SUPPORTED."""
    mt = cfg.get("model_type")
    if mt is not None and mt not in SUPPORTED:
        raise InputError(f"unsupported model_type {mt!r} in {where}; supported: {', '.join(SUPPORTED)}")
    return mt or "llama"


def _gpt2_kw(cfg: Keys, where: str) -> dict:
    """GPT-2: its own key names (n_embd, n_layer, ...; either spelling), GELU MLP, LayerNorm, biases
    everywhere, learned position embeddings, tied embeddings by default."""
    h = _int(cfg, "hidden_size", where, positive=True)
    return dict(hidden_size=h, num_layers=_int(cfg, "num_hidden_layers", where, positive=True),
                num_heads=_int(cfg, "num_attention_heads", where, positive=True),
                ffn_hidden_size=_int(cfg, "intermediate_size", where, 4 * h),
                vocab_size=_int(cfg, "vocab_size", where, positive=True),
                mlp="gelu", norm="layernorm", qkv_bias=True, out_bias=True, mlp_bias=True,
                tie_word_embeddings=_bool(cfg, "tie_word_embeddings", where, True),
                learned_position_embeddings=_int(cfg, "max_position_embeddings", where, 1024, positive=True))


def _bloom_kw(cfg: Keys, where: str) -> dict:
    """BLOOM (transformers models/bloom/modeling_bloom.py): fused QKV with bias, GELU MLP of fixed width 4·h
    (BloomConfig has no FFN key), LayerNorm, biases everywhere, ALiBi (no position table), tied embeddings by
    default, and a LayerNorm on the word embeddings (`word_embeddings_layernorm`)."""
    h = _int(cfg, "hidden_size", where, positive=True)
    return dict(hidden_size=h, num_layers=_int(cfg, "num_hidden_layers", where, positive=True),
                num_heads=_int(cfg, "num_attention_heads", where, positive=True), ffn_hidden_size=4 * h,
                vocab_size=_int(cfg, "vocab_size", where, positive=True), mlp="gelu", norm="layernorm",
                qkv_bias=True, out_bias=True, mlp_bias=True, embedding_norm=True,
                tie_word_embeddings=_bool(cfg, "tie_word_embeddings", where, True))


def _common_kw(cfg: Keys, mt: str, where: str) -> tuple[dict, int]:
    """(ModelSpec keywords every non-GPT-2 architecture shares, intermediate_size or 0), the keys read
    in this order. GPT-NeoX has neither KV heads nor a head_dim key in transformers: not read."""
    kw = dict(
        hidden_size=_int(cfg, "hidden_size", where, positive=True),
        num_layers=_int(cfg, "num_hidden_layers", where, positive=True),
        num_heads=_int(cfg, "num_attention_heads", where, positive=True),
    )
    if mt != "gpt_neox":
        kw["num_kv_heads"] = _int(cfg, "num_key_value_heads", where, 0, positive=True) or None
        kw["head_dim"] = _int(cfg, "head_dim", where, 0, positive=True) or None
    kw["vocab_size"] = _int(cfg, "vocab_size", where, positive=True)
    defaults_tied = {"gemma": True, "gemma2": True}
    kw["tie_word_embeddings"] = _bool(cfg, "tie_word_embeddings", where, defaults_tied.get(mt, False))
    return kw, _int(cfg, "intermediate_size", where, 0)


def _architecture_kw(cfg: Keys, mt: str, kw: dict, where: str) -> None:
    """Add to `kw` the model_type's fixed choices (biases, norms, MLP) and DeepSeek's MLA ranks, as the
    HF modelling code has them (Mistral and Mixtral have no biases; Qwen2 its QKV bias)."""
    if mt == "llama":
        ab = _bool(cfg, "attention_bias", where, False)
        kw.update(qkv_bias=ab, out_bias=ab, mlp_bias=_bool(cfg, "mlp_bias", where, False))
    elif mt in ("qwen2", "qwen2_moe"):
        kw.update(qkv_bias=_bool(cfg, "qkv_bias", where, True))
    elif mt in ("qwen3", "qwen3_moe", "gemma", "gemma2", "deepseek_v2", "deepseek_v3"):
        ab = _bool(cfg, "attention_bias", where, False)
        kw.update(qkv_bias=ab, out_bias=ab)
    if mt in ("qwen3", "qwen3_moe"):
        kw.update(qk_norm=True)
    elif mt in ("gemma", "gemma2"):
        kw.update(mlp="geglu", norms_per_layer=4 if mt == "gemma2" else 2)
    elif mt == "gpt_neox":
        ab = _bool(cfg, "attention_bias", where, True)
        kw.update(mlp="gelu", norm="layernorm", qkv_bias=ab, out_bias=ab, mlp_bias=True)
    elif mt == "gpt_oss":  # transformers models/gpt_oss: biased q, k, v, o; a learned sink logit per head; the
        ab = _bool(cfg, "attention_bias", where, True)  # experts' clamped SwiGLU (GptOssExperts._apply_gate)
        kw.update(qkv_bias=ab, out_bias=ab, attention_sinks=True, mlp="clamped-swiglu")
    elif mt == "nemotron":  # transformers models/nemotron: LayerNorm1P (weight and bias), up/down MLP, relu(x)²
        ab = _bool(cfg, "attention_bias", where, False)
        kw.update(mlp="squared-relu", norm="layernorm", qkv_bias=ab, out_bias=ab,
                  mlp_bias=_bool(cfg, "mlp_bias", where, False))
    elif mt in ("deepseek_v2", "deepseek_v3"):
        kw.update(q_lora_rank=_int(cfg, "q_lora_rank", where, 0),  # (DeepSeek's MLA: a rank of 0 is no latent)
                  kv_lora_rank=_int(cfg, "kv_lora_rank", where, positive=True),
                  qk_nope_head_dim=_int(cfg, "qk_nope_head_dim", where),
                  qk_rope_head_dim=_int(cfg, "qk_rope_head_dim", where, positive=True),
                  v_head_dim=_int(cfg, "v_head_dim", where, positive=True))
        h, nh = kw["hidden_size"], kw["num_heads"]
        kw["head_dim"] = None if h % nh == 0 else kw["qk_nope_head_dim"] + kw["qk_rope_head_dim"]


def _moe_kw(cfg: Keys, mt: str, kw: dict, ffn: int, where: str) -> None:
    """Add to `kw` the routed experts of Mixtral (expert FFN = intermediate_size), of Qwen2/3-MoE
    (num_experts, decoder_sparse_step, mlp_only_layers, and Qwen2-MoE's gated shared expert) and of
    DeepSeek (n_routed_experts, n_shared_experts, first_k_dense_replace)."""
    if mt in ("mixtral", "gpt_oss"):  # GPT-OSS's experts and router carry biases (GptOssExperts, GptOssTopKRouter)
        kw.update(num_experts=_int(cfg, "num_experts", where, positive=True),
                  experts_per_token=_int(cfg, "num_experts_per_tok", where), moe_ffn_hidden_size=ffn,
                  expert_bias=mt == "gpt_oss")
    elif mt in ("qwen2_moe", "qwen3_moe"):  # (transformers' sparse block needs a routed expert: 0 is no model)
        kw.update(num_experts=_int(cfg, "num_experts", where, positive=True),
                  experts_per_token=_int(cfg, "num_experts_per_tok", where),
                  moe_ffn_hidden_size=_int(cfg, "moe_intermediate_size", where),
                  moe_layer_freq=_int(cfg, "decoder_sparse_step", where, 1, positive=True),
                  dense_layers=_layer_list(cfg, "mlp_only_layers", where, kw["num_layers"]))
        if mt == "qwen2_moe":
            kw.update(shared_expert_ffn_hidden_size=_int(cfg, "shared_expert_intermediate_size", where, 0),
                      shared_expert_gate=bool(cfg.get("shared_expert_intermediate_size")))
    elif mt in ("deepseek_v2", "deepseek_v3") and cfg.get("num_experts"):
        fe = _int(cfg, "moe_intermediate_size", where)
        kw.update(num_experts=_int(cfg, "num_experts", where),
                  experts_per_token=_int(cfg, "num_experts_per_tok", where),
                  moe_ffn_hidden_size=fe, shared_expert_ffn_hidden_size=_int(cfg, "n_shared_experts", where, 0) * fe,
                  first_k_dense=_int(cfg, "first_k_dense_replace", where, 0),
                  router_groups=_int(cfg, "n_group", where, 1, positive=True),
                  router_group_topk=_int(cfg, "topk_group", where, 0))
        freq = _int(cfg, "moe_layer_freq", where, 1, positive=True)
        if freq != 1:  # DeepSeek's own code: MoE iff i % freq == 0; transformers ignores the key
            raise InputError(f"{cfg.name('moe_layer_freq')} = {freq} in {where} is not modelled for model_type "
                             f"{mt!r} (transformers builds every layer from first_k_dense_replace on as MoE); use 1")


# transformers 5.24.0 configuration_<model_type>.py: the window when the config leaves sliding_window out, and
# which layers use it when it gives no layer_types ("all": every layer; "odd": layers 0, 2, 4, ...; "from": layers
# i >= max_window_layers; "odd_below": layers 0, 2, ... below max_window_layers); the Qwen models only with
# use_sliding_window. Model types not listed have no window.
WINDOW_RULES = {"mistral": (4096, "all"), "mixtral": (None, "all"), "gemma2": (4096, "odd"), "gpt_oss": (128, "odd"),
                "qwen2": (4096, "from"), "qwen3": (4096, "from"), "qwen3_moe": (4096, "all"),
                "qwen2_moe": (4096, "odd_below"), None: (None, "all")}
QWEN_WINDOW = ("qwen2", "qwen3", "qwen3_moe", "qwen2_moe")
MAX_WINDOW_LAYERS = 28  # transformers' default max_window_layers (Qwen2Config, Qwen3Config, Qwen2MoeConfig)
LAYER_TYPES = ("sliding_attention", "full_attention")


def _window_kw(cfg: Keys, mt: str | None, kw: dict, where: str, strict: bool) -> None:
    """Add to `kw` the sliding window and the layers that use it, as transformers builds them (WINDOW_RULES; an
    inline table without model_type: every layer, or its layer_types). `layer_types`, when given, names each
    layer "sliding_attention" or "full_attention". An inline table (`strict`) of a model_type without windows
    that sets one is an InputError (a config.json's is ignored, as transformers ignores it)."""
    if mt not in WINDOW_RULES:
        if strict and cfg.get("sliding_window"):
            raise InputError(f"{cfg.name('sliding_window')} in {where}: model_type {mt!r} has no sliding-window "
                             f"attention; use one that has ({', '.join(m for m in WINDOW_RULES if m)}) or leave "
                             f"model_type out")
        return
    default, rule = WINDOW_RULES[mt]
    if mt in QWEN_WINDOW and not _bool(cfg, "use_sliding_window", where, False):
        return
    L = kw["num_layers"]
    types = cfg.get("layer_types")
    if types is not None and (not isinstance(types, list) or len(types) != L or any(t not in LAYER_TYPES
                                                                                    for t in types)):
        raise InputError(f"{cfg.name('layer_types')} in {where} must list {L} entries (num_hidden_layers), each "
                         f"{' or '.join(map(repr, LAYER_TYPES))}, got {show(types)}")
    w = _int(cfg, "sliding_window", where, 0, positive=True) if "sliding_window" in cfg else (default or 0)
    if not w:
        return
    if types is not None:
        layers = [i for i, t in enumerate(types) if t == "sliding_attention"]
    else:
        top = _int(cfg, "max_window_layers", where, MAX_WINDOW_LAYERS) if rule in ("from", "odd_below") else 0
        layers = [i for i in range(L) if {"all": True, "odd": i % 2 == 0, "from": i >= top,
                                          "odd_below": i % 2 == 0 and i < top}[rule]]
    if layers:
        kw.update(sliding_window=w, sliding_layers=tuple(layers))


def _inline_kw(cfg: Keys, kw: dict, ffn: int, where: str) -> None:
    """Add to `kw` the parasim keys of an inline table without model_type (bias, qkv_bias, qk_norm,
    mlp, norm) and its experts under any name (num_experts, num_local_experts, n_routed_experts):
    expert FFN moe_intermediate_size (default intermediate_size), shared experts, first_k_dense_replace,
    moe_layer_freq (or decoder_sparse_step) and mlp_only_layers."""
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
    n_exp = _int(cfg, "num_experts", where, 0)
    if n_exp:
        fe = _int(cfg, "moe_intermediate_size", where, ffn)
        step, freq = _int(cfg, "decoder_sparse_step", where, 0), _int(cfg, "moe_layer_freq", where, 0)
        if step and freq and step != freq:
            raise InputError(f"{cfg.name('moe_layer_freq')} = {freq} and {cfg.name('decoder_sparse_step')} = {step} "
                             f"in {where} are two spellings of one setting with different values; keep one")
        kw.update(num_experts=n_exp, experts_per_token=_int(cfg, "num_experts_per_tok", where), moe_ffn_hidden_size=fe,
                  shared_expert_ffn_hidden_size=_int(cfg, "shared_expert_intermediate_size", where,
                                                     _int(cfg, "n_shared_experts", where, 0) * fe),
                  first_k_dense=_int(cfg, "first_k_dense_replace", where, 0), moe_layer_freq=freq or step or 1,
                  dense_layers=_layer_list(cfg, "mlp_only_layers", where, kw["num_layers"]))


def _ffn_hidden_size(mt: str, kw: dict, ffn: int, where: str, *, given: bool = False) -> int:
    """intermediate_size, or when it is absent (or 0) on an all-MoE model (Mixtral, or experts on every layer)
    the expert FFN size (4·h without one); InputError when a dense layer needs it (naming it as missing, or as 0
    when `given`)."""
    if ffn == 0:
        all_moe = mt in ("mixtral", "gpt_oss")
        if all_moe or (kw.get("num_experts") and not kw.get("first_k_dense") and kw.get("moe_layer_freq", 1) == 1
                       and not kw.get("dense_layers")):
            ffn = kw.get("moe_ffn_hidden_size") or 4 * kw["hidden_size"]
        elif given:
            raise InputError(f"intermediate_size in {where} must be > 0 (the dense layers' FFN width), got 0")
        else:
            raise InputError(f"missing key 'intermediate_size' in {where}")
    return ffn
