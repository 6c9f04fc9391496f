"""GEMMs in the state a training step keeps the GPU in: the sustained-to-burst factor, measured.

    python validation/sustained_gemm.py      # the tables of docs/compute.md "GEMMs at the power limit"

The Blackwell and A100 presets' GEMM tables start from published kernel timings in their burst state (OpenXLA's
tables, validation/xla_gemm.py: 5 traced runs after one warm-up; the A100's moved from the H100's kernels). A
training step runs GEMMs back to back for seconds, and a GPU held at its board-power limit lowers its clocks;
dgx-h100's tables are measured in that state (validation/h100_gemm_table.py). The burst tables of a GPU not
measured here are moved to it by a factor measured on a GPU of its generation in that state:

- **data** (`validation/data/azure_gemm.csv`): Azure's AI-benchmarking-guide, cuBLASLt GEMMs (superbench's
  `cublaslt_gemm`, random inputs, 10,000 warm-up iterations, then 1,000 timed): FP8 on ND H100 v5, ND H200 v5
  and three runs of ND GB200 v6 (two drivers), FP16 on ND A100 v4 (the harness runs FP16 on an A100, which has
  no FP8), each row naming its repository, file and commit;
- **the factor** (`MEASURED`: the GPU measured for each generation and the preset whose burst table it is read
  against) at each large shape (m, n, k >= 4096, where a GEMM keeps the tensor cores busy long enough to
  hold the power limit): the measured GPU's sustained TFLOP/s over its preset's burst table at the same FLOP
  count, the median over the runs. Read as a function of the kernel's ideal time at peak (FLOPs / dense peak,
  as xla_gemm.transfer), linear in log10 between the shapes and constant outside;
- **applied** (`xla_gemm.SUSTAINED`) to every Blackwell preset's bf16 and FP8 table with the GB200's factor
  [assumption: each sustains the same fraction of its burst rate as the GB200 measured; no sustained B200 or
  B300 measurement is published in a harness that also gives the H100's], and to every A100 preset's table with
  the A100's (measured on the A100 SXM4 80GB; the 40GB card has the same die and 400 W limit [assumption]; FP16
  measured, the bf16 table moved: the A100's FP16 and BF16 tensor peaks are equal [assumption: equal power]);
- **checked** where the state is known: the same harness on the H100 against the lent H100's own
  back-to-back table (dgx-h100 [efficiency.gemm_fp8]; `h100_check`): the two measurements of one state agree.
"""
from __future__ import annotations

import csv
import sys
from collections import defaultdict
from pathlib import Path
from statistics import median
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent
DATA = ROOT / "data" / "azure_gemm.csv"
LARGE = 4096  # m, n and k at least this: the shapes that hold the GPU at its power limit

sys.path.insert(0, str(ROOT.parent))
from simulator.calibrate.fit import efficiency_at  # noqa: E402
from simulator.cost.flops import gemm_flops as gemm_flops_mnk  # noqa: E402


class Measured(NamedTuple):
    """One generation's measurement: the preset and table of the measured GPU's burst rate, what was measured
    (for the presets' source text) and what a preset of that generation assumes in taking the factor."""
    preset: str
    kind: str
    what: str
    assumption: str


# Per generation: the GPU whose sustained runs give the factor (the azure_gemm.csv `gpu` value).
MEASURED = {
    "GB200": Measured("gb200-nvl72", "gemm_fp8",
                      "a GB200: cuBLASLt FP8 GEMMs after 10,000 warm-up iterations (Azure/AI-benchmarking-guide ND "
                      "GB200 v6, three runs; validation/data/azure_gemm.csv) over the gb200-nvl72 burst table",
                      "[assumption: this GPU sustains the GB200's fraction]"),
    "A100-SXM4": Measured("dgx-a100-80g", "gemm",
                          "an A100 SXM4 80GB: cuBLASLt FP16 GEMMs after 10,000 warm-up iterations "
                          "(Azure/AI-benchmarking-guide ND A100 v4; validation/data/azure_gemm.csv) over the "
                          "dgx-a100-80g burst table",
                          "[assumption: bf16 GEMMs sustain the FP16 fraction (equal tensor peaks); the 40GB card "
                          "the 80GB's]"),
}


def rows(gpu: str | None = None) -> list[dict]:
    """The harness's rows (all, or one GPU's), with m, n, k as int and tflops as float."""
    out = []
    with open(DATA) as f:
        for r in csv.DictReader(f):
            if gpu is None or r["gpu"] == gpu:
                out.append({**r, "m": int(r["m"]), "n": int(r["n"]), "k": int(r["k"]),
                            "tflops": float(r["tflops"])})
    return out


def gemm_flops(r: dict) -> float:
    """FLOPs of one harness call: batch × 2·m·n·k (the cost model's own GEMM count, cost/flops.gemm_flops)."""
    return int(r["batch"]) * float(gemm_flops_mnk(r["m"], r["n"], r["k"]))


def is_large(r: dict) -> bool:
    return min(r["m"], r["n"], r["k"]) >= LARGE


def run_key(r: dict) -> tuple[str, str]:
    """One published run: its repository and commit."""
    return r["repo"], r["commit"]


def factor_knots(burst_efficiency, peak_flops_per_s: float, gpu: str) -> tuple[list[float], list[float]]:
    """(ideal time at peak in s, sustained / burst) at each large shape of the measured `gpu`, the median over its
    runs. `burst_efficiency(flops)`: that GPU's burst table; `peak_flops_per_s`: its dense peak in the table's
    dtype (MEASURED)."""
    by = defaultdict(list)
    for r in rows(gpu):
        if is_large(r):
            f = gemm_flops(r)
            by[f].append(r["tflops"] * 1e12 / peak_flops_per_s / burst_efficiency(f))
    xs = sorted(by)
    return [f / peak_flops_per_s for f in xs], [round(median(by[f]), 4) for f in xs]


def factor_at(knots, ideal_s: float) -> float:
    """The factor at one kernel's ideal time: linear in log10(time) between knots, constant outside (the
    profiles' own interpolation rule, calibrate.fit.efficiency_at)."""
    return float(efficiency_at(knots[0], knots[1], [ideal_s])[0])


def apply(x, e, *, peak_flops_per_s: float, knots) -> tuple[list[float], list[float]]:
    """A burst table (knots x in FLOPs, efficiencies e) in the sustained state: e(x) · factor(x / peak), on
    the union of the table's knots and the factor's (mapped to FLOPs at this peak; the burst table holds its
    end values beyond its knots), so that the product is piecewise linear in log10 as every table is read."""
    knots_x = sorted(set(x) | {t * peak_flops_per_s for t in knots[0]})
    burst = efficiency_at(x, e, knots_x)
    return knots_x, [round(float(b) * factor_at(knots, v / peak_flops_per_s), 4) for b, v in zip(burst, knots_x)]


def h100_check() -> list[tuple[float, float, float]]:
    """(FLOPs, the harness's H100 TFLOP/s, dgx-h100's FP8 table there in TFLOP/s) at each large shape."""
    from simulator.spec.hardware import load_hardware

    h = load_hardware("dgx-h100")
    out = []
    for r in rows("H100-SXM"):
        if is_large(r):
            f = gemm_flops(r)
            out.append((f, r["tflops"], float(h.interp_efficiency("gemm_fp8", f)) * h.peak_flops("fp8") / 1e12))
    return sorted(out)


def h100_lines() -> list[str]:
    """Markdown: the harness on the H100 against the lent H100's back-to-back FP8 table."""
    out = ["The same harness on the H100 against dgx-h100's FP8 table (the lent H100, back to back at 700 W):", "",
           "| m x n x k | FLOPs | harness (ND H100 v5) TFLOP/s | dgx-h100 table TFLOP/s | table / harness |",
           "|---|---|---|---|---|"]
    for f, meas, table in h100_check():
        out.append(f"| {_shape(f)} | {f:.3g} | {meas:.1f} | {table:.1f} | {table / meas:.3f} |")
    return out


def comparison_lines(burst_efficiency, peak_flops_per_s: float, gpu: str) -> list[str]:
    """Markdown: each run of the measured `gpu` against its preset's burst table, and the factor."""
    preset, kind = MEASURED[gpu].preset, MEASURED[gpu].kind
    runs = sorted({run_key(r) for r in rows(gpu)})
    head = " | ".join(f"{repo.split('/')[0]} {c[:7]} ({_vm(gpu, repo, c)}, driver {_driver(gpu, repo, c)})"
                      for repo, c in runs)
    out = [f"The {gpu} against the {preset} burst table ([efficiency.{kind}]; sustained / burst per run, then the "
           "median: the factor):", "",
           f"| m x n x k | FLOPs | ideal time at peak | burst table TFLOP/s | {head} | factor |",
           "|---|---|---|---|" + "---|" * len(runs) + "---|"]
    knots = dict(zip(*factor_knots(burst_efficiency, peak_flops_per_s, gpu)))
    by = {(run_key(r), gemm_flops(r)): r["tflops"] for r in rows(gpu) if is_large(r)}
    for f in sorted({f for _, f in by}):
        burst = burst_efficiency(f) * peak_flops_per_s / 1e12
        cells = " | ".join(f"{by[(k, f)]:.1f} ({by[(k, f)] / burst:.3f})" for k in runs)
        out.append(f"| {_shape(f)} | {f:.3g} | {f / peak_flops_per_s * 1e6:.1f} us | {burst:.1f} | {cells} "
                   f"| {knots[f / peak_flops_per_s]:.3f} |")
    return out


def _shape(flops: float) -> str:
    (s,) = {f"{r['m']} x {r['n']} x {r['k']}" for r in rows() if is_large(r) and gemm_flops(r) == flops}
    return s


def _vm(gpu: str, repo: str, commit: str) -> str:
    (v,) = {r["vm"] for r in rows(gpu) if run_key(r) == (repo, commit)}
    return v


def _driver(gpu: str, repo: str, commit: str) -> str:
    (d,) = {r["driver"] for r in rows(gpu) if run_key(r) == (repo, commit)}
    return d


if __name__ == "__main__":
    import xla_gemm

    print("\n".join(xla_gemm.sustained_lines()))
