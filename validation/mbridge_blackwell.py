"""NVIDIA's published Megatron-Bridge pre-training performance on Blackwell: DGX-B200, DGX-B300 and DGX-GB200
(NeMo 25.09 to 26.06.01) as rows of validation/mbridge_blackwell.csv, the same way validation/mbridge_h100.py does
for DGX-H100 (its docstring: the archive, how the step is derived, the release -> commit table).

    git -C Megatron-Bridge show 067f987:docs/performance-summary-archive.md > mbridge.md
    python validation/mbridge_blackwell.py mbridge.md > validation/mbridge_blackwell.csv

Every setting of a row comes from the recipe code of its release (RECIPES: files and lines at COMMITS[release];
26.06.01 ran v0.5.1, which docs/versions1.json pairs with it). 25.09 and 25.11 give two numbers in a cell, the
second in parentheses: "different quantization granularities", 32x32 blocks on Blackwell, i.e. MXFP8; the first
is FP8 with per-tensor current scaling (25.11 labels it FP8-CS; 25.09 names no precision, and the same layouts of
25.11 are FP8-CS). Each becomes its own row. Settings shared by every row: Megatron-core with Transformer
Engine (the megatron stack), gradients reduced in bf16, the distributed optimizer with fp32 master weights, FP8
weights all-gathered (fp8_param_gather), sequence parallelism with TP, ETP 1, MoE routing force-balanced and
token-dropless unless the notes say token drop. Several recipes capture parts of a layer in CUDA graphs (named in
the notes): not modelled; the megatron stack is not launch-bound, so graphs change no predicted time.

Rows left out: Nemotron-3 Nano and Super (Mamba layers); NVFP4; the rows whose published layout the code of their
release does not produce (25.11 B200 GPT-OSS: EP 8 published, EP 64 in the code; 25.11 B200 Qwen3-235B: VP 2
published, VP 4 in the code; 26.02.01 B300 Qwen3-235B: MBS 1, VP 4 published, MBS 2 without VP in the code); 26.06
B300 Qwen3-30B (FP8 attention, a capacity factor with paged stashing and cuteDSL grouped MLPs: not modelled).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dgxc_h100 import write_rows  # noqa: E402
from mbridge_h100 import A2A, DROP, FIELDS, TP_OVERLAP, _accounted, run_row, table_rows  # noqa: E402

COMMITS = {"25.09": "v0.1.0rc4", "25.11": "v0.2.2", "26.02": "v0.3.0", "26.02.01": "v0.4.0", "26.04": "74695a06d",
           "26.04.01": "17a381f95", "26.06": "v0.5.0", "26.06.01": "v0.5.1"}
SYSTEMS = {  # system -> (source id, gpu_type, interconnect)
    "DGX-B200": ("MBRIDGE_B200", "B200", "DGX-B200: NVLink5/NVSwitch, InfiniBand"),
    "DGX-B300": ("MBRIDGE_B300", "B300", "DGX-B300: NVLink5/NVSwitch, InfiniBand"),
    "DGX-GB200": ("MBRIDGE_GB200", "GB200", "DGX-GB200 NVL72: NVLink domain of 72 GPUs, InfiniBand"),
}
CG = "CUDA graphs (TE, scope {}): not modelled"
FB = "dropless, force-balanced"
PAO_BF16 = "precision-aware optimizer (bf16 moments and main gradients)"
HEP, DEP, ATA = "MoE dispatcher flex (HybridEP)", "MoE dispatcher flex (DeepEP)", "MoE dispatcher alltoall"
SHARED = "shared experts overlapped with the all-to-all (moe_shared_expert_overlap)"


def _split(*parts) -> str:
    return ",".join(str(p) for part in parts for p in (part if isinstance(part, list) else [part]))


def _acc(layers: int, stages: int) -> str:
    return ("account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split: layers per virtual "
            f"stage {_accounted(layers, stages)}")


def _dsv3(layout: str, moe: str, modules: str, extra: str = "") -> str:
    return f"mtp_num_layers 1; layers per virtual stage {layout}; {moe}; {extra}recompute_modules {modules}; {PAO_BF16}"


def _gpt_oss(moe: str, recompute: bool, cg: str = "", pao: bool = True) -> str:
    return ("sliding window 128 on every other layer and attention sinks (TE FusedAttention, cuDNN); "
            f"{moe}, {FB}; no all-to-all overlap; no TP communication overlap; "
            + ("recompute_modules layernorm,moe_act; " if recompute else "no recompute; ")
            + (f"{cg}; " if cg else "") + ("precision-aware optimizer with " if pao else "")
            + "fp32 moments; expert activation "
            "quick-GEGLU with clamps (weighted_bias_quick_geglu) and per-expert fc2 bias adds")


DS_16 = _split(4, [4] * 14, 1)
LLAMA8 = "no TP; no recompute; CUDA graphs (local, per layer): not modelled"
L405 = (f"{TP_OVERLAP}, UB config userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192; no recompute; "
        f"{_acc(126, 64)}")
Q30_TE = CG.format("moe_router, moe_preprocess")
ATTN_CG = CG.format("attn, moe_router, moe_preprocess")
P = "scripts/performance/configs"
# (release, system, table label, precision): (settings, where at COMMITS[release])
RECIPES = {
    ("25.09", "DGX-B200", "LLAMA3_8B", "FP8-CS"): (LLAMA8, f"{P}/llama3/llama3_8b_llm_pretrain.yaml (b200)"),
    ("25.09", "DGX-B200", "LLAMA3_8B", "MXFP8"): (LLAMA8, f"{P}/llama3/llama3_8b_llm_pretrain.yaml (b200)"),
    ("25.09", "DGX-B200", "LLAMA3.1_405B", "FP8-CS"): (L405, f"{P}/llama31/llama31_405b_llm_pretrain.yaml (b200)"),
    ("25.09", "DGX-B200", "LLAMA3.1_405B", "MXFP8"): (L405, f"{P}/llama31/llama31_405b_llm_pretrain.yaml (b200)"),
    **{("25.09", "DGX-B200", "DeepSeekV3", p): (
        _dsv3(DS_16, f"{ATA}, {DROP}", "mla_up_proj", f"{SHARED}; "),
        f"{P}/deepseek/deepseek_v3_llm_pretrain.yaml (b200); run_script.py") for p in ("FP8-CS", "MXFP8")},
    ("25.09", "DGX-B200", "Qwen3_30B_a3B", "FP8-CS"): (
        f"{ATA}, {DROP}; CUDA graphs (local, per layer): not modelled; no recompute",
        f"{P}/qwen3/qwen3_30b_a3b_llm_pretrain.yaml (b200)"),
    **{("25.09", "DGX-B200", "Qwen3_235B_a22B", p): (
        f"{_acc(94, 16)}; {ATA}, {DROP}; no recompute", f"{P}/qwen3/qwen3_235b_a22b_llm_pretrain.yaml (b200)")
       for p in ("FP8-CS", "MXFP8")},
    ("25.11", "DGX-B200", "LLAMA3_8B", "FP8-CS"): (LLAMA8, f"{P}/llama3/workload_base_configs.py (B200)"),
    ("25.11", "DGX-B200", "LLAMA3_8B", "MXFP8"): (LLAMA8, f"{P}/llama3/workload_base_configs.py (B200)"),
    ("25.11", "DGX-B200", "LLAMA3.1_405B", "FP8-CS"): (L405, f"{P}/llama31/workload_base_configs.py (B200)"),
    ("25.11", "DGX-B200", "LLAMA3.1_405B", "MXFP8"): (L405, f"{P}/llama31/workload_base_configs.py (B200)"),
    ("25.11", "DGX-B200", "DeepSeekV3", "MXFP8"): (
        _dsv3(DS_16, f"{ATA}, {FB}", "mla_up_proj", f"{SHARED}; "),
        f"{P}/deepseek/workload_base_configs.py (B200)"),
    ("25.11", "DGX-B200", "Qwen3_30B_a3B", "MXFP8"): (
        f"{ATA}, {FB}; {Q30_TE}; no recompute", f"{P}/qwen3/workload_base_configs.py (B200)"),
    **{(r, s, "DeepSeekV3", "MXFP8"): (_dsv3(DS_16, f"{HEP}, {FB}", "mla_up_proj"),
                                       f"{P}/deepseek/deepseek_workload_base_configs.py ({s[4:]})")
       for r in ("26.02", "26.02.01", "26.04") for s in ("DGX-B200", "DGX-B300")},
    ("26.02", "DGX-B200", "GPT OSS 120B", "BF16"): (
        _gpt_oss(ATA, True), f"{P}/gpt_oss/gpt_oss_workload_base_configs.py (B200)"),
    ("26.02", "DGX-B300", "GPT OSS 120B", "BF16"): (
        _gpt_oss(ATA, False, ATTN_CG), f"{P}/gpt_oss/gpt_oss_workload_base_configs.py (B300)"),
    **{(r, "DGX-B200", "GPT OSS 120B", "BF16"): (
        _gpt_oss(HEP, True), f"{P}/gpt_oss/gpt_oss_workload_base_configs.py (B200)") for r in ("26.02.01", "26.04")},
    ("26.04.01", "DGX-B200", "GPT OSS 120B", "BF16"): (
        _gpt_oss(ATA, True), f"{P}/gpt_oss/gpt_oss_workload_base_configs.py (B200)"),
    **{(r, "DGX-B300", "GPT OSS 120B", "BF16"): (
        _gpt_oss(HEP, False, ATTN_CG), f"{P}/gpt_oss/gpt_oss_workload_base_configs.py (B300)")
       for r in ("26.02.01", "26.04", "26.04.01")},
    ("26.06", "DGX-B300", "GPT OSS 120B", "MXFP8"): (
        _gpt_oss(HEP, False, ATTN_CG, pao=False),
        f"{P}/gpt_oss/gpt_oss_workload_base_configs.py (B300)"),
    ("26.02", "DGX-B200", "Qwen3_30B_a3B", "MXFP8"): (
        f"{ATA}, {FB}; {Q30_TE}; no recompute", f"{P}/qwen/qwen3_workload_base_configs.py (B200)"),
    **{(r, "DGX-B300", "Qwen3_30B_a3B", "MXFP8"): (
        f"{HEP}, {FB}; {Q30_TE}; no recompute", f"{P}/qwen/qwen3_workload_base_configs.py (B300)")
       for r in ("26.02", "26.02.01", "26.04", "26.04.01")},
    **{(r, "DGX-B200", "Qwen3_30B_a3B", "MXFP8"): (
        f"{HEP}, {FB}; {ATTN_CG}; no recompute", f"{P}/qwen/qwen3_workload_base_configs.py (B200)")
       for r in ("26.02.01", "26.04", "26.04.01")},
    ("26.02", "DGX-B300", "Qwen3_235B_a22B", "MXFP8"): (
        f"{_acc(94, 32)}; {ATA}, {FB}; {A2A}; no recompute", f"{P}/qwen/qwen3_workload_base_configs.py (B300)"),
    **{(r, s, "Qwen3_235B_a22B", "MXFP8"): (
        f"{_acc(94, 8)}; {ATA}, {FB}; no recompute", f"{P}/qwen/qwen3_workload_base_configs.py ({s[4:]})")
       for r, s in (("26.02", "DGX-B200"), ("26.04", "DGX-B300"), ("26.04.01", "DGX-B200"))},
    ("26.04.01", "DGX-B300", "Qwen3_235B_a22B", "MXFP8"): (
        f"{_acc(94, 8)}; {HEP}, {FB}; no recompute", f"{P}/qwen/qwen3_workload_base_configs.py (B300)"),
    **{(r, "DGX-B300", "DeepSeekV3", "MXFP8"): (
        _dsv3(_split([8] * 7, 5), f"{HEP}, {FB}", "mla_up_proj", f"{ATTN_CG}; "),
        f"{P}/deepseek/deepseek_workload_base_configs.py (B300)") for r in ("26.04.01", "26.06")},
    ("26.04.01", "DGX-B200", "DeepSeekV3", "MXFP8"): (
        _dsv3(_split([4] * 15, 1), f"{DEP}, {FB}", "mla_up_proj,mlp", f"{A2A}; {ATTN_CG}; "),
        f"{P}/deepseek/deepseek_workload_base_configs.py (B200)"),
}
# values edited after first publication (the archive's are kept)
FIRST_PUBLISHED = {("26.04.01", "DGX-B300", "DeepSeekV3"): "first published as 3440 tokens/s/GPU (17a381f95)",
                   ("26.04.01", "DGX-B300", "Qwen3_235B_a22B"): "first published as 5984 tokens/s/GPU (17a381f95)"}
PRECISION = {  # the cell's precision (or the parenthesised variant's) -> (CSV precision, notes)
    "FP8-CS": ("fp8 (TE hybrid, current scaling)", "FP8 current scaling, fp8_param_gather"),
    "MXFP8": ("fp8 (TE MXFP8 block scaling)", "FP8 MXFP8 block scaling (32-element blocks), fp8_param_gather"),
    "BF16": ("bf16", "BF16"),
}


def _variant(c: dict, alt: bool) -> dict:
    """The cells of the main number or, `alt`, of the parenthesised variant (a cell without one: the same)."""
    pick = (lambda v: m.group(1) if (m := re.search(r"\(([^)]*)\)", v)) else v) if alt else \
        (lambda v: re.sub(r"\s*\(.*\)", "", v))
    return {k: pick(v) for k, v in c.items()}


def _precisions(release: str, c: dict) -> list[tuple[str, bool]]:
    """(precision, parenthesised variant?) of the row's numbers: 25.09 and 25.11 give FP8-CS and MXFP8 in one cell."""
    cell = c.get("Precision", "").upper().replace("FP8-MX", "MXFP8")
    if "(" in c["Tokens / sec / GPU"]:
        return [("FP8-CS", False), ("MXFP8", True)]
    if release == "25.09":
        return [("FP8-CS", False)]
    return [({"FP8": "FP8-CS"}.get(cell, cell), False)]


def rows(text: str):
    for system, (source_id, gpu, link) in SYSTEMS.items():
        for release, label, cells in table_rows(text, system):
            for precision, alt in _precisions(release, cells):
                key = (release, system, label, precision)
                if key not in RECIPES:
                    print(f"left out: {' '.join(key)} (module docstring)", file=sys.stderr)
                    continue
                settings, where = RECIPES[key]
                prec, note = PRECISION[precision]
                first = FIRST_PUBLISHED.get(key[:3], "")
                yield run_row(release, label, _variant(cells, alt), source_id=source_id, system=system, gpu_type=gpu,
                              interconnect=link, commit=COMMITS[release], precision=prec, precision_note=note,
                              settings=settings, where=where, first=first, suffix=f"_{precision.lower()}")


def main(argv):
    write_rows(rows(open(argv[1], encoding="utf-8").read()), FIELDS)


if __name__ == "__main__":
    main(sys.argv)


def paragraph(results, pct) -> str:
    """docs/accuracy.md's paragraph on these sources (validation/make_accuracy.py): the error by source and by
    model, and the runs predicted not to fit though they ran."""
    d = results[results.source_id.isin([s for s, _, _ in SYSTEMS.values()])]
    by_source = "; ".join(
        f"{s} {len(g)} runs, median |error| {100 * g.step_error.abs().median():.1f} %, mean {pct(g.step_error.mean())}"
        for s, g in d.groupby("source_id"))
    by_model = ", ".join(f"{m} {pct(g.step_error.median())}" for m, g in d.groupby("model"))
    unfit = d[~d.feasible.astype(bool)]
    return (
        f"- {', '.join(sorted(d.source_id.unique()))} ({by_source}) are the same Megatron-Bridge tables' "
        "Blackwell rows (NeMo 25.09 to 26.06.01; FP8 current scaling or MXFP8, BF16 for GPT-OSS; every setting "
        "read from the recipe code of the release, validation/mbridge_blackwell.py), added after the model was "
        f"built and predicted with the shipped {', '.join(sorted(d.hardware.unique()))} presets, nothing fitted to "
        "them. "
        f"Median error by model: {by_model}. The Blackwell presets' GEMM tables are OpenXLA's sm_100 kernels "
        "times the sustained-to-burst factor measured on a GB200 held at its power limit (Azure's cuBLASLt runs "
        "after 10,000 warm-up iterations; the same harness reads the lent H100's back-to-back table within 7 %; "
        "Transformer Engine's published B300 kernel times of one Llama-like layer's twelve GEMMs lie between the "
        "b300 preset's burst and power-limited tables, 0.85-0.92 and 1.02-1.10 of them, validation/mxfp8_gemm.py), "
        "an MXFP8 GEMM that table times the block-scaled kernels' rate measured there (0.951 of per-tensor FP8 "
        f"kernels, the stack's fp8_recipe mxfp8: {_mxfp8_pairs(d)}), "
        "their cuDNN attention tables (the megatron stack's kernel, Transformer Engine's fused attention) NVIDIA's "
        "published cuDNN SDPA training benchmarks on the same GPU die, of the newest release up to the one the row's "
        "container ran (Megatron-Bridge's versions page: NeMo 25.09 cuDNN 9.11.0, 25.11 9.13.1, 26.02 9.18.0, 26.04 "
        "9.20.0, 26.06 9.21.1; so the B200's 9.10 and 9.13 and the GB200's and GB300's 9.18 and 9.19 releases; "
        "docs/compute.md 'cuDNN attention on Blackwell, published'; with every row on the newest, 9.22, MBRIDGE_B200 "
        "was 31.7 % at the median, -29.6 % mean, MBRIDGE_B300 29.3 %; with the CuTe FlashAttention kernel's causal "
        "rates 32.4 %, -31.1 %, 30.4 %), and "
        "their memory-bound tables a published streaming rate measured on a GB200 "
        "and a GB300 with the lent H100's per-kernel cost and kernel classes (docs/compute.md 'Memory-bound "
        "kernels on GPUs not measured here'); with the burst GEMM tables and non-causal attention rates the two "
        "sources were 37.9 % and 35.6 % at the median, with Calculon's step table for the memory-bound kernels "
        "34.7 % and 31.4 %. Every model is still predicted fast, the dense ones too (Llama 3 8B and 3.1 405B, "
        "whose H100 rows in MBRIDGE_H100 are within 7 %): what the Blackwell profiles still take from another "
        "kernel or GPU is the candidate, not established (the H100's "
        "per-kernel cost of memory-bound kernels, no Blackwell small-kernel benchmark being published); the MoE rows "
        "add the under-prediction their H100 rows "
        "show (Qwen3-30B-A3B, DeepSeek-V3 and GPT-OSS -22 to -24 % in MBRIDGE_H100). "
        f"{_unfit_sentence(unfit)}")


def _mxfp8_pairs(d) -> str:
    """MXFP8 step over FP8-CS step of the rows that differ only in the recipe, measured and predicted."""
    step = d.set_index("run_id")
    pairs = [(cs, cs.replace("fp8-cs", "mxfp8")) for cs in step.index if cs.endswith("fp8-cs")]
    got = [(mx.replace("mbridge_", "").replace("_mxfp8", ""),
            step.measured_step_s[mx] / step.measured_step_s[cs], step.predicted_step_s[mx] / step.predicted_step_s[cs])
           for cs, mx in pairs if mx in step.index]
    return ("MXFP8 over FP8-CS step, measured / predicted: "
            + ", ".join(f"{name} {m:.3f} / {p:.3f}" for name, m, p in got)
            + "; 0.979-0.990 predicted with the per-tensor table")


def _unfit_sentence(unfit) -> str:
    """The runs predicted not to fit though they ran, and by how much (predicted device total over the GPU's
    memory, the allocator's reserve counted: memory/overheads.py)."""
    from simulator.spec.hardware import load_hardware

    if unfit.empty:
        return ("Every run is predicted to fit, as it ran (no memory was published): under FP8 Transformer Engine's "
                "GEMMs keep their FP8 inputs, its cross-entropy (these recipes' loss) keeps the bf16 logits, and "
                "Megatron-Core from 0.13 weights the experts' activation with the router's probabilities instead of "
                "keeping each expert output for the combine (docs/memory.md); without the first two 13 runs were "
                "predicted not to fit, without the third 6.")
    over = [r.predicted_mem_bytes / load_hardware(r.hardware).hbm_bytes - 1 for r in unfit.itertuples()]
    return (f"{len(unfit)} runs ({', '.join(unfit.run_id.str.replace('mbridge_', ''))}) are predicted not to fit "
            f"though they ran, {100 * min(over):.1f}-{100 * max(over):.1f} % over the GPU's memory with the "
            "allocator's 5 % reserve counted. Under FP8 Transformer Engine's GEMMs keep their FP8 inputs and its "
            "cross-entropy (these recipes' loss) keeps the bf16 logits, not an fp32 softmax (docs/memory.md); "
            "without the two, 13 runs were predicted not to fit. What else these runs keep less of is not "
            "established (no memory was published).")
