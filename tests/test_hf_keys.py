"""Hugging Face config keys (issue 24, "wrong answers without a warning"): every spelling transformers
reads, keys parasim does not model, bad integers, and the config's dropout.

Truths: transformers' own config classes and models on the meta device (parameter counts), the
published size of Qwen3-30B-A3B (30.5B, model card), and the same config under its native spelling.
"""
import json
import math
import re
import warnings

import pytest
from test_model import SMALL, _hf_count

from simulator.errors import InputError
from simulator.spec.hf import SUPPORTED, load_hf_config, model_from_hf
from simulator.spec.hf_keys import CANONICAL, DROPOUT_KEYS, NATIVE, SPELLINGS, TRANSFORMERS_ATTRIBUTE_MAPS
from simulator.spec.load import load_model

BASES = dict(SMALL, qwen3=dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                               head_dim=40, intermediate_size=300, vocab_size=500),
             deepseek_v2=dict(SMALL["deepseek_v3"]))


def _cfg(mt: str, **changes) -> dict:
    """The small config of `mt` (tests/test_model.py SMALL) with model_type set, every spelling of a
    changed setting removed first, then `changes` (None deletes a key)."""
    cfg = {k: v for k, v in BASES[mt].items()
           if CANONICAL.get(k, k) not in {CANONICAL.get(c, c) for c in changes}}
    cfg["model_type"] = cfg.get("model_type", mt)
    cfg.update({k: v for k, v in changes.items() if v is not None})
    return cfg


def _write(tmp_path, cfg: dict) -> str:
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return str(p)


def _hf(cfg: dict) -> int:
    return _hf_count(cfg["model_type"], cfg)


# ---- 1. spellings ----------------------------------------------------------------------------------
ATTRIBUTE_MAP_CASES = [(mt, key) for mt, amap in TRANSFORMERS_ATTRIBUTE_MAPS.items() for pair in amap.items()
                       for key in pair if key not in ("num_mtp_layers", "num_nextn_predict_layers")]
VALUES = {"num_experts": 6, "hidden_size": 128, "num_hidden_layers": 3, "num_attention_heads": 8,
          "max_position_embeddings": 48}


@pytest.mark.parametrize("mt,key", ATTRIBUTE_MAP_CASES)
def test_every_transformers_spelling_gives_the_transformers_count(mt, key):
    """Each spelling in a supported config class's attribute_map, alone, counts as transformers does."""
    cfg = _cfg(mt, **{key: VALUES[CANONICAL.get(key, key)]})
    assert model_from_hf(cfg, strict=False).total_params() == _hf(cfg)


@pytest.mark.parametrize("mt", SUPPORTED)
def test_attribute_map_table_covers_installed_transformers(mt):
    """Every alias of the installed transformers' config class is in TRANSFORMERS_ATTRIBUTE_MAPS and read
    as the same setting as its attribute."""
    transformers = pytest.importorskip("transformers")
    amap = dict(transformers.CONFIG_MAPPING[mt].attribute_map)
    assert amap.items() <= TRANSFORMERS_ATTRIBUTE_MAPS.get(mt, {}).items()
    for alias, attr in amap.items():
        assert CANONICAL.get(alias, alias) == CANONICAL.get(attr, attr)


# The published Qwen3-30B-A3B (model card: 30.5B total, 3.3B active) as transformers 5 writes its config.
QWEN3_30B_TF5 = dict(model_type="qwen3_moe", hidden_size=2048, num_hidden_layers=48, num_attention_heads=32,
                     num_key_value_heads=4, head_dim=128, intermediate_size=6144, moe_intermediate_size=768,
                     num_local_experts=128, num_experts_per_tok=8, decoder_sparse_step=1, mlp_only_layers=[],
                     vocab_size=151936, tie_word_embeddings=False, attention_dropout=0.0)


def test_qwen3_moe_config_of_transformers_5_counts_its_experts(tmp_path):
    m = load_hf_config(_write(tmp_path, QWEN3_30B_TF5))
    # the card's 3.3B active is 3.35B cut to one decimal
    assert (round(m.total_params() / 1e9, 1), math.floor(m.active_params() / 1e8) / 10) == (30.5, 3.3)
    assert m.total_params() == load_model("qwen3-30b-a3b").total_params()


def test_qwen3_moe_config_saved_by_installed_transformers_counts_as_its_model(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = {k: v for k, v in QWEN3_30B_TF5.items() if k != "model_type"}
    saved = transformers.AutoConfig.for_model("qwen3_moe", **cfg).to_dict()
    m = load_hf_config(_write(tmp_path, json.loads(json.dumps(saved, default=str))))
    assert m.total_params() == _hf_count("qwen3_moe", cfg) == load_model("qwen3-30b-a3b").total_params()


# Spellings of other transformers architectures (SPELLINGS): read as parasim's name, so the config equals
# the same config under that name (whose count tests/test_model.py checks against transformers).
OTHER_SPELLINGS = [(name, s) for name, spellings in SPELLINGS.items() for s in spellings
                   if name not in ("max_position_embeddings", "num_nextn_predict_layers")]
WHERE_READ = {"num_experts": "qwen3_moe", "num_experts_per_tok": "qwen3_moe", "moe_intermediate_size": "qwen3_moe",
              "n_shared_experts": "deepseek_v3"}
OTHER_VALUES = {"hidden_size": 192, "num_hidden_layers": 4, "num_attention_heads": 16, "intermediate_size": 400,
                "head_dim": 24, "num_experts": 6, "num_experts_per_tok": 3, "moe_intermediate_size": 80,
                "n_shared_experts": 2}


@pytest.mark.parametrize("name,spelling", OTHER_SPELLINGS)
def test_spelling_of_another_architecture_reads_as_parasims_name(name, spelling):
    mt = WHERE_READ.get(name, "llama")
    v = OTHER_VALUES[name]
    spelled = model_from_hf(_cfg(mt, **{spelling: v}), strict=False)
    assert spelled == model_from_hf(_cfg(mt, **{name: v}), strict=False)
    assert spelled.active_params() != model_from_hf(_cfg(mt), strict=False).active_params()


@pytest.mark.parametrize("mt,first,second", [
    ("mixtral", ("num_local_experts", 4), ("num_experts", 8)),
    ("qwen3_moe", ("num_experts", 8), ("num_local_experts", 128)),
    ("deepseek_v3", ("n_routed_experts", 8), ("num_local_experts", 16)),
    ("deepseek_v2", ("num_experts", 4), ("n_routed_experts", 8)),
    ("gpt2", ("n_embd", 96), ("hidden_size", 128)),
    ("gpt2", ("n_layer", 2), ("num_hidden_layers", 3)),
    ("gpt2", ("n_positions", 64), ("max_position_embeddings", 128)),
    ("llama", ("num_hidden_layers", 3), ("n_layer", 4)),
    ("qwen3_moe", ("num_experts_per_tok", 2), ("moe_topk", 4)),
    ("deepseek_v3", ("n_shared_experts", 1), ("num_shared_experts", 2)),
])
def test_two_spellings_with_different_values_raise_naming_both(mt, first, second):
    cfg = _cfg(mt, **{first[0]: None, second[0]: None})
    cfg.update([first, second])
    with pytest.raises(InputError, match=rf"{first[0]} = {first[1]} and {second[0]} = {second[1]} in \[model\]"):
        model_from_hf(cfg, strict=False)


def test_two_spellings_with_one_value_or_one_null_are_one_setting():
    base = model_from_hf(_cfg("gpt2"), strict=False)
    assert model_from_hf(_cfg("gpt2", n_embd=96, hidden_size=96), strict=False) == base
    assert model_from_hf(_cfg("mixtral", num_experts=4, num_local_experts=4), strict=False).num_experts == 4
    assert model_from_hf(_cfg("qwen3_moe", num_experts=None, num_local_experts=8), strict=False).num_experts == 8


# ---- 2. keys parasim does not model ------------------------------------------------------------------
NOT_MODELLED = [
    ("qwen3_moe", "shared_expert_intermediate_size", 512), ("qwen3_moe", "n_shared_experts", 1),
    ("qwen3_moe", "first_k_dense_replace", 1), ("qwen2_moe", "n_shared_experts", 2),
    ("mixtral", "moe_intermediate_size", 1024), ("mixtral", "mlp_only_layers", [0]),
    ("mixtral", "decoder_sparse_step", 2), ("mixtral", "attention_bias", True),
    ("deepseek_v3", "decoder_sparse_step", 2), ("deepseek_v3", "mlp_only_layers", [1]),
    ("deepseek_v3", "shared_expert_intermediate_size", 128), ("deepseek_v3", "moe_layer_freq", 2),
    ("deepseek_v2", "moe_layer_freq", 2), ("deepseek_v2", "mlp_bias", True), ("deepseek_v3", "mlp_bias", True),
    ("mistral", "attention_bias", True), ("mistral", "mlp_bias", True), ("qwen2", "num_experts", 8),
    ("qwen2", "attention_bias", True), ("qwen3", "mlp_bias", True), ("qwen3", "moe_intermediate_size", 768),
    ("gemma", "mlp_bias", True), ("llama", "num_experts", 8), ("llama", "kv_lora_rank", 64),
    ("llama", "mlp", "gelu"), ("gpt2", "add_cross_attention", True), ("gpt2", "num_key_value_heads", 2),
    ("gpt2", "head_dim", 16), ("gpt_neox", "num_key_value_heads", 2), ("gpt_neox", "head_dim", 24),
]


@pytest.mark.parametrize("mt,key,value", NOT_MODELLED)
def test_key_that_changes_the_count_but_is_not_modelled_raises(mt, key, value):
    cfg = _cfg(mt, **{key: value})
    with pytest.raises(InputError, match=re.escape(f"{key} = {json.dumps(value)} in [model]")):
        model_from_hf(cfg, strict=False)


@pytest.mark.parametrize("key,value", [("kv_lora_rank", 64), ("q_lora_rank", 32), ("qk_nope_head_dim", 16)])
def test_inline_table_key_that_no_reader_uses_raises(key, value):
    """An inline table (no model_type) accepts the MLA keys by name (strict check) but builds no MLA."""
    cfg = {k: v for k, v in BASES["llama"].items()} | {key: value}
    with pytest.raises(InputError, match=re.escape(f"{key} = {value} in [model] is not modelled for a [model] table")):
        model_from_hf(cfg, strict=True)


@pytest.mark.parametrize("mt,key,value", [
    ("mistral", "attention_bias", False), ("qwen3_moe", "shared_expert_intermediate_size", 0),
    ("deepseek_v3", "moe_layer_freq", 1), ("gpt_neox", "num_key_value_heads", 4), ("gpt2", "add_cross_attention", False),
    ("mixtral", "decoder_sparse_step", 1), ("mixtral", "mlp_only_layers", []), ("gpt2", "head_dim", 24),
    ("qwen3", "n_shared_experts", 0), ("gpt_neox", "attention_bias", True),
])
def test_key_that_agrees_with_the_model_is_accepted(mt, key, value):
    assert model_from_hf(_cfg(mt, **{key: value}), strict=False) == model_from_hf(_cfg(mt), strict=False)


def test_mtp_layers_are_a_warning_naming_key_and_value(tmp_path):
    path = _write(tmp_path, _cfg("deepseek_v3", num_nextn_predict_layers=1))
    with pytest.warns(UserWarning, match=re.escape(f"num_nextn_predict_layers = 1 in {path}: its multi-token")):
        m = load_hf_config(path)
    assert m == load_hf_config(_write(tmp_path, _cfg("deepseek_v3"))).with_(name=m.name)
    with pytest.warns(UserWarning, match="num_mtp_layers = 2"):
        model_from_hf(_cfg("deepseek_v3", num_mtp_layers=2), strict=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model_from_hf(_cfg("deepseek_v3", num_nextn_predict_layers=0), strict=False)


# Every architecture key on every supported model_type: parasim counts what transformers builds, or
# raises InputError where transformers ignores the key; never a different count without a word.
PROBES = {"attention_bias": (True, False), "mlp_bias": (True, False), "qkv_bias": (False, True), "head_dim": (24, 40),
          "num_key_value_heads": (1, 2), "num_experts": (6, 4), "num_experts_per_tok": (1, 2),
          "moe_intermediate_size": (32, 48), "shared_expert_intermediate_size": (64, 32), "n_shared_experts": (2, 1),
          "first_k_dense_replace": (1, 2), "decoder_sparse_step": (2, 1), "mlp_only_layers": ([1], [0]),
          "moe_layer_freq": (2, 1), "q_lora_rank": (32, 48), "kv_lora_rank": (16, 32), "v_head_dim": (16, 24),
          "add_cross_attention": (True, False), "intermediate_size": (100, 120), "max_position_embeddings": (32, 48),
          "tie_word_embeddings": (True, False)}
# transformers honours these but ModelSpec cannot hold them (DeepSeek-V2's biases on dense and shared
# MLPs, GPT-2's cross-attention): InputError is the answer.
CANNOT_MODEL = {("deepseek_v2", "mlp_bias"), ("gpt2", "add_cross_attention")}
# parasim's own reading where transformers ignores the key: Qwen2's qkv_bias (honoured as on Qwen2-MoE).
PARASIM_READS = {("qwen2", "qkv_bias")}


@pytest.mark.parametrize("mt,name", [(mt, k) for mt in SUPPORTED for k in PROBES])
def test_count_equals_transformers_or_key_is_refused(mt, name):
    key = NATIVE.get(mt, {}).get(name, name)  # as the model_type's transformers class spells it
    first, second = PROBES[name]
    value = second if BASES[mt].get(key) == first else first
    cfg = _cfg(mt, **{key: value})
    try:
        ours = model_from_hf(cfg, strict=False).total_params()
    except InputError as exc:
        assert key in str(exc)
        ours = None
    if (mt, name) in PARASIM_READS:
        assert ours is not None
        return
    theirs = _hf(cfg)
    if ours is None:
        assert (mt, name) in CANNOT_MODEL or theirs == _hf(_cfg(mt)), "refused a key transformers counts"
    else:
        assert ours == theirs


# ---- 3. KV heads, head_dim and integers ------------------------------------------------------------------
@pytest.mark.parametrize("mt,key,value", [
    ("llama", "num_key_value_heads", 0), ("qwen3_moe", "num_key_value_heads", 0), ("mistral", "num_key_value_heads", 0.0),
    ("llama", "num_key_value_heads", -1), ("deepseek_v3", "num_key_value_heads", -4), ("llama", "head_dim", 0),
    ("gemma", "head_dim", -64), ("llama", "num_key_value_heads", 3),
])
def test_bad_kv_heads_or_head_dim_raise_naming_key_and_file(tmp_path, mt, key, value):
    path = _write(tmp_path, _cfg(mt, **{key: value}))
    with pytest.raises(InputError) as exc:
        load_hf_config(path)
    msg = str(exc.value)
    assert key in msg and str(value) in msg and (path in msg or key == "num_key_value_heads" and value == 3)


def test_inline_table_with_zero_kv_heads_raises():
    with pytest.raises(InputError, match=r"num_key_value_heads in \[model\] must be > 0, got 0"):
        model_from_hf(dict(BASES["llama"], num_key_value_heads=0), strict=True)


HUGE = {"2**63": 2**63, "10**100": 10**100, "1e30": 1e30}


@pytest.mark.parametrize("mt,key,value", [
    ("llama", "hidden_size", "2**63"), ("llama", "hidden_size", "10**100"), ("llama", "hidden_size", "1e30"),
    ("llama", "vocab_size", "2**63"), ("llama", "num_hidden_layers", "2**63"), ("llama", "num_hidden_layers", "1e30"),
    ("llama", "intermediate_size", "1e30"), ("llama", "num_key_value_heads", "2**63"), ("gpt2", "n_embd", "1e30"),
    ("gpt2", "n_positions", "10**100"), ("qwen3_moe", "num_experts", "10**100"),
    ("qwen3_moe", "moe_intermediate_size", "2**63"), ("deepseek_v3", "kv_lora_rank", "1e30"),
])
def test_integer_too_large_raises_naming_key_and_file(tmp_path, mt, key, value):
    path = _write(tmp_path, _cfg(mt, **{key: HUGE[value]}))
    with pytest.raises(InputError, match=re.escape(f"{key} in {path} must be <= 16777216 (2**24), got ")):
        load_hf_config(path)


@pytest.mark.parametrize("value", [[1.5], ["1"], 3, [True], [3], [-1], [1e30], [[0]]])
def test_bad_mlp_only_layers_raise_instead_of_truncating(tmp_path, value):
    path = _write(tmp_path, _cfg("qwen3_moe", mlp_only_layers=value))
    with pytest.raises(InputError, match=re.escape(f"mlp_only_layers in {path} must ")):
        load_hf_config(path)


@pytest.mark.parametrize("key,value", [("num_hidden_layers", 32.5), ("first_k_dense_replace", 1.5),
                                       ("decoder_sparse_step", 0), ("n_layer", 2.5)])
def test_fractional_or_zero_layer_keys_raise(key, value):
    mt = {"first_k_dense_replace": "deepseek_v3", "decoder_sparse_step": "qwen3_moe", "n_layer": "gpt2"}.get(key, "llama")
    with pytest.raises(InputError, match=re.escape(f"{key} in [model] must be ")):
        model_from_hf(_cfg(mt, **{key: value}), strict=False)


# ---- 4. dropout ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", DROPOUT_KEYS)
def test_config_dropout_is_the_largest_dropout_key(key):
    assert model_from_hf(_cfg("gpt2", **{key: 0.1}), strict=False).config_dropout == 0.1
    assert model_from_hf(_cfg("llama", **{"attention_dropout": 0.05, key: 0.25}), strict=True).config_dropout == 0.25


def test_dropout_keys_cover_the_supported_transformers_configs():
    transformers = pytest.importorskip("transformers")
    for mt in SUPPORTED:
        fields = transformers.AutoConfig.for_model(mt).to_dict()
        drop = {k for k in fields if ("dropout" in k or "pdrop" in k) and not k.startswith(("classifier", "summary"))}
        assert drop <= set(DROPOUT_KEYS), mt


@pytest.mark.parametrize("value", [-0.1, 1.5, "0.1", True, math.inf, [0.1]])
def test_bad_dropout_value_raises_naming_key(tmp_path, value):
    text = json.dumps(_cfg("gpt2", resid_pdrop=value)).replace("Infinity", "1e999")
    (tmp_path / "config.json").write_text(text)
    path = str(tmp_path / "config.json")
    with pytest.raises(InputError, match=re.escape(f"resid_pdrop in {path} must be a dropout probability")):
        load_hf_config(path)


SCENARIO = """
[model]
hf_config = "config.json"
[hardware]
preset = "dgx-h100"
num_gpus = 1
[training]
seq_length = 1024
global_batch_size = 8
micro_batch_size = 8
{training}
[layout]
tp = 1
pp = 1
"""


def _gpt2_scenario(tmp_path, training: str):
    from simulator.spec.scenario import load_scenario

    gpt2 = dict(model_type="gpt2", n_embd=768, n_layer=12, n_head=12, n_positions=1024, vocab_size=50257,
                resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1)  # openai-community/gpt2 config.json
    (tmp_path / "config.json").write_text(json.dumps(gpt2))
    (tmp_path / "s.toml").write_text(SCENARIO.format(training=training))
    return load_scenario(str(tmp_path / "s.toml"))


def test_gpt2_config_with_dropout_turns_dropout_on_and_its_activations(tmp_path):
    from simulator.memory import memory_breakdown

    def act(s):
        return memory_breakdown(s.model, s.training, s.layout).worst.activations_bytes

    from_config = _gpt2_scenario(tmp_path, "")
    on, off = _gpt2_scenario(tmp_path, "dropout = true"), _gpt2_scenario(tmp_path, "dropout = false")
    assert (from_config.training.dropout, on.training.dropout, off.training.dropout) == (True, True, False)
    assert act(from_config) == act(on) > act(off)


@pytest.mark.parametrize("kw,msg", [
    (dict(hidden_size=2**63), "model hidden_size must be <= 16777216 (2**24), got 9223372036854775808"),
    (dict(num_layers=2**40), "model num_layers must be <= 16777216"),
    (dict(num_layers=2**24), "model num_layers (num_hidden_layers) must be <= 1048576 (2**20)"),
    (dict(num_layers=2**20, hidden_size=2**14, num_heads=128, ffn_hidden_size=2**24),
     "model 'custom' has 8.66e+17 parameters, more than parasim counts exactly (2**53)"),
])
def test_model_spec_refuses_sizes_past_exact_counting(kw, msg):
    from simulator.spec.model import ModelSpec

    base = dict(hidden_size=512, num_layers=2, num_heads=8, ffn_hidden_size=1024, vocab_size=100) | kw
    with pytest.raises(InputError, match=re.escape(msg)):
        ModelSpec(**base)
