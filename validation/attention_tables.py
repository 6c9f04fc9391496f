"""Per-kernel attention efficiency tables for the hardware profiles, from published kernel benchmarks.

    python validation/attention_tables.py [../shared/data/kernel_benchmarks.csv]

Reads the published attention microbenchmarks (FlashAttention-2/3 papers' and README charts: TFLOP/s
by kernel, GPU, causal or not, head dim, sequence length, at full occupancy: batch x sequence =
16k tokens, heads x head dim = 2048) and prints `[efficiency.attention_<kernel>]` and
`[efficiency.attention_bwd_<kernel>]` TOML sections for causal work (training attention is causal) at
head dim 128, and `..._hd<d>` sections at the other head dims the charts show (cost/attention.py),
efficiency = TFLOP/s / the GPU's dense fp16/bf16 peak, in the FlashAttention FLOP convention that
cost/compute.py reads (forward 4·b·h·s²·d halved for causal; backward 2.5 x forward):
- forward: the causal forward rows;
- backward, where the source gives forward+backward (3.5 x forward FLOPs over the total time) and
  forward: bwd TFLOP/s = 2.5 / (3.5 / fwd_bwd − 1 / fwd);
- FlashAttention-3's backward (published without a causal mask only): its non-causal backward x the
  causal / non-causal ratio of its own forward at the same length (stated in the table's source).
- `triton-pre-mlir` on the H100 (llm-foundry's MPT attn_impl='triton': the 2022 Triton FlashAttention on
  the pre-MLIR Triton fork, which emits Ampere mma.sync code on sm_90, no Hopper wgmma): no H100 chart
  shows it, so its A100 rate (the FlashAttention-2 chart's Triton, the A100 presets' `triton` tables) is
  moved to the H100 by the speed-up the charted Ampere-code kernels get there at the same head dim and
  length, the mean of FlashAttention-1's and -2's H100/A100 TFLOP/s ratios (1.57-1.79 over the charts):
  rate_H100 = rate_A100_triton x mean(FA1, FA2 H100/A100) [derived] (`_triton_pre_mlir_h100`).
No end-to-end run is used. The printed sections are pasted into hardware_profiles/*.toml.
"""
from __future__ import annotations

import csv
import sys
from collections import defaultdict
from pathlib import Path

PEAK = {"H100-SXM5-80GB": 989.4, "A100-SXM4-80GB": 312.0}  # dense fp16/bf16 TFLOP/s (NVIDIA datasheets)
FA3_BWD_NONCAUSAL = {512: 316, 1024: 424, 2048: 501, 4096: 542, 8192: 559, 16384: 561}  # Shah et al. 2024 Fig. 6
FA3_SRC = "FlashAttention-3 paper (Shah et al. 2024, arXiv 2407.08608) Fig. 6, hdim 128, no causal mask"


def read(path):
    t = defaultdict(dict)
    src = {}
    for r in csv.DictReader(open(path)):
        if r["kind"] != "attention" or not r["head_dim"] or not r["seq_len"] or r["dtype"] != "fp16":
            continue
        key = (r["gpu"], r["kernel"], r["causal"], r["direction"], int(r["head_dim"]))
        t[key][int(r["seq_len"])] = float(r["tflops"])
        src[key] = f"{r['source']}; {r['locator']}"
    return t, src


def _triton_pre_mlir_h100(t, src):
    """The H100 sections of `triton-pre-mlir` (module docstring), causal, head dims 128 and 64: both passes at
    the A100 Triton fwd+bwd rate times the mean FA1/FA2 H100-over-A100 ratio at the same length."""
    a, h = "A100-SXM4-80GB", "H100-SXM5-80GB"
    for d in (128, 64):
        tri = t.get((a, "triton", "true", "fwd+bwd", d), {})
        ratios = [{s: t[(h, k, "true", "fwd+bwd", d)][s] / t[(a, k, "true", "fwd+bwd", d)][s]
                   for s in t.get((h, k, "true", "fwd+bwd", d), {}) if s in t.get((a, k, "true", "fwd+bwd", d), {})}
                  for k in ("flash1", "flash2")]
        xs = sorted(s for s in tri if all(s in r for r in ratios))
        if not xs:
            continue
        rate = {s: tri[s] * sum(r[s] for r in ratios) / len(ratios) for s in xs}
        spread = [r[s] for r in ratios for s in xs]
        how = (f"[derived] the A100 Triton FlashAttention's causal fwd+bwd rate "
               f"({src[(a, 'triton', 'true', 'fwd+bwd', d)]}) x the mean H100/A100 ratio of flash1 and flash2 at the same length ({min(spread):.2f}-"
               f"{max(spread):.2f}; {src[(h, 'flash2', 'true', 'fwd+bwd', d)]}): pre-MLIR Triton emits Ampere "
               f"mma.sync code on sm_90 (validation/attention_tables.py); both passes at that rate")
        suffix = "" if d == 128 else f"_hd{d}"
        for table in ("attention", "attention_bwd"):
            yield (f"[efficiency.{table}_triton-pre-mlir{suffix}]\nx = {xs}\nefficiency = "
                   f"[{', '.join(f'{rate[x] / PEAK[h]:.3f}' for x in xs)}]\n"
                   f"x_unit = \"sequence length (keys per query), head dim {d}, causal\"\n"
                   f"source = \"{how.replace(chr(34), chr(39))}; / {PEAK[h]} TFLOP/s dense peak; "
                   f"fp16 benchmarks used for bf16\"\n")


def sections(path):
    t, src = read(path)
    out = [("H100-SXM5-80GB", text) for text in _triton_pre_mlir_h100(t, src)]
    for gpu, peak in PEAK.items():
        kernels = sorted({k for (g, k, _, _, _) in t if g == gpu})
        for k in kernels:
            for d in sorted({hd for (g, kk, _, _, hd) in t if g == gpu and kk == k}, key=lambda x: (x != 128, x)):
                out += [(gpu, text) for text in _kernel_sections(t, src, gpu, peak, k, d)]
    return out


def _kernel_sections(t, src, gpu, peak, k, d):
    """The TOML sections of kernel `k` at head dim `d` on `gpu` (module docstring). PyTorch's standard
    attention (`sdpa-math`: QKᵀ batched GEMM, softmax, A·V) becomes the `unfused` kernel's tables from its
    non-causal rows: materialised attention computes the whole s² score matrix whatever the mask (the
    causal rows add the benchmark's own mask-building passes), in the FLOP convention of the full matrix."""
    name, causal = ("unfused", "false") if k == "sdpa-math" else (k, "true")
    fwd, fb = t.get((gpu, k, causal, "fwd", d)), t.get((gpu, k, causal, "fwd+bwd", d))
    hd = f"hdim {d}"
    at = "" if d == 128 else f"{hd}, "  # (the head dim 128 sections' sources are unchanged)
    how = "causal" if causal == "true" else "non-causal (full s² scores)"
    tables = []
    if fwd:
        tables.append(("attention", fwd, f"{k} {how} forward, {hd}, {src[(gpu, k, causal, 'fwd', d)]}"))
    if fwd and fb:
        common = sorted(set(fwd) & set(fb))
        bwd = {s: 2.5 / (3.5 / fb[s] - 1.0 / fwd[s]) for s in common}
        tables.append(("attention_bwd", bwd, f"{k} {how} backward = 2.5 / (3.5 / fwd+bwd - 1 / fwd) from "
                                             f"{src[(gpu, k, causal, 'fwd+bwd', d)]}"))
    elif fb and not fwd and name == "unfused":  # the two passes' total; cost/attention.py splits it
        tables.append(("attention", fb, f"{k} {how} fwd+bwd rate (3.5 x fwd FLOPs / total time), no "
                                        f"backward table: the total of both passes (no split published), "
                                        f"{at}{src[(gpu, k, causal, 'fwd+bwd', d)]}"))
    elif fb and not fwd:  # only fwd+bwd published: both passes at the combined rate
        tables.append(("attention", fb, f"{k} {how} fwd+bwd rate (3.5 x fwd FLOPs / total time) for both "
                                        f"passes (no split published), {at}{src[(gpu, k, causal, 'fwd+bwd', d)]}"))
        tables.append(("attention_bwd", fb, f"{k} {how} fwd+bwd rate for both passes (no split published), "
                                            f"{at}{src[(gpu, k, causal, 'fwd+bwd', d)]}"))
    if k == "flash3" and gpu.startswith("H100") and fwd and d == 128:
        nc = t[(gpu, k, "false", "fwd", d)]
        bwd = {s: FA3_BWD_NONCAUSAL[s] * fwd[s] / nc[s] for s in sorted(fwd) if s in nc and s in FA3_BWD_NONCAUSAL}
        tables.append(("attention_bwd", bwd, f"flash3 causal backward = non-causal backward ({FA3_SRC}) x "
                                             f"causal/non-causal forward ratio at the same length"))
    suffix = "" if d == 128 else f"_hd{d}"
    for table, vals, s in tables:
        xs = sorted(vals)
        yield (f"[efficiency.{table}_{name}{suffix}]\nx = {xs}\nefficiency = "
               f"[{', '.join(f'{vals[x] / peak:.3f}' for x in xs)}]\n"
               f"x_unit = \"sequence length (keys per query), head dim {d}, {how}\"\n"
               f"source = \"{s.replace(chr(34), chr(39))}; / {peak} TFLOP/s dense peak; "
               f"fp16 benchmarks used for bf16\"\n")


if __name__ == "__main__":
    path = sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "kernel_benchmarks.csv")
    for gpu, text in sections(path):
        print(f"# {gpu}\n{text}")
