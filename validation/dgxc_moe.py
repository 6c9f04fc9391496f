"""NVIDIA's DGX Cloud benchmarking recipes for mixture-of-experts models (NeMo 2 on H100 and GB200: Grok-1 314B,
DeepSeek-V3 671B) as rows of validation/dgxc_moe.csv: parasim's first MoE runs with measured step times.

    git -C dgxc-benchmarking show 6be5ea0:grok1/README.md > grok1.md
    git -C dgxc-benchmarking show 6be5ea0:deepseek_v3/pretraining/README.md > dsv3.md
    python validation/dgxc_moe.py grok1.md dsv3.md > validation/dgxc_moe.csv

NVIDIA/dgxc-benchmarking at 6be5ea0 (2025-09-05, in release v25.05.04) publishes, for each recipe, the layout of
every run (a table per GPU: GPUs, sequence, layers, TP, PP, CP, EP, ETP, DP, VP, MBS, GBS) and the measured
"Training step time (seconds per step)" (the mean of iterations 11-44 of 50, parse_train_timing.sh). Everything
else comes from the recipe's own files at that commit and the NeMo commit its setup.sh checks out (the mapping
rules are `SOURCE_RULES["DGXC_MOE"]`, simulator/validate/sources.py):

- Grok-1 314B (grok1/launch.sh: NeMo 25.04.00 container, NeMo 6f2c6fd scripts/performance/llm/
  pretrain_grok1_314b.py): Mixtral's architecture (MixtralConfig8x7B: RMSNorm, SwiGLU experts, RoPE, no biases,
  untied output layer) with 64 layers, h 6144, 48 heads, 8 query groups, expert FFN 32768, 8 experts, top-2;
  sequence 8192; the Llama 3 tokenizer's 128256 tokens padded to 128·TP; token drop with padding to capacity
  (MegatronTokenDropCallback: capacity factor 1.0); TP communication overlap (userbuffers); the distributed
  optimizer with bf16 gradient reduction (grad_reduce_in_fp32 False); FP8 rows Transformer Engine's delayed
  scaling (bf16_with_fp8_mixed). H100: TP 4, PP 8, CP 2, EP 8, ETP 1, VP 8; GB200: TP 4, PP 1, EP 8, ETP 4,
  CUDA graphs.
- DeepSeek-V3 (deepseek_v3/pretraining/launch.sh: NeMo 25.04.01, NeMo 7a8f1cc pretrain_deepseek_v3.py): the
  recipe trains with one multi-token-prediction layer (recipes/deepseek_v3.py pretrain_recipe use_mtp=True) and
  selective recompute (pretrain_deepseek_v3.py recompute_granularity "selective") of the modules launch.sh's RM
  names: the MLA up-projections on H100 (RM='mla_up_proj'), the core attention on GB200 (RM='core_attn'); the
  shared experts beside the all-to-all dispatcher (nemo/collections/llm/gpt/model/deepseek.py DeepSeekConfig:
  moe_shared_expert_overlap True, moe_token_dispatcher_type "alltoall"); no TP communication overlap
  (pretrain_deepseek_v3.py: MegatronCommOverlapCallback tp_comm_overlap=False).

The measured step is the table's; the tokens/s cell is kept where it agrees with GBS·sequence / step within 1 %
(Grok-1's GB200 512-GPU cells give half that: the GBS of the 256-GPU run; the layout table, the step and the MFU
cell agree on GBS 1024, which the row keeps, with the disagreement in its notes).
"""
from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

FIELDS = next(csv.reader(open(Path(__file__).resolve().parent / "published_runs.csv"))) + ["etp"]
RELEASE = ("NVIDIA/dgxc-benchmarking {file} at 6be5ea0 (2025-09-05, release v25.05.04): NeMo {fw} "
           "(Megatron-core, Transformer Engine) on DGX Cloud {gpu}")
# model: (family name, run id stem, layers, hidden, heads, query groups, expert FFN, vocab, experts, top-k,
#         nominal params (B), sequence, README, NeMo container, notes of its recipe)
MODELS = {
    "Grok1 314b": ("Grok-1", "grok1", 64, 6144, 48, 8, 32768, 128256, 8, 2, 314, 8192, "grok1/README.md", "25.04.00",
                   "Mixtral architecture (MixtralConfig8x7B); token drop, capacity factor 1.0 with padding "
                   "(MegatronTokenDropCallback); TP communication overlap (userbuffers); distributed optimizer, "
                   "bf16 gradient reduction (grad_reduce_in_fp32 False)"),
    "Deepseek V3": ("DeepSeek-V3", "dsv3", 61, 7168, 128, 128, 2048, 129280, 256, 8, 671, 4096,
                    "deepseek_v3/pretraining/README.md", "25.04.01",
                    "MLA, 1 shared expert, 3 dense layers; mtp_num_layers 1 (pretrain_recipe use_mtp=True); "
                    "token drop, capacity factor 1.0 with padding; shared experts overlapped with the all-to-all "
                    "dispatcher (DeepSeekV3Config moe_shared_expert_overlap True, moe_token_dispatcher_type alltoall); "
                    "no TP communication overlap (MegatronCommOverlapCallback tp_comm_overlap False)"),
}
RECOMPUTE_MODULES = {"H100": "mla_up_proj", "GB200": "core_attn"}  # DeepSeek-V3: deepseek_v3/pretraining/launch.sh RM
GPUS = {"H100": ("H100-SXM5-80GB", "DGX Cloud H100 nodes: NVLink/NVSwitch, InfiniBand"),
        "GB200": ("GB200", "DGX Cloud GB200 NVL72: NVLink domain of 72 GPUs, 4 per compute tray")}
PERF = re.compile(r"^\|\s*(Grok1 314b|Deepseek V3) (BF16|FP8)(?: (H100|GB200))?\s*\|(.*)$")
COLUMN = re.compile(r"(\d+)x (H100|GB200) GPUs")
GPU_HEADING = re.compile(r"^(?:\*\*|#\s*)(H100|GB200)s?(?:\*\*:?| specifications)")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def specs(text: str) -> dict:
    """{(gpu, GPUs, precision or None): {column: value}} of the layout tables (the GPU from the heading above)."""
    out, gpu, header = {}, None, None
    for line in text.splitlines():
        m = GPU_HEADING.match(line.strip())
        if m:
            gpu, header = m.group(1), None
            continue
        if not line.startswith("|"):
            header = None
            continue
        cells = _cells(line)
        if "GPUs" in cells and "TP" in cells:
            header = cells
            continue
        if header is None or set(line) <= set("|-: "):
            continue
        row = dict(zip(header, cells))
        precs = [p for p in re.split(r"[/ ]+", row.get("Precision", "")) if p] or [None]
        for p in precs:
            out[(gpu, int(row["GPUs"]), p)] = row
    return out


def perf(text: str):
    """(model, dtype, gpu, [{gpus, step, tps, mfu}]) of each measured table."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = PERF.match(line)
        if not m:
            continue
        model, dtype, _, rest = m.groups()
        cols = [dict(gpus=int(n), gpu=g) for n, g in COLUMN.findall(rest)]
        for row in lines[i + 1:]:
            if "|" not in row:  # (DeepSeek-V3's rows have no leading pipe)
                break
            name, *vals = _cells(row)
            key = {"Training step time (seconds per step)": "step", "Throughput in tokens per second": "tps",
                   "Model flops utilization": "mfu"}.get(name)
            for col, v in zip(cols, vals):
                if key and v:
                    col[key] = float(v.rstrip("%"))
        yield model, dtype, cols


def rows(texts):
    for t in texts:  # one recipe's README each: its layout tables and its measured tables
        layouts = specs(t)
        for model, dtype, cols in perf(t):
            family, stem, L, h, heads, groups, ffn, vocab, E, k, params, seq, readme, fw, recipe = MODELS[model]
            for col in cols:
                n, gpu = col["gpus"], col["gpu"]
                spec = layouts.get((gpu, n, dtype)) or layouts[(gpu, n, None)]
                tp, pp, cp, ep, etp, dp = (int(spec[c]) for c in ("TP", "PP", "CP", "EP", "ETP", "DP"))
                vp, mbs, gbs = int(spec["VP"] or 1), int(spec["MBS"]), int(spec["GBS"])
                if tp * pp * cp * dp != n:
                    raise SystemExit(f"{model} {gpu} {n}: TP x PP x CP x DP != GPUs")
                step, tps = col["step"], col.get("tps")
                note = ""
                if tps and abs(gbs * seq / tps / step - 1) > 0.01:
                    note = (f" The README's tokens/s cell ({tps:g}) is GBS {round(tps * step / seq)} x sequence / "
                            f"step: it disagrees with the layout table's GBS {gbs}, which the MFU cell confirms.")
                    tps = None
                graphs = " CUDA graphs (launch.sh CUDA_GRAPH true)." if gpu == "GB200" and family == "Grok-1" else ""
                if family == "DeepSeek-V3" and pp > 1:  # pretrain_deepseek_v3.py: 64/PP - 1 and 64/PP - 2 layers
                    graphs += (f" First and last pipeline stages hold {64 // pp - 1} and {64 // pp - 2} layers "
                               "(num_layers_in_first/last_pipeline_stage).")
                recompute = "none"
                if family == "DeepSeek-V3":  # pretrain_deepseek_v3.py: selective, of launch.sh's RM modules
                    recompute = "selective"
                    graphs += f" Selective recompute, recompute_modules {RECOMPUTE_MODULES[gpu]} (launch.sh RM)."
                yield {
                    "run_id": f"dgxc_moe_{stem}_{gpu.lower()}_{dtype.lower()}_g{n}", "source_id": "DGXC_MOE",
                    "source": RELEASE.format(file=readme, fw=fw, gpu=gpu),
                    "source_locator": f"{readme} table '{model} {dtype}' ({n}x {gpu}) and its {gpu} layout table",
                    "model": f"{family} {params}B", "params_b": params, "layers": L, "hidden": h, "heads": heads,
                    "kv_heads": groups, "ffn_hidden": ffn, "vocab": vocab, "moe_experts": E, "moe_topk": k,
                    "seq_len": seq, "global_batch_seqs": gbs, "micro_batch": mbs, "n_gpus": n,
                    "gpu_type": GPUS[gpu][0], "interconnect": GPUS[gpu][1], "tp": tp, "pp": pp, "dp": dp, "cp": cp,
                    "ep": ep, "etp": etp, "vpp": vp if vp > 1 else "",
                    "zero_fsdp": "ZeRO-1 (NeMo distributed_fused_adam)", "sequence_parallel": "yes" if tp > 1 else "no",
                    "recompute": recompute,
                    "precision": "bf16" if dtype == "BF16" else "fp8 (TE hybrid, delayed scaling)",
                    "pipeline_schedule": "interleaved 1F1B" if vp > 1 else ("1F1B" if pp > 1 else ""),
                    "step_time_s": step, "tokens_per_s": tps or "",
                    "tokens_per_s_per_gpu": round(tps / n, 1) if tps else "",
                    "mfu_pct": col.get("mfu", ""), "util_basis": "README: MFU = GBS x model FLOPs / step / GPUs / peak",
                    "trust": "A",
                    "notes": f"NeMo {fw}, {dtype}; {recipe}; GA {gbs // (dp * mbs)}; mean of iterations 11-44.{graphs}"
                             f"{note}",
                }


def main(argv):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from dgxc_h100 import write_rows

    write_rows(rows([open(p, encoding="utf-8").read() for p in argv[1:]]), FIELDS)


if __name__ == "__main__":
    main(sys.argv)


BF16_H100 = "dgxc_moe_grok1_h100_bf16_g512"
CSV = Path(__file__).resolve().parent / "dgxc_moe.csv"


def split_experts_step_s() -> float:
    """The Grok-1 H100 BF16 row's predicted step with its experts split over the TP group (etp = tp) instead of
    whole (the recipe's ETP 1): what modelling the expert grid changes on this row."""
    from dataclasses import replace

    from simulator.estimate import estimate
    from simulator.spec.hardware import load_hardware
    from simulator.validate import read_runs
    from simulator.validate.mapping import map_run

    runs = read_runs(CSV)
    m = map_run(runs[runs.run_id == BF16_H100].iloc[0].to_dict())
    lay = replace(m.layout, etp=m.layout.tp)
    return float(estimate(m.model, m.training, lay, load_hardware(m.hardware_name)).to_dict()["time"]["step_s"])


def paragraph(results, pct) -> str:
    """docs/accuracy.md's paragraph on this source (validation/make_accuracy.py), from the results (`pct` formats a
    signed fraction)."""
    d = results[results.source_id == "DGXC_MOE"].set_index("run_id")
    grok, h100, fp8 = d.index.str.contains("_grok1_"), d.index.str.contains("_h100_"), d.index.str.contains("_fp8_")
    dsv3 = ~grok

    def ratio(gpu, n):  # BF16 step over FP8 step, measured and predicted
        b, f = (d.loc[f"dgxc_moe_grok1_{gpu}_{p}_g{n}"] for p in ("bf16", "fp8"))
        return (f"{b.measured_step_s / f.measured_step_s:.2f}x measured, "
                f"{b.predicted_step_s / f.predicted_step_s:.2f}x predicted")

    def med(mask):
        return pct(d.step_error[mask].median())

    def mem(mask):  # the rows' predicted peaks, GiB
        return "-".join(f"{x / 2**30:.1f}" for x in sorted(d.predicted_mem_bytes[mask]))

    gb = d[dsv3 & ~h100]
    from simulator.validate import read_runs

    mfu = read_runs(CSV).set_index("run_id").mfu_pct.reindex(gb.index).astype(float)
    return (
        f"- DGXC_MOE (mean {pct(d.step_error.mean())}) are parasim's first mixture-of-experts runs with measured "
        "steps (NeMo 2, Megatron-core, token drop at capacity factor 1.0). Grok-1 314B (8 experts, top-2) on 512 "
        "H100s (TP 4, PP 8, CP 2, EP 8 with whole experts, ETP 1, 8 virtual stages) and 128-512 GB200s (TP 4, EP 8, "
        f"ETP 4): median error H100 BF16 {med(grok & h100 & ~fp8)}, H100 FP8 {med(grok & h100 & fp8)}, GB200 BF16 "
        f"{med(grok & ~h100 & ~fp8)}, GB200 FP8 {med(grok & ~h100 & fp8)}. The H100 layout splits the attention 4 "
        "ways and keeps each expert whole on its rank (expert tensor parallelism, Layout.etp): with the experts "
        f"split 4 ways like the attention instead, the same row is predicted at {split_experts_step_s():.1f} s "
        f"against the measured {d.measured_step_s[BF16_H100]:.1f} s. BF16 over FP8: H100 {ratio('h100', 512)}; "
        f"GB200 (128 GPUs) {ratio('gb200', 128)}: the FP8 rows run further from the prediction than the dense "
        "recipes' FP8 rows do (DGXC_H100), not established why (the FP8 expert GEMMs' casts and padding are the "
        "candidates; no MoE FP8 kernel is measured here). DeepSeek-V3 671B (parasim's preset with one "
        "multi-token-prediction module, TP 2, EP 32-64 with whole experts): on 512-1024 H100s "
        f"{med(dsv3 & h100)}, its EP 64 all-to-all across 8 nodes most of the predicted step; the recipe "
        "recomputes the MLA up-projections (launch.sh RM='mla_up_proj', the megatron stack's recompute_modules), "
        f"which frees Q, K and V of every layer: predicted peaks {mem(dsv3 & h100)} GiB per GPU, which fit (without "
        "it the 1,024-GPU row's 92 GiB did not). Its shared expert runs beside the dispatcher's all-to-alls "
        "(DeepSeekConfig moe_shared_expert_overlap, the stack's moe_shared_expert_overlap: cost/moe_overlap.py), and "
        "its recipe turns TP communication overlap off (MegatronCommOverlapCallback tp_comm_overlap=False). On "
        f"128-512 GB200s, where the EP all-to-all stays inside the NVLink domain, the README's own MFU is "
        f"{mfu.min():.1f}-{mfu.max():.1f} % and the prediction {pct(gb.step_error.median())}: these steps are "
        f"{gb.measured_step_s.median() / gb.predicted_step_s.median():.1f}x the predicted one, far beyond any other "
        "row; what that early GB200 recipe spent its time on is not established. The GB200 rows use the GB200 "
        "preset: its GEMM tables are OpenXLA's B200 kernels moved to it, times the rate a GB200 sustains at its "
        "power limit (Azure's published cuBLASLt runs, docs/compute.md; the Grok-1 GB200 rows were -16 % to "
        "-18 % in BF16 and -23 % to -26 % in FP8 with the burst tables); its other tables are derived (no GB200 "
        "measured here).")
