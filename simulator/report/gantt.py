"""Gantt chart of a replayed pipeline timeline (matplotlib, Agg): one row per rank, one box per op,
coloured by kind (F blue, B green / full backward teal, W orange) with shades by microbatch and
the microbatch number written in the box, as in the GPipe / Zero Bubble / DualPipe figures."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

_BASE = {"F": "#1f77b4", "I": "#2ca02c", "B": "#17becf", "W": "#ff7f0e"}


def _shade(color, j, m):
    r, g, b = to_rgb(color)
    t = 0.45 * (j % 8) / 8  # lighten up to 45%, cycling every 8 microbatches
    return (r + (1 - r) * t, g + (1 - g) * t, b + (1 - b) * t)


def gantt_figure(timeline, *, title=None, time_unit_s=1.0, unit_label="s"):
    """A matplotlib Figure of the timeline; times shown in `unit_label` (= `time_unit_s` seconds)."""
    sch = timeline.schedule
    R = sch.num_ranks
    width = min(24, 6 + 0.04 * len(timeline.end_s) / max(R, 1) * 4)
    fig, ax = plt.subplots(figsize=(width, 0.5 * R + 1.6))
    m = sch.num_microbatches
    for i, op in enumerate(timeline.ops):
        letter = op.label[len(str(op.stage))]
        s = timeline.start_s[i] / time_unit_s
        d = timeline.duration_s[i] / time_unit_s
        ax.barh(op.rank, d, left=s, height=0.8, color=_shade(_BASE[letter], op.microbatch, m),
                edgecolor="black", linewidth=0.3)
        if d > 0 and len(timeline.end_s) <= 800:
            ax.text(s + d / 2, op.rank, str(op.microbatch), ha="center", va="center", fontsize=6)
    ax.set_yticks(range(R))
    ax.set_yticklabels([f"rank {r}" for r in range(R)])
    ax.invert_yaxis()
    ax.set_xlabel(f"time [{unit_label}]")
    ax.set_xlim(0, timeline.makespan_s / time_unit_s)
    ax.set_title(title or f"{sch.name}: p={R}, m={m}, makespan {timeline.makespan_s / time_unit_s:.4g} {unit_label}, "
                 f"bubble {timeline.bubble_fraction:.1%}")
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
