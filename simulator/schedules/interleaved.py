"""Interleaved 1F1B (Megatron virtual pipeline; Narayanan et al. 2021 §2.2.2).

Rank r holds the v chunks (virtual stages) ``r, r+p, ..., r+(v-1)p``. Forwards visit chunks in
groups of G microbatches: the k-th forward of a rank is chunk ``(k // G) % v`` of microbatch
``(k // (G v)) G + k % G``; backwards visit chunks in reverse order. Warm-up:
``min(m v, (v-1) G + 2 (p-r-1))`` forwards, then 1F1B, then the remaining backwards
(Megatron ``schedules.py``; formulas.md §5.3). G = m / rounds with rounds = max(1, m // p), the
relaxation of Megatron's ``m % p == 0`` that `torch.distributed.pipelining.ScheduleInterleaved1F1B`
uses; it requires m % rounds == 0.
Closed form (uniform chunks, zero p2p, m % p == 0): bubble = (p-1)/(v m + p - 1) of the makespan.

Makespan with a p2p delay δ per hop (uniform chunks: F, B' = B + W of one chunk, t/v = F + B'):
    makespan = (v·max(m, p) + min(m, p) − 1)·(F + B') + h·δ
               + a·max(0, δ − min(F, B')) + c·max(0, 2δ − F − B')          (the last two: G ≤ p only)
    G ≤ p (m % p == 0, or m < p): h = 2(vp − 1), a = (v − 1)·max(0, m − p),
                                  c = ⌊(m − 2)/2⌋ for m ≤ p, ⌊k(p − 1)/2⌋ for m = kp, k ≥ 2;
    G > p (m > p, m % p ≠ 0):     h = 2(p − 1);                              (h = 0 for p = 1)
exact for every δ ≥ 0 when G ≤ p, and for δ ≤ min(F, B')·(G − p)/p when G > p (beyond, a lower
bound: the replay is longer). At δ = 0 and m ≥ p this is Narayanan's (vm + p − 1)·(F + B'); with
m < p the pipeline never fills: (vp + m − 1) chunk-steps.
Derivation (the longest path of the op DAG). G ≤ p, hops no longer than an op: microbatch 0's forward
through all vp stages (vp − 1 hops: p − 1 per pass down the ranks and the wrap from rank p−1 back to
rank 0 between chunks), the last rank's ops back to back, microbatch m−1's backward back through the
vp stages (vp − 1 hops). The last rank never waits in between: each input it needs was sent at least
one op (F or B') before, so a hop no longer than one op stays hidden. Longer hops show in the steady
state: each of the (v − 1)(m − p) chunk changes after the first round then puts δ − min(F, B') more on
the path (a wrap waited for instead of an op), and once 2δ > F + B' 1F1B's loops (module one_f_one_b)
take over c times, two hops instead of an F + B' pair. G > p: a microbatch coming back from rank p−1
finds rank 0 still running the other G − p forwards of its round, which hides the wrap hops as well:
2(p − 1) hops while δ ≤ min(F, B')·(G − p)/p; beyond, paths that trade ops for hops in counts that
depend on p, v, m and G take over (not followed here). The symbolic longest path over every path's
(n_F, n_B, n_W, n_hops) (tests/test_pipeline_p2p_closed_forms.py) equals this, with these domains,
for p ≤ 6, v ≤ 3, v·m·p ≤ 200 (and, run once, G ≤ p up to p = 9, v = 5); seeded replays check larger
shapes.
"""
import numpy as np

from ..errors import InputError
from .op import check_counts, make_schedule
from .family import ScheduleFamily


def microbatch_group_size(pp: int, microbatches: int) -> int:
    """G: microbatches per round (torch's ``microbatches_per_round``); InputError if m % rounds."""
    rounds = max(1, microbatches // pp)
    if microbatches % rounds:
        raise InputError(f"interleaved: microbatches ({microbatches}) must be a multiple of "
                         f"max(1, microbatches // pp) = {rounds}")
    return microbatches // rounds


def build_interleaved(*, pp: int, microbatches: int, vpp: int = 2):
    check_counts("interleaved", pp=pp, microbatches=microbatches, vpp=vpp)
    m, v = microbatches, vpp
    G = microbatch_group_size(pp, m)
    total = m * v

    # every rank runs 2·total ops: position i of rank r is a warm-up forward (i < warm_r), then F/B pairs,
    # then the remaining backwards; k is the rank's forward / backward counter at that position
    r = np.arange(pp)[:, None]
    i = np.arange(2 * total)[None, :]
    warm = np.minimum(total, (v - 1) * G + 2 * (pp - r - 1))
    steady = total - warm
    d = i - warm
    in_warm, in_pair = i < warm, (d >= 0) & (d < 2 * steady)
    is_b = ~in_warm & ~(in_pair & (d % 2 == 0))
    k = np.where(in_warm, i, np.where(in_pair, np.where(d % 2 == 0, warm + d // 2, d // 2), d - steady))
    chunk = np.where(is_b, v - 1 - (k // G) % v, (k // G) % v)
    is_b = is_b.ravel()
    columns = (is_b.astype(np.int64), (r + chunk * pp).ravel(), ((k // (G * v)) * G + k % G).ravel(),
               is_b, np.zeros(len(is_b), bool), np.full(pp, 2 * total))  # every B includes W
    return make_schedule("interleaved", columns=columns, num_stages=pp * v, num_microbatches=m, chunks_per_rank=v)


def inflight_interleaved(p, m, i, v=1):
    """min(v·m, 2(p − i − 1) + (v − 1)·p + 1) / v: the warm-up forwards of rank i plus one, in chunk
    microbatches, over its v chunks (Megatron schedules.py warm-up; theoretical_memory_usage.py: rank 0
    holds p·(1 + (p − 1)/(p·v)) microbatches' worth)."""
    return np.minimum(v * m, 2 * (p - i - 1) + (v - 1) * p + 1) / v


def _group_size(p, m):
    """G = m / max(1, ⌊m/p⌋) (microbatch_group_size, vectorised)."""
    return m / np.maximum(1.0, np.floor(m / p))


def makespan_interleaved(p, m, v, t, f, b, w, d=0.0):
    """(v·max(m, p) + min(m, p) − 1)·t/v + h·d, t/v one chunk's F+B+W (Narayanan et al. 2021 §2.2.2:
    (vm + p − 1)·t/v for m ≥ p), h = 2(vp − 1) if G ≤ p else 2(p − 1); + the terms of hops longer than a
    chunk's op when G ≤ p (module docstring)."""
    v = np.asarray(v, dtype=float)
    p, m = np.asarray(p, dtype=float), np.asarray(m, dtype=float)
    fc, bc = f / v, (b + w) / v  # one chunk's F and B'
    whole = _group_size(p, m) <= p
    hops = np.where(p < 2, 0.0, np.where(whole, 2 * (v * p - 1), 2 * (p - 1)))  # p = 1: no hop
    a = np.maximum(m - p, 0.0) * (v - 1)
    pairs = np.where(m <= p, np.floor((np.minimum(m, p) - 2) / 2), np.floor(m / p * (p - 1) / 2))
    slow = a * np.maximum(0.0, d - np.minimum(fc, bc)) + np.maximum(pairs, 0.0) * np.maximum(0.0, 2 * d - fc - bc)
    return (v * np.maximum(m, p) + np.minimum(m, p) - 1) * (t / v) + hops * d + np.where(whole & (p > 1), slow, 0.0)


def p2p_exact_interleaved(p, m, v, f, b, w, d):
    """Where `makespan_interleaved` is exact with p2p: everywhere when G ≤ p; δ ≤ min(F, B')·(G − p)/p of a
    chunk when G > p (module docstring)."""
    v = np.asarray(v, dtype=float)
    p, m = np.asarray(p, dtype=float), np.asarray(m, dtype=float)
    G = _group_size(p, m)
    return (G <= p) | (np.asarray(d) <= np.minimum(f, b + w) / v * (G - p) / p * (1 + 1e-12))

FAMILIES = (ScheduleFamily(name="interleaved", order=2, build=build_interleaved, chunks=None,
                           inflight=inflight_interleaved, makespan=makespan_interleaved,
                           p2p_exact=p2p_exact_interleaved,
                           source="Narayanan et al. 2021 §2.2.2"),)
