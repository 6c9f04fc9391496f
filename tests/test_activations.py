"""Activation model against Korthikanti et al. 2022 (arXiv 2205.05198) Table 2 closed forms and other
closed forms (ZB's M_W, §4.3 output layer, GQA/MoE/CP scaling)."""
import numpy as np
import pytest

from simulator.memory.activations import layer_activation_bytes, layer_weight_grad_bytes, routed_tokens
from simulator.memory.head_activations import head_activation_bytes
from simulator.spec.load import load_model
from simulator.spec.model import ModelSpec
from simulator.spec.training import Training

# Korthikanti Table 3 GPT configs (as model presets): s = 2048, t = 8, fp16 activations, dropout on,
# no FlashAttention (the paper's setting).
GPT = ["megatron-22b", "gpt3-175b", "megatron-530b", "megatron-1t"]
S, T = 2048, 8
TR = Training(seq_length=S, global_batch_size=8, precision="fp16", flash_attention=False, dropout=True)
REL = 5e-4  # the model also counts LayerNorm's fp32 mean/rstd (8 bytes per token per norm), which the paper drops


def act(model, *, tp=T, sp=False, recompute="none", b=1, cp=1, training=TR, moe=False):
    return float(layer_activation_bytes(model, training, tp=tp, cp=cp, micro_batch_size=b, sequence_parallel=sp,
                                        recompute=recompute, moe=moe))


@pytest.mark.parametrize("name", GPT)
def test_no_parallelism_is_sbh_34_plus_5as_over_h(name):
    m = load_model(name)
    s, b, h, a = S, 1, m.hidden_size, m.num_heads
    assert act(m, tp=1) == pytest.approx(s * b * h * (34 + 5 * a * s / h), rel=REL)  # Eq. 1


@pytest.mark.parametrize("name", GPT)
def test_tensor_parallel_is_sbh_10_plus_24_over_t_plus_5as_over_ht(name):
    m = load_model(name)
    s, b, h, a, t = S, 1, m.hidden_size, m.num_heads, T
    assert act(m) == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t)), rel=REL)  # Eq. 2


@pytest.mark.parametrize("name", GPT)
def test_tensor_and_sequence_parallel_divides_everything_by_t(name):
    m = load_model(name)
    s, b, h, a, t = S, 1, m.hidden_size, m.num_heads, T
    assert act(m, sp=True) == pytest.approx(s * b * h / t * (34 + 5 * a * s / h), rel=REL)  # Eq. 3


@pytest.mark.parametrize("name", GPT)
def test_selective_recompute_drops_the_attention_matrices(name):
    m = load_model(name)
    s, b, h, t = S, 1, m.hidden_size, T
    assert act(m, recompute="selective") == pytest.approx(s * b * h * (10 + 24 / t), rel=REL)
    assert act(m, sp=True, recompute="selective") == pytest.approx(34 * s * b * h / t, rel=REL)


@pytest.mark.parametrize("name", GPT)
def test_full_recompute_keeps_2sbh(name):
    m = load_model(name)
    assert act(m, recompute="full") == 2 * S * m.hidden_size
    assert act(m, recompute="full", sp=True) == 2 * S * m.hidden_size / T


def test_selective_recompute_saves_about_70_percent_on_gpt3_175b():
    # Korthikanti §5 / Playbook: selective recompute cuts GPT-3 activation memory by ~70 % (TP + SP).
    m = load_model("gpt3-175b")
    saving = 1 - act(m, sp=True, recompute="selective") / act(m, sp=True)
    assert saving == pytest.approx(0.70, abs=0.03)


def test_output_layer_is_4sbh_over_t_times_1_plus_v_over_h():
    # Korthikanti §4.3 (with SP): final-norm input + head input + fp32 logits = 4sbh/t·(1 + V/h)
    m = load_model("gpt3-175b")
    s, b, h, V, t = S, 2, m.hidden_size, m.vocab_size, T
    got = float(head_activation_bytes(m, TR, tp=t, cp=1, micro_batch_size=b, sequence_parallel=True))
    assert got == pytest.approx(4 * s * b * h / t * (1 + V / h), rel=REL)


def test_fused_cross_entropy_removes_the_fp32_logits():
    m = load_model("llama3-8b")
    tr = Training(seq_length=8192, global_batch_size=1)
    fused = Training(seq_length=8192, global_batch_size=1, cross_entropy="fused")
    kw = dict(tp=1, cp=1, micro_batch_size=1, sequence_parallel=False)
    diff = float(head_activation_bytes(m, tr, **kw) - head_activation_bytes(m, fused, **kw))
    assert diff == 4 * 8192 * m.vocab_size


def test_weight_gradient_share_is_zero_bubble_32sbh_for_gpt():
    # sail-sg zero-bubble runtime: W frees M_W = 32·s·b·h per GPT layer (no parallelism)
    m = load_model("gpt3-175b")
    got = float(layer_weight_grad_bytes(m, TR, tp=1, cp=1, micro_batch_size=1, sequence_parallel=False))
    assert got == 32 * S * m.hidden_size


def test_llama_layer_is_s_b_8h_4q_4kv_6f_with_flash():
    # formulas.md §3.4 Llama-style layer, plus RMSNorm's fp32 rstd (2 norms × 4 bytes per token)
    m = load_model("llama3-8b")
    tr = Training(seq_length=8192, global_batch_size=1)
    s, h, q, kv, f = 8192, m.hidden_size, m.q_size, m.kv_size, m.ffn_hidden_size
    lse = 4 * s * m.num_heads
    assert act(m, tp=1, training=tr) == s * (8 * h + 4 * q + 4 * kv + 6 * f) + 8 * s + lse


def test_context_parallel_divides_token_terms_by_cp():
    m = load_model("llama3-70b")
    tr = Training(seq_length=32768, global_batch_size=1)
    assert act(m, tp=8, sp=True, cp=4, training=tr) == pytest.approx(act(m, tp=8, sp=True, training=tr) / 4)


def test_vectorised_over_tp_cp_and_micro_batch():
    m = load_model("llama3-70b")
    tr = Training(seq_length=8192, global_batch_size=64)
    tp, cp, b = np.array([1, 2, 4, 8]), np.array([1, 2, 1, 2]), np.array([1, 1, 2, 4])
    got = layer_activation_bytes(m, tr, tp=tp, cp=cp, micro_batch_size=b, sequence_parallel=True, recompute="none")
    one = [act(m, tp=int(t), cp=int(c), b=int(bb), sp=True, training=tr) for t, c, bb in zip(tp, cp, b)]
    assert got.shape == (4,)
    np.testing.assert_allclose(got, one)


def test_moe_routed_tokens_scale_with_top_k_and_capacity():
    assert float(routed_tokens(tokens=1000, experts_per_token=2, load_factor=1.0)) == 2000
    assert float(routed_tokens(tokens=1000, experts_per_token=2, load_factor=1.25)) == 2500


@pytest.mark.parametrize("probs, h_copies", [("hidden", 2), ("activation", 1)])
def test_moe_layer_stores_k_times_the_expert_activations_of_a_dense_layer_with_f_e(probs, h_copies):
    # A top-k MoE layer without shared experts processes k·T routed tokens through experts of width f_e;
    # against a dense layer with f = f_e, the difference is (k − 1)·3·e·T·f_e (GLU intermediates) plus
    # the routed-token copies k·e·T·h (dispatch), k·e·T·h more when the router's probabilities weight an h-wide
    # tensor (the combine), and fp32 router probabilities 4·T·E.
    from dataclasses import replace

    moe = ModelSpec(hidden_size=512, num_layers=2, num_heads=8, num_kv_heads=2, ffn_hidden_size=1024,
                    vocab_size=1000, num_experts=8, experts_per_token=2, moe_ffn_hidden_size=256)
    dense = moe.with_(num_experts=0, experts_per_token=0, moe_ffn_hidden_size=0, ffn_hidden_size=256)
    tr = Training(seq_length=1024, global_batch_size=1)
    tr = replace(tr, stack=replace(tr.stack, moe_router_probs=probs))
    Tk, e, h, fe, k, E = 1024, 2, 512, 256, 2, 8
    diff = act(moe, tp=1, training=tr, moe=True) - act(dense, tp=1, training=tr)
    assert diff == (k - 1) * 3 * e * Tk * fe + k * h_copies * e * Tk * h + 4 * Tk * E
