"""Kernels timed back to back inside one CUDA graph: the GPU's own time per call, with no host in the loop.

    python validation/gpu_graphed.py --out graphed.csv
    python validation/gpu_graphed.py --out graphed.csv --device cpu --tiny     # dry run (the tests run it)

The memory-bound tables of the lent GPUs (validation/h100_memory_table.py) are fitted to calls queued between two
CUDA events, keeping only the calls the GPU is slower than the host issues them (inputs above ~16 MiB): the fixed
cost per kernel t0 is then an intercept the fit extrapolates to small kernels (4.14 us on the H200, above the
0.9-3.3 us CUPTI times of its tiny kernels, which leave out the GPU's gap between kernels). A CUDA graph replays
its kernels without the host issuing each one, so graph time / calls is what a kernel costs the GPU back to back
at every size, the gap included: the time an eager step pays per kernel when its host runs ahead, and what a
CUDA-graphed or compiled stack pays. Measured here:
- `memory`: gpu_gemm_queued.py --memory's copy, add, RMSNorm and SiLU (bf16, one input of 4 KiB to 1 GiB);
- `floor`: a one-element add (the smallest kernel: the GPU's per-kernel floor inside a graph);
- `gemm`: the calibration's GEMM grid (calibrate.run.GRIDS['gpu']) up to --gemm-max-flops, bf16 with torch.matmul
  and, where the GPU has FP8 tensor cores, FP8 as gpu_gemm_queued.py runs it (torch._scaled_mm, e4m3, per-tensor
  scales, bf16 out): the small end of the GEMM tables, whose smallest points the one-call and queued protocols
  left host-bound.
Each row: `calls` calls captured in one graph (enough for ~20 ms of GPU time, 4 to 400), one replay to warm up,
then --replays replays each between two CUDA events; graph_s = the median replay / calls. queued_s: the same call
queued eagerly (validation/gpu_owed.py Bench.queued_s, --replays x calls), for comparison in the same run. On the
CPU (the dry run) both are perf_counter times of eager calls. Rows are printed and flushed as they are measured.
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FIELDS = ["what", "kernel", "dtype", "size_bytes", "bytes_moved", "m", "n", "k", "flops", "calls", "graph_s",
          "queued_s"]
MOVED = {"copy": 2, "add": 3, "rmsnorm": 2, "silu": 2}  # bytes moved per input byte (gpu_gemm_queued.MOVED)
TARGET_S = 0.02  # GPU time of one replay


class Graphed:
    """graph_s(fn): per-call time of `fn` captured back to back in one CUDA graph (perf_counter on the CPU)."""

    def __init__(self, torch, device: str, replays: int):
        self.torch, self.device, self.replays = torch, device, replays
        self.cuda = device.startswith("cuda")

    def calls_for(self, fn) -> int:
        """Calls per graph: about TARGET_S of GPU time, 4 to 400, from one eager call's time."""
        t = self._eager_s(fn, 3)
        return int(min(400, max(4, TARGET_S / max(t, 1e-7))))

    def _eager_s(self, fn, calls: int) -> float:
        from gpu_owed import Bench

        return Bench(self.torch, self.device).queued_s(fn, calls)

    def graph_s(self, fn, calls: int) -> float:
        if not self.cuda:
            return self._eager_s(fn, calls)
        from gpu_owed import Bench

        return Bench(self.torch, self.device).graph_s(fn, calls, replays=self.replays, warm=2)

    def row(self, fn, **r) -> dict:
        calls = self.calls_for(fn)
        r.update(calls=calls, graph_s=self.graph_s(fn, calls), queued_s=self._eager_s(fn, calls * self.replays))
        return r


def _memory(torch, gr: Graphed, emit, tiny: bool):
    dt, row = (torch.bfloat16 if gr.cuda else torch.float32), (4096 if not tiny else 256)
    el = torch.empty((), dtype=dt).element_size()
    one = torch.zeros(1, device=gr.device, dtype=dt)
    emit(gr.row(lambda: one.add_(1), what="floor", kernel="add-1-element", dtype=str(dt)[6:], size_bytes=el,
                bytes_moved=2 * el))
    for e in range(12, 16 if tiny else 31):
        numel = max(row, 2**e // el // row * row)
        x, y = torch.rand(numel, device=gr.device, dtype=dt), torch.rand(numel, device=gr.device, dtype=dt)
        out, wt = torch.empty_like(x), torch.ones(row, device=gr.device, dtype=dt)
        x2 = x.view(-1, row)
        from simulator.calibrate import microbench as mb

        fns = {"copy": lambda: out.copy_(x), "add": lambda: torch.add(x, y, out=out),
               "rmsnorm": lambda: mb._rms_norm(torch, x2, wt), "silu": lambda: torch.nn.functional.silu(x)}
        for k, fn in fns.items():
            emit(gr.row(fn, what="memory", kernel=k, dtype=str(dt)[6:], size_bytes=numel * el,
                        bytes_moved=MOVED[k] * numel * el))
        del x, y, out, x2


def _gemms(torch, gr: Graphed, emit, tiny: bool, max_flops: float):
    from simulator.calibrate import microbench as mb
    from simulator.calibrate.run import GRIDS

    g = GRIDS["cpu" if tiny else "gpu"]
    shapes = mb.transformer_gemm_shapes(hidden_sizes=g.hidden_sizes, tokens=g.tokens, tp_degrees=g.tp_degrees,
                                        kv_fraction=g.kv_fraction)
    dt = torch.bfloat16 if gr.cuda else torch.float32
    gen = torch.Generator(device=gr.device).manual_seed(0)
    fp8 = gr.cuda and hasattr(torch, "_scaled_mm") and torch.cuda.get_device_capability(gr.device) >= (8, 9)
    one = torch.ones((), dtype=torch.float32, device=gr.device)
    for s in sorted(shapes, key=lambda s: mb.gemm_flops(s.m, s.n, s.k)):
        flops = mb.gemm_flops(s.m, s.n, s.k)
        if flops > max_flops:
            break
        x = torch.randn(s.m, s.k, generator=gen, device=gr.device).to(dt)
        w = torch.randn(s.k, s.n, generator=gen, device=gr.device).to(dt)
        out = torch.empty(s.m, s.n, device=gr.device, dtype=dt)
        cases = [(str(dt)[6:], lambda: torch.matmul(x, w, out=out))]
        if fp8 and not (s.k % 16 or s.n % 16):  # gpu_gemm_queued.py's FP8 case
            x8 = x.to(torch.float8_e4m3fn)
            w8 = w.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
            cases.append(("fp8", lambda: torch._scaled_mm(x8, w8, scale_a=one, scale_b=one, out_dtype=dt)))
        for name, fn in cases:
            emit(gr.row(fn, what="gemm", kernel=s.op, dtype=name, m=s.m, n=s.n, k=s.k, flops=flops))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--tiny", action="store_true", help="small shapes (the CPU dry run)")
    ap.add_argument("--replays", type=int, default=5)
    ap.add_argument("--gemm-max-flops", type=float, default=2e10)
    ap.add_argument("--stages", default="memory,gemm")
    a = ap.parse_args(argv)
    import torch

    from simulator.calibrate import microbench as mb

    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    gr = Graphed(torch, device, a.replays)
    if gr.cuda:
        mb.warm_up(device=device, dtype="bf16")
    t0 = time.perf_counter()
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()

        def emit(r):
            w.writerow(r)
            f.flush()
            print(f"{time.perf_counter() - t0:6.1f}s", ", ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()), flush=True)

        stages = a.stages.split(",")
        if "memory" in stages:
            _memory(torch, gr, emit, a.tiny)
        if "gemm" in stages:
            _gemms(torch, gr, emit, a.tiny, a.gemm_max_flops)
    return 0


if __name__ == "__main__":
    sys.exit(main())
