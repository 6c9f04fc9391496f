"""The fallback rate of GEMMs off the 16-byte alignment, fitted in the open from the lent H200's kernels.

    python validation/unaligned_gemm.py          # print the fit, its held-out error and the aligned neighbours

Input: validation/h200/unaligned_gemm.csv (validation/gpu_unaligned_gemm.py on the lent H200 SXM; README there):
the materialised attention's batched GEMMs at misaligned head dims 108, 150, 450 beside aligned 112, 152, 448 (and
216, 224, 128), and linears with a misaligned N (50257) or K (4100) beside 50304 / 4096, fp16 and bf16, each timed
as 20 calls queued back to back (the protocol of the H100 GEMM tables). Efficiency = useful FLOPs / (queued time ×
dense peak 989.4 TFLOP/s).

The fit (simulator/cost/alignment.py FALLBACK_EFFICIENCY) is the median efficiency of the 12 misaligned attention
rows (the BLOOM case); the 4 misaligned linear rows are held out and reported as predicted / measured time of
`alignment.fallback_time_s` applied to their measured aligned neighbour.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CSV = ROOT / "validation" / "h200" / "unaligned_gemm.csv"
PEAK_FLOPS_PER_S = 989.4e12  # H200 SXM dense fp16/bf16 (hardware_profiles/dgx-h200.toml)
# (misaligned, aligned neighbour) per kind: the head dim for attention, (N, K) for the linear
NEIGHBOURS = {108: 112, 150: 152, 450: 448}
LINEAR_NEIGHBOURS = {(50257, 1024): (50304, 1024), (4096, 4100): (4096, 4096)}


def load():
    import pandas as pd

    d = pd.read_csv(CSV)
    return d.assign(eff=d["flops"] / (d["queued_s"] * PEAK_FLOPS_PER_S))


def fit(d=None) -> float:
    """The fallback efficiency: the median over the misaligned attention rows."""
    d = load() if d is None else d
    return float(d[(d["what"] == "attention") & ~d["aligned"]]["eff"].median())


def _neighbour(d, row):
    if row["what"] == "attention":
        hd = NEIGHBOURS[int(row["head_dim"])]
        sel = (d["what"] == "attention") & (d["head_dim"] == hd) & (d["pass"] == row["pass"])
    else:
        n, k = LINEAR_NEIGHBOURS[(int(row["n"]), int(row["k"]))]
        sel = (d["what"] == "linear") & (d["n"] == n) & (d["k"] == k)
    return d[sel & (d["dtype"] == row["dtype"])].iloc[0]


def predictions(d=None):
    """Per misaligned row: measured time, its aligned neighbour's time scaled to the row's FLOPs (what parasim
    times it at without the rule), and `fallback_time_s` of that (with the rule); ratios to the measurement."""
    import pandas as pd

    from simulator.cost.alignment import fallback_time_s

    d = load() if d is None else d
    rows = []
    for _, r in d[~d["aligned"]].iterrows():
        nb = _neighbour(d, r)
        as_aligned = float(nb["queued_s"]) * float(r["flops"]) / float(nb["flops"])
        pred = float(fallback_time_s(as_aligned, float(r["flops"]), PEAK_FLOPS_PER_S, True))
        rows.append({"what": r["what"], "dtype": r["dtype"], "passes": r["pass"],
                     "shape": f"hd {int(r['head_dim'])}" if r["what"] == "attention" else
                     f"{int(r['m'])}x{int(r['n'])}x{int(r['k'])}",
                     "measured_s": float(r["queued_s"]), "slowdown": float(r["queued_s"]) / as_aligned,
                     "as_aligned_ratio": as_aligned / float(r["queued_s"]),
                     "predicted_ratio": pred / float(r["queued_s"]),
                     "held_out": r["what"] != "attention"})
    return pd.DataFrame(rows)


def lines() -> list[str]:
    d = load()
    p = predictions(d)
    out = [f"fallback efficiency (median of {int(((d['what'] == 'attention') & ~d['aligned']).sum())} misaligned "
           f"attention rows): {fit(d):.4f} of the dense peak; misaligned rows span "
           f"{d[~d['aligned']]['eff'].min():.3f}-{d[~d['aligned']]['eff'].max():.3f}", "",
           "| GEMM | dtype | pass | slower than aligned | as aligned: pred/meas | with the rule: pred/meas "
           "| held out |",
           "|---|---|---|---|---|---|---|"]
    for x in p.itertuples():
        out.append(f"| {x.what} {x.shape} | {x.dtype} | {x.passes} | "
                   f"{x.slowdown:.2f}x | {x.as_aligned_ratio:.3f} | {x.predicted_ratio:.3f} | "
                   f"{'yes' if x.held_out else 'no'} |")
    return out


def main() -> int:
    print("\n".join(lines()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
