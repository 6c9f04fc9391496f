"""NVIDIA's DGX Cloud benchmarking recipes (NeMo on H100: Llama 3.1, Nemotron-4, GPT-3) as rows of
validation/dgxc_h100.csv.

    for f in llama3.1/README_8b llama3.1/README_70b llama3.1/README_405b nemotron/README_15b nemotron/README_340b \
             nemo_megatron/README_175b; do git -C dgxc-benchmarking show 35a9aec:$f.md; done > dgxc.md
    python validation/dgxc_h100.py dgxc.md > validation/dgxc_h100.csv

NVIDIA/dgxc-benchmarking at 35a9aec (release v24.11.1) publishes, for each Llama 3.1 size, the measured training
step time of NeMo 24.09 (Megatron-core with Transformer Engine) on DGX Cloud H100 nodes, BF16 and FP8, over 8 to
2304 GPUs: "Training step time (seconds per step)", the last step of a 50-step run (README: "Since the performance
fluctuates significantly at the beginning, we are using the last training step timing"). Each table header gives
the layout (TP, PP, CP, VP, MBS, GA) and each column the GPU count and global batch; the 405B table adds rows for
its reduced-depth runs on 32-192 GPUs (Layers, GBS, PP, VP). Everything else comes from the recipe's own files at
that commit (llama3.1/llama3.1_{8b,70b,405b}.yaml, configure.sh, launch.sh; the mapping rules are
`SOURCE_RULES["DGXC_H100"]`, simulator/validate/sources.py):

- shapes from the yamls: 8B 32 layers, h 4096, 32 heads, 8 query groups, FFN 14336; 70B 80 layers, h 8192,
  64 heads, 8 groups, FFN 28672; 405B 126 layers, h 16384, 128 heads, 16 query groups (the yaml's, not the
  released model's 8), FFN 53248; sequence 8192; RMSNorm, SwiGLU, RoPE, no biases, untied output layer;
- vocabulary: the Llama 3 tokenizer's 128256 for 8B and 70B (configure.sh sets tokenizer.type to the Llama
  tokenizer), GPT-2's 50257 for 405B (its yaml's GPT2BPETokenizer with mock data, synthetic); both padded by
  Megatron to a multiple of 128·TP (make_vocab_size_divisible_by 128);
- no activation recompute (activations_checkpoint_granularity null), sequence parallelism where TP > 1,
  the distributed optimizer (distributed_fused_adam: ZeRO-1) with bf16 gradient reduction (grad_sync_dtype),
  TP communication overlap with userbuffers for 70B and 405B (ub_tp_comm_overlap), interleaved 1F1B where VP
  is given;
- FP8 rows: Transformer Engine's hybrid format (E4M3 forward, E5M2 backward) with delayed scaling (amax history
  1024), FP8 parameters (fp8_params).

The same release publishes two more recipes on the same machines, each a source of its own (`SOURCE_RULES`
"DGXC_H100_NEMOTRON", "DGXC_H100_GPT3"), from their own yaml and launch.sh at that commit:

- Nemotron-4 15B and 340B (nemotron/README_{15b,340b}.md, nemotron4-{15b,340b}-synth.yaml; NeMo 24.09,
  launch.sh FW_VERSION): sequence 4096, LayerNorm (layernorm1p), squared-ReLU MLP, RoPE on half the head,
  no biases, untied output layer, GQA 8 groups, the 256,000-token tokenizer (nemotron_2_256k.model) padded to
  128·TP; 15B TP 4, PP 1, micro-batch 4, TP overlap on; 340B TP 8, PP 8, VP 12, micro-batch 1, TP overlap off
  (ub_tp_comm_overlap False); cuDNN attention, no dropout, the distributed optimizer with bf16 reduction;
- GPT-3 175B (nemo_megatron/README_175b.md, gpt3_175b_hydra.yaml, launch.sh: the NeMo 24.05 container):
  sequence 2048, 96 layers, h 12288, 96 heads, FFN 49152, GeLU, LayerNorm, biases, learned positions, the
  input embedding tied to the output layer (NeMo's defaults, the yaml sets none of them), GPT-2's 50257 tokens
  padded to 128·TP, dropout 0.1 (hidden and attention), FlashAttention (launch.sh NVTE_FUSED_ATTN=0), TP 4,
  PP 8, VP 12, micro-batch 1, TP overlap on, FP8 parameters in the FP8 rows.

The measured step is the table's; the tokens/s cell is kept and must agree with GBS·sequence / step within 1 %
(the 405B BF16 96-GPU cell reads "8.7  5": 8.75 s, which its tokens/s confirms).
"""
from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

RELEASE = ("NVIDIA/dgxc-benchmarking {files} at 35a9aec (release v24.11.1, 2024-11): NeMo {fw} ({what}) on DGX "
           "Cloud H100")
MCORE = "Megatron-core, Transformer Engine"
# size: (family, source_id, layers, hidden, heads, query groups, ffn, vocab, nominal params in billions, sequence,
#        the README files, NeMo container)
MODELS = {
    "8b": ("Llama-3.1", "DGXC_H100", 32, 4096, 32, 8, 14336, 128256, 8.03, 8192,
           "llama3.1/README_{8b,70b,405b}.md", "24.09"),
    "70b": ("Llama-3.1", "DGXC_H100", 80, 8192, 64, 8, 28672, 128256, 70.6, 8192,
            "llama3.1/README_{8b,70b,405b}.md", "24.09"),
    "405b": ("Llama-3.1", "DGXC_H100", 126, 16384, 128, 16, 53248, 50257, 405.9, 8192,
             "llama3.1/README_{8b,70b,405b}.md", "24.09"),
    "15b": ("Nemotron-4", "DGXC_H100_NEMOTRON", 32, 6144, 48, 8, 24576, 256000, 15.6, 4096,
            "nemotron/README_{15b,340b}.md", "24.09"),
    "340b": ("Nemotron-4", "DGXC_H100_NEMOTRON", 96, 18432, 96, 8, 73728, 256000, 341.0, 4096,
             "nemotron/README_{15b,340b}.md", "24.09"),
    "175b": ("GPT-3", "DGXC_H100_GPT3", 96, 12288, 96, 96, 49152, 50257, 175.0, 2048, "nemo_megatron/README_175b.md",
             "24.05"),
}
FIELDS = next(csv.reader(open(Path(__file__).resolve().parent / "published_runs.csv")))  # the shared columns
HEADER = re.compile(r"^\|\s*(?:Llama 3\.1 |Nemotron4 |NeMo Megatron )(\d+b )?(\S+) (BF16|FP8) \(([^)]*)\)\s*\|(.*)$")
COLUMN = re.compile(r"(\d+)x H100 GPUs(?:\s*\(GBS=(\d+)\))?")
UTIL_BASIS = ("README: MFU = GBS x model FLOPs per sample / step time / GPUs / peak (989 TFLOP/s BF16, 1979 "
              "TFLOP/s FP8 for the FP8 rows)")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _number(cell: str) -> float:
    return float(cell.replace(" ", "").rstrip("%"))


def tables(text: str):
    """(size, NeMo version, dtype, {layout key: value}, [column dicts]) for each table (GPT-3's header names no
    size: its recipe's only one, 175b)."""
    out, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        m = HEADER.match(line)
        if not m:
            continue
        size, nemo, dtype, spec, rest = m.groups()
        size = size.strip() if size else "175b"
        layout = {k.strip(): v.strip() for k, v in (p.split("=") for p in spec.split(","))}
        cols = [dict(gpus=int(g), gbs=int(b) if b else None) for g, b in COLUMN.findall(rest)]
        for row in lines[i + 2:]:
            if not row.startswith("|"):
                break
            name, *vals = _cells(row)
            key = {"Layers": "layers", "GBS": "gbs", "PP": "pp", "VP": "vp",
                   "Training step time (seconds per step)": "step", "Throughput in tokens per second": "tps",
                   "Model flops utilization": "mfu"}.get(name)
            if key is None:
                continue
            for col, v in zip(cols, vals):
                if v and v != "n/a":
                    col[key] = _number(v)
                elif key == "vp":
                    col[key] = None
        out.append((size, nemo, dtype, layout, cols))
    return out


NAMES = {"Llama-3.1": "llama31", "Nemotron-4": "nemotron4", "GPT-3": "gpt3"}
ATTENTION = {  # the attention backend each recipe's scripts select (Transformer Engine's NVTE_* variables)
    "8b": "cuDNN fused attention (NVTE_FUSED_ATTN=1, NVTE_FLASH_ATTN=0)",
    "70b": "cuDNN fused attention (NVTE_FUSED_ATTN=1, NVTE_FLASH_ATTN=0)",
    "405b": "cuDNN fused attention (NVTE_FUSED_ATTN=1, NVTE_FLASH_ATTN=0)",
    "15b": "cuDNN fused attention (configure.sh NVTE_FUSED_ATTN=1)",
    "340b": "FlashAttention (configure.sh NVTE_FUSED_ATTN=0)",
    "175b": "FlashAttention (launch.sh NVTE_FUSED_ATTN=0)",
}


def _notes(size, family, nemo, fw, dtype, tp, gbs, dp, mbs) -> str:
    """The row's notes: what its recipe sets (the mapping reads the TP overlap, the attention backend and the FP8
    weights here); `nemo` the tables' NeMo release, `fw` the container the recipe ran."""
    head = (f"NeMo {nemo}, {dtype}" if nemo == fw else
            f"NeMo {nemo} tables, the NeMo {fw} container (launch.sh), {dtype}")
    overlap = "TP communication overlap (ub_tp_comm_overlap)" if tp > 1 else "no TP"
    extra = {"Nemotron-4": " squared-ReLU MLP, LayerNorm (layernorm1p), RoPE on half the head dimension;",
             "GPT-3": " GeLU, LayerNorm, biases, learned positions, tied embeddings, dropout 0.1;"}.get(family, "")
    fp8 = " FP8 parameters (fp8_params);" if dtype == "FP8" and family != "Llama-3.1" else ""
    return (f"{head};{extra} {overlap}; distributed_fused_adam (overlap_grad_sync, overlap_param_sync, grad_sync_dtype "
            f"bf16); {ATTENTION[size]};{fp8} NCCL_NVLS_ENABLE=0; last step of 50; GA {gbs // (dp * mbs)}.")


def rows(text: str):
    for size, nemo, dtype, layout, cols in tables(text):
        family, source_id, layers, h, heads, groups, ffn, vocab, params, seq, files, fw = MODELS[size]
        tp, cp, mbs = int(layout["TP"]), int(layout.get("CP", 1)), int(layout["MBS"])
        for col in cols:
            n, L = col["gpus"], int(col.get("layers", layers))
            pp = int(col.get("pp", layout["PP"]))
            vp = col["vp"] if "vp" in col else (int(layout["VP"]) if "VP" in layout else None)
            gbs, step, tps = int(col["gbs"]), col["step"], col["tps"]
            if abs(gbs * seq / tps / step - 1) > 0.01:
                raise SystemExit(f"{size} {dtype} {n} GPUs: step {step} s disagrees with {tps} tokens/s")
            dp = n // (tp * pp * cp)
            name = f"{family}-{size[:-1]}B" + (f" ({L} of {layers} layers)" if L != layers else "")
            notes = _notes(size, family, nemo, fw, dtype, tp, gbs, dp, mbs)
            if L != layers:
                notes += f" Reduced-depth run of the 405B recipe (configure.sh: NUM_LAYERS={L}, PP={pp})."
            title = {"Llama-3.1": "Llama 3.1 ", "Nemotron-4": "Nemotron4 ", "GPT-3": "NeMo Megatron "}[family]
            label = "" if family == "GPT-3" else f"{size} "  # GPT-3's table titles name no size
            yield {
                "run_id": f"dgxc_h100_{NAMES[family]}_{size}_{dtype.lower()}_g{n}", "source_id": source_id,
                "source": RELEASE.format(files=files, fw=fw, what=MCORE),
                "source_locator": f"README_{size}.md table '{title}{label}{nemo} {dtype} ({layout_text(layout)})'",
                "model": name, "params_b": params if L == layers else "", "layers": L, "hidden": h, "heads": heads,
                "kv_heads": groups, "ffn_hidden": ffn, "vocab": vocab, "seq_len": seq, "global_batch_seqs": gbs,
                "micro_batch": mbs, "n_gpus": n, "gpu_type": "H100-SXM5-80GB",
                "interconnect": "DGX Cloud H100 nodes: NVLink/NVSwitch, InfiniBand", "tp": tp, "pp": pp, "dp": dp,
                "cp": cp, "ep": 1, "vpp": vp if vp and pp > 1 else "",
                "zero_fsdp": "ZeRO-1 (NeMo distributed_fused_adam)", "sequence_parallel": "yes" if tp > 1 else "no",
                "recompute": "none", "precision": "bf16" if dtype == "BF16" else "fp8 (TE hybrid, delayed scaling)",
                "pipeline_schedule": "interleaved 1F1B" if vp and pp > 1 else ("1F1B" if pp > 1 else ""),
                "step_time_s": step, "tokens_per_s": tps, "tokens_per_s_per_gpu": round(tps / n, 1),
                "mfu_pct": col.get("mfu", ""), "util_basis": UTIL_BASIS, "trust": "A", "notes": notes,
            }


def layout_text(layout: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in layout.items())


def write_rows(rows, fields=FIELDS, out=None) -> None:
    """The rows as CSV (blank where a row has no value) on `out` (stdout): the recipe importers' output."""
    w = csv.DictWriter(out or sys.stdout, fields, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: r.get(k, "") for k in fields})


def main(argv):
    text = open(argv[1], encoding="utf-8").read() if len(argv) > 1 else sys.stdin.read()
    write_rows(rows(text))


if __name__ == "__main__":
    main(sys.argv)
