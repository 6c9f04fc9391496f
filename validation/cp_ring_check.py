"""Ring context-parallel attention: one rank's kernels measured on an H100 (validation/gpu_cp_attention.py,
validation/h100_cp_unpad/cp_attention.csv) against what parasim charges (cost/compute.py `_attention_times`:
c causal kernel passes of n = s/c queries at η(n), one rank's share of the FLOPs, no merge).

    python validation/cp_ring_check.py          # the tables (markdown)

ring (measured) = diag + (c - 1) · max(kv_half, q_half), forward and backward; merge = (c - 1) times the eager
replica of the per-step merge (forward: TE fuses it into one kernel, so an upper bound; backward: the dq and
dkv adds, single kernels in both). cudnn rows are read with the profile's `cudnn` tables (the megatron stack's
kernel), flash rows with `flash2` (published FlashAttention-2 charts; torch SDPA's flash backend is that kernel).
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MEASURED = ROOT / "validation" / "h100_cp_unpad" / "cp_attention.csv"
KERNEL = {"cudnn": "cudnn", "flash": "flash2"}


def table(path=MEASURED, cps=(2, 8)) -> list[dict]:
    import pandas as pd

    from simulator.cost.attention import attention_efficiency, flash_occupancy
    from simulator.spec.hardware import load_hardware

    hw = load_hardware("dgx-h100")
    peak = hw.peak_flops("bf16")
    m = pd.read_csv(path)
    att = m[m.backend.isin(list(KERNEL))]
    rows = []
    for (backend, n, h), g in att[att.piece == "diag"].groupby(["backend", "q_len", "heads"], sort=False):
        piece = {p: m[(m.backend == backend) & (m.heads == h) & (m.piece == p)
                      & (m.q_len == (n // 2 if p == "q_half" else n))].iloc[0] for p in ("diag", "kv_half", "q_half")}
        merge = m[m.piece.str.startswith("merge") & (m.heads == h) & m.q_len.isin([n, n // 2])
                  & (m.q_len + m.kv_len == n + n // 2)]
        d = int(g.head_dim.iloc[0])
        eff_f, eff_b = attention_efficiency(hw, KERNEL[backend], d, float(n))
        for c in cps:
            occ = flash_occupancy(1, h, n * c, tp=1, cp=c, ring=True, sm_count=hw.sm_count, head_dim=d)
            fl = 2.0 * n * n * h * d  # one step's forward FLOPs (a causal n x n = a non-causal half step)
            model_f, model_b = c * fl / (peak * eff_f * occ), c * 2.5 * fl / (peak * eff_b * occ)
            ring_f = piece["diag"].fwd_s + (c - 1) * max(piece["kv_half"].fwd_s, piece["q_half"].fwd_s)
            ring_b = piece["diag"].bwd_s + (c - 1) * max(piece["kv_half"].bwd_s, piece["q_half"].bwd_s)
            rows.append(dict(backend=backend, queries=n, heads=h, cp=c, model_fwd_ms=float(model_f) * 1e3,
                             ring_fwd_ms=ring_f * 1e3, model_bwd_ms=float(model_b) * 1e3, ring_bwd_ms=ring_b * 1e3,
                             fwd_ratio=float(model_f) / ring_f, bwd_ratio=float(model_b) / ring_b,
                             merge_fwd_ms=(c - 1) * merge.fwd_s.max() * 1e3,
                             merge_bwd_ms=(c - 1) * merge.bwd_s.max() * 1e3))
    return rows


def merge_table(path=ROOT / "validation" / "h100_cp_unpad" / "cp_merge.csv") -> list[dict]:
    """torch's ring merge, copies and gradient accumulation measured on an H100 (validation/gpu_cp_merge.py: the
    kernels beside the attention kernels of one rank's forward and backward) against cost/cp_merge.py's "torch"
    bytes timed with the dgx-h100 memory tables, as the estimate times them."""
    import pandas as pd

    from simulator.cost.cp_merge import ring_merge_bytes
    from simulator.cost.memory_ops import _memory_time
    from simulator.spec.hardware import load_hardware

    hw = load_hardware("dgx-h100")
    rows = []
    for _, r in pd.read_csv(path).drop_duplicates(["cp", "heads", "kv_heads", "queries"]).iterrows():
        tokens = float(r.queries)
        by = ring_merge_bytes("torch", q_elems=tokens * r.heads * r.head_dim, kv_elems=tokens * r.kv_heads * r.head_dim,
                              cp=r.cp, e=2.0, lse_elems=tokens * r.heads)
        steps = max(r.cp - 1, 1)
        f = float(_memory_time(by["forward"], by["forward_kernels"], hw)
                  + _memory_time(by["forward_strided"], steps, hw, "memory_strided")
                  + _memory_time(by["forward_lse"], by["lse_kernels"], hw))
        b = float(_memory_time(by["backward"], by["backward_kernels"], hw))
        rows.append(dict(cp=int(r.cp), heads=int(r.heads), kv_heads=int(r.kv_heads), queries=int(r.queries),
                         measured_fwd_ms=r.fwd_other_s * 1e3, predicted_fwd_ms=f * 1e3, fwd_ratio=f / r.fwd_other_s,
                         measured_bwd_ms=r.bwd_other_s * 1e3, predicted_bwd_ms=b * 1e3, bwd_ratio=b / r.bwd_other_s,
                         attention_ms=(r.fwd_attention_s + r.bwd_attention_s) * 1e3))
    return rows


def main() -> int:
    print("| kernel | queries per rank | heads | CP | parasim fwd ms | ring fwd ms | ratio | parasim bwd ms "
          "| ring bwd ms | ratio | merge fwd ms (eager) | merge bwd ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in table():
        print(f"| {r['backend']} | {r['queries']} | {r['heads']} | {r['cp']} | {r['model_fwd_ms']:.3f} "
              f"| {r['ring_fwd_ms']:.3f} | {r['fwd_ratio']:.2f} | {r['model_bwd_ms']:.3f} | {r['ring_bwd_ms']:.3f} "
              f"| {r['bwd_ratio']:.2f} | {r['merge_fwd_ms']:.3f} | {r['merge_bwd_ms']:.3f} |")
    print()
    print("| CP | heads | K/V heads | queries per rank | merge fwd ms measured | predicted | ratio | bwd ms measured "
          "| predicted | ratio | attention kernels fwd + bwd ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in merge_table():
        print(f"| {r['cp']} | {r['heads']} | {r['kv_heads']} | {r['queries']} | {r['measured_fwd_ms']:.2f} "
              f"| {r['predicted_fwd_ms']:.2f} | {r['fwd_ratio']:.2f} | {r['measured_bwd_ms']:.2f} "
              f"| {r['predicted_bwd_ms']:.2f} | {r['bwd_ratio']:.2f} | {r['attention_ms']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
