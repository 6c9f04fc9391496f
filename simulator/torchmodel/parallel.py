"""Data-parallel step of a traced torch model: DDP (gradient all-reduce in buckets, overlapped with the
backward) and FSDP (per-layer parameter all-gathers and gradient reduce-scatters on a second stream).

DDP (Li et al. 2020, "PyTorch Distributed", VLDB, §3.2.3; torch/nn/parallel/distributed.py): gradients
go into buckets in the order they become ready (DDP rebuilds its buckets after the first iteration in that
order); a bucket closes once it holds at least its cap (the first 1 MiB, the others 25 MiB by default)
and its all-reduce is issued when its last gradient is ready; the all-reduces run one at a time. Each
gradient's ready time is read off the trace: the backward ops run before its accumulation, timed
(`ddp_bucket_exposed_s`). With equal buckets filled at an even pace this is cost/fsdp.py's
`reduce_behind_compute_exposed_s`, r + (n − 1)·max(0, r − c) (the tests check the two agree); ResNet-like
models fill their first buckets fast (the last stage holds most of the parameters and little compute),
which the closed form's even pace would not see. DDP also broadcasts the module buffers (BatchNorm
statistics) from rank 0 before every forward (`broadcast_buffers=True`, the default).

FSDP (Zhao et al. 2023, "PyTorch FSDP", §3.3-3.4): one unit per top-level layer (`fully_shard` per
child, FSDP2), parameters gathered before each unit's forward and again before its backward
(reshard after forward), gradients reduce-scattered after it, prefetching d units ahead. cost/fsdp.py's
`forward_pass` / `backward_pass` replay equal units; a torch model's layers are not equal, so
`fsdp_forward_makespan` / `fsdp_backward_makespan` replay the same two-stream rules with one compute,
gather and reduce time per unit (the tests check them against cost/fsdp.py on equal units).

Overlapped communication slows the compute it hides under by the hardware's measured SM contention
(`compute_slowdown_under_comm`, kernel.py's rule): contention_s = slowdown × hidden communication.
Collective costs: cost/collectives.py over the data-parallel group's span (cost/topology.py `group_span`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..cost.collectives import all_gather_s, all_reduce_s, broadcast_s, reduce_scatter_s
from ..cost.topology import group_span
from ..errors import InputError
from .cost import MIB, MemoryBreakdown, TorchTraining, activation_bytes, layer_times, optimizer_step_s, state_memory

__all__ = ["StepResult", "ddp_buckets", "ddp_bucket_exposed_s", "ddp_step", "fsdp_step", "fsdp_forward_makespan",
           "fsdp_backward_makespan", "MODES"]

MODES = ("ddp", "fsdp")


@dataclass(frozen=True, kw_only=True)
class StepResult:
    """One training step on `gpus` GPUs, seconds per GPU: compute (forward, backward), the data-parallel
    communication (`comm_s` all of it, `exposed_comm_s` what the step waits for), the compute's slowdown
    under the hidden part (`contention_s`), DDP's buffer broadcast, the optimizer step; memory per GPU."""

    mode: str
    gpus: int
    batch_per_gpu: int
    forward_s: float
    backward_s: float
    comm_s: float
    exposed_comm_s: float
    contention_s: float
    buffer_sync_s: float
    optimizer_s: float
    buckets: int
    last_bucket_s: float
    memory: MemoryBreakdown

    @property
    def global_batch(self) -> int:
        return self.gpus * self.batch_per_gpu

    @property
    def step_s(self) -> float:
        return (self.forward_s + self.backward_s + self.exposed_comm_s + self.contention_s + self.buffer_sync_s
                + self.optimizer_s)

    @property
    def samples_per_s(self) -> float:
        return self.global_batch / self.step_s

    @property
    def exposed_fraction(self) -> float:
        """Exposed communication (with the buffer broadcast and contention) as a fraction of the step."""
        return (self.exposed_comm_s + self.contention_s + self.buffer_sync_s) / self.step_s

    def as_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k != "memory"}
        d.update(global_batch=self.global_batch, step_s=self.step_s, samples_per_s=self.samples_per_s,
                 exposed_fraction=self.exposed_fraction)
        m = self.memory
        d["memory"] = {"peak_bytes": m.peak_bytes, "params_bytes": m.params_bytes, "grads_bytes": m.grads_bytes,
                       "optimizer_bytes": m.optimizer_bytes, "activations_bytes": m.activations_bytes,
                       "comm_buffer_bytes": m.comm_buffer_bytes, "feasible": m.feasible, "reason": m.reason}
        return d


def _check_gpus(gpus) -> int:
    if not isinstance(gpus, (int, np.integer)) or isinstance(gpus, bool) or gpus < 1:
        raise InputError(f"gpus must be an integer >= 1, got {gpus!r}")
    return int(gpus)


def ddp_buckets(grad_ready, grad_bytes: float, *, first_cap_bytes: float, cap_bytes: float):
    """[(bytes, backward op index after which the bucket is full)] in the order gradients became ready:
    a bucket closes when it holds >= its cap (the first `first_cap_bytes`, then `cap_bytes`; torch
    `_compute_bucket_assignment_by_size`); the rest forms the last bucket."""
    out, size, ready, cap = [], 0.0, 0, first_cap_bytes
    for g in grad_ready:
        size += g.numel * grad_bytes
        ready = max(ready, g.op_index)
        if size >= cap:
            out.append((size, ready))
            size, ready, cap = 0.0, 0, cap_bytes
    if size > 0:
        out.append((size, ready))
    return out


def ddp_bucket_exposed_s(ready_s, reduce_s, backward_end_s: float) -> float:
    """Exposed seconds of reductions issued at `ready_s` (in order) lasting `reduce_s`, run one at a time
    on a communication stream beside a backward ending at `backward_end_s`: max(0, end of the last − end of
    the backward), each starting at max(its ready time, the previous one's end)."""
    free = 0.0
    for ready, r in zip(ready_s, reduce_s):
        free = max(free, float(ready)) + float(r)
    return max(0.0, free - float(backward_end_s))


def _backward_clock(trace, times):
    """Cumulative backward seconds after k backward ops, k = 0..n (a gradient's ready time)."""
    bwd = np.array([o.backward for o in trace.ops], dtype=bool)
    return np.concatenate([[0.0], np.cumsum(times.op_s[bwd])])


def ddp_step(trace, hardware, tt: TorchTraining, gpus: int, *, times=None) -> StepResult:
    """DDP over `gpus` GPUs, each running `trace` (its batch is the per-GPU batch): the module docstring."""
    gpus = _check_gpus(gpus)
    times = layer_times(trace, hardware, tt) if times is None else times
    tr = tt.training
    buckets = ddp_buckets(trace.grad_ready, tr.grad_bytes, first_cap_bytes=tt.first_bucket_mb * MIB,
                          cap_bytes=tt.bucket_mb * MIB)
    clock = _backward_clock(trace, times)
    sizes = np.array([b for b, _ in buckets], dtype=float)
    ready = clock[[i for _, i in buckets]] if buckets else np.zeros(0)
    span = group_span(hardware, group="dp", dp=gpus)
    reduce = np.asarray(all_reduce_s(hardware, sizes, span), dtype=float) * np.ones_like(sizes)
    exposed = ddp_bucket_exposed_s(ready, reduce, clock[-1])
    comm = float(reduce.sum())
    sync = float(broadcast_s(hardware, trace.buffer_bytes, span)) if gpus > 1 and trace.buffer_bytes else 0.0
    memory = state_memory(trace.params, tt, hardware, activations=activation_bytes(trace, tt))
    return StepResult(mode="ddp", gpus=gpus, batch_per_gpu=trace.batch, forward_s=times.total_forward_s,
                      backward_s=times.total_backward_s, comm_s=comm, exposed_comm_s=exposed,
                      contention_s=tt.slowdown(hardware) * max(comm - exposed, 0.0), buffer_sync_s=sync,
                      optimizer_s=optimizer_step_s(trace.params, hardware, tt), buckets=len(buckets),
                      last_bucket_s=float(reduce[-1]) if len(reduce) else 0.0, memory=memory)


def fsdp_forward_makespan(compute_s, gather_s, prefetch: int) -> float:
    """End of a forward through units with their own compute and all-gather seconds (cost/fsdp.py
    `forward_pass`'s rules): all-gather i starts when the stream is free and, with prefetch d >= 1, once
    unit i − d has started (at once for i < d), with d = 0 once unit i − 1 has ended; unit i computes from
    max(its all-gather's end, unit i − 1's end)."""
    comm_free = prev_end = 0.0
    starts = []
    for i, (c, g) in enumerate(zip(compute_s, gather_s)):
        issue = prev_end if prefetch == 0 else (starts[i - prefetch] if i >= prefetch else 0.0)
        ag_end = max(comm_free, issue) + g
        start = max(ag_end, prev_end)
        comm_free = ag_end
        starts.append(start)
        prev_end = start + c
    return prev_end


def fsdp_backward_makespan(compute_s, gather_s, reduce_s, prefetch: int) -> float:
    """End of a backward through units given in backward order (the last layer first; cost/fsdp.py
    `backward_pass`'s rules): each unit re-gathers, computes, then reduce-scatters; the first d gathers are
    issued at once, unit j + d's when unit j starts (d = 0: when unit j is reached); the collectives run
    one at a time in issue order; the pass ends with its last compute and its last reduce-scatter."""
    c, g, r = (list(map(float, x)) for x in (compute_s, gather_s, reduce_s))
    n = len(c)
    ag_end = [0.0] * (n + max(prefetch, 1))
    comm_free = prev_end = 0.0
    for k in range(min(prefetch, n)):
        comm_free += g[k]
        ag_end[k] = comm_free
    for j in range(n):
        if prefetch == 0:
            if g[j] > 0:
                comm_free = max(comm_free, prev_end) + g[j]
                ag_end[j] = comm_free
            else:
                ag_end[j] = prev_end
        start = max(ag_end[j], prev_end)
        end = start + c[j]
        if prefetch and j + prefetch < n:
            comm_free = max(comm_free, start) + g[j + prefetch]
            ag_end[j + prefetch] = comm_free
        comm_free = max(comm_free, end) + r[j]
        prev_end = end
    return max(prev_end, comm_free)


def fsdp_step(trace, hardware, tt: TorchTraining, gpus: int, *, times=None) -> StepResult:
    """FSDP (full shard over `gpus`, one unit per layer of the trace): the module docstring. Memory: the
    sharded states, the gathered parameters of the running and the prefetched units and one unit's
    unsharded gradient (at most the largest units), the saved activations."""
    gpus = _check_gpus(gpus)
    times = layer_times(trace, hardware, tt) if times is None else times
    tr = tt.training
    params = np.array([layer.params for layer in trace.layers], dtype=float)
    span = group_span(hardware, group="dp", dp=gpus)
    has = params > 0
    gather = np.where(has, all_gather_s(hardware, params * tr.param_bytes, span), 0.0)
    reduce = np.where(has, reduce_scatter_s(hardware, params * tr.grad_bytes, span), 0.0)
    d = tt.fsdp_prefetch
    f_end = fsdp_forward_makespan(times.forward_s, gather, d)
    b_end = fsdp_backward_makespan(times.backward_s[::-1], gather[::-1], reduce[::-1], d)
    exposed = float(max(f_end - times.total_forward_s, 0.0) + max(b_end - times.total_backward_s, 0.0))
    comm = float(2.0 * gather.sum() + reduce.sum())
    largest = np.sort(params)[::-1]
    gathered = float(largest[:1 + d].sum()) if gpus > 1 else 0.0
    memory = state_memory(trace.params, tt, hardware, activations=activation_bytes(trace, tt), shard=gpus,
                          gathered_params=gathered + (float(largest[0]) * tr.grad_bytes / tr.param_bytes
                                                      if gpus > 1 else 0.0), ddp_buckets=False)
    return StepResult(mode="fsdp", gpus=gpus, batch_per_gpu=trace.batch, forward_s=times.total_forward_s,
                      backward_s=times.total_backward_s, comm_s=comm, exposed_comm_s=exposed,
                      contention_s=tt.slowdown(hardware) * max(comm - exposed, 0.0), buffer_sync_s=0.0,
                      optimizer_s=optimizer_step_s(trace.params / gpus, hardware, tt), buckets=int(has.sum()),
                      last_bucket_s=float(reduce[has][0]) if has.any() else 0.0, memory=memory)
