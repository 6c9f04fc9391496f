"""How much of a Zero Bubble step its own profiled stage times leave out.

    python validation/zb_profile_gap.py

Qi et al. 2024 (ZB24) give profiled per-micro-batch stage times (Table 9: TF, TB, TW on A100, one micro-batch
size per model) and, for each run of Tables 4 and 6, a bubble rate computed from those profiles (Table 5:
(cost − m·(TF + TB + TW)) / cost). The step those give, m·(TF + TB + TW) / (1 − bubble rate), against the
measured step (the row's samples per second) says how much of the measured step lies outside the profiled
per-micro-batch work: the optimizer step, waits for point-to-point transfers, host time. parasim is not
involved: this bounds what a per-micro-batch compute model can explain on these rows. Only the rows run at
Table 9's micro-batch size are compared.
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "validation" / "published_runs.csv"
# Table 9: (micro-batch, TF + TB + TW in ms), middle stage
TABLE_9 = {"1.5B": (6, 18.522 + 18.086 + 9.337), "6.2B": (3, 29.718 + 29.444 + 19.927),
           "14.6B": (1, 11.347 + 11.248 + 8.132), "28.3B": (1, 10.419 + 10.207 + 7.715)}


def gaps():
    """DataFrame, one row per ZB24 run at Table 9's micro-batch size with a published bubble rate: the step from
    the profiled times and the bubble rate, the measured step, and their relative difference."""
    import pandas as pd

    d = pd.read_csv(RUNS)
    d = d[d.source_id == "ZB24"].copy()
    d["model_key"] = d.model.str.extract(r"([\d.]+B)", expand=False)
    d = d[d.model_key.isin(TABLE_9) & d.bubble_fraction.notna()]
    d = d[d.micro_batch == d.model_key.map(lambda k: TABLE_9[k][0])]
    m = d.global_batch_seqs / d.micro_batch / d.dp
    d["profiled_step_s"] = m * d.model_key.map(lambda k: TABLE_9[k][1]) / 1e3 / (1.0 - d.bubble_fraction)
    d["measured_step_s"] = d.derived_step_time_s
    d["difference"] = d.profiled_step_s / d.measured_step_s - 1.0
    return d[["run_id", "model_key", "profiled_step_s", "measured_step_s", "difference"]]


def summary() -> str:
    """Markdown: per model, the median difference and the rows; then all rows."""
    d = gaps()
    g = d.groupby("model_key").difference.agg(["median", "min", "max", "size"])
    lines = ["| model | runs | profiled step / measured step − 1: median (range) |", "|---|---|---|"]
    for k in TABLE_9:
        r = g.loc[k]
        lines.append(f"| {k} | {int(r['size'])} | {r['median']:+.1%} ({r['min']:+.1%} to {r['max']:+.1%}) |")
    lines.append(f"| all | {len(d)} | {d.difference.median():+.1%} ({d.difference.min():+.1%} to "
                 f"{d.difference.max():+.1%}) |")
    return "\n".join(lines).replace("%", " %")


if __name__ == "__main__":
    print(summary())
