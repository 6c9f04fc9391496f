"""The lent H100's measured files on their own, no prediction: the repeat, the two calibrations against each
other and their fit logs, the cost of the gradient mode, the loss's working memory, the profiled idle time
(docs/validation-h100.md, written by h100_report.py).
"""
from __future__ import annotations

from pathlib import Path

from make_accuracy import _abs_pct, _pct

DATA = Path(__file__).resolve().parent / "h100"


def repeat_table() -> list[str]:
    import pandas as pd

    a, b = (pd.read_csv(DATA / f) for f in ("train_steps.csv", "train_steps_repeat.csv"))
    m = a.merge(b, on="run_id", suffixes=("_a", "_b"))
    ds = (m["step_time_s_b"] / m["step_time_s_a"] - 1).abs()
    dm = (m["peak_mem_bytes_b"] / m["peak_mem_bytes_a"] - 1).abs()
    return [f"The grid measured twice in one session (same protocol, `train_steps.csv` and `train_steps_repeat.csv`, "
            f"{len(m)} runs): step time differs by {_abs_pct(ds.median())} at the median and {_abs_pct(ds.max())} at "
            f"most; peak memory by {_abs_pct(dm.max())} at most.", ""]


def _calibration_drift() -> str:
    """Median time ratio, second calibration / first, per measured kind (same shapes, same order)."""
    import pandas as pd

    a, b = (pd.read_csv(DATA / f) for f in ("calib_points.csv", "calib_points2.csv"))
    out = []
    for kind in ("gemm", "attention", "memory"):
        x, y = (d[d["measurement"] == kind].reset_index(drop=True) for d in (a, b))
        out.append(f"{kind} {_pct((y['time_s'] / x['time_s']).median() - 1)}")
    return "median time per shape " + ", ".join(out)


def _head_dim_gap() -> str:
    """Median over sequence lengths of the efficiency at head dim 64 relative to 128, per pass, both runs."""
    import pandas as pd

    out = []
    for f in ("calib_points.csv", "calib_points2.csv"):
        a = pd.read_csv(DATA / f)
        t = a[a["measurement"] == "attention"].pivot_table(index="seq", columns=["pass", "head_dim"], values="flops_per_s")
        out.append(", ".join(f"{p} {_pct((t[(p, 64.0)] / t[(p, 128.0)]).median() - 1)}" for p in ("fwd", "bwd")))
    return " and ".join(out)


def _first_shapes() -> str:
    import pandas as pd

    a, b = (pd.read_csv(DATA / f) for f in ("calib_points.csv", "calib_points2.csv"))
    x, y = (d[d["measurement"] == "gemm"].reset_index(drop=True).head(10) for d in (a, b))
    r = 1 - y["time_s"] / x["time_s"]
    return f"{100 * r.min():.0f} % to {100 * r.max():.0f} %"


def _grad_mode_cost() -> str:
    """Forward + backward of the foreach grid with kept gradients over the same runs with gradients set to None
    (two grids, measured on different leases), measured and as the shipped preset predicts it (autograd's adds
    into the kept gradients: cost/gradients.py grad_accumulation_s; the harness runs one micro-batch)."""
    import pandas as pd

    from compare_train_steps import compare
    from simulator.spec.hardware import load_hardware

    a, b = (pd.read_csv(DATA / f) for f in ("foreach_persistent_gpu.csv", "train_steps.csv"))
    m = a.merge(b, on="run_id", suffixes=("_p", "_n"))
    r = (m["fwd_time_s_p"] + m["bwd_time_s_p"]) / (m["fwd_time_s_n"] + m["bwd_time_s_n"]) - 1
    hw = load_hardware("dgx-h100")
    pa, pb = (compare(x, hw).set_index("run_id")["predicted_fwd_bwd_s"] for x in (a, b))
    p = (pa / pb - 1).reindex(m["run_id"]).to_numpy()
    return (f"median {_pct(r.median())}, range {_pct(r.min())} to {_pct(r.max())} over {len(m)} runs; the shipped "
            f"preset predicts median {_pct(pd.Series(p).median())}, range {_pct(p.min())} to {_pct(p.max())} "
            f"(correlation {pd.Series(p).corr(r.reset_index(drop=True)):.2f})")


def _fit_table(log: str) -> list[str]:
    text = (DATA / log).read_text().splitlines()
    start = next(i for i, t in enumerate(text) if t.strip().startswith("table"))
    return [t.rstrip() for t in text[start:] if t.strip() and not t.startswith(("wrote", "note"))]


def loss_memory(grid: str) -> list[str]:
    """Measured peak less (states + saved-for-backward) per logit element, for the runs whose logits
    dominate, in the grid file `grid`: the loss's backward working set, which the memory model does not hold
    (Findings)."""
    import pandas as pd

    df = pd.read_csv(DATA / grid)
    big = df[df["seq_len"] * df["micro_batch"] * df["vocab"] >= 2.5e8]
    v = (big["peak_mem_bytes"] - big["state_bytes"] - big["saved_bytes"]) / (big["seq_len"] * big["micro_batch"] * big["vocab"])
    return [f"{_num(v.min())} to {_num(v.max())} bytes per logit element (median {_num(v.median())}) over the "
            f"{len(big)} grid runs with at least 2.5·10⁸ logit elements (T·V)"]


def _num(v) -> str:
    return f"{v:.1f}"
