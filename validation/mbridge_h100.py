"""NVIDIA's published Megatron-Bridge pre-training performance on DGX-H100 (NeMo 25.09 to 26.06: Llama 3 8B/70B,
Llama 3.1 405B, DeepSeek-V3, Qwen3 30B-A3B and 235B-A22B, GPT-OSS 120B) as rows of validation/mbridge_h100.csv.

    git -C Megatron-Bridge show 067f987:docs/performance-summary-archive.md > mbridge.md
    python validation/mbridge_h100.py mbridge.md > validation/mbridge_h100.csv

NVIDIA-NeMo/Megatron-Bridge's docs/performance-summary-archive.md (at 067f987) keeps the tables of every release:
per model and GPU system, the layout (#GPUs, GBS, MBS, sequence, FSDP, TP, PP, CP, VP, EP; GA before 26.02) and
the measured "Tokens / sec / GPU" and "Model TFLOP / sec / GPU". The step is derived from the first:
GBS x sequence / (tokens/s/GPU x GPUs), the only measured quantity the tables give (the repo says neither which
steps are averaged nor how tokens/s is taken; its runs are 50 steps, 100 for 25.09). Every other setting comes
from the recipe code at the commit of that release (RECIPES below, each with its files and lines): the
v0.1.0rc4 YAML launcher for 25.09 (its H100 perf matrix matches the published 25.09 layouts; v0.2.0's Python
configs do not for Llama 3 8B and the Qwen3 token drop), v0.2.2 for 25.11, v0.3.0 for 26.02, v0.4.0 for 26.02.01,
74695a06d for 26.04, 17a381f95 for 26.04.01, v0.5.0 for 26.06.

Rows left out (and why): Nemotron-3 Nano (Mamba layers), the 26.06 SFT and LoRA rows (fine-tuning on unrecorded
data), and the rows whose published layout the recipe code of their release does not produce (25.09 and 25.11
Qwen3-30B: VP 24 published, 12 in the code; 25.11 Llama 3 8B: FSDP published, DDP with 5 recomputed layers in the
code; 26.02.01 Qwen3-30B: PP 2, VP 12, EP 8 published, PP 1, EP 16 in the code; 25.11 GPT-OSS 120B: MBS 4 and
GA 2 published, which DP 16 and GBS 512 cannot both hold, MBS 1 in the code). Where a value was edited after publication the archive's is kept and the
first one named in the notes (26.04.01, 26.06).

Shared by every row (the per-row notes say the rest): Megatron-core with Transformer Engine (the megatron
stack); FP8 (but GPT-OSS, BF16) with per-tensor current scaling (25.11 and later label it FP8-CS; the 25.09 table has no precision
column, and its footnote gives blockwise FP8 only for the parenthesised numbers, none of which is a tokens/s
cell) and FP8 weights all-gathered (fp8_param_gather); gradients reduced in bf16 (grad_reduce_in_fp32 False);
the distributed optimizer with fp32 master weights; sequence parallelism with TP; MoE routing force-balanced
(uniform) and token-dropless, except the 25.09 Qwen3 rows (capacity factor 1.0, padded); no CUDA graphs.
"""
from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dgxc_h100 import write_rows  # noqa: E402

FIELDS = next(csv.reader(open(Path(__file__).resolve().parent / "published_runs.csv"))) + ["etp"]
ARCHIVE = "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md at 067f987"
# release: the commit whose recipe code the release's rows ran (module docstring)
COMMITS = {"25.09": "v0.1.0rc4", "25.11": "v0.2.2", "26.02": "v0.3.0", "26.02.01": "v0.4.0", "26.04": "74695a06d",
           "26.04.01": "17a381f95", "26.06": "v0.5.0"}
# the table's model label: (model cell, preset shape: layers, hidden, heads, kv heads, ffn, vocab, experts, top-k)
MODELS = {
    "LLAMA3_8B": ("Llama-3-8B", (32, 4096, 32, 8, 14336, 128256, "", "")),
    "LLAMA3_70B": ("Llama-3-70B", (80, 8192, 64, 8, 28672, 128256, "", "")),
    "LLAMA3.1_405B": ("Llama-3.1-405B", (126, 16384, 128, 8, 53248, 128256, "", "")),
    "DeepSeekV3": ("DeepSeek-V3", (61, 7168, 128, 128, 18432, 129280, 256, 8)),
    "Qwen3_30B_a3B": ("Qwen3-30B-A3B", (48, 2048, 32, 4, 6144, 151936, 128, 8)),
    "Qwen3_235B_a22B": ("Qwen3-235B-A22B", (94, 4096, 64, 4, 12288, 151936, 128, 8)),
    "GPT OSS 120B": ("GPT-OSS-120B", (36, 2880, 64, 8, 2880, 201088, 128, 4)),
}
TP_OVERLAP = "TP communication overlap (userbuffers)"
A2A = "EP A2A overlap (overlap_moe_expert_parallel_comm, delay_wgrad_compute)"
DROP = "token drop: capacity factor 1.0, padded to capacity (apply_moe_token_drop)"


def _accounted(layers: int, stages: int) -> str:
    """Megatron's split with account_for_embedding/loss_in_pipeline_split: (L + 2) / stages per virtual stage, the
    first and last one layer fewer."""
    per = (layers + 2) // stages
    assert per * stages == layers + 2, (layers, stages)
    return ",".join(map(str, [per - 1] + [per] * (stages - 2) + [per - 1]))


LLAMA70 = f"{TP_OVERLAP}, UB config userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192; no recompute"
LLAMA405 = (f"{TP_OVERLAP}, UB config userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192; no recompute; "
            f"account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split: layers per virtual "
            f"stage {_accounted(126, 64)}")
Q235 = f"account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split: layers per virtual stage " \
       f"{_accounted(94, 32)}"
# Qwen3-235B from 25.11 on: dropless, force-balanced, EP A2A overlap, no TP overlap, no recompute
Q235_A2A = (f"{Q235}; MoE dispatcher alltoall, dropless, force-balanced; {A2A}; no TP communication overlap; "
            f"no recompute")
# Qwen3-30B from 26.04 on: PP 1, EP 16 with HybridEP, no A2A overlap
Q30_HYBRID = "MoE dispatcher flex (HybridEP), dropless, force-balanced; no all-to-all overlap; no recompute"
# GPT-OSS 120B from 26.02 on (the recipe code, lines per row): TP 1, PP 4, EP 8, BF16, the
# alltoall dispatcher, no overlap of the all-to-all, selective recompute of the norms and the expert activation;
# TE >= 2.12 runs the windowed and sink attention in cuDNN's fused attention (TE utils.py: needs cuDNN >= 9.13.1)
GPT_OSS = ("sliding window 128 on every other layer and attention sinks (TE FusedAttention, cuDNN); MoE dispatcher "
           "alltoall, dropless, force-balanced; no all-to-all overlap; no TP communication overlap; "
           "recompute_modules layernorm,moe_act; precision-aware optimizer with fp32 moments; expert activation "
           "quick-GEGLU with clamps (weighted_bias_quick_geglu) and per-expert fc2 bias adds")
# (release, table label): (recipe settings for the notes, where they come from at COMMITS[release])
RECIPES = {
    ("25.09", "LLAMA3_8B"): (
        "Megatron-FSDP (use_megatron_fsdp, optim_grads_params), no gradient-accumulation fusion, nccl_ub; no TP; "
        "no recompute",
        "scripts/performance/configs/llama3/llama3_8b_llm_pretrain.yaml (perf_matrix h100 num_gpus_8, fp8_cs); "
        "run_script.py:161-175"),
    ("25.09", "LLAMA3_70B"): (LLAMA70, "scripts/performance/configs/llama3/llama3_70b_llm_pretrain.yaml; "
                                       "recipes/llama/llama3_70b.py:221"),
    ("25.09", "LLAMA3.1_405B"): (LLAMA405, "scripts/performance/configs/llama31/llama31_405b_llm_pretrain.yaml; "
                                           "recipes/llama/llama31_405b.py:237"),
    ("25.09", "DeepSeekV3"): (
        f"mtp_num_layers 1; pipeline layout Et|(tt|)*30mL: layers per virtual stage "
        f"{','.join(['1'] + ['2'] * 30 + ['0'])}; MoE dispatcher flex (DeepEP), dropless, force-balanced; {A2A}; "
        f"recompute_modules mla_up_proj,mlp; precision-aware optimizer (bf16 moments and main gradients)",
        "scripts/performance/configs/deepseek/deepseek_v3_llm_pretrain.yaml (h100 num_gpus_1024); "
        "run_script.py:56-91; recipes/deepseek/deepseek_v3.py:174,240-244"),
    ("25.09", "Qwen3_235B_a22B"): (
        f"{Q235}; MoE dispatcher alltoall, {DROP}; {TP_OVERLAP} (TE's default config); no recompute",
        "scripts/performance/configs/qwen3/qwen3_235b_a22b_llm_pretrain.yaml (h100 num_gpus_256); "
        "run_script.py:109-116"),
    ("25.11", "LLAMA3_70B"): (LLAMA70, "scripts/performance/configs/llama3/workload_base_configs.py:144; "
                                       "recipes/llama/llama3.py:302"),
    ("25.11", "LLAMA3.1_405B"): (LLAMA405, "scripts/performance/configs/llama31/workload_base_configs.py:162; "
                                           "recipes/llama/llama3.py:413-417"),
    ("25.11", "Qwen3_235B_a22B"): (
        Q235_A2A,
        "scripts/performance/configs/qwen3/workload_base_configs.py:138-143; qwen3_llm_pretrain.py:47,156"),
    ("26.02", "LLAMA3_70B"): (LLAMA70, "scripts/performance/configs/llama/llama3_workload_base_configs.py:339"),
    ("26.02", "LLAMA3.1_405B"): (LLAMA405, "scripts/performance/configs/llama/llama31_workload_base_configs.py:203"),
    ("26.02", "Qwen3_30B_a3B"): (
        f"MoE dispatcher flex (DeepEP), dropless, force-balanced; {A2A}; no recompute",
        "scripts/performance/configs/qwen/qwen3_workload_base_configs.py:426-427; qwen3_llm_pretrain.py:44"),
    ("26.02", "Qwen3_235B_a22B"): (
        Q235_A2A, "scripts/performance/configs/qwen/qwen3_workload_base_configs.py:171-179"),
    ("26.02.01", "LLAMA3_70B"): (LLAMA70, "scripts/performance/configs/llama/llama3_workload_base_configs.py:339"),
    ("26.02.01", "Qwen3_235B_a22B"): (
        Q235_A2A, "scripts/performance/configs/qwen/qwen3_workload_base_configs.py:173-181"),
    ("26.04", "LLAMA3_70B"): (LLAMA70, "scripts/performance/configs/llama/llama3_workload_base_configs.py:339"),
    ("26.04", "Qwen3_30B_a3B"): (
        Q30_HYBRID,
        "scripts/performance/configs/qwen/qwen3_workload_base_configs.py:426-428"),
    ("26.04", "Qwen3_235B_a22B"): (
        Q235_A2A, "scripts/performance/configs/qwen/qwen3_workload_base_configs.py:173-181"),
    ("26.04.01", "LLAMA3_70B"): (LLAMA70, "scripts/performance/configs/llama/llama3_workload_base_configs.py:344"),
    ("26.04.01", "LLAMA3.1_405B"): (LLAMA405,
                                    "scripts/performance/configs/llama/llama31_workload_base_configs.py:203"),
    ("26.04.01", "Qwen3_30B_a3B"): (
        Q30_HYBRID,
        "scripts/performance/configs/qwen/qwen3_workload_base_configs.py:437-439"),
    ("26.04.01", "Qwen3_235B_a22B"): (
        Q235_A2A, "scripts/performance/configs/qwen/qwen3_workload_base_configs.py:175-183"),
    **{(release, "GPT OSS 120B"): (GPT_OSS, f"scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py:"
                                            f"{lines}; src/megatron/bridge/models/gpt_oss/{model_file}")
       for release, lines, model_file in (("26.02", "33,34,37,81,82,116", "gpt_oss_provider.py"),
                                          ("26.02.01", "34,79,82,128", "gpt_oss_bridge.py:86-87"),
                                          ("26.04", "34,79,82,128", "gpt_oss_bridge.py:86-87"),
                                          ("26.04.01", "34,79,82,126", "gpt_oss_bridge.py:86-87"))},
    ("26.06", "LLAMA3.1_405B"): (LLAMA405, "scripts/performance/configs/llama/llama31_workload_base_configs.py:203"),
    ("26.06", "Qwen3_30B_a3B"): (
        Q30_HYBRID,
        "scripts/performance/configs/qwen/qwen3_workload_base_configs.py:473-476"),
}
# values edited after first publication (the archive's are kept)
FIRST_PUBLISHED = {("26.04.01", "Qwen3_235B_a22B"): "first published as 1696 tokens/s/GPU (17a381f95)",
                   ("26.06", "Qwen3_30B_a3B"): "first published as 8467 tokens/s/GPU (v0.5.0)"}
RELEASE = re.compile(r"^## (\d\d\.\d\d(?:\.\d\d)?) NeMo Container")
SECTION = re.compile(r"^#### (System|Model): (.+?)\s*$")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def table_rows(text: str, system: str = "DGX-H100"):
    """(release, model label, {column: cell}) for every pre-training row of `system` in the archive."""
    release = section = None
    header: list[str] | None = None
    pretraining = False
    for line in text.splitlines():
        if m := RELEASE.match(line):
            release, header = m.group(1), None
        elif line.startswith("### "):
            pretraining = "Pre-Training" in line
        elif m := SECTION.match(line):
            section, header = m.groups(), None
        elif line.startswith("|") and release and pretraining and section:
            cells = _cells(line)
            if header is None:
                header = cells
            elif not set(line) <= set("|-: "):
                row = dict(zip(header, cells))
                kind, name = section
                row_system = name if kind == "System" else row.get("System", "")
                label = row.get("Model", "") if kind == "System" else name
                if row_system == system:
                    yield release, re.sub(r"\s*\(.*\)$", "", label), row


def _num(cell: str) -> float:
    return float(re.match(r"[\d.]+", cell).group(0))


def rows(text: str):
    for release, label, c in table_rows(text):
        if (release, label) not in RECIPES:
            print(f"left out: {release} {label} (module docstring)", file=sys.stderr)
            continue
        settings, where = RECIPES[release, label]
        bf16 = c.get("Precision", "").upper() == "BF16"
        yield run_row(release, label, c, source_id="MBRIDGE_H100", system="DGX-H100", gpu_type="H100-SXM5-80GB",
                      interconnect="DGX-H100: NVLink/NVSwitch, InfiniBand", commit=COMMITS[release],
                      precision="bf16" if bf16 else "fp8 (TE hybrid, current scaling)",
                      precision_note="BF16" if bf16 else "FP8 current scaling, fp8_param_gather",
                      settings=settings, where=where, first=FIRST_PUBLISHED.get((release, label), ""))


def run_row(release: str, label: str, c: dict, *, source_id: str, system: str, gpu_type: str, interconnect: str,
            commit: str, precision: str, precision_note: str, settings: str, where: str, first: str = "",
            suffix: str = "") -> dict:
    """One published table row `c` as a row of the validation CSV (the layout from the table, the step derived
    from its tokens/s, the recipe's settings in the notes)."""
    name, (L, h, heads, kv, ffn, vocab, experts, topk) = MODELS[label]
    n, gbs, mbs, seq = (int(_num(c[k])) for k in ("#-GPUs", "GBS", "MBS", "Sequence Length"))
    tp, pp, cp = (int(_num(c[k])) for k in ("TP", "PP", "CP"))
    vp = int(_num(c["VP"])) if c["VP"] not in ("n/a", "1") else 0
    ep = int(_num(c["EP"])) if c["EP"] not in ("n/a",) else 1
    tok = _num(c["Tokens / sec / GPU"])
    fsdp = "Megatron-FSDP" in settings
    step = gbs * seq / (tok * n)
    tag = system.split("-", 1)[-1].lower()
    return {
        "run_id": f"mbridge_{tag}_{release.replace('.', '_')}_{label.lower().replace('.', '_').replace(' ', '_')}"
                  + suffix,
        "source_id": source_id,
        "source": f"{ARCHIVE} ('{release} NeMo Container'); recipe code at {commit}",
        "source_locator": f"'{release} NeMo Container', {label}, {system} row; {where}",
        "model": name, "layers": L, "hidden": h, "heads": heads, "kv_heads": kv, "ffn_hidden": ffn,
        "vocab": vocab, "moe_experts": experts, "moe_topk": topk, "seq_len": seq, "global_batch_seqs": gbs,
        "micro_batch": mbs, "n_gpus": n, "gpu_type": gpu_type, "interconnect": interconnect,
        "tp": tp, "pp": pp, "cp": cp, "dp": n // (tp * pp * cp), "ep": ep, "etp": 1 if ep > 1 else "",
        "vpp": vp or "",
        "zero_fsdp": "ZeRO-3 (Megatron-FSDP optim_grads_params)" if fsdp else "ZeRO-1 (distributed optimizer)",
        "sequence_parallel": "yes" if tp > 1 else "no",
        "recompute": "selective" if "recompute_modules" in settings else "none",
        "precision": precision,
        "pipeline_schedule": "interleaved 1F1B" if vp else ("1F1B" if pp > 1 else ""),
        "step_time_s": "", "tokens_per_s": round(tok * n, 1), "tokens_per_s_per_gpu": tok,
        "tflops_per_gpu": _num(c["Model TFLOP / sec / GPU"]),
        "tflops_basis": "Megatron-Bridge num_floating_point_operations (model FLOPs)",
        "derived_step_time_s": round(step, 4),
        "derived_how": "GBS x sequence / (tokens/s/GPU x GPUs)",
        "trust": "A",
        "notes": f"NeMo {release}, {precision_note}; {settings}; grad_reduce_in_fp32 False."
                 + (f" {first}." if first else ""),
    }


def main(argv):
    write_rows(rows(open(argv[1], encoding="utf-8").read()), FIELDS)


if __name__ == "__main__":
    main(sys.argv)


CSV = Path(__file__).resolve().parent / "mbridge_h100.csv"


def errors_without(d, note: str, training: dict | None = None, model: dict | None = None,
                   **stack) -> dict[str, float]:
    """{run_id: step error} of the rows whose notes hold `note`, predicted with the Stack fields `stack` (and the
    Training fields `training`, the ModelSpec fields `model`) instead: what modelling that setting changed."""
    from dataclasses import replace

    from simulator.estimate import estimate
    from simulator.spec.hardware import load_hardware
    from simulator.validate import read_runs
    from simulator.validate.mapping import map_run

    rows = read_runs(CSV).set_index("run_id")
    out = {}
    for run_id in d.index:
        if note not in str(rows.loc[run_id, "notes"]):
            continue
        m = map_run(rows.loc[run_id].to_dict() | {"run_id": run_id})
        st = replace(m.training.stack, **stack)
        est = estimate(replace(m.model, **(model or {})), replace(m.training, stack=st, **(training or {})), m.layout,
                       load_hardware(m.hardware_name))
        out[run_id] = float(est.step_s) / float(d.loc[run_id, "measured_step_s"]) - 1.0
    return out


def paragraph(results, pct) -> str:
    """docs/accuracy.md's paragraph on this source (validation/make_accuracy.py), from the results (`pct` formats a
    signed fraction)."""
    import numpy as np

    d = results[results.source_id == "MBRIDGE_H100"].set_index("run_id")
    model = d.model

    def med(mask):
        return pct(d.step_error[mask].median())

    from simulator.spec.hardware import load_hardware

    hbm = load_hardware("dgx-h100").hbm_bytes
    a2a = errors_without(d, A2A, moe_a2a_overlap=False, moe_delay_wgrad=False)
    flex = errors_without(d, "dispatcher flex", moe_dispatcher="alltoall")
    q30 = d[model.str.startswith("qwen3-30b")]
    odd = q30.step_error.idxmin()
    dsv3 = d[model == "deepseek-v3"].iloc[0]
    unfused = errors_without(d, "attention sinks", training={"flash_attention": False})
    swiglu = errors_without(d, "attention sinks", model={"mlp": "swiglu", "expert_bias": False})
    return (
        f"- MBRIDGE_H100 (mean {pct(d.step_error.mean())}, median |error| {100 * d.step_error.abs().median():.1f} %) "
        "are NVIDIA's published Megatron-Bridge pre-training runs on DGX-H100 (NeMo 25.09 to 26.06, FP8 current "
        "scaling; every setting read from the recipe code of the release, validation/mbridge_h100.py), added after "
        "the model was built and predicted with the shipped dgx-h100 preset, nothing fitted to them. Median error: "
        f"Llama 3 70B {med(model == 'llama3-70b')}, Llama 3.1 405B {med(model == 'llama3.1-405b')}, Qwen3-235B-A22B "
        f"{med(model == 'qwen3-235b-a22b')}, Qwen3-30B-A3B {med(model.str.startswith('qwen3-30b'))}, Llama 3 8B "
        f"(Megatron-FSDP) {med(model == 'llama3-8b')}, DeepSeek-V3 {pct(dsv3.step_error)}, GPT-OSS 120B "
        f"{med(model == 'gpt-oss-120b')}. The {len(a2a)} rows that "
        "ran Megatron-Core's EP A2A overlap (the combined 1F1B: stack moe_a2a_overlap, cost/moe_overlap.py) are "
        f"predicted at median {pct(float(np.median(list(a2a.values()))))} without modelling it and "
        f"{med(d.index.isin(list(a2a)))} with it. The {len(flex)} rows that ran DeepEP or HybridEP (Megatron-Core's "
        "flex dispatcher: each token crosses the network once per destination node and is forwarded over NVLink, "
        "DeepSeek-V3 §3.2.2; the stack's moe_dispatcher flex, cost/ep_dispatch.py, at the links' bandwidths) are "
        f"predicted at {', '.join(pct(d.step_error[r]) for r in flex)} ({', '.join(r[13:] for r in flex)}); timed "
        f"as the plain all-to-all they were {', '.join(pct(v) for v in flex.values())}: but for the 26.02 row the two "
        "bracket the measurements, and the kernels' own bandwidth on H100 nodes (DeepEP publishes H800 figures "
        "only) is owed to a multi-node measurement. "
        f"The outlier is {odd} ({pct(d.step_error[odd])}): the 26.02 Qwen3-30B recipe (PP 2, VP 12, EP 8, DeepEP, "
        "A2A overlap) measured 1.8x the step of the same model's PP 1, EP 16 rows of later releases, which parasim "
        "predicts nearer; what that release's DeepEP run spent the time on is not established. DeepSeek-V3 "
        "(TP 2, PP 8, VP 4, EP 64 over 8 nodes, DeepEP, A2A overlap, MLA up-projections and dense MLPs recomputed) "
        f"is predicted at {pct(dsv3.step_error)} and at {dsv3.predicted_mem_bytes / 2**30:.1f} GiB per GPU "
        + (f"of the {hbm / 2**30:.1f} GiB dgx-h100 holds: it fits, as the run did (its precision-aware optimizer's "
           "bf16 moments counted, Training.optimizer_dtype; no memory was published)."
           if dsv3.predicted_mem_bytes <= hbm else
           f", {(dsv3.predicted_mem_bytes - hbm) / 2**30:.1f} GiB over the {hbm / 2**30:.1f} GiB dgx-h100 holds, so "
           "it is marked as not fitting where the run fit (no memory was published).")
        + f" The {len(unfused)} GPT-OSS 120B rows (26.02 to 26.04.01, BF16, TP 1, PP 4, EP 8; a 128-key sliding "
        "window on every other layer and a learned sink logit per head, which Transformer Engine 2.12-2.15 runs in "
        "cuDNN's fused attention from cuDNN 9.13.1 on: the windowed layers' kernel is read off the causal table at "
        "the same work per thread block, cost/window.py) are predicted at "
        f"{', '.join(pct(d.step_error[r]) for r in unfused)}, with their expert activation as Megatron-Core runs it "
        "(weighted_bias_quick_geglu_impl: two eager clamps and a concatenation before one torch.compile'd kernel, "
        "re-run by the moe_act recompute) and the second expert GEMM's bias added per expert in eager code "
        "(experts.py _apply_bias; both cost/gpt_oss_ops.py, checked op by op against torch on CPU); timed as "
        "Megatron's fused SwiGLU without the bias adds they were "
        f"{', '.join(pct(v) for v in swiglu.values())}. With the attention materialised instead (TE's fallback below cuDNN 9.13.1, whose version "
        "in these containers is not established) the rows are "
        f"{', '.join(pct(v) for v in unfused.values())}: the measurements lie between the two.")
