"""The model a Megatron-LM command line (or NeMo config) defines, as inline Hugging Face-style keys of a
scenario's [model] table (docs/scenarios.md; spec/hf.py reads them).

Megatron builds the model from its arguments (NVIDIA/Megatron-LM d98e8a6 (2026-08-22)
megatron/training/arguments.py, megatron/core/transformer/transformer_config.py), with defaults that
differ from a Hugging Face config's, each applied here and reported as an assumption when the command
line leaves it out:
- `--ffn-hidden-size`: 4h, or int(4h·2/3 / 64)·64 with `--swiglu` (arguments.py);
- `--kv-channels`: h / heads; `--num-query-groups` only counts with `--group-query-attention`;
- `--normalization` LayerNorm, biases on every linear layer unless `--disable-bias-linear`
  (`--add-qkv-bias` puts them back on QKV), GeLU MLP unless `--swiglu`;
- embeddings tied unless `--untie-embeddings-and-output-weights`;
- `--hidden-dropout` and `--attention-dropout` 0.1;
- `--position-embedding-type learned_absolute` (a GPT-2 style table of `--max-position-embeddings` rows);
- the vocabulary: the tokenizer's (not on the command line: `--vocab-size` or an assumption) padded to
  a multiple of `--make-vocab-size-divisible-by` (128) x tp (megatron/training/vocab_utils.py);
- MoE: `--num-experts`, `--moe-ffn-hidden-size` (default the dense FFN), `--moe-router-topk` (2),
  `--moe-shared-expert-intermediate-size`, `--moe-layer-freq` (N: layer i is MoE iff i % N == 0, or a
  pattern such as "([0]*3+[1]*58)": megatron/core/models/gpt/gpt_layer_specs.py);
- MLA (`--multi-latent-attention`): `--q-lora-rank`, `--kv-lora-rank` (32), `--qk-head-dim` (128),
  `--qk-pos-emb-head-dim` (64), `--v-head-dim` (128), read as a DeepSeek-V3 config.
"""
from __future__ import annotations

import ast

from ..errors import InputError
from .fields import Fields, Report

# tokenizer -> its vocabulary (before Megatron's padding), when the command line names one
TOKENIZER_VOCAB = (("gpt2bpe", 50257), ("llama-3", 128256), ("llama3", 128256), ("llama-2", 32000),
                   ("mistral", 32000), ("mixtral", 32000), ("qwen", 151643))
DEFAULT_VOCAB = 128256  # Llama 3's tokenizer: the assumption when nothing names the vocabulary


def megatron_model(f: Fields, tp: int, seq_length: int, rep: Report, vocab_size: int | None = None) -> dict:
    """The [model] table of the model `f` defines (module docstring)."""
    layers = f.int("num_layers") if f.has("num_layers") else f.int("decoder_num_layers")
    if layers is None or not f.has("hidden_size") or not f.has("num_attention_heads"):
        missing = next(n for k, n in (("num_layers", "--num-layers"), ("hidden_size", "--hidden-size"),
                                      ("num_attention_heads", "--num-attention-heads")) if not f.has(k))
        raise InputError(f"{f.where}: {missing} is missing, so the model is not defined; give --model "
                         f"PRESET|config.json")
    h, heads = f.int("hidden_size"), f.int("num_attention_heads")
    keys = {"num_hidden_layers": layers, "hidden_size": h, "num_attention_heads": heads}
    keys.update(_attention(f, h, heads, rep))
    mlp, ffn = _mlp(f, h, rep)
    keys["intermediate_size"] = ffn
    keys["vocab_size"] = _vocab(f, tp, rep, vocab_size)
    keys["tie_word_embeddings"] = not f.flag("untie_embeddings_and_output_weights")
    for key in ("hidden_dropout", "attention_dropout"):
        if not f.has(key):
            rep.assume(f"{key.replace('_', '-')}: Megatron's default 0.1 (dropout masks stored)")
        keys[key] = f.float(key, 0.1)
    norm = _norm(f)
    bias = not f.flag("disable_bias_linear")
    pos = "rope" if f.flag("use_rotary_position_embeddings") else f.text("position_embedding_type", "learned_absolute")
    f.take("no_position_embedding")
    max_pos = f.int("max_position_embeddings", seq_length)
    moe = _moe(f, layers, ffn, rep)
    mla = _mla(f, rep) if f.flag("multi_latent_attention") else {}
    gpt2 = (pos == "learned_absolute" and mlp == "gelu" and norm == "layernorm" and bias and not moe and not mla
            and keys.get("num_key_value_heads", heads) == heads and "head_dim" not in keys
            and not f.flag("qk_layernorm") and not f.flag("add_qkv_bias"))
    if gpt2:
        keys.pop("num_key_value_heads", None)
        return {"model_type": "gpt2", **keys, "max_position_embeddings": max_pos}
    if pos == "learned_absolute":
        rep.cannot(f"{f.name('position_embedding_type')} learned_absolute with this architecture: the "
                   f"{max_pos} x {h} position table is not counted (parasim counts it for GPT-2-style models only)")
    if mla:
        if not f.flag("qk_layernorm"):
            rep.assume("--multi-latent-attention without --qk-layernorm: Megatron-Core builds no latent norms; "
                       "parasim counts DeepSeek's two (q_a_layernorm, kv_a_layernorm: their bytes and time)")
        return _deepseek_keys(keys, moe, mla, f)
    keys.update(mlp=mlp, norm=norm, bias=bias)
    if f.flag("add_qkv_bias") and not bias:
        keys["qkv_bias"] = True
    if f.flag("qk_layernorm"):
        keys["qk_norm"] = True
    return {**keys, **moe}


def _attention(f: Fields, h: int, heads: int, rep: Report) -> dict:
    gqa = f.flag("group_query_attention")
    groups = f.int("num_query_groups")
    out = {}
    if groups is not None and (gqa or not f.name("num_query_groups").startswith("--")):
        out["num_key_value_heads"] = groups
    elif groups is not None:
        rep.assume(f"{f.name('num_query_groups')} without --group-query-attention: Megatron ignores it "
                   f"(multi-head attention, {heads} KV heads)")
    elif gqa:
        raise f.error("group_query_attention", "needs --num-query-groups")
    kv = f.int("kv_channels")
    if kv is not None and (h % heads or kv != h // heads):
        out["head_dim"] = kv
    return out


def _mlp(f: Fields, h: int, rep: Report) -> tuple[str, int]:
    """(parasim's MLP kind, ffn hidden size)."""
    mlp = "swiglu" if f.flag("swiglu") else "geglu" if f.flag("geglu") else "gelu"
    if f.flag("squared_relu"):
        mlp = "squared-relu"
    elif f.flag("quick_geglu"):
        mlp = "geglu"
        rep.assume(f"{f.name('quick_geglu')}: counted as parasim's geglu MLP (the same matrices and FLOPs; the "
                   "activation's own cost is not modelled)")
    ffn = f.int("ffn_hidden_size")
    if ffn is None:
        ffn = int((4 * h * 2 / 3) / 64) * 64 if mlp in ("swiglu", "geglu") else 4 * h
        rep.assume(f"--ffn-hidden-size: Megatron's default for this MLP, {ffn}")
    return mlp, ffn


def _norm(f: Fields) -> str:
    v = f.text("normalization", "LayerNorm")
    kind = v.lower().replace("_", "")
    if kind not in ("layernorm", "rmsnorm", "layernorm1p"):
        raise f.error("normalization", f"must be LayerNorm or RMSNorm, got {v!r}")
    f.take("apply_layernorm_1p")
    return "rmsnorm" if kind == "rmsnorm" else "layernorm"


def _vocab(f: Fields, tp: int, rep: Report, given: int | None) -> int:
    """The tokenizer's vocabulary padded as Megatron pads it (vocab_utils.calculate_padded_vocab_size)."""
    div = f.int("make_vocab_size_divisible_by", 128)
    vocab = given or f.int("vocab_size")
    if vocab is None:
        names = " ".join(" ".join(map(str, v)) if isinstance(v, list) else str(v)
                         for v in (f.raw("tokenizer_type", ""), f.raw("tokenizer_model", ""))).lower()
        vocab = next((v for key, v in TOKENIZER_VOCAB if key in names.replace("_", "-") or key in names), None)
        rep.assume(f"vocabulary: {vocab or DEFAULT_VOCAB} tokens "
                   + (f"(the tokenizer named: {names.strip()})" if vocab else
                      "(not on the command line: Megatron reads it from the tokenizer; Llama 3's assumed, give "
                      "--vocab-size to change it)"))
        vocab = vocab or DEFAULT_VOCAB
    multiple = div * tp
    padded = -(-vocab // multiple) * multiple
    if padded != vocab:
        rep.assume(f"vocabulary padded from {vocab} to {padded} (a multiple of --make-vocab-size-divisible-by "
                   f"{div} x tp {tp}, as Megatron pads it)")
    return padded


def layer_pattern(f: Fields, key: str, layers: int) -> list[int]:
    """Megatron's --moe-layer-freq: N (layer i is MoE iff i % N == 0) or a list expression of 0/1 such as
    "([0]*3+[1]*58)" (digits, brackets, +, * only; evaluated without eval)."""
    v = f.raw(key, 1)
    v = v[0] if isinstance(v, list) and len(v) == 1 else v
    if isinstance(v, list) and all(x in (0, 1) for x in v):
        pattern = v
    elif isinstance(v, int) or (isinstance(v, str) and v.strip().isdigit()):
        n = int(v)
        if n < 1:
            raise f.error(key, f"must be >= 1, got {v!r}")
        pattern = [1 if i % n == 0 else 0 for i in range(layers)]
    else:
        pattern = _pattern(str(v), f, key)
    if len(pattern) != layers or any(x not in (0, 1) for x in pattern):
        raise f.error(key, f"must give 0 or 1 for each of the {layers} layers, got {v!r}")
    return pattern


def _pattern(text: str, f: Fields, key: str) -> list:
    def ev(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [ev(e) for e in node.elts]
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Mult) and isinstance(b, list):
                a, b = b, a  # 3*[0] as [0]*3
            if isinstance(node.op, ast.Mult) and isinstance(a, list) and isinstance(b, int) and len(a) * b <= 1 << 16:
                return a * b
            if isinstance(node.op, ast.Add) and isinstance(a, list) and isinstance(b, list):
                return a + b
        raise ValueError
    try:
        out = ev(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError, RecursionError):
        raise f.error(key, f"must be a whole number or a 0/1 layer pattern such as ([0]*3+[1]*58), got {text!r}") \
            from None
    if not isinstance(out, list):
        raise f.error(key, f"must be a 0/1 layer pattern, got {text!r}")
    return out


def _moe(f: Fields, layers: int, ffn: int, rep: Report) -> dict:
    experts = f.int("num_experts")
    if not experts:
        return {}
    if not f.has("moe_router_topk"):
        rep.assume("--moe-router-topk: Megatron's default 2")
    keys = {"num_experts": experts, "num_experts_per_tok": f.int("moe_router_topk", 2),
            "moe_intermediate_size": f.int("moe_ffn_hidden_size", ffn)}
    shared = f.int("moe_shared_expert_intermediate_size")
    if shared:
        keys["shared_expert_intermediate_size"] = shared
    dense = [i for i, x in enumerate(layer_pattern(f, "moe_layer_freq", layers)) if x == 0]
    if dense:
        keys["mlp_only_layers"] = dense
    return keys


def _mla(f: Fields, rep: Report) -> dict:
    for key, default in (("kv_lora_rank", 32), ("qk_head_dim", 128), ("qk_pos_emb_head_dim", 64), ("v_head_dim", 128)):
        if not f.has(key):
            rep.assume(f"--{key.replace('_', '-')}: Megatron's default {default}")
    return {"q_lora_rank": f.int("q_lora_rank", 0, least=0), "kv_lora_rank": f.int("kv_lora_rank", 32),
            "qk_nope_head_dim": f.int("qk_head_dim", 128), "qk_rope_head_dim": f.int("qk_pos_emb_head_dim", 64),
            "v_head_dim": f.int("v_head_dim", 128)}


def _deepseek_keys(keys: dict, moe: dict, mla: dict, f: Fields) -> dict:
    """An MLA model as a DeepSeek-V3 config (the model_type whose attention parasim counts as MLA): its
    dense layers must come first (first_k_dense_replace)."""
    out = {"model_type": "deepseek_v3", **{k: v for k, v in keys.items() if k != "head_dim"}, **mla}
    out["num_key_value_heads"] = keys["num_attention_heads"]
    if moe:
        dense = moe.get("mlp_only_layers", [])
        if dense != list(range(len(dense))):
            raise f.error("moe_layer_freq", "with --multi-latent-attention must put the dense layers first "
                                            "(DeepSeek's first_k_dense_replace)")
        shared = moe.get("shared_expert_intermediate_size", 0)
        if shared % moe["moe_intermediate_size"]:
            raise f.error("moe_shared_expert_intermediate_size", "with --multi-latent-attention must be a multiple "
                                                                 "of --moe-ffn-hidden-size (DeepSeek's shared experts)")
        out.update(n_routed_experts=moe["num_experts"], num_experts_per_tok=moe["num_experts_per_tok"],
                   moe_intermediate_size=moe["moe_intermediate_size"], first_k_dense_replace=len(dense),
                   n_shared_experts=shared // moe["moe_intermediate_size"])
    return out
