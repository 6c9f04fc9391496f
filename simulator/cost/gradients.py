"""What a step does to the gradients a rank keeps, besides reducing them: zeroing them before the step's first
backward, and adding each micro-batch's new weight gradients into them.

Both are memory-bound passes over gradient bytes (memory_ops.py `_memory_time`, η_memory at the bytes per kernel),
and both depend on the software stack: whether the gradients stay allocated between steps (`Stack.grad_buffer`)
and whether a weight-gradient GEMM accumulates into the kept gradient itself or autograd adds its output into it
(`Stack.grad_accumulation`).
"""
from __future__ import annotations

import numpy as np

from ..spec.training import Training
from .memory_ops import _memory_time

__all__ = ["grad_zeroing_s", "accumulation_share", "grad_accumulation_s"]


def grad_zeroing_s(training: Training, hardware, *, grad_bytes) -> np.ndarray:
    """Zeroing a rank's kept gradients, once per step, before the next step accumulates into them:

        t = G_rank / (HBM bytes/s · η_memory(G_rank))   with the stack's grad_buffer = "persistent", else 0

    G_rank = the gradient bytes the rank keeps (memory/states.py `zero_state_bytes_per_param` "grads" × its
    parameters: sharded from ZeRO-2 on). One fill pass that writes each byte once, a single kernel over the
    buffer (Megatron-Core DistributedDataParallel.zero_grad_buffer -> ParamAndGradBuffer.reset ->
    grad_data.zero_(), megatron/core/distributed/param_and_grad_buffer.py) or one multi-tensor kernel per
    device and dtype (torch Optimizer.zero_grad(set_to_none=False) -> torch._foreach_zero_,
    torch/optim/optimizer.py); with "set-to-none" zero_grad frees the gradients instead and the next backward
    writes fresh ones, so nothing is zeroed. The kernel is the `ZeroFunctor` multi-tensor kernel of the lent
    H100's profiled training steps (validation/h100/kernel_breakdown.csv; docs/compute.md compares them)."""
    if training.stack.grad_buffer != "persistent":
        return np.zeros_like(np.asarray(grad_bytes, dtype=float))
    return _memory_time(grad_bytes, 1.0, hardware)


def accumulation_share(stack, num_microbatches) -> np.ndarray:
    """The share of a step's micro-batches whose weight gradients find a gradient already there to add into:

        1 with kept gradients (grad_buffer "persistent": zeroed, not freed), (m − 1)/m when zero_grad set them to
        None (the first backward's AccumulateGrad takes the new gradient as the .grad without a copy: torch
        autograd accumulate_grad.h, "stealing" the incoming gradient when the variable has none)."""
    m = np.maximum(np.asarray(num_microbatches, dtype=float), 1.0)
    return np.ones_like(m) if stack.grad_buffer == "persistent" else (m - 1.0) / m


def grad_accumulation_s(training: Training, hardware, *, grad_bytes, tensors) -> np.ndarray:
    """One micro-batch's accumulation of new weight gradients into the kept ones, where autograd does it:

        t = max(3·G / (HBM bytes/s · η_memory(3·G / n)),  n · h)   with grad_accumulation = "autograd", else 0

    G the gradient bytes accumulated into, n the parameter tensors they are in: autograd's AccumulateGrad runs one
    in-place add per tensor, reading the kept gradient and the new one and writing the sum (torch
    `variable.grad += new_grad`, torch/csrc/autograd/functions/accumulate_grad.h), each issued by the host in h
    (the stack's host_s_per_kernel; its kernels_per_layer, counted on a first backward, hold none of them), so the
    adds take their GPU time or their issue time, whichever is longer (cost/launch.py's bound). "fused": the
    weight-gradient GEMM adds into the kept gradient itself (Megatron-LM gradient_accumulation_fusion, Transformer
    Engine fuse_wgrad_accumulation: the GEMM's beta = 1), no separate pass. Scale by `accumulation_share` for the
    micro-batches of a step that add."""
    stack = training.stack
    if stack.grad_accumulation != "autograd":
        return np.zeros_like(np.asarray(grad_bytes, dtype=float))
    gpu = _memory_time(3.0 * np.asarray(grad_bytes, dtype=float), tensors, hardware)
    return np.maximum(gpu, np.asarray(tensors, dtype=float) * stack.host_s_per_kernel)
