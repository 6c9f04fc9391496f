"""Gantt chart of one estimated step (report/step_timeline.py; matplotlib, Agg).

One row per pipeline rank: the compute lane on top (F, B, W boxes, coloured by op kind; the model chunk
a box belongs to is its hatching, so interleaved and V schedules read chunk by chunk; micro-batch numbers
written in the boxes while there are few), and under it two thin communication lanes coloured by group:
the exposed parts (the step waits for them) and, paler, the hidden parts (overlapped with compute).
After the makespan, the tail: DP reduction, optimizer (dotted white), parameter gathers; dashed lines mark the
makespan and the step's end. Colours: Okabe & Ito's colour-blind-safe palette (Okabe & Ito 2008,
"Color Universal Design"), plus grey. Every lane is one PolyCollection per colour and hatching (never
one matplotlib call per box), so charts of thousands of ops draw in about a second.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from ..errors import InputError  # noqa: E402
from .step_timeline import TRACKS  # noqa: E402

# Okabe-Ito: blue, sky blue, bluish green, orange, vermillion, reddish purple, yellow, black; grey, white
OPS = {"F forward": "#0072B2", "B input gradient": "#56B4E9", "B full backward": "#009E73",
       "W weight gradient": "#E69F00", "optimizer": "#FFFFFF"}
OPTIMIZER_HATCH = ".."
GROUPS = {"tp": ("TP", "#D55E00"), "cp": ("CP", "#CC79A7"), "ep": ("EP", "#F0E442"),
          "zero3": ("FSDP / ZeRO-3", "#999999"), "dp": ("DP", "#000000"), "pp": ("PP p2p wait", "#FFFFFF")}
HATCHES = ("", "//", "\\\\", "xx", "--", "||", "++", "..")
MAX_RANKS = 256
NUMBERS_UP_TO = 600
EDGES_UP_TO = 6000
_LANES = {"compute": (-0.44, 0.06), "exposed": (0.10, 0.26), "hidden": (0.28, 0.44)}


def _boxes(ax, rank, start, dur, lane, colour, hatch="", alpha=1.0, edges=True, unit=1.0):
    """One PolyCollection of boxes [start, start + dur] in `lane` of each rank's row."""
    if not len(rank):
        return
    lo, hi = _LANES[lane]
    s, e = start / unit, (start + dur) / unit
    y0, y1 = rank + lo, rank + hi
    verts = np.stack([np.stack([s, y0], -1), np.stack([e, y0], -1), np.stack([e, y1], -1),
                      np.stack([s, y1], -1)], 1)
    ax.add_collection(PolyCollection(verts, facecolors=colour, alpha=alpha, hatch=hatch or None,
                                     edgecolors="black" if edges or hatch else "none",
                                     linewidths=0.25 if edges else 0.0))


def _ops(ax, st, edges, unit):
    a = st.timeline.schedule.arrays
    kind = np.where(a.kind == 0, 0, np.where(a.kind == 2, 3, np.where(a.includes_weight, 2, 1)))
    colours = list(OPS.values())
    for k in range(4):
        for c in range(int(st.chunk.max(initial=0)) + 1):
            sel = (kind == k) & (st.chunk == c)
            _boxes(ax, a.rank[sel], st.timeline.start_s[sel], st.timeline.duration_s[sel], "compute", colours[k],
                   HATCHES[c % len(HATCHES)], edges=edges, unit=unit)
    if len(a.kind) <= NUMBERS_UP_TO:
        mid = (st.timeline.start_s + st.timeline.duration_s / 2) / unit
        for x, r, j in zip(mid.tolist(), a.rank.tolist(), a.microbatch.tolist()):
            ax.text(x, r - 0.19, str(j), ha="center", va="center", fontsize=5)


def _comm(ax, st, edges, unit):
    seg = st.segments
    opt = seg.track == TRACKS.index("compute")
    _boxes(ax, seg.rank[opt], seg.start_s[opt], seg.dur_s[opt], "compute", OPS["optimizer"], OPTIMIZER_HATCH,
           unit=unit)
    for g, (_, colour) in GROUPS.items():
        tracks = [TRACKS.index(t) for t in (("pp_wait",) if g == "pp" else (g,))]
        mine = np.isin(seg.track, tracks)
        for lane, exposed, alpha in (("exposed", True, 1.0), ("hidden", False, 0.45)):
            sel = mine & (seg.exposed == exposed)
            _boxes(ax, seg.rank[sel], seg.start_s[sel], seg.dur_s[sel], lane, colour, "xxxx" if g == "pp" else "",
                   alpha, edges, unit)


def _legend(ax, st, R):
    chunks = int(st.chunk.max(initial=0)) + 1
    a = st.timeline.schedule.arrays
    have = {"F forward": True, "B input gradient": bool(((a.kind == 1) & ~a.includes_weight).any()),
            "B full backward": bool(((a.kind == 1) & a.includes_weight).any()),
            "W weight gradient": bool((a.kind == 2).any()), "optimizer": True}
    handles = [Patch(facecolor=c, edgecolor="black", hatch=OPTIMIZER_HATCH if k == "optimizer" else None, label=k)
               for k, c in OPS.items() if have[k]]
    if chunks > 1:
        handles += [Patch(facecolor="white", edgecolor="black", hatch=HATCHES[c % len(HATCHES)], label=f"chunk {c}")
                    for c in range(chunks)]
    used = set(TRACKS[t] for t in np.unique(st.segments.track).tolist())
    handles += [Patch(facecolor=c, edgecolor="black", hatch="xxxx" if g == "pp" else None, label=n)
                for g, (n, c) in GROUPS.items() if g in used or (g == "pp" and "pp_wait" in used)]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.5 / max(R, 1) - 0.06),
              ncol=min(len(handles), 7), fontsize=7, frameon=False,
              title="compute lane: op kind (hatching: chunk); lanes below: communication exposed, hidden (pale)",
              title_fontsize=7)


def step_gantt_figure(st):
    """A matplotlib Figure of StepTimeline `st` (module docstring)."""
    R = st.num_ranks
    if R > MAX_RANKS:
        raise InputError(f"--plot draws at most {MAX_RANKS} pipeline ranks, got pp {R}; --trace has no such limit")
    unit, label = (1e-3, "ms") if st.step_s < 2.0 else (1.0, "s")
    n = len(st.timeline.end_s)
    fig, ax = plt.subplots(figsize=(min(28, 10 + n / max(R, 1) / 40), 0.75 * R + 2.2))
    edges = n + len(st.segments) <= EDGES_UP_TO
    _ops(ax, st, edges, unit)
    _comm(ax, st, edges, unit)
    for x in (st.makespan_s, st.step_s):
        ax.axvline(x / unit, color="black", linestyle="--", linewidth=0.6)
    ax.set_yticks(range(R))
    ax.set_yticklabels([f"rank {r}" for r in range(R)])
    ax.set_ylim(R - 0.5, -0.5)
    ax.set_xlim(0, st.step_s / unit * 1.005)
    ax.set_xlabel(f"time [{label}]")
    e = st.estimate
    ax.set_title(f"{e.model.name} {e.layout.label} {e.layout.schedule}: step {st.step_s / unit:.4g} {label} "
                 f"(pipeline {st.makespan_s / unit:.4g}, then DP tail + optimizer); busiest rank {st.busiest_rank}",
                 fontsize=9)
    _legend(ax, st, R)
    fig.tight_layout()
    return fig


def save_step_gantt(st, path) -> None:
    fig = step_gantt_figure(st)
    fig.savefig(path, dpi=130)
    plt.close(fig)
