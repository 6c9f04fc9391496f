"""BF16 and FP8 GEMMs timed two ways on one GPU: one call at a time (the calibration's protocol) and queued.

    python validation/gpu_gemm_queued.py --out gemm_queued.csv
    python validation/gpu_gemm_queued.py --out gemm_queued.csv --device cpu --tiny     # dry run (the tests run it)
    python validation/gpu_gemm_queued.py --memory --out memory_queued.csv                # the memory-bound kernels

`parasim calibrate` times each call between two CUDA events and waits for it (`microbench.time_callable`): a
small GEMM's time then includes the host's issue of the call, which a training step hides by queueing kernels
ahead. `queued` times `--iters` back-to-back calls between two events (the host issues ahead; per call the
kernel's time plus the GPU's gap between kernels). Shapes: the calibration's GPU grid of transformer-layer GEMMs
(`calibrate.run.GRIDS['gpu']`); bf16 with `torch.matmul`, FP8 with `torch._scaled_mm` (e4m3, per-tensor scales,
bf16 out; k and n divisible by 16). Both dtypes on the same machine in one run, so their ratio is free of the
machine-to-machine spread. `--memory`: the calibration's memory-bound kernels instead (`microbench.bench_memory`'s
copy, add, RMSNorm and SiLU, bf16, one input tensor of 64 KiB to 1 GiB), the same two ways. `--indexing`: torch's
row-indexing kernels, queued (`_indexing`). Rows are written as they are measured.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

FIELDS = ["op", "m", "n", "k", "dtype", "flops", "one_call_s", "queued_s", "kernel_s"]
MEMORY_FIELDS = ["kernel", "dtype", "size_bytes", "bytes_moved", "one_call_s", "queued_s", "kernel_s"]
MOVED = {"copy": 2, "add": 3, "rmsnorm": 2, "silu": 2}  # bytes moved per input byte (microbench.bench_memory)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--memory", action="store_true", help="the memory-bound kernels instead of the GEMMs")
    ap.add_argument("--indexing", action="store_true",
                    help="torch's indexing kernels instead (gather, index_select, index, index_put_, scatter_, "
                         "index_add_, scatter_add_ over rows, identity and random row orders)")
    a = ap.parse_args(argv)
    import torch

    from simulator.calibrate import microbench as mb
    from simulator.calibrate.run import GRIDS

    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    cuda = device.startswith("cuda")
    g = GRIDS["cpu" if a.tiny else "gpu"]
    shapes = mb.transformer_gemm_shapes(hidden_sizes=g.hidden_sizes, tokens=g.tokens, tp_degrees=g.tp_degrees,
                                        kv_fraction=g.kv_fraction)
    fp8 = cuda and hasattr(torch, "_scaled_mm") and torch.cuda.get_device_capability(device) >= (8, 9)
    if cuda:
        mb.warm_up(device=device, dtype="bf16")
    f = open(a.out, "w", newline="")
    w = csv.DictWriter(f, fieldnames=MEMORY_FIELDS if (a.memory or a.indexing) else FIELDS)
    w.writeheader()
    gen = torch.Generator(device=device).manual_seed(0)
    one = torch.ones((), dtype=torch.float32, device=device)
    from gpu_owed import Bench

    bench = Bench(torch, device)

    def kernel_s(fn) -> float:
        return bench.kernel_s(fn, a.iters)[0]

    def queued_s(fn) -> float:
        for _ in range(a.warmup):
            fn()
        if not cuda:
            return mb.time_callable(fn, device=device, warmup=0, iters=a.iters).median_s
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        e0.record()
        for _ in range(a.iters):
            fn()
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1) * 1e-3 / a.iters

    if a.memory:
        _memory(torch, mb, w, f, device, cuda, a.tiny, queued_s, kernel_s)
        f.close()
        return 0
    if a.indexing:
        _indexing(torch, w, f, device, cuda, a.tiny, queued_s)
        f.close()
        return 0
    for s in shapes:
        dt = torch.bfloat16 if cuda else torch.float32
        x = torch.randn(s.m, s.k, generator=gen, device=device).to(dt)
        y = torch.randn(s.k, s.n, generator=gen, device=device).to(dt)
        cases = [("bf16", lambda: torch.matmul(x, y))]
        if fp8 and not (s.k % 16 or s.n % 16):
            x8 = x.to(torch.float8_e4m3fn)
            y8 = y.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
            cases.append(("fp8", lambda: torch._scaled_mm(x8, y8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)))
        for dtype, fn in cases:
            r = {"op": s.op, "m": s.m, "n": s.n, "k": s.k, "dtype": dtype, "flops": mb.gemm_flops(s.m, s.n, s.k),
                 "one_call_s": mb.time_callable(fn, device=device, warmup=a.warmup, iters=a.iters).median_s,
                 "queued_s": queued_s(fn), "kernel_s": kernel_s(fn)}
            w.writerow(r)
            f.flush()
            print(r, flush=True)
    f.close()
    return 0


def _memory(torch, mb, w, f, device, cuda, tiny, queued_s, kernel_s):
    """bench_memory's kernels on one input tensor of each size, one call at a time and queued."""
    dt, row = (torch.bfloat16 if cuda else torch.float32), 4096
    el = torch.empty((), dtype=dt).element_size()
    for e in range(16, 19 if tiny else 31):
        numel = max(row, 2**e // el // row * row)
        x, y = torch.rand(numel, device=device, dtype=dt), torch.rand(numel, device=device, dtype=dt)
        out, wt = torch.empty_like(x), torch.ones(row, device=device, dtype=dt)
        x2 = x.view(-1, row)
        fns = {"copy": lambda: out.copy_(x), "add": lambda: torch.add(x, y, out=out),
               "rmsnorm": lambda: mb._rms_norm(torch, x2, wt),
               "silu": lambda: torch.nn.functional.silu(x)}
        for k, fn in fns.items():
            r = {"kernel": k, "dtype": str(dt).removeprefix("torch."), "size_bytes": numel * el,
                 "bytes_moved": MOVED[k] * numel * el, "one_call_s": mb.time_callable(fn, device=device, warmup=5,
                                                                                       iters=20).median_s,
                 "queued_s": queued_s(fn), "kernel_s": kernel_s(fn)}
            w.writerow(r)
            f.flush()
            print(r, flush=True)


def _indexing(torch, w, f, device, cuda, tiny, queued_s):
    """Row-indexing kernels on a [rows, 2048] tensor of 1 MiB to 1 GiB, queued: what flash-attn's unpadding
    (gather, index_put_, scatter_, index) and MoE dispatch / combine (index_select, index_add_, scatter_add_) run.
    `kernel` names the op and the row order: `-id` rows in order (unpadding with every token real), `-perm` a
    random permutation (routing). bytes_moved: read + written (index_add_ and scatter_add_ read their output too);
    the int64 row indices are counted once per row (8 bytes)."""
    dt = torch.bfloat16 if cuda else torch.float32
    el, width = torch.empty((), dtype=dt).element_size(), 2048 if not tiny else 64
    for e in (range(20, 31, 2) if not tiny else (14, 16)):
        rows = max(2**e // (el * width), 1)
        x = torch.randn(rows, width, device=device, dtype=dt)
        out = torch.empty_like(x)
        size = rows * width * el
        for order in ("id", "perm"):
            idx = (torch.arange(rows, device=device) if order == "id"
                   else torch.randperm(rows, device=device))
            full = idx[:, None].expand(-1, width)
            fns = {"gather": (lambda: torch.gather(x, 0, full), 2),
                   "index_select": (lambda: x.index_select(0, idx), 2),
                   "index": (lambda: x[idx], 2),
                   "index_put_": (lambda: out.index_put_((idx,), x), 2),
                   "scatter_": (lambda: out.scatter_(0, full, x), 2),
                   "index_add_": (lambda: out.index_add_(0, idx, x), 3),
                   "scatter_add_": (lambda: out.scatter_add_(0, full, x), 3)}
            for name, (fn, moved) in fns.items():
                r = {"kernel": f"{name}-{order}", "dtype": str(dt).removeprefix("torch."), "size_bytes": size,
                     "bytes_moved": moved * size + 8 * rows, "one_call_s": float("nan"), "queued_s": queued_s(fn),
                     "kernel_s": float("nan")}
                w.writerow(r)
                f.flush()
                print(r, flush=True)


if __name__ == "__main__":
    sys.exit(main())
