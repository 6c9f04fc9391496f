"""What attention dropout costs inside a FlashAttention kernel (what cost/attention.py flash_dropout_note owes).

    python validation/gpu_attention_dropout.py --out dropout.csv
    python validation/gpu_attention_dropout.py --out dropout.csv --device cpu --tiny     # dry run (the tests run it)

Every attention table parasim ships was measured with dropout 0, and an estimate with dropout and FlashAttention says
so (`not_modelled`). NVIDIA's GPT-3 175B recipe trains with attention dropout 0.1 inside Transformer Engine's fused
attention (docs/accuracy.md, DGXC_H100_GPT3). This times torch's scaled_dot_product_attention, forward and forward +
backward, with dropout_p 0 and 0.1 on each fused backend that takes dropout (flash, efficient, cuDNN; math on CPU),
causal, bf16, at GPT-3 175B's shape per GPU under TP 4 (24 heads of 128, 2048 tokens) and Llama-3-8B's (32 heads of
128, 4096 and 8192 tokens), batch 1 and 4. Each row: per-call time of --calls calls queued between CUDA events
(validation/gpu_owed.py Bench.queued_s, after --warmup extra forward + backward calls), printed and flushed as
it is measured; "unsupported: ..." where a backend refuses the shape or dropout.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FIELDS = ["backend", "batch", "heads", "seq", "head_dim", "dropout_p", "fwd_s", "fwd_bwd_s", "status"]
SHAPES = ((1, 24, 2048), (4, 24, 2048), (1, 32, 4096), (1, 32, 8192))  # (batch, heads per GPU, tokens), head dim 128
DROPOUT = (0.0, 0.1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--tiny", action="store_true", help="small shapes (the CPU dry run)")
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=0, help="extra calls of each case before it is timed")
    ap.add_argument("--shapes", default="", help="BxHxS,... (default: SHAPES)")
    a = ap.parse_args(argv)
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from gpu_owed import Bench

    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    bench = Bench(torch, device)
    backends = ({"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                 "cudnn": SDPBackend.CUDNN_ATTENTION} if bench.cuda else {"math": SDPBackend.MATH})
    dt = torch.bfloat16 if bench.cuda else torch.float32
    shapes, hd = (((1, 2, 64),), 32) if a.tiny else (SHAPES, 128)
    if a.shapes:
        shapes = tuple(tuple(int(v) for v in s.split("x")) for s in a.shapes.split(","))
    F = torch.nn.functional
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for b, h, s in shapes:
            q, k, v = (torch.randn(b, h, s, hd, device=device, dtype=dt, requires_grad=True) for _ in range(3))
            go = torch.randn(b, h, s, hd, device=device, dtype=dt)
            for name, be in backends.items():
                for p in DROPOUT:
                    r = dict(backend=name, batch=b, heads=h, seq=s, head_dim=hd, dropout_p=p)
                    try:
                        with sdpa_kernel([be]):
                            def fwd(p=p):
                                return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)

                            def both():
                                return torch.autograd.grad(fwd(), (q, k, v), go)

                            for _ in range(a.warmup):
                                both()
                            r.update(fwd_s=bench.queued_s(fwd, a.calls), fwd_bwd_s=bench.queued_s(both, a.calls),
                                     status="ok")
                    except RuntimeError as e:  # the backend refuses this shape or dropout
                        r.update(fwd_s="", fwd_bwd_s="", status="unsupported: " + str(e).splitlines()[0][:120])
                    w.writerow(r)
                    f.flush()
                    print(", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()),
                          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
