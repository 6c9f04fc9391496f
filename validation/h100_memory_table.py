"""The H100's memory-bound kernel table from the kernels' own time: the queued protocol's GPU-bound calls.

    python validation/h100_memory_table.py           # the fit, its residuals and the TOML section
    python validation/h100_memory_table.py --check   # exit 1 if a preset's [efficiency.memory] differs from it

`parasim calibrate` timed each memory-bound kernel one call at a time (CUDA events around one call, the GPU idle
in between). Below ~100 MB moved that time holds the host's issue of the call (8-20 µs on the lent H100's host:
validation/h100_owed/launch.csv), which an eager stack's launch bound already counts (cost/launch.py) and a
CUDA-graphed or compiled one does not pay per kernel. `validation/h100_owed/memory_queued.csv` times the same
kernels (add, copy, RMSNorm, SiLU; bf16; 64 KiB-1 GiB inputs) 20 calls back to back between two CUDA events: where
the GPU is slower than the host issues (queued time above 1.5 x the kernel's plateau at <= 1 MiB inputs, where
every call takes the host's time), that is the kernel's own time. Those calls are fitted, pooled over the four
kernels, to one kernel's time as a fixed per-kernel cost plus a stream (least squares on relative error):

    t(x) = t0 + x / B,    efficiency(x) = x / (t(x) · HBM bytes/s)

x the bytes one kernel moves. The fitted t0 is checked against the CUPTI times of tiny kernels (launch.csv: a
one-element add 1.2 µs, LayerNorm of 8x1024 2.7 µs, a small linear 3.4 µs), which the fit never sees. The table
holds efficiency(x) at knots two per decade, linear in log10(x) between them as every preset's table.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT / "validation" / "h100_owed"
PRESETS = ("dgx-h100", "gcp-a3-mega")  # the H100 SXM presets that carry the lent H100's measured tables
HBM_BYTES_PER_S = 3.35e12  # H100 SXM HBM3 (dgx-h100.toml [gpu] hbm_gb_per_s)
HOST_BOUND = 1.5  # a queued call above 1.5x the kernel's small-input plateau is the GPU's time
KNOTS = tuple(10.0 ** (4 + k / 2) for k in range(15))  # 1e4 .. 1e11 bytes moved per kernel


def gpu_bound_points(data: Path = DATA):
    """DataFrame of the queued calls whose time is the GPU's (module docstring): kernel, bytes_moved, queued_s
    (`data`: the lease's folder)."""
    import pandas as pd

    q = pd.read_csv(data / "memory_queued.csv").drop_duplicates(["kernel", "size_bytes"])
    plateau = q[q["size_bytes"] <= 2**20].groupby("kernel")["queued_s"].min()
    return q[q["queued_s"] > HOST_BOUND * q["kernel"].map(plateau)].reset_index(drop=True)


def fit() -> tuple[float, float]:
    """(t0 seconds, B bytes/s) of t = t0 + x/B over the GPU-bound points, least squares on t_fit / t - 1."""
    import numpy as np

    g = gpu_bound_points()
    x, t = g["bytes_moved"].to_numpy(float), g["queued_s"].to_numpy(float)
    (t0, inv_b), *_ = np.linalg.lstsq(np.stack([1.0 / t, x / t], axis=1), np.ones_like(t), rcond=None)
    return float(t0), float(1.0 / inv_b)


def rate_with_t0(x, t, t0: float) -> float:
    """B bytes/s of t = t0 + x/B with t0 given, least squares on relative error ((t0 + x/B) / t = 1)."""
    import numpy as np

    a, b = x / t, 1.0 - t0 / t  # a · (1/B) = b
    return float(1.0 / (np.dot(a, b) / np.dot(a, a)))


def efficiencies(t0: float, b: float, hbm_bytes_per_s: float = HBM_BYTES_PER_S):
    """(knots, efficiencies) of a table t(x) = t0 + x/B: efficiency(x) = x / (t(x) · HBM bytes/s), 4 decimals."""
    return KNOTS, tuple(round(x / ((t0 + x / b) * hbm_bytes_per_s), 4) for x in KNOTS)


def table() -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(knots, efficiencies) of [efficiency.memory]."""
    return efficiencies(*fit())


def source() -> str:
    t0, b = fit()
    n = len(gpu_bound_points())
    return (f"measured: the lent H100 80GB HBM3 SXM (2026-11-27; validation/h100_owed/memory_queued.csv, README there): "
            f"add, copy, RMSNorm, SiLU, bf16, 64 KiB-1 GiB inputs, 20 calls queued back to back between two CUDA events; "
            f"the {n} calls slower than the host issues them fitted as one kernel's time t = t0 + bytes/B, t0 = "
            f"{t0 * 1e6:.2f} us, B = {b / 1e12:.2f} TB/s (the CUPTI times of tiny kernels, launch.csv, are 1.2-3.4 us); "
            f"efficiency = bytes / (t x 3.35 TB/s) at two knots per decade; validation/h100_memory_table.py. The kernels' "
            f"own time: the host's issue of each call, which the calibration's one-call timings held below ~100 MB, is "
            f"the eager stacks' launch bound (docs/gpu-measurements.md)")


def table_toml(name: str, x, e, x_unit: str, src: str) -> str:
    """A preset's [efficiency.<name>] section (this script's and h100_strided_table.py's)."""
    return "\n".join([f"[efficiency.{name}]", f"x = [{', '.join(f'{v:.6g}' for v in x)}]",
                      f"efficiency = [{', '.join(f'{v:.4f}' for v in e)}]", f'x_unit = "{x_unit}"',
                      f'source = "{src}"'])


def toml_section() -> str:
    return table_toml("memory", *table(), "bytes moved by one memory-bound kernel", source())


def residuals():
    """DataFrame of the GPU-bound points with the fit's relative error."""
    t0, b = fit()
    g = gpu_bound_points()
    return g.assign(fit_s=t0 + g["bytes_moved"] / b, error=(t0 + g["bytes_moved"] / b) / g["queued_s"] - 1.0)


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
    """Presets whose [efficiency.memory] is not this table."""
    x, e = table()
    return presets_differing("memory", x, e, source())


def table_main(argv, doc: str, name: str, script: str, check_fn, report) -> int:
    """The command line of a table script: `--check` (exit 1 naming the presets that differ) or the report."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    if ap.parse_args(argv).check:
        bad = check_fn()
        for preset in bad:
            print(f"{preset}: [efficiency.{name}] differs from validation/{script}", file=sys.stderr)
        return 1 if bad else 0
    report()
    return 0


def _report() -> None:
    r = residuals()
    print(r[["kernel", "bytes_moved", "queued_s", "fit_s", "error"]].to_string(index=False))
    print(f"median |error| {r['error'].abs().median():.3f}, max {r['error'].abs().max():.3f}\n")
    print(toml_section())


def main(argv=None) -> int:
    return table_main(argv, __doc__, "memory", "h100_memory_table.py", check, _report)


if __name__ == "__main__":
    sys.exit(main())
