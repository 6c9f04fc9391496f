"""Weak scaling: does the predicted step time grow with the GPU count as the measured one does?

    python validation/weak_scaling.py            # rewrite docs/weak-scaling.md
    python validation/weak_scaling.py --check    # exit 1 if the doc is not what it would write

The llm-foundry benchmark tables (validation/published_runs.csv, source LLMFOUNDRY: MosaicML's MPT
throughput tables, FSDP on A100 nodes; validation/llmfoundry_h100.csv, source LLMFOUNDRY_H100: the same on
H100 nodes, 8-64 GPUs and a 128-512 GPU sweep) measure the same model, sequence length and micro-batch per
GPU on several GPU counts with the global batch growing with the GPU count (a series never mixes tables:
they ran different software). With a fixed batch per GPU, compute
per GPU is constant, so the growth of the step time with the GPU count is what the communication (FSDP
per-unit gathers and reduce-scatters, their latency across nodes) costs. For each such series the table
gives measured and predicted step(N) / step(N_min) and their difference; the absolute errors are in
docs/accuracy.md. Rows are mapped and predicted exactly as `parasim validate` does.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RUNS = (ROOT / "validation" / "published_runs.csv", ROOT / "validation" / "llmfoundry_h100.csv")
SOURCES = ("LLMFOUNDRY", "LLMFOUNDRY_H100")
DOC = ROOT / "docs" / "weak-scaling.md"
KEYS = ["model", "seq_len", "micro_batch", "gpu_type", "source_locator"]


def series(speed_cv: float | None = None):
    """(model, seq, micro-batch, GPU) -> DataFrame of its runs on >= 2 GPU counts with a fixed batch per GPU:
    n_gpus, measured and predicted step and their growth over the smallest GPU count; `speed_cv`: predicted
    with that per-GPU speed spread instead of the profiles' (0) (cost/variability.py)."""
    import pandas as pd

    from simulator.estimate import estimate
    from simulator.options import EstimateOptions
    from simulator.validate import predict_runs, read_runs

    runs = pd.concat([read_runs(p) for p in RUNS], ignore_index=True)
    runs = runs[runs["source_id"].isin(SOURCES)].copy()
    runs["per_gpu_batch"] = pd.to_numeric(runs["global_batch_seqs"]) / pd.to_numeric(runs["n_gpus"])
    opt = None if speed_cv is None else EstimateOptions(gpu_speed_cv=speed_cv)
    res, _ = predict_runs(runs, estimate_fn=lambda m, t, lay, hw: estimate(m, t, lay, hw, options=opt))
    res = res.merge(runs[["run_id", "n_gpus", "per_gpu_batch", *KEYS]].astype({"run_id": str}),
                    left_on=res["run_id"].astype(str), right_on="run_id", suffixes=("", "_csv"))
    out = {}
    for key, g in res.groupby([*KEYS, "per_gpu_batch"]):
        g = g[g["feasible"]].drop_duplicates("n_gpus").sort_values("n_gpus")
        if len(g) < 2:
            continue
        base = g.iloc[0]
        g = g.assign(measured_growth=g["measured_step_s"] / base["measured_step_s"],
                     predicted_growth=g["predicted_step_s"] / base["predicted_step_s"])
        out[key] = g[["n_gpus", "measured_step_s", "predicted_step_s", "measured_growth", "predicted_growth"]]
    return out


def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normal draws] (simulator/cost/variability.py, the one place of the rule)."""
    from simulator.cost.variability import expected_max_standard_normal

    return float(expected_max_standard_normal(n))


def lease_gemm_ratios(later: str = "one_call_s") -> dict[str, float]:
    """Median one-call time of the calibration's bf16 GEMM shapes above 1e12 FLOPs on each H100 lease over the
    first lease's, same shapes, each call timed alone after 5 warm-up (median of 20), but not in the same state of
    the GPU: `parasim calibrate` (the first two leases, validation/h100/calib_points*.csv) draws each shape's
    operands on the CPU, seconds for the large ones, so the GPU idles before every shape and its calls run at
    burst clocks (simulator/calibrate/microbench.py `bench_gemm`); validation/gpu_gemm_queued.py (the third and
    fourth, validation/h100_owed*/gemm_queued.csv) draws them on the GPU and runs its 448 shapes back to back, so
    the GPU sits at its power limit. Only the second lease's ratio compares two GPUs alone. `later`: the later
    leases' column, one_call_s or queued_s (20 calls back to back between two CUDA events)."""
    import pandas as pd

    first = pd.read_csv(ROOT / "validation/h100/calib_points.csv")
    first = first[(first["measurement"] == "gemm") & (first["flops"] > 1e12)][["m", "n", "k", "time_s"]]
    second = pd.read_csv(ROOT / "validation/h100/calib_points2.csv")
    second = second[second["measurement"] == "gemm"][["m", "n", "k", "time_s"]].rename(columns={"time_s": "t"})
    out = {"second lease (2026-11-22, calibrate)": second}
    for name, folder in (("third lease (2026-11-27, gpu_gemm_queued)", "h100_owed"),
                         ("fourth lease (2026-11-27, gpu_gemm_queued)", "h100_owed2")):
        q = pd.read_csv(ROOT / "validation" / folder / "gemm_queued.csv")
        out[name] = q[q["dtype"] == "bf16"][["m", "n", "k", later]].rename(columns={later: "t"})
    return {name: float((first.merge(other, on=["m", "n", "k"]).pipe(lambda m: m["t"] / m["time_s"])).median())
            for name, other in out.items()}


def spread_by_gpu() -> list[tuple[str, float, float]]:
    """(UUID prefix, one-call TFLOP/s, median TFLOP/s loaded) of every H100 `validation/gpu_spread.py` measured on
    a lease (validation/*/spread.csv, pooled by UUID; other GPU models, such as the lent H200, are another
    product's spread and left out)."""
    import pandas as pd

    rows = pd.concat([pd.read_csv(f) for f in sorted(ROOT.glob("validation/*/spread.csv"))], ignore_index=True)
    rows = rows[rows["name"].str.contains("H100")]
    out = []
    for uuid, g in rows.groupby("uuid", sort=True):
        out.append((str(uuid)[:8], float(g[g.phase == "one_call"].tflops.median()),
                    float(g[g.phase == "all_loaded"].tflops.median())))
    return out


def _spread_text(gpus) -> str:
    """How far apart the GPUs measured by gpu_spread.py ran: the largest over the smallest, one call and loaded."""
    if len(gpus) < 2:
        return "one GPU so far"
    one, loaded = [g[1] for g in gpus], [g[2] for g in gpus]
    return (f"{len(gpus)} GPUs within {100 * (max(one) / min(one) - 1):.1f} % one call and "
            f"{100 * (max(loaded) / min(loaded) - 1):.1f} % loaded")


def slowest_gpu_lines(errs_by_n: dict[int, list[float]], base: dict) -> list[str]:
    """The section on the slowest of n GPUs: its size by σ and n, what is measured of σ, and the series
    predicted with it (a sensitivity)."""
    import numpy as np

    ratios = lease_gemm_ratios()
    sigmas = (0.01, 0.02, 0.04)
    ns = (8, 16, 128, 512)
    lines = ["", "## The slowest of n GPUs (off by default)", "",
             "Every synchronous step (data, tensor or pipeline parallel) waits for its slowest GPU. If each GPU's",
             "speed is a draw with relative standard deviation σ around the calibrated one, a job on n GPUs runs",
             "σ·E[max of n standard normals] slower than the median GPU (simulator/cost/variability.py), so its",
             "step grows with n even where the communication is hidden:", "",
             "| σ | " + " | ".join(f"n = {n}" for n in ns) + " | growth 16 -> 128 | growth 128 -> 512 |",
             "|---|" + "---|" * (len(ns) + 2)]
    e = {n: expected_max_normal(n) for n in ns}
    for s in sigmas:
        lines.append(f"| {100 * s:.0f} % | " + " | ".join(f"+{100 * s * e[n]:.1f} %" for n in ns)
                     + f" | {(1 + s * e[128]) / (1 + s * e[16]):.3f} | {(1 + s * e[512]) / (1 + s * e[128]):.3f} |")
    lease = "; ".join(f"{k}: {v:.3f}" for k, v in ratios.items())
    lines += ["", "What is measured of σ: the lent H100 SXM GPUs ran the calibration's bf16 GEMMs above 1e12 FLOPs,",
              "each timed alone, in these times relative to the first lease (median over shapes): "
              f"{lease}. The third and fourth are not a spread of GPUs: their script ran the shapes back to back "
              "with the GPU at its 700 W limit, the calibration's let it idle seconds before each shape "
              "(`lease_gemm_ratios`), and the same GEMM back to back runs 8-13 % slower than after an idle "
              "(docs/compute.md, limitations). The comparisons made in one state are the second lease's and the "
              f"GPUs below ({_spread_text(spread_by_gpu())}).",
              "Pairs of GPUs do not make a distribution, and no cluster-wide spread of A100 or H100 bf16 GEMM speed is",
              "published that parasim could cite (Sinha et al., SC22, arXiv 2208.11035: 8 % average performance",
              "variation, outliers up to 1.5x slower than the median GPU, on V100- and MI60-based HPC clusters), so",
              "every shipped profile has σ = 0 and the table above is predicted without it. A user who knows the",
              "spread of a cluster sets it (`[gpu] speed_cv` in a profile, `--gpu-speed-cv` on estimate, sweep, plan);",
              "`validation/gpu_spread.py` measures it: the same GEMM on every GPU of a machine at once, each row",
              "with the GPU's UUID, so that rows from many leases pool into one distribution. So far, by GPU "
              "(UUID prefix: one call / all loaded at the 700 W limit, TFLOP/s): "
              + "; ".join(f"{u}: {a:.0f} / {b:.0f}" for u, a, b in spread_by_gpu()) + "."]
    if errs_by_n:
        lines += ["", "Measured minus predicted growth in the table above, median over the series, by GPU count: "
                  + ", ".join(f"{n} GPUs {100 * sorted(v)[len(v) // 2]:+.1f} %" for n, v in sorted(errs_by_n.items()))
                  + " (one series per model, sequence, micro-batch and GPU type)."]
    lines += ["", "The same series predicted with a spread set for every GPU, a sensitivity (nothing here was fitted,",
              "and no shipped profile uses it): the growth error of the points beyond each series' first,", "",
              "| σ | median abs growth error | max abs | mean signed (predicted − measured growth) |",
              "|---|---|---|---|"]
    for s in (0.0,) + sigmas:  # (σ = 0: the table above)
        e = [r.predicted_growth / r.measured_growth - 1 for g in (series(s) if s else base).values()
             for r in g.iloc[1:].itertuples()]
        lines.append(f"| {100 * s:.0f} % | {100 * float(np.median(np.abs(e))):.1f} % | "
                     f"{100 * float(np.max(np.abs(e))):.1f} % | {100 * float(np.mean(e)):+.1f} % |")
    return lines


def generate() -> str:
    lines = ["# Weak scaling against the llm-foundry FSDP runs", "",
             "Generated by `python validation/weak_scaling.py` (module docstring: what and why). Growth = step",
             "time at N GPUs / step time at the series' smallest GPU count, at a fixed batch per GPU; a",
             "simulator whose step stays flat while the measured one grows misses the cost of scale.", "",
             "| model | seq | micro-batch | GPU | batch/GPU | GPUs | measured step s | predicted step s "
             "| measured growth | predicted growth | growth error |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    errs, by_n, base = [], {}, series()
    for (model, seq, mb, gpu, _table, per), g in base.items():
        for r in g.itertuples():
            e = r.predicted_growth / r.measured_growth - 1
            if r.n_gpus != g["n_gpus"].iloc[0]:
                errs.append(abs(e))
                by_n.setdefault(int(r.n_gpus), []).append(r.measured_growth - r.predicted_growth)
            lines.append(f"| {model} | {seq} | {mb:g} | {gpu} | {per:g} | {r.n_gpus} | {r.measured_step_s:.3f} "
                         f"| {r.predicted_step_s:.3f} | {r.measured_growth:.3f} | {r.predicted_growth:.3f} "
                         f"| {100 * e:+.1f} % |")
    if errs:
        errs.sort()
        med = errs[len(errs) // 2] if len(errs) % 2 else (errs[len(errs) // 2 - 1] + errs[len(errs) // 2]) / 2
        lines += ["", f"{len(errs)} points beyond each series' first: median |growth error| {100 * med:.1f} %, "
                      f"max {100 * errs[-1]:.1f} %."]
    lines += slowest_gpu_lines(by_n, base)
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    text = generate()
    if args.check:
        return 0 if DOC.exists() and DOC.read_text() == text else 1
    DOC.write_text(text)
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
