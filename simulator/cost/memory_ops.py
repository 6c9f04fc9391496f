"""Memory-bound ops per microbatch on one rank: their HBM byte counts and the time of moving bytes.

Split from compute.py (which times these ops next to the GEMMs and attention) so that the byte counts
of the memory-bound kernels are one concern in one place.

Time (formulas.md §6.3, §7.1; scaling-book `T = max(T_math, T_mem)`): bytes / (HBM bytes/s ·
η_memory(bytes per kernel)) — `_memory_time`, also the memory term of the GEMM and attention rooflines
(compute.py) and of the optimizer step (optimizer.py). η_memory is the hardware profile's
`[efficiency.memory]` curve; this module holds no efficiency numbers.

Byte counts (e = bytes per activation element, T = b·s/c tokens on a rank, T_sp = T/t with sequence
parallelism else T): each kernel reads its inputs and writes its outputs once (fused kernels as in
Megatron/TransformerEngine): norms, SwiGLU/GeLU, residual adds, RoPE, dropout, softmax when not flash,
MoE permutation (`memory_ops`, one layer), the embedding lookup (`_embedding_memory_op`, first stage),
the final norm and the loss (`_head_memory_ops`, last stage). They are first-order counts to be
refined by calibration.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..spec.model import ModelSpec
from ..spec.training import Training
from . import flops as F

__all__ = ["MemoryOp", "memory_ops", "fp8_cast_op"]


def _memory_time(bytes_, kernels, hardware):
    """bytes / (HBM bytes/s · η_memory(bytes per kernel)); 0 for 0 bytes."""
    bytes_ = np.asarray(bytes_, dtype=float)
    per_kernel = np.maximum(bytes_ / kernels, 1.0)
    return bytes_ / (hardware.hbm_bytes_per_s * hardware.interp_efficiency("memory", per_kernel))


@dataclass(frozen=True, kw_only=True)
class MemoryOp:
    """A memory-bound op of one layer (or of the embedding/head) for one microbatch on one rank.

    Bytes moved in the forward, in the backward input-gradient (B) and weight-gradient (W) kernels;
    `kernels` is how many kernels share the bytes (the x of η_memory is bytes per kernel).
    """

    name: str
    forward_bytes: object
    backward_bytes: object
    weight_bytes: object = 0.0
    kernels: float = 1.0
    core_attention: bool = False
    ffn: bool = False  # part of the FFN (dense or MoE), not of the attention block


def memory_ops(model: ModelSpec, training: Training, *, moe: bool = False, tp=1, cp=1, ep=1, micro_batch_size=1,
               sequence_parallel: bool = False) -> tuple[MemoryOp, ...]:
    """Memory-bound ops of one layer per rank, with their byte counts (e = activation bytes).

    - norms (norms_per_layer of them, over h, in the SP region): fwd read x + write y = 2·T_sp·h·e;
      bwd read x, dy, write dx = 3·T_sp·h·e.
    - residual adds (2): fwd read 2 + write 1 = 3·T_sp·h·e each; bwd the same.
    - RoPE on Q and K (T·(q_rope + k_rope)/t elements): fwd and bwd read + write. MLA: n_h·d_r per
      query, one shared d_r key (replicated across TP).
    - qk_norm (Qwen3): 2 and 3 passes over T·(q + kv)/t. MLA latent norms over r_q and r_kv.
    - hidden dropout (if training.dropout, 2 sites): fwd read x, write y, write 1-byte mask; bwd
      read dy, mask, write dx: (2e + 1)·T_sp·h each.
    - FFN activation: SwiGLU/GeGLU fwd read gate, up + write = 3·T·f/t·e, bwd read gate, up, dy +
      write dgate, dup = 5·T·f/t·e; GeLU 2 and 3 passes. MoE: routed tokens ρ·k·T with f_e/t, shared
      experts T with f_sh/t.
    - MoE token permutation (dispatch and combine): fwd and bwd (1 + k)·T·h·e each; router softmax
      and top-k over T'·E fp32 scores (read + write).
    - softmax over the score matrix (no FlashAttention only; full s/c × s, causal masking does not
      skip work): fwd read S + write P = 2·e per element, bwd read P, dP + write dS = 3·e (+ dropout
      mask (2e + 1) per element when training.dropout).
    """
    e = float(training.activation_bytes)
    tp, cp, ep, b = (F._f(x) for x in (tp, cp, ep, micro_batch_size))
    s = float(training.seq_length)
    T = b * s / cp
    T_sp = T / tp if sequence_parallel else T
    h = model.hidden_size
    ops = [MemoryOp(name="norms", forward_bytes=model.norms_per_layer * 2 * T_sp * h * e,
                    backward_bytes=model.norms_per_layer * 3 * T_sp * h * e, kernels=model.norms_per_layer),
           MemoryOp(name="residual_adds", forward_bytes=2 * 3 * T_sp * h * e, backward_bytes=2 * 3 * T_sp * h * e,
                    kernels=2.0)]
    if model.is_mla:
        T_rep = T / tp if sequence_parallel else T  # the shared rope key is replicated across TP
        rope = T * model.num_heads * model.qk_rope_head_dim / tp + T_rep * model.qk_rope_head_dim
        lat = (T / tp if sequence_parallel else T) * (model.q_lora_rank + model.kv_lora_rank)
        ops.append(MemoryOp(name="latent_norms", forward_bytes=2 * lat * e, backward_bytes=3 * lat * e, kernels=2.0))
    else:
        rope = T * (model.q_size + model.kv_size) / tp
    ops.append(MemoryOp(name="rope", forward_bytes=2 * rope * e, backward_bytes=2 * rope * e, kernels=2.0))
    if model.qk_norm:
        qk = T * (model.q_size + model.kv_size) / tp
        ops.append(MemoryOp(name="qk_norm", forward_bytes=2 * qk * e, backward_bytes=3 * qk * e, kernels=2.0))
    if training.dropout:
        d = 2 * (2 * e + 1) * T_sp * h
        ops.append(MemoryOp(name="hidden_dropout", forward_bytes=d, backward_bytes=d, kernels=2.0))
    if not training.flash_attention:
        elems = b * model.num_heads / tp * (s / cp) * s
        fwd, bwd = 2 * e * elems, 3 * e * elems
        if training.dropout:
            fwd, bwd = fwd + (2 * e + 1) * elems, bwd + (2 * e + 1) * elems
        ops.append(MemoryOp(name="softmax", forward_bytes=fwd, backward_bytes=bwd, core_attention=True))
    ops += _ffn_memory_ops(model, training, moe=moe, tp=tp, T=T, e=e, sequence_parallel=sequence_parallel)
    return tuple(ops)


def _ffn_memory_ops(model, training, *, moe, tp, T, e, sequence_parallel) -> list[MemoryOp]:
    """The FFN part of `memory_ops` (its last bullets: activation, MoE permutation, router)."""
    h = model.hidden_size
    glu = model.glu_matrices == 3
    act_f, act_b = (3.0, 5.0) if glu else (2.0, 3.0)
    if moe:
        k, E = model.experts_per_token, model.num_experts
        rho = training.moe_load_factor  # the busiest rank's routed tokens / the uniform share
        width = rho * k * T * model.moe_ffn_hidden_size / tp + T * model.shared_expert_ffn_hidden_size / tp
        T_rep = T / tp if sequence_parallel else T
        perm = 2 * (1 + k) * T * h * e
        return [MemoryOp(name="mlp_activation", forward_bytes=act_f * width * e, backward_bytes=act_b * width * e,
                         ffn=True),
                MemoryOp(name="moe_permute", forward_bytes=perm, backward_bytes=perm, kernels=2.0, ffn=True),
                MemoryOp(name="router_softmax_topk", forward_bytes=2 * 4 * T_rep * E, backward_bytes=2 * 4 * T_rep * E,
                         ffn=True)]
    width = T * model.ffn_hidden_size / tp
    return [MemoryOp(name="mlp_activation", forward_bytes=act_f * width * e, backward_bytes=act_b * width * e,
                     ffn=True)]


def _embedding_memory_op(model, training, *, tp, cp, micro_batch_size, sequence_parallel) -> MemoryOp:
    """Input embedding lookup (first stage): fwd read T rows + write T×h (2·T·h·e, + the position table
    when learned); the table gradient (a scatter-add: read dy, read + write rows = 3·T·h·e) is W."""
    e = float(training.activation_bytes)
    T = F._f(micro_batch_size) * training.seq_length / F._f(cp)
    tables = 2.0 if model.learned_position_embeddings else 1.0
    h = model.hidden_size
    return MemoryOp(name="embedding", forward_bytes=tables * 2 * T * h * e, backward_bytes=0.0 * T,
                    weight_bytes=tables * 3 * T * h * e, kernels=tables)


def _head_memory_ops(model, training, *, tp, cp, micro_batch_size, sequence_parallel) -> tuple[MemoryOp, ...]:
    """Final norm and the loss on the last stage.

    Loss over X = T·V/t logits per rank (training.cross_entropy):
    - vocab-parallel (Megatron vocab-parallel CE in PyTorch ops): fwd read logits (e) + write and read
      an fp32 copy (4 + 4) + write fp32 softmax (4) = (e + 12)·X; bwd read the fp32 softmax + write the
      logit gradient = (4 + e)·X.
    - torch-fp32 (`F.cross_entropy(logits.float())`): fwd as above, (e + 12)·X; bwd nll_loss_backward
      writes a dense fp32 gradient (4), log_softmax's backward reads it and the saved output and writes
      the fp32 logit gradient (4 + 4 + 4), the cast back reads it and writes e: (20 + e)·X.
    - fused: fwd one read e·X, bwd read logits + write gradient 2e·X.
    """
    e = float(training.activation_bytes)
    tp, cp, b = F._f(tp), F._f(cp), F._f(micro_batch_size)
    T = b * training.seq_length / cp
    T_sp = T / tp if sequence_parallel else T
    X = T * model.vocab_size / tp
    if training.cross_entropy == "fused":
        lf, lb = e * X, 2 * e * X
    elif training.cross_entropy == "torch-fp32":
        lf, lb = (e + 12.0) * X, (20.0 + e) * X
    else:
        lf, lb = (e + 12.0) * X, (4.0 + e) * X
    return (MemoryOp(name="final_norm", forward_bytes=2 * T_sp * model.hidden_size * e,
                     backward_bytes=3 * T_sp * model.hidden_size * e),
            MemoryOp(name="loss", forward_bytes=lf, backward_bytes=lb, kernels=2.0))


def fp8_cast_op(gemm, training: Training) -> MemoryOp:
    """The FP8 casts around one FP8 GEMM (`flops.LayerOp` with m tokens, k inputs, n outputs, `calls`):
    forward, its input activation (m·k elements); backward, its output gradient (m·n). Each cast is one
    Transformer Engine cast-transpose kernel (transformer_engine/common/transpose/cast_transpose.cu):
    read the e-byte tensor, write the FP8 tensor and its FP8 transpose (the wgrad GEMM's layout),
    e + 2 bytes per element, with the amax taken in the same pass. The stack's `fp8_recipe`:
    "delayed" (scale from the amax history) adds nothing; "current" (torchao tensorwise, TE
    Float8CurrentScaling) reads the tensor once more for its amax first (+ e); "mxfp8" writes one 1-byte
    scale per 32 elements for each of the two layouts (+ 2/32). The weights' casts are made once per
    step and reused by every microbatch (TE `is_first_microbatch`), so they are not per-microbatch bytes."""
    e = float(training.activation_bytes)
    per = e + 2.0 + {"delayed": 0.0, "current": e, "mxfp8": 2.0 / 32.0}[training.stack.fp8_recipe]
    fwd = F._f(gemm.m) * F._f(gemm.k) * F._f(gemm.calls)
    bwd = F._f(gemm.m) * F._f(gemm.n) * F._f(gemm.calls)
    return MemoryOp(name=f"fp8_cast_{gemm.name}", forward_bytes=per * fwd, backward_bytes=per * bwd,
                    ffn=False)
