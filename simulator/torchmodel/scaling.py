"""Scaling of a torch model over GPU counts (data parallel): rows of step time, throughput and scaling
efficiency, and the exposed communication against the per-GPU batch.

Weak scaling (`batch_per_gpu` fixed, the global batch grows with the GPUs; Goyal et al. 2017) or strong
scaling (`global_batch` fixed, split over the GPUs). Scaling efficiency = throughput on n GPUs /
(n × throughput on one GPU with the same per-GPU batch (weak) or the whole global batch (strong)): 1 is
linear scaling; what it loses is the exposed communication, the compute's slowdown under the hidden
communication, DDP's buffer broadcast, and (strong scaling) the lower GEMM efficiency and the host bound
of smaller per-GPU batches.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from .cost import TorchTraining, layer_times
from .parallel import MODES, StepResult, ddp_step, fsdp_step

__all__ = ["Tracer", "ScalingRow", "scaling_rows", "step", "batch_sweep", "largest_batch_over"]


class Tracer:
    """Traces of one module at any batch, each traced once (trace.py `trace_module`)."""

    def __init__(self, module, input_shape, *, layers=None, device: str = "meta", input_dtype: str = "float32",
                 name: str | None = None):
        self.module, self.input_shape, self.layers = module, tuple(input_shape), layers
        self.device, self.input_dtype, self.name = device, input_dtype, name
        self._traces = {}

    def __call__(self, batch: int):
        from .trace import trace_module

        if batch not in self._traces:
            self._traces[batch] = trace_module(self.module, self.input_shape, batch, layers=self.layers,
                                               device=self.device, input_dtype=self.input_dtype, name=self.name)
        return self._traces[batch]


def step(trace, hardware, tt: TorchTraining, gpus: int, mode: str = "ddp") -> StepResult:
    """One data-parallel step in `mode` (ddp | fsdp)."""
    if mode not in MODES:
        raise InputError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    times = layer_times(trace, hardware, tt)
    return (ddp_step if mode == "ddp" else fsdp_step)(trace, hardware, tt, gpus, times=times)


@dataclass(frozen=True, kw_only=True)
class ScalingRow:
    """A step on `result.gpus` GPUs and its scaling efficiency against one GPU."""

    result: StepResult
    scaling_efficiency: float

    def as_dict(self) -> dict:
        return {**self.result.as_dict(), "scaling_efficiency": self.scaling_efficiency}


def _per_gpu(gpus, batch_per_gpu, global_batch):
    if (batch_per_gpu is None) == (global_batch is None):
        raise InputError("give either a per-GPU batch (weak scaling) or a global batch (strong scaling), not both")
    if batch_per_gpu is not None:
        return batch_per_gpu
    if global_batch % gpus:
        raise InputError(f"global batch {global_batch} is not divisible by {gpus} GPUs")
    return global_batch // gpus


def scaling_rows(tracer, hardware, tt: TorchTraining, gpus, *, batch_per_gpu: int | None = None,
                 global_batch: int | None = None, mode: str = "ddp") -> list[ScalingRow]:
    """One row per GPU count (module docstring)."""
    counts = [int(g) for g in gpus]
    if not counts or any(g < 1 for g in counts):
        raise InputError(f"gpus must be integers >= 1, got {list(gpus)!r}")
    base_batch = batch_per_gpu if batch_per_gpu is not None else global_batch
    base = step(tracer(base_batch), hardware, tt, 1, mode)
    rows = []
    for g in counts:
        r = step(tracer(_per_gpu(g, batch_per_gpu, global_batch)), hardware, tt, g, mode)
        rows.append(ScalingRow(result=r, scaling_efficiency=r.samples_per_s / (g * base.samples_per_s)))
    return rows


def batch_sweep(tracer, hardware, tt: TorchTraining, gpus: int, batches, mode: str = "ddp") -> list[StepResult]:
    """The step on `gpus` GPUs at each per-GPU batch of `batches` (where the exposed communication's share
    of the step grows as the per-GPU batch, and so the compute hiding it, shrinks)."""
    return [step(tracer(int(b)), hardware, tt, gpus, mode) for b in batches]


def largest_batch_over(results, fraction: float):
    """The largest per-GPU batch among `results` whose exposed fraction of the step is above `fraction`
    (None when none is): below it, data parallelism stops scaling linearly by more than `fraction`."""
    over = [r.batch_per_gpu for r in results if r.exposed_fraction > fraction]
    return max(over) if over else None
