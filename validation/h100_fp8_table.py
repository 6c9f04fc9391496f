"""The GH100 SXM presets' `[efficiency.gemm_fp8]` (dgx-h100 and the presets of the same die, h100_gemm_table.py
GH100_SXM) from FP8 GEMMs measured on the lent H100, and what the measurement says.

    python validation/h100_fp8_table.py            # the comparison (markdown) and the TOML section
    python validation/h100_fp8_table.py --write    # write the section into those presets
    python validation/h100_fp8_table.py --check    # exit 1 if the preset's section differs from it

Data: `validation/h100_owed/gemm_queued.csv` (`validation/gpu_gemm_queued.py`, README there): the calibration's
GPU grid of transformer-layer GEMM shapes, each timed in one run as a bf16 `torch.matmul` and an FP8
`torch._scaled_mm` (e4m3, per-tensor scales, bf16 out), one call at a time (the calibration's protocol) and
queued (20 back-to-back calls between two CUDA events: the kernel's time and the GPU's gap between kernels,
not the host's issue, which a training step hides and the stack's launch bound models, cost/launch.py).

The table: efficiency = FLOP/s of the queued calls / the preset's dense FP8 peak, fitted with the calibration's
own curve fit (`calibrate.fit.fit_efficiency_curve`: piecewise linear in log10 FLOPs, two knots per decade).
Below ~1e10 FLOPs even queued calls measure the host's issue rate (a `_scaled_mm` call is issued more slowly than
its kernel runs): there, up to 5e10 FLOPs, the kernels timed back to back in a CUDA graph on a later H100 lease
(validation/gpu_graphed.py, validation/h100_graphed/) plus the eager launch gap measured beside them
(validation/graphed.py) stand for the queued calls; until 2026-11-28 the table held the host's time there.
Held out: the curve fitted to the TP-1 and TP-4 shapes predicts the TP-2 and TP-8 ones (other widths, other
FLOP counts); the shipped curve is fitted to all of them. It replaces the FP8 table OpenXLA's B200 kernels
gave by transfer (validation/xla_gemm.py), which these measurements check for the first time.
"""
from __future__ import annotations

import csv
import re
import sys
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent
DATA = ROOT / "h100_owed" / "gemm_queued.csv"
sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT))
from h100_gemm_table import preset_cli, same_die_note, section_writer  # noqa: E402  (the GH100 SXM presets share these tables)
HELD_OUT_TP = ("tp=2", "tp=8")
PER_DECADE = 2.0  # knots per decade: the efficiency rises from 0.07 to 0.63 over 1e10-1e11 FLOPs


def rows() -> list[dict]:
    with open(DATA) as f:
        return [dict(r, flops=float(r["flops"]), one_call_s=float(r["one_call_s"]), queued_s=float(r["queued_s"]))
                for r in csv.DictReader(f)]


def _peak(dtype: str) -> float:
    from simulator.spec.hardware import load_hardware

    return load_hardware("dgx-h100").peak_flops(dtype)


def timed(dtype: str = "fp8", timing: str = "queued_s") -> dict[str, tuple[float, float]]:
    """{op: (FLOPs, seconds)} of the `dtype` rows. With timing "queued_s" (the table's), up to
    graphed.GRAPH_MAX_FLOPS the graphed kernels' eager time stands for the queued calls (graphed.gemm_points: graph
    time + the eager gap, no host issue)."""
    from graphed import back_to_back

    queued = [(r["op"], r["flops"], r[timing]) for r in rows() if r["dtype"] == dtype]
    return {op: (x, t) for op, x, t in (back_to_back(dtype, queued) if timing == "queued_s" else queued)}


def points(dtype: str = "fp8", *, held_out: bool | None = None, timing: str = "queued_s"):
    """(FLOPs, efficiency) of `timed`; held_out True / False: only the held-out TP degrees / the others."""
    p = _peak(dtype)
    return [(x, x / t / p) for op, (x, t) in timed(dtype, timing).items()
            if held_out is None or any(h in op for h in HELD_OUT_TP) == held_out]


def fit(pts):
    from simulator.calibrate.fit import fit_efficiency_curve

    x, e = zip(*pts)
    return fit_efficiency_curve(list(x), list(e), name="gemm_fp8", x_unit="FLOPs per GEMM (2*m*n*k)", source="",
                                per_decade=PER_DECADE)


def _interp(fx, fe, x: float) -> float:
    from simulator.calibrate.fit import efficiency_at

    return float(efficiency_at(list(fx), list(fe), [x])[0])


def held_out_errors(fx, fe) -> list[float]:
    """Relative errors of the curve (fx, fe) on the held-out TP degrees' measured points."""
    return [_interp(fx, fe, x) / e - 1 for x, e in points(held_out=True)]


SOURCE = ("measured: torch._scaled_mm FP8 GEMMs (e4m3 operands, per-tensor fp32 scales, bf16 out) on the lent NVIDIA "
          "H100 80GB HBM3 SXM (driver 580.159.04, torch 2.11.0+cu130, CUDA 13.0), the calibration's transformer-layer "
          "shapes (hidden 1k-8k x 1k-16k tokens x TP 1-8, k and n divisible by 16, 448 shapes) back to back: up to "
          "5e10 FLOPs captured in a CUDA graph plus the eager launch gap measured beside them (validation/"
          "gpu_graphed.py, 2026-11-28, validation/h100_graphed/, validation/graphed.py: the kernel's time with no "
          "host issue, which the stack's launch bound holds), above 20 calls queued between two CUDA events after 5 "
          "warm-up (validation/gpu_gemm_queued.py, 2026-11-27, validation/h100_owed/gemm_queued.csv); "
          "efficiency = FLOP/s / dense FP8 peak, fitted with calibrate.fit (two knots per decade); "
          "validation/h100_fp8_table.py, which reports the held-out error (TP-2/TP-8 shapes from a TP-1/TP-4 fit)")


def section(preset: str = "dgx-h100") -> str:
    f = fit(points())
    return ("[efficiency.gemm_fp8]\n"
            f"x = [{', '.join(f'{v:.6g}' for v in f.x)}]\n"
            f"efficiency = [{', '.join(f'{v:.4f}' for v in f.efficiency)}]\n"
            'x_unit = "FLOPs per GEMM (2*m*n*k)"\n'
            f'source = "{SOURCE}{same_die_note(preset)}"\n')


_SECTION = re.compile(r"\[efficiency\.gemm_fp8\]\n(?:[^\[\n][^\n]*\n)*")


write, check = section_writer(_SECTION, section)  # --write / --check over the GH100 SXM presets


def _by_decade(pairs):
    """{decade label: median of values} of (FLOPs, value) pairs, by the FLOP count's power of ten."""
    import math

    groups: dict[int, list[float]] = {}
    for x, v in pairs:
        groups.setdefault(int(math.floor(math.log10(x))), []).append(v)
    return {f"1e{d}-1e{d + 1}": (median(v), len(v)) for d, v in sorted(groups.items())}


def comparison_lines() -> list[str]:
    """Markdown: the held-out check, the fitted table against the transferred one, FP8 against BF16 on the same
    run, and the one-call protocol against queued calls."""
    import xla_gemm

    fx, fe = fit(points(held_out=False)).x, fit(points(held_out=False)).efficiency
    errs = sorted(abs(v) for v in held_out_errors(fx, fe))
    tx, te = xla_gemm.table("sm_100", "gemm_fp8")[:2]
    tx, te = xla_gemm.transfer(tx, te, peak_source=xla_gemm.arch_peak("sm_100", "gemm_fp8"), peak_target=_peak("fp8"),
                               mamf_ratio=xla_gemm.mamf_fraction("H100-SXM", "gemm_fp8")
                               / xla_gemm.mamf_fraction("B200-SXM", "gemm_fp8"))
    xerr = sorted(abs(_interp(tx, te, x) / e - 1) for x, e in points(held_out=True))
    out = [f"Held out (the TP-2 and TP-8 shapes, {len(errs)} points, from a fit to the TP-1 and TP-4 ones): median "
           f"|error| {100 * errs[len(errs) // 2]:.1f} %, max {100 * errs[-1]:.1f} %. The table it replaces (OpenXLA's "
           f"B200 FP8 kernels moved to the H100 by kernel time and the MAMF ratio, validation/xla_gemm.py) on the same "
           f"points: median |error| {100 * xerr[len(xerr) // 2]:.1f} %, max {100 * xerr[-1]:.1f} %.", ""]
    ship = fit(points())
    t8, t16 = timed("fp8"), timed("bf16")
    speed = [(x, t16[op][1] / t) for op, (x, t) in t8.items() if op in t16]
    proto_b = [(r["flops"], r["one_call_s"] / r["queued_s"]) for r in rows() if r["dtype"] == "bf16"]
    proto_f = [(r["flops"], r["one_call_s"] / r["queued_s"]) for r in rows() if r["dtype"] == "fp8"]
    eff_f, eff_b = _by_decade(points()), _by_decade(points("bf16"))
    sp, pb, pf = _by_decade(speed), _by_decade(proto_b), _by_decade(proto_f)
    trans = {k: _interp(tx, te, 10 ** (int(k.split("-")[0][2:]) + 0.5)) for k in eff_f}
    shipped = {k: _interp(ship.x, ship.efficiency, 10 ** (int(k.split("-")[0][2:]) + 0.5)) for k in eff_f}
    out += ["| FLOPs per GEMM | shapes | FP8 efficiency, back to back (median) | shipped fit at the decade's middle "
            "| transferred table (before) | BF16 efficiency, back to back | FP8 / BF16 speed-up, same shapes "
            "| one call / queued time, BF16 | one call / queued time, FP8 |", "|---|---|---|---|---|---|---|---|---|"]
    for k, (e, n) in eff_f.items():
        out.append(f"| {k} | {n} | {e:.3f} | {shipped[k]:.3f} | {trans[k]:.3f} "
                   f"| {eff_b.get(k, (float('nan'),))[0]:.3f} "
                   f"| {sp[k][0]:.2f} | {pb.get(k, (float('nan'),))[0]:.2f} | {pf[k][0]:.2f} |")
    return out + [""]


def main(argv=None) -> int:
    return preset_cli(argv, "[efficiency.gemm_fp8] sections", write, check,
                      lambda _: print("\n".join(comparison_lines()) + "\n" + section()))


if __name__ == "__main__":
    sys.exit(main())
