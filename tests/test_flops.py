"""FLOPs counts against independent truths.

- Closed forms: Narayanan et al. 2021 App. (72·B·s·l·h²(1 + s/6h + V/12lh), and 96·…·(1 + s/6h + V/16lh)
  with full recompute), the direct selective-recompute count (formulas.md §2.5 disagreement 2.a),
  Megatron-LM `num_floating_point_operations` (causal convention, GQA/SwiGLU/MoE/MLA).
- torch's own FLOP counter (`torch.utils.flop_counter.FlopCounterMode`) on real Hugging Face modules
  on CPU: matmul FLOPs must agree exactly, forward per op, backward split into input gradient (B) and
  weight gradient (W) by running the backward once with trainable and once with frozen weights.
- Published MFU figures (mosaicml/llm-foundry benchmark table, shared data published_runs.csv).
"""

import numpy as np
import pytest

from simulator.cost import flops as F
from simulator.errors import InputError
from simulator.spec.load import load_model
from simulator.spec.model import ModelSpec
from simulator.spec.training import Training


def gpt(h, l, a, V=51200, s=2048):
    """A Megatron GPT of Narayanan 2021 Table 1: MHA, f = 4h, GeLU, LayerNorm, biases, tied head."""
    return ModelSpec(name=f"gpt-{h}-{l}", hidden_size=h, num_layers=l, num_heads=a, ffn_hidden_size=4 * h,
                     vocab_size=V, mlp="gelu", norm="layernorm", qkv_bias=True, out_bias=True, mlp_bias=True,
                     tie_word_embeddings=True, learned_position_embeddings=s)


# Narayanan et al. 2021 Table 1 configurations (h, l, heads) and one global batch each.
NARAYANAN = [(2304, 24, 24, 512), (4096, 36, 32, 512), (12288, 96, 96, 1536), (20480, 105, 128, 2240),
             (25600, 128, 160, 3072)]


# ---- closed forms ------------------------------------------------------------------------------------
@pytest.mark.parametrize("h,l,a,B", NARAYANAN)
def test_model_flops_equal_narayanan_closed_form_full_count(h, l, a, B):
    s, V = 2048, 51200
    tr = Training(seq_length=s, global_batch_size=B, attention_flops="full", flash_attention=False)
    model_flops, hw_flops = F.step_flops(gpt(h, l, a), tr, recompute="none")
    expected = 72 * B * s * l * h**2 * (1 + s / (6 * h) + V / (12 * l * h))  # Narayanan 2021 App., eq. (3)
    assert model_flops == pytest.approx(expected, rel=1e-12)
    assert hw_flops == pytest.approx(expected, rel=1e-12)  # no recompute, no flash: nothing extra executed


@pytest.mark.parametrize("h,l,a,B", NARAYANAN)
def test_full_recompute_hardware_flops_equal_narayanan_96_form(h, l, a, B):
    s, V = 2048, 51200
    tr = Training(seq_length=s, global_batch_size=B, attention_flops="full", flash_attention=False)
    model_flops, hw_flops = F.step_flops(gpt(h, l, a), tr, recompute="full")
    # one extra forward of every layer, not of the LM head (Narayanan 2021 App.)
    assert hw_flops == pytest.approx(96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h)), rel=1e-12)
    assert model_flops == pytest.approx(72 * B * s * l * h**2 * (1 + s / (6 * h) + V / (12 * l * h)), rel=1e-12)


def test_selective_recompute_adds_one_core_attention_forward():
    # Recomputing QKᵀ and A·V adds 4·b·s²·h per layer: 72·B·s·l·h²(1 + 2s/9h + V/12lh) (formulas.md §2.5,
    # disagreement 2.a: Korthikanti's printed (1 + s/3h + ...) does not follow from the op count).
    h, l, a, B = 12288, 96, 96, 1536
    s, V = 2048, 51200
    tr = Training(seq_length=s, global_batch_size=B, attention_flops="full", flash_attention=False)
    _, hw = F.step_flops(gpt(h, l, a), tr, recompute="selective")
    assert hw == pytest.approx(72 * B * s * l * h**2 * (1 + 2 * s / (9 * h) + V / (12 * l * h)), rel=1e-12)


def test_causal_convention_halves_only_the_attention_score_terms():
    h, l, a, B, s = 4096, 36, 32, 512, 2048
    full = F.step_flops(gpt(h, l, a), Training(seq_length=s, global_batch_size=B, attention_flops="full"))[0]
    causal = F.step_flops(gpt(h, l, a), Training(seq_length=s, global_batch_size=B, attention_flops="causal"))[0]
    # the s² part of 72·B·s·l·h²·(s/6h) = 12·B·s²·l·h is halved
    assert full - causal == pytest.approx(6 * B * s**2 * l * h, rel=1e-12)


def test_flash_attention_backward_recompute_counts_as_hardware_flops_only():
    h, l, a, B, s = 4096, 36, 32, 512, 2048
    no_flash = Training(seq_length=s, global_batch_size=B, attention_flops="full", flash_attention=False)
    flash = Training(seq_length=s, global_batch_size=B, attention_flops="full", flash_attention=True)
    m0, h0 = F.step_flops(gpt(h, l, a), no_flash)
    m1, h1 = F.step_flops(gpt(h, l, a), flash)
    assert m0 == m1  # model FLOPs do not depend on the kernel
    assert h1 - h0 == pytest.approx(2 * B * s**2 * h * l, rel=1e-12)  # one QKᵀ forward per layer (2·b·s²·h)


def megatron_flops(m: ModelSpec, B: int, s: int) -> float:
    """Megatron-LM `num_floating_point_operations` (training.py, commit 001b00c), written out for our
    ModelSpec fields: 3 (fwd, wgrad, dgrad) × 2 (FMA) × per-token GEMM sizes, causal s/2."""
    h, V = m.hidden_size, m.vocab_size
    n_moe = m.num_moe_layers
    n_dense = m.num_layers - n_moe
    c_f = m.glu_matrices
    if m.is_mla:
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q_term = m.q_lora_rank * (h + m.num_heads * qk + 1) if m.q_lora_rank else h * m.num_heads * qk
        attn = 6 * (q_term + m.kv_lora_rank * (h + m.num_heads * (m.qk_nope_head_dim + m.v_head_dim) + 1)
                    + h * m.qk_rope_head_dim + m.num_heads * m.v_head_dim * h
                    + s * m.num_heads * qk / 2 + s * m.num_heads * m.v_head_dim / 2)
    else:
        q, kv = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
        attn = 6 * (h * (q + 2 * kv) + q * s / 2 * 2 + q * h)
    mlp = 6 * h * (m.ffn_hidden_size * c_f * n_dense
                   + (m.moe_ffn_hidden_size * m.experts_per_token + m.shared_expert_ffn_hidden_size) * c_f * n_moe)
    return B * s * (mlp + attn * m.num_layers + 6 * h * V)


@pytest.mark.parametrize("name", ["llama3-70b", "llama3.1-405b", "mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b",
                                  "deepseek-v3"])
def test_causal_model_flops_equal_megatron_formula(name):
    m = load_model(name)
    tr = Training(seq_length=4096, global_batch_size=256)
    ours = F.step_flops(m, tr)[0]
    theirs = megatron_flops(m, 256, 4096)
    router = 6 * 256 * 4096 * m.hidden_size * m.num_experts * m.num_moe_layers  # Megatron omits the router GEMM
    # Megatron counts the MLA latent norms (+1 per rank) as GEMM columns: ~1e-6 relative; nothing else differs
    assert ours == pytest.approx(theirs + router, rel=1e-5 if m.is_mla else 1e-12)


# NVIDIA's published DGX-H100 pre-training rows of Megatron-Bridge (docs/performance-summary-archive.md at
# NVIDIA-NeMo/Megatron-Bridge 067f987, "25.09 NeMo Container"): (preset, sequence, MTP layers, model TFLOP/s/GPU,
# tokens/s/GPU), both integers as published
MBRIDGE_25_09_H100 = (("llama3-8b", 8192, 0, 725, 14079), ("llama3-70b", 8192, 0, 727, 1619),
                      ("llama3.1-405b", 8192, 0, 763, 302), ("deepseek-v3", 4096, 1, 338, 1297),
                      ("qwen3-30b-a3b", 4096, 0, 241, 10494), ("qwen3-235b-a22b", 4096, 0, 178, 1204))


@pytest.mark.parametrize("name,seq,mtp,tflops,tokens", MBRIDGE_25_09_H100)
def test_model_flops_per_token_match_nvidias_published_ratio(name, seq, mtp, tflops, tokens):
    """The table's model TFLOP/s over its tokens/s is its FLOP count per token (Megatron-Bridge's
    num_floating_point_operations, which leaves out the router GEMM); ours without the router agrees within the
    two integers' rounding and 0.25 % (MLA's and MTP's norm-sized terms, which the two counts book differently)."""
    from dataclasses import replace

    m = load_model(name)
    m = replace(m, mtp_layers=mtp) if mtp else m
    ours = F.step_flops(m, Training(seq_length=seq, global_batch_size=1))[0] / seq
    router = 6 * m.hidden_size * m.num_experts * (m.num_moe_layers + mtp) if m.is_moe else 0
    rounding = 0.5 / tflops + 0.5 / tokens
    assert (ours - router) / (tflops * 1e12 / tokens) == pytest.approx(1.0, abs=rounding + 0.0025)


def test_dense_gemm_flops_are_six_n_per_token_without_attention():
    # Kaplan 2020 §2.1: C ≈ 6·N per token for the matmul parameters (norms/biases/embedding excluded).
    m = load_model("llama3-8b")
    tr = Training(seq_length=1, global_batch_size=1, attention_flops="full")
    per_token = F.model_flops_per_token(m, tr)
    matmul_params = m.num_layers * (m.attention_params() + m.ffn_params()) + m.vocab_size * m.hidden_size
    attention = 12 * m.num_layers * m.q_size * 1  # 12·L·q·s with s = 1
    assert per_token == pytest.approx(6 * matmul_params + attention, rel=1e-12)


# ---- parallel splits -------------------------------------------------------------------------------
def _layer_total(model, tr, **kw):
    return F.sum_ops(F.layer_ops(model, tr, **kw))


def test_tensor_and_context_parallel_divide_dense_layer_flops():
    m = load_model("llama3-70b")
    tr = Training(seq_length=8192, global_batch_size=8)
    one = _layer_total(m, tr)
    for tp, cp in [(2, 1), (8, 1), (1, 4), (8, 2)]:
        part = _layer_total(m, tr, tp=tp, cp=cp)
        assert part.forward_flops * tp * cp == pytest.approx(one.forward_flops, rel=1e-12)
        assert part.wgrad_flops * tp * cp == pytest.approx(one.wgrad_flops, rel=1e-12)


def test_mla_down_projections_are_repeated_on_every_tp_rank_without_sequence_parallel():
    m = load_model("deepseek-v3")
    tr = Training(seq_length=4096, global_batch_size=8)
    T, h = 4096, m.hidden_size
    one = _layer_total(m, tr).forward_flops
    rep = 2 * T * h * (m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim)  # q_down + kv_down forward
    no_sp = _layer_total(m, tr, tp=8).forward_flops
    sp = _layer_total(m, tr, tp=8, sequence_parallel=True).forward_flops
    assert sp * 8 == pytest.approx(one, rel=1e-12)
    assert no_sp * 8 == pytest.approx(one + 7 * rep, rel=1e-12)


def test_expert_parallel_keeps_routed_flops_per_rank_and_grows_tokens_per_expert():
    m = load_model("mixtral-8x7b")
    tr = Training(seq_length=4096, global_batch_size=8)
    ops1 = {o.name: o for o in F.layer_ops(m, tr, moe=True, ep=1)}
    ops8 = {o.name: o for o in F.layer_ops(m, tr, moe=True, ep=8)}
    # 2·k·T·c_f·h·f_e routed forward FLOPs per rank regardless of ep (balanced routing)
    routed = 2 * 2 * 4096 * 3 * 4096 * 14336
    assert ops1["expert_up"].forward_flops + ops1["expert_down"].forward_flops == pytest.approx(routed)
    assert ops8["expert_up"].forward_flops + ops8["expert_down"].forward_flops == pytest.approx(routed)
    assert ops1["expert_up"].m == pytest.approx(2 * 4096 / 8)  # k·T/E tokens per expert
    assert ops8["expert_up"].m == pytest.approx(2 * 4096)  # k·T·e/E with one local expert
    capped = F.layer_ops(m, Training(seq_length=4096, global_batch_size=8, moe_capacity_factor=1.25), moe=True)
    assert sum(o.forward_flops for o in capped if o.name.startswith("expert")) == pytest.approx(1.25 * routed)


def test_layer_ops_broadcast_over_layout_arrays():
    m = load_model("qwen3-30b-a3b")
    tr = Training(seq_length=4096, global_batch_size=8)
    tp, cp, ep = np.array([1, 2, 4]), np.array([1, 1, 2]), np.array([1, 8, 16])
    vec = _layer_total(m, tr, moe=True, tp=tp, cp=cp, ep=ep, micro_batch_size=np.array([1, 2, 1]))
    for i in range(3):
        one = _layer_total(m, tr, moe=True, tp=int(tp[i]), cp=int(cp[i]), ep=int(ep[i]),
                           micro_batch_size=[1, 2, 1][i])
        assert vec.forward_flops[i] == pytest.approx(one.forward_flops, rel=1e-12)
        assert vec.dgrad_flops[i] == pytest.approx(one.dgrad_flops, rel=1e-12)


def test_bad_inputs_raise_input_error():
    m = load_model("llama3-8b")
    tr = Training(seq_length=128, global_batch_size=1)
    with pytest.raises(InputError, match="recompute"):
        F.step_flops(m, tr, recompute="some")
    with pytest.raises(InputError, match="attention_flops"):
        F.layer_ops(m, tr, attention_flops="half")
    with pytest.raises(InputError, match="no experts"):
        F.layer_ops(m, tr, moe=True)


# ---- MFU against published numbers ------------------------------------------------------------------
def test_mfu_reproduces_llm_foundry_table_for_short_sequences(shared_data):
    pd = pytest.importorskip("pandas")
    path = shared_data("published_runs.csv")
    runs = pd.read_csv(path)
    rows = runs[(runs.source_id == "LLMFOUNDRY") & (runs.gpu_type == "A100-SXM4-80GB")
                & runs.precision.str.contains("bf16")
                & (runs.seq_len <= 4096) & runs.mfu_pct.notna() & runs.tokens_per_s.notna()]
    assert len(rows) >= 5
    for r in rows.itertuples():
        # MPT: MHA, f = 4h, GeLU, LayerNorm, tied head (llm-foundry MPT configs)
        m = ModelSpec(hidden_size=int(r.hidden), num_layers=int(r.layers), num_heads=int(r.heads),
                      ffn_hidden_size=int(r.ffn_hidden), vocab_size=int(r.vocab), mlp="gelu", norm="layernorm",
                      tie_word_embeddings=True)
        tr = Training(seq_length=int(r.seq_len), global_batch_size=1, attention_flops="full")
        ours = float(F.mfu(F.model_flops_per_token(m, tr) * r.tokens_per_s, 1.0, int(r.n_gpus), 312e12))
        # llm-foundry's N (params_b) also holds the learned position table, biases and norm weights, which
        # do no matmul: 6 FLOPs per token per such parameter explain the whole difference.
        matmul_params = m.num_layers * (m.attention_params() + m.ffn_params()) + m.vocab_size * m.hidden_size
        extra = 6 * (r.params_b * 1e9 - matmul_params) * r.tokens_per_s / (int(r.n_gpus) * 312e12)
        assert 0 <= extra < 0.02  # a few 0.1 % of MFU at most
        # tolerance from the table's rounding: mfu_pct to 0.005 pp, params_b to ±0.5e6 parameters
        tol = 0.0051 + 100 * 6 * 0.5e6 * r.tokens_per_s / (int(r.n_gpus) * 312e12)
        assert 100 * (ours + extra) == pytest.approx(r.mfu_pct, abs=tol), r.run_id


def test_mfu_and_hfu_definitions():
    # PaLM App. B: MFU = model FLOPs/s / (chips · peak): 1e15 FLOPs in 2 s on 4 GPUs of 250 TFLOP/s = 0.5
    assert F.mfu(1e15, 2.0, 4, 250e12) == pytest.approx(0.5)
    assert F.hfu(1.2e15, 2.0, 4, 250e12) == pytest.approx(0.6)
    assert np.allclose(F.mfu(np.array([1e15, 2e15]), np.array([2.0, 2.0]), 4, 250e12), [0.5, 1.0])


# ---- torch FlopCounterMode on real modules -------------------------------------------------------------
def _tiny_training(s, b):
    return Training(seq_length=s, global_batch_size=b, attention_flops="full", flash_attention=False)


def _count(fn):
    """(total, per-module dict of totals) of matmul FLOPs torch counts while running fn()."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        out = fn()
    per_module = {k: sum(v.values()) for k, v in fc.get_flop_counts().items()}
    del torch
    return fc.get_total_flops(), per_module, out


def _forward_backward_split(module, make_input, forward):
    """Forward FLOPs, per-module forward FLOPs, B and W FLOPs as torch counts them.

    B: backward with frozen weights (only input gradients are computed); W = full backward − B.
    """
    torch = pytest.importorskip("torch")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):  # counted by FlopCounterMode; the CPU flash kernel is not
        x = make_input()
        fwd, per_module, out = _count(lambda: forward(module, x))
        grad = torch.ones_like(out)
        total_bwd, _, _ = _count(lambda: out.backward(grad))
        for p in module.parameters():
            p.requires_grad_(False)
        x = make_input()
        out = forward(module, x)
        dgrad, _, _ = _count(lambda: out.backward(grad))
        for p in module.parameters():
            p.requires_grad_(True)
    return fwd, per_module, dgrad, total_bwd - dgrad


def _init(module, seed=0):
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return module


def _ops_by_name(ops):
    return {o.name: o for o in ops}


def llama_layer_case():
    """LlamaDecoderLayer (GQA 8/2 heads, SwiGLU), b = 2, s = 24, math SDPA: torch counts and our op table."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    h, nh, nkv, f, b, s = 64, 8, 2, 176, 2, 24
    cfg = transformers.LlamaConfig(hidden_size=h, num_attention_heads=nh, num_key_value_heads=nkv, intermediate_size=f,
                                   num_hidden_layers=1, vocab_size=100)
    cfg._attn_implementation = "sdpa"
    layer = _init(LlamaDecoderLayer(cfg, 0))
    rope = LlamaRotaryEmbedding(cfg)
    pos = torch.arange(s)[None].expand(b, s)

    def forward(mod, x):
        out = mod(x, attention_mask=None, position_ids=pos, position_embeddings=rope(x, pos))
        return out[0] if isinstance(out, tuple) else out

    counts = _forward_backward_split(layer, lambda: torch.randn(b, s, h, requires_grad=True), forward)
    m = ModelSpec(hidden_size=h, num_layers=1, num_heads=nh, num_kv_heads=nkv, ffn_hidden_size=f, vocab_size=100)
    ops = F.layer_ops(m, _tiny_training(s, b), micro_batch_size=b)
    pre = "LlamaDecoderLayer."
    per_op = {"qkv_proj": [pre + "self_attn.q_proj", pre + "self_attn.k_proj", pre + "self_attn.v_proj"],
              "out_proj": [pre + "self_attn.o_proj"], "mlp_up": [pre + "mlp.gate_proj", pre + "mlp.up_proj"],
              "mlp_down": [pre + "mlp.down_proj"]}
    sdpa = counts[1][pre + "self_attn"] - sum(counts[1][pre + f"self_attn.{n}"]
                                              for n in ("q_proj", "k_proj", "v_proj", "o_proj"))
    return dict(name="LlamaDecoderLayer (GQA, SwiGLU)", counts=counts, ops=ops, per_op=per_op,
                extra={"attn_scores + attn_context": sdpa}, model=m, s=s, b=b)


def mixtral_moe_case():
    """MixtralSparseMoeBlock (E = 4, top-2, eager experts), b = 2, s = 16."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    h, f_e, E, k, b, s = 32, 48, 4, 2, 2, 16
    cfg = transformers.MixtralConfig(hidden_size=h, intermediate_size=f_e, num_local_experts=E, num_experts_per_tok=k,
                                     num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1, vocab_size=50)
    cfg._experts_implementation = "eager"
    block = _init(MixtralSparseMoeBlock(cfg), seed=1)

    def forward(mod, x):
        out = mod(x)
        return out[0] if isinstance(out, tuple) else out

    counts = _forward_backward_split(block, lambda: torch.randn(b, s, h, requires_grad=True), forward)
    m = ModelSpec(hidden_size=h, num_layers=1, num_heads=4, num_kv_heads=2, ffn_hidden_size=f_e, vocab_size=50,
                  num_experts=E, experts_per_token=k, moe_ffn_hidden_size=f_e)
    ops = F.moe_ops(m, seq_length=s, micro_batch_size=b)
    per_op = {"router": ["MixtralSparseMoeBlock.gate"]}
    routed = counts[1]["MixtralSparseMoeBlock.experts"]
    return dict(name="MixtralSparseMoeBlock (top-2 of 4)", counts=counts, ops=ops, per_op=per_op,
                extra={"expert_up + expert_down": routed})


def mla_case():
    """DeepseekV3Attention (MLA with q_lora, d_qk = 12 ≠ d_v = 10), b = 2, s = 16, math SDPA."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention, DeepseekV3RotaryEmbedding

    cfg = transformers.DeepseekV3Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=24,
                                        kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=10,
                                        num_hidden_layers=1, vocab_size=50, intermediate_size=96,
                                        moe_intermediate_size=16, n_routed_experts=4, num_experts_per_tok=2,
                                        n_group=1, topk_group=1)
    cfg._attn_implementation = "sdpa"
    attn = _init(DeepseekV3Attention(cfg, 0), seed=2)
    rope = DeepseekV3RotaryEmbedding(cfg)
    b, s = 2, 16
    pos = torch.arange(s)[None].expand(b, s)

    def forward(mod, x):
        return mod(x, position_embeddings=rope(x, pos), attention_mask=None)[0]

    counts = _forward_backward_split(attn, lambda: torch.randn(b, s, 64, requires_grad=True), forward)
    m = ModelSpec(hidden_size=64, num_layers=1, num_heads=4, ffn_hidden_size=96, vocab_size=50, q_lora_rank=24,
                  kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=10)
    ops = F.projection_ops(m, seq_length=s, micro_batch_size=b) + F.attention_ops(
        m, seq_length=s, micro_batch_size=b, attention_flops="full", flash_attention=False)
    pre = "DeepseekV3Attention."
    per_op = {"q_down": [pre + "q_a_proj"], "q_up": [pre + "q_b_proj"], "kv_down": [pre + "kv_a_proj_with_mqa"],
              "kv_up": [pre + "kv_b_proj"], "out_proj": [pre + "o_proj"]}
    return dict(name="DeepseekV3Attention (MLA)", counts=counts, ops=ops, per_op=per_op, extra={})


def lm_head_case():
    """LM head Linear(h, V) + cross-entropy, b = 2, s = 20."""
    torch = pytest.importorskip("torch")
    h, V, b, s = 48, 300, 2, 20
    head = _init(torch.nn.Linear(h, V, bias=False), seed=3)
    target = torch.randint(0, V, (b * s,), generator=torch.Generator().manual_seed(0))

    def forward(mod, x):
        return torch.nn.functional.cross_entropy(mod(x).view(b * s, V), target)

    counts = _forward_backward_split(head, lambda: torch.randn(b, s, h, requires_grad=True), forward)
    m = ModelSpec(hidden_size=h, num_layers=1, num_heads=4, ffn_hidden_size=64, vocab_size=V)
    return dict(name="LM head + cross-entropy", counts=counts,
                ops=F.head_ops(m, _tiny_training(s, b), micro_batch_size=b),
                per_op={}, extra={})


WHOLE_MODELS = {
    "llama": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=112, vocab_size=120, tie_word_embeddings=False),
    "deepseek_v3": dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                        intermediate_size=128, moe_intermediate_size=24, vocab_size=120, n_routed_experts=4,
                        n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1, q_lora_rank=24,
                        kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=10, n_group=2,
                        topk_group=1),
}


def whole_model_case(arch):
    """A whole tiny causal LM (embedding, layers with the MoE pattern, head, loss): one training step."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from simulator.spec.hf import model_from_hf

    cfg = transformers.AutoConfig.for_model(arch, **WHOLE_MODELS[arch])
    cfg._attn_implementation = "sdpa"
    cfg._experts_implementation = "eager"
    model = _init(transformers.AutoModelForCausalLM.from_config(cfg), seed=4)
    b, s = 2, 16
    ids = torch.randint(0, 120, (b, s), generator=torch.Generator().manual_seed(1))
    with sdpa_kernel(SDPBackend.MATH):
        total, _, _ = _count(lambda: model(input_ids=ids, labels=ids).loss.backward())
    spec = model_from_hf(dict(model_type=arch, **WHOLE_MODELS[arch]), name=arch, strict=False)
    # labels shift inside HF's loss: all s positions still go through the LM head matmul
    return total, F.step_flops(spec, _tiny_training(s, b))[0]


def test_llama_decoder_layer_matches_torch_flop_counter():
    c = llama_layer_case()
    fwd, per_module, dgrad, wgrad = c["counts"]
    by = _ops_by_name(c["ops"])
    for op, modules in c["per_op"].items():  # forward, op by op
        assert sum(per_module[mod] for mod in modules) == by[op].forward_flops, op
    sdpa = c["extra"]["attn_scores + attn_context"]
    assert sdpa == by["attn_scores"].forward_flops + by["attn_context"].forward_flops  # torch: full s², no halving
    causal = _ops_by_name(F.layer_ops(c["model"], Training(seq_length=c["s"], global_batch_size=c["b"]),
                                      micro_batch_size=c["b"]))
    assert sdpa == 2 * (causal["attn_scores"].forward_flops + causal["attn_context"].forward_flops)
    t = F.sum_ops(c["ops"])
    assert fwd == t.forward_flops
    assert dgrad == t.dgrad_flops  # includes the whole attention backward (2× its forward)
    assert wgrad == t.wgrad_flops


def test_mixtral_sparse_moe_block_matches_torch_flop_counter():
    c = mixtral_moe_case()
    fwd, per_module, dgrad, wgrad = c["counts"]
    by = _ops_by_name(c["ops"])
    assert per_module["MixtralSparseMoeBlock.gate"] == by["router"].forward_flops
    # dropless routing: Σ over experts of tokens routed = k·T whatever the router chose
    assert c["extra"]["expert_up + expert_down"] == by["expert_up"].forward_flops + by["expert_down"].forward_flops
    t = F.sum_ops(c["ops"])
    assert (fwd, dgrad, wgrad) == (t.forward_flops, t.dgrad_flops, t.wgrad_flops)


def test_deepseek_v3_mla_attention_matches_torch_flop_counter():
    c = mla_case()
    fwd, per_module, dgrad, wgrad = c["counts"]
    by = _ops_by_name(c["ops"])
    for op, modules in c["per_op"].items():
        assert sum(per_module[mod] for mod in modules) == by[op].forward_flops, op
    t = F.sum_ops(c["ops"])
    assert (fwd, dgrad, wgrad) == (t.forward_flops, t.dgrad_flops, t.wgrad_flops)


def test_lm_head_and_loss_match_torch_flop_counter():
    c = lm_head_case()
    fwd, _, dgrad, wgrad = c["counts"]
    t = F.sum_ops(c["ops"])
    assert (fwd, dgrad, wgrad) == (t.forward_flops, t.dgrad_flops, t.wgrad_flops)  # cross-entropy: no matmuls


@pytest.mark.parametrize("arch", ["llama", "deepseek_v3"])
def test_whole_causal_lm_step_matches_torch_flop_counter(arch):
    torch_total, ours = whole_model_case(arch)
    assert torch_total == ours


def agreement_table() -> str:
    """Markdown table: torch FlopCounterMode vs parasim, per op (forward) and per pass (F, B, W).

    Used for docs/compute.md: `python tests/test_flops.py`.
    """
    lines = ["| module | quantity | torch FlopCounterMode | parasim | equal |", "|---|---|---:|---:|:-:|"]
    for case in (llama_layer_case(), mixtral_moe_case(), mla_case(), lm_head_case()):
        fwd, per_module, dgrad, wgrad = case["counts"]
        by = _ops_by_name(case["ops"])
        rows = [(f"forward {op}", sum(per_module[m] for m in mods), by[op].forward_flops)
                for op, mods in case["per_op"].items()]
        for label, value in case["extra"].items():
            ours = sum(by[n.strip()].forward_flops for n in label.split("+"))
            rows.append((f"forward {label}", value, ours))
        t = F.sum_ops(case["ops"])
        rows += [("forward (total)", fwd, t.forward_flops), ("B: input gradient", dgrad, t.dgrad_flops),
                 ("W: weight gradient", wgrad, t.wgrad_flops)]
        for q, a, b in rows:
            lines.append(f"| {case['name']} | {q} | {int(a):,} | {int(b):,} | {'yes' if a == b else 'NO'} |")
    for arch in WHOLE_MODELS:
        a, b = whole_model_case(arch)
        lines.append(f"| whole tiny {arch} CausalLM, one step | F + B + W | {int(a):,} | {int(b):,} | "
                     f"{'yes' if a == b else 'NO'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(agreement_table())
