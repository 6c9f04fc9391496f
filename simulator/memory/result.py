"""The memory verdict of one layout: per-stage breakdowns (`MemoryBreakdown`), the worst stage, and the
one reason text of a layout that does not fit (`infeasibility_reasons`, shared by memory, estimate
and sweep). `memory_result` builds the result from per-stage arrays (`breakdown.stage_memory_arrays`,
or a row of the kernel's per-stage output); `to_dict()` follows DESIGN.md's JSON contract.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

import numpy as np

from ..dedup import distinct_rows
from ..spec.layout import Layout
from ..spec.model import ModelSpec
from ..spec.training import Training

CONSUMERS = ("params", "grads", "optimizer", "activations", "kv_cache", "other")

@dataclass(frozen=True, kw_only=True)
class MemoryBreakdown:
    """Memory of one GPU of one pipeline stage, bytes. peak = the six consumers above `peak_bytes`.

    The consumers are those alive in the step's larger phase (memory/worst.py `peak_terms`): the
    activation phase, where other_bytes = overhead_bytes (CUDA context, NCCL, allocator reserve) +
    transient_bytes (buffers alive with the activations: ZeRO-3 gather buffers, the stack's framework
    buffers) + the framework's cached step segments, and grads_bytes leaves out gradients not allocated yet
    (set to None between steps); or the optimizer step, where activations_bytes is 0 and other_bytes holds
    the step's own buffers (optimizer_step_bytes: foreach Adam's denominator copy, or the training metrics'
    logits and log-probabilities after a backward where larger) + the overheads.
    host_bytes: CPU memory per GPU for offloaded states (not part of peak).
    peak_bytes is the device's total (what nvidia-smi shows). framework_bytes: the stack's buffers in it
    (memory/framework.py); context_bytes: CUDA context + NCCL buffers, outside the caching allocator;
    allocated_bytes: the allocator's allocated peak (torch.cuda.max_memory_allocated); the allocator's
    reserved peak (max_memory_reserved) is peak_bytes − context_bytes (`memory_counter_bytes`).
    """

    stage: int
    layers: int
    params: float  # parameters resident on the GPU before ZeRO sharding (count)
    inflight_microbatches: float
    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    kv_cache_bytes: float
    other_bytes: float
    peak_bytes: float
    host_bytes: float
    overhead_bytes: float
    transient_bytes: float
    framework_bytes: float = 0.0
    context_bytes: float = 0.0
    allocated_bytes: float = 0.0
    optimizer_step_bytes: float = 0.0

    def biggest_consumer(self) -> tuple[str, float]:
        """(name, bytes) of the largest of params, grads, optimizer, activations, kv_cache, other."""
        vals = [(getattr(self, f"{c}_bytes"), c) for c in CONSUMERS]
        b, name = max(vals)
        return name, b

    def to_dict(self) -> dict:
        return asdict(self)

_COMPONENT_LABEL = {"params_bytes": "params", "grads_bytes": "grads", "optimizer_bytes": "optimizer",
                    "activations_bytes": "activations", "kv_cache_bytes": "kv cache", "other_bytes": "other"}

def infeasibility_reasons(out: dict, feasible: np.ndarray, worst_stage: np.ndarray, hbm_bytes: float) -> np.ndarray:
    """The one reason text of a layout that does not fit: '' where it fits; else '<biggest consumer>: X GiB
    of Y GiB peak > Z GiB HBM (stage i)' on the worst stage. `out`: the worst stage's `<consumer>_bytes`
    and `peak_bytes`, (N,) arrays; formatted once per distinct message."""
    reason = np.full(len(feasible), "", dtype=object)
    bad = np.flatnonzero(~feasible)
    if bad.size == 0:
        return reason
    comps = [k for k in _COMPONENT_LABEL if k in out]
    stack = np.stack([np.asarray(out[k], dtype=float)[bad] for k in comps], axis=1)
    big = np.argmax(stack, axis=1)
    gib = 2.0**30
    big_d = np.round(stack[np.arange(bad.size), big] / gib * 10).astype(np.int64)  # tenths of GiB
    peak_d = np.round(np.asarray(out["peak_bytes"], dtype=float)[bad] / gib * 10).astype(np.int64)
    stage = worst_stage[bad]
    first, inv = distinct_rows(big, big_d, peak_d, stage)  # many rows share a message: format each once
    hbm = f"{hbm_bytes / gib:.1f}"
    names = [_COMPONENT_LABEL[c] for c in comps]
    text = np.empty(len(first), dtype=object)
    text[:] = [f"{names[b]}: {x // 10}.{x % 10} GiB of {y // 10}.{y % 10} GiB peak > {hbm} GiB HBM (stage {j})"
               for b, x, y, j in zip(*(a[first].tolist() for a in (big, big_d, peak_d, stage)))]
    reason[bad] = text[inv]
    return reason

@dataclass(frozen=True, kw_only=True)
class MemoryResult:
    """Per-stage breakdowns of one layout, the worst stage, and the verdict against HBM."""

    per_stage: tuple[MemoryBreakdown, ...]
    hbm_bytes: float | None
    feasible: bool
    reason: str
    inference: bool
    model: ModelSpec = field(repr=False)
    training: Training = field(repr=False)
    layout: Layout = field(repr=False)

    @property
    def worst(self) -> MemoryBreakdown:
        """The stage with the highest peak (first one on ties)."""
        return max(self.per_stage, key=lambda s: (s.peak_bytes, -s.stage))

    @property
    def peak_bytes(self) -> float:
        return self.worst.peak_bytes

    def to_frame(self):
        """One row per stage; columns are the MemoryBreakdown field names."""
        import pandas as pd

        return pd.DataFrame([s.to_dict() for s in self.per_stage])

    def to_dict(self) -> dict:
        """The JSON contract of DESIGN.md: model, layout, memory (worst-stage values + per_stage),
        feasible, reason; plus `hbm_bytes` and `inference`."""
        lay, tr, m = self.layout, self.training, self.model
        keys = [f"{c}_bytes" for c in CONSUMERS] + ["peak_bytes"]
        w = self.worst
        memory = {"peak_bytes": w.peak_bytes}
        memory.update({k: getattr(w, k) for k in keys if k != "peak_bytes"})
        memory.update({"host_bytes": w.host_bytes, "worst_stage": w.stage, "hbm_bytes": self.hbm_bytes,
                       "per_stage": [s.to_dict() for s in self.per_stage]})
        return {
            "model": m.summary(),
            "layout": lay.to_dict(tr.global_batch_size),
            "memory": memory,
            "inference": self.inference,
            "feasible": self.feasible,
            "reason": self.reason,
        }

def memory_result(arrays: dict, model: ModelSpec, training: Training, layout: Layout, hardware=None, *,
                  inference: bool = False) -> MemoryResult:
    """The MemoryResult of one layout from its per-stage arrays (stage_memory_arrays' names, at least
    layout.pp entries each: a row of the kernel's per-stage output, or one layout's arrays), with the
    verdict against `hardware.hbm_bytes` (None: no verdict, feasible=True, reason 'no hardware given')."""
    names = [f.name for f in fields(MemoryBreakdown) if f.name != "stage"]
    stages = []
    for i in range(layout.pp):
        vals = {k: float(arrays[k][i]) for k in names}
        vals["layers"] = int(round(vals["layers"]))
        stages.append(MemoryBreakdown(stage=i, **vals))
    stages = tuple(stages)
    hbm = getattr(hardware, "hbm_bytes", None) if hardware is not None else None
    if hbm is None:
        feasible, reason = True, "no hardware given"
    else:
        worst = max(stages, key=lambda s: (s.peak_bytes, -s.stage))
        feasible = worst.peak_bytes <= float(hbm)
        row = {f"{c}_bytes": np.array([getattr(worst, f"{c}_bytes")]) for c in CONSUMERS}
        reason = str(infeasibility_reasons({**row, "peak_bytes": np.array([worst.peak_bytes])}, np.array([feasible]),
                                           np.array([worst.stage]), float(hbm))[0])
    if hbm is not None and hasattr(hardware, "host_mem_bytes"):  # offloaded states against the host's RAM
        worst_host = max(stages, key=lambda s: (s.host_bytes, -s.stage))
        feasible, reason = host_verdict(np.array([feasible]), np.array([reason], dtype=object),
                                        np.array([worst_host.host_bytes]), np.array([worst_host.stage]), hardware)
        feasible, reason = bool(feasible[0]), str(reason[0])
    return MemoryResult(per_stage=stages, hbm_bytes=None if hbm is None else float(hbm), feasible=feasible,
                        reason=reason, inference=inference, model=model, training=training, layout=layout)


def host_verdict(feasible: np.ndarray, reason: np.ndarray, host_bytes: np.ndarray, stage: np.ndarray, hardware):
    """(feasible, reason) of N layouts with the host-RAM check added: a layout whose offloaded bytes per
    GPU (`host_bytes`, its worst stage `stage`) exceed the GPU's share of the node's host RAM
    (states.host_memory_reason) does not fit either; its reason follows the HBM one, if any."""
    from .states import host_memory_reason

    over = np.flatnonzero(np.asarray(host_bytes) > 0)
    if over.size == 0:
        return feasible, reason
    feasible, reason = np.array(feasible, dtype=bool), np.array(reason, dtype=object)
    for i in over:
        why = host_memory_reason(float(host_bytes[i]), host_mem_bytes=hardware.host_mem_bytes,
                                 gpus_per_node=hardware.gpus_per_node, stage=int(stage[i]))
        if why:
            reason[i] = f"{reason[i]}; {why}" if not feasible[i] else why
            feasible[i] = False
    return feasible, reason

def feasible_mask(arrays: dict[str, np.ndarray], hbm_bytes: float) -> np.ndarray:
    """Vectorised verdict for sweeps: True where every stage's peak fits in `hbm_bytes`; shape (N,) or ()."""
    return np.all(arrays["peak_bytes"] <= hbm_bytes, axis=-1)
