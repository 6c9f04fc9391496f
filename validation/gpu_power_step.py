"""Do kernels and training steps slow down once the GPU has run at its power limit for a while?

    python validation/gpu_power_step.py --out power.csv [--sustain-s 15]
    python validation/gpu_power_step.py --out power.csv --device cpu --tiny     # dry run (the tests run it)

The calibration (`parasim calibrate`) times each shape's calls one by one after a short warm-up, and the H100
harness (`validation/train_step.py`) times 10 steps after 3: both seconds at most. A training job runs for
hours. This measures, on one GPU, in one run:
- `gemm`: an 8192^3 bf16 GEMM timed the calibration's way (`simulator.calibrate.microbench.time_callable`)
  after 5 s idle ("cold"), then back to back for --sustain-s seconds (one row per second with the SM clock,
  power and temperature nvidia-smi reports), then the calibration's way again at once ("hot");
- `attention`, `copy` (--workloads): cuDNN SDPA causal forward + backward (1 x 32768 and 8 x 4096 tokens, 32
  heads of 128) and a 1 GiB device-to-device copy, the same way: how attention and a bandwidth-bound kernel
  hold up at the power limit beside the GEMM;
- `mix` (--workloads): the 8192^3 GEMM interleaved with 256 MiB copies, the GEMMs' share of the cold time at
  1.0, 0.85, 0.7 and 0.5, the same way: how far a step's mix of compute- and bandwidth-bound kernels keeps the
  GEMMs off the power limit (the input a power model needs: a fused layer leaves less bandwidth-bound time
  between its GEMMs than an eager one);
- `accumulate` (--workloads): weight-gradient GEMMs of Llama-3-8B's linears (4096 tokens) with a bf16 output
  against the same GEMM adding into an fp32 gradient (`torch.addmm(c, a, b, out_dtype=torch.float32)`: what
  Megatron's gradient_accumulation_fusion and Transformer Engine's fuse_wgrad_accumulation run, beta = 1 over
  an fp32 C), the same way: whether the 8 bytes per output element the fp32 read and write add cost time;
- `step`: the same for harness training steps (fused AdamW, persistent gradients): the harness protocol
  (3 warm-up, 10 timed steps, CUDA events, median) cold, steps back to back for --sustain-s seconds, then
  ("profiled") steps back to back under torch.profiler (CUPTI) for a third of that, one row per second with
  the wall time per step and the kernels' summed device time (`kernel_s`), then the protocol again hot.
The SM clock, power and temperature of a back-to-back row are the medians of nvidia-smi readings taken every
0.2 s while its second runs (not after it: an idle GPU drops its clock at once). The profiled phase asks whether
the harness's unprofiled steps outlast their profiled kernels (docs/gpu-measurements.md, the eager gap) because
the kernels run slower at the power limit when nothing spaces them out: compare its clock, power and kernel time
with the unprofiled seconds before it. Every row is printed and flushed as it is measured.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpu_owed import SMI_QUERY, Bench, _smi  # noqa: E402

STEP_CONFIGS = ("L2-h8192-a64-kv64-f22016-s2048-b1-none-bf16-sdpa", "L8-h4096-a32-kv8-f14336-s4096-b1-none-bf16-sdpa")
FIELDS = ["what", "run_id", "phase", "second", "calls", "time_s", "kernel_s", "tflops", "sm_clock_mhz", "power_w",
          "temperature_c"]
SMI_KEYS = ("sm_clock_mhz", "power_w", "temperature_c")


# the sampler's child: one nvidia-smi reading every argv[2] seconds, each line flushed as it is read (so a
# terminated child leaves every reading in the pipe); silent where nvidia-smi is missing
_SAMPLER_CHILD = """
import subprocess, sys, time
q, every = sys.argv[1], float(sys.argv[2])
while True:
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=" + q, "--format=csv,noheader,nounits", "-i", "0"],
                           capture_output=True, text=True, timeout=5)
        line = r.stdout.strip().splitlines()[0] if r.stdout.strip() else ""
        if line:
            print(line, flush=True)
    except Exception:
        pass
    time.sleep(every)
"""


class _Sampler:
    """nvidia-smi readings every `every_s` seconds while the block runs, taken by a child Python process (no
    thread in this one: a thread beside torch changed the CPU allocation order the memory tests read);
    `medians()` of each field, "" where none parsed (no nvidia-smi, as on a CPU)."""

    def __init__(self, every_s: float = 0.2):
        self.every_s, self.lines, self._p = every_s, [], None

    def __enter__(self):
        import subprocess

        try:
            self._p = subprocess.Popen([sys.executable, "-c", _SAMPLER_CHILD, SMI_QUERY, str(self.every_s)],
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self._p = None
        return self

    def __exit__(self, *exc):
        if self._p is not None:
            self._p.terminate()
            try:
                out, _ = self._p.communicate(timeout=5)
            except Exception:  # noqa: BLE001 (a reading that never came is a missing reading)
                self._p.kill()
                out = ""
            self.lines = out.splitlines()

    def medians(self) -> dict:
        cols = {k: [] for k in SMI_KEYS}
        for line in self.lines:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != len(SMI_KEYS):
                continue
            for k, v in zip(SMI_KEYS, parts):
                try:
                    cols[k].append(float(v))
                except ValueError:
                    pass
        return {k: (statistics.median(v) if v else "") for k, v in cols.items()}


def one_call_s(B: Bench, fn, warmup: int, calls: int) -> float:
    """Median of `calls` calls, each between two CUDA events after `warmup` untimed ones (perf_counter on CPU)."""
    for _ in range(warmup):
        fn()
    B.sync()
    ts = []
    for _ in range(calls):
        if B.cuda:
            a, b = B.torch.cuda.Event(enable_timing=True), B.torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) * 1e-3)
        else:
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def measure(B: Bench, row, what: str, run_id: str, fn, flops: float, *, sustain_s: float, idle_s: float,
            warmup: int, calls: int, profiled: bool = False) -> None:
    """Cold protocol, `sustain_s` seconds back to back (a row per second), with `profiled` a third of that under
    the profiler (a row per second: wall and kernel time per call), hot protocol."""
    def emit(phase, second, n, t, smi=None, kernel_s=float("nan")):
        row(what=what, run_id=run_id, phase=phase, second=second, calls=n, time_s=t, kernel_s=kernel_s,
            tflops=flops / t / 1e12 if flops else float("nan"), **(smi if smi is not None else _smi()))

    time.sleep(idle_s)
    emit("cold", "", calls, one_call_s(B, fn, warmup, calls))
    t0, sec = time.perf_counter(), 0
    while time.perf_counter() - t0 < sustain_s:
        with _Sampler() as s:
            k, w0 = 0, time.perf_counter()
            while time.perf_counter() - w0 < 1.0:
                fn()
                k += 1
            B.sync()
        emit("sustained", sec, k, (time.perf_counter() - w0) / k, s.medians())
        sec += 1
    if profiled:  # calls per second from the sustained steps (at most 50): about one second per profiled row
        t0, sec, per = time.perf_counter(), 0, min(max(1, k), 50)
        while time.perf_counter() - t0 < max(1.0, sustain_s / 3):
            with _Sampler() as s:
                ks, _ = B.kernel_s(fn, per)
            emit("profiled", sec, per, B.last_profiled_s, s.medians(), ks)
            sec += 1
    emit("hot", "", calls, one_call_s(B, fn, 0, calls))


def attention_workloads(B: Bench, row, torch, device, dt, a) -> None:
    """cuDNN SDPA (torch's CUDNN_ATTENTION backend; the math one on CPU) causal forward + backward, cold / sustained
    / hot: FLOPs 3.5 x the causal forward's 2·b·h·s²·d."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = SDPBackend.CUDNN_ATTENTION if B.cuda else SDPBackend.MATH
    for b, h, s in ([(1, 2, 64)] if a.tiny else [(1, 32, 32768), (8, 32, 4096)]):
        d = 16 if a.tiny else 128
        q, k, v = (torch.randn(b, h, s, d, device=device, dtype=dt, requires_grad=True) for _ in range(3))
        grad = torch.randn(b, h, s, d, device=device, dtype=dt)

        def fwd_bwd():
            with sdpa_kernel(backend):
                out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.autograd.grad(out, (q, k, v), grad)
        measure(B, row, "attention", f"b{b}-h{h}-s{s}-d{d}", fwd_bwd, 3.5 * 2.0 * b * h * s * s * d,
                sustain_s=a.sustain_s, idle_s=a.idle_s, warmup=3, calls=10)
        fwd_bwd = q = k = v = grad = None  # free them before the next shape
        if B.cuda:
            torch.cuda.empty_cache()


def mix_workloads(B: Bench, row, torch, device, dt, a) -> None:
    """The GEMM with copies between, at each GEMMs' share of the cold time (module docstring, `mix`): the copies
    per GEMM from the two kernels' cold times, FLOPs the GEMM's (so `tflops` is the GEMM's effective rate)."""
    n = 256 if a.tiny else 8192
    x, y = torch.randn(n, n, device=device, dtype=dt), torch.empty(n, n, device=device, dtype=dt)
    src = torch.empty((2**28 if not a.tiny else 2**18) // 2, device=device, dtype=dt)
    dst = torch.empty_like(src)
    t_gemm = one_call_s(B, lambda: torch.matmul(x, x, out=y), 5, 20)
    t_copy = one_call_s(B, lambda: dst.copy_(src), 5, 20)
    for share in (1.0, 0.85, 0.7, 0.5):
        copies = round(t_gemm * (1.0 - share) / (share * t_copy))

        def it(c=copies):
            torch.matmul(x, x, out=y)
            for _ in range(c):
                dst.copy_(src)
        measure(B, row, "mix", f"{n}^3 gemm share {share:g} ({copies} x {src.numel() * 2 / 2**20:g} MiB copies)",
                it, 2.0 * n**3, sustain_s=a.sustain_s, idle_s=a.idle_s, warmup=3, calls=10)


ACC_SHAPES = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))  # Llama-3-8B: qkv, proj, fc1, fc2 (out, in)


def _accumulate_fn(torch, B, w32, a, b):
    """C += A·B into the fp32 C with bf16 A, B: in place where torch allows it, else into a fresh fp32 output (the
    same bytes: C read, D written); on CPU (no mixed-dtype addmm) the fp32 stand-in of the dry run; None without
    addmm's out_dtype."""
    if not B.cuda:
        return lambda: torch.addmm(w32, a.float(), b.float(), out=w32)
    for kw in ({"out": w32}, {}):
        try:
            torch.addmm(w32, a, b, out_dtype=torch.float32, **kw)
            B.sync()
            return lambda kw=kw: torch.addmm(w32, a, b, out_dtype=torch.float32, **kw)
        except (RuntimeError, TypeError) as exc:
            print(f"addmm out_dtype {'in place' if kw else 'out of place'}: {str(exc).splitlines()[0]}", flush=True)
    return None


def accumulate_workloads(B: Bench, row, torch, device, dt, a) -> None:
    """Weight-gradient GEMMs dW = dYᵀ·X over T tokens, bf16 out against added into fp32 (module docstring)."""
    T = 64 if a.tiny else 4096
    for n_out, n_in in ([(96, 64)] if a.tiny else ACC_SHAPES):
        dy_t = torch.randn(n_out, T, device=device, dtype=dt)
        x = torch.randn(T, n_in, device=device, dtype=dt)
        w16 = torch.empty(n_out, n_in, device=device, dtype=dt)
        w32 = torch.zeros(n_out, n_in, device=device, dtype=torch.float32)
        acc = _accumulate_fn(torch, B, w32, dy_t, x)
        if acc is None:
            print(f"accumulate {n_out}x{n_in}: this torch has no addmm with out_dtype; skipped", flush=True)
            continue
        flops = 2.0 * n_out * n_in * T
        bf16_out = (lambda d=dy_t, t=x, o=w16: torch.matmul(d, t, out=o))
        for what, fn in (("wgrad_bf16_out", bf16_out), ("wgrad_fp32_accumulate", acc)):
            measure(B, row, what, f"{n_out}x{n_in}x{T}", fn, flops, sustain_s=a.sustain_s, idle_s=a.idle_s,
                    warmup=5, calls=20)
        dy_t = x = w16 = w32 = acc = bf16_out = fn = None  # free them before the next shape


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--sustain-s", type=float, default=15.0)
    ap.add_argument("--idle-s", type=float, default=5.0)
    ap.add_argument("--workloads", default="gemm,step",
                    help="comma-separated: gemm, step (the harness steps), attention (cuDNN SDPA causal forward + "
                         "backward at 32768 x 32 heads and 8 x 4096 x 32 heads, head dim 128), copy (1 GiB "
                         "device-to-device), mix (the GEMM with copies between, by the GEMMs' share), "
                         "accumulate (weight-gradient GEMMs, bf16 out vs added into fp32): which run cold, sustained "
                         "and hot")
    a = ap.parse_args(argv)
    todo = set(a.workloads.split(","))
    import torch

    import train_step

    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    B = Bench(torch, device)
    f = open(a.out, "w", newline="")
    w = csv.DictWriter(f, fieldnames=FIELDS)
    w.writeheader()

    def row(**r):
        w.writerow(r)
        f.flush()
        print({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in r.items()}, flush=True)

    n = 256 if a.tiny else 8192
    dt = torch.bfloat16 if B.cuda else torch.float32
    if "gemm" in todo:
        x = torch.randn(n, n, device=device, dtype=dt)
        y = torch.empty(n, n, device=device, dtype=dt)
        measure(B, row, "gemm", f"{n}^3", lambda: torch.matmul(x, x, out=y), 2.0 * n**3, sustain_s=a.sustain_s,
                idle_s=a.idle_s, warmup=5, calls=20)
        del x, y
    if "attention" in todo:
        attention_workloads(B, row, torch, device, dt, a)
    if "copy" in todo:
        src = torch.empty((2**30 if not a.tiny else 2**20) // 2, device=device, dtype=dt)
        dst = torch.empty_like(src)
        measure(B, row, "copy", f"{src.numel() * 2 / 2**30:g} GiB", lambda: dst.copy_(src), 0.0,
                sustain_s=a.sustain_s, idle_s=a.idle_s, warmup=5, calls=20)
        del src, dst
    if "mix" in todo:
        mix_workloads(B, row, torch, device, dt, a)
    if "accumulate" in todo:
        accumulate_workloads(B, row, torch, device, dt, a)
    if "step" not in todo:
        f.close()
        return 0
    grid = {c.run_id: c for c in train_step.GPU_GRID + train_step.HOLDOUT_GRID + train_step.CPU_GRID}
    for rid in ([train_step.CPU_GRID[0].run_id] if a.tiny else STEP_CONFIGS):
        cfg = grid[rid]
        model = train_step.build_model(cfg, torch, device, {"fp32": torch.float32, "bf16": torch.bfloat16}[cfg.dtype])
        step, opt = train_step.training_step(model, cfg, torch, device)
        measure(B, row, "step", rid, step, 0.0, sustain_s=a.sustain_s, idle_s=a.idle_s, warmup=3, calls=10,
                profiled=True)
        del model, opt, step
        if B.cuda:
            torch.cuda.empty_cache()
    f.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
