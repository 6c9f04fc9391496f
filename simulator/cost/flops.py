"""FLOPs per op, per layer, per microbatch and per step: forward, input-gradient (B) and weight-gradient (W).

Notation (formulas.md §0): b micro-batch size, s sequence length, h hidden size, n_h / n_kv query / KV
heads, d_h head dim, q = n_h·d_h, kv = n_kv·d_h, f FFN size, c_f matrices per FFN (3 SwiGLU/GeGLU, 2
GeLU), V vocabulary, E / k routed experts / experts per token, f_e / f_sh routed / shared expert FFN
size, r_q / r_kv MLA low ranks, d_n / d_r / d_v MLA no-rope / rope / value head dims; t, c, e the TP, CP
and EP degrees. T = b·s/c is the number of tokens one rank holds.

Conventions (one place, every function below follows them):
- A GEMM (m×k)·(k×n) costs 2·m·n·k FLOPs (one multiply + one add per MAC). Its input gradient
  (dgrad, B) and its weight gradient (wgrad, W) are each one GEMM of the same size: 2·m·n·k each
  (Narayanan et al. 2021 App.; Megatron `num_floating_point_operations`: "3x: forward, wgrad, dgrad").
- Core attention (QKᵀ and A·V) has no weights: its whole backward (dQ, dK from QKᵀ; dA, dV from A·V:
  2× forward) is input gradient and lands in B; none in W (formulas.md §5.2; ZB paper Table 1).
- Causal convention (`attention_flops`, formulas.md §2.4): "causal" (default, Megatron-LM current)
  counts s/2 keys per query for QKᵀ and A·V; "full" (PaLM App. B, Narayanan 2021, torchtitan,
  torch's FlopCounterMode on the math SDPA backend) counts all s keys.
- FlashAttention's backward recomputes QKᵀ inside the kernel: one extra QKᵀ forward. It is a
  *hardware* FLOP, never a model FLOP (formulas.md §2.4/§2.6: the FA benchmark's 2.5× backward).
  It is reported separately as `backward_recompute_flops` and included in hardware FLOPs / HFU.
- Tensor parallelism (Megatron, Shoeybi et al. 2019): heads and FFN columns are split by t; the LM
  head by vocabulary (V/t). Replicated small GEMMs (MoE router, MLA down-projections, which Megatron-
  Core runs as duplicated `TELinear`) run on T/t tokens with sequence parallelism and on all T tokens
  without it (each TP rank repeats them).
- Context parallelism (ring attention): each rank holds s/c queries that attend to all s keys, so
  core-attention FLOPs per rank are the single-rank FLOPs ÷ c (load-balanced causal split).
- Expert parallelism with expert-TP = u (Megatron-Core `expert_tensor_parallel_size`, default t): the
  expert layers regroup a stage's t·c·d ranks as u × e × expert-dp, so an expert group of u·e ranks holds
  the distinct tokens of u·e/t ranks' micro-batches. With balanced routing each rank receives k·T·u/t
  token-expert assignments for its E/e experts (k·T·(u/t)·e/E tokens per expert), each expert GEMM split
  u-ways (u = t: k·T assignments, each GEMM split t-ways). The FLOPs per rank depend on neither e nor u;
  the GEMM shapes (hence efficiency) do. With a capacity factor C > 0 every expert computes exactly its
  C·k·T·e/E slots (padded, GShard/Switch): executed routed FLOPs ×C; model FLOPs keep k (dropless).
- Embedding lookups have no FLOPs. The loss (softmax cross-entropy) and all norms/activations are
  memory-bound ops: their time comes from bytes (cost/compute.py), their FLOPs are not counted here,
  as in Megatron, PaLM and torch's FlopCounterMode (which counts matmuls only).

Model FLOPs (MFU) count forward + backward of the model once, no recomputation, with the causal
convention of `training.attention_flops`. Hardware FLOPs (HFU) add the recompute forward and
FlashAttention's internal QKᵀ recompute, and capacity-factor padding (PaLM App. B definitions).

Vectorisation: every numeric layout argument (tp, cp, ep, micro_batch_size) may be a numpy array;
results broadcast. Categorical arguments (sequence_parallel, conventions) are scalars.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..spec.model import ModelSpec
from ..spec.training import ATTENTION_FLOP_CONVENTIONS, Training
from .window import mean_fraction
from .recompute import RECOMPUTE_MODES, recompute_forward_flops, recomputed_fraction  # noqa: F401 (re-exported)

__all__ = [
    "LayerOp",
    "FlopTotals",
    "gemm_flops",
    "causal_fraction",
    "attention_ops",
    "projection_ops",
    "dense_mlp_ops",
    "moe_ops",
    "layer_ops",
    "head_ops",
    "sum_ops",
    "recompute_forward_flops",
    "recomputed_fraction",
    "model_flops_per_sequence",
    "step_flops",
    "model_flops_per_token",
    "mfu",
    "hfu",
]


def gemm_flops(m, n, k):
    """FLOPs of one GEMM (m×k)·(k×n): 2·m·n·k (a multiply and an add per MAC; Narayanan 2021 App.)."""
    return 2.0 * m * n * k


def causal_fraction(attention_flops: str) -> float:
    """Share of the s² score matrix counted: 1/2 for "causal" (Megatron-current), 1 for "full" (PaLM).

    formulas.md §2.4: Megatron `training.py` "causal mask (only half of the mask is non-zero)".
    """
    if attention_flops not in ATTENTION_FLOP_CONVENTIONS:
        raise InputError(f"attention_flops must be one of {', '.join(ATTENTION_FLOP_CONVENTIONS)}, "
                         f"got {attention_flops!r}")
    return 0.5 if attention_flops == "causal" else 1.0


@dataclass(frozen=True, kw_only=True)
class LayerOp:
    """One matmul-type op of one layer for one microbatch on one rank.

    The op is `calls` independent GEMMs (m×k)·(k×n) (experts on the rank, or b·heads for core
    attention). FLOPs fields are totals over the calls; arrays broadcast over layouts.

    kind: "gemm" (a weight GEMM: dgrad = wgrad = forward) or "attention" (QKᵀ / A·V: backward = 2×
    forward, all input gradient). `fp8`: runs at the FP8 peak when training in fp8 (TransformerEngine
    linears; router, LM head and attention stay in bf16). `core_attention`: recomputed by selective
    recompute. `backward_recompute_flops`: hardware-only FLOPs executed inside the backward kernel
    (FlashAttention's recompute of QKᵀ).
    """

    name: str
    kind: str
    m: object
    n: object
    k: object
    calls: object
    forward_flops: object
    dgrad_flops: object
    wgrad_flops: object
    backward_recompute_flops: object = 0.0
    fp8: bool = False
    core_attention: bool = False

    @property
    def flops_per_call(self):
        """Forward FLOPs of one call (the x of the GEMM efficiency table)."""
        return self.forward_flops / self.calls


def _gemm(name, m, n, k, calls=1.0, *, fp8=True) -> LayerOp:
    f = gemm_flops(m, n, k) * calls
    return LayerOp(name=name, kind="gemm", m=m, n=n, k=k, calls=calls, forward_flops=f, dgrad_flops=f,
                   wgrad_flops=f, fp8=fp8)


def _f(x):
    """Numeric layout input as float (array or scalar)."""
    return np.asarray(x, dtype=float) if isinstance(x, np.ndarray) else float(x)


def attention_ops(model: ModelSpec, *, seq_length, tp=1, cp=1, micro_batch_size=1,
                  attention_flops: str = "causal", flash_attention: bool = True) -> tuple[LayerOp, LayerOp]:
    """Core attention of one layer per rank: scores S = QKᵀ and context O = A·V.

    Per rank: n_h/t heads, s/c queries, all s keys (ring CP), head dims d_qk (scores) and d_v (context):
      scores  forward = 2·b·(n_h/t)·(s/c)·s·d_qk·φ,  context forward = 2·b·(n_h/t)·(s/c)·s·d_v·φ,
    φ = causal_fraction (1/2 causal, 1 full), the mean over full and sliding-window layers (window.mean_fraction).
    Backward = 2× forward, all input gradient (B), W = 0.
    MHA/GQA: d_qk = d_v = d_h (KV heads are shared, FLOPs follow query heads). MLA (DeepSeek-V2/V3):
    d_qk = d_n + d_r, d_v = v_head_dim; Megatron `num_floating_point_operations` MLA branch.
    FlashAttention: the backward recomputes S = QKᵀ once more (`backward_recompute_flops` = scores
    forward; Dao et al. FA benchmark `flops()` 2.5× backward convention).
    Source: Narayanan et al. 2021 App. (2bs²h each for QKᵀ and A·V, full count).
    """
    s = float(seq_length)
    tp, cp, b = _f(tp), _f(cp), _f(micro_batch_size)
    phi = mean_fraction(model, s, causal_fraction(attention_flops), causal=attention_flops == "causal")
    if model.is_mla:
        d_qk, d_v = model.qk_nope_head_dim + model.qk_rope_head_dim, model.v_head_dim
    else:
        d_qk = d_v = model.head_dim
    calls = b * model.num_heads / tp
    q_len = s / cp
    ops = []
    for name, m, n, k in (("attn_scores", q_len, s, d_qk), ("attn_context", q_len, d_v, s)):
        fwd = gemm_flops(m, n, k) * calls * phi
        extra = fwd if (flash_attention and name == "attn_scores") else 0.0
        ops.append(LayerOp(name=name, kind="attention", m=m, n=n, k=k, calls=calls, forward_flops=fwd,
                           dgrad_flops=2.0 * fwd, wgrad_flops=0.0 * fwd, backward_recompute_flops=extra,
                           fp8=False, core_attention=True))
    return tuple(ops)


def projection_ops(model: ModelSpec, *, seq_length, tp=1, cp=1, micro_batch_size=1,
                   sequence_parallel: bool = False) -> tuple[LayerOp, ...]:
    """Attention projections of one layer per rank (weight GEMMs), T = b·s/c tokens.

    MHA/GQA (formulas.md §2.3): qkv_proj T×h·(q+2kv)/t; out_proj T×(q/t)·h.
    MLA (HF DeepseekV3Attention; Megatron MLA): q_down T'×h·r_q (or q_proj T×h·n_h(d_n+d_r)/t when
    r_q = 0), q_up T×r_q·n_h(d_n+d_r)/t, kv_down T'×h·(r_kv+d_r), kv_up T×r_kv·n_h(d_n+d_v)/t,
    out_proj T×(n_h·d_v/t)·h. The down projections are replicated across TP (Megatron-Core
    `linear_q_down_proj`/`linear_kv_down_proj` are duplicated TELinear): T' = T/t with sequence
    parallelism, T without (each TP rank repeats them).
    """
    s = float(seq_length)
    tp, cp, b = _f(tp), _f(cp), _f(micro_batch_size)
    T = b * s / cp
    h = model.hidden_size
    if not model.is_mla:
        return (_gemm("qkv_proj", T, (model.q_size + 2 * model.kv_size) / tp, h),
                _gemm("out_proj", T, h, model.q_size / tp))
    T_rep = T / tp if sequence_parallel else T
    nh, d_qk = model.num_heads, model.qk_nope_head_dim + model.qk_rope_head_dim
    ops = []
    if model.q_lora_rank:
        ops += [_gemm("q_down", T_rep, model.q_lora_rank, h),
                _gemm("q_up", T, nh * d_qk / tp, model.q_lora_rank)]
    else:
        ops.append(_gemm("q_proj", T, nh * d_qk / tp, h))
    ops += [_gemm("kv_down", T_rep, model.kv_lora_rank + model.qk_rope_head_dim, h),
            _gemm("kv_up", T, nh * (model.qk_nope_head_dim + model.v_head_dim) / tp, model.kv_lora_rank),
            _gemm("out_proj", T, h, nh * model.v_head_dim / tp)]
    return tuple(ops)


def dense_mlp_ops(model: ModelSpec, *, seq_length, tp=1, cp=1, micro_batch_size=1, ffn_hidden_size=None,
                  prefix: str = "mlp") -> tuple[LayerOp, LayerOp]:
    """A dense FFN per rank: up T×h·(c_f−1)·f/t (gate and up fused for GLU) and down T×(f/t)·h.

    Forward 2·T·c_f·h·f/t (formulas.md §2.3, Megatron `ffn_expansion_factor` 3 SwiGLU / 2 GeLU).
    """
    s = float(seq_length)
    tp, cp, b = _f(tp), _f(cp), _f(micro_batch_size)
    T = b * s / cp
    f = model.ffn_hidden_size if ffn_hidden_size is None else ffn_hidden_size
    h = model.hidden_size
    return (_gemm(f"{prefix}_up", T, (model.glu_matrices - 1) * f / tp, h),
            _gemm(f"{prefix}_down", T, h, f / tp))


def moe_ops(model: ModelSpec, *, seq_length, tp=1, cp=1, ep=1, micro_batch_size=1,
            sequence_parallel: bool = False, load_factor: float = 1.0, etp=None) -> tuple[LayerOp, ...]:
    """An MoE FFN per rank: router, routed experts (top-k), shared experts (formulas.md §1.3, §2.3).

    router: T'×h·(E [+1 shared-expert gate]) replicated across TP (T' = T/t with SP, else T), bf16.
    routed: E/e local experts, each m = k·T·(u/t)·e/E·ρ tokens (u = `etp`, None: t; ρ = `load_factor`:
            Training.moe_slot_factor for the FLOPs executed on average, Training.moe_load_factor for the busiest
            rank's time), up m×h·(c_f−1)·f_e/u, down m×(f_e/u)·h; total forward 2·ρ·k·T·c_f·h·f_e/t.
    shared: a dense FFN of width f_sh (split by t).
    """
    s = float(seq_length)
    tp, cp, ep, b = _f(tp), _f(cp), _f(ep), _f(micro_batch_size)
    T = b * s / cp
    h, E, k = model.hidden_size, model.num_experts, model.experts_per_token
    rho = float(load_factor)
    T_rep = T / tp if sequence_parallel else T
    ops = [_gemm("router", T_rep, E + (1 if model.shared_expert_gate else 0), h, fp8=False)]
    u = tp if etp is None else _f(etp)
    local_experts = model.local_experts(ep)
    m = k * T * (u / tp) * ep / E * rho
    f_e = model.moe_ffn_hidden_size
    ops += [_gemm("expert_up", m, (model.glu_matrices - 1) * f_e / u, h, local_experts),
            _gemm("expert_down", m, h, f_e / u, local_experts)]
    if model.shared_expert_ffn_hidden_size:
        ops += dense_mlp_ops(model, seq_length=seq_length, tp=tp, cp=cp, micro_batch_size=micro_batch_size,
                             ffn_hidden_size=model.shared_expert_ffn_hidden_size, prefix="shared")
    return tuple(ops)


def layer_ops(model: ModelSpec, training: Training, *, moe: bool = False, tp=1, cp=1, ep=1, micro_batch_size=1,
              sequence_parallel: bool = False, attention_flops: str | None = None,
              flash_attention: bool | None = None, load_factor: float | None = None, etp=None) -> tuple[LayerOp, ...]:
    """The per-op FLOPs table of one transformer layer for one microbatch on one rank.

    `moe` selects the FFN (routed-expert layer or dense layer; ModelSpec.moe_layer_mask says which
    layer is which). `attention_flops`, `flash_attention` default to the Training fields, `load_factor`
    (moe_ops) to Training.moe_slot_factor. Ops: attention projections, attn_scores, attn_context, then the FFN ops.
    """
    conv = training.attention_flops if attention_flops is None else attention_flops
    flash = training.flash_attention if flash_attention is None else flash_attention
    cap = training.moe_slot_factor if load_factor is None else load_factor
    if moe and not model.is_moe:
        raise InputError(f"model {model.name!r} has no experts; moe=True is not possible")
    kw = dict(seq_length=training.seq_length, tp=tp, cp=cp, micro_batch_size=micro_batch_size)
    proj = projection_ops(model, sequence_parallel=sequence_parallel, **kw)
    ops = list(proj[:-1]) + list(attention_ops(model, attention_flops=conv, flash_attention=flash, **kw)) + [proj[-1]]
    if moe:
        ops += moe_ops(model, ep=ep, sequence_parallel=sequence_parallel, load_factor=cap, etp=etp, **kw)
    else:
        ops += dense_mlp_ops(model, **kw)
    return tuple(ops)


def head_ops(model: ModelSpec, training: Training, *, tp=1, cp=1, micro_batch_size=1) -> tuple[LayerOp, ...]:
    """The LM head per rank: logits T×h·(V/t) (vocab-parallel, bf16 even in fp8 training).

    Forward 2·T·h·V/t; dgrad and wgrad the same (formulas.md §2.2: 2bshV per microbatch). The loss
    (softmax cross-entropy) and the input embedding have no matmul FLOPs (see module docstring).
    """
    T = _f(micro_batch_size) * float(training.seq_length) / _f(cp)
    return (_gemm("lm_head", T, model.vocab_size / _f(tp), model.hidden_size, fp8=False),)


@dataclass(frozen=True, kw_only=True)
class FlopTotals:
    """Sums over a set of ops: forward, input gradient (B), weight gradient (W), and the hardware-only
    FLOPs executed inside the backward (FlashAttention recompute of QKᵀ)."""

    forward_flops: object
    dgrad_flops: object
    wgrad_flops: object
    backward_recompute_flops: object

    @property
    def model_flops(self):
        """forward + dgrad + wgrad (no recomputation)."""
        return self.forward_flops + self.dgrad_flops + self.wgrad_flops


def sum_ops(ops) -> FlopTotals:
    """Add up the FLOPs fields of a sequence of LayerOps."""
    return FlopTotals(forward_flops=sum(o.forward_flops for o in ops), dgrad_flops=sum(o.dgrad_flops for o in ops),
                      wgrad_flops=sum(o.wgrad_flops for o in ops),
                      backward_recompute_flops=sum(o.backward_recompute_flops for o in ops))


def model_flops_per_sequence(model: ModelSpec, training: Training, *, attention_flops: str | None = None) -> float:
    """Model FLOPs (forward + backward, no recompute) for one sequence of s tokens, whole model.

    = Σ_layers 3·(layer forward) + 3·(LM head forward), the layer forward for dense or MoE layers by
    `moe_layer_mask`, capacity factor ignored (dropless k routing). Matches Megatron
    `num_floating_point_operations` / B (causal) and Narayanan's 72·s·l·h²(1 + s/6h + V/12lh) (full).
    """
    return _per_sequence(model, training, attention_flops=attention_flops, recompute="none", hardware=False)


def _per_sequence(model, training, *, attention_flops, recompute, hardware) -> float:
    conv = training.attention_flops if attention_flops is None else attention_flops
    cap = training.moe_slot_factor if hardware else 1.0
    flash = training.flash_attention if hardware else False
    n_moe = model.num_moe_layers
    n_dense = model.num_layers - n_moe
    total = 0.0
    for count, is_moe in ((n_dense, False), (n_moe, True)):
        if count == 0:
            continue
        ops = layer_ops(model, training, moe=is_moe, attention_flops=conv, flash_attention=flash, load_factor=cap)
        t = sum_ops(ops)
        per_layer = t.model_flops
        if hardware:
            per_layer += t.backward_recompute_flops + recompute_forward_flops(
                ops, recompute, model, flash, modules=training.stack.recompute_modules, moe_layer=is_moe)
        total += count * per_layer
    total += sum_ops(head_ops(model, training)).model_flops
    if model.mtp_layers:  # each MTP module: a layer of the last layer's kind, its projection, the shared head again
        ops = layer_ops(model, training, moe=model.mtp_layer_is_moe, attention_flops=conv, flash_attention=flash,
                        load_factor=cap)
        t = sum_ops(ops)
        per_layer = t.model_flops
        if hardware:
            per_layer += t.backward_recompute_flops + recompute_forward_flops(
                ops, recompute, model, flash, modules=training.stack.recompute_modules,
                moe_layer=model.mtp_layer_is_moe)
        own = sum_ops(mtp_ops(model, training) + head_ops(model, training)).model_flops  # projection, head again
        total += model.mtp_layers * (per_layer + own)
    return float(total)


def mtp_ops(model: ModelSpec, training: Training, *, tp=1, cp=1, micro_batch_size=1) -> tuple[LayerOp, ...]:
    """One multi-token-prediction module's own GEMM per rank: the projection of [norm(embedding); norm(hidden)]
    (2h wide) to h, T×2h·h/t (Megatron-Core MultiTokenPredictionLayer eh_proj, column-parallel; DeepSeek-V3 §2.2
    M_k). Its transformer layer is a layer's ops (layer_ops) and its head the LM head's (head_ops)."""
    T = _f(micro_batch_size) * training.seq_length / _f(cp)
    h = model.hidden_size
    return (_gemm("mtp_proj", T, h / _f(tp), 2 * h),)


def step_flops(model: ModelSpec, training: Training, *, recompute: str = "none",
               attention_flops: str | None = None) -> tuple[float, float]:
    """(model_flops, hardware_flops) of one training step: B = global_batch_size sequences of s tokens.

    model_flops: forward + backward once, no rematerialisation, dropless routing, the causal convention
      of `attention_flops` (default `training.attention_flops`) — the numerator of MFU (PaLM App. B).
    hardware_flops: model_flops + recompute forward (`recompute`: selective = the stack's
      recompute_modules, by default the core attention; full = every layer's forward, never the LM head)
      + FlashAttention's backward recompute of QKᵀ when `training.flash_attention` + capacity-factor padding
      of routed experts — the numerator of HFU.
    Both are layout independent: replicated work under TP (router, MLA down-projections without
    sequence parallelism) is a per-rank cost (see cost/compute.py), not counted here.
    """
    if recompute not in RECOMPUTE_MODES:
        raise InputError(f"recompute must be one of {', '.join(RECOMPUTE_MODES)}, got {recompute!r}")
    B = training.global_batch_size
    mf = B * _per_sequence(model, training, attention_flops=attention_flops, recompute="none", hardware=False)
    hf = B * _per_sequence(model, training, attention_flops=attention_flops, recompute=recompute, hardware=True)
    return mf, hf


def model_flops_per_token(model: ModelSpec, training: Training, *, attention_flops: str | None = None) -> float:
    """Model FLOPs per trained token: model_flops_per_sequence / s (≈ 6·N_active + attention term)."""
    return model_flops_per_sequence(model, training, attention_flops=attention_flops) / training.seq_length


def mfu(model_flops_per_step, step_s, num_gpus, peak_flops_per_s):
    """Model FLOPs utilisation (PaLM, Chowdhery et al. 2022, App. B):

        MFU = model_flops_per_step / (step_s · num_gpus · peak_flops_per_s)
            = (model FLOPs per token × tokens/s) / (GPUs × dense peak).

    parasim uses model FLOPs from `step_flops` (causal convention of `training.attention_flops`,
    no recompute) and the dense peak of the training GEMM dtype (cost/compute.py `mfu_peak_flops`).
    Vectorised over arrays.
    """
    denominator = np.asarray(step_s, dtype=float) * num_gpus * peak_flops_per_s
    return np.asarray(model_flops_per_step, dtype=float) / denominator


def hfu(hardware_flops_per_step, step_s, num_gpus, peak_flops_per_s):
    """Hardware FLOPs utilisation (PaLM App. B): executed FLOPs (recompute and FlashAttention's
    backward recompute included) / (step_s · num_gpus · peak_flops_per_s)."""
    denominator = np.asarray(step_s, dtype=float) * num_gpus * peak_flops_per_s
    return np.asarray(hardware_flops_per_step, dtype=float) / denominator
