"""FSDP / ZeRO-3 per unit: the parameter all-gathers and gradient reduce-scatters of each FSDP unit on a
communication stream beside the compute stream, and the compute time they leave exposed.

FSDP wraps the model in units (usually one per transformer layer: torchtitan `fully_shard` per
TransformerBlock, FSDP1 `transformer_auto_wrap_policy`, DeepSpeed ZeRO-3 per submodule). For every
micro-batch it all-gathers a unit's parameters before the unit's forward, frees them after it
(`reshard_after_forward`), all-gathers them again before the unit's backward and reduce-scatters the
unit's gradients after it (Zhao et al. 2023, "PyTorch FSDP", §3.3-3.4; Rajbhandari et al. 2020, ZeRO §5.3).
Each of these is its own collective, so each pays the collective's latency (cost/collectives.py): at
scale 3 latency-bound collectives per unit per micro-batch are where the time goes.

Overlap comes from prefetching: the all-gather of unit i+d is issued when unit i's compute starts
(`prefetch` d; FSDP2 issues the next unit's all-gather one unit ahead in forward and backward,
FSDP1 `backward_prefetch=BACKWARD_PRE`, DeepSpeed `stage3_prefetch_bucket_size`); with d = 0 a unit's
all-gather starts only when the unit is reached. The two streams are replayed exactly, unit by unit,
vectorised over layouts (`forward_pass`, `backward_pass`): a unit's compute waits for its all-gather
and for the previous unit; a collective waits for the stream and for its issue time; collectives run
one at a time in issue order (NCCL serialises them on one communicator). The pass's makespan minus its
compute is the exposed communication; the rest of the communication is hidden under compute.
Closed forms for uniform units (the tests check the replay against them):

    no prefetch (d = 0):      exposed = L·g                              (forward; + L·r backward)
    prefetch d >= 1, forward: exposed = g + (L − 1)·max(0, g − c)
"""
from __future__ import annotations

import numpy as np

from .. import native
from .memory_ops import _memory_time

__all__ = ["forward_pass", "backward_pass", "reduce_behind_compute_exposed_s", "chunked_overlap_exposed_s",
           "unit_count", "fsdp_copy_s"]


def unit_count(layers, unit_layers: int):
    """FSDP units of a (virtual) stage holding `layers` transformer layers, `unit_layers` layers each:
    ceil(layers / unit_layers), at least 1 where the stage holds anything (its embedding or head then
    form the one unit)."""
    lay = np.asarray(layers, dtype=float)
    return np.maximum(np.ceil(lay / float(unit_layers)), 1.0)


def fsdp_copy_s(hardware, unit_params, *, param_bytes: float, reduce_bytes: float):
    """(copy-out, copy-in) seconds of FSDP2's compute-stream copies for one unit of `unit_params` parameters
    (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py):

        copy-out, after each all-gather:   2·P·Ψ_u bytes   (split_with_sizes_copy reads the all-gather output
                                                            and writes the unsharded parameters, in P bytes)
        copy-in, before each reduce-scatter: (P + R)·Ψ_u bytes  (chunk_cat reads the unsharded gradients, in
                                                            the parameters' dtype, and writes the reduce-scatter
                                                            input in the reduce dtype, R bytes)

    Both run on the current (compute) stream (`foreach_all_gather_copy_out` after waiting for the all-gather;
    `foreach_reduce` before the reduce-scatter stream waits for it), so they add to the unit's compute. Timed
    as one memory-bound kernel each at η_memory of its bytes (cost/memory_ops.py)."""
    psi = np.asarray(unit_params, dtype=float)
    return (_memory_time(2.0 * param_bytes * psi, 1.0, hardware),
            _memory_time((param_bytes + reduce_bytes) * psi, 1.0, hardware))


def _f(x, shape):
    return np.broadcast_to(np.asarray(x, dtype=float), shape)


def forward_pass(compute_s, gather_s, units, prefetch: int):
    """(exposed_s, hidden_s) of the forward of one micro-batch through a stage of `units` FSDP units, each
    computing `compute_s` after its all-gather of `gather_s` (broadcast arrays; `units` >= 1 integers).

    Two streams replayed unit by unit: all-gather i starts when the stream is free and, with prefetch
    d >= 1, once unit i − d has started computing (at once for i < d); with d = 0 once unit i − 1 has
    finished. Unit i computes from max(end of its all-gather, end of unit i − 1). exposed = makespan −
    units × compute; hidden = units × gather − exposed (what overlap hid)."""
    shape = np.broadcast(compute_s, gather_s, units).shape
    c, g, L = _f(compute_s, shape), _f(gather_s, shape), _f(units, shape)
    end = native.fsdp_makespan(c, g, 0.0, L, prefetch, backward=False)  # the same loop in C, when built
    if end is None:
        end = _forward_makespan(c, g, L, prefetch, shape)
    exposed = np.maximum(end - L * c, 0.0)
    return exposed, np.maximum(L * g - exposed, 0.0)


def _forward_makespan(c, g, L, prefetch, shape):
    """forward_pass's replay in numpy (the reference of native.fsdp_makespan): the pass's end."""
    comm_free = np.zeros(shape)
    prev_end = np.zeros(shape)
    starts = []  # compute start of each unit (prefetch looks back d units)
    n_max = int(L.max()) if L.size else 0
    for i in range(n_max):
        live = i < L
        issue = prev_end if prefetch == 0 else (starts[i - prefetch] if i >= prefetch else 0.0)
        ag_end = np.maximum(comm_free, issue) + g
        start = np.maximum(ag_end, prev_end)
        comm_free = np.where(live, ag_end, comm_free)
        starts.append(start)
        prev_end = np.where(live, start + c, prev_end)
    return prev_end


def backward_pass(compute_s, gather_s, reduce_s, units, prefetch: int):
    """(exposed_s, hidden_s) of the backward of one micro-batch through `units` FSDP units, last unit
    first: each re-gathers its parameters (`gather_s`, 0 when they were kept after forward), computes
    its backward (`compute_s`: input and weight gradients, recompute), then reduce-scatters its gradients
    (`reduce_s`, 0 when reduced once per step instead).

    The collectives run one at a time in issue order: the all-gather of unit j + d is issued when unit j
    starts (prefetch d >= 1; d = 0: when unit j − 1 ... is reached, after the reduce-scatter of the
    unit before), the reduce-scatter of unit j when unit j ends. The pass ends when its last compute and
    its last reduce-scatter have (the next micro-batch's first all-gather queues behind it).
    exposed = makespan − units × compute; hidden = units × (gather + reduce) − exposed."""
    shape = np.broadcast(compute_s, gather_s, reduce_s, units).shape
    c, g, r, L = (_f(x, shape) for x in (compute_s, gather_s, reduce_s, units))
    makespan = native.fsdp_makespan(c, g, r, L, prefetch, backward=True)  # the same loop in C, when built
    if makespan is None:
        makespan = _backward_makespan(c, g, r, L, prefetch, shape)
    exposed = np.maximum(makespan - L * c, 0.0)
    return exposed, np.maximum(L * (g + r) - exposed, 0.0)


def _backward_makespan(c, g, r, L, prefetch, shape):
    """backward_pass's replay in numpy (the reference of native.fsdp_makespan): the pass's end."""
    n_max = int(L.max()) if L.size else 0
    ag_end = [None] * (n_max + max(prefetch, 1))
    comm_free = np.zeros(shape)
    prev_end = np.zeros(shape)
    for k in range(min(prefetch, n_max)):  # issued at once: the first d units
        comm_free = np.where(k < L, comm_free + g, comm_free)
        ag_end[k] = comm_free
    for j in range(n_max):
        live = j < L
        if prefetch == 0:  # reached: after the previous unit and its reduce-scatter (if it gathers at all)
            gathers = live & (g > 0)
            comm_free = np.where(gathers, np.maximum(comm_free, prev_end) + g, comm_free)
            ag_end[j] = np.where(gathers, comm_free, prev_end)
        start = np.maximum(ag_end[j], prev_end)
        end = start + c
        if prefetch and j + prefetch < n_max:  # prefetch unit j + d while unit j computes
            nxt = j + prefetch < L
            comm_free = np.where(nxt, np.maximum(comm_free, start) + g, comm_free)
            ag_end[j + prefetch] = comm_free
        comm_free = np.where(live, np.maximum(comm_free, end) + r, comm_free)
        prev_end = np.where(live, end, prev_end)
    return np.maximum(prev_end, comm_free)


def reduce_behind_compute_exposed_s(compute_s, reduce_s, buckets):
    """Exposed time of `buckets` equal reductions of `reduce_s` each, issued one by one as a backward of
    `compute_s` per bucket fills them and run one at a time (DDP / ZeRO-1/2 gradient buckets: PyTorch DDP
    `bucket_cap_mb`, Megatron `--overlap-grad-reduce`; Li et al. 2020, "PyTorch Distributed", §3.2.3):

        exposed = r + (n − 1)·max(0, r − c)

    (the last bucket is always exposed; each earlier one only by what it exceeds its bucket's compute).
    `backward_pass` with no gathers and uniform units replays the same (the tests check it); this closed
    form is what the kernel uses, as bucket counts reach thousands. 0 where there are no buckets."""
    c, r, n = (np.asarray(x, dtype=float) for x in (compute_s, reduce_s, buckets))
    return np.where(n > 0, r + np.maximum(n - 1.0, 0.0) * np.maximum(0.0, r - c), 0.0)


def chunked_overlap_exposed_s(comm_s, compute_s, chunks):
    """Exposed time of a collective split into `chunks` pieces pipelined with the GEMM it feeds or drains,
    each piece of the GEMM waiting for its piece of the collective (or the other way round):

        exposed = (t_c + (n − 1)·max(0, t_c − t_g)) / n

    the first (all-gather before a GEMM) or last (reduce-scatter after it) piece is always exposed, and
    each other piece by what its communication exceeds its computation (the forward_pass closed form with
    n units of t_c/n communication and t_g/n compute). Megatron-LM `--tp-comm-overlap` (Transformer Engine
    userbuffers: AG+GEMM and GEMM+RS split over the TP ring, n = tp) and torchtitan's AsyncTP (micro-
    pipelined collective matmuls, Wang et al. 2023, "Overlap Communication with Dependent Computation via
    Decomposition in Large Deep Learning Models", ASPLOS, §4) both run it."""
    t_c, t_g, n = (np.asarray(x, dtype=float) for x in (comm_s, compute_s, chunks))
    n = np.maximum(n, 1.0)
    return (t_c + (n - 1.0) * np.maximum(0.0, t_c - t_g)) / n
