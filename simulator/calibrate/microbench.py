"""Timing protocol and the microbenchmarks calibration fits the efficiency tables on.

Protocol (the same for every kernel, written into the profile's `[provenance].protocol`):
`warmup` untimed calls, then `iters` timed calls, each timed on its own; the reported time is the
**median** of the per-call times (robust to the odd slow call; nccl-tests and
stas00/ml-engineering's `mamf-finder.py` use the same warm-up + repeated-timing scheme). On a CUDA
device each call is timed with a pair of CUDA events recorded on the current stream
(`torch.cuda.Event(enable_timing=True)`); on the CPU with `time.perf_counter`.

The shapes are the ones the cost model prices (formulas.md §2.3): the GEMMs of one transformer
layer — QKV, attention output, MLP up(+gate), MLP down, each as forward, input-gradient (dgrad) and
weight-gradient (wgrad) product — for a grid of hidden sizes, micro-batch × sequence token counts
and TP splits; causal scaled-dot-product attention forward and backward over sequence lengths and
head dims; and memory-bound kernels (copy, add, RMSNorm, SiLU) over buffer sizes.

torch is optional for the package: it is imported inside the functions that need it.
Efficiency = achieved FLOP/s (or bytes/s) / the profile's peak; this module only measures times and
counts FLOPs/bytes; `fit.py` turns them into tables.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from ..errors import InputError

__all__ = [
    "Timing",
    "GemmShape",
    "time_callable",
    "transformer_gemm_shapes",
    "gemm_flops",
    "attention_forward_flops",
    "attention_backward_flops",
    "attention_backward_executed_flops",
    "bench_gemm",
    "bench_attention",
    "bench_memory",
    "import_torch",
    "device_info",
    "TORCH_DTYPES",
]

TORCH_DTYPES = ("fp32", "bf16", "fp16")


def import_torch():
    """Import torch or raise InputError with the install hint (torch is an optional dependency)."""
    try:
        import torch  # noqa: F401
    except ModuleNotFoundError:
        raise InputError("calibrate needs torch: pip install torch") from None
    return torch


def _torch_dtype(torch, dtype: str):
    m = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    if dtype not in m:
        raise InputError(f"dtype must be one of {', '.join(TORCH_DTYPES)}, got {dtype!r}")
    return m[dtype]


@dataclass(frozen=True, kw_only=True)
class Timing:
    """Per-call times of one benchmarked callable (seconds), and their median."""

    median_s: float
    min_s: float
    max_s: float
    samples: int
    timer: str  # 'cuda-events' or 'perf_counter'


def time_callable(fn: Callable[[], object], *, device: str = "cpu", warmup: int = 3, iters: int = 10) -> Timing:
    """Median wall time of `fn()` after `warmup` untimed calls (protocol in the module docstring).

    On `cuda` devices each call is bracketed by CUDA events and the stream is synchronised once
    per call before reading the elapsed time; on `cpu`, `time.perf_counter` brackets each call.
    """
    if warmup < 0 or iters < 1:
        raise InputError(f"need warmup >= 0 and iters >= 1, got warmup={warmup}, iters={iters}")
    times: list[float] = []
    if str(device).startswith("cuda"):
        torch = import_torch()
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)  # elapsed_time is in milliseconds
        timer = "cuda-events"
    else:
        for _ in range(warmup):
            fn()
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        timer = "perf_counter"
    return Timing(median_s=statistics.median(times), min_s=min(times), max_s=max(times), samples=len(times), timer=timer)


# ---- shapes -------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class GemmShape:
    """C[m, n] = A[m, k] @ B[k, n]; `op` names the layer GEMM it stands for."""

    m: int
    n: int
    k: int
    op: str = ""


def gemm_flops(m, n, k):
    """FLOPs of one (m×k)·(k×n) product: 2·m·n·k (one multiply + one add per MAC; formulas.md §2.2)."""
    return 2 * m * n * k


def transformer_gemm_shapes(*, hidden_sizes: Sequence[int], tokens: Sequence[int], tp_degrees: Sequence[int],
                            ffn_multiplier: float = 8 / 3, kv_fraction: float = 1.0, glu: bool = True,
                            ffn_round: int = 64) -> list[GemmShape]:
    """The GEMMs of one transformer layer on one TP rank, for every (h, tokens, tp) in the grid.

    With t tokens on the rank (micro-batch × sequence), hidden h, FFN f = ffn_multiplier·h rounded up to
    `ffn_round`, KV width kv = kv_fraction·h (1: MHA; 1/8: GQA with 8 query heads per KV head), TP
    degree p (Megatron column/row split, formulas.md §4.6):

        QKV      (t × h) @ (h × (h + 2kv)/p)
        out      (t × h/p) @ (h/p × h)
        MLP up   (t × h) @ (h × g·f/p)        g = 2 for SwiGLU/GeGLU (gate and up fused), 1 for GELU
        MLP down (t × f/p) @ (f/p × h)

    Each linear y = x·W (x: t×a, W: a×b) gives three products: forward (t, b, a), dgrad
    dx = dy·Wᵀ (t, a, b) and wgrad dW = xᵀ·dy (a, b, t), all with 2·t·a·b FLOPs. Shapes whose split
    is not whole are skipped; duplicates are removed (first occurrence kept).
    """
    out: list[GemmShape] = []
    seen = set()
    for h in hidden_sizes:
        f = int(-(-int(ffn_multiplier * h) // ffn_round) * ffn_round)
        kv = max(1, int(round(kv_fraction * h)))
        for t in tokens:
            for p in tp_degrees:
                if (h + 2 * kv) % p or h % p or f % p:
                    continue
                g = 2 if glu else 1
                linears = {"qkv": (h, (h + 2 * kv) // p), "out": (h // p, h),
                           "mlp_up": (h, g * f // p), "mlp_down": (f // p, h)}
                for name, (a, b) in linears.items():
                    for op, (m, n, k) in (("fwd", (t, b, a)), ("dgrad", (t, a, b)), ("wgrad", (a, b, t))):
                        key = (m, n, k)
                        if key in seen:
                            continue
                        seen.add(key)
                        out.append(GemmShape(m=m, n=n, k=k, op=f"{name}.{op} h={h} t={t} tp={p}"))
    return out


def attention_forward_flops(batch, heads, seq, head_dim, *, causal: bool = True):
    """Model FLOPs of softmax(Q·Kᵀ)·V forward: 4·b·a·s²·d (QKᵀ and P·V, 2·s²·d each per head),
    halved for a causal mask (only the lower triangle is computed by FlashAttention-style kernels).
    Source: Dao-AILab/flash-attention benchmarks/benchmark_flash_attention.py `flops()`; formulas.md §2.4.
    """
    f = 4 * batch * heads * seq * seq * head_dim
    return f / 2 if causal else f


def attention_backward_flops(batch, heads, seq, head_dim, *, causal: bool = True):
    """Model FLOPs of the attention backward: 2 × forward (dQ, dK from dS; dV, dP from dO: four
    s²·d products per head against two in the forward), what torch's FLOP counter counts for the
    unfused form (tests/test_calibrate.py)."""
    return 2 * attention_forward_flops(batch, heads, seq, head_dim, causal=causal)


def attention_backward_executed_flops(batch, heads, seq, head_dim, *, causal: bool = True):
    """FLOPs a FlashAttention backward executes: 2.5 × forward (the four products of
    `attention_backward_flops` plus recomputing S = Q·Kᵀ), the convention of the FlashAttention
    benchmark `flops()` (Dao-AILab/flash-attention benchmarks/benchmark_flash_attention.py) and of
    published backward TFLOP/s, and what cost/flops.py's attention backward executes (dgrad +
    backward_recompute). The `attention_bwd` efficiency table is written and read in this convention."""
    return 2.5 * attention_forward_flops(batch, heads, seq, head_dim, causal=causal)


# ---- benchmarks ---------------------------------------------------------------------------------
def device_info(device: str) -> dict:
    """Device name and versions for the profile's `[provenance]` (torch, CUDA, cuDNN where present)."""
    torch = import_torch()
    import platform

    info = {"torch": torch.__version__, "python": platform.python_version()}
    if str(device).startswith("cuda"):
        info["device"] = torch.cuda.get_device_name(torch.device(device))
        info["cuda"] = str(torch.version.cuda)
        info["cudnn"] = str(torch.backends.cudnn.version())
    else:
        info["device"] = f"CPU {platform.processor() or platform.machine()} ({torch.get_num_threads()} threads)"
    return info


def _sync(torch, device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def bench_gemm(shapes: Sequence[GemmShape], *, dtype: str = "bf16", device: str = "cpu", warmup: int = 3,
               iters: int = 10, seed: int = 0):
    """Time `torch.matmul` on every shape; DataFrame with m, n, k, op, flops, time_s, flops_per_s."""
    torch = import_torch()
    import pandas as pd

    td = _torch_dtype(torch, dtype)
    g = torch.Generator(device="cpu").manual_seed(seed)
    rows = []
    for s in shapes:
        a = torch.randn(s.m, s.k, generator=g, dtype=torch.float32).to(device=device, dtype=td)
        b = torch.randn(s.k, s.n, generator=g, dtype=torch.float32).to(device=device, dtype=td)
        c = torch.empty(s.m, s.n, dtype=td, device=device)
        t = time_callable(lambda: torch.matmul(a, b, out=c), device=device, warmup=warmup, iters=iters)
        f = gemm_flops(s.m, s.n, s.k)
        rows.append({"kernel": "matmul", "op": s.op, "m": s.m, "n": s.n, "k": s.k, "dtype": dtype,
                     "flops": float(f), "time_s": t.median_s, "flops_per_s": f / t.median_s, "timer": t.timer})
        del a, b, c
    _sync(torch, device)
    return pd.DataFrame(rows)


def bench_attention(*, seq_lengths: Sequence[int], head_dims: Sequence[int], batch: int = 1, heads: int = 8,
                    causal: bool = True, dtype: str = "bf16", device: str = "cpu", warmup: int = 2,
                    iters: int = 5, seed: int = 0, tokens: int = 0):
    """Time `scaled_dot_product_attention` forward and forward+backward.

    `tokens` > 0: each length runs a batch of max(batch, tokens // seq) sequences, the FlashAttention
    benchmarks' grid (batch × seq = 16k tokens), so that a short sequence's kernel outlasts the host's
    issue time (at batch 1 the shortest calls time the host: validation/h100_attention_tables.py) and
    fills the GPU as the tables' reference grid does (cost/attention.py REFERENCE_TILES).

    Backward time = median(forward+backward) − median(forward). Returns one row per
    (seq, head_dim, pass) with flops (causal-halved; forward: model FLOPs, backward: the executed
    FLOPs of FlashAttention, 2.5 × forward: attention_backward_executed_flops), time_s and flops_per_s.
    The kernel is whatever torch dispatches to (FlashAttention on recent GPUs).
    """
    torch = import_torch()
    import pandas as pd
    import torch.nn.functional as F

    td = _torch_dtype(torch, dtype)
    g = torch.Generator(device="cpu").manual_seed(seed)
    rows = []
    for s in seq_lengths:
        b = max(batch, tokens // s) if tokens else batch
        for d in head_dims:
            shape = (b, heads, s, d)
            q, k, v = (torch.randn(*shape, generator=g).to(device=device, dtype=td).requires_grad_(True)
                       for _ in range(3))
            do = torch.randn(*shape, generator=g).to(device=device, dtype=td)

            def fwd():
                with torch.no_grad():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

            def fwd_bwd():
                o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                torch.autograd.grad(o, (q, k, v), do)

            tf = time_callable(fwd, device=device, warmup=warmup, iters=iters)
            tfb = time_callable(fwd_bwd, device=device, warmup=warmup, iters=iters)
            tb = max(tfb.median_s - tf.median_s, 1e-12)
            ff = attention_forward_flops(b, heads, s, d, causal=causal)
            fb = attention_backward_executed_flops(b, heads, s, d, causal=causal)
            for pas, f, t in (("fwd", ff, tf.median_s), ("bwd", fb, tb)):
                rows.append({"kernel": "sdpa", "pass": pas, "batch": b, "heads": heads, "seq": s, "head_dim": d,
                             "causal": causal, "dtype": dtype, "flops": float(f), "time_s": t,
                             "flops_per_s": f / t, "timer": tf.timer})
            del q, k, v, do
    _sync(torch, device)
    return pd.DataFrame(rows)


def _rms_norm(torch, x, w):
    import torch.nn.functional as F

    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def bench_memory(*, sizes_bytes: Sequence[int], dtype: str = "bf16", device: str = "cpu", warmup: int = 3,
                 iters: int = 10, kernels: Sequence[str] = ("copy", "add", "rmsnorm", "silu"), row: int = 4096):
    """Time memory-bound kernels on buffers of `sizes_bytes` (size of one input tensor).

    Bytes moved per call (each element read or written once from HBM/DRAM; the roofline count):
    copy 2·S (read + write), add 3·S (two reads, one write), rmsnorm 2·S (read x, write y; the
    weight row is negligible), silu 2·S. Rows: kernel, size_bytes, bytes_moved, time_s, bytes_per_s.
    """
    torch = import_torch()
    import pandas as pd

    td = _torch_dtype(torch, dtype)
    el = torch.empty((), dtype=td).element_size()
    moved = {"copy": 2, "add": 3, "rmsnorm": 2, "silu": 2}
    bad = [k for k in kernels if k not in moved]
    if bad:
        raise InputError(f"unknown memory kernel {bad[0]!r}; expected one of {', '.join(moved)}")
    rows = []
    for size in sizes_bytes:
        numel = max(row, int(size) // el // row * row)
        x = torch.rand(numel, device=device, dtype=td)
        y = torch.rand(numel, device=device, dtype=td)
        out = torch.empty_like(x)
        w = torch.ones(row, device=device, dtype=td)
        x2 = x.view(-1, row)
        fns = {"copy": lambda: out.copy_(x), "add": lambda: torch.add(x, y, out=out),
               "rmsnorm": lambda: _rms_norm(torch, x2, w), "silu": lambda: torch.nn.functional.silu(x)}
        for kname in kernels:
            t = time_callable(fns[kname], device=device, warmup=warmup, iters=iters)
            s = numel * el
            rows.append({"kernel": kname, "dtype": dtype, "size_bytes": float(s), "bytes_moved": float(moved[kname] * s),
                         "time_s": t.median_s, "bytes_per_s": moved[kname] * s / t.median_s, "timer": t.timer})
        del x, y, out
    _sync(torch, device)
    return pd.DataFrame(rows)


def bench_optimizer(*, param_counts: Sequence[int], dtype: str = "bf16", device: str = "cpu", warmup: int = 3,
                    iters: int = 10, tensors: int = 8):
    """Time one `torch.optim.AdamW(fused=True).step()` over `param_counts` parameters (each split into
    `tensors` equal tensors), parameters, gradients and moments all in `dtype` (no master copy).

    Bytes moved per step: params · optimizer_bytes_per_param of that setup (cost/optimizer.py: read the
    gradient, read + write the parameter and each moment; 14 B/param in bf16, 28 in fp32), so the
    fitted efficiency applies to the optimizer model's byte count. Rows: kernel, dtype, params,
    bytes_moved, time_s, bytes_per_s, timer.
    """
    torch = import_torch()
    import pandas as pd

    from ..cost.optimizer import optimizer_bytes_per_param
    from ..spec.training import Training

    td = _torch_dtype(torch, dtype)
    tr = Training(seq_length=1, global_batch_size=1, precision=dtype if dtype != "fp8" else "bf16", grad_dtype=dtype,
                  master_weights=False, optimizer="adamw", optimizer_dtype=dtype)
    per_param = optimizer_bytes_per_param(tr)
    rows = []
    for n in param_counts:
        each = max(1, int(n) // tensors)
        ps = [torch.zeros(each, device=device, dtype=td, requires_grad=True) for _ in range(tensors)]
        for p in ps:
            p.grad = torch.rand_like(p)
        try:
            opt = torch.optim.AdamW(ps, lr=1e-4, fused=True)
        except (RuntimeError, TypeError) as exc:
            raise InputError(f"fused AdamW is not available for {dtype} on {device}: {exc}") from None
        opt.step()  # the moments exist from here on, as in training
        t = time_callable(opt.step, device=device, warmup=warmup, iters=iters)
        params = each * tensors
        rows.append({"kernel": "fused_adamw", "dtype": dtype, "params": float(params),
                     "bytes_moved": float(params * per_param), "time_s": t.median_s,
                     "bytes_per_s": params * per_param / t.median_s, "timer": t.timer})
        del ps, opt
    _sync(torch, device)
    return pd.DataFrame(rows)


def warm_up(*, device: str, seconds: float = 2.0, size: int = 4096, dtype: str = "bf16") -> int:
    """Keep the device busy with size³ matrix products for `seconds` before anything is timed, so the
    first measured shapes do not run while the clocks leave idle (a first calibration on an idle H100
    timed its first GEMM shapes up to ~1.8× slower than a second one: docs/validation-h100.md).
    Returns the number of products run."""
    torch = import_torch()
    td = _torch_dtype(torch, dtype)
    a = torch.rand(size, size, device=device, dtype=td)
    n, t0 = 0, time.perf_counter()
    while True:
        torch.matmul(a, a)
        n += 1
        if n % 8 == 0:
            _sync(torch, device)
            if time.perf_counter() - t0 >= seconds:
                return n
