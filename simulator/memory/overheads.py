"""Runtime memory outside the tensors the model accounts for: documented, overridable defaults.

| item                    | default                                  | source |
|-------------------------|------------------------------------------|--------|
| CUDA context            | 0.5 GiB (context, cuBLAS/cuDNN handles and workspaces, lazy module loading) | PyTorch maintainers, pytorch/pytorch #107667, #109888: ~300–400 MB with CUDA ≥ 11.7 lazy loading; cuBLAS workspace up to 32 MiB per handle |
| NCCL buffers            | 4 MiB × 2 (send, receive) × 16 channels = 128 MiB per communicator the rank is in (each parallel degree > 1) | NCCL_BUFFSIZE default 4 MiB per channel per peer (NCCL environment docs); channel count is topology dependent [order of magnitude] |
| allocator reserve       | 5 % of all tensor bytes (fragmentation, reserved but unallocated cache) | Megatron-LM theoretical_memory_usage.py ×1.05 "buffer for optimizer and misc temporaries"; ZeRO-R §3.2 on fragmentation |

Change them per run with `Overheads(cuda_context_bytes=..., nccl_bytes_per_group=...,
allocator_reserve_fraction=...)`; `Overheads.none()` turns them off (the theoretical tensor bytes only).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..units import MiB


@dataclass(frozen=True, kw_only=True)
class Overheads:
    """Per-GPU runtime overheads (bytes, fraction); see the module table for the defaults' sources."""

    cuda_context_bytes: float = 512 * MiB
    nccl_bytes_per_group: float = 128 * MiB
    allocator_reserve_fraction: float = 0.05

    def __post_init__(self):
        for name in ("cuda_context_bytes", "nccl_bytes_per_group", "allocator_reserve_fraction"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise InputError(f"overheads {name} must be a finite number >= 0, got {v!r}")
        if self.allocator_reserve_fraction >= 1:
            raise InputError(f"overheads allocator_reserve_fraction must be < 1, got {self.allocator_reserve_fraction!r}")

    @classmethod
    def none(cls) -> "Overheads":
        """No overheads: the tensor bytes of the model only."""
        return cls(cuda_context_bytes=0.0, nccl_bytes_per_group=0.0, allocator_reserve_fraction=0.0)


def communicator_count(*, tp, pp, dp, cp, ep) -> np.ndarray:
    """Number of NCCL communicators a rank belongs to: one per parallel degree > 1 (TP, PP, DP, CP, EP)."""
    return sum((np.asarray(x) > 1).astype(float) for x in (tp, pp, dp, cp, ep))


def overhead_bytes(overheads: Overheads, *, tensor_bytes, tp, pp, dp, cp, ep) -> np.ndarray:
    """context + NCCL buffers × communicators + reserve fraction × tensor bytes (per rank).

    `tensor_bytes` has shape (pp,) or (N, pp); degrees are scalars or arrays of shape (N,).
    """
    groups = communicator_count(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep)
    fixed = overheads.cuda_context_bytes + overheads.nccl_bytes_per_group * np.asarray(groups, dtype=float)
    return np.asarray(fixed)[..., None] + overheads.allocator_reserve_fraction * np.asarray(tensor_bytes)
