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
# Table 9's Tcomm, ms: one stage-boundary transfer
TCOMM_MS = {"1.5B": 0.601, "6.2B": 0.527, "14.6B": 0.377, "28.3B": 0.408}


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
    d["schedule"] = d.run_id.str.split("_").str[3]
    d["m"] = m.astype(int)
    return d[["run_id", "model_key", "schedule", "m", "layers", "pp", "profiled_step_s", "measured_step_s",
              "difference"]]


def interleaving_extra():
    """DataFrame, one row per 1F1B-I run with a 1F1B run of the same model and micro-batches: the time its measured
    step holds beyond its profiled work in excess of the 1F1B run's, (gap_I − gap_1F1B)·measured_I, spread over the
    chunk transfers interleaving adds on a rank, m·(v − 1) forward and as many backward: seconds per transfer."""
    d = gaps()
    plain = d[d.schedule == "1F1B"].set_index(["model_key", "m"]).difference
    i = d[d.schedule == "1F1B-I"].copy()
    i["excess"] = (plain.reindex(list(zip(i.model_key, i.m))).to_numpy() - i.difference) * i.measured_step_s
    i["chunks"] = ((i.layers + 2) // i.pp).astype(int)  # (first and last stages one layer fewer: one layer per chunk)
    i["transfers"] = 2 * i.m * (i.chunks - 1)
    i["s_per_transfer"] = i.excess / i.transfers
    return i[["run_id", "model_key", "pp", "chunks", "m", "excess", "transfers", "s_per_transfer"]]


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
    lines += ["", "| schedule | runs | profiled step / measured step − 1: median (range) |", "|---|---|---|"]
    for k, r in d.groupby("schedule", sort=False).difference.agg(["median", "min", "max", "size"]).iterrows():
        lines.append(f"| {k} | {int(r['size'])} | {r['median']:+.1%} ({r['min']:+.1%} to {r['max']:+.1%}) |")
    x = interleaving_extra()
    lines += ["", "| model | pp | chunks per rank | 1F1B-I runs | excess over 1F1B per added chunk transfer, ms: "
              "median (range) | Table 9's Tcomm, ms |", "|---|---|---|---|---|---|"]
    for k, g in x.groupby("model_key", sort=False):
        ms = g.s_per_transfer * 1e3
        lines.append(f"| {k} | {int(g.pp.iloc[0])} | {int(g.chunks.iloc[0])} | {len(g)} | {ms.median():.2f} "
                     f"({ms.min():.2f} to {ms.max():.2f}) | {TCOMM_MS[k]:.3f} |")
    return "\n".join(lines).replace("%", " %")


if __name__ == "__main__":
    print(summary())
