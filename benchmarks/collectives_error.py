"""Collective cost model vs measured nccl-tests / torch.distributed bandwidths.

    python benchmarks/collectives_error.py DATA/collectives.csv            # print the error table
    python benchmarks/collectives_error.py DATA/collectives.csv --write docs/collectives.md
    python benchmarks/collectives_error.py DATA/collectives.csv --derive   # calibration numbers

    python benchmarks/collectives_error.py DATA/collectives.csv --write-profiles  # fabric fits -> TOML

The CSV is the shared measured-data file (`collectives.csv`: system, collective, n_gpus, nodes,
message_bytes, busbw_GBps, time_us, ...). Rows are split up front into CALIBRATION rows, from which the
efficiency tables and latencies in `hardware_profiles/*.toml` were derived (`--derive` recomputes
them; the fabric fits of issue 23 are in collectives_fabrics.py), and HELD-OUT rows, which were never
used to set a number and on which the error is reported. The measurement is the row's time: `time_us`
where the source printed it (nccl-tests' own column), else busbw -> time (busbw carries two decimals).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's simulator, not an installed copy
from simulator.cost import collectives as C  # noqa: E402
from simulator.spec.hardware import load_hardware  # noqa: E402

# ---- which rows set numbers, and how --------------------------------------------------------
CALIBRATION_PREFIXES = (
    "a100_8gpu_ar_",            # A100 ring: nvlink latency (2 smallest rows) + eta_nvlink_ring(M) shape
    "h200_8gpu_ar_torch_",      # NVLS rows (>= 2 MiB): nvls latency (2 smallest) + eta_nvls(M) shape
    "b200_8gpu_ar_8GiB_",       # B200 large-message ring and NVLS plateaus
    "mi300x_8gpu_ar_4GiB",      # MI300X 8-GPU xGMI plateau
)
# the H200 torch rows <= 1 MiB ran Ring/LL and were NOT used: they stay held-out
CALIBRATION_EXCLUDE = re.compile(r"h200_8gpu_ar_torch_(32|64|128|256|512)KiB|h200_8gpu_ar_torch_1MiB")
# Sweeps of systems that had no calibration row (issue 23): every second size calibrates (log2 M even:
# 64 KiB, 256 KiB, 1 MiB, 4 MiB, ...), the sizes between are held out. Their fabrics' latency and size
# curve are fitted on the first half only (collectives_fabrics.py).
INTERLEAVED_PREFIXES = ("b200_1node_ar_", "b200_4node_ar_", "gcp_a3mega_2node_ar_")


def is_calibration(coll_id: str, message_bytes: float) -> bool:
    if coll_id.startswith(INTERLEAVED_PREFIXES):
        return int(round(np.log2(message_bytes))) % 2 == 0
    return coll_id.startswith(CALIBRATION_PREFIXES) and not CALIBRATION_EXCLUDE.fullmatch(coll_id)


def _force(algorithm_text: str) -> str:
    """Algorithm the measurement ran with when it was forced; 'auto' when NCCL chose."""
    a = str(algorithm_text)
    if "NCCL_NVLS_ENABLE=0" in a or "forced NCCL_ALGO=allreduce:ring" in a:
        return "ring"
    if "NVLSTree (forced)" in a:
        return "nvls"
    return "auto"


def _profile_for(row):
    """Preset matching the measured system (plus the documented deviations)."""
    cid = row.coll_id
    if cid.startswith("a100_"):
        return load_hardware("dgx-a100-80g"), "dgx-a100-80g"
    if cid.startswith(("h200_", "p5en_")):
        return load_hardware("dgx-h200"), "dgx-h200"  # p5en: 8x H200, 3200 Gb/s EFA per node
    if cid.startswith("b200_"):
        return load_hardware("aws-p6-b200"), "aws-p6-b200"  # 8x B200, 8x 400 Gb/s EFA v4
    if cid.startswith("gcp_a3mega_"):
        return load_hardware("gcp-a3-mega"), "gcp-a3-mega"  # 8x H100, 8x 200 Gb/s GPUDirect-TCPXO
    if cid.startswith("mi300x_"):
        return load_hardware("mi300x"), "mi300x"
    return None, None


_COLL = {"all_reduce": C.all_reduce_s, "all_gather": C.all_gather_s, "reduce_scatter": C.reduce_scatter_s}


def _measured_time_s(r, coll: str, n: int) -> float:
    """Seconds of the row: its `time_us` when given, else busbw -> algbw -> time (nccl-tests definitions)."""
    t = pd.to_numeric(r.time_us, errors="coerce")
    if t > 0:
        return float(t) * 1e-6
    return float(C.bus_factor(coll, n) if coll != "p2p" else 1.0) * r.M / r.busbw


def load_rows(csv_path) -> pd.DataFrame:
    """Rows with a numeric message size, a time (or busbw), a group shape and a preset to compare against."""
    d = pd.read_csv(csv_path)
    d = d[pd.to_numeric(d.message_bytes, errors="coerce").notna()].copy()
    d["M"] = d.message_bytes.astype(float)
    d["busbw"] = pd.to_numeric(d.busbw_GBps, errors="coerce") * 1e9
    d = d[(d.busbw > 0) | (pd.to_numeric(d.time_us, errors="coerce") > 0)]
    out = []
    for _, r in d.iterrows():
        prof, label = _profile_for(r)
        coll = "p2p" if str(r.collective).startswith("sendrecv") else r.collective
        if prof is None or (coll not in _COLL and coll != "p2p"):
            continue
        n = int(r.n_gpus)
        k = n if r.nodes == 1 else int(r.gpus_per_node)
        alg = _force(r.algorithm)
        t_meas = _measured_time_s(r, coll, n)
        factor = 1.0 if coll == "p2p" else float(C.bus_factor(coll, n))
        t = float(C.p2p_s(prof, r.M, 2, 2) if coll == "p2p" else _COLL[coll](prof, r.M, n, k, alg))
        out.append({
            "coll_id": r.coll_id, "profile": label, "collective": coll, "n": n, "k": k, "nodes": int(r.nodes),
            "message_bytes": r.M, "algorithm": alg, "algorithm_text": str(r.algorithm), "trust": r.trust,
            "split": "calibration" if is_calibration(r.coll_id, r.M) else "held-out",
            "time_s": t_meas, "predicted_time_s": t,
            "measured_busbw_GBps": factor * r.M / t_meas / 1e9, "predicted_busbw_GBps": factor * r.M / t / 1e9,
            "picked": (str(C.best_algorithm(prof, coll, r.M, n, k)) if (alg == "auto" and coll in _COLL) else alg),
        })
    df = pd.DataFrame(out)
    df["error_pct"] = 100.0 * (df.predicted_busbw_GBps / df.measured_busbw_GBps - 1.0)
    return df


SIZE_BINS = [0, 2**16, 2**20, 2**26, 2**30, np.inf]
SIZE_LABELS = ["< 64 KiB", "64 KiB - 1 MiB", "1 MiB - 64 MiB", "64 MiB - 1 GiB", ">= 1 GiB"]


def error_table(df: pd.DataFrame, by=("split",)) -> pd.DataFrame:
    """Error of predicted busbw (= measured time / predicted time - 1) by `by` and message-size band: rows,
    median |err|, max |err|, mean signed error (positive: the model is too fast)."""
    df = df.assign(size_range=pd.cut(df.message_bytes, SIZE_BINS, labels=SIZE_LABELS, right=False),
                   abs_err=df.error_pct.abs())
    g = df.groupby([*by, "size_range"], observed=True)
    return pd.DataFrame({
        "rows": g.size(),
        "median_abs_err_pct": g.abs_err.median().round(1),
        "max_abs_err_pct": g.abs_err.max().round(1),
        "mean_signed_err_pct": g.error_pct.mean().round(1),
    }).reset_index()


# ---- calibration (the derivation of the numbers in hardware_profiles/*.toml) ------------------
def _hockney(m, t):
    """Latency and asymptotic rate of the line through the two smallest (M, t) points."""
    slope = (t[1] - t[0]) / (m[1] - m[0])
    return t[0] - slope * m[0], 1.0 / slope


def derive(csv_path) -> dict:
    """Recompute the calibrated numbers from the CALIBRATION rows only.

    - A100 ring (8 GPUs, 300 GB/s): latency L from the two smallest sizes; alpha = L / (2(n-1));
      eta_ring(M) = 2(n-1)/n * M / (B * (t - L)).
    - H200 NVLS (8 GPUs, 450 GB/s; rows that ran NVLS): latency L_nvls from the two smallest;
      eta_nvls(M) = M / (B * (t - L_nvls)) with t = M / algbw.
    - Plateaus: B200 ring 682.2/900 and NVLS algbw (838 * 8/14)/900 at 8 GiB; MI300X 312.9/448.
    """
    d = pd.read_csv(csv_path)
    a = d[d.coll_id.str.startswith("a100_8gpu_ar_")].copy()
    a["M"] = a.message_bytes.astype(float)
    a = a.sort_values("M")
    m, t = a.M.to_numpy(), a.time_us.to_numpy() * 1e-6
    L, _ = _hockney(m, t)
    eta_ring = 2 * 7 / 8 * m / (300e9 * (t - L))
    h = d[d.coll_id.str.startswith("h200_8gpu_ar_torch_") & d.algorithm.str.startswith("NVLS")].copy()
    h["M"] = h.message_bytes.astype(float)
    h = h.sort_values("M")
    mh = h.M.to_numpy()
    th = mh / (h.algbw_GBps.astype(float).to_numpy() * 1e9)
    Ln, _ = _hockney(mh, th)
    eta_nvls = mh / (450e9 * (th - Ln))
    b = d.set_index("coll_id")
    return {
        "nvlink_latency_us": L / 14 * 1e6,
        "nvlink_ring": (m, eta_ring),
        "nvls_latency_us": Ln * 1e6,
        "nvls": (mh, eta_nvls),
        "b200_ring_plateau": float(b.loc["b200_8gpu_ar_8GiB_ring", "busbw_GBps"]) / 900,
        "b200_nvls_plateau": float(b.loc["b200_8gpu_ar_8GiB_default", "busbw_GBps"]) * 8 / 14 / 900,
        "mi300x_ring_plateau": float(b.loc["mi300x_8gpu_ar_4GiB", "busbw_GBps"]) / 448,
    }


def _markdown(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in r) + " |")
    return "\n".join(lines)


def _rows_table(df: pd.DataFrame) -> pd.DataFrame:
    rows = df[["split", "coll_id", "profile", "collective", "n", "nodes", "message_bytes", "algorithm", "picked",
               "measured_busbw_GBps", "predicted_busbw_GBps", "error_pct"]].copy()
    for c in ("measured_busbw_GBps", "predicted_busbw_GBps"):
        rows[c] = [float(f"{v:.4g}") if v < 10 else round(v, 1) for v in rows[c]]
    rows["error_pct"] = rows.error_pct.round(1)
    rows["message_bytes"] = rows.message_bytes.astype(np.int64)
    return rows


def generated_block(df: pd.DataFrame, fits) -> str:
    """The markdown between the GENERATED markers of docs/collectives.md."""
    import collectives_fabrics as F

    held = df[df.split == "held-out"]
    parts = [("Error by size band", error_table(df)),
             ("Held-out error by collective", error_table(held, by=("collective",))),
             ("Held-out error by system", error_table(held, by=("profile", "nodes"))),
             ("Fabric fits (calibration rows only; collectives_fabrics.py)", F.fit_summary(fits)),
             ("Fit residuals, every calibration row of a fit", F.residual_rows(fits)),
             ("Every row", _rows_table(df))]
    body = "\n\n".join(f"### {title}\n\n{_markdown(t)}" for title, t in parts)
    return f"<!-- BEGIN GENERATED by benchmarks/collectives_error.py -->\n\n{body}\n\n<!-- END GENERATED -->"


def main(argv=None):
    import collectives_fabrics as F

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="collectives.csv (shared measured data)")
    ap.add_argument("--write", help="write the tables into this markdown file between the markers")
    ap.add_argument("--derive", action="store_true", help="print the calibrated numbers and the fabric fits")
    ap.add_argument("--write-profiles", action="store_true", help="write the fabric fits into hardware_profiles/")
    ap.add_argument("--rows", action="store_true", help="print every row")
    args = ap.parse_args(argv)
    df = load_rows(args.csv)
    if args.derive:
        for k, v in derive(args.csv).items():
            if isinstance(v, tuple):
                print(f"{k}: x = {[int(x) for x in v[0]]}\n  efficiency = {[round(float(e), 4) for e in v[1]]}")
            else:
                print(f"{k}: {v:.4f}")
        F.print_fits(F.fit_all(df))
        return 0
    if args.write_profiles:
        for path in dict.fromkeys(F.write_profiles(F.fit_all(df))):
            print(f"wrote {path}")
        df = load_rows(args.csv)
    pd.set_option("display.width", 200)
    print(error_table(df).to_string(index=False))
    if args.rows:
        print(df.to_string(index=False))
    if args.write:
        path = Path(args.write)
        block = generated_block(df, F.fit_all(df))
        path.write_text(re.sub(r"<!-- BEGIN GENERATED.*?<!-- END GENERATED -->", lambda _: block, path.read_text(),
                               flags=re.S))
    return 0


if __name__ == "__main__":
    sys.exit(main())
