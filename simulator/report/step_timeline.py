"""The timeline of one estimated training step: every pipeline rank's F, B and W ops with the durations
the estimate predicted, and the communication inside and after them, for `parasim estimate --trace` /
`--plot` (report/step_trace.py, report/step_gantt.py).

Nothing is re-derived here. The kernel keeps the parts it added the step from
(`estimate(..., keep_stage_times=True)`, kernel.Evaluation.stage_times): per virtual stage the pure
compute F, B, W, the TP / CP / EP / ZeRO-3 communication each op exposes and hides, the durations it
replayed (`F_eff`, `B_eff`, `W_eff`: compute + exposed communication + the compute's slowdown under
hidden communication), the PP p2p time, and per rank the data-parallel tail's parts and the optimizer
step. The schedule is replayed on those durations (pipeline.replay: the same recurrence as the
kernel's fast path, bit for bit), then each op is cut into its parts:

- compute track: the op (F, B or W, with micro-batch and chunk) over its whole duration;
- communication tracks: the exposed parts of the op back to back at its start (ZeRO-3 gathers first,
  then TP, CP, EP: the model knows how much each op exposes, not where inside the op), and the hidden
  parts from the end of those, under the compute that hides them (each at most that compute's length);
- PP p2p: each transfer an op waits for ([end of its input, + p2p time]) on the receiving rank, and the
  exposed wait on each rank: the part of its idle gaps by which the p2p transfers push its remaining
  work later for good. With shift_i = start_i - start_i(no p2p) per op in rank order and the step's own
  shift E = makespan - makespan without p2p last, the wait before op i is L_i - L_(i-1), L_i =
  min(shift_i, ..., E) (L_(-1) = 0): non-negative, within the gap before op i, and summing to E on every
  rank, the estimate's exposed `pp`;
- the tail, after the makespan, per rank: the once-per-step ZeRO-3 reduce-scatters, the exposed DP
  gradient reduction, the optimizer step, the ZeRO-1/2 parameter all-gather, the once-per-step ZeRO-3
  gathers; the reduction hidden under the last backward ends with the rank's last op.

Communication is named by collective (`all-gather`, `reduce-scatter`, `all-reduce`, `all-to-all`, `p2p`;
parts that stand for two collectives the model times together, such as TP's all-gathers and
reduce-scatters with sequence parallelism, are named `all-gather+reduce-scatter`).

On the busiest pipeline rank (`busiest_rank`) the exposed TP, CP, EP, ZeRO-3 (per op) and PP parts add up
to the estimate's `exposed_comm_by_group_s`; the tail's (DP, once-per-step ZeRO-3) on the rank whose tail
is longest (`tail_rank`), whose last event ends at `step_s`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError

TRACKS = ("compute", "tp", "cp", "ep", "zero3", "dp", "pp", "pp_wait")
GROUPS = ("tp", "cp", "ep", "zero3", "dp", "pp")  # exposed_comm_by_group_s's keys (pp_wait counts as pp)
_STAGE_KEYS = {"tp": ("tp_{}", "hid_t_{}"), "cp": ("cp_{}", "hid_c_{}"), "ep": ("ep_{}", "hid_e_{}")}


@dataclass(frozen=True, eq=False)
class Segments:
    """Communication and tail pieces, one entry each (columns): pipeline `rank`, `track` (index into
    TRACKS), `name` (index into `names`), `start_s`, `dur_s`, `exposed`, `op` (the op it belongs to, −1
    for the tail and the p2p waits)."""

    rank: np.ndarray
    track: np.ndarray
    name: np.ndarray
    start_s: np.ndarray
    dur_s: np.ndarray
    exposed: np.ndarray
    op: np.ndarray
    names: tuple

    def __len__(self) -> int:
        return len(self.rank)


@dataclass(frozen=True, eq=False)
class StepTimeline:
    """One estimated step as a timeline (module docstring). `timeline`: the replayed pipeline
    (pipeline.Timeline; its ops in rank order); per op: `chunk` (the model chunk of its rank it runs),
    `compute_s` (its duration less the communication it exposes; the contention included) and
    `contention_s`; `segments`: everything else."""

    estimate: object
    timeline: object
    chunk: np.ndarray
    compute_s: np.ndarray
    contention_s: np.ndarray
    segments: Segments
    makespan_s: float
    makespan_no_p2p_s: float
    step_s: float
    busiest_rank: int
    tail_rank: int

    @property
    def num_ranks(self) -> int:
        return self.timeline.schedule.num_ranks


def check_traceable(layout, pipeline: str = "replay") -> None:
    """InputError (one line) when the estimate of `layout` is not a replayed step that can be drawn."""
    from ..schedules import family

    if not family(layout.schedule).synchronous:
        raise InputError(f"--trace/--plot: {layout.schedule} is timed at its steady state (no flush), not as a "
                         "replayed step; draw its op order with `parasim schedule --schedule pipedream --trace`")
    if pipeline != "replay":
        raise InputError("--trace/--plot draw the replayed schedule; leave out --pipeline analytic")


def step_timeline(est) -> StepTimeline:
    """The StepTimeline of an Estimate made with `keep_stage_times=True`."""
    from ..pipeline import replay
    from ..report.bubble import check_replay_size
    from ..schedules import build, family

    d = est.stage_times
    if d is None:
        raise ValueError("step_timeline needs an estimate made with keep_stage_times=True")
    lay = est.layout
    check_traceable(lay, "analytic" if est.pipeline.startswith("analytic") else "replay")
    fam = family(lay.schedule)
    m = lay.num_microbatches(est.training.global_batch_size)
    vpp = lay.vpp if fam.takes_vpp else 1
    check_replay_size(lay.schedule, pp=lay.pp, microbatches=m, vpp=vpp)
    sch = build(lay.schedule, pp=lay.pp, microbatches=m, vpp=vpp)
    S = sch.num_stages
    f, b, w = (d[k][0, :S] for k in ("F_eff", "B_eff", "W_eff"))
    p2p = float(d["p2p"][0])
    tl = replay(sch, forward_s=f, backward_s=b, weight_s=w, p2p_s=p2p)
    tl0 = replay(sch, forward_s=f, backward_s=b, weight_s=w, p2p_s=0.0) if p2p > 0 else tl
    start0, makespan0 = tl0.start_s, tl0.makespan_s
    a = sch.arrays
    chunk = np.where(a.stage != a.rank, 1, 0) if fam.geometry == "mirror" else a.stage // lay.pp
    parts = _op_parts(est, d, a, S, tl.duration_s)
    segs = _Builder(floor=1e-12 * tl.makespan_s)
    _op_segments(segs, parts, a, tl.start_s)
    _p2p_segments(segs, sch, tl, start0, makespan0, p2p)
    tail_end = _tail_segments(segs, est, d, tl)
    step = float(tl.makespan_s + tail_end.max()) if len(tail_end) else tl.makespan_s
    return StepTimeline(estimate=est, timeline=tl, chunk=chunk, compute_s=parts["compute"],
                        contention_s=parts["contention"], segments=segs.done(), makespan_s=tl.makespan_s,
                        makespan_no_p2p_s=makespan0, step_s=step, busiest_rank=int(d["r_star"][0]),
                        tail_rank=int(d["tail_rank"][0]))


class _Builder:
    """Collects Segments column by column (numpy blocks; names interned), leaving out pieces no longer
    than `floor` (rounding residues such as a 3e-17 s exposure: nothing to draw, and their sum is far
    below the breakdown's rounding)."""

    def __init__(self, floor: float = 0.0):
        self.cols, self.names, self.floor = [], {}, floor

    def add(self, rank, track: str, name: str, start, dur, exposed: bool, op=None):
        dur = np.asarray(dur, dtype=float)
        keep = dur > self.floor
        if not keep.any():
            return
        rank = np.broadcast_to(rank, dur.shape)[keep]
        start = np.broadcast_to(start, dur.shape)[keep]
        op = np.full(len(rank), -1) if op is None else np.broadcast_to(op, dur.shape)[keep]
        code = self.names.setdefault(name, len(self.names))
        self.cols.append((rank, np.full(len(rank), TRACKS.index(track)), np.full(len(rank), code), start,
                          dur[keep], np.full(len(rank), exposed), op))

    def done(self) -> Segments:
        names = tuple(self.names)
        if not self.cols:
            e = np.zeros(0)
            return Segments(e.astype(int), e.astype(int), e.astype(int), e, e, e.astype(bool), e.astype(int), names)
        c = [np.concatenate(x) for x in zip(*self.cols)]
        return Segments(c[0].astype(np.int64), c[1], c[2], c[3], c[4], c[5].astype(bool), c[6].astype(np.int64),
                        names)


def _names(est) -> dict:
    """The collective(s) each part stands for (module docstring)."""
    lay, stack = est.layout, est.training.stack
    pp = np.asarray([lay.pp])
    reshard, every_rs = bool(stack.fsdp_reshards(pp)[0]), bool(stack.fsdp_reduces_every_microbatch(pp)[0])
    z3_b = "+".join(n for n, on in (("all-gather", reshard), ("reduce-scatter", every_rs)) if on) or "all-gather"
    if lay.dp_mode == "dataparallel":
        reduce = "broadcast+reduce"
    else:
        reduce = "reduce-scatter" if lay.zero in (1, 2) else "all-reduce"
    return {"tp": "all-gather+reduce-scatter" if lay.sequence_parallel else "all-reduce",
            "cp": "p2p" if lay.cp_algorithm == "ring" else "all-to-all", "ep": "all-to-all",
            "zero3_f": "all-gather", "zero3_b": z3_b, "dp_reduce": reduce}


def _op_parts(est, d, a, S, duration) -> dict:
    """Per op (rank order): exposed and hidden communication per group, the compute left and its
    contention (the op's duration less its exposed parts, less its pure compute)."""
    st, z3 = d["stage"], d["zero3"]
    fwd, bwd, wgt = a.kind == 0, a.kind == 1, a.kind == 2

    def per_op(key_f, key_b, table=st):
        if key_f not in table:
            return np.zeros(len(a.kind))
        vf, vb = table[key_f][0, :S], table[key_b][0, :S]
        return np.where(fwd, vf[a.stage], np.where(bwd, vb[a.stage], 0.0))

    exposed = {"zero3": per_op("f", "b", z3)}
    hidden = {"zero3": per_op("hid_f", "hid_b", z3)}
    for g, (e, h) in _STAGE_KEYS.items():
        exposed[g], hidden[g] = per_op(e.format("f"), e.format("b")), per_op(h.format("f"), h.format("b"))
    total = sum(exposed.values())
    compute = np.maximum(duration - total, 0.0)
    F, B, W = (st[k][0, :S][a.stage] for k in ("F", "B", "W"))
    copy = per_op("copy_f", "copy_b", z3)  # FSDP2's compute-stream copies: compute, not contention
    pure = np.where(fwd, F, np.where(bwd, B + np.where(a.includes_weight, W, 0.0), W)) + copy
    return {"exposed": exposed, "hidden": hidden, "compute": compute,
            "contention": np.where(wgt, 0.0, np.maximum(compute - pure, 0.0)), "names": _names(est),
            "fwd": fwd}


def _op_segments(segs, parts, a, start) -> None:
    """Each op's exposed parts back to back from its start, its hidden parts under its compute."""
    ops = np.arange(len(a.kind))
    names, fwd = parts["names"], parts["fwd"]
    t = start.copy()
    for g in ("zero3", "tp", "cp", "ep"):
        e = parts["exposed"][g]
        if g == "zero3":
            for sel, nm in ((fwd, names["zero3_f"]), (~fwd, names["zero3_b"])):
                segs.add(a.rank[sel], g, nm, t[sel], e[sel], True, ops[sel])
        else:
            segs.add(a.rank, g, names[g], t, e, True, ops)
        t = t + e
    for g in ("zero3", "tp", "cp", "ep"):
        h = np.minimum(parts["hidden"][g], parts["compute"])
        if g == "zero3":
            for sel, nm in ((fwd, names["zero3_f"]), (~fwd, names["zero3_b"])):
                segs.add(a.rank[sel], g, nm, t[sel], h[sel], False, ops[sel])
        else:
            segs.add(a.rank, g, names[g], t, h, False, ops)


def _p2p_segments(segs, sch, tl, start0, makespan0, p2p) -> None:
    """The p2p transfers each op waits for, and the exposed p2p wait per rank (module docstring)."""
    if p2p <= 0:
        return
    a = sch.arrays
    ops = np.arange(len(a.kind))
    for dep, bnd in ((a.dep, a.boundary), (a.dep2, a.boundary2)):
        if dep is None or bnd is None:
            continue
        sel = (dep >= 0) & (bnd >= 0)
        segs.add(a.rank[sel], "pp", "p2p", tl.end_s[dep[sel]], np.full(int(sel.sum()), p2p), False, ops[sel])
    E = max(tl.makespan_s - makespan0, 0.0)
    for r in range(sch.num_ranks):
        lo, hi = a.rank_offsets[r], a.rank_offsets[r + 1]
        shift = np.append(tl.start_s[lo:hi] - start0[lo:hi], E)
        low = np.minimum.accumulate(shift[::-1])[::-1]
        wait = np.maximum(np.diff(low, prepend=0.0), 0.0)
        at = np.append(tl.start_s[lo:hi], tl.makespan_s)
        segs.add(r, "pp_wait", "p2p", at - wait, wait, True)


def _tail_segments(segs, est, d, tl) -> np.ndarray:
    """After the makespan, per rank: ZeRO-3 once-per-step reduce-scatters, the exposed DP reduction, the
    optimizer, the ZeRO-1/2 parameter all-gather, the ZeRO-3 once-per-step gathers; the DP reduction
    hidden under the last backward, ending with the rank's last op. Returns each rank's tail length."""
    P = tl.schedule.num_ranks
    table, z3, dp = d["table"], d["zero3"], d["dp"]
    zero = np.zeros(P)
    z_rs, z_ag = ((table.rank_sum(z3[k])[0, :P] if k in z3 else zero) for k in ("tail_rs", "tail_ag"))
    opt = d["optimizer"][0, :P]
    ranks = np.arange(P)
    t = np.full(P, tl.makespan_s)
    names = _names(est)
    for track, name, dur in (("zero3", "reduce-scatter", z_rs), ("dp", names["dp_reduce"], dp["reduce"][0, :P]),
                             ("compute", "optimizer", opt), ("dp", "all-gather", dp["gather"][0, :P]),
                             ("zero3", "all-gather", z_ag)):
        segs.add(ranks, track, name, t, dur, track != "compute")
        t = t + dur
    a = tl.schedule.arrays
    last = np.array([tl.end_s[a.rank_offsets[r]:a.rank_offsets[r + 1]].max(initial=0.0) for r in range(P)])
    hid = dp["reduce_hidden"][0, :P]
    segs.add(ranks, "dp", names["dp_reduce"], np.maximum(last - hid, 0.0), np.minimum(hid, last), False)
    return t - tl.makespan_s
