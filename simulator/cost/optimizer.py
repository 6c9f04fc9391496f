"""The optimizer step of a rank: HBM bytes moved per parameter and the step's time.

Split from compute.py: the step is one memory-bound pass over the parameters a rank holds, separate
from the per-microbatch F/B/W op times. The step of a rank is `optimizer_params_step_s` of the
parameters it holds (spec/placement.py) over the ZeRO sharding degrees (spec/rules.py
`shard_degrees`); its time is bytes / (HBM bytes/s · η) with η the profile's `optimizer` table, else
η_memory (memory_ops.py `_memory_time`; formulas.md §6.3, §7.1).
"""
from __future__ import annotations

import numpy as np

from ..spec.training import Training
from .memory_ops import _memory_time

__all__ = ["optimizer_bytes_per_param", "foreach_adam_bytes_per_param", "optimizer_params_step_s",
           "cpu_adam_bytes_per_param", "offload_step_s"]


def optimizer_bytes_per_param(training: Training) -> float:
    """HBM bytes the optimizer step moves per parameter (one fused multi-tensor kernel pass).

    Adam/AdamW: read the gradient (grad_bytes), read + write the master copy (2·master_bytes: 2·4 for an fp32
    one), read + write each moment (2·states·optimizer dtype bytes), write the working copy (param_bytes),
    and read it too when there is no full master copy (none, or only its 16-bit remainders, which the kernel joins
    to the bf16 weight: Apex DistributedFusedAdam's). bf16 mixed precision, fp32 grads, Adam:
    4 + 8 + 16 + 2 = 30 bytes. SGD: gradient + parameter read and write.
    """
    from ..units import DTYPE_BYTES

    states = training.optimizer_state_count * 2 * DTYPE_BYTES[training.optimizer_dtype]
    master = 2 * training.master_bytes
    param = training.param_bytes * (1 if training.master_bytes == 4 else 2)
    return float(training.grad_bytes + master + states + param)


# torch.optim.Adam/AdamW(foreach=True) step, one multi-tensor op per line (torch/optim/adam.py
# `_multi_tensor_adam`, decoupled weight decay as AdamW; amsgrad, maximize, capturable off): the tensors each
# op reads and writes, as (reads, writes) over p = the parameter the optimizer steps (its master copy
# when there is one), m, v = the moments, g = the gradient, d = the denominator temporary
FOREACH_ADAMW_OPS = (
    ("_foreach_mul_(params, 1 - lr*wd)", ("p",), ("p",)),
    ("_foreach_lerp_(exp_avgs, grads, 1 - beta1)", ("m", "g"), ("m",)),
    ("_foreach_mul_(exp_avg_sqs, beta2)", ("v",), ("v",)),
    ("_foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)", ("v", "g", "g"), ("v",)),
    ("_foreach_sqrt(exp_avg_sqs)", ("v",), ("d",)),
    ("_foreach_div_(denom, bias_correction2_sqrt)", ("d",), ("d",)),
    ("_foreach_add_(denom, eps)", ("d",), ("d",)),
    ("_foreach_addcdiv_(params, exp_avgs, denom, -step_size)", ("p", "m", "d"), ("p",)),
)


def foreach_adam_bytes_per_param(training: Training) -> float:
    """HBM bytes per parameter of torch's foreach Adam/AdamW step: each op of FOREACH_ADAMW_OPS reads and
    writes whole tensors (no fusion across ops), p in the stepped dtype (the fp32 master when present),
    m, v, d in the optimizer dtype, g in the gradient dtype; plus the working copy written from the
    master (param_bytes) when there is one. Pure bf16: 4·2 + 14·2 + 3·2 = 42 bytes, 3× the fused
    kernel's 14."""
    from ..units import DTYPE_BYTES

    size = {"p": training.master_bytes or training.param_bytes, "m": DTYPE_BYTES[training.optimizer_dtype],
            "v": DTYPE_BYTES[training.optimizer_dtype], "d": DTYPE_BYTES[training.optimizer_dtype],
            "g": training.grad_bytes}
    total = sum(size[t] for _, reads, writes in FOREACH_ADAMW_OPS for t in reads + writes)
    return float(total + (training.param_bytes if training.master_bytes else 0))


def cpu_adam_bytes_per_param(training: Training) -> float:
    """Host-memory bytes per parameter of ZeRO-Offload's CPU Adam step (DeepSpeedCPUAdam): the fused pass
    of `optimizer_bytes_per_param` over the host's copies (Ren et al. 2021, USENIX ATC §4.1: fp32
    gradient partition, fp32 master, fp32 moments on the CPU), the gradient read in fp32 (4 B) whatever
    the GPU gradient dtype: bf16 mixed precision, Adam: 4 + 8 + 16 + 2 = 30 bytes."""
    return float(optimizer_bytes_per_param(training) - training.grad_bytes + 4)


def offload_step_s(params, *, grad_bytes: float, param_bytes: float, cpu_bytes_per_param: float,
                   pcie_bytes_per_s: float, host_mem_bytes_per_s: float, gpus_per_node: int) -> np.ndarray:
    """The optimizer step of ZeRO-Offload for a GPU whose optimizer partition has `params` parameters:

        t = Ψ·G / B_pcie  +  Ψ·K_cpu / (B_host / g)  +  Ψ·P / B_pcie

    gradients GPU→host over the GPU's PCIe link (Ψ·G bytes), the CPU Adam pass over host memory (K_cpu
    bytes per parameter, `cpu_adam_bytes_per_param`), whose bandwidth B_host the node's g GPUs share
    (each GPU's CPU Adam runs at the same time), then the updated parameters host→GPU (Ψ·P bytes).
    Ren et al. 2021 (ZeRO-Offload, USENIX ATC) §4.1: gradients are offloaded and parameters swapped in
    every step. [assumption] The three run one after another after the data-parallel tail (no overlap
    with the backward and no one-step delayed update, DPU §4.3): ZeRO-Offload overlaps the gradient copy
    with the backward of the last microbatch, which this step does not see, so t is an upper bound by at
    most the gradient copy; B_host a peak, so the CPU part is a lower bound. PCIe bandwidths per direction
    (B_pcie: the profile's [host] pcie_gb_per_s; H100 SXM Gen5 x16 ~64 GB/s, A100 Gen4 x16 ~32 GB/s)."""
    psi = np.asarray(params, dtype=float)
    pcie = psi * (grad_bytes + param_bytes) / pcie_bytes_per_s
    return pcie + psi * cpu_bytes_per_param / (host_mem_bytes_per_s / gpus_per_node)


def optimizer_params_step_s(training: Training, hardware, *, non_expert, expert, shard_degree=1.0,
                            expert_shard_degree=1.0) -> np.ndarray:
    """Optimizer-step time of a rank holding `non_expert` and `expert` parameters whose state is
    sharded `shard_degree` / `expert_shard_degree` ways (arrays broadcast):

        t = (Ψ / Z + Ψ_exp / Z_e) · optimizer_bytes_per_param / (HBM bytes/s · η_optimizer(bytes));

    η_optimizer is the profile's `optimizer` table (`parasim calibrate optimizer`: torch's fused AdamW
    timed over parameter counts) and η_memory where the profile has none. With `offload_optimizer` the step
    runs on the host: `offload_step_s` (PCIe transfers and the CPU Adam pass; the profile's host fields,
    spec/hardware.py HOST_DEFAULTS where absent). With the stack's `optimizer_impl = "foreach"` (Adam/AdamW):
    torch's foreach step, `foreach_adam_bytes_per_param` in len(FOREACH_ADAMW_OPS) passes at η_memory; with
    "for-loop" the same passes one parameter at a time (torch `_single_tensor_adam` runs FOREACH_ADAMW_OPS'
    ops per tensor: the same bytes; its per-tensor launches are not modelled)."""
    params = non_expert / shard_degree + expert / expert_shard_degree
    if training.offload_optimizer:
        from ..spec.hardware import HOST_DEFAULTS

        host = {attr: getattr(hardware, attr, default) for attr, _, _, default in HOST_DEFAULTS}
        return offload_step_s(params * 1.0, grad_bytes=training.grad_bytes, param_bytes=training.param_bytes,
                              cpu_bytes_per_param=cpu_adam_bytes_per_param(training),
                              pcie_bytes_per_s=host["host_pcie_bytes_per_s"],
                              host_mem_bytes_per_s=host["host_mem_bytes_per_s"],
                              gpus_per_node=getattr(hardware, "gpus_per_node", 1))
    if training.stack.optimizer_impl in ("foreach", "for-loop") and training.optimizer in ("adam", "adamw"):
        bytes_ = params * foreach_adam_bytes_per_param(training)  # one pass per op: η_memory per pass
        return _memory_time(bytes_, float(len(FOREACH_ADAMW_OPS)), hardware)
    bytes_ = params * optimizer_bytes_per_param(training)
    if hardware.has_efficiency("optimizer"):
        return bytes_ / (hardware.hbm_bytes_per_s * hardware.interp_efficiency("optimizer", np.maximum(bytes_, 1.0)))
    return _memory_time(bytes_, 1.0, hardware)
