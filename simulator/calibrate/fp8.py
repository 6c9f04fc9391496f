"""FP8 GEMM microbenchmark (torch._scaled_mm) for the `gemm_fp8` efficiency table; the timing protocol and
the shapes are microbench.py's."""
from __future__ import annotations

from typing import Sequence

from ..errors import InputError
from .microbench import GemmShape, _sync, gemm_flops, import_torch, time_callable


def bench_gemm_fp8(shapes: Sequence[GemmShape], *, device: str = "cuda", warmup: int = 3, iters: int = 10,
                   seed: int = 0):
    """Time FP8 GEMMs with `torch._scaled_mm` (e4m3 operands, per-tensor fp32 scales, bf16 output: the
    GEMM Transformer Engine and torchao run for FP8 linears) on every shape; the same columns as
    `bench_gemm` with dtype "fp8". FLOPs 2·m·n·k; efficiency against the FP8 dense peak. Needs a CUDA GPU
    with FP8 tensor cores (sm89+); InputError otherwise. `_scaled_mm` takes only k and n divisible by 16 (the
    FP8 kernels' alignment; Transformer Engine pads FP8 linears to it), so other shapes are skipped."""
    torch = import_torch()
    import pandas as pd

    if not str(device).startswith("cuda") or not torch.cuda.is_available():
        raise InputError("gemm_fp8 needs a CUDA GPU with FP8 tensor cores (sm89+): torch._scaled_mm, got device "
                         f"{device!r}")
    if torch.cuda.get_device_capability(device) < (8, 9) or not hasattr(torch, "_scaled_mm"):
        raise InputError(f"gemm_fp8 needs FP8 tensor cores (sm89+) and torch._scaled_mm; {device!r} has "
                         f"sm{''.join(map(str, torch.cuda.get_device_capability(device)))}")
    g = torch.Generator(device=device).manual_seed(seed)  # drawn on the GPU: CPU draws of the large shapes take minutes
    one = torch.ones((), dtype=torch.float32, device=device)
    rows = []
    for s in shapes:
        if s.k % 16 or s.n % 16:
            continue
        a = torch.randn(s.m, s.k, generator=g, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(s.n, s.k, generator=g, device=device).to(torch.float8_e4m3fn).t()  # column-major
        t = time_callable(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                          device=device, warmup=warmup, iters=iters)
        f = gemm_flops(s.m, s.n, s.k)
        rows.append({"kernel": "scaled_mm", "op": s.op, "m": s.m, "n": s.n, "k": s.k, "dtype": "fp8",
                     "flops": float(f), "time_s": t.median_s, "flops_per_s": f / t.median_s, "timer": t.timer})
        del a, b
    _sync(torch, device)
    return pd.DataFrame(rows)
