"""Charts of sweep results (matplotlib, Agg). Each function turns a DataFrame into a Figure and
computes no physics: the numbers come from `simulator.sweep` and `report.winner` (results, Pareto mask) and `report.bubble`.

- `mfu_heatmap`: best MFU of any feasible layout for each (TP, PP), the value written in each cell;
- `pareto_chart`: throughput against memory headroom, the Pareto front highlighted;
- `bubble_chart`: bubble fraction against microbatches, one line per schedule;
- `memory_bars`: per-GPU memory breakdown (stacked) of the top layouts, with the HBM capacity.
`save_figure` writes PNG or SVG by the file suffix.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ..errors import InputError  # noqa: E402
from ..schedules import family  # noqa: E402
from .winner import short_variant  # noqa: E402  (the charts label rows with it)

GiB = 2**30
MEMORY_PARTS = (("params_bytes", "parameters", "#1f77b4"), ("grads_bytes", "gradients", "#ff7f0e"),
                ("optimizer_bytes", "optimizer", "#2ca02c"), ("activations_bytes", "activations", "#d62728"),
                ("other_bytes", "other", "#7f7f7f"))


def _need(df: pd.DataFrame, cols, what: str):
    missing = [c for c in cols if c not in df]
    if missing:
        raise InputError(f"{what} needs column {missing[0]!r} in the results")


def mfu_heatmap(df: pd.DataFrame, *, title: str | None = None, value: str = "mfu"):
    """Heatmap over TP (columns) × PP (rows) of the best `value` (MFU) among feasible layouts; each
    cell shows the value in percent, 'none fit' where layouts with that TP and PP exist but none is
    feasible, 'no layout' where the table has no row with that TP and PP."""
    _need(df, ["tp", "pp", "feasible", value], "the MFU heatmap")
    tps = np.sort(df["tp"].unique())
    pps = np.sort(df["pp"].unique())
    feas = df[df["feasible"].astype(bool)]
    best = feas.groupby(["pp", "tp"])[value].max() if len(feas) else pd.Series(dtype=float)
    present = set(zip(df["pp"].tolist(), df["tp"].tolist()))
    grid = np.full((len(pps), len(tps)), np.nan)
    for (pp, tp), v in best.items():
        grid[np.searchsorted(pps, pp), np.searchsorted(tps, tp)] = v
    fig, ax = plt.subplots(figsize=(1.2 * len(tps) + 2.5, 0.7 * len(pps) + 1.8))
    cmap = plt.get_cmap("viridis").with_extremes(bad="#dddddd")
    vmax = np.nanmax(grid) if np.isfinite(grid).any() else 1.0
    im = ax.imshow(np.ma.masked_invalid(grid * 100), cmap=cmap, vmin=0, vmax=vmax * 100, aspect="auto")
    for i in range(len(pps)):
        for j in range(len(tps)):
            v = grid[i, j]
            if np.isfinite(v):
                dark = v < 0.6 * vmax
                ax.text(j, i, f"{100 * v:.1f}%", ha="center", va="center", fontsize=9,
                        color="white" if dark else "black")
            elif (pps[i], tps[j]) in present:
                ax.text(j, i, "none fit", ha="center", va="center", fontsize=7, color="#555555")
            else:  # no valid layout has this TP and PP (e.g. tp·pp > num_gpus)
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, color="white"))
                ax.text(j, i, "no layout", ha="center", va="center", fontsize=7, color="#999999")
    ax.set_xticks(range(len(tps)), [str(t) for t in tps])
    ax.set_yticks(range(len(pps)), [str(p) for p in pps])
    ax.set_xlabel("tensor parallel (TP)")
    ax.set_ylabel("pipeline parallel (PP)")
    fig.colorbar(im, ax=ax, label=f"best {value.upper()} [%]")
    ax.set_title(title or f"Best {value.upper()} per TP × PP (feasible layouts)")
    fig.tight_layout()
    return fig


def pareto_chart(df: pd.DataFrame, *, title: str | None = None, annotate: int = 6, max_points: int = 20000):
    """Throughput (tokens/s) against memory headroom (HBM − peak, GiB) of the feasible layouts, the
    Pareto front (column `pareto` if present, else `sweep.pareto_mask`) as a line; the `annotate`
    fastest front points are labelled. At most `max_points` background points are drawn (evenly
    strided in rank order)."""
    _need(df, ["tokens_per_s", "memory_headroom_bytes", "feasible", "label"], "the Pareto chart")
    from .winner import pareto_mask

    front = df["pareto"].to_numpy(bool) if "pareto" in df else pareto_mask(df)
    feas = df[df["feasible"].astype(bool)]
    fig, ax = plt.subplots(figsize=(8.5, 5.2))
    if len(feas):
        step = max(1, len(feas) // max_points)
        bg = feas.iloc[::step]
        ax.scatter(bg["memory_headroom_bytes"] / GiB, bg["tokens_per_s"], s=6, alpha=0.35, color="#7f7f7f",
                   label=f"feasible layouts ({len(feas):,})", rasterized=True)
        f = df[front].sort_values("memory_headroom_bytes")
        ax.plot(f["memory_headroom_bytes"] / GiB, f["tokens_per_s"], "-o", color="#d62728", ms=5,
                label=f"Pareto front ({len(f)})")
        keys = []
        for k, (_, r) in enumerate(f.sort_values("tokens_per_s", ascending=False).head(annotate).iterrows(), 1):
            ax.annotate(str(k), (r["memory_headroom_bytes"] / GiB, r["tokens_per_s"]), textcoords="offset points",
                        xytext=(0, 7), ha="center", fontsize=8, fontweight="bold", color="#d62728")
            keys.append(f"{k}: {r['label']}" + (f"  {short_variant(r)}" if "schedule" in r else ""))
        if keys:  # the key sits beside the axes so it never hides points
            ax.text(1.02, 1.0, "Pareto front, fastest first:\n" + "\n".join(keys), transform=ax.transAxes,
                    ha="left", va="top", fontsize=7, family="monospace",
                    bbox=dict(boxstyle="round", fc="white", ec="#bbbbbb"))
        ax.margins(y=0.1)
    else:
        ax.text(0.5, 0.5, "no feasible layout", transform=ax.transAxes, ha="center", va="center")
    ax.set_xlabel("memory headroom per GPU [GiB] (HBM − peak)")
    ax.set_ylabel("throughput [tokens/s]")
    ax.yaxis.set_major_formatter(matplotlib.ticker.EngFormatter())
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    ax.set_title(title or "Throughput vs memory headroom")
    fig.tight_layout()
    return fig


def bubble_times_caption(table: pd.DataFrame) -> str | None:
    """The F, B, W per microbatch the bubble table was replayed with, and where W came from (the default
    B = W split of the Zero Bubble paper, or as given), for the bubble chart's caption: the zero-bubble
    curves depend on W. None for a table without the time columns."""
    if not len(table) or not {"forward_s", "backward_s", "weight_s"} <= set(table):
        return None
    r = table.iloc[0]
    times = f"F = {r.forward_s:.3g}, B = {r.backward_s:.3g}, W = {r.weight_s:.3g} s per microbatch per rank"
    if bool(r.get("w_split", False)):
        from .bubble import W_SPLIT_SOURCE

        return f"{times}; no W given: the backward is split B = W ({W_SPLIT_SOURCE}, Zero Bubble)"
    return f"{times} (W as given{'; W = 0 leaves zero-bubble schedules nothing to fill bubbles with' if r.weight_s == 0 else ''})"


def bubble_chart(table: pd.DataFrame, *, title: str | None = None):
    """Bubble fraction against microbatches per step, one line per schedule (from
    `report.bubble.bubble_vs_microbatches`), captioned with the F, B, W it was replayed with."""
    _need(table, ["schedule", "microbatches", "bubble_fraction"], "the bubble chart")
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    markers = "osD^vP*X"
    styles = ("-", "--", "-.", ":")
    for k, (name, g) in enumerate(table.groupby("schedule", sort=False)):
        g = g.sort_values("microbatches")
        vpp = int(g["vpp"].iloc[0]) if "vpp" in g else 1
        lab = f"{name} (v={vpp})" if family(name).takes_vpp else name
        # distinct marker and dash per schedule: schedules with equal bubbles stay visible on top of each other
        ax.plot(g["microbatches"], 100 * g["bubble_fraction"], ls=styles[k % len(styles)],
                marker=markers[k % len(markers)], ms=7 - 0.5 * (k % 4), mfc="none" if k % 2 else None, label=lab)
    if len(table):
        ax.set_xscale("log", base=2)
        ms = np.sort(table["microbatches"].unique())
        ax.set_xticks(ms, [str(m) for m in ms])
    ax.set_xlabel("microbatches per step (m)")
    ax.set_ylabel("bubble fraction [% of ranks × makespan]")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    pp = f" (pp={int(table['pp'].iloc[0])})" if "pp" in table and len(table) else ""
    ax.set_title(title or f"Pipeline bubble vs microbatches{pp}")
    caption = bubble_times_caption(table)
    if caption:
        fig.text(0.01, 0.01, caption, fontsize=7, ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.04 if caption else 0, 1, 1))
    return fig


def memory_bars(df: pd.DataFrame, *, top: int = 8, hbm_bytes: float | None = None, title: str | None = None):
    """Stacked per-GPU memory (parameters, gradients, optimizer, activations, other; the peak stage) of
    the first `top` rows of `df` (ranked results), with the HBM capacity as a dashed line (from
    `hbm_bytes`, else peak_bytes + memory_headroom_bytes of the first row)."""
    _need(df, ["label", "peak_bytes"] + [c for c, _, _ in MEMORY_PARTS], "the memory chart")
    d = df.head(top)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(d) + 2.5), 5.2))
    x = np.arange(len(d))
    bottom = np.zeros(len(d))
    for col, name, color in MEMORY_PARTS:
        v = d[col].to_numpy(dtype=float) / GiB
        ax.bar(x, v, bottom=bottom, color=color, label=name, width=0.7)
        bottom += v
    ax.scatter(x, d["peak_bytes"].to_numpy(dtype=float) / GiB, marker="_", s=400, color="black", zorder=3,
               label="peak")
    if hbm_bytes is None and "memory_headroom_bytes" in d and len(d):
        hbm_bytes = float(d["peak_bytes"].iloc[0] + d["memory_headroom_bytes"].iloc[0])
    if hbm_bytes:
        ax.axhline(hbm_bytes / GiB, color="#d62728", ls="--", lw=1, label=f"HBM {hbm_bytes / GiB:.1f} GiB")
    names = [f"{r['label']}\n{short_variant(r)}" if "schedule" in d else r["label"] for _, r in d.iterrows()]
    ax.set_xticks(x, names, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("memory per GPU [GiB]")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(title or f"Memory of the top {len(d)} layouts (peak stage)")
    fig.tight_layout()
    return fig


def save_figure(fig, path) -> None:
    """Write `fig` to `path` (.png or .svg) and close it."""
    p = Path(path)
    if p.suffix.lower() not in (".png", ".svg"):
        raise InputError(f"chart file must end in .png or .svg, got {str(path)!r}")
    fig.savefig(p, dpi=130 if p.suffix.lower() == ".png" else None, bbox_inches="tight")
    plt.close(fig)
