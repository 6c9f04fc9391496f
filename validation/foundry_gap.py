"""Where llm-foundry's unmodelled time lies: measured − predicted step time per micro-batch and layer, the same
model, sequence and micro-batch on A100 (LLMFOUNDRY) and H100 (LLMFOUNDRY_H100) nodes.

    python validation/foundry_gap.py [--seq 2048]

A gap that is a kernel-efficiency error would scale with each GPU's kernel speed (the H100 runs its GEMMs
~3x faster); a gap of the same seconds on both GPUs is time outside the kernels the model holds (the
framework's host work, synchronisation, idle GPU). Rows are predicted exactly as `parasim validate` does.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RUNS = (ROOT / "validation" / "published_runs.csv", ROOT / "validation" / "llmfoundry_h100.csv")


def gaps(seq: int = 2048):
    """DataFrame, one row per llm-foundry run at `seq` tokens: GPU, model, layers, micro-batch, micro-batches per
    step, recompute, measured and predicted step, and the gap per micro-batch and layer in ms."""
    import pandas as pd

    from simulator.validate import predict_runs, read_runs

    rows = []
    for path in RUNS:
        df = read_runs(path)
        res, _ = predict_runs(df[df["source_id"].str.startswith("LLMFOUNDRY")], keep_estimates=True)
        for r in res.itertuples():
            e = r.estimate
            if e.training.seq_length != seq:
                continue
            mbs = e.layout.micro_batch_size
            n_mb = e.training.global_batch_size / (mbs * e.layout.num_gpus)
            rows.append(dict(gpu=r.hardware, model=e.model.name, layers=e.model.num_layers, mbs=mbs, gpus=e.layout.num_gpus,
                             micro_batches=n_mb, recompute=e.layout.recompute, measured_s=r.measured_step_s,
                             predicted_s=r.predicted_step_s, error=r.step_error,
                             gap_ms_per_mb_layer=(r.measured_step_s - r.predicted_step_s) / n_mb / e.model.num_layers * 1e3))
    return pd.DataFrame(rows)


def summary(seq: int = 2048) -> str:
    """Per (model, recompute, GPU family): median gap per micro-batch and layer, median error."""
    d = gaps(seq)
    d["family"] = d["gpu"].str.replace(r"-(40|80)g$", "", regex=True)
    g = d.groupby(["model", "recompute", "family"]).agg(runs=("error", "size"), gap=("gap_ms_per_mb_layer", "median"),
                                                       error=("error", "median")).reset_index()
    lines = ["| model | recompute | GPU | runs | median gap, ms per micro-batch and layer | median step error |",
             "|---|---|---|---|---|---|"]
    for r in g.itertuples():
        lines.append(f"| {r.model} | {r.recompute} | {r.family} | {r.runs} | {r.gap:.1f} | {100 * r.error:+.1f} % |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=2048)
    args = ap.parse_args(argv)
    print(summary(args.seq))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
