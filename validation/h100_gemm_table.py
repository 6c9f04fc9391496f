"""dgx-h100's `[efficiency.gemm]` (bf16) in the state a training step keeps the GPU in, and what the data say.

    python validation/h100_gemm_table.py            # the comparison (markdown) and the TOML section
    python validation/h100_gemm_table.py --write    # write the section into the presets that carry it
    python validation/h100_gemm_table.py --check    # exit 1 if a preset's section differs from it

Three measurements of the calibration's 460 transformer-layer bf16 GEMM shapes on lent H100 SXM GPUs:
- burst: `parasim calibrate` on two leases (validation/h100/lent-opt.toml, lent2.toml; calib_points*.csv). It
  draws each shape's operands on the CPU, seconds for the large ones, so the GPU idles before every shape and its
  5 + 20 calls run at the clocks an idle GPU reaches, each call timed with its own launch. The two leases' fits are
  combined per knot as the faster. Kept for comparison only.
- queued: validation/gpu_gemm_queued.py on two later leases (validation/h100_owed*/gemm_queued.csv). It draws the
  operands on the GPU and runs the 448 shapes one after another, so the GPU stays at its 700 W limit; each shape's
  20 calls queued between two CUDA events. Below ~1e10 FLOPs these calls still measure the host's issue (8-12 us a
  call), which the stack's launch bound charges separately (cost/launch.py).
- graphed: validation/gpu_graphed.py (validation/h100_graphed/, 2026-11-28), the shapes up to 5e10 FLOPs captured
  back to back in a CUDA graph, beside the same calls queued: validation/graphed.py turns them into the time each
  kernel costs an eager step whose host runs ahead (graph time + the eager launch gap, no host issue).

A training step keeps the GPU at its power limit (harness steps drew 680-690 W, validation/h100_owed2/
power_step.csv), and the same GEMM back to back there runs 8-13 % slower than after an idle (docs/compute.md,
limitations); above ~1e11 FLOPs the queued times are 1.10x the burst ones at 1e12-1e13 FLOPs. The shipped table is
the back-to-back state at every size: one fit (two knots per decade, as the FP8 table) to the graphed points up to
5e10 FLOPs and the queued points above (`back_points`). Until 2026-11-28 the burst table stood below 1.6e11 FLOPs,
where its one-call times held the host's launch: 1.3-4.8x the graphed kernels' eager time (validation/
h100_graphed/README.md). The FP8 table (`[efficiency.gemm_fp8]`, validation/h100_fp8_table.py) is built the same
way, so both GEMM tables describe one state of the GPU.

Held out: the back-to-back curve fitted to the TP-1 and TP-4 shapes predicts the TP-2 and TP-8 ones.
"""
from __future__ import annotations

import csv
import math
import re
import sys
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))
BURST = (ROOT / "h100" / "lent-opt.toml", ROOT / "h100" / "lent2.toml")
BACK = (ROOT / "h100_owed" / "gemm_queued.csv", ROOT / "h100_owed2" / "gemm_queued.csv")
# The presets of a GH100 SXM at its 700 W limit: the lent H100's GEMM tables (this file's bf16, h100_fp8_table.py's
# FP8) are theirs. The H200 SXM and the H800 SXM have the H100 SXM's compute die and 700 W limit (NVIDIA's datasheets:
# the same dense BF16/FP8 peaks, TDP "up to 700 W"); their HBM differs, which GEMMs of these sizes do not feel, and
# the MAMF shape search puts the H200's bf16 GEMMs level with the H100's (stas00/ml-engineering's table: "H200 is
# the same"; kernel_benchmarks.csv). One table for one die and power limit, so that comparing them compares their
# memory and networks, not two measurements in different states of the GPU (the XLA tables they had were burst).
GH100_SXM = ("dgx-h100", "gcp-a3-mega", "dgx-h200", "dgx-h800")
SAME_DIE = {"dgx-h200": "H200 SXM", "dgx-h800": "H800 SXM"}


def same_die_note(preset: str) -> str:
    """The source's last clause for a preset whose GPU is not an H100 but has its compute die (GH100_SXM)."""
    gpu = SAME_DIE.get(preset)
    if not gpu:
        return ""
    return (f"; the {gpu} has the H100 SXM's compute die and 700 W limit (datasheets) and MAMF puts their bf16 "
            "GEMMs level (kernel_benchmarks.csv): the H100's table, validation/h100_gemm_table.py GH100_SXM")


HELD_OUT_TP = ("tp=2", "tp=8")


def burst_table() -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(x, efficiency) of the calibration's bf16 GEMM table: the two leases' fits, the faster per knot."""
    from simulator.spec.hardware import load_hardware

    curves = [load_hardware(str(p)).efficiency_curve("gemm") for p in BURST]
    x = tuple(float(v) for v in curves[0][0])
    assert all(tuple(float(v) for v in c[0]) == x for c in curves), "the two calibrations' knots differ"
    return x, tuple(max(float(c[1][i]) for c in curves) for i in range(len(x)))


def _peak() -> float:
    from simulator.spec.hardware import load_hardware

    return load_hardware("dgx-h100").peak_flops("bf16")


def back_points(*, held_out: bool | None = None) -> list[tuple[float, float]]:
    """(FLOPs, efficiency) of the back-to-back bf16 points: up to graphed.GRAPH_MAX_FLOPS the graphed kernels' eager
    time (graphed.gemm_points: graph time + the eager gap, no host issue), above it the queued calls of both
    leases (GPU-bound there); held_out True / False: only the held-out TP degrees / the others."""
    from graphed import back_to_back

    queued = []
    for path in BACK:
        with open(path) as f:
            queued += [(r["op"], float(r["flops"]), float(r["queued_s"])) for r in csv.DictReader(f)
                       if r["dtype"] == "bf16"]
    p = _peak()
    return [(x, x / t / p) for op, x, t in back_to_back("bf16", queued)
            if held_out is None or any(h in op for h in HELD_OUT_TP) == held_out]


def back_fit(pts=None):
    """The back-to-back curve, two knots per decade (the efficiency rises steeply over 1e9-1e11 FLOPs), as the FP8
    table is fitted (validation/h100_fp8_table.py)."""
    from simulator.calibrate.fit import fit_efficiency_curve

    x, e = zip(*(pts if pts is not None else back_points()))
    return fit_efficiency_curve(list(x), list(e), name="gemm", x_unit="FLOPs per GEMM (2*m*n*k)", source="",
                                per_decade=2.0)


def shipped() -> tuple[tuple[float, ...], tuple[float, ...], tuple[str, ...]]:
    """(x, efficiency, protocol per knot): the back-to-back fit at every knot (`back_points`)."""
    from graphed import GRAPH_MAX_FLOPS

    h = back_fit()
    x = tuple(float(v) for v in h.x)
    return x, tuple(float(v) for v in h.efficiency), tuple("graphed + eager gap" if v <= GRAPH_MAX_FLOPS else "queued"
                                                            for v in x)


SOURCE = ("measured on lent NVIDIA H100 80GB HBM3 SXMs (driver 580.159.04, torch 2.11.0+cu130, CUDA 13.0): "
          "torch.matmul over the calibration's transformer-layer GEMM shapes (hidden 1k-8k x 1k-16k tokens x TP 1-8, "
          "460 points) back to back, the state a training step keeps the GPU in (at its 700 W limit): up to 5e10 "
          "FLOPs the kernels captured in a CUDA graph plus the eager launch gap measured beside them (validation/"
          "gpu_graphed.py, 2026-11-28, validation/h100_graphed/, validation/graphed.py: the kernel's time with no "
          "host issue, which the stack's launch bound holds), above 20 calls queued between CUDA events "
          "(validation/gpu_gemm_queued.py on two leases, 2026-11-27, validation/h100_owed*/gemm_queued.csv; 1.10x "
          "the burst time at 1e12-1e13 FLOPs); one fit, two knots per decade; validation/h100_gemm_table.py "
          "(held-out error: TP-2/TP-8 shapes from a TP-1/TP-4 fit). The calibration's burst table is in "
          "validation/h100/lent-opt.toml; the datasheet-derived table in dgx-h100-datasheet.toml")


def section(preset: str = "dgx-h100") -> str:
    x, e, _ = shipped()
    return ("[efficiency.gemm]\n"
            f"x = [{', '.join(repr(float(v)) for v in x)}]\n"
            f"efficiency = [{', '.join(f'{v:.4f}' for v in e)}]\n"
            'x_unit = "FLOPs per GEMM (2*m*n*k)"\n'
            f'source = "{SOURCE}{same_die_note(preset)}"\n')


_SECTION = re.compile(r"\[efficiency\.gemm\]\n(?:[^\[\n][^\n]*\n)*")


def rewrite_presets(render, presets=GH100_SXM, *, write: bool) -> list[str]:
    """The presets (names) whose TOML text differs from `render(text, preset)`; with `write`, rewritten to it.
    The one loop behind this file's, h100_fp8_table.py's and h100_attention_tables.py's --write and --check."""
    out = []
    for name in presets:
        p = ROOT.parent / "hardware_profiles" / f"{name}.toml"
        text = p.read_text()
        new = render(text, name)
        if new != text:
            out.append(p.name)
            if write:
                p.write_text(new)
    return out


def section_writer(pattern, section_fn):
    """(write, check) of one TOML section in the GH100 SXM presets: `pattern` finds it, `section_fn(preset)` renders
    it; write() rewrites the presets that differ and check() names them (rewrite_presets)."""
    def render(text: str, preset: str) -> str:
        return pattern.sub(lambda _: section_fn(preset), text, count=1)

    return (lambda: rewrite_presets(render, write=True)), (lambda: rewrite_presets(render, write=False))


write, check = section_writer(_SECTION, section)


def comparison_lines() -> list[str]:
    """Markdown: the held-out check and, by decade of FLOPs, the two states and the shipped table."""
    from simulator.calibrate.fit import efficiency_at

    h = back_fit(back_points(held_out=False))
    held = [(x, float(efficiency_at(h.x, h.efficiency, [x])[0]) / e - 1) for x, e in back_points(held_out=True)]
    errs = sorted(abs(v) for _, v in held)
    small = sorted(abs(v) for x, v in held if x < 1e10)
    big = sorted(abs(v) for x, v in held if x >= 1e11)
    bx, be = burst_table()
    sx, se, state = shipped()
    groups: dict[int, list[float]] = {}
    for x, e in back_points():
        groups.setdefault(int(math.floor(math.log10(x))), []).append(e)

    def stats(v):
        return f"{len(v)} points, median {100 * v[len(v) // 2]:.1f} %, max {100 * v[-1]:.1f} %"

    out = [f"Held out (the TP-2 and TP-8 shapes, from a back-to-back fit to the TP-1 and TP-4 ones): {stats(errs)}; "
           f"below 1e10 FLOPs {stats(small)}; from 1e11 FLOPs {stats(big)}.", "",
           "| FLOPs per GEMM | back-to-back points | back to back, measured (median) | burst table | shipped | "
           "shipped / burst time |", "|---|---|---|---|---|---|"]
    for d, v in sorted(groups.items()):
        mid = [10 ** (d + 0.5)]
        b, s = float(efficiency_at(bx, be, mid)[0]), float(efficiency_at(sx, se, mid)[0])
        out.append(f"| 1e{d}-1e{d + 1} | {len(v)} | {median(v):.3f} | {b:.3f} | {s:.3f} | {b / s:.2f} |")
    out += ["", "Knot by knot, the state kept: " + ", ".join(f"{x:.2g} {st}" for x, st in zip(sx, state)) + "."]
    return out


def preset_cli(argv, what: str, write, check, report) -> int:
    """The command line of a script that writes tables into presets: `--check` (exit 1 naming the presets that
    differ), `--write` (the presets rewritten), otherwise `report(argv)`. `what` names the tables in messages."""
    argv = sys.argv[1:] if argv is None else argv
    if "--check" in argv:
        bad = check()
        print(f"{what} " + (f"differ in {', '.join(bad)}: run --write" if bad else "are current"))
        return 1 if bad else 0
    if "--write" in argv:
        print("wrote " + (", ".join(write()) or "nothing"))
        return 0
    report(argv)
    return 0


def main(argv=None) -> int:
    return preset_cli(argv, "[efficiency.gemm] sections", write, check,
                      lambda _: print("\n".join(comparison_lines()) + "\n" + section()))


if __name__ == "__main__":
    sys.exit(main())
