"""Issue 23: the fabric fits behind the fitted numbers in hardware_profiles/*.toml, from calibration rows only.

    python benchmarks/collectives_error.py DATA/collectives.csv --derive           # print fits + residuals
    python benchmarks/collectives_error.py DATA/collectives.csv --write-profiles   # write them into the TOML

Fits, from the calibration half of the shared collectives.csv only (collectives_error.is_calibration):
- NVLink5 (HGX B200, NCCL 2.27.7): rows b200_1node_ar_* below nvls_min_bytes and b200_8gpu_ar_8GiB_ring
  -> nvls_min_bytes, nvlink_latency_us, [efficiency.nvlink_ring] of dgx-b200, aws-p6-b200, gb200-nvl72;
- AWS EFA v4 (p6-b200): rows b200_4node_ar_* -> ib_latency_us, [efficiency.network] of aws-p6-b200;
- GCP GPUDirect-TCPXO (A3 Mega): rows gcp_a3mega_2node_ar_* -> the same keys of gcp-a3-mega.

`nvls_min_bytes` is the smallest calibration all-reduce of that GPU generation whose algorithm label says
NCCL ran NVLS (cost/collectives.py `nvls_eligible`). The fit itself is simulator/calibrate/fabric_fit.py.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.calibrate.fabric_fit import FabricFit, Measurement, fit_fabric
from simulator.spec.hardware import load_hardware

PROFILES = Path(__file__).resolve().parent.parent / "hardware_profiles"


def measurements(df: pd.DataFrame, prefix: str) -> list[Measurement]:
    """Calibration rows whose coll_id starts with `prefix`, as fit inputs (load_rows columns)."""
    d = df[df.coll_id.str.startswith(prefix) & (df.split == "calibration")].sort_values("message_bytes")
    return [Measurement(coll_id=r.coll_id, collective=r.collective, n_ranks=int(r.n), ranks_per_node=int(r.k),
                        message_bytes=float(r.message_bytes), time_s=float(r.time_s), algorithm=r.algorithm)
            for r in d.itertuples()]


def nvls_min_bytes(df: pd.DataFrame, prefix: str) -> float:
    """Smallest calibration all-reduce (coll_id prefix) run with NCCL's own choice and labelled NVLS."""
    d = df[df.coll_id.str.startswith(prefix) & (df.split == "calibration") & (df.collective == "all_reduce")
           & (df.algorithm == "auto") & df.algorithm_text.str.startswith("NVLS")]
    return float(d.message_bytes.min())


def fit_all(df: pd.DataFrame) -> list[tuple[FabricFit, dict, tuple[str, ...]]]:
    """The three fits in dependency order: (fit, extra keys written, profiles written)."""
    nmin = nvls_min_bytes(df, "b200_")
    nv_rows = measurements(df, "b200_1node_ar_") + measurements(df, "b200_8gpu_ar_8GiB_ring")
    base = dataclasses.replace(load_hardware("aws-p6-b200"), nvls_min_bytes=nmin)
    ring_rows = {r.coll_id for r in nv_rows if r.algorithm == "ring" or r.message_bytes < nmin}
    nv, prof = fit_fabric(base, nv_rows, name="NVLink5: 8x B200 (AWS p6-b200), NCCL 2.27.7",
                          latency_key="nvlink_latency_us", table="nvlink_ring", table_rows=ring_rows)
    efa, _ = fit_fabric(prof, measurements(df, "b200_4node_ar_"), name="AWS EFA v4: 4x p6-b200, NCCL 2.27.7",
                        latency_key="ib_latency_us", table="network")
    tcpxo, _ = fit_fabric(load_hardware("gcp-a3-mega"), measurements(df, "gcp_a3mega_2node_ar_"),
                          name="GCP GPUDirect-TCPXO: 2x A3 Mega", latency_key="ib_latency_us", table="network")
    return [(nv, {"nvls_min_bytes": int(nmin)}, ("dgx-b200", "aws-p6-b200", "gb200-nvl72")),
            (efa, {}, ("aws-p6-b200",)), (tcpxo, {}, ("gcp-a3-mega",))]


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def patch_key(text: str, key: str, value) -> str:
    """Set the (single) line `key = ...` of a profile's TOML text."""
    new, count = re.subn(rf"^{re.escape(key)} = [^\n]*$", f"{key} = {_num(value)}", text, count=1, flags=re.M)
    if count:
        return new
    return re.sub(r"^(nvls_latency_us = [^\n]*)$", rf"\1\n{key} = {_num(value)}", text, count=1, flags=re.M)


def patch_table(text: str, table: str, x, efficiency) -> str:
    """Set the `x = [...]` and `efficiency = [...]` lines of `[efficiency.<table>]`."""
    head = text.index(f"[efficiency.{table}]\n")
    end = text.find("\n[", head + 1)
    end = len(text) if end < 0 else end
    block = text[head:end]
    block = re.sub(r"^x = \[[^\n]*\]$", "x = [" + ", ".join(_num(v) for v in x) + "]", block, count=1, flags=re.M)
    block = re.sub(r"^efficiency = \[[^\n]*\]$", "efficiency = [" + ", ".join(_num(v) for v in efficiency) + "]",
                   block, count=1, flags=re.M)
    return text[:head] + block + text[end:]


def write_profiles(fits) -> list[Path]:
    """Write every fit's values into its profiles' TOML text (comments and sources kept)."""
    written = []
    for fit, extra, names in fits:
        for name in names:
            path = PROFILES / f"{name}.toml"
            text = patch_key(path.read_text(), fit.latency_key, fit.latency_us)
            for key, value in extra.items():
                text = patch_key(text, key, value)
            path.write_text(patch_table(text, fit.table, fit.x, fit.efficiency))
            load_hardware(name)  # still loads
            written.append(path)
    return written


def fit_summary(fits) -> pd.DataFrame:
    """One row per fit: the values and how well they fit (floor line residuals, time residuals)."""
    rows = []
    for fit, extra, names in fits:
        rows.append({"fabric": fit.name, "profiles": ", ".join(names), "latency_key": fit.latency_key,
                     "latency_us": fit.latency_us, "floor_us": round(fit.floor_us, 1),
                     "floor_rows": ", ".join(fit.floor_rows),
                     "floor_resid_pct": ", ".join(f"{100 * r:+.1f}" for r in fit.floor_residuals),
                     "table": fit.table, "knots": len(fit.x),
                     "also_fitted": ", ".join(f"{k} = {v}" for k, v in extra.items()) or "-",
                     "dropped_warmup": ", ".join(fit.dropped) or "-",
                     "max_abs_time_resid_pct_used_rows": round(100 * max(
                         abs(r) for c, r in fit.residuals if c not in fit.dropped), 1)})
    return pd.DataFrame(rows)


def residual_rows(fits) -> pd.DataFrame:
    """Every calibration row of every fit with its in-sample time residual (t_model - t) / t."""
    return pd.DataFrame([{"fabric": fit.name, "coll_id": cid, "time_resid_pct": f"{100 * r:+.1f}"}
                         for fit, _, _ in fits for cid, r in fit.residuals])


def print_fits(fits) -> None:
    for fit, extra, names in fits:
        print(f"{fit.name}  ->  {', '.join(names)}")
        print(f"  {fit.latency_key} = {fit.latency_us}  (floor {fit.floor_us:.1f} us from {', '.join(fit.floor_rows)};"
              f" line residuals {[round(100 * r, 1) for r in fit.floor_residuals]} %)")
        for k, v in extra.items():
            print(f"  {k} = {v}")
        print(f"  [efficiency.{fit.table}] x = {[int(v) for v in fit.x]}\n    efficiency = {list(fit.efficiency)}")
        print(f"  dropped (warm-up): {list(fit.dropped)}")
        print("  time residuals %: " + ", ".join(f"{c} {100 * r:+.1f}" for c, r in fit.residuals))
        mean = 100 * np.mean([abs(r) for _, r in fit.residuals])
        print(f"  max |residual| {100 * fit.max_abs_residual:.1f} %  (mean {mean:.1f} %)")
