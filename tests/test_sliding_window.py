"""Sliding-window attention (cost/window.py, ModelSpec.sliding_window / sliding_layers): which layers use the
window against transformers' own models, the scores a window computes against transformers' mask function, and
the properties its kernel time must have."""
import numpy as np
import pytest

from simulator.cost import flops as F
from simulator.cost.compute import layer_op_times
from simulator.cost.window import band_entries, window_kernel
from simulator.errors import InputError
from simulator.memory.kv_cache import kv_cache_bytes
from simulator.spec.hardware import load_hardware
from simulator.spec.hf import model_from_hf
from simulator.spec.load import load_model
from simulator.spec.stack import load_stack
from simulator.spec.training import Training

BASE = dict(hidden_size=128, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            intermediate_size=256, vocab_size=500)
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64)
CASES = {
    "mistral-default": dict(model_type="mistral"),  # transformers' default window, 4096, on every layer
    "mistral-null": dict(model_type="mistral", sliding_window=None),
    "mixtral": dict(model_type="mixtral", sliding_window=256, num_local_experts=4, num_experts_per_tok=2),
    "gemma2": dict(model_type="gemma2", sliding_window=64),
    "gpt_oss": dict(model_type="gpt_oss", num_local_experts=4, num_experts_per_tok=2),
    "gpt_oss-types": dict(model_type="gpt_oss", num_local_experts=4, num_experts_per_tok=2, sliding_window=32,
                          layer_types=["full_attention"] * 2 + ["sliding_attention"] * 4),
    "qwen2": dict(model_type="qwen2", use_sliding_window=True, sliding_window=512, max_window_layers=2),
    "qwen2-off": dict(model_type="qwen2", sliding_window=512),
    "qwen3": dict(model_type="qwen3", use_sliding_window=True, max_window_layers=4),
    "qwen2_moe": dict(model_type="qwen2_moe", use_sliding_window=True, max_window_layers=5, **MOE),
    "qwen3_moe": dict(model_type="qwen3_moe", use_sliding_window=True, sliding_window=1024, **MOE),
}


def _hf_windows(cfg: dict) -> list:
    """The window of each layer's attention in transformers' own model of `cfg` (None: full attention): the
    attention module's `sliding_window`, else the mask its layer type selects (Qwen2-MoE keeps no attribute on a
    full layer), else the config's window (Mistral, Mixtral and Qwen3-MoE give every layer the same mask)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf_cfg = transformers.AutoConfig.for_model(cfg["model_type"], **{k: v for k, v in cfg.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_cfg)
    types = getattr(hf_cfg, "layer_types", None)
    by_type = [hf_cfg.sliding_window if not types or t == "sliding_attention" else None
               for t in (types or [None] * len(model.model.layers))]
    return [getattr(layer.self_attn, "sliding_window", w) for layer, w in zip(model.model.layers, by_type)]


@pytest.mark.parametrize("key", sorted(CASES))
def test_windowed_layers_match_transformers(key):
    cfg = {**BASE, **CASES[key]}
    spec = model_from_hf(cfg, strict=False)
    want = _hf_windows(cfg)
    got = [spec.sliding_window if i in spec.sliding_layers else None for i in range(spec.num_layers)]
    assert got == [w or None for w in want]


def test_band_counts_the_scores_transformers_mask_keeps():
    torch = pytest.importorskip("torch")
    from transformers.masking_utils import sliding_window_causal_mask_function

    for s, w in ((1, 1), (7, 3), (128, 128), (1000, 128), (513, 4096), (4096, 127)):
        q, k = torch.arange(s)[:, None], torch.arange(s)[None, :]
        kept = sliding_window_causal_mask_function(w)(0, 0, q, k).sum().item()
        assert band_entries(s, w) == kept


def test_attention_flops_follow_the_windowed_layers():
    """GPT-OSS at 4096 tokens: half its layers see 128 keys per query. The core attention's forward FLOPs per
    layer, averaged, are 4·b·n_h·d·(mean kept scores), the kept scores counted from transformers' masks."""
    torch = pytest.importorskip("torch")
    from transformers.masking_utils import causal_mask_function, sliding_window_causal_mask_function

    m = load_model("gpt-oss-120b")
    s = 4096
    q, k = torch.arange(s)[:, None], torch.arange(s)[None, :]
    full = causal_mask_function(0, 0, q, k).sum().item()
    window = sliding_window_causal_mask_function(128)(0, 0, q, k).sum().item()
    kept = (18 * window + 18 * full) / 36
    ops = F.attention_ops(m, seq_length=s, attention_flops="causal")
    # (the causal convention counts s²/2 for a full layer, not s(s+1)/2: compare the windowed share at that basis)
    want = 4 * m.num_heads * m.head_dim * kept * (s * s / 2) / full
    assert sum(o.forward_flops for o in ops) == pytest.approx(want, rel=1e-12)
    # without FlashAttention every score is computed, windowed or not
    assert sum(o.forward_flops for o in F.attention_ops(m, seq_length=s, attention_flops="full")) == \
        pytest.approx(4 * m.num_heads * m.head_dim * s * s, rel=1e-12)


def _attention_s(model, seq=4096, **tr):
    hw = load_hardware("dgx-h100")
    training = Training(seq_length=seq, global_batch_size=8, stack=load_stack("megatron"), **tr)
    ops = layer_op_times(model, training, hw, moe=model.is_moe, core_attention_only=True)
    return sum(o.forward_s for o in ops), sum(o.backward_s for o in ops)


def test_a_window_as_long_as_the_sequence_changes_nothing():
    m = load_model("llama3-8b")
    windowed = m.with_(sliding_window=4096, sliding_layers=tuple(range(m.num_layers)))
    assert _attention_s(windowed) == pytest.approx(_attention_s(m), rel=1e-12)


def test_window_time_grows_with_the_window_and_stays_under_causal():
    m = load_model("llama3-8b")
    every = tuple(range(m.num_layers))
    times = [_attention_s(m.with_(sliding_window=w, sliding_layers=every), seq=8192)[0]
             for w in (128, 512, 2048, 4096)]
    full = _attention_s(m, seq=8192)[0]
    assert all(a < b for a, b in zip(times, times[1:])) and times[-1] < full
    # half the layers windowed: the mean of the all-full and all-windowed layer
    half = m.with_(sliding_window=512, sliding_layers=every[::2])
    assert _attention_s(half, seq=8192)[0] == pytest.approx((full + times[1]) / 2, rel=1e-9)


def test_window_kernel_reads_the_causal_table_at_equal_work_per_block():
    """w = Q = 128: each query tile visits 2 key tiles, as a causal kernel over 3 tiles does on average; the band
    fills 1/2 of them, the causal kernel 3/4."""
    x, factor, banded = window_kernel(np.array([4096.0, 256.0]), 128, 128)
    assert list(x) == [384.0, 256.0] and factor[0] == pytest.approx(0.5 / 0.75) and list(banded) == [True, False]


def test_kv_cache_keeps_the_window_in_windowed_layers():
    m = load_model("gpt-oss-120b")
    per_token_layer = 2 * m.num_kv_heads * m.head_dim * 2  # bytes, bf16
    got = kv_cache_bytes(m, layers=[36.0], batch=1, context=8192, tp=1)[0]
    assert got == (18 * 8192 + 18 * 128) * per_token_layer
    assert kv_cache_bytes(m, layers=[36.0], batch=1, context=100, tp=1)[0] == 36 * 100 * per_token_layer


def test_a_window_on_a_model_type_without_windows_is_refused_inline():
    with pytest.raises(InputError, match="sliding_window .*model_type 'llama' has no sliding-window"):
        model_from_hf({**BASE, "model_type": "llama", "sliding_window": 64}, strict=True)
    assert not model_from_hf({**BASE, "model_type": "llama", "sliding_window": 64}, strict=False).sliding_layers


@pytest.mark.parametrize("cfg,msg", [
    (dict(model_type="gpt_oss", layer_types=["sliding_attention"] * 5), "must list 6 entries"),
    (dict(model_type="gemma2", layer_types=["sliding_attention"] * 5 + ["chunked_attention"]), "must list 6"),
    (dict(model_type="mistral", sliding_window=-1), "sliding_window"),
])
def test_bad_window_keys_name_the_key(cfg, msg):
    with pytest.raises(InputError, match=msg):
        model_from_hf({**BASE, **MOE, **cfg} if cfg["model_type"] == "gpt_oss" else {**BASE, **cfg}, strict=False)
