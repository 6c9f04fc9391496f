"""Replay the Zero Bubble paper's profiled stage times and compare with its reported bubble rates and
throughput (Qi et al. 2024, ICLR, Tables 4-5 and 9; rows `source_id == ZB24` of published_runs.csv).

Each row's notes give the profiled per-microbatch times of one stage, TF, TB, TW and Tcomm (ms); the
first and last stages hold one fewer transformer layer (for the embedding and the LM head), so every
stage is modelled with the same times. Mapping: "1F1B (Megatron)" -> 1f1b (B = TB + TW),
"ZB-1p" -> zb-h1, "ZB-2p" -> zb-h2, interleaved 1F1B with one layer per chunk -> interleaved with
v = (layers + 2) / p chunks of TF/v, TB/v, TW/v and Tcomm per chunk boundary. The paper's ZB-1p/2p are
found by a heuristic given the measured times, so the handcrafted ZB-H1/H2 may differ: reported, not
tuned. Bubble rate (paper): (cost - m (TF+TB+TW)) / cost, the same as our bubble_fraction here.
Throughput: samples per GPU per second = m b / (makespan p), measured = tokens/s/GPU / seq_len.

Run ``python -m simulator.pipeline.zb_validation PUBLISHED_RUNS_CSV`` to print the markdown table.
"""
from __future__ import annotations

import csv
import math
import re
import sys

from ..schedules import build
from .replay import replay

_TIMES = re.compile(r"TF=(\d+(?:\.\d+)?) TB=(\d+(?:\.\d+)?) TW=(\d+(?:\.\d+)?) Tcomm=(\d+(?:\.\d+)?)")


def _schedule_of(row) -> str | None:
    s = row["pipeline_schedule"]
    if s.startswith("1F1B"):
        return "1f1b"
    if s.startswith("interleaved"):
        return "interleaved"
    if "activation limit p*M_B" in s:
        return "zb-h1"
    if "activation limit 2p*M_B" in s:
        return "zb-h2"
    return None


def zb_rows(path):
    """Rows of published_runs.csv with profiled times, as dicts ready for `compare_row`."""
    out = []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            if row["source_id"] != "ZB24":
                continue
            m = _TIMES.search(row["notes"])
            name = _schedule_of(row)
            if not m or not name:
                continue
            tf, tb, tw, tc = (float(x) * 1e-3 for x in m.groups())  # ms -> s
            out.append(dict(run_id=row["run_id"], schedule=name, pp=int(row["pp"]),
                            layers=int(float(row["layers"])), micro_batch=float(row["micro_batch"]),
                            microbatches=int(round(float(row["global_batch_seqs"]) / float(row["micro_batch"]))),
                            seq_len=float(row["seq_len"]), tf_s=tf, tb_s=tb, tw_s=tw, tcomm_s=tc,
                            bubble_measured=float(row["bubble_fraction"]) if row["bubble_fraction"] else math.nan,
                            samples_per_gpu_s_measured=float(row["tokens_per_s_per_gpu"]) / float(row["seq_len"])))
    return out


def compare_row(r) -> dict:
    """Replay one row; predicted bubble and samples/GPU/s beside the paper's."""
    p, m = r["pp"], r["microbatches"]
    v = 1
    if r["schedule"] == "interleaved":
        v = (r["layers"] + 2) // p
    sch = build(r["schedule"], pp=p, microbatches=m, vpp=v if v > 1 else 1) if r["schedule"] != "interleaved" \
        else build("interleaved", pp=p, microbatches=m, vpp=v)
    t = replay(sch, forward_s=r["tf_s"] / v, backward_s=r["tb_s"] / v, weight_s=r["tw_s"] / v, p2p_s=r["tcomm_s"])
    thr = m * r["micro_batch"] / (t.makespan_s * p)
    return dict(run_id=r["run_id"], schedule=r["schedule"], pp=p, vpp=v, microbatches=m,
                bubble_predicted=t.bubble_fraction, bubble_measured=r["bubble_measured"],
                samples_per_gpu_s_predicted=thr, samples_per_gpu_s_measured=r["samples_per_gpu_s_measured"],
                throughput_ratio=thr / r["samples_per_gpu_s_measured"])


def markdown_table(path) -> str:
    rows = [compare_row(r) for r in zb_rows(path)]
    lines = ["| run | schedule (ours) | p | v | m | bubble paper | bubble replay | samples/GPU/s measured | "
             "samples/GPU/s replay | replay / measured |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in rows:
        lines.append(f"| {c['run_id']} | {c['schedule']} | {c['pp']} | {c['vpp']} | {c['microbatches']} | "
                     f"{c['bubble_measured']:.4f} | {c['bubble_predicted']:.4f} | "
                     f"{c['samples_per_gpu_s_measured']:.3f} | {c['samples_per_gpu_s_predicted']:.3f} | "
                     f"{c['throughput_ratio']:.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - table generator for docs/pipeline.md
    sys.stdout.write(markdown_table(sys.argv[1]) + "\n")
