"""Attention kernels on a GPU: which efficiency tables a stack's kernel reads, and how much of the GPU
one kernel fills (split from compute.py, which times the ops)."""
from __future__ import annotations

import numpy as np


Q_TILE = 128  # query rows per FlashAttention thread block on Hopper/Ampere (FA2/FA3, cuDNN fprop kernel_m=128)
REFERENCE_TILES = 2048  # the published benchmarks' grid: 16k tokens x 16 heads (hdim 128) / 128-row tiles


def attention_occupancy(tiles, sm_count: int):
    """How much of the GPU an attention kernel of `tiles` thread blocks (batch x heads x query tiles of
    Q_TILE rows) keeps busy, relative to the benchmarks the efficiency tables come from (REFERENCE_TILES
    blocks: 16k tokens x 2048 = heads x head dim, the FlashAttention papers' grid), by wave quantization:

        occ(n) = n / (SMs · ceil(n / SMs)),   factor = occ(tiles) / occ(REFERENCE_TILES)

    (one block per SM per wave, the last wave partly idle: the CUDA occupancy model for kernels whose
    blocks fill an SM; Dao 2023, FlashAttention-2 §3.2, parallelises over batch, heads and query blocks so
    that small batches fill the GPU). 1 when the profile gives no sm_count."""
    if not sm_count:
        return np.ones_like(np.asarray(tiles, dtype=float))
    n = np.maximum(np.asarray(tiles, dtype=float), 1.0)
    occ = n / (sm_count * np.ceil(n / sm_count))
    ref = REFERENCE_TILES / (sm_count * np.ceil(REFERENCE_TILES / sm_count))
    return np.minimum(occ / ref, 1.0)


def attention_tables(hardware, kernel: str) -> tuple[str, str]:
    """(forward, backward) efficiency tables of attention kernel `kernel` (spec/stack.py) on `hardware`:
    `attention_<kernel>` / `attention_bwd_<kernel>` where the profile has them (published per-kernel
    benchmarks), else the generic `attention` / `attention_bwd`; a backward without its own table reads
    the generic backward table, then the forward one."""
    fwd = f"attention_{kernel}" if hardware.has_efficiency(f"attention_{kernel}") else "attention"
    bwd = next((t for t in (f"attention_bwd_{kernel}", "attention_bwd") if hardware.has_efficiency(t)), "attention")
    return fwd, bwd
