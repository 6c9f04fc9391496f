"""Generate docs/validation-h200.md: the shipped dgx-h200 preset against training steps measured on a lent H200.

    python validation/h200_report.py            # rewrite docs/validation-h200.md and the H200 validated-error group
    python validation/h200_report.py --check    # exit 1 if either is not what it would write

Inputs are the files under validation/h200/ (README.md there: hardware, versions, protocol). dgx-h200 was written
before any H200 was measured here: its GEMM, FP8 and attention tables are the lent H100's measured ones (the H200
SXM has the H100 SXM's compute die and 700 W limit) and its memory-bound kernels run at HBM3e's rate. Nothing in
it was changed after these measurements, so every row here is held out. Each run is predicted by
`compare_train_steps.compare`, the one mapping of a harness row to parasim's inputs (validation/h100_report.py
uses it for the H100). The step and memory errors also go into simulator/data/validated_error.json
(`H200_HARNESS`), which `parasim estimate` reads. The text depends only on those files and the simulator.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation"))
DATA = ROOT / "validation" / "h200"
H100 = ROOT / "validation" / "h100"
DOC = ROOT / "docs" / "validation-h200.md"
SCRIPT = "validation/h200_report.py"
PRESET = "dgx-h200"
AS_MEASURED = "dgx-h200-d8fd5b7.toml"  # the preset as shipped when the steps were measured (a copy, in DATA)
PROFILES = ((AS_MEASURED, "dgx-h200 as shipped when measured (d8fd5b7)"),
            (PRESET, "dgx-h200 now (its fused-AdamW table measured on the H200)"))

from make_accuracy import _abs_pct, _pct, write_or_check  # noqa: E402  (same formatting, same command line)
from h100_report import predictions as h100_predictions, summary  # noqa: E402  (the same tables)

# (file, label, role): the H100 harness's grids run unchanged on the H200, then the grid again (reproducibility)
SETS = (("fused_persistent_gpu.csv", "grid", "primary"),
        ("fused_persistent_gpu-holdout.csv", "held-out grid", "held out"),
        ("fused_persistent_gpu_repeat.csv", "grid, repeated", "repeat"))


def _err(p, m):
    """simulator.validate.signed_error (predicted / measured − 1) per element of two aligned Series."""
    import pandas as pd

    from simulator.validate import signed_error

    return pd.Series(signed_error(p, m), index=p.index)


def predictions() -> dict:
    """{(file, profile): compare() DataFrame} of every H200 set against every profile of PROFILES."""
    return h100_predictions(DATA, SETS, PROFILES)


def generation_ratios():
    """Per grid run: the H200's measured step over the H100's (validation/h100/, the same harness and grid) and
    dgx-h200's predicted step over dgx-h100's. The ratio isolates what the two GPUs differ in (HBM3e at 4.8 TB/s
    against HBM3 at 3.35 TB/s, 141 against 80 GB) from everything the two predictions share."""
    import pandas as pd

    from compare_train_steps import compare
    from simulator.spec.hardware import load_hardware

    f = SETS[0][0]
    h200 = pd.read_csv(DATA / f).set_index("run_id")
    h100 = pd.read_csv(H100 / f).set_index("run_id")
    runs = h200.index.intersection(h100.index)
    p200 = compare(h200.loc[runs].reset_index(), load_hardware(PRESET)).set_index("run_id")
    p100 = compare(h100.loc[runs].reset_index(), load_hardware("dgx-h100")).set_index("run_id")
    return pd.DataFrame({"measured": h200.loc[runs, "step_time_s"] / h100.loc[runs, "step_time_s"],
                         "predicted": p200["predicted_step_s"] / p100["predicted_step_s"]})


def ratio_lines(g) -> list[str]:
    d = g["predicted"] - g["measured"]
    top = g.assign(d=d.abs()).nlargest(3, "d")
    return [
        f"On the {len(g)} grid runs the H200 takes {g['measured'].min():.3f}-{g['measured'].max():.3f} of the H100's "
        f"step (median {g['measured'].median():.3f}); dgx-h200 over dgx-h100 predicts {g['predicted'].min():.3f}-"
        f"{g['predicted'].max():.3f} (median {g['predicted'].median():.3f}). Predicted minus measured ratio: median "
        f"{d.median():+.3f}, largest " + ", ".join(f"{i} ({x.measured:.3f} measured, {x.predicted:.3f} predicted)"
                                                  for i, x in top.iterrows()) + ".", ""]


def per_run(r) -> list[str]:
    out = ["| run | step meas ms | step pred ms | step error | fwd+bwd error | optimizer error | peak meas GiB | "
           "peak pred GiB | memory error |", "|---|---|---|---|---|---|---|---|---|"]
    for x in r.itertuples():
        out.append(f"| {x.run_id} | {1e3 * x.measured_step_s:.1f} | {1e3 * x.predicted_step_s:.1f} | "
                   f"{_pct(x.step_error)} | {_pct(_err_one(x.predicted_fwd_bwd_s, x.measured_fwd_bwd_s))} | "
                   f"{_pct(_err_one(x.predicted_opt_s, x.measured_opt_s))} | {x.measured_mem_bytes / 2**30:.2f} | "
                   f"{x.predicted_mem_bytes / 2**30:.2f} | {_pct(x.mem_error)} |")
    return out + [""]


def _err_one(p, m) -> float:
    from simulator.validate import signed_error

    return float(signed_error(p, m))


def harness_groups(res) -> list[dict]:
    """The validated-error group of dgx-h200 (simulator/data/validated_error.json): the grid and the held-out grid
    pooled (the repeat is the same configurations again and is left out), with the harness's stack."""
    import pandas as pd

    from simulator.validate.validated_error import group

    r = pd.concat([res[f, PRESET] for f, _, _ in SETS[:2]])
    return [group(hardware=PRESET, stack="torchtitan", source="H200_HARNESS", step_errors=r["step_error"],
                  mem_errors=r["mem_error"], doc="docs/validation-h200.md", generator=SCRIPT,
                  what="training steps on one GPU of a lent H200 SXM, memory as max_memory_allocated")]


def build() -> tuple[str, list[dict]]:
    res = predictions()
    return generate(res), harness_groups(res)


def kernel_sections() -> list[str]:
    """The kernel-level comparisons (validation/h200_kernels.py) under one heading."""
    import h200_kernels

    return ["## Kernels: the H200 against the H100 and against dgx-h200", "", *h200_kernels.lines(), ""]


def generate(res=None) -> str:
    res = predictions() if res is None else res
    prim, rep = res[SETS[0][0], PRESET], res[SETS[2][0], PRESET]
    old = res[SETS[0][0], AS_MEASURED]
    opt_old = _err(old["predicted_opt_s"], old["measured_opt_s"])
    opt_new = _err(prim["predicted_opt_s"], prim["measured_opt_s"])
    repeat = (rep.set_index("run_id")["measured_step_s"] / prim.set_index("run_id")["measured_step_s"] - 1).abs()
    lines = [
        "# Validation on a lent H200: the shipped dgx-h200 preset against measured training steps",
        "",
        "Generated by `python validation/h200_report.py` from the files in `validation/h200/` (hardware, versions "
        "and protocol: `validation/h200/README.md`). One NVIDIA H200 SXM (141 GB HBM3e, 132 SMs, 700 W limit, "
        "driver 580.159.04), torch 2.11.0+cu130, CUDA 13.0, cuDNN 9.19.",
        "",
        "**What is compared.** The H100 harness's two grids (`validation/train_step.py`: Llama-style decoders on one "
        "GPU, fused AdamW, persistent gradients; docs/validation-h100.md), run unchanged on the H200, each predicted "
        "by `validation/compare_train_steps.py` with the shipped `dgx-h200` preset. Memory is compared on the "
        "allocator's basis (`torch.cuda.max_memory_allocated`).",
        "",
        "**Held out.** dgx-h200 was written before any H200 was measured here (the rows of the as-shipped "
        "profile, a copy of the preset at commit d8fd5b7, are held out; the one table added after is below): its "
        "GEMM, FP8 GEMM and attention tables are the lent H100's (the H200 SXM has the H100 SXM's compute die and "
        "700 W limit), its memory-bound kernels run at HBM3e's 4.8 TB/s through the H100's measured kernel classes. So "
        "this page tests that transfer end to end, on a GPU nothing was fitted to.",
        "",
        "## Summary",
        "",
        *summary(res, SETS, PROFILES),
        "Signed errors are predicted / measured − 1 (negative: parasim predicts less time or memory). The grid "
        f"measured twice in one lease differs by a median {_abs_pct(repeat.median())} per run (largest "
        f"{_abs_pct(repeat.max())}, {repeat.idxmax()}).",
        "",
        "**One change after the steps: the fused AdamW step.** As shipped, dgx-h200 had no optimizer table and timed "
        "torch's fused AdamW with its memory table at 4.8 TB/s; the steps' optimizer phase came out "
        f"{_pct(opt_old.median())} at the median. The optimizer microbenchmark (`parasim calibrate optimizer`, "
        "`h200-opt.toml`, run on a fresh H200 machine after the steps) shows why: the fused step reaches 2.5 TB/s, "
        "0.53 of the H200's HBM peak, where the H100's reaches 0.65 of its own; the kernel does not speed up with the "
        "bandwidth. dgx-h200 now holds that table (a microbenchmark fit, not fitted to the steps), and the optimizer "
        f"phase is predicted at {_pct(opt_new.median())}.",
        "",
        "## The H200 against the H100: what the faster HBM buys",
        "",
        *ratio_lines(generation_ratios()),
        *kernel_sections(),
        "## Per run: grid",
        "",
        *per_run(prim),
        "## Per run: held-out grid",
        "",
        *per_run(res[SETS[1][0], PRESET]),
    ]
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None) -> int:
    return write_or_check(argv, doc=DOC, build=build, script=SCRIPT)


if __name__ == "__main__":
    raise SystemExit(main())
