"""The lent H100's and H200's memory-bound kernel tables from the kernels' own time back to back.

    python validation/h100_memory_table.py           # the fits, their residuals and the TOML sections
    python validation/h100_memory_table.py --check   # exit 1 if a preset's [efficiency.memory] differs from them
    python validation/h100_memory_table.py --write   # write the sections into the presets

`parasim calibrate` timed each memory-bound kernel one call at a time (CUDA events around one call, the GPU idle
in between). Below ~100 MB moved that time holds the host's issue of the call (8-20 µs on the lent H100's host:
validation/h100_owed/launch.csv), which an eager stack's launch bound already counts (cost/launch.py).
`validation/gpu_graphed.py` (validation/h100_graphed/, validation/h200_graphed/) times add and SiLU (bf16, 8 KiB-1
GiB inputs) captured back to back in a CUDA graph, with no host issue in the loop, and queued beside it;
validation/graphed.py turns that into the time each kernel costs an eager step whose host runs ahead (graph time +
the eager launch gap, the median of queued − graph over the GPU-bound calls) and keeps the sizes outside the L2's
range (up to 1 MiB moved: the fixed cost; from 128 MiB: the stream from HBM; between, a replayed kernel reads what
the previous replay left in the L2). Those calls are fitted, pooled over the two kernels, to one kernel's time as a
fixed per-kernel cost plus a stream (least squares on relative error):

    t(x) = t0 + x / B,    efficiency(x) = x / (t(x) · HBM bytes/s)

x the bytes one kernel moves. The table holds efficiency(x) at knots two per decade, linear in log10(x) between
them as every preset's table. Until 2026-11-28 the fit was to the queued calls the GPU is slower than the host
issues them (inputs above ~16 MiB, `gpu_bound_points`, still the selection of the reduction, strided and indexed
scripts' queued points and of `stream_rate`): its t0 was an intercept extrapolated from large kernels, 4.14 µs on the
H200 against 3.27 from the graphs.

One fit serves each lent GPU (LEASES: its lease's folder, HBM rate and presets): the H100 (dgx-h100 and
gcp-a3-mega) and the H200 SXM (dgx-h200). The reduction, strided and indexed scripts take their t0 from here.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


class Lease(NamedTuple):
    data: Path  # the lease's folder: memory_queued.csv, launch.csv
    hbm_bytes_per_s: float  # the preset's [gpu] hbm_gb_per_s
    presets: tuple[str, ...]  # the presets that carry this GPU's measured tables
    what: str  # the machine and the data, as the source strings name them


LEASES = {
    "H100": Lease(ROOT / "validation" / "h100_owed", 3.35e12, ("dgx-h100", "gcp-a3-mega"),
                  "the lent H100 80GB HBM3 SXM (2026-11-27; validation/h100_owed/memory_queued.csv, README there)"),
    "H200": Lease(ROOT / "validation" / "h200", 4.8e12, ("dgx-h200",),
                  "the lent H200 SXM 141GB (driver 580.159.04, torch 2.11.0+cu130, 2026-11-28; "
                  "validation/h200/memory_queued.csv, README there)"),
}
DATA, HBM_BYTES_PER_S, PRESETS = LEASES["H100"][:3]  # the H100's, the default of what follows
HOST_BOUND = 1.5  # a queued call above 1.5x the kernel's small-input plateau is the GPU's time
PLATEAU_MAX_BYTES = 2**20  # the plateau: the median of the kernel's queued calls on inputs up to 1 MiB
KNOTS = tuple(10.0 ** (4 + k / 2) for k in range(15))  # 1e4 .. 1e11 bytes moved per kernel


def gpu_bound_points(data: Path = DATA):
    """DataFrame of the queued calls whose time is the GPU's (module docstring): kernel, bytes_moved, queued_s
    (`data`: the lease's folder)."""
    import pandas as pd

    q = pd.read_csv(data / "memory_queued.csv").drop_duplicates(["kernel", "size_bytes"])
    small = q["size_bytes"] <= PLATEAU_MAX_BYTES
    plateau = q[small].groupby("kernel")["queued_s"].median()
    return q[~small & (q["queued_s"] > HOST_BOUND * q["kernel"].map(plateau))].reset_index(drop=True)


def fit_points(gpu: str = "H100") -> tuple:
    """(bytes moved, seconds) arrays the table is fitted to: `gpu`'s graphed add and SiLU calls outside the L2's
    range, each the kernel's eager time back to back (validation/graphed.py memory_points)."""
    import numpy as np
    from graphed import memory_points

    p = memory_points(gpu)
    return (np.array([r["bytes_moved"] for r in p], float), np.array([r["t_eager_s"] for r in p], float))


def fit(gpu: str = "H100") -> tuple[float, float]:
    """(t0 seconds, B bytes/s) of t = t0 + x/B over `fit_points(gpu)`, least squares on t_fit / t - 1."""
    import numpy as np

    x, t = fit_points(gpu)
    (t0, inv_b), *_ = np.linalg.lstsq(np.stack([1.0 / t, x / t], axis=1), np.ones_like(t), rcond=None)
    return float(t0), float(1.0 / inv_b)


def rate_with_t0(x, t, t0: float) -> float:
    """B bytes/s of t = t0 + x/B with t0 given, least squares on relative error ((t0 + x/B) / t = 1)."""
    import numpy as np

    a, b = x / t, 1.0 - t0 / t  # a · (1/B) = b
    return float(1.0 / (np.dot(a, b) / np.dot(a, a)))


def stream_rate(gpu: str = "H100") -> float:
    """B_stream bytes/s of `gpu`: its GPU-bound copy, add and SiLU calls (no reduction) fitted with its memory
    table's t0; the other tables' rates carry to a GPU by its ratio (published_memory_tables.py)."""
    t0 = fit(gpu)[0]
    g = gpu_bound_points(LEASES[gpu].data)
    g = g[g["kernel"].isin(["copy", "add", "silu"])]
    return rate_with_t0(g["bytes_moved"].to_numpy(float), g["queued_s"].to_numpy(float), t0)


def carried(gpu: str, b_h100: float) -> tuple[float, float]:
    """(t0, B) of a table measured on the H100 only (strided, indexed), carried to `gpu`: its memory table's t0 and
    the H100's B x B_stream(gpu) / B_stream(H100), published_memory_tables.py's transfer with `gpu`'s own rate."""
    return fit(gpu)[0], b_h100 * stream_rate(gpu) / stream_rate("H100")


def carried_source(gpu: str, what: str, b_h100: float, script: str) -> str:
    """The source string of `carried`'s table: `what` names the H100 table and its measurement."""
    t0, b = carried(gpu, b_h100)
    lease = LEASES[gpu]
    return (f"carried from the lent H100 to {lease.what}, where this kernel class was not measured: "
            f"B = {what} {b_h100 / 1e12:.2f} TB/s x this GPU's streaming rate {stream_rate(gpu) / 1e12:.2f} TB/s / "
            f"the H100's {stream_rate() / 1e12:.2f} TB/s (GPU-bound queued copy, add and SiLU calls, each fitted "
            f"with its GPU's memory-table t0) = {b / 1e12:.2f} TB/s (assumed: the kernel class keeps its H100 ratio "
            f"to the stream, as validation/published_memory_tables.py assumes for other GPUs); t0 = this GPU's "
            f"memory table's {t0 * 1e6:.2f} us; efficiency = bytes / ((t0 + bytes/B) x "
            f"{lease.hbm_bytes_per_s / 1e12:.3g} TB/s) at two knots per decade; validation/{script}")


def efficiencies(t0: float, b: float, hbm_bytes_per_s: float = HBM_BYTES_PER_S):
    """(knots, efficiencies) of a table t(x) = t0 + x/B: efficiency(x) = x / (t(x) · HBM bytes/s), 4 decimals."""
    return KNOTS, tuple(round(x / ((t0 + x / b) * hbm_bytes_per_s), 4) for x in KNOTS)


def table(gpu: str = "H100") -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(knots, efficiencies) of `gpu`'s [efficiency.memory]."""
    return efficiencies(*fit(gpu), LEASES[gpu].hbm_bytes_per_s)


def tiny_kernels_s(gpu: str = "H100") -> tuple[float, float]:
    """(min, max) seconds of the CUPTI times of `gpu`'s tiny kernels (launch.csv), which the fit never sees."""
    import pandas as pd

    k = pd.read_csv(LEASES[gpu].data / "launch.csv")["kernel_us"] * 1e-6
    return float(k.min()), float(k.max())


def source(gpu: str = "H100") -> str:
    from graphed import eager_gap_s

    t0, b = fit(gpu)
    lease = LEASES[gpu]
    lo, hi = tiny_kernels_s(gpu)
    return (f"measured: {lease.what.split(' (')[0]} (driver 580.159.04, torch 2.11.0+cu130): add and SiLU, bf16, "
            f"8 KiB-1 GiB inputs, captured back to back in a CUDA graph "
            f"and queued beside it (validation/gpu_graphed.py, 2026-11-28, validation/{gpu.lower()}_graphed/): each "
            f"kernel's time in an eager step whose host runs ahead = graph time + the eager launch gap "
            f"{eager_gap_s(gpu, 'memory') * 1e6:.2f} us (validation/graphed.py), the {len(fit_points(gpu)[0])} calls "
            f"moving up to 1 MiB or from 128 MiB (outside the L2's range) fitted as t = t0 + bytes/B, t0 = "
            f"{t0 * 1e6:.2f} us, B = {b / 1e12:.2f} TB/s (the CUPTI times of tiny kernels alone, launch.csv, are "
            f"{lo * 1e6:.1f}-{hi * 1e6:.1f} us); efficiency = bytes / (t x {lease.hbm_bytes_per_s / 1e12:.3g} TB/s) "
            f"at two knots per decade; validation/h100_memory_table.py. The host's issue of each call is the eager "
            f"stacks' launch bound (docs/gpu-measurements.md)")


def table_toml(name: str, x, e, x_unit: str, src: str) -> str:
    """A preset's [efficiency.<name>] section (this script's and h100_strided_table.py's)."""
    return "\n".join([f"[efficiency.{name}]", f"x = [{', '.join(f'{v:.6g}' for v in x)}]",
                      f"efficiency = [{', '.join(f'{v:.4f}' for v in e)}]", f'x_unit = "{x_unit}"',
                      f'source = "{src}"'])


def toml_section(gpu: str = "H100") -> str:
    return table_toml("memory", *table(gpu), "bytes moved by one memory-bound kernel", source(gpu))


def residuals(gpu: str = "H100"):
    """DataFrame of `gpu`'s fitted points with the fit's relative error."""
    import pandas as pd
    from graphed import memory_points

    t0, b = fit(gpu)
    g = pd.DataFrame(memory_points(gpu))
    return g.assign(fit_s=t0 + g["bytes_moved"] / b, error=(t0 + g["bytes_moved"] / b) / g["t_eager_s"] - 1.0)


def presets_differing(table_name: str, x, e, src: str, presets=PRESETS) -> list[str]:
    """The presets (default: the H100's) whose [efficiency.<table_name>] is not (x, e, src) (knots to 1e-5,
    efficiencies to 4 decimals, the source verbatim): the `--check` of the table scripts."""
    import tomllib

    bad = []
    for name in presets:
        d = tomllib.loads((ROOT / "hardware_profiles" / f"{name}.toml").read_text())["efficiency"].get(table_name)
        if (d is None or len(d["x"]) != len(x) or any(abs(a / b - 1.0) > 1e-5 for a, b in zip(d["x"], x))
                or tuple(round(v, 4) for v in d["efficiency"]) != tuple(e) or d["source"] != src):
            bad.append(name)
    return bad


def check() -> list[str]:
    """Presets whose [efficiency.memory] is not their GPU's table."""
    return [p for gpu, lease in LEASES.items()
            for p in presets_differing("memory", *table(gpu), source(gpu), presets=lease.presets)]


def replace_section(preset: str, name: str, section: str) -> bool:
    """Replace [efficiency.<name>] in hardware_profiles/<preset>.toml by `section`; whether the file changed."""
    import re

    p = ROOT / "hardware_profiles" / f"{preset}.toml"
    text = p.read_text()
    pattern = re.compile(rf"\[efficiency\.{re.escape(name)}\]\n(?:[^\[\n][^\n]*\n)*")
    new, n = pattern.subn(lambda m: section + "\n", text, count=1)
    if n != 1:
        raise ValueError(f"{preset}: no [efficiency.{name}] section to replace")
    if new != text:
        p.write_text(new)
    return new != text


def write_sections(name: str, section_fn) -> list[str]:
    """Replace [efficiency.<name>] in every lease's presets by `section_fn(gpu)`; the presets rewritten."""
    return [preset for gpu, lease in LEASES.items() for preset in lease.presets
            if replace_section(preset, name, section_fn(gpu))]


def table_main(argv, doc: str, name: str, script: str, check_fn, report, section_fn=None, write_fn=None) -> int:
    """The command line of a table script: `--check` (exit 1 naming the presets that differ), `--write` (with
    `section_fn(gpu)`: the section written into each lease's presets; or `write_fn()`, the presets rewritten) or
    the report."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args(argv)
    if a.check:
        bad = check_fn()
        for preset in bad:
            print(f"{preset}: [efficiency.{name}] differs from validation/{script}", file=sys.stderr)
        return 1 if bad else 0
    if a.write and (section_fn or write_fn):
        print("wrote", ", ".join(write_fn() if write_fn else write_sections(name, section_fn)) or "nothing")
        return 0
    report()
    return 0


def _report() -> None:
    for gpu, lease in LEASES.items():
        r = residuals(gpu)
        print(f"# {gpu} ({', '.join(lease.presets)})")
        print(r[["kernel", "bytes_moved", "t_eager_s", "fit_s", "error"]].to_string(index=False))
        print(f"median |error| {r['error'].abs().median():.3f}, max {r['error'].abs().max():.3f}\n")
        print(toml_section(gpu) + "\n")


def main(argv=None) -> int:
    return table_main(argv, __doc__, "memory", "h100_memory_table.py", check, _report, toml_section)


if __name__ == "__main__":
    sys.exit(main())
