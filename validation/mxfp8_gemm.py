"""MXFP8 GEMMs on Blackwell, and the Blackwell and H200 NVL GEMM tables, against NVIDIA's published GEMM kernel times.

    python validation/mxfp8_gemm.py            # the comparison table (markdown) and the TOML sections
    python validation/mxfp8_gemm.py --check    # exit 1 if a preset's [efficiency.gemm_mxfp8] differs from them
    python validation/mxfp8_gemm.py --write    # write the sections into the Blackwell presets

Transformer Engine's GEMM Profiling Tutorial (NVIDIA/TransformerEngine docs/examples/gemm_profiling, transcribed into
`validation/data/te_gemm_profiling.csv` with its locator) times the twelve GEMMs of one transformer layer
(hidden 4096, MLP 16384, 15,872 tokens: forward, input-gradient and weight-gradient shapes) on a B300 and an
H200 NVL with its `benchmarks/gemm/benchmark_gemm.py`: in "pre-quantized" mode the operands are quantized once
before the timed loop, so the time is the GEMM kernels' alone (100 calls timed with CUDA events after 10
warm-up calls), per precision: BF16, FP8 with per-tensor scales (FP8Current) and MXFP8 (one 1-byte scale per
32 elements, read by Blackwell's block-scaled tensor-core instructions inside the kernel).

MXFP8 kernels: on the B300 the twelve MXFP8 GEMMs take 7.16 ms against 6.81 ms for the same shapes with
per-tensor FP8 scales, the same FLOPs. The presets' `[efficiency.gemm_fp8]` tables (OpenXLA's per-tensor FP8
kernels, validation/xla_gemm.py) describe the second; `[efficiency.gemm_mxfp8]` is that table times the
measured rate of the block-scaled kernels to the per-tensor ones,

    eta_mxfp8(x) = eta_fp8(x) * sum_t(FP8Current) / sum_t(MXFP8)    (B300, the tutorial's one layer),

read by an FP8 GEMM when the stack's fp8_recipe is "mxfp8" (cost/compute.py gemm_table). One layer's shapes
were measured, so the rate is one number for every GEMM size; by pass the tutorial's rates are 0.91 (forward),
0.97 (input gradient) and 0.97 (weight gradient). Written into every Blackwell preset (`PRESETS`; the B200,
GB200 and GB300 [assumption: the B300's block-scaled kernels' rate, the same tensor-core generation]).
Hopper has no block-scaled FP8 instructions (Transformer Engine runs MXFP8 on Blackwell only), so its presets
get no table.

The comparison printed (`comparison_lines`) reads the same measurement as a check of the presets' BF16 and FP8
GEMM tables, which were not fitted to it: the tutorial's per-pass kernel times against the times the presets'
tables give the same twelve GEMMs, in the presets' state (sustained at the power limit for the Blackwell
presets) and in the burst state they were measured in (xla_gemm.burst_table).
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

import xla_gemm
from h100_gemm_table import preset_cli, rewrite_presets

ROOT = Path(__file__).resolve().parent
DATA = ROOT / "data" / "te_gemm_profiling.csv"
PRESETS = ("dgx-b200", "aws-p6-b200", "gb200-nvl72", "b300", "gb300-nvl72")  # Blackwell: block-scaled FP8
MEASURED_ON = "B300"
TOKENS, HIDDEN, MLP = 31 * 512, 4096, 16384
# (preset, tutorial GPU) pairs whose tables the comparison checks
CHECKED = (("b300", "B300"), ("h200-nvl", "H200 NVL"))


def _rows() -> list[dict]:
    return list(csv.DictReader(open(DATA)))


def pass_ms(gpu: str, mode: str, precision: str) -> dict[str, float]:
    """{pass: ms} of one GPU, mode and precision in the transcription (the sum of the pass's four GEMMs)."""
    return {r["pass"]: float(r["ms"]) for r in _rows()
            if (r["gpu"], r["mode"], r["precision"]) == (gpu, mode, precision)}


def mxfp8_rate() -> float:
    """Per-tensor FP8 kernels' time over block-scaled MXFP8 kernels' time, the twelve GEMMs on the B300."""
    fp8, mx = pass_ms(MEASURED_ON, "prequantized", "FP8Current"), pass_ms(MEASURED_ON, "prequantized", "MXFP8")
    return sum(fp8.values()) / sum(mx.values())


def layer_gemms() -> dict[str, list[tuple[int, int, int]]]:
    """{pass: [(m, k, n)]} of the tutorial's layer: QKV, attention output, MLP up, MLP down; the input gradient
    multiplies the output gradient (m x n) by the weight (n x k), the weight gradient the input (k x m) by it."""
    fwd = [(TOKENS, HIDDEN, 3 * HIDDEN), (TOKENS, HIDDEN, HIDDEN), (TOKENS, HIDDEN, MLP), (TOKENS, MLP, HIDDEN)]
    return {"fprop": fwd, "dgrad": [(m, n, k) for m, k, n in fwd], "wgrad": [(k, m, n) for m, k, n in fwd]}


def table_ms(preset: str, kind: str, burst: bool = False) -> float:
    """ms of one pass's four GEMMs from `preset`'s [efficiency.<kind>] (every pass has the same FLOPs per GEMM)."""
    sys.path.insert(0, str(ROOT.parent))
    from simulator.calibrate.fit import efficiency_at
    from simulator.spec.hardware import load_hardware

    hw = load_hardware(preset)
    peak = hw.peak_flops(xla_gemm.KINDS[kind]["peak"])
    flops = [2.0 * m * k * n for m, k, n in layer_gemms()["fprop"]]
    if burst:
        x, e = xla_gemm.burst_table(preset, kind)
        eta = efficiency_at(x, e, flops)
    else:
        eta = [float(hw.interp_efficiency(kind, f)) for f in flops]
    return 1e3 * sum(f / (peak * float(h)) for f, h in zip(flops, eta))


def comparison_lines() -> list[str]:
    out = ["| preset | precision | pass | measured ms | table ms (preset state) | ratio | burst-state table ms "
           "| ratio |", "|---|---|---|---|---|---|---|---|"]
    for preset, gpu in CHECKED:
        for precision, kind in (("BF16", "gemm"), ("FP8Current", "gemm_fp8")):
            t, tb = table_ms(preset, kind), table_ms(preset, kind, burst=True)
            for p, ms in pass_ms(gpu, "prequantized", precision).items():
                out.append(f"| {preset} | {precision} | {p} | {ms:.3f} | {t:.3f} | {t / ms:.2f} | {tb:.3f} "
                           f"| {tb / ms:.2f} |")
    fp8, mx = pass_ms(MEASURED_ON, "prequantized", "FP8Current"), pass_ms(MEASURED_ON, "prequantized", "MXFP8")
    out += ["", f"MXFP8 over per-tensor FP8 kernels ({MEASURED_ON}): " + ", ".join(
        f"{p} {fp8[p] / mx[p]:.3f}" for p in fp8) + f"; all twelve GEMMs {mxfp8_rate():.4f}"]
    return out


RECIPES = {"FP8Current": "current", "MXFP8": "mxfp8"}  # the tutorial's recipe names -> the stack's fp8_recipe


def quantize_lines(preset: str = "b300", gpu: str = MEASURED_ON) -> list[str]:
    """Markdown: the quantization the tutorial's autocast mode adds (autocast less pre-quantized time, per pass)
    against the memory-bound time parasim gives its bytes on `preset` (cost/memory_ops.py `_memory_time`, one kernel
    per tensor). Read of the benchmark (te.Linear forward under te.autocast, bf16 input without grad, weight with
    grad, no is_first_microbatch): every call quantizes its input row- and column-wise (the wgrad copy is saved),
    the bytes of memory_ops.fp8_cast_op for the stack's recipe, and its weight row-wise only: the same cast less one
    layout's FP8 bytes and scales (1 + fp8_scale_bytes_per_element)."""
    sys.path.insert(0, str(ROOT.parent))
    from dataclasses import replace

    import numpy as np
    from simulator.cost.flops import _gemm
    from simulator.cost.memory_ops import _memory_time, fp8_cast_op
    from simulator.spec.hardware import load_hardware
    from simulator.spec.stack_choices import fp8_scale_bytes_per_element
    from simulator.spec.training import Training

    hw = load_hardware(preset)
    out = ["| recipe | pass | measured ms (autocast - pre-quantized) | predicted ms | predicted / measured |",
           "|---|---|---|---|---|"]
    for name, recipe in RECIPES.items():
        t0 = Training(seq_length=TOKENS, global_batch_size=1, precision="fp8")
        training = replace(t0, stack=replace(t0.stack, fp8_recipe=recipe))
        per = float(fp8_cast_op(_gemm("x", 1.0, 1.0, 1.0), training).forward_bytes)  # bytes per input element
        per_weight = per - 1.0 - fp8_scale_bytes_per_element(recipe)
        auto, pre = pass_ms(gpu, "autocast", name), pass_ms(gpu, "prequantized", name)
        for p, shapes in layer_gemms().items():
            t = sum(float(_memory_time(np.array([m * k * per]), 1.0, hw)[0])
                    + float(_memory_time(np.array([k * n * per_weight]), 1.0, hw)[0]) for m, k, n in shapes)
            ms = auto[p] - pre[p]
            out.append(f"| {name} | {p} | {ms:.3f} | {1e3 * t:.3f} | {1e3 * t / ms:.2f} |")
    return out


def source() -> str:
    fp8, mx = (sum(pass_ms(MEASURED_ON, "prequantized", p).values()) for p in ("FP8Current", "MXFP8"))
    return ("derived from measured kernels, published: this preset's [efficiency.gemm_fp8] (per-tensor FP8 kernels) "
            f"times {mxfp8_rate():.4f}, the block-scaled MXFP8 kernels' rate to per-tensor FP8 kernels of the same "
            f"shapes on a B300 ({fp8:.3f} ms / {mx:.3f} ms for one layer's twelve GEMMs, hidden 4096, MLP 16384, "
            "15872 tokens, operands quantized before the timed loop: NVIDIA/TransformerEngine "
            "docs/examples/gemm_profiling/gemm_profiling.rst, 1609c890e; validation/data/te_gemm_profiling.csv; "
            "validation/mxfp8_gemm.py) [assumption for GPUs other than the B300: the same tensor-core generation's "
            "rate; one layer's shapes measured, so one rate at every GEMM size]")


def section(preset: str) -> str:
    x, e = xla_gemm.preset_table(preset, "gemm_fp8")
    r = mxfp8_rate()
    return ("[efficiency.gemm_mxfp8]\n"
            f"x = [{', '.join(f'{v:.12g}' for v in x)}]\n"
            f"efficiency = [{', '.join(f'{v * r:.4f}' for v in e)}]\n"
            'x_unit = "FLOPs per GEMM (2*m*n*k)"\n'
            f'source = "{source()}"\n')


def render(text: str, preset: str) -> str:
    """The preset's TOML with its [efficiency.gemm_mxfp8] written (in place, else after [efficiency.gemm_fp8])."""
    own = xla_gemm._section_re("gemm_mxfp8").search(text)
    if own:
        return text[:own.start()] + section(preset) + text[own.end():]
    m = xla_gemm._section_re("gemm_fp8").search(text)
    return text[:m.end()] + "\n" + section(preset) + text[m.end():]


def write() -> list[str]:
    return rewrite_presets(render, PRESETS, write=True)


def check() -> list[str]:
    return rewrite_presets(render, PRESETS, write=False)


def report(_argv) -> None:
    print("\n".join(comparison_lines() + [""] + quantize_lines()))
    for preset in PRESETS:
        print(f"\n# {preset}\n" + section(preset))


def main(argv=None) -> int:
    return preset_cli(argv, "[efficiency.gemm_mxfp8] sections", write, check, report)


if __name__ == "__main__":
    sys.exit(main())
