"""What GEMMs off the tensor cores' 16-byte alignment cost: the kernel measurement simulator/cost/alignment.py owes.

    python validation/gpu_unaligned_gemm.py --out unaligned.csv
    python validation/gpu_unaligned_gemm.py --out unaligned.csv --device cpu --tiny     # dry run (the tests run it)

cuBLAS runs its fastest tensor-core kernels on operands whose leading dimensions are multiples of 16 bytes. Two
BLOOM runs of one model that differ only in 64 against 128 heads (head dim 216 against 108) measured 1.42x apart
end to end (docs/accuracy.md); parasim names such GEMMs but does not time them. This measures, for fp16 and bf16:
- `attention`: the materialised attention's batched GEMMs as Megatron's legacy CoreAttention runs them (q, k, v
  strided [s, b·np, hd] views of [s, b, np, hd]; scores = baddbmm(buffer, q, kᵀ, beta=0, alpha=1/√hd) into
  [b·np, s, s]; context = bmm(probs, v)), forward and forward + backward, for head dims 108, 150, 216, 450 (BLOOM's
  misaligned ones) beside the aligned 112, 152, 224, 448 and 128, at s = 2048, b = 2 and BLOOM's width per GPU;
- `linear`: y = x·Wᵀ with an output width N of 50257 (GPT-2's vocabulary, misaligned) against 50304 (padded), and
  an input width K of 4100 against 4096: the dense GEMM's case.
Each row: the median of --iters calls after --warmup (CUDA events around each call, the calibration's protocol,
`simulator.calibrate.microbench.time_callable`) and the per-call time of --iters calls queued back to back, with the
TFLOP/s of the useful FLOPs. Rows are printed and flushed as they are measured; compare each misaligned row with
its aligned neighbour (the same work within a few per cent).
"""
from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FIELDS = ["what", "dtype", "pass", "head_dim", "heads", "seq", "batch", "m", "n", "k", "aligned", "flops",
          "time_s", "queued_s", "tflops"]
# (head dim, heads per GPU): BLOOM's 13824 wide at TP 4 (3456 per GPU: 108 x 32, 216 x 16), 14400 at TP 8 (1800:
# 150 x 12) and TP 8 with 32 heads (450 x 4), each beside the nearest aligned head dim at about the same width
ATTENTION = ((108, 32), (112, 31), (216, 16), (224, 15), (150, 12), (152, 12), (450, 4), (448, 4), (128, 27))
LINEAR = ((8192, 50257, 1024), (8192, 50304, 1024), (8192, 4096, 4100), (8192, 4096, 4096))  # (m, n, k)


def _attention(torch, dtype, device, hd, heads, seq, batch):
    """(forward, forward + backward) callables of the two batched GEMMs in CoreAttention's layout."""
    gen = torch.Generator(device=device).manual_seed(0)

    def view(requires_grad=False):
        t = torch.randn(seq, batch, heads, hd, generator=gen, device=device, dtype=dtype)
        return t.view(seq, batch * heads, hd).requires_grad_(requires_grad)

    q, k, v = view(True), view(True), view(True)
    buf = torch.empty(batch * heads, seq, seq, device=device, dtype=dtype)
    probs = torch.rand(batch * heads, seq, seq, generator=gen, device=device, dtype=dtype).requires_grad_(True)
    alpha = 1.0 / math.sqrt(hd)

    def forward():
        s = torch.baddbmm(buf, q.transpose(0, 1), k.transpose(0, 1).transpose(1, 2), beta=0.0, alpha=alpha)
        c = torch.bmm(probs, v.transpose(0, 1))
        return s, c

    def both():
        s, c = forward()
        torch.autograd.backward((s, c), (torch.ones_like(s), torch.ones_like(c)))
        for t in (q, k, v, probs):
            t.grad = None

    return forward, both


def _linear(torch, dtype, device, m, n, k):
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(m, k, generator=gen, device=device, dtype=dtype)
    w = torch.randn(n, k, generator=gen, device=device, dtype=dtype)
    return lambda: torch.nn.functional.linear(x, w)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--tiny", action="store_true", help="small shapes (the CPU dry run)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    a = ap.parse_args(argv)
    import torch

    from gpu_owed import Bench
    from simulator.calibrate import microbench as mb

    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    bench = Bench(torch, device)
    dtypes = (torch.float16, torch.bfloat16) if device.startswith("cuda") else (torch.float32,)
    seq, batch = (64, 1) if a.tiny else (2048, 2)
    scale = 16 if a.tiny else 1
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()

        def row(**r):
            t = mb.time_callable(r.pop("fn"), device=device, warmup=a.warmup, iters=a.iters).median_s
            q = bench.queued_s(r.pop("queue"), a.iters)
            r.update(time_s=t, queued_s=q, tflops=r["flops"] / min(t, q) / 1e12)
            w.writerow(r)
            f.flush()
            print(", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()), flush=True)

        for dt in dtypes:
            name = str(dt).removeprefix("torch.")
            step = 16 // torch.tensor([], dtype=dt).element_size()
            for hd, heads in ATTENTION:
                heads = max(1, heads // scale)
                fwd, both = _attention(torch, dt, device, hd, heads, seq, batch)
                flops = 2 * 2.0 * batch * heads * seq * seq * hd  # QKᵀ and P·V, full (no causal skipping)
                common = dict(what="attention", dtype=name, head_dim=hd, heads=heads, seq=seq, batch=batch, m=seq,
                              n=seq, k=hd, aligned=hd % step == 0)
                row(**common, **{"pass": "forward"}, flops=flops, fn=fwd, queue=fwd)
                row(**common, **{"pass": "forward+backward"}, flops=3 * flops, fn=both, queue=both)
                del fwd, both
            for m, n, k in LINEAR:
                m, n = max(64, m // scale), (n if not a.tiny else n // scale)
                fn = _linear(torch, dt, device, m, n, k)
                row(what="linear", dtype=name, **{"pass": "forward"}, head_dim="", heads="", seq="", batch="",
                    m=m, n=n, k=k, aligned=(n % step == 0 and k % step == 0), flops=2.0 * m * n * k, fn=fn, queue=fn)
    return 0


if __name__ == "__main__":
    sys.exit(main())
