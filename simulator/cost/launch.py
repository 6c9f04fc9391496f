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


def launch_bound(table: np.ndarray, stack, recompute: str, weight_gemms, *, rows: tuple[int, int, int, int],
                 layer_cols: tuple[int, int], sync_s: float = 0.0) -> np.ndarray:
    """A basis table with each layer pass no shorter than the host takes to issue its kernels.

    The host issues a layer's k_f forward and k_b backward kernels one after another, h seconds each
    (`Stack.layer_kernels`, `Stack.host_s_per_kernel`); the GPU cannot finish a pass before its last
    kernel is issued (the CPU-bound vs GPU-bound bound of an eager framework). Of the backward's
    kernels, k_w = the layer's weight GEMMs (`weight_gemms`: dense, MoE layer) are its weight-gradient
    ones, which split-backward schedules run as W; the rest are the input-gradient pass B:
        F' = max(F, k_f·h),  B' = max(B, (k_b − k_w)·h),  W' = max(W, k_w·h),  R' = max(R, k_f·h) (full and op recompute),
    for the dense and the MoE layer columns that hold work (the embedding and head are one-off kernels).
    A GPU-bound layer is unchanged, and a faster W or B never lengthens the other. `sync_s`: host time the
    layer's forward exposes at host synchronisations (`padding_sync_s`), added to F (and R: the recomputed
    forward synchronises again). `rows`: the table's F, B, W and recompute-time rows; `layer_cols`: its dense-
    and MoE-layer columns (compute.py's basis)."""
    kf, kb = stack.layer_kernels
    h = stack.host_s_per_kernel
    if (h <= 0.0 or (kf == 0 and kb == 0)) and sync_s <= 0.0:
        return table
    out = table.copy()
    f, b, w, rc = rows
    for col, k_w in zip(layer_cols, weight_gemms):
        lay = out[..., col]
        present = lay[f] > 0.0  # (a dense model's MoE column is empty)
        k_w = min(k_w, kb)
        lay[b] = np.where(present, np.maximum(lay[b], (kb - k_w) * h), lay[b])
        lay[w] = np.where(present, np.maximum(lay[w], k_w * h), lay[w])
        lay[f] = np.where(present, np.maximum(lay[f], kf * h) + sync_s, lay[f])
        if recompute in ("full", "op"):  # the block's forward is issued again ('op': cached ops still dispatch)
            lay[rc] = np.where(lay[rc] > 0.0, np.maximum(lay[rc], kf * h) + sync_s, lay[rc])
        out[..., col] = lay
    return out
