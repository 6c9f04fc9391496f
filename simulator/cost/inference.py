"""Inference step time: prefill and decode of one model replica (TP × PP × EP), formulas only.

Notation (formulas.md §0): b sequences in a (micro-)batch, P prompt tokens, O output tokens, c the
context (tokens in the KV cache, the new one included), t / e / p the TP / EP / PP degrees, E / k routed
experts / experts per token, w bytes per weight, e_a bytes per activation element.

- Prefill is the training forward pass (compute.py's basis table: GEMMs at η_gemm, FlashAttention at
  η_attention, memory-bound ops, the stack's launch bound) over b·P tokens, with the LM head run for the
  last token of each sequence only (scaling-book inference chapter, "Prefill ... save the logits for the
  last token"; HF `logits_to_keep=1`, vLLM). It is compute bound for prompts of more than a few hundred
  tokens (scaling-book: B_crit ≈ peak / HBM bandwidth tokens).
- Decode (one new token per sequence) is timed per op as a roofline (scaling-book `T = max(T_math, T_mem)`;
  Pope et al. 2022, "Efficiently Scaling Transformer Inference", §2 and §3.1; Kipply, "Transformer
  Inference Arithmetic", 2022, the memory-bound decode latency = weight bytes / bandwidth):

      t_op = max( bytes_op / (B_HBM · η_mem(bytes_op)),  FLOPs_op / (peak · η_c) )

  Weight GEMMs read their weights once per step (w·k·n; the routed experts only those a token was sent
  to: `experts_touched_fraction`) plus their activations (e_a·m·(k + n)); attention reads the KV cache at
  context c (memory/kv_cache.py: GQA heads per TP rank, MLA latent + RoPE key) — the scaling-book's
  "Theoretical Step Time (General)" = b·KV / bandwidth + max(2·b·N / FLOP/s, N·w / bandwidth) made per
  op. η_mem is the profile's `[efficiency.memory]` curve (bytes per kernel); η_c is the highest value
  of its `[efficiency.gemm]` table: the small-x end of that table measures small square GEMMs bound by
  memory and launches, which the memory term already counts, so using it again would count them twice.
- Tensor parallelism adds 2 all-reduces of b·h·e_a bytes per layer (Shoeybi et al. 2019 §3; Pope et al.
  2022 §3.2 "1D weight-stationary"), latency bound at decode sizes (cost/comm.py tp_comm with one
  token); expert parallelism a dispatch and a combine all-to-all per MoE layer (cost/comm.py ep_comm).
- Pipeline parallelism: p stages, a request's token passes them in turn (`decode_period_s`); with m
  micro-batches in flight the stages work on different micro-batches at once (GPipe, Huang et al. 2019
  §2.3, forward only; `pipelined_forward_s` for the prefill).

Not modelled here: speculative decoding, paged-attention block overheads, continuous batching, prefix
caching, quantised weights or KV cache (docs/inference.md).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..memory.kv_cache import kv_cache_bytes
from ..spec.model import ModelSpec
from ..spec.training import Training
from . import flops as F
from .compute import _peak, gemm_table
from .memory_ops import _memory_time, memory_ops

__all__ = ["DecodeCost", "experts_touched_fraction", "decode_attention_flops", "decode_attention", "compute_efficiency",
           "roofline_s", "decode_layer", "decode_head", "prefill_flops", "mean_decode_context", "pipelined_forward_s",
           "decode_period_s", "max_batch_size"]


@dataclass(frozen=True, kw_only=True)
class DecodeCost:
    """What one decode step of a micro-batch costs on one rank (a layer, the head, or their sum):
    bytes read from HBM (weights, KV cache, activations), FLOPs, the memory-bound and compute-bound
    times summed over ops, and the time (Σ per-op roofline maxima, and the host's launch bound where set)."""

    weight_bytes: float = 0.0
    kv_bytes: float = 0.0
    activation_bytes: float = 0.0
    flops: float = 0.0
    memory_s: float = 0.0
    compute_s: float = 0.0
    time_s: float = 0.0

    def __add__(self, other: "DecodeCost") -> "DecodeCost":
        return DecodeCost(**{k: getattr(self, k) + getattr(other, k) for k in self.__dataclass_fields__})

    def times(self, n) -> "DecodeCost":
        """The cost of `n` such steps (n layers of this kind; a numpy array gives one cost per entry)."""
        return DecodeCost(**{k: n * getattr(self, k) for k in self.__dataclass_fields__})

    @property
    def read_bytes(self):
        return self.weight_bytes + self.kv_bytes + self.activation_bytes


def experts_touched_fraction(tokens, top_k: int, num_experts: int):
    """Expected share of the routed experts that receive at least one of `tokens` tokens, each sent to
    k distinct experts of E uniformly at random [derived]:  1 − (1 − k/E)^tokens.

    A decode step of b·e tokens into an expert-parallel group reads only those experts' weights (at
    b·e·k ≥ E nearly all of them). Uniform independent routing is an assumption: real routers are
    skewed, which touches fewer experts (fewer bytes) but loads the busiest rank more
    (Training.moe_load_factor, which the FLOPs use)."""
    if not num_experts:
        return np.ones_like(np.asarray(tokens, dtype=float))
    return 1.0 - (1.0 - top_k / num_experts) ** np.asarray(tokens, dtype=float)


def _attention_dims(model: ModelSpec) -> tuple[float, float]:
    """(d_qk, d_v) per head that decode attention multiplies over: d_h, d_h (MHA/GQA); MLA with the
    up-projections absorbed into the query and output (DeepSeek-V2 §2.1.2, FlashMLA): r_kv + d_r, r_kv."""
    if model.is_mla:
        return float(model.kv_lora_rank + model.qk_rope_head_dim), float(model.kv_lora_rank)
    return float(model.head_dim), float(model.head_dim)


def decode_attention_flops(model: ModelSpec, *, batch, context, tp=1):
    """FLOPs of one layer's decode attention on one TP rank: one query per sequence against c keys,
    QKᵀ and A·V, no causal halving (the new token sees every cached one):

        2·b·(n_h/t)·c·(d_qk + d_v)

    (scaling-book inference chapter, "What about attention?": 2·B·S·T·D per matmul with T = 1); c is the mean over
    the layers of the keys a query sees (ModelSpec.attended_keys: a sliding-window layer sees min(c, w))."""
    d_qk, d_v = _attention_dims(model)
    return 2.0 * np.asarray(batch, dtype=float) * model.num_heads / np.asarray(tp, dtype=float) * \
        model.attended_keys(context) * (d_qk + d_v)


def compute_efficiency(hardware, table: str = "gemm") -> float:
    """η_c, the share of the dense peak a compute-bound decode op reaches: the highest value of the
    profile's `[efficiency.<table>]` curve (its compute-bound plateau; module docstring)."""
    return float(np.max(hardware.efficiency_curve(table)[1]))


def roofline_s(read_bytes, flops, hardware, *, peak_flops_per_s: float, efficiency: float, kernels=1.0,
               table: str = "memory"):
    """max(bytes / (B_HBM · η_mem(bytes per kernel)), FLOPs / (peak · η_c)) and its two terms
    (scaling-book roofline chapter; compute.py applies the same rule to training ops); η_mem is the profile's
    `table` where it has it, else its memory table (memory_ops._memory_time)."""
    t_mem = _memory_time(read_bytes, kernels, hardware, table)
    t_math = np.asarray(flops, dtype=float) / (peak_flops_per_s * efficiency)
    return np.maximum(t_mem, t_math), t_mem, t_math


def _gemm_cost(ops, training: Training, hardware, *, touched) -> DecodeCost:
    """Σ over weight GEMMs of their rooflines: weights w·k·n per call (routed experts × `touched`),
    activations e_a·m·(k + n); one kernel per op (a grouped GEMM for the local experts); FP8 ops at the FP8
    peak when training.precision is fp8 (weights are still read at param_bytes, as memory counts them)."""
    w, e = float(training.param_bytes), float(training.activation_bytes)
    base = training.math_dtype
    out = DecodeCost()
    for op in ops:
        fp8 = op.fp8 and training.precision == "fp8"
        share = touched if op.name.startswith("expert_") else 1.0
        wb = share * op.calls * op.k * op.n * w
        ab = e * op.calls * op.m * (op.k + op.n)
        table = gemm_table(training, hardware, fp8)
        t, t_mem, t_math = roofline_s(wb + ab, op.forward_flops, hardware,
                                      efficiency=compute_efficiency(hardware, table),
                                      peak_flops_per_s=_peak(hardware, "fp8" if fp8 else base))
        out = out + DecodeCost(weight_bytes=wb, activation_bytes=ab, flops=op.forward_flops, memory_s=t_mem,
                               compute_s=t_math, time_s=t)
    return out


def decode_layer(model: ModelSpec, training: Training, hardware, *, moe: bool, tp=1, ep=1, batch=1, context=1,
                 launch_bound: bool = False) -> DecodeCost:
    """One transformer layer's decode step for `batch` sequences at `context` tokens on one rank.

    GEMMs: flops.py's op table for T = b tokens (projections, dense FFN or router + routed + shared
    experts, split by t and e as in training), each a roofline (`_gemm_cost`); the routed experts' weights
    read in the share `experts_touched_fraction(b·e)`. Attention: KV cache bytes at c (memory/kv_cache.py)
    plus Q and O, FLOPs `decode_attention_flops`, one kernel. Norms, residual adds, RoPE and the FFN
    activation: memory_ops.py's bytes for T = b, at η_mem per kernel. `launch_bound`: the layer takes at
    least the stack's forward kernels × its host time per kernel under no_grad (eager; launch.py) — off for
    CUDA-graph decode (vLLM, TensorRT-LLM, SGLang capture decode steps in CUDA graphs).
    """
    one = replace(training, seq_length=1, dropout=False)
    kw = dict(seq_length=1, tp=tp, micro_batch_size=batch)
    ops = list(F.projection_ops(model, sequence_parallel=False, **kw))
    if moe:
        ops += F.moe_ops(model, ep=ep, load_factor=training.moe_load_factor, **kw)
        touched = experts_touched_fraction(np.asarray(batch, dtype=float) * ep, model.experts_per_token,
                                           model.num_experts)
    else:
        ops += F.dense_mlp_ops(model, **kw)
        touched = 1.0
    cost = _gemm_cost(ops, training, hardware, touched=touched)
    cost = cost + decode_attention(model, training, hardware, tp=tp, batch=batch, context=context)
    for op in _elementwise_ops(model, one, moe=moe, tp=tp, ep=ep, batch=batch):
        t = _memory_time(op.forward_bytes, op.kernels, hardware)
        cost = cost + DecodeCost(activation_bytes=op.forward_bytes, memory_s=t, time_s=t)
    if launch_bound:
        st = training.stack
        floor = st.layer_kernels[0] * (st.decode_host_s_per_kernel or st.host_s_per_kernel)
        cost = replace(cost, time_s=np.maximum(cost.time_s, floor))
    return cost


def decode_attention(model: ModelSpec, training: Training, hardware, *, tp=1, batch=1, context=1) -> DecodeCost:
    """One layer's decode attention for `batch` sequences at `context` tokens on one rank: one kernel that reads
    the layer's KV cache at c (memory/kv_cache.py) plus Q and writes O, FLOPs `decode_attention_flops`, timed as a
    roofline (`roofline_s`; η_mem at the bytes of the one kernel, from the profile's decode attention table where it
    has one: validation/decode_attention_tables.py, fitted to published decode kernels)."""
    e = float(training.activation_bytes)
    kv = kv_cache_bytes(model, layers=[1.0], batch=batch, context=context, tp=tp, dtype_bytes=e)[..., 0]
    d_qk, d_v = _attention_dims(model)
    qo = e * np.asarray(batch, dtype=float) * model.num_heads / np.asarray(tp, dtype=float) * (d_qk + d_v)
    fl = decode_attention_flops(model, batch=batch, context=context, tp=tp)
    t, t_mem, t_math = roofline_s(kv + qo, fl, hardware, peak_flops_per_s=_peak(hardware, training.math_dtype),
                                  efficiency=compute_efficiency(hardware), table="memory_decode_attention")
    return DecodeCost(kv_bytes=kv, activation_bytes=qo, flops=fl, memory_s=t_mem, compute_s=t_math, time_s=t)


def _elementwise_ops(model, training, *, moe, tp, ep, batch):
    """The memory-bound ops of a dense or an MoE layer (the attention block's from the dense table, the FFN's
    from the MoE table: compute.py's selection)."""
    kw = dict(tp=tp, ep=ep, micro_batch_size=batch, sequence_parallel=False)
    dense = memory_ops(model, training, moe=False, **kw)
    if not moe:
        return dense
    return [op for op in dense if not op.ffn] + [op for op in memory_ops(model, training, moe=True, **kw) if op.ffn]


def decode_head(model: ModelSpec, training: Training, hardware, *, tp=1, batch=1) -> DecodeCost:
    """The LM head for the last token of `batch` sequences on one rank: the vocab-parallel GEMM b×h·(V/t)
    (flops.head_ops with one token), a roofline reading its V·h/t weights; the final norm and sampling
    are a few b·h and b·V/t element passes and are left out. Used by decode and by the prefill's last token."""
    one = replace(training, seq_length=1)
    return _gemm_cost(F.head_ops(model, one, tp=tp, micro_batch_size=batch), training, hardware, touched=1.0)


def prefill_flops(model: ModelSpec, training: Training, *, prompt_tokens, batch=1, attention_flops: str | None = None):
    """Model FLOPs of prefilling `batch` prompts of P tokens, whole model (layout independent):

        Σ_layers forward(flops.layer_ops at s = P, b = batch) + 2·b·h·V   (the LM head for the last token)

    dense or MoE layers by `moe_layer_mask`, dropless top-k routing, attention by `attention_flops`
    (default training.attention_flops: "causal" halves the s² terms, "full" counts them, as torch's
    FlopCounterMode does on the math SDPA backend). Narayanan et al. 2021 App. forward = 1/3 of training."""
    conv = training.attention_flops if attention_flops is None else attention_flops
    trp = replace(training, seq_length=int(prompt_tokens))
    total = 0.0
    for count, moe in ((model.num_layers - model.num_moe_layers, False), (model.num_moe_layers, True)):
        if count:
            ops = F.layer_ops(model, trp, moe=moe, micro_batch_size=batch, attention_flops=conv, flash_attention=False,
                              load_factor=1.0)
            total = total + count * F.sum_ops(ops).forward_flops
    head = F.head_ops(model, replace(training, seq_length=1), micro_batch_size=batch)
    return total + F.sum_ops(head).forward_flops


def mean_decode_context(prompt_tokens, output_tokens):
    """The context averaged over the decode steps: the prefill gives the first output token; step j = 1 …
    O−1 makes token j+1 with P + j tokens in the cache, so the mean is P + O/2. Decode time is affine in c
    (the KV read), so the time at the mean context is the mean time per output token."""
    return np.asarray(prompt_tokens, dtype=float) + np.asarray(output_tokens, dtype=float) / 2.0


def pipelined_forward_s(stage_s, p2p_s, microbatches):
    """Forward-only pipeline of n equal micro-batches over p stages (GPipe, Huang et al. 2019 §2.3; a
    permutation flow shop of identical jobs):

        T = Σ_s t_s + (n − 1)·max_s t_s + (p − 1)·t_p2p

    `stage_s` has one entry per stage on its last axis; n = 1 or p = 1 give the plain sums."""
    t = np.asarray(stage_s, dtype=float)
    p = t.shape[-1]
    return t.sum(axis=-1) + (np.asarray(microbatches, dtype=float) - 1.0) * t.max(axis=-1) + (p - 1) * np.asarray(p2p_s)


def decode_period_s(stage_s, p2p_s, return_s, microbatches):
    """Seconds between two tokens of one sequence when m micro-batches decode in a p-stage pipeline [derived]:

        latency = Σ_s t_s + (p − 1)·t_p2p + t_return      (one micro-batch through every stage, the sampled
                                                             token ids sent back to stage 0: 0 when p = 1)
        period  = max(latency, m·max_s t_s)                  (each stage serves the m micro-batches in turn)

    Returns (period, latency). With m = p micro-batches the stages are busy together, as in GPipe's
    forward (Huang et al. 2019) and vLLM's pipeline-parallel virtual engines [recalled — verify]."""
    t = np.asarray(stage_s, dtype=float)
    p = t.shape[-1]
    latency = t.sum(axis=-1) + (p - 1) * np.asarray(p2p_s) + (p > 1) * np.asarray(return_s)
    return np.maximum(latency, np.asarray(microbatches, dtype=float) * t.max(axis=-1)), latency


def max_batch_size(*, hbm_bytes, weight_bytes, activation_bytes, fixed_bytes, reserve_fraction: float,
                   kv_bytes_per_sequence):
    """The most sequences whose KV cache fits next to the weights, per stage, and the bytes free for it.

    memory/breakdown.py counts peak = W + A + KV + other with other = fixed + r·(W + A + KV) (overheads.py:
    CUDA context and NCCL buffers, the allocator reserve r), so peak ≤ HBM ⇔

        KV ≤ free = (HBM − fixed) / (1 + r) − W − A,     max_batch = ⌊free / KV_per_sequence⌋

    (scaling-book inference chapter, "What about memory?": the KV cache takes what the weights leave;
    vLLM's gpu_memory_utilization plays the role of r [recalled — verify]). Stages without layers (no KV)
    allow any batch (inf). Returns (max_batch, free) arrays of the stages' shape."""
    room = (np.asarray(hbm_bytes, dtype=float) - fixed_bytes) / (1.0 + reserve_fraction)
    free = room - weight_bytes - activation_bytes
    kv = np.asarray(kv_bytes_per_sequence, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        n = np.where(kv > 0, np.floor(np.maximum(free, 0.0) / np.where(kv > 0, kv, 1.0)), np.inf)
    return n, free
