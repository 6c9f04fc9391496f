"""In-flight micro-batches per pipeline stage (closed forms), the activation multiplier of each rank.

Unit: one micro-batch's activations over all the layers a rank holds (L/p layers, 2L/p for DualPipe).
A rank holding several chunks (interleaved, V schedules, DualPipe) keeps micro-batches of several
chunks alive; the closed forms below convert chunk micro-batches to this unit:

| schedule            | in flight on rank i (0-based), m micro-batches, p ranks, v chunks      | source |
|---------------------|-------------------------------------------------------------------------|--------|
| gpipe               | m                                                                       | Huang et al. 2019 §2.3 |
| 1f1b, pipedream     | min(m, p − i)                                                           | Megatron schedules.py warm-up p−i−1 (+1) |
| zb-h1               | min(m, p) on every rank (postponed W's keep micro-batches alive)        | Qi et al. 2024 §2.1 (peak of every worker ≤ 1F1B's p·M_B) |
| interleaved         | min(v·m, 2(p−i−1) + (v−1)·p + 1) / v  (rank 0: p·(1 + (p−1)/(p·v)))     | Megatron schedules.py warm-up; theoretical_memory_usage.py |
| zb-h2               | min(m, 2p − 1 − i)                                                      | Qi et al. 2024 §2.2 (peak 2p−1 on the first stage) |
| zb-v                | min(m, p) on every rank                                                 | Qi et al. 2024 §4 (ZB-V: p·M_B, balanced) |
| dualpipe            | min(m, p + 1)/2 (p + 1 chunk micro-batches of L/p layers; 2 chunks/rank)| DeepSeek-V3 report Table 2; deepseek-ai/DualPipe README |
| dualpipev           | min(2m, 2p + 1)/2 (p devices = DualPipe with 2p chunks of L/(2p) layers)| deepseek-ai/DualPipe README |

"In flight" counts micro-batches whose forward has run and whose last backward op (W, or a B that
includes the weight gradient) has not, the definition of the pipeline engine's `inflight_profile`;
tests/test_memory_inflight.py checks these forms against its replayed orders. They are exact for
m ≥ p (interleaved: m a multiple of p; zb-v, dualpipe(v): m ≥ 2p); for other m use the replayed
peak.
The pipeline engine (simulator/pipeline) replays schedules and can supply the exact replayed peak per
stage instead (`inflight_per_stage` override in `breakdown.py`).
All functions take p as a Python int and m as an int or numpy array of shape (N,), and return shape
(p,) or (N, p).
"""
from __future__ import annotations

import numpy as np

from ..schedules import SCHEDULE_NAMES
from ..spec.rules import check_choice


def inflight_microbatches(schedule: str, *, pp: int, num_microbatches, vpp: int = 1) -> np.ndarray:
    """Peak micro-batches in flight on each rank in stage units (see the module table)."""
    check_choice("schedule", schedule, SCHEDULE_NAMES)
    p = int(pp)
    m = np.asarray(num_microbatches, dtype=float)[..., None]
    i = np.arange(p, dtype=float)
    if schedule == "gpipe":
        out = m + 0 * i
    elif schedule in ("1f1b", "pipedream"):
        out = np.minimum(m, p - i)
    elif schedule == "zb-h1":
        out = np.minimum(m, p) + 0 * i
    elif schedule == "interleaved":
        v = int(vpp)
        out = np.minimum(v * m, 2 * (p - i - 1) + (v - 1) * p + 1) / v
    elif schedule == "zb-h2":
        out = np.minimum(m, 2 * p - 1 - i)
    elif schedule == "zb-v":
        out = np.minimum(m, p) + 0 * i
    elif schedule == "dualpipe":
        # counted in chunk micro-batches of L/p layers; a DualPipe rank holds 2 chunks (2L/p layers),
        # so in units of "all layers on the rank" this is (p+1)/2
        out = np.minimum(m, p + 1) / 2 + 0 * i
    else:  # dualpipev
        out = np.minimum(2 * m, 2 * p + 1) / 2 + 0 * i
    return out


def loss_inflight_microbatches(schedule, *, num_microbatches) -> np.ndarray:
    """Micro-batches whose logits are alive at once on the rank computing the loss: m for GPipe (all
    forwards before any backward), else 1 (every other schedule runs the loss chunk's backward right
    after its forward). `schedule` a name or an array of names; shape of both broadcast."""
    m = np.asarray(num_microbatches, dtype=float)
    return np.where(np.asarray(schedule, dtype=object) == "gpipe", m, 1.0)

