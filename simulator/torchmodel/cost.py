"""Time and memory of a traced torch model (trace.py) on one GPU of a hardware profile.

Per op (the transformer path's rules, reused from simulator/cost/compute.py and memory_ops.py, not
restated here): an op with FLOPs (convolution, matmul, their backward, attention) runs at
peak(compute dtype) · η_gemm(FLOPs per kernel) and as a roofline against its bytes, `compute._combine`
of the two; every other op (batch norm, ReLU, residual adds, pooling, copies) is memory-bound:
bytes / (HBM bytes/s · η_memory(bytes per kernel)) (`memory_ops._memory_time`). Bytes = float elements
× the activation dtype's bytes + the other tensors' bytes (trace.py). [assumption] Convolutions use
the GEMM table (cuDNN runs them as implicit GEMMs; no convolution table is measured).

Per layer pass: the sum of its ops, no shorter than the host takes to issue them (ops × host seconds per
kernel, the eager-framework bound of simulator/cost/launch.py, with the stack preset's host time; one
recorded op ≈ one kernel).

Precision (`TorchTraining`): the default is torch autocast (AMP) training: fp32 parameters, gradients and
optimizer states, GEMMs and activations in bf16; the state bytes come from spec/training.py's `Training`
(param, gradient, master, optimizer-state bytes) and the optimizer step from cost/optimizer.py.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cost.compute import _combine, _peak
from ..cost.memory_ops import _memory_time
from ..cost.gradients import grad_zeroing_s
from ..cost.optimizer import optimizer_params_step_s
from ..errors import InputError
from ..spec.training import OPTIMIZERS, STATE_DTYPES, Training

__all__ = ["TorchTraining", "COMPUTE_DTYPES", "LayerTimes", "op_times_s", "layer_times", "MemoryBreakdown",
           "state_memory", "optimizer_step_s"]

COMPUTE_DTYPES = ("bf16", "fp16", "tf32", "fp32")
MIB = 2**20


@dataclass(frozen=True, kw_only=True)
class TorchTraining:
    """How a torch model is trained. Defaults: torch.cuda.amp / autocast bf16 with fp32 parameters and
    gradients, SGD with momentum (He et al. 2016 §3.4; Goyal et al. 2017), torch DDP's gradient buckets
    (`bucket_cap_mb` 25 MiB, the first bucket 1 MiB: torch/nn/parallel/distributed.py, dist.
    _DEFAULT_FIRST_BUCKET_BYTES), `gradient_as_bucket_view` off (DDP then keeps a second copy of the
    gradients in its buckets), host time per kernel of the `fsdp` stack preset (torch eager) unless given."""

    compute_dtype: str = "bf16"
    param_dtype: str = "fp32"  # fp32 (AMP) or bf16 (with an fp32 master copy)
    optimizer: str = "sgd-momentum"
    grad_dtype: str = "fp32"
    bucket_mb: float = 25.0
    first_bucket_mb: float = 1.0
    gradient_as_bucket_view: bool = False
    roofline: bool = True
    host_s_per_kernel: float | None = None  # None: the `fsdp` stack preset's (torch eager dispatch)
    comm_slowdown: float | None = None  # None: the hardware's compute_slowdown_under_comm
    fsdp_prefetch: int = 1

    def __post_init__(self):
        for name, allowed in (("compute_dtype", COMPUTE_DTYPES), ("param_dtype", ("fp32", "bf16")),
                              ("optimizer", OPTIMIZERS), ("grad_dtype", STATE_DTYPES)):
            if getattr(self, name) not in allowed:
                raise InputError(f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        for name in ("bucket_mb", "first_bucket_mb"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
                raise InputError(f"{name} must be > 0, got {v!r}")
        if not isinstance(self.fsdp_prefetch, int) or self.fsdp_prefetch < 0:
            raise InputError(f"fsdp_prefetch must be an integer >= 0, got {self.fsdp_prefetch!r}")
        if self.comm_slowdown is not None and not 0.0 <= self.comm_slowdown <= 1.0:
            raise InputError(f"comm_slowdown must be in [0, 1], got {self.comm_slowdown!r}")

    @property
    def training(self) -> Training:
        """The state bytes as spec/training.py counts them (a Training of one 1-token sequence)."""
        return Training(seq_length=1, global_batch_size=1, precision=self.param_dtype, optimizer=self.optimizer,
                        grad_dtype=self.grad_dtype, master_weights=self.param_dtype != "fp32")

    @property
    def activation_bytes(self) -> int:
        """Bytes per activation element: 2 under bf16/fp16 autocast, 4 in tf32/fp32."""
        return 2 if self.compute_dtype in ("bf16", "fp16") else 4

    def host_s(self) -> float:
        if self.host_s_per_kernel is not None:
            return float(self.host_s_per_kernel)
        from ..spec.stack import load_stack

        return load_stack("fsdp").host_s_per_kernel

    def slowdown(self, hardware) -> float:
        return hardware.compute_slowdown_under_comm if self.comm_slowdown is None else float(self.comm_slowdown)


def _op_arrays(ops):
    return (np.array([getattr(o, a) for o in ops], dtype=float).reshape(len(ops))
            for a in ("flops", "kernels", "float_elements", "other_bytes"))


def op_times_s(trace, hardware, tt: TorchTraining) -> np.ndarray:
    """Seconds of every op of `trace` (ModelTrace.ops order) on one GPU of `hardware` (module docstring)."""
    if not trace.ops:
        return np.zeros(0)
    flops, kernels, fe, ob = _op_arrays(trace.ops)
    peak = _peak(hardware, tt.compute_dtype)  # InputError naming the dtype where the profile has no peak
    bytes_ = fe * tt.activation_bytes + ob
    t_mem = _memory_time(bytes_, kernels, hardware)
    eff = hardware.interp_efficiency("gemm", np.maximum(flops / kernels, 1.0))
    t_math = flops / (peak * eff)
    return np.where(flops > 0, _combine(t_math, t_mem, tt.roofline), t_mem)


@dataclass(frozen=True, kw_only=True)
class LayerTimes:
    """Per layer (ModelTrace.layers order): forward and backward seconds on one GPU, and the seconds of
    each op after the host bound's stretch (`op_s`, ModelTrace.ops order)."""

    forward_s: np.ndarray
    backward_s: np.ndarray
    op_s: np.ndarray

    @property
    def total_forward_s(self) -> float:
        return float(self.forward_s.sum())

    @property
    def total_backward_s(self) -> float:
        return float(self.backward_s.sum())


def layer_times(trace, hardware, tt: TorchTraining) -> LayerTimes:
    """Layer passes: the sum of their ops, at least (ops issued) × host seconds per kernel; ops inside a
    host-bound pass are stretched by the same factor (so cumulative backward time, which DDP's bucket
    readiness reads, adds up to the layer times)."""
    t = op_times_s(trace, hardware, tt)
    n = len(trace.layers)
    layer = np.array([o.layer for o in trace.ops], dtype=np.int64)
    bwd = np.array([o.backward for o in trace.ops], dtype=bool)
    kernels = np.array([o.kernels for o in trace.ops], dtype=float)
    key = layer * 2 + bwd  # (layer, pass) groups
    gpu = np.bincount(key, weights=t, minlength=2 * n)
    host = np.bincount(key, weights=kernels, minlength=2 * n) * tt.host_s()
    passes = np.maximum(gpu, host)
    stretch = np.where(gpu > 0, passes / np.where(gpu > 0, gpu, 1.0), 1.0)
    return LayerTimes(forward_s=passes[0::2], backward_s=passes[1::2], op_s=t * stretch[key])


def optimizer_step_s(params, hardware, tt: TorchTraining) -> float:
    """The optimizer step over `params` parameters (cost/optimizer.py: one fused pass, η_optimizer or η_memory),
    with the zeroing of kept gradients (`grad_zeroing_s`, one device: nothing sharded)."""
    t = optimizer_params_step_s(tt.training, hardware, non_expert=float(params), expert=0.0)
    return float(t + grad_zeroing_s(tt.training, hardware, grad_bytes=float(params) * tt.training.grad_bytes))


@dataclass(frozen=True, kw_only=True)
class MemoryBreakdown:
    """Bytes per GPU. `params_bytes` the parameters resident (sharded under FSDP; plus the gathered units),
    `activations_bytes` what autograd saves for the backward (+ autocast's low-precision weight copies),
    `comm_buffer_bytes` DDP's gradient buckets (a second copy of the gradients unless
    gradient_as_bucket_view)."""

    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    comm_buffer_bytes: float
    hbm_bytes: float

    @property
    def peak_bytes(self) -> float:
        return (self.params_bytes + self.grads_bytes + self.optimizer_bytes + self.activations_bytes
                + self.comm_buffer_bytes)

    @property
    def feasible(self) -> bool:
        return self.peak_bytes <= self.hbm_bytes

    @property
    def reason(self) -> str:
        if self.feasible:
            return ""
        return f"peak {self.peak_bytes / 2**30:.1f} GiB > {self.hbm_bytes / 2**30:.1f} GiB HBM"


def activation_bytes(trace, tt: TorchTraining) -> float:
    """Saved activations of one micro-batch: float elements at the activation dtype + other bytes, plus,
    when autocast computes in a narrower dtype than the parameters, the cast weight copies the GEMMs save
    for their backward ([assumption] every parameter: BatchNorm's few are not cast)."""
    saved = sum(l.saved_float_elements for l in trace.layers) * tt.activation_bytes
    saved += sum(l.saved_other_bytes for l in trace.layers)
    casts = trace.params * tt.activation_bytes if tt.activation_bytes < tt.training.param_bytes else 0.0
    return float(saved + casts)


def state_memory(params, tt: TorchTraining, hardware, *, activations: float, shard: float = 1.0,
                 gathered_params: float = 0.0, ddp_buckets: bool = True) -> MemoryBreakdown:
    """Per-GPU memory of `params` parameters whose state is sharded `shard` ways (FSDP; 1 = DDP):
    parameters, gradients and optimizer states (Training's bytes per parameter) / shard, the parameters
    of `gathered_params` unsharded at once (FSDP's current and prefetched units), `activations`."""
    tr = tt.training
    p = float(params)
    return MemoryBreakdown(params_bytes=p * tr.param_bytes / shard + gathered_params * tr.param_bytes,
                           grads_bytes=p * tr.grad_bytes / shard,
                           optimizer_bytes=p * tr.optimizer_bytes / shard,
                           activations_bytes=float(activations),
                           comm_buffer_bytes=p * tr.grad_bytes if ddp_buckets and not tt.gradient_as_bucket_view
                           else 0.0,
                           hbm_bytes=float(hardware.hbm_bytes))
