"""Stacked bars of per-GPU memory per pipeline stage with the HBM capacity line (matplotlib, Agg).

The chart takes a MemoryResult (or its per-stage DataFrame) and draws it; it computes no physics.
"""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..units import GiB  # noqa: E402

# (column, label, colour) in stacking order
PARTS = (
    ("params_bytes", "parameters", "#1f77b4"),
    ("grads_bytes", "gradients", "#ff7f0e"),
    ("optimizer_bytes", "optimizer", "#2ca02c"),
    ("activations_bytes", "activations", "#d62728"),
    ("kv_cache_bytes", "KV cache", "#9467bd"),
    ("other_bytes", "other (runtime, buffers)", "#7f7f7f"),
)


def memory_figure(result=None, *, frame=None, hbm_bytes=None, title=None):
    """Figure with one stacked bar per stage (GiB) and a dashed line at the HBM capacity.

    Give a MemoryResult, or a per-stage DataFrame (`frame`, columns as MemoryBreakdown) and `hbm_bytes`.
    """
    if result is not None:
        frame = result.to_frame()
        hbm_bytes = result.hbm_bytes if hbm_bytes is None else hbm_bytes
        if title is None:
            lay = result.layout
            title = (f"{result.model.name} {lay.label} zero={lay.zero} recompute={lay.recompute} "
                     f"{lay.schedule}{' (inference)' if result.inference else ''}")
    n = len(frame)
    fig, ax = plt.subplots(figsize=(max(6.5, 3.0 + 0.55 * n), 4.5))
    x = list(range(n))
    bottom = [0.0] * n
    for col, label, colour in PARTS:
        vals = [v / GiB for v in frame[col]]
        if not any(vals):
            continue
        ax.bar(x, vals, bottom=bottom, color=colour, label=label, width=0.7, edgecolor="white", linewidth=0.4)
        bottom = [b + v for b, v in zip(bottom, vals)]
    if hbm_bytes:
        ax.axhline(hbm_bytes / GiB, color="black", linestyle="--", linewidth=1.2,
                   label=f"HBM {hbm_bytes / GiB:.1f} GiB")
    ax.set_xticks(x)
    ax.set_xticklabels([str(int(s)) for s in frame["stage"]])
    ax.set_xlabel("pipeline stage")
    ax.set_ylabel("memory per GPU [GiB]")
    top = max(bottom + [hbm_bytes / GiB if hbm_bytes else 0.0])
    ax.set_ylim(0, top * 1.08 if top > 0 else 1)
    if title:
        ax.set_title(title, fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    order = [i for i, lbl in enumerate(labels) if lbl.startswith("HBM")] + \
        [i for i, lbl in reversed(list(enumerate(labels))) if not lbl.startswith("HBM")]  # top of the stack first
    ax.legend([handles[i] for i in order], [labels[i] for i in order], fontsize=8, loc="upper left",
              bbox_to_anchor=(1.01, 1.0), framealpha=0.9)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def save_memory_plot(result, path, **kwargs) -> None:
    """Write the chart to `path` (format from its suffix: .png, .svg, .pdf)."""
    fig = memory_figure(result, **kwargs)
    fig.savefig(path, dpi=130)
    plt.close(fig)
