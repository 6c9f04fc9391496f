"""Predicted-vs-measured scatter plot (log-log, y = x line, ±10 % band), one colour per source."""
from __future__ import annotations

import numpy as np

__all__ = ["predicted_vs_measured_figure", "save_scatter"]


def predicted_vs_measured_figure(results, *, measured: str = "measured_step_s", predicted: str = "predicted_step_s",
                                 group: str = "source_id", quantity: str = "step time", unit: str = "s",
                                 title: str | None = None):
    """Figure of `predicted` against `measured` columns of a validate results DataFrame.

    Points with a non-finite or non-positive value on either axis are left out (log axes).
    The chart computes nothing but the plotted band (y = x·(1 ± 0.1)).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 6.0), dpi=120)
    d = results[np.isfinite(results[measured].astype(float)) & np.isfinite(results[predicted].astype(float))]
    d = d[(d[measured] > 0) & (d[predicted] > 0)]
    groups = d.groupby(group, sort=True) if group in d else [("runs", d)]
    for name, g in groups:
        ax.scatter(g[measured], g[predicted], s=18, alpha=0.8, label=f"{name} ({len(g)})")
    if len(d):
        lo = float(min(d[measured].min(), d[predicted].min())) / 1.5
        hi = float(max(d[measured].max(), d[predicted].max())) * 1.5
        xs = np.array([lo, hi])
        ax.plot(xs, xs, color="black", lw=1, label="y = x")
        ax.fill_between(xs, xs * 0.9, xs * 1.1, color="grey", alpha=0.2, label="±10 %")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"measured {quantity} [{unit}]")
    ax.set_ylabel(f"predicted {quantity} [{unit}]")
    ax.set_title(title or f"parasim: predicted vs measured {quantity}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def save_scatter(results, path, **kw) -> None:
    """Write `predicted_vs_measured_figure(results, **kw)` to `path` (format from the suffix)."""
    import matplotlib.pyplot as plt

    fig = predicted_vs_measured_figure(results, **kw)
    fig.savefig(path)
    plt.close(fig)
