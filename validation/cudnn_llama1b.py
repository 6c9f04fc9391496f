"""A published single-GPU training benchmark on an H200 and a B200: Hugging Face Llama-3.2-1B with three SDPA backends.

    python validation/cudnn_llama1b.py      # the markdown of docs/validation-h200.md's section

NVIDIA's cuDNN frontend publishes `benchmark/Llama-3.2-1B-Training` (NVIDIA/cudnn-frontend 7606332, 2025-05-22;
`validation/data/cudnn_llama1b.csv`, the two timing files as published): transformers' LlamaForCausalLM built from
the Llama-3.2-1B config (16 layers, hidden 2048, 32 query and 8 KV heads, FFN 8192, vocabulary 128256, tied
embeddings), randomly initialised, every tensor in bf16 (`torch.set_default_dtype(torch.bfloat16)`), fed
`inputs_embeds`; one iteration = forward, `nn.CrossEntropyLoss` on the bf16 logits, `zero_grad` (set to None),
backward, `torch.optim.SGD` step; mean over 100 iterations after 5 warm-up ones, for six batch x sequence shapes
(24 x 768 to 1 x 16384) and torch's three SDPA backends (`sdpa_kernel`: cuDNN, memory-efficient, flash). The
container: NGC PyTorch 25.04 (torch 2.7.0, CUDA 12.9, cuDNN 9.9.0). The clocks were locked at the GPUs' base clocks
(B200 1665 MHz, H200 1500 MHz), below the boost clocks the presets' tables were measured or published at, so the
absolute step times are not what a default-clock GPU does; the ratios between backends are the check.

parasim: the `hf` stack (transformers' modelling code: fp32 RMSNorm, rotate_half RoPE, unfused SwiGLU, eager launch
bound), its attention kernel set per backend (cuDNN -> `cudnn`, memory-efficient -> `xformers`, flash -> `flash2`:
torch's flash backend is FlashAttention-2), cross-entropy `torch` (on the bf16 logits), SGD in bf16 with no master
weights, on dgx-h200 and dgx-b200. Nothing is fitted to these rows.
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))
DATA = ROOT / "data" / "cudnn_llama1b.csv"
KERNEL = {"CUDNN_ATTENTION": "cudnn", "EFFICIENT_ATTENTION": "xformers", "FLASH_ATTENTION": "flash2"}
PRESET = {"H200": "dgx-h200", "B200": "dgx-b200"}
BASE_CLOCK_MHZ = {"H200": 1500, "B200": 1665}  # the README's locked clocks


def rows() -> list[dict]:
    return list(csv.DictReader(open(DATA)))


def predict(gpu: str, backend: str, batch: int, seq: int) -> float:
    """parasim's step time of one published row (module docstring)."""
    from simulator.estimate import estimate
    from simulator.spec.hardware import load_hardware
    from simulator.spec.layout import Layout
    from simulator.spec.model import ModelSpec
    from simulator.spec.stack import load_stack
    from simulator.spec.training import Training

    model = ModelSpec(name="llama3.2-1b", hidden_size=2048, num_layers=16, num_heads=32, num_kv_heads=8,
                      ffn_hidden_size=8192, vocab_size=128256, mlp="swiglu", norm="rmsnorm", tie_word_embeddings=True)
    tr = Training(seq_length=seq, global_batch_size=batch, precision="bf16", grad_dtype="bf16", master_weights=False,
                  optimizer="sgd", optimizer_dtype="bf16", flash_attention=True, cross_entropy="torch",
                  stack=load_stack("hf", attention_kernel=KERNEL[backend]))
    return float(estimate(model, tr, Layout(num_gpus=1, micro_batch_size=batch), load_hardware(PRESET[gpu])).step_s)


def check() -> list[dict]:
    out = []
    for r in rows():
        b, s = int(r["batch"]), int(r["seq_len"])
        out.append({"gpu": r["gpu"], "backend": r["backend"], "batch": b, "seq": s, "measured_s": float(r["time_s"]),
                    "predicted_s": predict(r["gpu"], r["backend"], b, s)})
    return out


def lines() -> list[str]:
    """Markdown: per GPU and shape, the measured and predicted step per backend and the backend ratios."""
    c = check()
    by = {(r["gpu"], r["batch"], r["seq"], r["backend"]): r for r in c}
    out = ["| GPU | batch x seq | cuDNN: measured / predicted s | efficient / cuDNN: measured, predicted | "
           "flash / cuDNN: measured, predicted |", "|---|---|---|---|---|"]
    ratio_err = {}
    for gpu in PRESET:
        for b, s in sorted({(r["batch"], r["seq"]) for r in c if r["gpu"] == gpu}, key=lambda x: x[1]):
            cu = by[gpu, b, s, "CUDNN_ATTENTION"]
            cells = []
            for other in ("EFFICIENT_ATTENTION", "FLASH_ATTENTION"):
                o = by[gpu, b, s, other]
                mr, pr = o["measured_s"] / cu["measured_s"], o["predicted_s"] / cu["predicted_s"]
                ratio_err.setdefault((gpu, other), []).append(pr / mr - 1)
                cells.append(f"{mr:.2f}, {pr:.2f}")
            out.append(f"| {gpu} ({PRESET[gpu]}) | {b} x {s} | {cu['measured_s']:.3f} / {cu['predicted_s']:.3f} | "
                       + " | ".join(cells) + " |")
    out.append("")
    for gpu in PRESET:
        lev = [r["predicted_s"] / r["measured_s"] - 1 for r in c if r["gpu"] == gpu]
        eff, fl = ratio_err[gpu, "EFFICIENT_ATTENTION"], ratio_err[gpu, "FLASH_ATTENTION"]
        out.append(f"{gpu} at its locked {BASE_CLOCK_MHZ[gpu]} MHz: step time median {100 * median(lev):+.1f} % "
                   f"(range {100 * min(lev):+.1f} to {100 * max(lev):+.1f} %) over {len(lev)} rows; backend ratios "
                   f"against cuDNN, error of the predicted ratio: efficient median {100 * median(eff):+.1f} % (range "
                   f"{100 * min(eff):+.1f} to {100 * max(eff):+.1f} %), flash median {100 * median(fl):+.1f} % "
                   f"(range {100 * min(fl):+.1f} to {100 * max(fl):+.1f} %).")
    return out


if __name__ == "__main__":
    print("\n".join(lines()))
