"""The host side of an eager framework: a layer pass cannot end before its kernels are issued (split from
compute.py; the kernel counts and host time per kernel are the software stack's, spec/stack.py)."""
from __future__ import annotations

import numpy as np


# flash-attn's bert_padding.unpad_input (flash-attn 2.3.6): three calls per layer forward (q, k, v; llm-foundry
# flash_attn_fn), each launching 14 kernels and copies (torch.profiler on an H100, validation/h100_cp_unpad/
# sync.csv: mask sum (3), nonzero (3 + a device-to-host copy), max + .item() (2), cumsum (2), pad, a
# device-to-device copy, the row gather), two of them host synchronisations (nonzero sizes its output, .item()).
UNPAD_CALLS_PER_LAYER = 3
UNPAD_HOST_KERNELS = 13  # the kernels of one call besides its row gather (timed as a copy: padding_ops.py)


def padding_sync_s(stack, flash_attention: bool) -> float:
    """Host time one layer's forward exposes at flash-attn's unpadding (Stack.attention_padding "unpad").

    Each `unpad_input` synchronises the host with the GPU (torch.nonzero, max().item()): the queue drains and
    the GPU idles while the host issues the call's small kernels one by one, so their issue time adds to the
    pass instead of hiding under earlier kernels:
        t = UNPAD_CALLS_PER_LAYER · UNPAD_HOST_KERNELS · h       (h: Stack.host_s_per_kernel)
    Checked on an H100 (validation/h100_cp_unpad/sync.csv): one call on an idle GPU took 177-192 us beyond its
    row gather, where 13 · 14.8 us (the fsdp stack's h) = 192 us. 0 without unpadding or FlashAttention."""
    if stack.attention_padding != "unpad" or not flash_attention:
        return 0.0
    return UNPAD_CALLS_PER_LAYER * UNPAD_HOST_KERNELS * stack.host_s_per_kernel


# Megatron-Core's --cuda-graph-scope with Transformer Engine graphs: the megatron stack's (forward, backward) launches
# that one graph replaces (code reading of NVIDIA/Megatron-LM core_v0.16.0, transformer_layer.py
# _te_cuda_graph_capture, moe_utils.py maybe_skip_or_early_return_by_cudagraph; docs/compute.md 'MoE layers in
# Megatron-Core'):
# attn: the attention block of kernels_per_layer (norm and QKV GEMM, RoPE, attention, projection, bias-dropout-add;
# backward their dgrad and wgrad GEMMs, attention, RoPE, norm, add); moe_router: the pre-MLP norm and the router
# (gating GEMM, fused top-k, aux-loss scores, token counts, aux loss, its logging); moe_preprocess,
# in the same graph: the dispatcher's split sizes (6 kernels and the count all-gather) and the fused permute (4).
GRAPH_SCOPE_KERNELS = {"attn": (6, 8), "moe_router": (8, 9), "moe_preprocess": (11, 1)}


def layer_kernels(stack, *, weight_gemms: int, experts_local=0.0):
    """(k_f, k_b, k_w): the launches of one layer's forward and backward and the backward's weight-gradient ones.

    A dense layer (experts_local 0) launches the stack's kernels_per_layer (compiled_kernels_per_layer when compiled),
    of which `weight_gemms` (its weight GEMMs, one wgrad each) are weight gradients. An eager MoE layer whose stack
    counts its launches (`moe_kernels_per_layer` m > 0) launches those plus, for each of its G local experts, the
    GEMMs of the experts' host loop (`moe_kernels_per_expert` p):
        k_f = m_f + G·p_f,   k_b = m_b + G·p_b,   k_w = weight_gemms + (G − 1)·p_f
    (its weight GEMMs, the experts' ones once per expert). Each expert GEMM stands for the host work Transformer
    Engine does per expert and GEMM (its Python loop over the experts' weights and quantizers, the cuBLASLt
    descriptors and heuristic, the FP8 split's quantize launch): one dispatched op's worth, no more; the per-split
    quantize kernels of FP8 current scaling are launched from C++ and not counted apart (docs/compute.md 'MoE layers
    in Megatron-Core'). Graphs (`cuda_graphs`) replace the launches of each captured part by one (`GRAPH_SCOPE_KERNELS`;
    moe_preprocess shares the moe_router graph); "layer": the whole layer is one graph each way. G may be an array
    (one per layout)."""
    g = np.asarray(experts_local, dtype=float)
    k_f, k_b = (float(x) for x in stack.layer_kernels)
    k_w = float(weight_gemms) + 0.0 * g
    m_f, m_b = stack.moe_kernels_per_layer
    if np.any(g > 0) and (m_f or m_b) and not stack.compiled:  # (compiled: the stack's compiled count stands)
        p_f, p_b = stack.moe_kernels_per_expert
        k_f, k_b = m_f + g * p_f, m_b + g * p_b
        k_w = weight_gemms + np.maximum(g - 1.0, 0.0) * p_f
    graphs = stack.cuda_graphs
    if "layer" in graphs:
        return 1.0 + 0.0 * g, 1.0 + 0.0 * g, 0.0 * g
    for scope in graphs:
        f, b = GRAPH_SCOPE_KERNELS[scope]
        one = 0 if scope == "moe_preprocess" else 1
        if scope == "attn" or np.any(g > 0):  # the router scopes exist in MoE layers only
            k_f, k_b = k_f - f + one, k_b - b + one
            k_w = k_w - {"attn": 2, "moe_router": 1}.get(scope, 0)  # its wgrad GEMMs inside the graph
    return np.maximum(k_f + 0.0 * g, 0.0), np.maximum(k_b + 0.0 * g, 0.0), np.maximum(k_w, 0.0)


def launch_bound(table: np.ndarray, stack, recompute: str, kernels, *, rows: tuple[int, int, int, int],
                 layer_cols: tuple[int, int], sync_s: float = 0.0) -> np.ndarray:
    """A basis table with each layer pass no shorter than the host takes to issue its kernels.

    The host issues a layer's k_f forward and k_b backward kernels one after another, h seconds each
    (`layer_kernels` per column of `layer_cols`: the dense and the MoE layer; `Stack.host_s_per_kernel`); the GPU
    cannot finish a pass before its last kernel is issued (the CPU-bound vs GPU-bound bound of an eager framework).
    Of the backward's kernels, k_w are weight-gradient ones, which split-backward schedules run as W; the rest are
    the input-gradient pass B:
        F' = max(F, k_f·h),  B' = max(B, (k_b − k_w)·h),  W' = max(W, k_w·h),
        R' = max(R, k_f·h) (full and op recompute),
    for the dense and the MoE layer columns that hold work (the embedding and head are one-off kernels).
    A GPU-bound layer is unchanged, and a faster W or B never lengthens the other. `sync_s`: host time the
    layer's forward exposes at host synchronisations (`padding_sync_s`), added to F (and R: the recomputed
    forward synchronises again). `rows`: the table's F, B, W and recompute-time rows (compute.py's basis)."""
    h = stack.host_s_per_kernel
    if h <= 0.0 and sync_s <= 0.0:
        return table
    out = table.copy()
    f, b, w, rc = rows
    for col, (kf, kb, k_w) in zip(layer_cols, kernels):
        lay = out[..., col]
        present = lay[f] > 0.0  # (a dense model's MoE column is empty)
        k_w = np.minimum(k_w, kb)
        lay[b] = np.where(present, np.maximum(lay[b], (kb - k_w) * h), lay[b])
        lay[w] = np.where(present, np.maximum(lay[w], k_w * h), lay[w])
        lay[f] = np.where(present, np.maximum(lay[f], kf * h) + sync_s, lay[f])
        if recompute in ("full", "op"):  # the block's forward is issued again ('op': cached ops still dispatch)
            lay[rc] = np.where(lay[rc] > 0.0, np.maximum(lay[rc], kf * h) + sync_s, lay[rc])
        out[..., col] = lay
    return out
