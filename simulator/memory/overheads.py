"""Runtime memory outside the tensors the model accounts for: documented, overridable defaults.

| item                    | default                                  | source |
|-------------------------|------------------------------------------|--------|
| CUDA context            | the stack's `cuda_context_mib`, 512 MiB in every preset (context, library handles, lazy module loading; the BLAS workspaces are their own line) | PyTorch maintainers, pytorch/pytorch #107667, #109888: ~300–400 MB with CUDA ≥ 11.7 lazy loading. Builds without lazy loading load every kernel image: 1573 MiB measured on an A100 40GB with the torch of early 2022 (`torch.ones(1).cuda()` then nvidia-smi; bigscience tr11-176B-ml/chronicles-prequel.md), 1271 MiB on a V100 32GB (same file) |
| NCCL buffers            | 4 MiB × 2 (send, receive) × 16 channels = 128 MiB per communicator the rank is in (each parallel degree > 1) | NCCL_BUFFSIZE default 4 MiB per channel per peer (NCCL environment docs); channel count is topology dependent [order of magnitude] |
| allocator reserve       | 5 % of all tensor bytes (fragmentation, reserved but unallocated cache) | Megatron-LM theoretical_memory_usage.py ×1.05 "buffer for optimizer and misc temporaries"; ZeRO-R §3.2 on fragmentation |
| BLAS workspaces         | the hardware profile's `blas_workspace_mib` per handle × 2 handles in training (the forward's thread and autograd's backward thread each hold a cuBLAS handle with its own workspace), × 1 in inference; 0 without a profile or for a profile that does not give it | torch aten/src/ATen/cuda/CublasHandlePool.cpp: one workspace per (handle, stream), from the caching allocator, CUBLAS_WORKSPACE_CONFIG default ":4096:8" = 32 MiB on Hopper and Blackwell, ":4096:2:16:8" = 8.125 MiB before (ROCm: 128 MiB on gfx94x/gfx95x); handles are per thread (DeviceThreadHandlePool) |

Change them per run with `Overheads(cuda_context_bytes=..., nccl_bytes_per_group=...,
allocator_reserve_fraction=..., blas_workspace_bytes=...)`; `Overheads.none()` turns them off (the theoretical
tensor bytes only); `Overheads.for_stack(stack, hardware)` takes the stack's CUDA context and the hardware's BLAS
workspaces (what memory_breakdown and the sweep use by default).

The BLAS workspaces are allocations of the caching allocator that live for the whole run: counted in every
phase's tensor bytes, so in all three counters (memory/worst.py `peak_terms`).
The CUDA context and NCCL's buffers are outside PyTorch's caching allocator (`context_bytes`): nvidia-smi
counts them, `torch.cuda.max_memory_allocated` / `max_memory_reserved` do not. The reserve is the
allocator's reserved-but-unallocated share (memory_reserved − memory_allocated), which nvidia-smi and
max_memory_reserved count and max_memory_allocated does not (validate/predict.py `memory_counter`).
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
    blas_workspace_bytes: float = 0.0  # all BLAS workspaces of the GPU (in the caching allocator)

    def __post_init__(self):
        for name in ("cuda_context_bytes", "nccl_bytes_per_group", "allocator_reserve_fraction",
                     "blas_workspace_bytes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise InputError(f"overheads {name} must be a finite number >= 0, got {v!r}")
        if self.allocator_reserve_fraction >= 1:
            raise InputError(f"overheads allocator_reserve_fraction must be < 1, got {self.allocator_reserve_fraction!r}")

    @classmethod
    def for_stack(cls, stack, hardware=None, *, inference: bool = False) -> "Overheads":
        """The defaults with the stack's CUDA context (`Stack.cuda_context_mib`) and the BLAS workspaces of the
        hardware's GPU (`blas_workspace_bytes`: two handles in training, one in inference; none without hardware)."""
        per_handle = float(getattr(hardware, "blas_workspace_bytes", 0.0) or 0.0)
        return cls(cuda_context_bytes=float(stack.cuda_context_mib) * MiB,
                   blas_workspace_bytes=per_handle * blas_handles(inference))

    @classmethod
    def none(cls) -> "Overheads":
        """No overheads: the tensor bytes of the model only."""
        return cls(cuda_context_bytes=0.0, nccl_bytes_per_group=0.0, allocator_reserve_fraction=0.0)


def blas_handles(inference: bool) -> int:
    """cuBLAS handles a GPU's process holds while it runs the job: the Python thread's, and in training the
    autograd engine's device thread's, which runs the backward (torch's handle pool hands one to each thread;
    aten/src/ATen/cuda/CublasHandlePool.cpp, torch/csrc/autograd/engine.cpp)."""
    return 1 if inference else 2


def communicator_count(*, tp, pp, dp, cp, ep) -> np.ndarray:
    """Number of NCCL communicators a rank belongs to: one per parallel degree > 1 (TP, PP, DP, CP, EP)."""
    return sum((np.asarray(x) > 1).astype(float) for x in (tp, pp, dp, cp, ep))


def context_bytes(overheads: Overheads, *, tp, pp, dp, cp, ep) -> np.ndarray:
    """Bytes outside the caching allocator: CUDA context + NCCL buffers × communicators (shape of the degrees)."""
    groups = communicator_count(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep)
    return overheads.cuda_context_bytes + overheads.nccl_bytes_per_group * np.asarray(groups, dtype=float)


def overhead_bytes(overheads: Overheads, *, tensor_bytes, tp, pp, dp, cp, ep) -> np.ndarray:
    """context + NCCL buffers × communicators + reserve fraction × tensor bytes (per rank).

    `tensor_bytes` has shape (pp,) or (N, pp); degrees are scalars or arrays of shape (N,).
    """
    fixed = context_bytes(overheads, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep)
    return np.asarray(fixed)[..., None] + overheads.allocator_reserve_fraction * np.asarray(tensor_bytes)
