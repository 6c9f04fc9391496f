"""Pipeline parallelism of a traced torch model: its layer list split into contiguous stages balanced by
time, run with 1F1B and replayed by the pipeline engine (simulator/pipeline/replay.py), with data
parallelism across the pipeline replicas.

Split: contiguous stages minimising the slowest stage's forward + backward time (the linear-partition
dynamic programme; a layer is indivisible, so a model with few top-level layers balances coarsely: give
finer `layers` to the trace). Stage boundary b sends the output of its last layer forward and the same
size of gradient back: `p2p_s` over the pipeline group's span (PP outermost in the placement order, so
neighbours sit `dp` GPUs apart). 1F1B makespan: the engine's replay of `build("1f1b")` with each stage's
own times (uniform stages give the closed form (m + p − 1)·(F + B), schedules/one_f_one_b.py).

After its last backward each stage all-reduces its gradients across the `dp` replicas in DDP buckets,
overlapped with that last backward by cost/fsdp.py's `reduce_behind_compute_exposed_s` (equal buckets of
the stage's gradients filled at an even pace: the closed form, not the per-gradient replay of
parallel.py, as a stage's layers are few); the step ends when the slowest rank's last backward, exposed
all-reduce and optimizer step have. Memory per stage: its parameters' states and DDP buckets, and one
micro-batch's saved activations × the micro-batches 1F1B keeps in flight on it, min(m, p − i).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cost.collectives import all_reduce_s, p2p_s
from ..cost.fsdp import reduce_behind_compute_exposed_s
from ..cost.topology import group_span
from ..errors import InputError
from ..pipeline import replay
from ..schedules import build
from ..schedules.one_f_one_b import inflight_1f1b
from .cost import MIB, MemoryBreakdown, TorchTraining, activation_bytes, layer_times, optimizer_step_s, state_memory

__all__ = ["balanced_split", "PipelineResult", "pipeline_step"]


def balanced_split(cost, stages: int) -> tuple[int, ...]:
    """Start index of each of `stages` contiguous, non-empty groups of `cost` (one number per layer) that
    minimise the largest group sum (ties: the earliest split). InputError when there are fewer layers
    than stages."""
    c = [float(x) for x in cost]
    n = len(c)
    if not isinstance(stages, int) or stages < 1:
        raise InputError(f"pp must be an integer >= 1, got {stages!r}")
    if stages > n:
        raise InputError(f"pp {stages} > {n} layers: each pipeline stage needs at least one layer")
    prefix = np.concatenate([[0.0], np.cumsum(c)])
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(stages + 1)]  # best[s][j]: first j layers in s stages
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for s in range(1, stages + 1):
        for j in range(s, n + 1):
            for i in range(s - 1, j):
                v = max(best[s - 1][i], prefix[j] - prefix[i])
                if v < best[s][j]:
                    best[s][j], cut[s][j] = v, i
    starts, j = [], n
    for s in range(stages, 0, -1):
        j = cut[s][j]
        starts.append(j)
    return tuple(reversed(starts))


@dataclass(frozen=True, kw_only=True)
class PipelineResult:
    """A 1F1B step of `pp` stages × `dp` replicas: the split (layer names per stage), stage times per
    micro-batch, the replayed makespan and bubble, the step, and the worst stage's memory."""

    pp: int
    dp: int
    microbatches: int
    micro_batch: int
    stages: tuple[tuple[str, ...], ...]
    stage_forward_s: tuple[float, ...]
    stage_backward_s: tuple[float, ...]
    p2p_s: tuple[float, ...]
    makespan_s: float
    bubble_fraction: float
    dp_exposed_s: float
    optimizer_s: float
    step_s: float
    memory: MemoryBreakdown
    memory_stage: int

    @property
    def global_batch(self) -> int:
        return self.dp * self.microbatches * self.micro_batch

    @property
    def samples_per_s(self) -> float:
        return self.global_batch / self.step_s


def _stage_sums(values, starts, n):
    ends = list(starts[1:]) + [n]
    return [float(np.sum(values[a:b])) for a, b in zip(starts, ends)]


def _dp_tail(stage_params, stage_bwd, hardware, tt, span, dp):
    """Per stage: exposed seconds of its gradient all-reduce behind its last backward (equal buckets)."""
    g = np.asarray(stage_params, dtype=float) * tt.training.grad_bytes
    if dp == 1:
        return np.zeros_like(g)
    n = np.maximum(np.ceil(g / (tt.bucket_mb * MIB)), 1.0)
    r = np.asarray(all_reduce_s(hardware, g / n, span), dtype=float)
    return np.where(g > 0, reduce_behind_compute_exposed_s(np.asarray(stage_bwd) / n, r, n), 0.0)


def pipeline_step(trace, hardware, tt: TorchTraining, *, pp: int, dp: int = 1, microbatches: int) -> PipelineResult:
    """1F1B over `pp` stages of `trace` (traced at the micro-batch size) with `microbatches` micro-batches,
    `dp` pipeline replicas: the module docstring."""
    if not isinstance(microbatches, int) or microbatches < 1:
        raise InputError(f"microbatches must be an integer >= 1, got {microbatches!r}")
    times = layer_times(trace, hardware, tt)
    starts = balanced_split(times.forward_s + times.backward_s, pp)
    n = len(trace.layers)
    f, b = _stage_sums(times.forward_s, starts, n), _stage_sums(times.backward_s, starts, n)
    ends = list(starts[1:]) + [n]
    out = [trace.layers[e - 1] for e in ends[:-1]]  # the layer before each boundary
    span_pp = group_span(hardware, group="pp", dp=dp, pp=pp)
    msg = np.array([l.output_float_elements * tt.activation_bytes + l.output_other_bytes for l in out])
    p2p = np.asarray(p2p_s(hardware, msg, span_pp), dtype=float) * np.ones(len(out)) if out else np.zeros(0)
    tl = replay(build("1f1b", pp=pp, microbatches=microbatches), forward_s=f, backward_s=b,
                p2p_s=p2p if len(p2p) else 0.0)
    offs = tl.schedule.arrays.rank_offsets
    rank_end = np.array([tl.end_s[offs[r + 1] - 1] for r in range(pp)])
    params = _stage_sums(np.array([l.params for l in trace.layers], dtype=float), starts, n)
    tail = _dp_tail(params, b, hardware, tt, group_span(hardware, group="dp", dp=dp, pp=pp), dp)
    opt = np.array([optimizer_step_s(p, hardware, tt) for p in params])
    step = float(np.max(rank_end + tail + opt))
    memory, worst = _worst_stage(trace, tt, hardware, starts, params, microbatches, pp)
    names = tuple(tuple(l.name for l in trace.layers[a:e]) for a, e in zip(starts, ends))
    return PipelineResult(pp=pp, dp=dp, microbatches=microbatches, micro_batch=trace.batch, stages=names,
                          stage_forward_s=tuple(f), stage_backward_s=tuple(b), p2p_s=tuple(map(float, p2p)),
                          makespan_s=tl.makespan_s, bubble_fraction=tl.bubble_fraction,
                          dp_exposed_s=float(tail.max()), optimizer_s=float(opt.max()), step_s=step,
                          memory=memory, memory_stage=worst)


def _worst_stage(trace, tt, hardware, starts, params, microbatches, pp):
    """(MemoryBreakdown, stage index) of the stage with the highest peak."""
    from dataclasses import replace

    n = len(trace.layers)
    ends = list(starts[1:]) + [n]
    best = None
    for i, (a, e) in enumerate(zip(starts, ends)):
        sub = replace(trace, layers=trace.layers[a:e])
        inflight = float(inflight_1f1b(pp, microbatches, i))
        m = state_memory(params[i], tt, hardware, activations=activation_bytes(sub, tt) * inflight)
        if best is None or m.peak_bytes > best[0].peak_bytes:
            best = (m, i)
    return best
