"""Sweep charts: they draw exactly the numbers of the results table (no physics of their own)."""
import numpy as np
import pandas as pd
import pytest

from simulator.errors import InputError
from simulator.report.sweep_plots import (GiB, bubble_chart, memory_bars, mfu_heatmap, pareto_chart, save_figure,
                                          short_variant)
from simulator.report.bubble import bubble_vs_microbatches
from simulator.report.winner import pareto_mask


def results(n=400, seed=1):
    rng = np.random.default_rng(seed)
    tp = rng.choice([1, 2, 4, 8], n)
    pp = rng.choice([1, 2, 4], n)
    parts = {c: rng.uniform(1, 15, n) * GiB for c in
             ("params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "other_bytes")}
    peak = sum(parts.values())
    df = pd.DataFrame({"label": [f"TP{a}-CP1-PP{b}-DP{64 // (a * b)}" for a, b in zip(tp, pp)], "tp": tp, "pp": pp,
                       "mfu": rng.uniform(0.2, 0.6, n), "tokens_per_s": rng.uniform(1e5, 1e6, n),
                       "peak_bytes": peak, "memory_headroom_bytes": 80 * GiB - peak, "feasible": peak < 80 * GiB,
                       "schedule": "1f1b", "micro_batch_size": 1, "zero": 1, "recompute": "selective",
                       "sequence_parallel": tp > 1, **parts})
    df.loc[(df.tp == 1) & (df.pp == 1), "feasible"] = False  # one cell with nothing that fits
    return df.sort_values(["feasible", "tokens_per_s"], ascending=[False, False]).reset_index(drop=True)


def test_mfu_heatmap_cells_show_the_best_feasible_mfu_per_tp_pp():
    df = results()
    fig = mfu_heatmap(df)
    ax = fig.axes[0]
    texts = {(round(t.get_position()[0]), round(t.get_position()[1])): t.get_text() for t in ax.texts}
    tps, pps = sorted(df.tp.unique()), sorted(df.pp.unique())
    for i, pp in enumerate(pps):
        for j, tp in enumerate(tps):
            cell = df[(df.tp == tp) & (df.pp == pp) & df.feasible]
            want = f"{100 * cell.mfu.max():.1f}%" if len(cell) else "none fit"
            assert texts[(j, i)] == want, (tp, pp)
    assert texts[(0, 0)] == "none fit"


def test_mfu_heatmap_tells_missing_combinations_from_infeasible_ones():
    df = results()
    df = df[~((df.tp == 8) & (df.pp == 4))]  # e.g. tp·pp > num_gpus: no row at all
    ax = mfu_heatmap(df).axes[0]
    texts = {(round(t.get_position()[0]), round(t.get_position()[1])): t.get_text() for t in ax.texts}
    assert texts[(3, 2)] == "no layout" and texts[(0, 0)] == "none fit"


def test_pareto_chart_line_is_the_pareto_front():
    df = results()
    fig = pareto_chart(df)
    line = fig.axes[0].lines[0]
    front = df[pareto_mask(df)].sort_values("memory_headroom_bytes")
    np.testing.assert_allclose(line.get_xdata(), front.memory_headroom_bytes / GiB)
    np.testing.assert_allclose(line.get_ydata(), front.tokens_per_s)
    # every point off the front is dominated by a front point
    f = df[df.feasible]
    for _, r in f.sample(50, random_state=0).iterrows():
        assert ((front.memory_headroom_bytes >= r.memory_headroom_bytes) & (front.tokens_per_s >= r.tokens_per_s)).any()


def test_memory_bars_stack_the_breakdown_of_the_top_rows():
    df = results()
    fig = memory_bars(df, top=5, hbm_bytes=80 * GiB)
    ax = fig.axes[0]
    bars = ax.patches
    assert len(bars) == 5 * 5  # five parts for five layouts
    tops = np.zeros(5)
    for k in range(5):
        for i in range(5):
            b = bars[k * 5 + i]
            tops[i] = b.get_y() + b.get_height()
    np.testing.assert_allclose(tops, df.head(5).peak_bytes / GiB)
    assert any(abs(l.get_ydata()[0] - 80) < 1e-9 for l in ax.lines)  # HBM line at 80 GiB
    assert [t.get_text().split("\n")[0] for t in ax.get_xticklabels()] == list(df.head(5).label)
    assert short_variant(df.iloc[0]) in ax.get_xticklabels()[0].get_text()


def test_bubble_chart_plots_the_engine_table():
    t = bubble_vs_microbatches(["1f1b", "zb-h1"], pp=4, microbatches=[4, 8, 16], forward_s=1, backward_s=1,
                               weight_s=1)
    fig = bubble_chart(t)
    lines = fig.axes[0].lines
    assert len(lines) == 2
    one = t[t.schedule == "1f1b"]
    np.testing.assert_allclose(lines[0].get_ydata(), 100 * one.bubble_fraction)
    # ZB-H1 bubble is about a third of 1F1B's with F = B = W (formulas.md §5.2): (p-1)(F+B-W) vs (p-1)(F+B+W)
    zb = t[t.schedule == "zb-h1"].bubble_fraction.to_numpy()
    assert (zb < one.bubble_fraction.to_numpy()).all()


def test_bubble_table_without_w_splits_the_backward_b_equal_w():
    from simulator.report.bubble import split_backward

    assert split_backward(2.0) == (1.0, 1.0, True) and split_backward(2.0, 0.0) == (2.0, 0.0, False)
    t = bubble_vs_microbatches(["1f1b", "zb-h1"], pp=4, microbatches=[8], forward_s=1, backward_s=2)
    given = bubble_vs_microbatches(["1f1b", "zb-h1"], pp=4, microbatches=[8], forward_s=1, backward_s=1,
                                   weight_s=1)
    cols = ["bubble_fraction", "makespan_s", "backward_s", "weight_s"]
    np.testing.assert_allclose(t[cols].to_numpy(float), given[cols].to_numpy(float), rtol=1e-12)
    assert t.w_split.all() and not given.w_split.any()


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<?xml")])
def test_save_figure_writes_png_and_svg(tmp_path, suffix, magic):
    p = tmp_path / f"c{suffix}"
    save_figure(mfu_heatmap(results()), p)
    assert p.read_bytes()[:5].startswith(magic)


def test_save_figure_rejects_other_formats(tmp_path):
    with pytest.raises(InputError, match=r"\.png or \.svg"):
        save_figure(mfu_heatmap(results()), tmp_path / "c.jpg")


def test_charts_refuse_tables_without_their_columns():
    with pytest.raises(InputError, match="'mfu'"):
        mfu_heatmap(pd.DataFrame({"tp": [1], "pp": [1], "feasible": [True]}))
