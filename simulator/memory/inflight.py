"""In-flight micro-batches per pipeline stage (closed forms), the activation multiplier of each rank.

Unit: one micro-batch's activations over all the layers a rank holds (L/p layers, 2L/p for DualPipe).
A rank holding several chunks (interleaved, V schedules, DualPipe) keeps micro-batches of several
chunks alive; each schedule's closed form (its `ScheduleFamily.inflight`, in the schedule's module,
with its source) converts chunk micro-batches to this unit:

| schedule            | in flight on rank i (0-based), m micro-batches, p ranks, v chunks      |
|---------------------|-------------------------------------------------------------------------|
| gpipe               | m                                                                       |
| 1f1b, pipedream     | min(m, p − i)                                                           |
| zb-h1, zb-v         | min(m, p) on every rank                                                 |
| interleaved         | min(v·m, 2(p−i−1) + (v−1)·p + 1) / v                                    |
| zb-h2               | min(m, 2p − 1 − i)                                                      |
| dualpipe            | min(m, p + 1)/2                                                         |
| dualpipev           | min(2m, 2p + 1)/2                                                       |

"In flight" counts micro-batches whose forward has run and whose last backward op (W, or a B that
includes the weight gradient) has not, the definition of the pipeline engine's `inflight_profile`;
tests/test_memory_inflight.py checks these forms against its replayed orders. They are exact for
m ≥ p (interleaved: m a multiple of p; zb-v, dualpipe(v): m ≥ 2p); for other m use the replayed
peak (`inflight_per_stage` in `breakdown.py`; the kernel's default).
All functions take p as a Python int and m as an int or numpy array of shape (N,), and return shape
(p,) or (N, p).
"""
from __future__ import annotations

import numpy as np

from ..dedup import factorize
from ..schedules import family


def inflight_microbatches(schedule: str, *, pp: int, num_microbatches, vpp: int = 1) -> np.ndarray:
    """Peak micro-batches in flight on each rank in stage units (the schedule family's closed form)."""
    closed = family(schedule).inflight
    p = int(pp)
    m = np.asarray(num_microbatches, dtype=float)[..., None]
    return closed(p, m, np.arange(p, dtype=float), int(vpp))


def loss_inflight_microbatches(schedule, *, num_microbatches) -> np.ndarray:
    """Micro-batches whose logits are alive at once on the rank computing the loss: m where every forward
    runs before any backward (GPipe: `ScheduleFamily.forwards_first`), else 1 (the loss chunk's backward
    follows its forward). `schedule` a name or an array of names; shape of both broadcast."""
    m = np.asarray(num_microbatches, dtype=float)
    names = np.asarray(schedule, dtype=object).ravel()
    codes, distinct = factorize(names)
    first = np.array([family(x).forwards_first for x in distinct], dtype=bool)[codes]
    return np.where(first.reshape(np.shape(schedule)), m, 1.0)


def combined_1f1b_inflight(inflight, *, pp, vpp, num_microbatches) -> np.ndarray:
    """`inflight` (stage units, (p,) or (N, p)) under Megatron-Core's combined 1F1B (the stack's moe_a2a_overlap):
    with pipelining it runs one more warm-up forward on every rank (schedules.py get_pp_rank_microbatches: "we
    schedule one extra micro-batch forward step before the 1f1b stages"), one more (chunk, micro-batch) pair,
    1/v of a rank's share, at most all m; its merged passes then free a layer's backward as they add a layer's
    forward, which adds no micro-batch. Without pipelining the merged pass's forward and backward balance the same
    way: unchanged."""
    pp, v = np.asarray(pp, dtype=float), np.asarray(vpp, dtype=float)
    m = np.asarray(num_microbatches, dtype=float)
    extra = np.where(pp > 1, 1.0 / v, 0.0)
    if np.ndim(inflight) == 2:
        extra, m = np.reshape(extra, (-1, 1)), np.reshape(m, (-1, 1))
    return np.minimum(inflight + extra, np.maximum(inflight, m))
