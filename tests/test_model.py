"""Parameter counts against independent truths: transformers on the meta device, and published sizes."""
import pytest

from simulator.errors import InputError
from simulator.spec.hf import model_from_hf
from simulator.spec.load import load_model
from simulator.spec.model import ModelSpec, stage_layer_counts

# Small configs of every supported architecture (shapes chosen to exercise GQA, MQA, explicit head_dim,
# biases, tied/untied, MoE with shared experts and dense-first layers, MLA with and without q_lora).
SMALL = {
    "llama": dict(hidden_size=256, num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=2,
                  intermediate_size=688, vocab_size=1000, tie_word_embeddings=False),
    "llama-bias-tied": dict(model_type="llama", hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=4, intermediate_size=512, vocab_size=777, attention_bias=True,
                            mlp_bias=True, tie_word_embeddings=True),
    "mistral": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                    head_dim=48, intermediate_size=300, vocab_size=500),
    "mixtral": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    intermediate_size=200, vocab_size=500, num_local_experts=4, num_experts_per_tok=2),
    "qwen2": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=300, vocab_size=500, tie_word_embeddings=True),
    "qwen2_moe": dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=300, moe_intermediate_size=96, shared_expert_intermediate_size=192,
                      num_experts=6, num_experts_per_tok=2, decoder_sparse_step=2, mlp_only_layers=[3],
                      vocab_size=500, tie_word_embeddings=False),
    "qwen3_moe": dict(hidden_size=128, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=40, intermediate_size=300, moe_intermediate_size=64, num_experts=8,
                      num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[0], vocab_size=500,
                      tie_word_embeddings=False),
    "gemma": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                  head_dim=64, intermediate_size=512, vocab_size=500),
    "gemma2": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                   head_dim=64, intermediate_size=512, vocab_size=500),
    "deepseek_v3": dict(hidden_size=256, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                        intermediate_size=512, moe_intermediate_size=64, vocab_size=500, n_routed_experts=8,
                        n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1, q_lora_rank=96,
                        kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
                        n_group=2, topk_group=1),
    "deepseek_v3-noqlora": dict(model_type="deepseek_v3", hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                                num_key_value_heads=4, intermediate_size=512, moe_intermediate_size=64,
                                vocab_size=500, n_routed_experts=4, n_shared_experts=2, num_experts_per_tok=2,
                                first_k_dense_replace=0, q_lora_rank=None, kv_lora_rank=64, qk_nope_head_dim=32,
                                qk_rope_head_dim=16, v_head_dim=32, n_group=1, topk_group=1),
    "gpt2": dict(n_embd=96, n_layer=2, n_head=4, n_positions=64, vocab_size=300),
    "gpt_neox": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512,
                     vocab_size=500, tie_word_embeddings=False),
    "bloom": dict(n_embed=128, n_layer=2, n_head=4, vocab_size=500),  # as bigscience's config.json spells it
    "nemotron": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                     intermediate_size=384, vocab_size=500, partial_rotary_factor=0.5),
    # biased attention and experts, a router bias and a learned sink logit per head
    "gpt_oss": dict(hidden_size=128, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                    intermediate_size=96, vocab_size=500, num_local_experts=4, num_experts_per_tok=2),
}


def _hf_count(model_type: str, cfg: dict) -> int:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf_cfg = transformers.AutoConfig.for_model(model_type, **{k: v for k, v in cfg.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_cfg)
    return sum(p.numel() for p in model.parameters())


def _hf_active(model_type: str, cfg: dict) -> int:
    """Active parameters from the instantiated model: all parameters minus (E − k)/E of every routed
    expert tensor (tensors whose name says 'experts' and that are not shared experts)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf_cfg = transformers.AutoConfig.for_model(model_type, **{k: v for k, v in cfg.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_cfg)
    e = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts")
    k = cfg["num_experts_per_tok"]
    total = 0
    for name, p in model.named_parameters():
        routed = ".experts." in name or name.endswith(".experts.gate_up_proj") or name.endswith(".experts.down_proj")
        total += p.numel() * k // e if routed and "shared" not in name else p.numel()
    return total


@pytest.mark.parametrize("key", sorted(SMALL))
def test_param_count_equals_transformers_meta_model(key):
    cfg = dict(SMALL[key])
    model_type = cfg.get("model_type", key)
    cfg.setdefault("model_type", model_type)
    spec = model_from_hf(cfg, strict=False)
    assert spec.total_params() == _hf_count(model_type, cfg)


@pytest.mark.parametrize("key", ["mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "gpt_oss"])
def test_active_param_count_equals_transformers_expert_fraction(key):
    cfg = dict(SMALL[key])
    cfg.setdefault("model_type", key)
    spec = model_from_hf(cfg, strict=False)
    assert spec.active_params() == _hf_active(cfg["model_type"], cfg)


# Full-size presets against transformers too (meta device: no memory is allocated).
@pytest.mark.parametrize("preset,model_type", [
    ("llama3-8b", "llama"), ("llama3-70b", "llama"), ("llama3.1-405b", "llama"), ("mixtral-8x7b", "mixtral"),
    ("qwen3-30b-a3b", "qwen3_moe"), ("qwen2-0.5b", "qwen2"), ("gemma-2b", "gemma"), ("gpt2-124m", "gpt2"),
    ("pythia-1.4b", "gpt_neox"), ("mistral-7b", "mistral"), ("deepseek-v3", "deepseek_v3"), ("bloom-176b", "bloom"),
    ("gpt-oss-120b", "gpt_oss"), ("gpt-oss-20b", "gpt_oss"),
])
def test_preset_param_count_equals_transformers(preset, model_type):
    import tomllib
    from simulator.spec.presets import resolve

    cfg = tomllib.loads(resolve("models", preset).read_text())
    cfg = {k: v for k, v in cfg.items() if k not in ("name", "source")}
    if model_type == "deepseek_v3":
        cfg.update(n_group=8, topk_group=4)
    assert load_model(preset).total_params() == _hf_count(model_type, cfg)


@pytest.mark.parametrize("preset,billions,active", [
    # Published sizes (formulas.md §1.2-1.3; Mixtral paper §2: 46.7B/12.9B; DeepSeek-V3 report: 671B total,
    # "37B" active, which formulas.md §1.3 derives as 37.55B), compared at the published rounding.
    ("llama3-8b", 8.03, None), ("llama3-70b", 70.55, None), ("mixtral-8x7b", 46.70, 12.9),
    ("deepseek-v3", 671.0, 37.55), ("gpt3-175b", 174.6, None),
])
def test_preset_matches_published_size(preset, billions, active):
    m = load_model(preset)
    assert round(m.total_params() / 1e9, 2 if billions < 100 else 1) == pytest.approx(billions, abs=1e-9)
    if active:
        assert round(m.active_params() / 1e9, len(str(active).split(".")[1])) == pytest.approx(active, abs=1e-9)


def test_gpt_oss_counts_its_published_sizes():
    """OpenAI's gpt-oss model card: gpt-oss-120b 116.83B parameters, 5.13B active per token; gpt-oss-20b 20.91B and
    3.61B. Its active count leaves the input embedding out (the unembedding counts); parasim's counts it."""
    for preset, total, active in (("gpt-oss-120b", 116.83, 5.13), ("gpt-oss-20b", 20.91, 3.61)):
        m = load_model(preset)
        assert round(m.total_params() / 1e9, 2) == pytest.approx(total, abs=1e-9)
        assert round((m.active_params() - m.embedding_params()) / 1e9, 2) == pytest.approx(active, abs=1e-9)


def test_bloom_counts_its_published_parameters_exactly():
    """BLOOM paper (arXiv 2211.05100): 176,247,271,424 parameters; bigscience/bloom-560m: 559,214,592. Both
    include the LayerNorm on the word embeddings (2·h), which no other supported architecture has."""
    from simulator.spec.hf import model_from_hf

    assert load_model("bloom-176b").total_params() == 176_247_271_424
    small = model_from_hf(dict(model_type="bloom", n_embed=1024, n_layer=24, n_head=16, vocab_size=250880),
                          strict=False)
    assert small.total_params() == 559_214_592 and small.embedding_norm


def test_mha_is_default_and_head_dim_derived():
    m = ModelSpec(hidden_size=512, num_layers=2, num_heads=8, ffn_hidden_size=1024, vocab_size=100)
    assert (m.num_kv_heads, m.head_dim) == (8, 64)
    # 2 layers × (attention 4h² + SwiGLU 3hf + 2 RMSNorm h) + V·h embedding + V·h head + final norm h
    assert m.total_params() == 2 * (4 * 512**2 + 3 * 512 * 1024 + 2 * 512) + 2 * 100 * 512 + 512


@pytest.mark.parametrize("kw,msg", [
    (dict(num_heads=8, num_kv_heads=3), "multiple of num_key_value_heads(3)"),
    (dict(hidden_size=0), "hidden_size must be > 0"),
    (dict(hidden_size=-5), "hidden_size must be > 0"),
    (dict(mlp="relu"), "mlp must be one of"),
    (dict(num_heads=7), "not divisible by num_attention_heads(7)"),
    (dict(num_experts=4, experts_per_token=5, moe_ffn_hidden_size=8), "num_experts_per_tok(5)"),
])
def test_bad_model_fields_raise_one_line_error(kw, msg):
    base = dict(hidden_size=512, num_layers=2, num_heads=8, ffn_hidden_size=1024, vocab_size=100)
    base.update(kw)
    with pytest.raises(InputError, match=pytest.importorskip("re").escape(msg)):
        ModelSpec(**base)


def test_inline_table_rejects_unknown_key_with_suggestion():
    with pytest.raises(InputError, match="hidden_sise.*hidden_size"):
        model_from_hf(dict(hidden_sise=4, num_hidden_layers=2), strict=True)


def test_inline_table_reports_missing_key():
    with pytest.raises(InputError, match="missing key 'vocab_size'"):
        model_from_hf(dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128))


def test_unknown_preset_suggests_close_names():
    with pytest.raises(InputError, match="did you mean.*llama3-70b"):
        load_model("llama3-70")


def test_uneven_stage_split_must_add_up():
    assert list(stage_layer_counts(32, 4)) == [8, 8, 8, 8]
    assert list(stage_layer_counts(30, 4, (7, 8, 8, 7))) == [7, 8, 8, 7]
    with pytest.raises(InputError, match="not divisible by pp"):
        stage_layer_counts(30, 4)
    with pytest.raises(InputError, match="sums to 29"):
        stage_layer_counts(30, 4, (7, 8, 7, 7))
