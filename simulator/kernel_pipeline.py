"""Step 3 of the kernel (kernel.py): the pipeline of K rows, and the in-flight microbatches memory needs.

The makespan comes from the schedule's op order replayed on the rows' stage times (pipeline.makespan_multi:
the engine's exact fast path, all schedule shapes in one compiled pass), from the family's closed form
with `pipeline="analytic"` (formulas.md §5.2), or, for an asynchronous schedule (PipeDream), from its
steady state: m × the slowest stage's F+B+W. The in-flight microbatches per rank are counted on the same
replayed order (they depend on the schedule shape and m only, so memory knows them before any time).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .dedup import categories, distinct_rows, factorize, gather_rows
from .schedules import family
from .spec.layout import Layout


@lru_cache(maxsize=2048)
def schedule_shape_tables(schedule: str, pp: int, m: int, vpp: int):
    """The schedule shape's tables for the fast replay and its in-flight peaks (pipeline.shape_tables;
    a pure function of the shape; memoised here and on disk: pipeline.cache). InputError if the
    builder refuses the shape."""
    from .pipeline import cache

    return cache.tables(schedule, pp, m, vpp)


def replayed_inflight_per_rank(layout: Layout, global_batch_size: int) -> np.ndarray | None:
    """Peak in-flight microbatches per pipeline rank from the replayed schedule order, which replaces the
    memory model's closed forms; None for PipeDream (closed form: p − i). The engine counts (chunk,
    microbatch) pairs, the memory model microbatches of a rank's whole share: divided by its chunks."""
    if not family(layout.schedule).synchronous:
        return None
    return _shape_inflight(layout.schedule, layout.pp, layout.num_microbatches(global_batch_size), layout.vpp)


def _shape_inflight(schedule: str, pp: int, m: int, vpp: int) -> np.ndarray:
    """(pp,) peak in-flight microbatches per rank of one replayed schedule shape: the engine's (chunk,
    microbatch) pairs / chunks per rank."""
    return np.asarray(schedule_shape_tables(schedule, pp, m, vpp).inflight, dtype=float) / family(schedule).chunks_per_rank(vpp)


def family_column(sched: np.ndarray, attr: str) -> np.ndarray:
    """(N,) the schedule family's `attr` of each row (looked up once per distinct schedule)."""
    codes, names = factorize(sched)
    return np.array([getattr(family(name), attr) for name in names])[codes]


def row_sums(x: np.ndarray) -> np.ndarray:
    """Sums along axis 1 of (K, W) padded rows, left to right (native.row_sums): the zeros padding
    a row then change nothing, so a row sums to the same bits whatever width its call pads to (numpy's
    pairwise `sum` regroups rows of 8 or more values, so the padding would move the last bit)."""
    from . import native

    return native.row_sums(x)


def _sum_terms(first, *terms):
    """first + terms[0] + terms[1] + ... left to right, into a new array, leaving out the terms that are
    None or all zero (adding +0.0 changes none of these non-negative times, so the sum is the same)."""
    out = None
    for t in terms:
        if t is None or not t.any():
            continue
        if out is None:
            out = first + t
        else:
            out += t
    return first.copy() if out is None else out


def _makespans(opt, pt, F_eff, B_eff, W_eff, *, sched, pp, chunks, m, p2p):
    """(makespan, makespan without p2p, busy time per rank (K, P)) of K rows from their per-stage
    F, B, W with the communication they expose: replayed (one compiled pass over every shape), the
    family's closed form (`pipeline="analytic"`), or PipeDream's steady state."""
    n, P = len(sched), pt.padded_ranks
    makespan, makespan0 = np.zeros(n), np.zeros(n)
    busy = np.zeros((n, P))
    pdm = ~family_column(sched, "synchronous")  # asynchronous (PipeDream): steady state
    if pdm.any() or opt.pipeline == "analytic":  # one microbatch's busy time per rank (the replay sums its own)
        per_rank = pt.rank_sum(F_eff + B_eff + W_eff)
    if pdm.any():
        idx = np.flatnonzero(pdm)
        makespan[idx] = makespan0[idx] = m[idx] * per_rank[idx].max(axis=1)
        busy[idx] = m[idx, None] * per_rank[idx]
    if opt.pipeline == "analytic":
        pf, pb, pw = pt.rank_sum(F_eff), pt.rank_sum(B_eff), pt.rank_sum(W_eff)
        for _, idx in categories(pt.shape_index):  # per shape (the closed forms take one schedule)
            sch = sched[idx[0]]
            if not family(sch).synchronous:
                continue
            makespan[idx], makespan0[idx], busy[idx] = _analytic_pipeline(
                sch, pp[idx], chunks[idx], m[idx], per_rank[idx], pf[idx], pb[idx], pw[idx], p2p[idx])
    else:
        idx = np.flatnonzero(~pdm)
        if len(idx):
            from .pipeline import makespan_multi

            k_first, sid = distinct_rows(pt.shape_index[idx], m[idx])  # one schedule shape per (shape, m)
            tables = [schedule_shape_tables(sched[i], int(pp[i]), int(m[i]), int(chunks[i])) for i in idx[k_first]]
            rows = slice(None) if len(idx) == n else idx  # all rows: no copies
            mk, mk0, bz = makespan_multi(tables, sid, F_eff[rows], B_eff[rows], W_eff[rows], p2p[rows])
            makespan[idx], makespan0[idx] = mk, mk0
            busy[idx, :bz.shape[1]] = bz
    return makespan, makespan0, busy


def pipeline_times(opt, pt, st, g, z3, z3_id, *, sched, pp, chunks, m, p2p) -> dict:
    """Step 3 for K rows with table `pt`; row i has the stage times of base row g[i] of `st` (_stage_times
    of the base rows; each sum below is formed there once and gathered, so per-row work is a gather),
    and `z3`: the ZeRO-3 gather exposures, row i using z3[...][z3_id[i]] when z3_id[i] >= 0: the makespan
    with and without p2p (replayed, analytic, or PipeDream's steady state), busy time per rank, one
    microbatch's backward per rank (`last_bwd`, for the DP overlap), and the compute and exposed
    communication on the busiest rank `r_star` (`pure`, `exposed_<category>`): `pure` includes
    `contention`, the compute's slowdown under the communication it hides (comm_slowdown x the hidden
    time); and the per-stage durations replayed, `F_eff`, `B_eff`, `W_eff` (K, S)."""
    n = len(sched)
    has = np.flatnonzero(z3_id >= 0)  # rows with a ZeRO-3 gather exposed
    zk = z3_id[has]
    # Overlapped communication occupies SMs and slows the compute it hides under (Calculon's
    # `processor_usage`; formulas.md §7.1): that compute takes comm_slowdown × the hidden time longer.
    # F_eff = F + tp_f + cp_f + ep_f + zf + copy_f + comm_slowdown · (hid_f + zhf), likewise B_eff (copy_f, copy_b:
    # FSDP2's compute-stream copies, counted as compute in `pure`)
    F_eff = gather_rows(_sum_terms(st["F"], st["tp_f"], st["cp_f"], st["ep_f"]), g)
    B_eff = gather_rows(_sum_terms(st["B"], st["tp_b"], st["cp_b"], st["ep_b"]), g)
    slow = None  # the compute's slowdown under overlapped communication, per stage (counted as compute)
    copies = None  # FSDP2's compute-stream copies per micro-batch (kernel_comm._zero3_exposure): compute
    if len(has) and (z3["copy_f"].any() or z3["copy_b"].any()):
        copies = {d: np.zeros_like(F_eff) for d in ("f", "b")}
        for d in ("f", "b"):
            copies[d][has] = z3["copy_" + d][zk]
    for eff, d in ((F_eff, "f"), (B_eff, "b")):
        if len(has):
            eff[has] += z3[d][zk]
        if copies is not None:
            eff += copies[d]
        if opt.comm_slowdown != 0:
            h = gather_rows(st["hid_" + d], g)
            if len(has):
                h[has] += z3["hid_" + d][zk]
            eff += opt.comm_slowdown * h
            slow = opt.comm_slowdown * h if slow is None else slow + opt.comm_slowdown * h
    W = gather_rows(st["W"], g)
    split_bw = family_column(sched, "split_backward")[:, None]
    B_eff, W_eff = np.where(split_bw, B_eff, B_eff + W), np.where(split_bw, W, 0.0)

    makespan, makespan0, busy = _makespans(opt, pt, F_eff, B_eff, W_eff, sched=sched, pp=pp, chunks=chunks, m=m,
                                           p2p=p2p)

    # breakdown on the busiest rank r*: microbatches each virtual stage runs on a rank that holds it: all
    # m, except DualPipe, whose ranks hold stage r and stage p-1-r and run each for the m/2 microbatches
    # entering from that end
    r_star = np.argmax(np.where(pt.rank_valid, busy, -np.inf), axis=1)
    mb = family_column(sched, "microbatch_share") * m
    on_star = pt.held_by(r_star)
    pure = st["F"] + st["B"] + st["W"]
    contention = (mb * row_sums(np.where(on_star, slow, 0.0)) if slow is not None and slow.any() else np.zeros(n))
    pure_rows = gather_rows(pure, g)
    if copies is not None:
        pure_rows = pure_rows + copies["f"] + copies["b"]
    out = dict(makespan=makespan, makespan0=makespan0, busy_sum=row_sums(busy), r_star=r_star,
               F_eff=F_eff, B_eff=B_eff, W_eff=W_eff,  # what was replayed (report/step_timeline.py replays it)
               last_bwd=pt.rank_sum(B_eff + W_eff), contention=contention,
               pure=mb * row_sums(np.where(on_star, pure_rows, 0.0)) + contention)
    for k in ("tp", "cp", "ep"):
        f, b = st[k + "_f"], st[k + "_b"]
        out["exposed_" + k] = (mb * row_sums(np.where(on_star, gather_rows(f + b, g), 0.0)) if f.any() or b.any()
                               else np.zeros(n))
    v = None
    if len(has):
        v = np.zeros_like(F_eff)
        v[has] = z3["f"][zk] + z3["b"][zk]
    out["exposed_zero3"] = mb * row_sums(np.where(on_star, v, 0.0)) if v is not None and v.any() else np.zeros(n)
    # what overlap hid, per group, on the same rank (it slowed the compute it ran beside: `contention`)
    for k, key in (("tp", "t"), ("cp", "c"), ("ep", "e")):
        h = st["hid_" + key + "_f"] + st["hid_" + key + "_b"]
        out["hidden_" + k] = mb * row_sums(np.where(on_star, gather_rows(h, g), 0.0)) if h.any() else np.zeros(n)
    hz = np.zeros_like(F_eff)
    if len(has):
        hz[has] = z3["hid_f"][zk] + z3["hid_b"][zk]
    out["hidden_zero3"] = mb * row_sums(np.where(on_star, hz, 0.0)) if hz.any() else np.zeros(n)
    return out


def inflight_per_rank(opt, pt, *, sched, pp, chunks, m) -> np.ndarray:
    """Peak in-flight microbatches per rank (N, P) of N rows, 0 on padding: counted on the replayed
    schedule order (the shape's tables: (chunk, microbatch) pairs / chunks per rank), or the memory
    model's closed forms with `pipeline="analytic"`; PipeDream's steady state holds min(p − i, m) on
    rank i (memory/inflight.py). A function of the schedule shape and m only, so it is known before
    any time is."""
    n, P = len(sched), pt.padded_ranks
    inflight = np.zeros((n, P))
    pdm = ~family_column(sched, "synchronous")
    if pdm.any():
        idx = np.flatnonzero(pdm)
        inflight[idx] = np.where(pt.rank_valid[idx], np.minimum(pp[idx, None] - np.arange(P), m[idx, None]), 0.0)
    if opt.pipeline == "analytic":
        from .memory.inflight import inflight_microbatches

        for _, idx in categories(pt.shape_index):  # per shape (the closed forms take one schedule)
            sch, p, v = sched[idx[0]], int(pp[idx[0]]), int(chunks[idx[0]])
            if family(sch).synchronous:
                inflight[idx, :p] = inflight_microbatches(sch, pp=p, num_microbatches=m[idx], vpp=v)
        return inflight
    idx = np.flatnonzero(~pdm)
    if len(idx):
        k_first, sid = distinct_rows(pt.shape_index[idx], m[idx])  # one schedule shape per (shape, m)
        counts_k = np.zeros((len(k_first), P))
        for k, i in enumerate(idx[k_first]):
            counts_k[k, :pp[i]] = _shape_inflight(sched[i], int(pp[i]), int(m[i]), int(chunks[i]))
        if len(idx) == n:
            return gather_rows(counts_k, sid)
        inflight[idx] = gather_rows(counts_k, sid)
    return inflight


def _analytic_pipeline(schedule, pp, vpp, m, per, f_rank, b_rank, w_rank, p2p):
    """Closed-form makespan (labelled 'analytic'; the replay is the default) of K rows of one schedule:
    pp, vpp (chunks), m, p2p (K,); per, f_rank, b_rank, w_rank (K, P): one microbatch's F+B+W, F, B, W
    per rank. The family's closed form (`ScheduleFamily.makespan`, formulas.md §5.2, the p2p delay per
    hop included: 1F1B's and ZB-H1's steady-state loops, not only the first forward's and the last
    backward's hops) on the slowest rank; busy = m·share·per rank. Exact for uniform stages (equal F, B,
    W on every rank) where the family's `p2p_exact` holds (GPipe, 1F1B, ZB-H1 always; interleaved for
    m % p == 0 or m < p, otherwise for short hops; tests/test_pipeline_p2p_closed_forms.py checks it).
    Uneven stages (an approximation): the slowest rank's times on every rank leave no slack, so that
    closed form is an upper bound on the exposed p2p; where the stages sit one per rank in a line (GPipe,
    1F1B, ZB-H1/H2), a loop through all p ranks carries p·(T_max − T_mean) of slack over its 2(p − 1)
    hops, so the hops past one microbatch's trip through the pipeline (the closed form at m = 1) count
    δ − σ, σ = p·(T_max − T_mean)/(2(p − 1)) (T = F+B+W per rank). ZB-H2, ZB-V, DualPipe(V) keep the
    2(p − 1)·δ term (docs/pipeline.md). Returns (makespan, makespan without p2p, busy per rank)."""
    fam = family(schedule)
    mf = np.asarray(m).astype(float)
    p = np.asarray(pp).astype(float)
    d = np.broadcast_to(np.asarray(p2p, dtype=float), mf.shape)
    rows = np.arange(len(mf))
    r = np.argmax(per, axis=1)
    slow = (per[rows, r], f_rank[rows, r], b_rank[rows, r], w_rank[rows, r])

    def closed(micro, delay):
        return fam.makespan(p, micro, vpp, *slow, delay)

    mk = closed(mf, d)
    if fam.pp_stages and fam.geometry == "line":  # one stage per rank in a line: the loops' slack
        ranks = np.arange(per.shape[1]) < p[:, None]
        t_mean = np.where(ranks, per, 0.0).sum(axis=1) / p
        sigma = p * (slow[0] - t_mean) / (2 * np.maximum(p - 1, 1.0))
        d_eff = np.maximum(0.0, d - sigma)
        one = np.ones_like(mf)
        mk = np.minimum(mk, closed(mf, d_eff) + closed(one, d) - closed(one, d_eff))
    busy = (fam.microbatch_share * mf)[:, None] * per
    return mk, closed(mf, 0.0), busy
