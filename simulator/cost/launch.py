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


def _launches(stack, *, weight_gemms: int, experts_local=0.0):
    """((f_l, f_e), (b_l, b_e), (w_l, w_e)): one layer's forward, backward and weight-gradient launches, split into
    the layer's own (l) and its experts' GEMM loop (e; 0 for a dense layer). `layer_kernels` gives the rule."""
    g = np.asarray(experts_local, dtype=float)
    zero = 0.0 * g
    k_f, k_b = (float(x) for x in stack.layer_kernels)
    f, b, w = [k_f + zero, zero], [k_b + zero, zero], [float(weight_gemms) + zero, zero]
    m_f, m_b = stack.moe_kernels_per_layer
    if np.any(g > 0) and (m_f or m_b) and not stack.compiled:  # (compiled: the stack's compiled count stands)
        p_f, p_b = stack.moe_kernels_per_expert
        f, b = [m_f + zero, g * p_f], [m_b + zero, g * p_b]
        w = [float(weight_gemms) - p_f + zero, g * p_f]  # (weight_gemms holds the experts' p_f once)
    graphs = stack.cuda_graphs
    if "layer" in graphs:
        return (1.0 + zero, zero), (1.0 + zero, zero), (zero, zero)
    for scope in graphs:
        gf, gb = GRAPH_SCOPE_KERNELS[scope]
        one = 0 if scope == "moe_preprocess" else 1
        if scope == "attn" or np.any(g > 0):  # the router scopes exist in MoE layers only
            f[0], b[0] = f[0] - gf + one, b[0] - gb + one
            w[0] = w[0] - {"attn": 2, "moe_router": 1}.get(scope, 0)  # its wgrad GEMMs inside the graph
    clip = lambda pair: tuple(np.maximum(x + zero, 0.0) for x in pair)  # noqa: E731
    return clip(f), clip(b), clip(w)


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
    return tuple(sum(pair) for pair in _launches(stack, weight_gemms=weight_gemms, experts_local=experts_local))


def layer_host_s(stack, *, weight_gemms: int, experts_local=0.0):
    """(t_f, t_b, t_w): the host time to issue one layer's forward, backward and weight-gradient launches
    (`layer_kernels`), h = `Stack.host_s_per_kernel` each, but for an MoE layer's own launches (all but its
    experts' GEMM loop), which take the stack's `moe_host_s_per_kernel` h_moe where it has one:
        t = k_layer · h_moe + k_experts · h
    h_moe is measured for Megatron-Core's MoE code: its router, dispatcher and combine issue a kernel in about 2.6
    times a plain torch layer's host time on the same CPU (validation/moe_host_cpu.py, docs/compute.md 'The MoE
    code's host time per launch'); a dense layer's launches, and every launch of a stack without h_moe, take h."""
    h = stack.host_s_per_kernel
    g = np.asarray(experts_local, dtype=float)
    moe = bool(np.any(g > 0)) and any(stack.moe_kernels_per_layer) and stack.moe_host_s_per_kernel > 0.0
    h_layer = np.where(g > 0, stack.moe_host_s_per_kernel, h) if moe else h
    return tuple(k_l * h_layer + k_e * h
                 for k_l, k_e in _launches(stack, weight_gemms=weight_gemms, experts_local=experts_local))


def launch_bound(table: np.ndarray, recompute: str, host_s, *, rows: tuple[int, int, int, int],
                 layer_cols: tuple[int, int], sync_s: float = 0.0) -> np.ndarray:
    """A basis table with each layer pass no shorter than the host takes to issue its kernels.

    The host issues a layer's forward and backward kernels one after another, t_f and t_b seconds in all
    (`layer_host_s` per column of `layer_cols`: the dense and the MoE layer); the GPU cannot finish a pass before its
    last kernel is issued (the CPU-bound vs GPU-bound bound of an eager framework). Of the backward's, t_w is the
    weight-gradient kernels', which split-backward schedules run as W; the rest is the input-gradient pass B:
        F' = max(F, t_f),  B' = max(B, t_b − t_w),  W' = max(W, t_w),
        R' = max(R, t_f) (full and op recompute),
    for the dense and the MoE layer columns that hold work (the embedding and head are one-off kernels).
    A GPU-bound layer is unchanged, and a faster W or B never lengthens the other. `sync_s`: host time the
    layer's forward exposes at host synchronisations (`padding_sync_s`), added to F (and R: the recomputed
    forward synchronises again). `rows`: the table's F, B, W and recompute-time rows (compute.py's basis)."""
    if not any(np.any(np.asarray(t) > 0.0) for col in host_s for t in col) and sync_s <= 0.0:
        return table
    out = table.copy()
    f, b, w, rc = rows
    for col, (t_f, t_b, t_w) in zip(layer_cols, host_s):
        lay = out[..., col]
        present = lay[f] > 0.0  # (a dense model's MoE column is empty)
        t_w = np.minimum(t_w, t_b)
        lay[b] = np.where(present, np.maximum(lay[b], t_b - t_w), lay[b])
        lay[w] = np.where(present, np.maximum(lay[w], t_w), lay[w])
        lay[f] = np.where(present, np.maximum(lay[f], t_f) + sync_s, lay[f])
        if recompute in ("full", "op"):  # the block's forward is issued again ('op': cached ops still dispatch)
            lay[rc] = np.where(lay[rc] > 0.0, np.maximum(lay[rc], t_f) + sync_s, lay[rc])
        out[..., col] = lay
    return out
