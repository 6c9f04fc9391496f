"""Ring context-parallel attention, one rank's kernels, timed on one GPU: what the ring runs against what
parasim charges for it.

    python validation/gpu_cp_attention.py --out cp_attention.csv            # on a GPU (about a minute)
    python validation/gpu_cp_attention.py --out x.csv --device cpu --tiny    # dry run (the tests run it)

Under load-balanced ring CP over c ranks (Megatron-core / Transformer Engine `AttnFuncWithCPAndKVP2P`,
torchtitan's `context_parallel`) the sequence is cut into 2c chunks and rank r holds chunks r and 2c-1-r,
n = s/c queries. Per layer pass a rank runs c attention kernels, one per ring step:

- step 0, `diag`: its queries against its own keys, causal, n x n;
- steps i = 1 .. c-1, non-causal, each half the work of `diag`'s square:
  `kv_half` (i <= r): all n queries against the first chunk of the received keys, n x n/2;
  `q_half` (i > r): the second query chunk against all n received keys, n/2 x n.
  Every step after 0 has both kinds on some rank, so each step lasts max(kv_half, q_half).

and merges the steps' partial outputs with their log-sum-exps (forward: out += out_i * exp(lse_i - lse), in
fp32; backward: dq += dq_i, dkv += dkv_i). parasim times the rank's attention as one causal kernel pass of
n queries (η at s/c) over the rank's share of the FLOPs, i.e. as c x `diag`, with no merge.

Rows (CSV and stdout, each as measured): piece, backend (torch SDPA's flash = FlashAttention-2, cudnn =
cuDNN's fused attention, the kernel TE runs with NVTE_FUSED_ATTN=1), batch, heads, q_len, kv_len, causal,
fwd_s / bwd_s (CUDA events around back-to-back calls, the median of --repeats timings), TFLOP/s
(forward 4·b·h·q·kv·d, halved when causal; backward 2.5x forward). Pieces `merge_fwd_<rows>` /
`merge_bwd_<rows>` are an eager torch replica of the merge arithmetic on `rows` query rows (TE fuses the
forward one with its jit_fuser: the eager replica is an upper bound; the backward adds are single kernels
in both). Heads are the rank's query heads; K and V have as many (GQA changes no FLOPs; TE and cuDNN read
fewer K/V bytes, which at d = 128 and these lengths is under 1 % of a kernel's time). Also `square`:
n x n non-causal, the Ulysses-style kernel.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path

FIELDS = ["piece", "backend", "batch", "heads", "q_len", "kv_len", "head_dim", "causal", "fwd_s", "bwd_s",
          "fwd_tflops", "bwd_tflops", "status"]
# (rank queries n = s/c, heads per rank): DGX Cloud NeMo Llama 3.1 (s 8192, CP 2: 8B TP1 32 heads, 70B/405B TP8
# 16 heads) first, then torchtitan's long-context rows (s/c = 32768), then the length sweep between.
SHAPES = [(4096, 32), (4096, 16), (32768, 32), (32768, 16), (2048, 32), (8192, 32), (16384, 32), (8192, 16)]
TINY = [(64, 2), (32, 2)]


def _median_time_s(torch, fn, cuda: bool, calls: int, repeats: int) -> float:
    """Median over `repeats` of the per-call time of `calls` back-to-back calls (CUDA events on a GPU)."""
    fn()
    if cuda:
        torch.cuda.synchronize()
    got = []
    for _ in range(repeats):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(calls):
                fn()
            b.record()
            torch.cuda.synchronize()
            got.append(a.elapsed_time(b) / 1e3 / calls)
        else:
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            got.append((time.perf_counter() - t0) / calls)
    return statistics.median(got)


def _pieces(n: int):
    """(piece, q_len, kv_len, causal) of one rank's ring steps at n = s/c queries."""
    return [("diag", n, n, True), ("kv_half", n, n // 2, False), ("q_half", n // 2, n, False),
            ("square", n, n, False)]


def _attention_row(torch, F, backend, b, h, q_len, kv_len, d, causal, device, calls, repeats):
    dt = torch.bfloat16 if device.startswith("cuda") else torch.float32
    q = torch.randn(b, h, q_len, d, device=device, dtype=dt, requires_grad=True)
    k = torch.randn(b, h, kv_len, d, device=device, dtype=dt, requires_grad=True)
    v = torch.randn(b, h, kv_len, d, device=device, dtype=dt, requires_grad=True)
    cuda = device.startswith("cuda")
    with _backend(torch, backend):
        fwd = _median_time_s(torch, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), cuda,
                             calls, repeats)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        dout = torch.randn_like(out)
        bwd = _median_time_s(torch, lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), cuda,
                             calls, repeats)
    flops = 4.0 * b * h * q_len * kv_len * d / (2 if causal else 1)
    return dict(fwd_s=fwd, bwd_s=bwd, fwd_tflops=flops / fwd / 1e12, bwd_tflops=2.5 * flops / bwd / 1e12)


def _backend(torch, name):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                        "math": SDPBackend.MATH}[name])


def _merge_rows(torch, b, h, rows, kv_rows, d, device, calls, repeats):
    """The ring's merge on `rows` query rows (and `kv_rows` key rows) for one step, eager torch."""
    dt = torch.bfloat16 if device.startswith("cuda") else torch.float32
    out = torch.zeros(b, h, rows, d, device=device, dtype=torch.float32)
    out_i = torch.randn(b, h, rows, d, device=device, dtype=dt)
    lse = torch.randn(b, h, rows, device=device, dtype=torch.float32)
    lse_i = torch.randn(b, h, rows, device=device, dtype=torch.float32)

    def fwd():  # lse = log(exp(lse) + exp(lse_i)); out += out_i * exp(lse_i - lse)
        new = torch.logaddexp(lse, lse_i)
        out.add_(out_i.float() * torch.exp(lse_i - new).unsqueeze(-1))
    dq, dq_i = torch.zeros(b, h, rows, d, device=device, dtype=dt), torch.randn(b, h, rows, d, device=device,
                                                                                 dtype=dt)
    dkv, dkv_i = (torch.zeros(2, b, h, kv_rows, d, device=device, dtype=dt),
                  torch.randn(2, b, h, kv_rows, d, device=device, dtype=dt))

    def bwd():
        dq.add_(dq_i)
        dkv.add_(dkv_i)
    cuda = device.startswith("cuda")
    return dict(fwd_s=_median_time_s(torch, fwd, cuda, calls, repeats),
                bwd_s=_median_time_s(torch, bwd, cuda, calls, repeats))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="small shapes (a CPU dry run)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--head-dim", type=int, default=128)
    args = ap.parse_args(argv)
    import torch
    import torch.nn.functional as F
    cuda = args.device.startswith("cuda")
    backends = ("cudnn", "flash") if cuda else ("math",)
    shapes = TINY if args.tiny else SHAPES
    d = 16 if args.tiny else args.head_dim
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()

        def emit(row):
            w.writerow(row)
            fh.flush()
            print(",".join(f"{row[k]:.4g}" if isinstance(row[k], float) else str(row[k]) for k in FIELDS),
                  flush=True)
        print(",".join(FIELDS), flush=True)
        for n, h in shapes:
            calls = 3 if n * n * h >= 8192 * 8192 * 32 else 10
            for backend in backends:
                for piece, ql, kl, causal in _pieces(n):
                    base = dict(piece=piece, backend=backend, batch=1, heads=h, q_len=ql, kv_len=kl, head_dim=d,
                                causal=causal)
                    try:
                        got = _attention_row(torch, F, backend, 1, h, ql, kl, d, causal, args.device, calls,
                                             args.repeats)
                        emit({**base, **got, "status": "ok"})
                    except Exception as exc:  # a backend that cannot run this shape: a row saying why
                        nan = float("nan")
                        emit({**base, "fwd_s": nan, "bwd_s": nan, "fwd_tflops": nan, "bwd_tflops": nan,
                              "status": f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"})
                    if cuda:
                        torch.cuda.empty_cache()
            for rows, kv_rows in ((n, n // 2), (n // 2, n)):
                got = _merge_rows(torch, 1, h, rows, kv_rows, d, args.device, 10, args.repeats)
                emit(dict(piece=f"merge_{rows}x{kv_rows}", backend="eager", batch=1, heads=h, q_len=rows,
                          kv_len=kv_rows, head_dim=d, causal=False, fwd_tflops=float("nan"),
                          bwd_tflops=float("nan"), status="ok", **got))
    return 0


if __name__ == "__main__":
    sys.exit(main())
