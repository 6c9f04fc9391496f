"""What attention dropout costs inside a fused attention kernel: the factors of cost/attention.py DROPOUT_FACTORS.

    python validation/attention_dropout.py              # measured ratios, the fit, held-out errors, published runs
    python validation/attention_dropout.py --no-runs    # without the published runs

Input: validation/h200/attention_dropout.csv, measured by validation/gpu_attention_dropout.py on a lent H200 SXM
(torch 2.11.0+cu130, cuDNN 9.19): torch's scaled_dot_product_attention on its flash, efficient and cudnn backends,
causal, bf16, head dim 128, four shapes (batch x heads x tokens), dropout_p 0 and 0.1; each time the per-call time
of 10 calls queued between CUDA events, forward and forward + backward.

Per backend, shape and pass the ratio is time at dropout 0.1 / time at dropout 0, the backward's time being
(forward + backward call) - forward call. The kernel draws one Philox number per score element it computes, so
the dropout's work scales as the kernel's: one multiplicative factor per backend and pass, the geometric mean of
the ratios at FIT_SHAPES; the other shapes are held out and their error (measured / fitted - 1) is printed.
Printed too: each ratio's spread over all four shapes, and the added time per score element (which falls with the
kernel's rate, where the ratio stays flat: why a factor and not a time per element).

The published runs: every row of validation/make_accuracy.py's files predicted with the factors and with them set
to 1 (cost/compute.py reads attention.in_kernel_dropout_factor), the median |step error| per source whose
predictions change.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation"))
CSV = ROOT / "validation" / "h200" / "attention_dropout.csv"

FIT_SHAPES = ((4, 24, 2048), (1, 32, 8192))  # (batch, heads, tokens): the fit; the other two are held out
BACKENDS = ("flash", "efficient", "cudnn")
PASSES = ("fwd", "bwd")


def ratios(path=CSV):
    """One row per (backend, batch, heads, seq): the dropout-0 times (µs) and the ratios p=0.1 / p=0 of the forward,
    the backward ((fwd+bwd) - fwd) and the whole call (fwd+bwd), the score elements b·h·s²/2 (causal)."""
    import pandas as pd

    d = pd.read_csv(path)
    assert (d["status"] == "ok").all(), d[d["status"] != "ok"]
    d["bwd_s"] = d["fwd_bwd_s"] - d["fwd_s"]
    key = ["backend", "batch", "heads", "seq"]
    z, p = (d[d["dropout_p"] == q].set_index(key) for q in (0.0, 0.1))
    out = pd.DataFrame({"fwd0_us": z["fwd_s"] * 1e6, "bwd0_us": z["bwd_s"] * 1e6,
                        "fwd": p["fwd_s"] / z["fwd_s"], "bwd": p["bwd_s"] / z["bwd_s"],
                        "fwd_bwd": p["fwd_bwd_s"] / z["fwd_bwd_s"]})
    out["elements"] = [b * h * s * s / 2 for _, b, h, s in out.index]
    out["dfwd_ps_per_el"] = (p["fwd_s"] - z["fwd_s"]) / out["elements"] * 1e12
    out["dbwd_ps_per_el"] = (p["bwd_s"] - z["bwd_s"]) / out["elements"] * 1e12
    return out.reset_index()


def _is_fit(r) -> bool:
    return (int(r["batch"]), int(r["heads"]), int(r["seq"])) in FIT_SHAPES


def fit(r) -> dict[str, tuple[float, float]]:
    """{backend: (forward, backward) factor}: the geometric mean of the ratios at FIT_SHAPES."""
    f = r[r.apply(_is_fit, axis=1)]
    return {be: tuple(math.exp(sum(math.log(x) for x in f[f["backend"] == be][ps])
                               / len(f[f["backend"] == be])) for ps in PASSES) for be in BACKENDS}


def held_out(r, factors):
    """The held-out shapes' error per backend and pass: measured ratio / fitted factor - 1."""
    h = r[~r.apply(_is_fit, axis=1)].copy()
    for i, ps in enumerate(PASSES):
        h[f"{ps}_err"] = h[ps] / h["backend"].map(lambda be: factors[be][i]) - 1.0
    return h[["backend", "batch", "heads", "seq", "fwd", "bwd", "fwd_err", "bwd_err"]]


def spread(r):
    """Per backend and pass: min and max ratio over all four shapes."""
    return r.groupby("backend")[list(PASSES)].agg(["min", "max"])


def run_effect():
    """Per source whose step predictions move: (rows changed, median |step error| with the factors set to 1, with
    them), over every row of make_accuracy.RUNS."""
    from unittest import mock

    import pandas as pd

    from make_accuracy import RUNS
    from simulator.validate import predict_runs, read_runs

    df = pd.concat([read_runs(p) for p in RUNS], ignore_index=True)
    after, _ = predict_runs(df)
    with mock.patch("simulator.cost.compute.in_kernel_dropout_factor", lambda kernel, dropout: (1.0, 1.0)):
        before, _ = predict_runs(df)
    m = before[["run_id", "source_id", "step_error", "predicted_step_s"]].merge(
        after[["run_id", "step_error", "predicted_step_s"]], on="run_id", suffixes=("_before", "_after"))
    m["moved"] = (m["predicted_step_s_after"] / m["predicted_step_s_before"] - 1.0).abs() > 1e-9
    rows = []
    for src, g in m.groupby("source_id"):
        if g["moved"].any():
            rows.append({"source": src, "rows": len(g), "rows changed": int(g["moved"].sum()),
                         "step change (median)": (g["predicted_step_s_after"] / g["predicted_step_s_before"]
                                                  - 1.0).median(),
                         "median |err| before": g["step_error_before"].abs().median(),
                         "median |err| after": g["step_error_after"].abs().median(),
                         "mean err before": g["step_error_before"].mean(),
                         "mean err after": g["step_error_after"].mean()})
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-runs", action="store_true", help="leave out the published runs' before/after")
    a = ap.parse_args(argv)
    import pandas as pd

    from simulator.cost.attention import DROPOUT_FACTORS

    pd.set_option("display.width", 160)
    r = ratios()
    print(f"{CSV.relative_to(ROOT)}: time at dropout_p 0.1 / time at 0 (bwd = (fwd+bwd) - fwd)")
    print(r.round(3).to_string(index=False))
    f = fit(r)
    print(f"\nfit (geometric mean over {FIT_SHAPES}) and cost/attention.py DROPOUT_FACTORS:")
    shipped = {be: (k, fw, bw) for k, (be, fw, bw) in DROPOUT_FACTORS.items()}
    for be, (fw, bw) in f.items():
        k = shipped.get(be, ("-",))[0]
        print(f"  {be:9s} -> {k:9s} forward {fw:.3f}  backward {bw:.3f}   shipped {shipped.get(be, '-')}")
    print("\nheld out (measured / fitted - 1):")
    print(held_out(r, f).round(3).to_string(index=False))
    print("\nspread over all four shapes:")
    print(spread(r).round(3).to_string())
    if not a.no_runs:
        print("\npublished runs whose step predictions move (make_accuracy.RUNS):")
        print(run_effect().round(4).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
