"""Predicted vs published peak memory per GPU (every row of published_runs.csv with `mem_gb_per_gpu`).

    python validation/memory_published.py [published_runs.csv] [--markdown]

Rows are mapped with `simulator.validate.map_run` (the one mapping, with its per-source assumptions:
Zero Bubble / ZB24 and BLOOM_PREQUEL are the sources with memory figures) and predicted with
`simulator.estimate.estimate`, so these numbers are the ones `parasim validate` and docs/accuracy.md
report. The compared stage follows the row's `mem_basis` (`simulator.validate.predicted_memory`: the
first/last stage for BLOOM's nvidia-smi readings on the embedding-holding GPUs, else the worst stage), and
so does the counter (`memory_counter`: nvidia-smi and a basis naming none -> the device total;
max_memory_reserved -> without the CUDA context and NCCL; max_memory_allocated -> live tensors).
Nothing is fitted to these rows; overheads are the memory model's defaults (the CUDA context the
source's stack override gives). Measured values are read as GiB (torch and nvidia-smi report MiB/GiB;
the sources write "GB").
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.units import GiB  # noqa: E402
from simulator.validate import memory_counter, predict_runs, read_runs  # noqa: E402

DEFAULT_CSV = ROOT / "validation" / "published_runs.csv"
FALLBACK_CSV = ROOT.parent / "shared" / "data" / "published_runs.csv"
PARTS = ("params", "grads", "optimizer", "activations", "other", "framework")


def predictions(csv_path: str | Path | None = None) -> pd.DataFrame:
    """One row per published run with a memory figure: predicted vs measured, the compared stage's
    breakdown and the relative error (predicted / measured − 1)."""
    path = Path(csv_path) if csv_path else (DEFAULT_CSV if DEFAULT_CSV.is_file() else FALLBACK_CSV)
    df = read_runs(path)
    df = df[df["mem_gb_per_gpu"].notna()]
    res, _ = predict_runs(df, keep_estimates=True)
    rows = []
    for r in res.itertuples():
        est = r.estimate
        lay = est.layout
        st = next(s for s in est.memory.per_stage if s.stage == r.predicted_mem_stage)
        rows.append({"run_id": r.run_id, "source": r.source_id, "layout": r.label, "schedule": lay.schedule,
                     "mbs": lay.micro_batch_size, "m": lay.num_microbatches(est.training.global_batch_size),
                     "measured_gib": r.measured_mem_bytes / GiB, "predicted_gib": r.predicted_mem_bytes / GiB,
                     "stage": int(r.predicted_mem_stage), "counter": memory_counter(r.mem_basis),
                     **{f"{k}_gib": getattr(st, f"{k}_bytes") / GiB for k in PARTS},
                     "error": r.mem_error})
    return pd.DataFrame(rows)


def summary(out: pd.DataFrame) -> pd.DataFrame:
    """Per source (and per ZB schedule): rows, median and max |error|, mean signed error."""
    out = out.assign(group=np.where(out.source == "ZB24", "ZB24 " + out.schedule, out.source))
    g = out.groupby("group").error
    return pd.DataFrame({"rows": g.size(), "median_abs_error": g.apply(lambda e: e.abs().median()),
                         "max_abs_error": g.apply(lambda e: e.abs().max()), "mean_error": g.mean()})


def markdown(out: pd.DataFrame) -> str:
    """Summary per group, then one row per run (markdown)."""
    lines = ["| group | rows | median abs error | max abs error | mean signed error |", "|---|---:|---:|---:|---:|"]
    for name, r in summary(out).iterrows():
        lines.append(f"| {name} | {int(r.rows)} | {100 * r.median_abs_error:.0f} % | {100 * r.max_abs_error:.0f} % | "
                     f"{100 * r.mean_error:+.0f} % |")
    lines += ["", "| run | layout | schedule | mbs | m | counter | measured GiB | predicted GiB | error | compared "
              "stage: weights+grads+optim / activations / other (of which framework) GiB |",
              "|---|---|---|---:|---:|---|---:|---:|---:|---|"]
    for r in out.itertuples():
        states = r.params_gib + r.grads_gib + r.optimizer_gib
        lines.append(f"| {r.run_id} | {r.layout} | {r.schedule} | {r.mbs} | {r.m} | {r.counter} | "
                     f"{r.measured_gib:.0f} | {r.predicted_gib:.1f} | {100 * r.error:+.0f} % | {r.stage}: "
                     f"{states:.1f} / {r.activations_gib:.1f} / {r.other_gib:.1f} ({r.framework_gib:.1f}) |")
    return "\n".join(lines)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    res = predictions(args[0] if args else None)
    if "--markdown" in sys.argv:
        print(markdown(res))
    else:
        with pd.option_context("display.width", 200, "display.max_rows", 500):
            print(res[["run_id", "layout", "schedule", "mbs", "m", "measured_gib", "predicted_gib", "error"]]
                  .to_string(index=False, float_format=lambda x: f"{x:.3g}"))
            print()
            print(summary(res).to_string(float_format=lambda x: f"{x:.3f}"))
