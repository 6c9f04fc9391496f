"""Activation memory per layer per micro-batch (bytes): Korthikanti et al. 2022 generalised.

Notation: T = b·s/c tokens of one micro-batch on one rank (c = context-parallel degree), h hidden,
q = n_h·d_h query width, k_w / v_w key / value widths (GQA: n_kv·d_h; MLA: n_h·(d_nope + d_rope) and
n_h·d_v), o_w attention-output width, f FFN width, a heads, t tensor-parallel degree, t_s = t with
sequence parallelism else 1, e bytes per activation element (2 for bf16/fp16/fp8, 4 for fp32).

Implementation followed: Megatron-LM / Megatron-Core with fused kernels (the accounting of Korthikanti
et al. 2022 §4, and formulas.md §3.4 for Llama-style layers):
- a norm stores its input (e·T·h/t_s) and fp32 statistics (rstd, + mean for LayerNorm);
- the QKV GEMM stores its input; RoPE is fused (stores only cos/sin tables); core attention stores
  Q, K, V (post-RoPE, with GQA's n_kv heads — no repeat_kv copy), and either the output O and an
  fp32 log-sum-exp (FlashAttention) or the a·s² softmax output (+ dropout mask and output) (no flash);
  the output projection stores O (same tensor);
- the MLP stores its input; SwiGLU/GeGLU is one fused kernel storing its 2f-wide input (gate and up);
  the down projection stores its f-wide input; GeLU MLPs store the GeLU input and the fc2 input;
- dropout (if on) stores 1-byte masks after attention and MLP (and on the attention probabilities
  without FlashAttention).
This matches Korthikanti's Table 2 exactly for GPT (34·s·b·h + 5·a·s²·b without parallelism).
Other implementations store more (e.g. Hugging Face's Llama keeps fp32 RMSNorm intermediates, a
repeat_kv copy of K/V and unfused SwiGLU intermediates); docs/memory.md gives the measured errors.

All functions broadcast over numpy arrays of tp, cp, micro_batch_size; categorical settings
(recompute, sequence_parallel, flash_attention, dropout) are scalars.
"""
from __future__ import annotations

import numpy as np

from ..spec.model import ModelSpec
from ..spec.training import Training


def _f(x):
    return np.asarray(x, dtype=float)


# ---- widths of a layer ----------------------------------------------------------------------------
def attention_widths(model: ModelSpec) -> dict[str, int]:
    """Widths of the tensors core attention stores: q, k, v, o (output), heads.

    GQA/MHA: q = n_h·d_h, k = v = n_kv·d_h, o = q. MLA (DeepSeek-V2 §2.1): q = k = n_h·(d_nope + d_rope),
    v = o = n_h·d_v.
    """
    if model.is_mla:
        qk = model.num_heads * (model.qk_nope_head_dim + model.qk_rope_head_dim)
        v = model.num_heads * model.v_head_dim
        return {"q": qk, "k": qk, "v": v, "o": v, "heads": model.num_heads}
    return {"q": model.q_size, "k": model.kv_size, "v": model.kv_size, "o": model.q_size,
            "heads": model.num_heads}


# ---- terms (bytes per micro-batch per layer) -------------------------------------------------------
def norm_bytes(*, tokens, hidden: int, e: int, t_s, layernorm: bool) -> np.ndarray:
    """One norm: its input e·T·h/t_s plus fp32 statistics 4·T/t_s (RMSNorm rstd) or 8·T/t_s (LayerNorm
    mean and rstd). Korthikanti §4.1 counts the input (2sbh per LayerNorm) and neglects the statistics."""
    return _f(tokens) / t_s * (e * hidden + (8 if layernorm else 4))


def qkv_input_bytes(*, tokens, hidden: int, e: int, t_s) -> np.ndarray:
    """Input of the QKV projection (the norm output), e·T·h/t_s. Korthikanti §4.1 ("QKV input 2sbh")."""
    return e * hidden * _f(tokens) / t_s


def mla_latent_bytes(model: ModelSpec, *, tokens, e: int) -> np.ndarray:
    """MLA latents stored for backward (replicated over TP): the q and kv latent-norm inputs and the
    up-projection inputs, e·T·(2·r_q + 2·r_kv) + the decoupled RoPE key e·T·d_r [derived from the
    DeepSeek-V2 §2.1 dataflow: c_q -> norm -> W_uq, c_kv -> norm -> W_ukv]."""
    if not model.is_mla:
        return np.zeros_like(_f(tokens))
    return e * _f(tokens) * (2 * model.q_lora_rank + 2 * model.kv_lora_rank + model.qk_rope_head_dim)


def qkv_bytes(*, tokens, q: int, k: int, v: int, e: int, t) -> np.ndarray:
    """Q, K, V kept by core attention: e·T·(q + k + v)/t. Korthikanti §4.1 (Q, K 4sbh; V 2sbh), GQA:
    k = v = n_kv·d_h (formulas.md §3.4)."""
    return e * (q + k + v) * _f(tokens) / t


def attention_scores_bytes(*, tokens, seq_kv, heads: int, e: int, t, dropout: bool) -> np.ndarray:
    """Materialised attention matrices (no FlashAttention): softmax output e·a·T·s_kv/t, plus with
    dropout its 1-byte mask and e-byte output: (2e + 1)·a·T·s_kv/t → 5·a·s²·b for e = 2
    (Korthikanti §4.1). s_kv is the full key length (each CP rank's queries see all keys)."""
    per = (2 * e + 1) if dropout else e
    return per * heads * _f(tokens) * _f(seq_kv) / t


def flash_lse_bytes(*, tokens, heads: int, t) -> np.ndarray:
    """FlashAttention's fp32 log-sum-exp per query row and head: 4·T·a/t (Dao et al. 2022, Alg. 2)."""
    return 4.0 * heads * _f(tokens) / t


def attention_output_bytes(*, tokens, o: int, e: int, t) -> np.ndarray:
    """Attention output O, the input of the output projection: e·T·o/t (Korthikanti "2sbh")."""
    return e * o * _f(tokens) / t


def dropout_mask_bytes(*, tokens, hidden: int, t_s, dropout: bool) -> np.ndarray:
    """1-byte dropout mask after the attention or MLP block: T·h/t_s (Korthikanti "sbh")."""
    return (hidden * _f(tokens) / t_s) if dropout else np.zeros_like(_f(tokens))


def glu_elements_bytes(e: int, glu: bool, glu_input_bytes=None) -> float:
    """Bytes an FFN keeps per element of its width f between its two GEMMs: GLU (fused SwiGLU/GeGLU, Megatron
    `bias_swiglu`) its 2f-wide input at g bytes + the f-wide down-projection input at e, 2·g + e (g = e, or 1 when
    the SwiGLU keeps its input as a plain FP8 cast: Megatron-Core activation_func_fp8_input_store,
    fused_bias_swiglu.py `input.to(torch.float8_e4m3fn)`); GeLU: its input + fc2's, 2·e."""
    g = e if glu_input_bytes is None else glu_input_bytes
    return 2 * g + e if glu else 2 * e


def mlp_bytes(*, tokens, hidden: int, ffn: int, e: int, t, t_s, glu: bool, glu_input_bytes=None) -> np.ndarray:
    """MLP stored tensors: input e·T·h/t_s, then the FFN width's `glu_elements_bytes` per element: 3·e·T·f/t
    (GLU), 2·e·T·f/t (GeLU: Korthikanti §4.1: 2sbh + 8sbh + 8sbh at f = 4h)."""
    inter = glu_elements_bytes(e, glu, glu_input_bytes) * ffn * _f(tokens) / t
    return e * hidden * _f(tokens) / t_s + inter


def routed_tokens(*, tokens, experts_per_token: int, load_factor: float) -> np.ndarray:
    """Token copies processed by the experts of the busiest rank per MoE layer: ρ·k·T, ρ =
    Training.moe_load_factor: the capacity factor C (GShard/Switch: each expert gets C·k·T_group/E slots
    and a rank holds E/ep experts of an ep-rank group with T_group = ep·T, so ep cancels), or dropless the
    busiest rank's share over the uniform one (1: uniform routing)."""
    return experts_per_token * float(load_factor) * _f(tokens)


def moe_bytes(model: ModelSpec, *, tokens, e: int, t, t_s, load_factor: float, regroup=1.0,
              probs: str = "hidden", glu_input_bytes=None) -> np.ndarray:
    """MoE FFN stored tensors (Megatron-Core MoE with all-to-all dispatch; expert TP u, `regroup` = u/t):
    - input (norm output) e·T·h/t_s and fp32 router probabilities 4·T·E/t_s;
    - per routed token: the permuted token (expert input) e·h, the width's `glu_elements_bytes` per element of
      f_e/u (fused GLU input and down-projection input, 3·e), and, `probs` "hidden", an h-wide e-byte tensor kept
      for the probabilities' gradient: the expert output the combine weights (Megatron-Core before 0.13: unpermute
      with probs) or the token the dispatcher weights before the experts. `probs` "activation": the weighted
      SwiGLU multiplies its output by the permuted probabilities and keeps its input, the combine keeps nothing
      (Megatron-Core from 0.13, NVIDIA/Megatron-LM 2659630721 'Memory efficient token permutation'; experts.py
      weighted_bias_swiglu_impl);
    - shared experts on every token: the width's bytes per element of f_sh/t (3·e·T·f_sh/t).
    Routed token copies entering the experts on a rank: ρ·k·T·u/t (u = t: the dispatcher gathers the
    sequence-parallel shards, all T; flops.moe_ops), so the h-wide terms scale with u/t and the f_e-wide ones
    do not (ρ·k·T·(u/t)·f_e/u)."""
    glu = model.glu_matrices == 3
    T = _f(tokens)
    R = routed_tokens(tokens=T, experts_per_token=model.experts_per_token, load_factor=load_factor)
    inter = glu_elements_bytes(e, glu, glu_input_bytes)
    h_wide = 2 if probs == "hidden" else 1
    out = e * model.hidden_size * T / t_s + 4.0 * model.num_experts * T / t_s
    out = out + R * (h_wide * e * model.hidden_size * _f(regroup) + inter * model.moe_ffn_hidden_size / t)
    if model.shared_expert_ffn_hidden_size:
        out = out + inter * model.shared_expert_ffn_hidden_size * T / t
    return out


# ---- one layer -------------------------------------------------------------------------------------
def _regroup(t, etp):
    """u/t: the routed token copies on a rank over those with expert TP = TP (u = `etp`, None: t)."""
    return 1.0 if etp is None else _f(etp) / t


def _glu_input_bytes(training: Training):
    """Bytes per element the SwiGLU keeps of its input: 1 under the stack's activation_input_fp8, else None (e)."""
    return 1 if training.stack.activation_input_fp8 else None


def _moe_kw(training: Training) -> dict:
    """The stack's settings `moe_bytes` reads."""
    return dict(load_factor=training.moe_load_factor, probs=training.stack.moe_router_probs,
                glu_input_bytes=_glu_input_bytes(training))


def _setup(model: ModelSpec, training: Training, *, tp, cp, micro_batch_size, sequence_parallel: bool):
    t = _f(tp)
    t_s = t if sequence_parallel else np.ones_like(t)
    tokens = _f(micro_batch_size) * training.seq_length / _f(cp)
    return t, t_s, tokens, training.activation_bytes


def attention_block_bytes(model: ModelSpec, training: Training, *, tp, cp, micro_batch_size,
                          sequence_parallel: bool, recompute: str) -> np.ndarray:
    """Attention half of a layer without its norm: QKV input, (MLA latents), Q/K/V, scores or LSE, O,
    output dropout mask. Korthikanti §4.1 "11sbh + 5as²b" generalised to GQA/MLA and FlashAttention;
    selective recompute of the core attention (Stack.recompute_modules) drops the score terms (Korthikanti
    §5). Under flash-attn's unpadding (Stack.attention_padding "unpad") O is kept twice: the varlen kernel
    saves its output rows, the output projection the padded copy pad_input writes."""
    t, t_s, T, e = _setup(model, training, tp=tp, cp=cp, micro_batch_size=micro_batch_size,
                          sequence_parallel=sequence_parallel)
    w = attention_widths(model)
    h = model.hidden_size
    out = qkv_input_bytes(tokens=T, hidden=h, e=e, t_s=t_s) + mla_latent_bytes(model, tokens=T, e=e)
    out = out + qkv_bytes(tokens=T, q=w["q"], k=w["k"], v=w["v"], e=e, t=t)
    if training.flash_attention:
        out = out + flash_lse_bytes(tokens=T, heads=w["heads"], t=t)
    elif recompute == "none" or "core_attn" not in training.stack.recompute_modules:
        s_kv = _f(micro_batch_size) * 0 + training.seq_length
        out = out + attention_scores_bytes(tokens=T, seq_kv=s_kv, heads=w["heads"], e=e, t=t,
                                           dropout=training.dropout)
    out = out + attention_output_bytes(tokens=T, o=w["o"], e=e, t=t)
    if training.flash_attention and training.stack.attention_padding == "unpad":
        out = out + attention_output_bytes(tokens=T, o=w["o"], e=e, t=t)  # pad_input's copy (cost/padding_ops.py)
    return out + dropout_mask_bytes(tokens=T, hidden=h, t_s=t_s, dropout=training.dropout)


def layer_activation_bytes(model: ModelSpec, training: Training, *, tp, cp, micro_batch_size,
                           sequence_parallel: bool, recompute: str, moe: bool = False, etp=None) -> np.ndarray:
    """Bytes one layer keeps for backward per micro-batch, before pipeline/in-flight multiplication.

    recompute 'none'/'selective': norms + attention block + MLP (dense or MoE) + dropout masks
      GPT, no parallelism: s·b·h·(34 + 5·a·s/h)            (Korthikanti Eq. 1)
      TP:                   s·b·h·(10 + 24/t + 5·a·s/(h·t))  (Eq. 2); TP+SP: ÷ t (Eq. 3)
      selective:            the 5·a·s/h term removed         (Table 2), less the bytes the stack's other
                            recompute_modules free (`module_recompute_bytes`; Megatron-Core --recompute-modules)
      Llama-style (flash):  s·b·(8h + 4q + 4kv + 6f)         (formulas.md §3.4) + small fp32 stats
      + what the stack's unfused elementwise code keeps beyond that (`stack_saved_extra_bytes`)
    recompute 'full': only the layer input e·T·h/t_s (Korthikanti Table 2, "2sbh"); the working set of
      one recomputed layer is added once per stage by `stage_activation_bytes`.
    recompute 'op': `op_sac_bytes` (torchtitan's op-level selective AC), with the same working set.
    `etp`: the routed experts' tensor-parallel degree (None: tp; `moe_bytes`).
    FP8 training under Transformer Engine: its GEMMs keep their FP8 inputs (memory/fp8_saved.py).
    """
    from .fp8_saved import fp8_saved_delta_bytes

    t, t_s, T, e = _setup(model, training, tp=tp, cp=cp, micro_batch_size=micro_batch_size,
                          sequence_parallel=sequence_parallel)
    h = model.hidden_size
    if recompute == "full":
        return e * h * T / t_s
    if recompute == "op":
        return op_sac_bytes(model, training, tokens=T, e=e, t=t, t_s=t_s)
    ln = model.norm == "layernorm"
    out = model.norms_per_layer * norm_bytes(tokens=T, hidden=h, e=e, t_s=t_s, layernorm=ln)
    out = out + attention_block_bytes(model, training, tp=tp, cp=cp, micro_batch_size=micro_batch_size,
                                      sequence_parallel=sequence_parallel, recompute=recompute)
    if moe and model.is_moe:
        out = out + moe_bytes(model, tokens=T, e=e, t=t, t_s=t_s, regroup=_regroup(t, etp), **_moe_kw(training))
    else:
        out = out + mlp_bytes(tokens=T, hidden=h, ffn=model.ffn_hidden_size, e=e, t=t, t_s=t_s,
                              glu=model.glu_matrices == 3, glu_input_bytes=_glu_input_bytes(training))
    out = out + stack_saved_extra_bytes(model, training, tp=tp, cp=cp, micro_batch_size=micro_batch_size,
                                        sequence_parallel=sequence_parallel, recompute=recompute, moe=moe, etp=etp)
    out = out + fp8_saved_delta_bytes(model, training, tp=tp, cp=cp, micro_batch_size=micro_batch_size,
                                      sequence_parallel=sequence_parallel, recompute=recompute, moe=moe, etp=etp)
    if recompute == "selective":
        out = out - module_recompute_bytes(model, training, tp=tp, cp=cp, micro_batch_size=micro_batch_size,
                                           sequence_parallel=sequence_parallel, moe=moe, etp=etp)
    return out + dropout_mask_bytes(tokens=T, hidden=h, t_s=t_s, dropout=training.dropout)


def module_recompute_bytes(model: ModelSpec, training: Training, *, tp, cp, micro_batch_size, sequence_parallel: bool,
                           moe: bool = False, etp=None) -> np.ndarray:
    """Bytes of one layer that selective recompute of the stack's modules besides core_attn (Stack.recompute_modules;
    Megatron-Core --recompute-modules, NVIDIA/Megatron-LM d98e8a6) frees after the forward and re-creates in the
    backward, of the terms `layer_activation_bytes` keeps with none:
      layernorm       the output of each norm that is a module of its own (transformer_layer.py: not an IdentityOp
                      under the TE spec): an MLA layer's input norm (the QKV input, e·T·h/t_s) and an MoE layer's
                      pre-MLP norm (the MoE input, e·T·h/t_s); output-discarding (CheckpointWithoutOutput);
      mla_up_proj     Q, K, V (`qkv_bytes`) and the up-projections' inputs, the latent norms' outputs e·T·(r_q + r_kv)
                      (multi_latent_attention.py: the checkpoint keeps the compressed latents and the RoPE key);
      mlp             a dense layer's MLP but for its input (the residual stream the norm keeps): `mlp_bytes`;
      moe             an MoE layer's MoE block but for its input: `moe_bytes` less e·T·h/t_s;
      shared_experts  the shared experts' intermediates, c·T·f_sh/t (c: `glu_elements_bytes`, 3·e for a GLU);
      moe_act         the routed experts' activation outputs, the down-projections' inputs ρ·k·T·e·f_e/t.
    The same bytes are the layer's working set when its backward re-creates them (memory/breakdown.py)."""
    t, t_s, T, e = _setup(model, training, tp=tp, cp=cp, micro_batch_size=micro_batch_size,
                          sequence_parallel=sequence_parallel)
    m = set(training.stack.recompute_modules)
    h = model.hidden_size
    out = np.zeros(np.broadcast_shapes(np.shape(t), np.shape(T)))
    is_moe = moe and model.is_moe
    if "layernorm" in m:
        out = out + qkv_input_bytes(tokens=T, hidden=h, e=e, t_s=t_s) * model.is_mla
        out = out + qkv_input_bytes(tokens=T, hidden=h, e=e, t_s=t_s) * is_moe
    if "mla_up_proj" in m and model.is_mla:
        w = attention_widths(model)
        out = out + qkv_bytes(tokens=T, q=w["q"], k=w["k"], v=w["v"], e=e, t=t)
        out = out + e * T * (model.q_lora_rank + model.kv_lora_rank)
    if not is_moe:
        if "mlp" in m:
            out = out + mlp_bytes(tokens=T, hidden=h, ffn=model.ffn_hidden_size, e=e, t=t, t_s=t_s,
                                  glu=model.glu_matrices == 3, glu_input_bytes=_glu_input_bytes(training))
        return out
    if "moe" in m:
        kept = moe_bytes(model, tokens=T, e=e, t=t, t_s=t_s, regroup=_regroup(t, etp), **_moe_kw(training))
        return out + kept - e * h * T / t_s
    c = glu_elements_bytes(e, model.glu_matrices == 3, _glu_input_bytes(training))
    if "shared_experts" in m:
        out = out + c * model.shared_expert_ffn_hidden_size * T / t
    if "moe_act" in m:
        R = routed_tokens(tokens=T, experts_per_token=model.experts_per_token, load_factor=training.moe_load_factor)
        out = out + e * model.moe_ffn_hidden_size * R / t
    return out


def stack_saved_extra_bytes(model: ModelSpec, training: Training, *, tp, cp, micro_batch_size,
                            sequence_parallel: bool, recompute: str, moe: bool = False, etp=None) -> np.ndarray:
    """Bytes a layer keeps for backward beyond the fused layer the formulas above describe, under its stack's
    elementwise code (Stack.elementwise, cost/elementwise.py `saved_bytes`): what the stack's backward reads
    from its forward, less what the fused (Megatron-LM / Transformer Engine) layer's does. transformers'
    LlamaDecoderLayer ("hf"): its RMSNorms keep the fp32 input (+4 bytes per element each) and its unfused
    SwiGLU silu(gate) (+e per FFN element), exact against the bytes torch saves for that layer on CPU
    (tests/test_activations_torch.py); torchtitan ("eager"): the unfused SwiGLU's silu(gate). 0 for fused
    stacks, for compiled ones (Inductor's min-cut partitioner recomputes the elementwise intermediates:
    torch/_functorch/partitioners.py, the default for torch.compile) and for recompute 'full' and 'op'
    (they keep the layer input or the policy's outputs; their recomputed layer is evaluated as 'none').
    Selective recompute re-runs the core attention: its tensors are left out."""
    from ..cost.elementwise import layer_graph, layer_sizes, saved_bytes

    zeros = np.zeros_like(_f(tp) * _f(cp) * _f(micro_batch_size))
    setting = training.stack.elementwise
    if setting == "fused" or training.stack.compiled or recompute not in ("none", "selective"):
        return zeros
    core = recompute == "none"
    kw = dict(moe=moe and model.is_moe, sequence_parallel=sequence_parallel)
    extra = (saved_bytes(layer_graph(model, training, setting=setting, **kw), core=core)
             - saved_bytes(layer_graph(model, training, setting="fused", **kw), core=core))
    sizes = layer_sizes(model, training, tp=tp, cp=cp, micro_batch_size=micro_batch_size, etp=etp, **kw)
    return zeros + extra.value(sizes)


def op_sac_bytes(model: ModelSpec, training: Training, *, tokens, e: int, t, t_s) -> np.ndarray:
    """Bytes a layer keeps under torchtitan's op-level selective activation checkpointing: the block's
    input and the outputs its policy saves (torchtitan/distributed/activation_checkpoint.py `_save_list`:
    SDPA and every other aten.mm; the rest is recomputed, cost/flops.py `recomputed_fraction`):
    input e·T·h/t_s; wq and wv outputs e·T·(q + kv)/t; SDPA's output and log-sum-exp e·T·q/t + 4·T·a/t
    (with FlashAttention); w1's output e·T·f/t; with a GLU, w2's (7th mm) output e·T·h, the row-parallel
    partial sum before its reduction, and with TP and SP the saved reduce-scatter output e·T·h/t_s.
    Dropout masks are recomputed (the RNG state is kept), not stored."""
    h, f, T = model.hidden_size, model.ffn_hidden_size, _f(tokens)
    out = e * T * h / t_s + e * T * (model.q_size + model.kv_size) / t + e * T * f / t
    if training.flash_attention:
        out = out + e * T * model.q_size / t + flash_lse_bytes(tokens=T, heads=model.num_heads, t=t)
    if model.glu_matrices == 3:
        out = out + e * T * h + np.where(np.asarray(t_s) > 1, e * T * h / t_s, 0.0)
    return out


def layer_weight_grad_bytes(model: ModelSpec, training: Training, *, tp, cp, micro_batch_size,
                            sequence_parallel: bool, moe: bool = False, etp=None) -> np.ndarray:
    """M_W: bytes one layer keeps from its B (input-gradient) pass until its W (weight-gradient) pass:
    for every GEMM its input X and its output gradient dY, e·T·(d_in + d_out) (column-parallel:
    input h/t_s, output /t; row-parallel: input /t, output gradient h). GPT without parallelism:
    2·s·b·(4h + 2h + 5h + 5h) = 32·s·b·h, the M_W of sail-sg/zero-bubble-pipeline-parallelism
    `zerobubble/runtime.py` (formulas.md §3.5)."""
    t, t_s, T, e = _setup(model, training, tp=tp, cp=cp, micro_batch_size=micro_batch_size,
                          sequence_parallel=sequence_parallel)
    w = attention_widths(model)
    h = model.hidden_size
    qkv = h / t_s + (w["q"] + w["k"] + w["v"]) / t
    o = w["o"] / t + h
    cf = model.glu_matrices
    if moe and model.is_moe:
        R = routed_tokens(tokens=T, experts_per_token=model.experts_per_token, load_factor=training.moe_load_factor)
        fe, fsh = model.moe_ffn_hidden_size, model.shared_expert_ffn_hidden_size
        ffn_tok = R * (2 * h * _regroup(t, etp) + cf * fe / t) / T  # (u/t)·R copies, f_e/u wide: moe_bytes
        ffn = ffn_tok + ((h / t_s + (cf - 1) * fsh / t + fsh / t + h) if fsh else 0.0)
    else:
        f = model.ffn_hidden_size
        ffn = h / t_s + (cf - 1) * f / t + f / t + h
    return e * T * (qkv + o + ffn)
