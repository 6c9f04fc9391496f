"""Decode attention against NVIDIA's published cuDNN decode kernels: the KV-cache stream on the presets' memory tables.

    python validation/cudnn_decode_check.py      # the markdown of docs/inference.md's section

parasim times one layer's decode attention as one kernel that reads the layer's KV cache, Q and writes O
(cost/inference.py `decode_attention`), on the preset's memory-bound table (`[efficiency.memory]`: t0 + bytes / B,
fitted to torch's add and SiLU, read and write; on Blackwell a published streaming rate with the lent H100's
kernel classes). NVIDIA's cuDNN frontend publishes the decode attention kernel's own time
(benchmark/attention_inference decode_sweep, cuDNN 9.27, bf16 paged KV cache of 16-token pages, one query token,
Llama 3.1 70B's 64 query heads over 8 KV heads, head dim 128; `validation/data/cudnn_decode.csv`, transcribed, each
row checked against the rate the source prints) on an H200, B200, GB200, GB300 and an A100 80GB PCIe: data no memory
table was fitted to.
The H200's memory table was measured on the lent H200; the Blackwell ones are transfers (docs/compute.md
'Memory-bound kernels on GPUs not measured here'), which this checks (`memory_only`: the generic table every preset
without a decode table uses). Since the presets of these GPUs hold a decode attention table fitted to these kernels
(validation/decode_attention_tables.py, whose held-out check is the honest one), their rows here are in-sample.
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))
DATA = ROOT / "data" / "cudnn_decode.csv"
# the GPU of the published rows -> the preset compared with them (the A100 rows ran on an 80 GB PCIe card, 1.94 TB/s:
# dgx-a100-80g is the SXM part, 2.04 TB/s, so its predictions there run ahead by up to that ratio)
PRESET = {"H200": "dgx-h200", "B200": "dgx-b200", "GB200": "gb200-nvl72", "GB300": "gb300-nvl72",
          "A100 PCIe": "dgx-a100-80g"}


def rows() -> list[dict]:
    return list(csv.DictReader(open(DATA)))


def shape(r: dict):
    """(model, training, batch, context) of one published decode row: its heads, KV heads and head dim, bf16."""
    from simulator.spec.model import ModelSpec
    from simulator.spec.training import Training

    b, c, h, kv, d = (int(r[k]) for k in ("batch", "kv_len", "heads", "kv_heads", "head_dim"))
    model = ModelSpec(name="cudnn-decode", hidden_size=h * d, num_layers=1, num_heads=h, num_kv_heads=kv,
                      ffn_hidden_size=4 * h * d, vocab_size=32000, mlp="swiglu", norm="rmsnorm")
    return model, Training(seq_length=c, global_batch_size=b, precision="bf16"), b, c


def check(memory_only: bool = False) -> list[dict]:
    """Per published row: measured and predicted seconds and bytes of one decode attention kernel on the GPU's
    preset (`memory_only`: without its decode attention table, on its memory table)."""
    from dataclasses import replace

    from simulator.cost.inference import decode_attention
    from simulator.spec.hardware import load_hardware

    out = []
    for r in rows():
        hw = load_hardware(PRESET[r["gpu"]])
        if memory_only:
            hw = replace(hw, efficiency={k: v for k, v in hw.efficiency.items() if k != "memory_decode_attention"})
        model, tr, b, c = shape(r)
        cost = decode_attention(model, tr, hw, batch=b, context=c)
        out.append({"gpu": r["gpu"], "batch": b, "context": c, "bytes": float(cost.kv_bytes + cost.activation_bytes),
                    "measured_s": float(r["time_ms"]) * 1e-3, "predicted_s": float(cost.time_s)})
    return out


def lines(memory_only: bool = True) -> list[str]:
    """Markdown: by GPU, the error in two bands of kernel size, and the largest kernels' measured rate."""
    c = check(memory_only)
    out = ["| GPU (preset) | kernels | error, < 100 MB | error, >= 1 GB | largest kernels' measured rate | "
           "preset's rate at those bytes |", "|---|---|---|---|---|---|"]
    from simulator.spec.hardware import load_hardware

    for gpu, preset in PRESET.items():
        g = [r for r in c if r["gpu"] == gpu]
        err = lambda rs: [r["predicted_s"] / r["measured_s"] - 1 for r in rs]  # noqa: E731
        small, big = err([r for r in g if r["bytes"] < 1e8]), err([r for r in g if r["bytes"] >= 1e9])
        top = max(g, key=lambda r: r["bytes"])
        hw = load_hardware(preset)
        preset = preset + (", memory table" if memory_only else "")
        out.append(f"| {gpu} ({preset}) | {len(g)} | {100 * min(small):+.0f} to {100 * max(small):+.0f} % | "
                   f"{100 * min(big):+.1f} to {100 * max(big):+.1f} % | "
                   f"{top['bytes'] / top['measured_s'] / 1e12:.2f} TB/s "
                   f"| {top['bytes'] / top['predicted_s'] / 1e12:.2f} TB/s ({hw.hbm_bytes_per_s / 1e12:.2f} peak) |")
    allerr = [r["predicted_s"] / r["measured_s"] - 1 for r in c]
    big = [r["predicted_s"] / r["measured_s"] - 1 for r in c if r["bytes"] >= 1e9]
    return out + ["", f"All {len(c)} kernels: median |error| {100 * median(map(abs, allerr)):.1f} %; the "
                      f"{len(big)} of 1 GB or more: median |error| {100 * median(map(abs, big)):.1f} %, max "
                      f"{100 * max(map(abs, big)):.1f} %."]


if __name__ == "__main__":
    print("\n".join(lines()))
