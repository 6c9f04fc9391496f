"""Gantt chart of a replayed pipeline timeline (matplotlib, Agg): one row per rank, one box per op,
coloured by kind (F blue, B green / full backward teal, W orange) with shades by microbatch and
the microbatch number written in the box, as in the GPipe / Zero Bubble / DualPipe figures.

Drawn from the timeline's op arrays, never one matplotlib call per op: up to `BOXES_UP_TO` ops the
boxes are one PolyCollection with black edges (numbers written up to `NUMBERS_UP_TO` ops); above it
the boxes are narrower than a pixel and the chart is an image of `PIXELS_PER_INCH` columns per inch,
each column of a rank's row coloured by the op running at its centre time (ops shorter than a
column may not show; idle time stays white). Linear in the op count either way. A chart has at
most `MAX_RANKS` rows (half an inch each: 256 ranks are a 130-inch, 15,000-pixel-high figure).
"""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from ..errors import InputError  # noqa: E402

_BASE = {"F": "#1f77b4", "I": "#2ca02c", "B": "#17becf", "W": "#ff7f0e"}
NUMBERS_UP_TO = 800
BOXES_UP_TO = 20_000
PIXELS_PER_INCH = 240
MAX_RANKS = 256


def _shade(color, j, m):
    r, g, b = to_rgb(color)
    t = 0.45 * (j % 8) / 8  # lighten up to 45%, cycling every 8 microbatches
    return (r + (1 - r) * t, g + (1 - g) * t, b + (1 - b) * t)


def _colours(a) -> np.ndarray:
    """(n, 3) RGB per op: its letter's colour (F, I, W, full B), lightened by microbatch mod 8."""
    letter = np.where((a.kind == 1) & a.includes_weight, 3, np.where(a.kind == 1, 1, np.where(a.kind == 2, 2, 0)))
    table = np.array([[_shade(_BASE[c], j, 0) for j in range(8)] for c in ("F", "I", "W", "B")])  # (4, 8, 3)
    return table[letter, a.microbatch % 8]


def _boxes(ax, timeline, time_unit_s):
    a = timeline.schedule.arrays
    s = timeline.start_s / time_unit_s
    e = s + timeline.duration_s / time_unit_s
    lo, hi = a.rank - 0.4, a.rank + 0.4
    verts = np.stack([np.stack([s, lo], -1), np.stack([e, lo], -1), np.stack([e, hi], -1), np.stack([s, hi], -1)], 1)
    ax.add_collection(PolyCollection(verts, facecolors=_colours(a), edgecolors="black", linewidths=0.3))
    if len(s) <= NUMBERS_UP_TO:
        for x0, x1, r, j in zip(s.tolist(), e.tolist(), a.rank.tolist(), a.microbatch.tolist()):
            if x1 > x0:
                ax.text((x0 + x1) / 2, r, str(j), ha="center", va="center", fontsize=6)


def _image(ax, timeline, columns: int, time_unit_s):
    """The boxes as an RGB image: `columns` per rank, 10 pixel rows per rank (box from r - 0.4 to r + 0.4)."""
    a = timeline.schedule.arrays
    R, span = timeline.schedule.num_ranks, timeline.makespan_s
    ranks = np.repeat(np.arange(R), columns)
    t = np.tile((np.arange(columns) + 0.5) * (span / columns), R)  # each column's centre time, per rank
    # a rank's ops run one after another in rank order, so (rank, start) sorts all ops: one search finds,
    # for every (rank, column), the last op that started by the column's centre time
    i = np.searchsorted(a.rank * (2.0 * span) + timeline.start_s, ranks * (2.0 * span) + t, side="right") - 1
    j = np.maximum(i, 0)
    running = (i >= 0) & (a.rank[j] == ranks) & (t < timeline.end_s[j])
    pixels = np.full((R * columns, 3), 255, dtype=np.uint8)
    pixels[running] = np.round(_colours(a)[j[running]] * 255).astype(np.uint8)
    img = np.full((R, 10, columns, 3), 255, dtype=np.uint8)
    img[:, 1:9] = pixels.reshape(R, 1, columns, 3)
    ax.imshow(img.reshape(R * 10, columns, 3), extent=(0, span / time_unit_s, R - 0.5, -0.5), aspect="auto",
              interpolation="nearest")


def gantt_figure(timeline, *, title=None, time_unit_s=1.0, unit_label="s"):
    """A matplotlib Figure of the timeline; times shown in `unit_label` (= `time_unit_s` seconds)."""
    sch = timeline.schedule
    R = sch.num_ranks
    if R > MAX_RANKS:
        raise InputError(f"a Gantt chart draws at most {MAX_RANKS} ranks (half an inch each), got pp {R}")
    width = min(24, 6 + 0.04 * len(timeline.end_s) / max(R, 1) * 4)
    fig, ax = plt.subplots(figsize=(width, 0.5 * R + 1.6))
    m = sch.num_microbatches
    if len(timeline.end_s) <= BOXES_UP_TO or timeline.makespan_s <= 0:
        _boxes(ax, timeline, time_unit_s)
    else:
        _image(ax, timeline, int(width * PIXELS_PER_INCH), time_unit_s)
    ax.set_yticks(range(R))
    ax.set_yticklabels([f"rank {r}" for r in range(R)])
    ax.set_ylim(R - 0.5, -0.5)  # rank 0 on top
    ax.set_xlabel(f"time [{unit_label}]")
    ax.set_xlim(0, timeline.makespan_s / time_unit_s)
    ax.set_title(title or f"{sch.name}: p={R}, m={m}, makespan {timeline.makespan_s / time_unit_s:.4g} {unit_label}, "
                 f"bubble {max(timeline.bubble_fraction, 0.0):.1%}")
    handles = [Patch(color=_BASE["F"], label="F forward"), Patch(color=_BASE["I"], label="B input gradient"),
               Patch(color=_BASE["W"], label="W weight gradient"), Patch(color=_BASE["B"], label="B full backward")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.18 if R < 6 else -0.08), ncol=4,
              fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def save_gantt(timeline, path, **kw) -> None:
    fig = gantt_figure(timeline, **kw)
    fig.savefig(path, dpi=120)
    plt.close(fig)
