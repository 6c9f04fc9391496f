"""llm-foundry's H100 training benchmarks as rows of validation/llmfoundry_h100.csv (published_runs.csv columns).

    git -C llm-foundry show 49521837:scripts/train/benchmarking/README.md > README.md
    python validation/llmfoundry_h100.py README.md > validation/llmfoundry_h100.csv

The shared published_runs.csv holds llm-foundry's A100 tables only (source LLMFOUNDRY); the same README, at the
same commit (mosaicml/llm-foundry 49521837, 2024-04-22), has three H100 tables, transcribed here value by
value: "H100 80GB BF16 (Large Scale, >= 128 GPUs)" (added in 5e85bd6, 2024-01-06, by the sweep in
scripts/train/benchmarking/sweep.py at that commit: 128-512 GPUs), "H100 80GB BF16" and "H100 80GB FP8" (added
in b2a43a1, 2023-10-19: 8-64 GPUs). Each row: the model's shape from the MPT pretraining yamls
(the shapes of the LLMFOUNDRY rows of published_runs.csv: the MPT pretraining yamls' d_model, n_heads,
n_layers, expansion_ratio 4, vocab_size 50368), the table's sequence length, GPUs, micro-batch, global batch, precision and
FSDP mixed-precision mode, sharding strategy (FULL_SHARD -> ZeRO-3, SHARD_GRAD_OP -> ZeRO-2), activation
checkpointing, measured tokens/s, MFU / HFU; the step time derived as GlobalBatchSize(T) / Throughput(T/s).
The attention implementation is in the notes: the large-scale sweep passes `--attn_impl flash` for the 1b,
3b, 7b and 70b models and `triton` for 13b and 30b (sweep.py at 5e85bd6); the 2023-10 tables ran
submit_benchmarks.py's default, `triton` (at b2a43a1), as the LLMFOUNDRY rules read the A100 tables.
Rows with activation CPU offload are left out (none in these tables).
"""
from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

SOURCE = ("mosaicml/llm-foundry scripts/train/benchmarking/README.md (MPT training benchmarks on MosaicML "
          "platform; commit 49521837, 2024-04-22)")
PUBLISHED = Path(__file__).resolve().parent / "published_runs.csv"


def shapes() -> dict:
    """{size: (d_model, n_layers, n_heads)} of the MPT models, as the LLMFOUNDRY rows of published_runs.csv
    hold them (the pretraining yamls' shapes; f = 4·d_model, vocab 50368)."""
    out = {}
    for r in csv.DictReader(open(PUBLISHED)):
        if r["source_id"] == "LLMFOUNDRY":
            out[r["model"].removeprefix("MPT-")] = (int(float(r["hidden"])), int(float(r["layers"])),
                                                     int(float(r["heads"])))
    return out
TABLES = {"H100 80GB BF16 (Large Scale, >= 128 GPUs)": "large", "H100 80GB BF16": "bf16", "H100 80GB FP8": "fp8"}
LARGE_SCALE_ATTN = {"1b": "flash", "3b": "flash", "7b": "flash", "70b": "flash", "13b": "triton", "30b": "triton"}
FIELDS = ("run_id,source_id,source,source_locator,model,params_b,layers,hidden,heads,kv_heads,ffn_hidden,vocab,"
          "moe_experts,moe_topk,seq_len,global_batch_seqs,micro_batch,n_gpus,gpu_type,interconnect,tp,pp,dp,cp,ep,"
          "vpp,zero_fsdp,sequence_parallel,recompute,precision,pipeline_schedule,step_time_s,tokens_per_s,"
          "tokens_per_s_per_gpu,tflops_per_gpu,tflops_basis,mfu_pct,hfu_pct,util_basis,mem_gb_per_gpu,mem_basis,"
          "bubble_fraction,bubble_basis,derived_step_time_s,derived_how,trust,notes").split(",")
UTIL_BASIS = ("MFU=(6*N + 12*L*d*S)*tokens/s/(GPUs*peak); HFU uses 8*N+16*L*d*S when activation checkpointing (no "
              "attention recompute counted); N includes embeddings; peak from Composer GPU_AVAILABLE_FLOPS for the "
              "run precision (fp8 rows use the FP8 peak)")


def tables(text: str):
    """(table name, kind, [row cells]) for each H100 table of the README."""
    out, name = [], None
    for line in text.splitlines():
        m = re.match(r"^## (.+?)\s*$", line)
        if m:
            name = m.group(1) if m.group(1) in TABLES else None
            if name:
                out.append((name, TABLES[name], []))
            continue
        if name and line.startswith("|") and "h100_80gb" in line:
            out[-1][2].append([c.strip() for c in line.strip().strip("|").split("|")])
    return out


def row(table: str, kind: str, c: list[str], index: int) -> dict:
    (size, seq, gpus, _gpu, mfu, hfu, tflop, mbs, accum, gbs, _sps, tps, tpsg, gbs_t, prec, mp, shard, ac,
     offload, nparams) = c
    if offload != "False":
        raise ValueError(f"activation CPU offload in {table}: {c}")
    d, L, a = shapes()[size]
    tf = float(tflop)
    attn = LARGE_SCALE_ATTN[size] if kind == "large" else "triton"
    why = ("sweep.py at 5e85bd6 passes --attn_impl " + attn if kind == "large"
           else "submit_benchmarks.py default at b2a43a1")
    return {
        "run_id": f"foundry_h100_{kind}_{size}_s{seq}_g{gpus}_{index}", "source_id": "LLMFOUNDRY_H100",
        "source": SOURCE, "source_locator": f"table '{table}'", "model": f"MPT-{size}",
        "params_b": round(int(nparams) / 1e9, 3), "layers": L, "hidden": d, "heads": a, "ffn_hidden": 4 * d,
        "vocab": 50368, "seq_len": int(seq), "global_batch_seqs": int(gbs), "micro_batch": int(mbs),
        "n_gpus": int(gpus), "gpu_type": "H100-SXM5-80GB", "interconnect": "not stated", "tp": 1, "pp": 1,
        "dp": int(gpus), "cp": 1, "ep": 1,
        "zero_fsdp": "FSDP SHARD_GRAD_OP (ZeRO-2-like)" if shard == "SHARD_GRAD_OP" else "FSDP FULL_SHARD (ZeRO-3-like)",
        "recompute": "full (FSDP activation checkpointing)" if ac == "True" else "none",
        "precision": f"{prec} (MP mode {mp})", "tokens_per_s": int(tps), "tokens_per_s_per_gpu": int(tpsg),
        "tflops_per_gpu": tf / 1e12 if tf > 1e6 else tf,
        "tflops_basis": "'Model TFLOP' column = model FLOP/s per GPU (3x fwd, incl. attention)",
        "mfu_pct": float(mfu), "hfu_pct": float(hfu), "util_basis": UTIL_BASIS,
        "derived_step_time_s": round(int(gbs_t) / int(tps), 3), "derived_how": "GlobalBatchSize(T)/Throughput(T/s)",
        "trust": "A-",
        "notes": f"GradAccum={accum}. attn_impl={attn} ({why}). Learned positional embeddings, biases on. "
                 "Short runs (~12 steps) for throughput.",
    }


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = open(argv[0]).read()
    w = csv.DictWriter(sys.stdout, fieldnames=FIELDS, lineterminator="\n")
    w.writeheader()
    i = 0
    for name, kind, rows in tables(text):
        for c in rows:
            w.writerow(row(name, kind, c, i))
            i += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
