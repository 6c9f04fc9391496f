"""Sliding-window attention (Mistral, Gemma-2, GPT-OSS): the scores a windowed layer computes and how fast its
kernel runs, read off the causal kernel's tables.

In a windowed layer a query attends to its w most recent keys, itself included (transformers'
`sliding_window_overlay`: key j is seen by query i iff i − w < j ≤ i; Megatron-Core window_size (w − 1, 0)).
ModelSpec.sliding_layers lists those layers; the costs of a layer kind (dense, MoE) take the mean over the
model's layers (ModelSpec.window_share).
"""
from __future__ import annotations

import math

import numpy as np


def band_entries(seq_length, window):
    """Scores of one head's s × s matrix a causal window of w keys leaves unmasked:
        Σ_{i=0}^{s−1} min(i + 1, w) = w·s − w(w − 1)/2  for w ≤ s;
        s(s + 1)/2 (the causal triangle) for w ≥ s."""
    s = np.asarray(seq_length, dtype=float)
    w = np.minimum(float(window), s)
    return w * s - w * (w - 1.0) / 2.0


def layer_kinds(model, seq_length, phi: float, *, causal: bool) -> list[tuple[float, float, bool]]:
    """[(share of the layers, φ, windowed)] of the model's full and windowed attention layers, φ the share of
    the s² score matrix counted (flops.causal_fraction: 1/2 causal, 1 full). A windowed layer counts the causal φ
    scaled by the band over the triangle, φ · band(s, w) / band(s, s) (= φ when w ≥ s), when `causal`
    (FlashAttention skips the masked blocks; the causal reporting convention); the whole matrix (φ = 1) when not
    (materialised attention computes every score and masks them after)."""
    sigma = model.window_share
    kinds = [(1.0 - sigma, phi, False)] if sigma < 1.0 else []
    if sigma:
        s = float(seq_length)
        w_phi = phi * float(band_entries(s, model.sliding_window) / band_entries(s, s)) if causal else phi
        kinds.append((sigma, w_phi, True))
    return kinds


def mean_fraction(model, seq_length, phi: float, *, causal: bool) -> float:
    """The share of s² counted per layer, averaged over the model's layers (`layer_kinds`)."""
    return sum(share * p for share, p, _ in layer_kinds(model, seq_length, phi, causal=causal))


def window_kernel(keys, window, q_tile: int):
    """(x, factor, banded): the causal table's point a windowed FlashAttention kernel reads, the factor on its
    efficiency, and whether the window is narrower than the kernel's keys, for a query block of `keys` keys (s, or
    s/c under ring CP).

    FlashAttention's local attention visits only the key tiles that meet the band (flash-attn n_block_min /
    n_block_max): a tile of Q query rows visits k_w = ⌈(w − 1)/Q⌉ + 1 key tiles, of which the band fills w·Q of
    the k_w·Q² scores. A causal kernel over L = (2k_w − 1)·Q keys visits k_w tiles per query tile on average
    ((T + 1)/2 of them, T = L/Q): the same work per thread block, so the window runs at the rate of the tiles the
    causal table measures at L. Tables count useful FLOPs; the causal kernel fills T/(T + 1) of the tiles it
    visits, the windowed one w/(k_w·Q):
        η_w = η(L) · (w / (k_w·Q)) · (T + 1)/T
    A window that reaches the query block's keys (L ≥ keys) is the causal kernel: (keys, 1, False)."""
    x = np.asarray(keys, dtype=float)
    k_w = math.ceil((float(window) - 1.0) / q_tile) + 1
    big_l = (2 * k_w - 1) * q_tile
    t = big_l / q_tile
    f = (float(window) / (k_w * q_tile)) * (t + 1.0) / t
    inside = big_l < x
    return np.where(inside, float(big_l), x), np.where(inside, f, 1.0), inside
