"""GEMM efficiency by size from OpenXLA's published kernel timings (H100 = sm_90, B200 = sm_100).

    python validation/xla_gemm.py            # the comparison tables (markdown) and the TOML sections
    python validation/xla_gemm.py --check    # exit 1 if a preset's [efficiency.gemm] differs from them

OpenXLA ships a measured matmul table with its GPU cost model (`kDefaultMatmulPTable`,
xla/service/gpu/model/matmul_interpolator_data.h; transcribed into `validation/data/xla_matmul.csv` with
repo, path and commit per row). It was written by xla/tools/matmul_perf_table_gen.cc: one batched `dot`
per shape (b x m x k times b x k x n, b = 1-4, m, n, k = 256-4096, powers of two), compiled by XLA
(autotuned cuBLAS / Triton GEMM), one warm-up run, then 5 traced runs; the value is FLOPs (2·b·m·n·k) over
the **median kernel time from the CUPTI kernel tracer**: device time of the kernel alone, no host issue
time. That is the quantity the cost model's `[efficiency.gemm]` stands for (the host's issue time of an
eager framework is the stack's launch bound, cost/launch.py), and what a single call timed with CUDA
events cannot give below ~1e11 FLOPs, where the call's host time is longer than the kernel.

The table: efficiency = FLOP/s / the GPU's dense peak in the table's dtype (the datasheet figure its preset
holds, `PEAK_PRESET`: H100 SXM 989.4, B200 2250 TFLOP/s BF16), the median over the shapes of each FLOP count (every shape's FLOPs is a power of two, so each
power of two is one knot; 3-30 shapes each), linear in log10(FLOPs) between knots and constant outside
(spec/hardware.py), as every preset's table. The median, not the best shape: a training step's GEMMs are
the model's shapes, not a shape search's winner (the MAMF maximum, reported beside it).

Which presets read it (`PRESETS`: preset -> (arch, MAMF row of the target GPU or None)):
- as measured: dgx-b200 and aws-p6-b200 from sm_100. (The GH100 SXM presets, dgx-h200 and dgx-h800 too, hold
  the lent H100's measured tables, in the state a training step keeps the GPU in: h100_gemm_table.py GH100_SXM.)
- transferred by kernel time (`transfer`), for GPUs the table does not hold: A100 (dgx-a100-80g,
  dgx-a100-40g, jean-zay-a100) and the 600 W H200 NVL (h200-nvl, 835 TFLOP/s; no MAMF row: the H100 SXM's
  fraction) from sm_90; GB200, B300, GB300 from sm_100. A GEMM's efficiency is taken to
  depend on its ideal time at peak, FLOPs / peak (the fixed per-kernel costs -- launch, wave fill, tail --
  are times, not FLOPs), scaled by the two GPUs' MAMF fractions (stas00's shape-search maxima,
  kernel_benchmarks.csv) for what each reaches at saturation:
      eta_target(x) = eta_source(x * peak_source / peak_target) * MAMF_target / MAMF_source.
  Held out: the rule predicts the B200's measured kernels from the H100's (docs/compute.md table,
  tests/test_xla_gemm.py). GB300 has no MAMF row: B300's fraction [assumption, as before].
- in the state a training step holds the GPU in (`SUSTAINED`: every Blackwell and A100 preset): the table above times
  the sustained-to-burst factor measured at the power limit on a GB200 (Blackwell) or an A100 (sustained_gemm.py).
They replaced Calculon's step curve scaled to the MAMF top. dgx-h100 keeps its own measured table (lent H100s:
validation/h100_gemm_table.py); the sm_90 points check its burst state, the calibration's, here. MI3xx and the datasheet H100
opt-in keep Calculon's curve (no AMD kernel table; the opt-in is what it says).
"""
from __future__ import annotations

import csv
import math
import re
import sys
from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from statistics import median

import sustained_gemm

ROOT = Path(__file__).resolve().parent
DATA = ROOT / "data" / "xla_matmul.csv"
PROFILES = ROOT.parent / "hardware_profiles"
GPU = {"sm_90": "H100 SXM (GH100)", "sm_100": "B200"}
MAMF_OF_ARCH = {"sm_90": "H100-SXM", "sm_100": "B200-SXM"}  # the kernel_benchmarks.csv row of each table's GPU
# Per table: the XLA dtype key, the preset peak it is a fraction of, the MAMF rows (kernel_benchmarks.csv).
KINDS = {"gemm": dict(dtype="bf16xbf16->bf16", peak="bf16", mamf_dtype="bf16", mamf_kernel="torch.mm"),
         "gemm_fp8": dict(dtype="f8e4m3fnxf8e4m3fn->bf16", peak="fp8", mamf_dtype="fp8_e4m3fn",
                          mamf_kernel="fp8-scaled-mm")}
# The preset whose [gpu.peak_tflops] holds each GPU's dense peaks (the XLA tables' GPUs and the MAMF rows'):
# one place for every peak, the presets' own datasheet figures.
PEAK_PRESET = {"H100-SXM": "dgx-h100", "B200-SXM": "dgx-b200", "GB200": "gb200-nvl72", "B300-SXM": "b300",
               "A100-SXM4": "dgx-a100-80g", "H200-SXM": "dgx-h200"}
FP8_ARCHS = ("sm_100",)  # sm_90's fp8 values exceed the H100's FP8 peak: not used


def gpu_peak(gpu: str, kind: str = "gemm") -> float:
    """Dense peak FLOP/s of `gpu` (a kernel_benchmarks.csv name) in the table's dtype, from its preset."""
    return _peak(PEAK_PRESET[gpu], kind)


def arch_peak(arch: str, kind: str = "gemm") -> float:
    """Dense peak of the GPU an XLA table was measured on."""
    if kind == "gemm_fp8" and arch not in FP8_ARCHS:
        raise ValueError(f"no usable {kind} table for {arch}")
    return gpu_peak(MAMF_OF_ARCH[arch], kind)


PRESETS = {  # table -> preset -> (arch, the target GPU's MAMF row, or None: the arch's GPU, as measured)
    "gemm": {
        "h200-nvl": ("sm_90", "H100-SXM"),
        "dgx-b200": ("sm_100", None), "aws-p6-b200": ("sm_100", None),
        "gb200-nvl72": ("sm_100", "GB200"), "b300": ("sm_100", "B300-SXM"), "gb300-nvl72": ("sm_100", "B300-SXM"),
        "dgx-a100-80g": ("sm_90", "A100-SXM4"), "dgx-a100-40g": ("sm_90", "A100-SXM4"),
        "jean-zay-a100": ("sm_90", "A100-SXM4"),
    },
    "gemm_fp8": {
        "dgx-b200": ("sm_100", None), "aws-p6-b200": ("sm_100", None),
        "gb200-nvl72": ("sm_100", "GB200"), "b300": ("sm_100", "B300-SXM"), "gb300-nvl72": ("sm_100", "B300-SXM"),
        "h200-nvl": ("sm_100", "H200-SXM"),
    },
}


def points(arch: str, kind: str = "gemm") -> list[tuple[int, int, int, int, float]]:
    """(b, m, n, k, efficiency) of every measured shape of `arch` in the `kind` table's dtype."""
    out = []
    for r in csv.DictReader(open(DATA)):
        if r["arch"] == arch and r["dtype"] == KINDS[kind]["dtype"]:
            b, m, n, k = (int(r[c]) for c in ("b", "m", "n", "k"))
            out.append((b, m, n, k, float(r["flops_per_s"]) / arch_peak(arch, kind)))
    return out


def flops(b: int, m: int, n: int, k: int) -> float:
    """FLOPs of a batched GEMM, 2·b·m·n·k (matmul_perf_table_gen.cc GetFlops: 2 per FMA)."""
    return 2.0 * b * m * n * k


def table(arch: str, kind: str = "gemm") -> tuple[list[float], list[float], list[int]]:
    """Knots (FLOPs), median efficiency and shape count per FLOP count of `arch`'s points."""
    by = defaultdict(list)
    for b, m, n, k, e in points(arch, kind):
        by[flops(b, m, n, k)].append(e)
    x = sorted(by)
    return x, [round(median(by[v]), 4) for v in x], [len(by[v]) for v in x]


def mamf_fraction(gpu: str, kind: str = "gemm") -> float:
    """The MAMF maximum of `gpu` (its kernel_benchmarks.csv row for the table's dtype) over its dense peak."""
    k = KINDS[kind]
    rows = [r for r in csv.DictReader(open(ROOT / "data" / "kernel_benchmarks.csv"))
            if (r["kind"], r["gpu"], r["dtype"]) == ("gemm", gpu, k["mamf_dtype"])
            and r["kernel"].startswith(k["mamf_kernel"])]
    (row,) = rows
    return float(row["tflops"]) * 1e12 / gpu_peak(gpu, kind)


def transfer(x, e, *, peak_source: float, peak_target: float, mamf_ratio: float):
    """Knots of a GEMM table moved to another GPU by kernel time (module docstring): the same ideal time
    at peak, x * peak_target / peak_source FLOPs on the target, at efficiency e * mamf_ratio."""
    return [v * peak_target / peak_source for v in x], [round(v * mamf_ratio, 4) for v in e]


def burst_table(preset: str, kind: str = "gemm") -> tuple[list[float], list[float]]:
    """`preset`'s table in the kernels' burst state: its arch's medians, moved to its GPU if another."""
    arch, gpu = PRESETS[kind][preset]
    x, e, _ = table(arch, kind)
    if gpu is None:
        return x, e
    return transfer(x, e, peak_source=arch_peak(arch, kind), peak_target=_peak(preset, kind),
                    mamf_ratio=mamf_fraction(gpu, kind) / mamf_fraction(MAMF_OF_ARCH[arch], kind))


# The presets held in the sustained state: preset -> the GPU whose sustained runs give its factor (sustained_gemm.py).
SUSTAINED = {**{p: "GB200" for p in ("dgx-b200", "aws-p6-b200", "gb200-nvl72", "b300", "gb300-nvl72")},
             **{p: "A100-SXM4" for p in ("dgx-a100-80g", "dgx-a100-40g", "jean-zay-a100")}}


def _measured_burst(gpu: str):
    """(the burst table of the preset `gpu` was measured as, as a function of FLOPs; that table's dense peak):
    what the harness's sustained runs are read against (sustained_gemm.MEASURED)."""
    from simulator.calibrate.fit import efficiency_at

    m = sustained_gemm.MEASURED[gpu]
    preset, kind = m.preset, m.kind
    x, e = burst_table(preset, kind)
    return (lambda f: float(efficiency_at(x, e, [f])[0])), _peak(preset, kind)


@lru_cache(maxsize=None)
def sustained_knots(gpu: str) -> tuple[list[float], list[float]]:
    """The factor's knots: the measured GPU's harness rows over its preset's burst table."""
    return sustained_gemm.factor_knots(*_measured_burst(gpu), gpu)


def sustained_lines() -> list[str]:
    """Markdown of the sustained factors' data: the H100 check, then each measured GPU against its burst table."""
    out = sustained_gemm.h100_lines()
    for gpu in sustained_gemm.MEASURED:
        out += [""] + sustained_gemm.comparison_lines(*_measured_burst(gpu), gpu)
    return out


def preset_table(preset: str, kind: str = "gemm") -> tuple[list[float], list[float]]:
    """The [efficiency.<kind>] knots of `preset` (PRESETS): the burst table, in the sustained state for the
    Blackwell and A100 presets (SUSTAINED)."""
    x, e = burst_table(preset, kind)
    if preset not in SUSTAINED:
        return x, e
    return sustained_gemm.apply(x, e, peak_flops_per_s=_peak(preset, kind), knots=sustained_knots(SUSTAINED[preset]))


@lru_cache(maxsize=None)
def _peak(preset: str, kind: str = "gemm") -> float:
    """The preset's own dense peak of the table's dtype ([gpu.peak_tflops])."""
    sys.path.insert(0, str(ROOT.parent))
    from simulator.spec.hardware import load_hardware

    return load_hardware(preset).peak_flops(KINDS[kind]["peak"])


def source(preset: str, kind: str = "gemm") -> str:
    arch, gpu = PRESETS[kind][preset]
    rows = [r for r in csv.DictReader(open(DATA)) if r["arch"] == arch]
    where = sorted({(r["repo"], r["path"], r["commit"][:10]) for r in rows})
    dt, peak = KINDS[kind]["dtype"], KINDS[kind]["peak"].upper()
    if gpu is not None:
        check = ("the rule predicts the B200's bf16 kernels from the H100's within 7 % at the median (docs/compute.md)"
                 if kind == "gemm" else "[derived: the rule is checked on bf16 H100 -> B200 only]")
        rel = (f" Transferred to this GPU by kernel time: eta(x) = eta_{arch}(x * "
               f"{arch_peak(arch, kind) / 1e12:g} / {_peak(preset, kind) / 1e12:g}) * MAMF {gpu} "
               f"{mamf_fraction(gpu, kind):.3f} / MAMF {MAMF_OF_ARCH[arch]} "
               f"{mamf_fraction(MAMF_OF_ARCH[arch], kind):.3f} "
               f"(stas00/ml-engineering MAMF rows of kernel_benchmarks.csv); {check}.")
    elif preset in ("dgx-b200", "aws-p6-b200"):
        rel = ""
    else:
        rel = (f" The {GPU[arch]}'s efficiencies are used for this GPU [assumption: same compute die; "
               "memory bandwidth, board power and clocks ignored].")
    return (f"measured kernels, published: OpenXLA's default matmul table for {arch} ({GPU[arch]}; "
            f"{'; '.join(f'{r} {p} at {c}' for r, p, c in where)}; "
            "validation/data/xla_matmul.csv), written by xla/tools/matmul_perf_table_gen.cc: XLA-compiled "
            f"batched {dt} dot, b 1-4 x m, n, k 256-4096, median CUPTI kernel time of 5 traced runs after a "
            f"warm-up (device time only); efficiency = FLOP/s / dense {peak} peak, median over the shapes of each "
            f"FLOP count; validation/xla_gemm.py.{rel}{_sustained_source(preset)}")


def _sustained_source(preset: str) -> str:
    if preset not in SUSTAINED:
        a100 = sustained_knots("A100-SXM4")[1]
        return (" Burst state [no sustained measurement of this GPU or its generation at its power limit is published; "
                "a training step holds the GPU there, where the H100 SXM runs large GEMMs 6-10 % (h100_gemm_table.py) "
                f"and the A100 {100 * (1 - max(a100)):.0f}-{100 * (1 - min(a100)):.0f} % slower "
                "(validation/sustained_gemm.py): read this table as optimistic]")
    gpu = SUSTAINED[preset]
    ts, fs = sustained_knots(gpu)
    m = sustained_gemm.MEASURED[gpu]
    return (" In the state a training step holds the GPU in (at its power limit): times the sustained-to-burst "
            f"factor {max(fs):.3f}-{min(fs):.3f} over kernels of {ts[0] * 1e6:.0f}-{ts[-1] * 1e6:.0f} us at peak "
            f"(read at this kernel's FLOPs / dense peak, constant outside), measured on {m.what}; on the H100 the same "
            "harness reads the lent H100's own back-to-back table within 7 % from 1e11 to 2e12 FLOPs "
            f"(validation/sustained_gemm.py) {m.assumption}")


def section(preset: str, kind: str = "gemm") -> str:
    x, e = preset_table(preset, kind)
    return (f"[efficiency.{kind}]\n"
            f"x = [{', '.join(f'{v:.12g}' for v in x)}]\n"
            f"efficiency = [{', '.join(f'{v:.4f}' for v in e)}]\n"
            'x_unit = "FLOPs per GEMM (2*m*n*k)"\n'
            f'source = "{source(preset, kind)}"\n')


def _section_re(kind: str):
    return re.compile(r"\[efficiency\.%s\]\n(?:[^\[\n][^\n]*\n)*" % kind)


def write(preset: str, kind: str = "gemm") -> bool:
    """Replace `preset`'s [efficiency.<kind>] section (a gemm_fp8 section missing is put after gemm's);
    True if the file changed."""
    path = PROFILES / f"{preset}.toml"
    text = path.read_text()
    if _section_re(kind).search(text):
        new = _section_re(kind).sub(lambda _: section(preset, kind), text, count=1)
    else:
        m = _section_re("gemm").search(text)
        new = text[:m.end()] + "\n" + section(preset, kind) + text[m.end():]
    if new != text:
        path.write_text(new)
    return new != text


def check() -> list[str]:
    """(preset, table) pairs whose section is not the one this script writes."""
    bad = []
    for kind, presets in PRESETS.items():
        for preset in presets:
            m = _section_re(kind).search((PROFILES / f"{preset}.toml").read_text())
            if m is None or m.group(0) != section(preset, kind):
                bad.append(f"{preset} [efficiency.{kind}]")
    return bad


def comparison_lines() -> list[str]:
    """Markdown: the sm_90 medians against dgx-h100's measured table and the datasheet curve; the sm_100
    medians, their spread over the shapes, and the Calculon/MAMF curve they replaced; the transfer's held-out
    check (H100 -> B200); the A100 curve before and after; FP8 against BF16 on the B200."""
    sys.path.insert(0, str(ROOT.parent))
    from simulator.spec.hardware import load_hardware

    from h100_gemm_table import burst_table as h100_burst_table

    from simulator.calibrate.fit import efficiency_at

    ds = load_hardware("dgx-h100-datasheet")
    bx, be = h100_burst_table()  # the like-for-like state: short isolated runs after an idle, as XLA's traced kernels
    out = ["| FLOPs per GEMM | shapes | H100 kernels (XLA sm_90, median) "
           "| lent H100, burst (two calibrations, event-timed calls after an idle) | ratio "
           "| dgx-h100-datasheet (Calculon roll-off, MAMF top) | ratio |", "|---|---|---|---|---|---|---|"]
    x, e, n = table("sm_90")
    for v, ev, c in zip(x, e, n):
        a, d = float(efficiency_at(bx, be, [v])[0]), float(ds.interp_efficiency("gemm", v))
        out.append(f"| {v:.3g} | {c} | {ev:.3f} | {a:.3f} | {a / ev:.2f} | {d:.3f} | {d / ev:.2f} |")
    out += ["", "| FLOPs per GEMM | shapes | B200 kernels (XLA sm_100, median) | min – max over the shapes | "
            "before: Calculon roll-off, MAMF top | ratio |", "|---|---|---|---|---|---|"]
    old = dict(zip(*BEFORE["dgx-b200"]))
    by = defaultdict(list)
    for b, m, nn, k, ev in points("sm_100"):
        by[flops(b, m, nn, k)].append(ev)
    x, e, n = table("sm_100")
    xh, eh, _ = table("sm_90")
    moved = dict(zip(*transfer(xh, eh, peak_source=arch_peak("sm_90"), peak_target=arch_peak("sm_100"),
                               mamf_ratio=mamf_fraction("B200-SXM") / mamf_fraction("H100-SXM"))))
    for v, ev, c in zip(x, e, n):
        o = _interp(old, v)
        out.append(f"| {v:.3g} | {c} | {ev:.3f} | {min(by[v]):.3f} – {max(by[v]):.3f} | {o:.3f} | {o / ev:.2f} |")
    out += ["", "Held out, the transfer by kernel time (`transfer`): the H100's kernels moved to the B200 against "
            "the B200's own.", "", "| FLOPs per GEMM | B200 measured | moved from the H100 | error |",
            "|---|---|---|---|"]
    for v, ev in zip(x, e):
        if min(moved) <= v <= max(moved):
            p = _interp(moved, v)
            out.append(f"| {v:.3g} | {ev:.3f} | {p:.3f} | {100 * (p / ev - 1):+.1f} % |")
    out += ["", "A100 (dgx-a100-80g, dgx-a100-40g, jean-zay-a100), moved from the H100's kernels (burst), then "
            "in the sustained state (the A100's factor, sustained_gemm.py), against the curve it held before "
            "(Calculon's steps, MAMF 0.869 top).", "",
            "| FLOPs per GEMM | before | burst | now (sustained) | now / before |", "|---|---|---|---|---|"]
    before = dict(zip(*BEFORE["dgx-a100-80g"]))
    burst = dict(zip(*burst_table("dgx-a100-80g")))
    for v, ev in zip(*preset_table("dgx-a100-80g")):
        b = _interp(before, v)
        out.append(f"| {v:.3g} | {b:.3f} | {_interp(burst, v):.3f} | {ev:.3f} | {ev / b:.2f} |")
    out += ["", "FP8 (e4m3 x e4m3 -> bf16) on the B200 against bf16, the same shapes: efficiency of each dtype's own "
            "dense peak and the kernel speed-up (`[efficiency.gemm_fp8]`; before it the bf16 table was read "
            "against the FP8 peak, a speed-up of 2 at every size).", "",
            f"| FLOPs per GEMM | FP8 (of {arch_peak('sm_100', 'gemm_fp8') / 1e12:g} TFLOP/s) "
            f"| BF16 (of {arch_peak('sm_100') / 1e12:g}) | FP8 / BF16 kernel speed |",
            "|---|---|---|---|"]
    for v, e8, e16 in zip(table("sm_100", "gemm_fp8")[0], table("sm_100", "gemm_fp8")[1], table("sm_100")[1]):
        speed = e8 * arch_peak("sm_100", "gemm_fp8") / (e16 * arch_peak("sm_100"))
        out.append(f"| {v:.3g} | {e8:.3f} | {e16:.3f} | {speed:.2f} |")
    return out


# The curves the B200 and A100 presets shipped before this table (up to commit 57fd8c0: Calculon's step curve
# relative to its 0.95 top, scaled to each GPU's MAMF fraction), kept only for the docs' 'before' columns.
BEFORE = {"dgx-b200": ([1.0e8, 1.0e9, 1.6e10, 1.28e11], [0.0817, 0.4901, 0.7352, 0.776]),
          "dgx-a100-80g": ([1.0e8, 1.0e9, 1.6e10, 1.28e11], [0.0915, 0.5488, 0.8233, 0.869])}


def _interp(curve: dict, v: float) -> float:
    xs = sorted(curve)
    if v <= xs[0]:
        return curve[xs[0]]
    if v >= xs[-1]:
        return curve[xs[-1]]
    for a, b in zip(xs, xs[1:]):
        if a <= v <= b:
            t = (math.log10(v) - math.log10(a)) / (math.log10(b) - math.log10(a))
            return curve[a] + t * (curve[b] - curve[a])
    raise AssertionError(v)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--check" in argv:
        bad = check()
        if bad:
            print("stale [efficiency.gemm] (run python validation/xla_gemm.py --write): " + ", ".join(bad))
            return 1
        return 0
    if "--write" in argv:
        for kind, presets in PRESETS.items():
            for p in presets:
                print(("wrote " if write(p, kind) else "unchanged ") + f"{p} [efficiency.{kind}]")
        return 0
    print("\n".join(comparison_lines()))
    for kind, presets in PRESETS.items():
        for preset in presets:
            print(f"\n# {preset}\n" + section(preset, kind))
    return 0


if __name__ == "__main__":
    sys.exit(main())
