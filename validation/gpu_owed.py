"""The one-GPU measurements issues 22 and 23 still owe, in one run: each stage prints every point as it is
measured and writes its own CSV into --out, so a lease cut short still leaves what was measured.

    python validation/gpu_owed.py --out some/folder [--stages launch,sdpa,contention,sustained,decode,layers]
    python validation/gpu_owed.py --out some/folder --device cpu --tiny     # dry run (the tests run it)

Stages (times per call; 'kernel' = summed device time of the call's kernels from torch.profiler (CUPTI),
'queued' = CUDA events around back-to-back calls, i.e. max(host issue, device) per call):
- launch: per-kernel floors. host_us: the host's issue time per call (perf_counter around a loop with no
  synchronisation); queued_us; graph_us: the same kernels replayed from a CUDA graph (no host); kernel_us.
  For a tiny add_, a LayerNorm and a small linear. Feeds the stacks' host_us_per_kernel (today measured on CPU,
  without the driver's launch cost).
- sdpa: F.scaled_dot_product_attention per backend (flash, efficient, cudnn, math): first causal batch x heads
  (1-8 x 8-32) at seq 1024 and 4096 (the shape term), then over seq x head dim x causal at 16k tokens per call
  (FlashAttention's benchmark shape: batch = 16384 / seq, heads x head dim = 2048) and at batch 1 with 32 heads
  (the calibration's shape): forward and backward kernel time, TFLOP/s in the FlashAttention convention
  (forward 4·b·h·s²·d, halved when causal; backward 2.5x forward).
- contention: a bf16 GEMM timed alone and while a bandwidth-bound copy streams on a second CUDA stream
  (issue 23's SM-contention measurement), and the copy's bandwidth (read + write bytes) alone and beside
  the GEMM.
- sustained: back-to-back 8192^3 GEMMs for --sustain-s seconds, TFLOP/s per second with the SM clock,
  power and temperature nvidia-smi reports (do clocks fall under sustained load?).
- decode: one decode step of Llama-3-8B-shaped layers (RMSNorm, QKV, SDPA over a KV cache, O, SwiGLU)
  over batch x KV length: queued and kernel time (eager decode is host-bound at small batch).
- layers: the harness's decoder layers (validation/train_step.py) forward + backward, eager against
  torch.compile: time and kernels per layer (the stacks' compiled_kernels_per_layer is an estimate today).
  profiled_wall_s: the wall time of the profiled calls themselves. The 2026-11-27 lease queued eager steps
  3.5-11.8 ms beyond their kernels while its profiled full steps (idle_gaps.py) were 97.5-98.6 % busy: this
  column tells whether the gap exists under the profiler too (GPU idle, which idle_gaps.py attributes) or
  only without it (the kernels themselves slower in the unprofiled run).
"""
from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

STAGES = ("launch", "sdpa", "contention", "sustained", "decode", "layers")


class Bench:
    """Timing helpers bound to one device; `deadline` (perf_counter) ends a stage's loop early."""

    def __init__(self, torch, device: str):
        self.torch, self.device = torch, device
        self.cuda = device.startswith("cuda")
        self.last_profiled_s = float("nan")  # kernel_s: the wall time per call of its profiled calls

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def queued_s(self, fn, calls: int) -> float:
        """Per-call time of `calls` back-to-back calls between two CUDA events (perf_counter on CPU)."""
        fn()
        self.sync()
        if not self.cuda:
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            return (time.perf_counter() - t0) / calls
        a, b = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls):
            fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) * 1e-3 / calls

    def host_s(self, fn, calls: int) -> float:
        """The host's issue time per call: no synchronisation inside the loop."""
        fn()
        self.sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        dt = (time.perf_counter() - t0) / calls
        self.sync()
        return dt

    def kernel_s(self, fn, calls: int) -> tuple[float, float]:
        """(summed device time of the kernels per call, kernels per call) from torch.profiler; on the CPU (nan,
        aten ops per call, nested ones included: a dry run's count, not a kernel count). Sets `last_profiled_s`,
        the wall time per call of the profiled calls (host clock, synchronised at the end)."""
        from torch.profiler import ProfilerActivity, profile

        fn()
        self.sync()
        acts = [ProfilerActivity.CUDA] if self.cuda else [ProfilerActivity.CPU]
        with profile(activities=acts) as prof:
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            self.sync()
            self.last_profiled_s = (time.perf_counter() - t0) / calls  # the same calls' wall time, profiled
        if not self.cuda:
            return float("nan"), sum(1 for e in prof.events() if e.name.startswith("aten::")) / calls
        from profile_step import device_kernels

        times = [us for _, _, us in device_kernels(prof)]
        return sum(times) * 1e-6 / calls, len(times) / calls

    def graph_s(self, fn, calls: int, replays: int = 1, warm: int = 1) -> float:
        """Per-call time of `calls` calls captured in one CUDA graph (after `warm` calls on a side stream) and
        replayed (no host work): the median of `replays` timed replays after one untimed; nan on CPU."""
        if not self.cuda:
            return float("nan")
        torch = self.torch
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm up outside the capture (allocator, cuBLAS handles)
            for _ in range(warm):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(calls):
                fn()
        g.replay()
        self.sync()
        times = []
        for _ in range(replays):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1e-3 / calls)
        return statistics.median(times)


def _writer(out: Path, name: str, fields: list[str]):
    f = open(out / f"{name}.csv", "w", newline="")
    w = csv.DictWriter(f, fieldnames=fields)
    w.writeheader()

    def row(**r):
        w.writerow(r)
        f.flush()
        print(name, {k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in r.items()}, flush=True)
    return row, f


def stage_launch(B: Bench, out: Path, tiny: bool, budget_s: float):
    torch, F = B.torch, B.torch.nn.functional
    dt = torch.bfloat16 if B.cuda else torch.float32
    x = torch.zeros(1, device=B.device, dtype=dt)
    y = torch.randn(8, 1024, device=B.device, dtype=dt)
    w = torch.randn(256, 1024, device=B.device, dtype=dt)
    ops = {"add_ (1 element)": lambda: x.add_(1.0), "layer_norm (8x1024)": lambda: F.layer_norm(y, (1024,)),
           "linear (8x1024 -> 256)": lambda: F.linear(y, w)}
    row, f = _writer(out, "launch", ["op", "host_us", "queued_us", "graph_us", "kernel_us", "kernels_per_call"])
    n = 50 if tiny else 2000
    for name, fn in ops.items():
        k, kn = B.kernel_s(fn, min(n, 200))
        row(op=name, host_us=B.host_s(fn, n) * 1e6, queued_us=B.queued_s(fn, n) * 1e6,
            graph_us=B.graph_s(fn, min(n, 500)) * 1e6, kernel_us=k * 1e6, kernels_per_call=kn)
    f.close()


def _sdpa_points(tiny: bool):
    """(label, batch, heads, seq, head_dim, causal), the most wanted first."""
    if tiny:
        return [("16k-tokens", 2, 4, 64, 32, True), ("batch-1", 1, 4, 128, 32, False)]
    # batch x heads at two lengths, causal, head dim 128: the shape term the 16k-token and batch-1 families leave
    # open (docs/gpu-measurements.md, attention: batch 1 runs at 0.43-0.84 of the 16k-token rate at seq 512-2048)
    pts = [("grid", b, h, s, 128, True) for s in (1024, 4096) for b in (1, 2, 4, 8) for h in (8, 16, 32)]
    for hd in (128, 64):
        for causal in (True, False):
            for s in (512, 1024, 2048, 4096, 8192, 16384):
                pts.append(("16k-tokens", 16384 // s, 2048 // hd, s, hd, causal))
    pts += [("batch-1", 1, 32, s, hd, True) for hd in (128, 64) for s in (512, 1024, 2048, 4096, 8192)]
    return pts


def stage_sdpa(B: Bench, out: Path, tiny: bool, budget_s: float):
    torch, F = B.torch, B.torch.nn.functional
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    if not B.cuda:
        backends = {"math": SDPBackend.MATH}
    dt = torch.bfloat16 if B.cuda else torch.float32
    row, f = _writer(out, "sdpa", ["backend", "shape", "batch", "heads", "seq", "head_dim", "causal", "fwd_kernel_s",
                                   "fwd_queued_s", "bwd_kernel_s", "fwd_tflops", "bwd_tflops", "status"])
    t_end = time.perf_counter() + budget_s
    for label, b, h, s, hd, causal in _sdpa_points(tiny):
        for name, be in backends.items():
            if time.perf_counter() > t_end:
                f.close()
                return
            if name == "math" and b * h * s * s * 4 > 16e9:
                continue  # the materialised fp32 scores would not fit
            q, k, v = (torch.randn(b, h, s, hd, device=B.device, dtype=dt, requires_grad=True) for _ in range(3))
            go = torch.randn(b, h, s, hd, device=B.device, dtype=dt)
            base = dict(backend=name, shape=label, batch=b, heads=h, seq=s, head_dim=hd, causal=causal)
            try:
                with sdpa_kernel([be]):
                    fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
                    both = lambda: torch.autograd.grad(fwd(), (q, k, v), go)  # noqa: E731
                    calls = 3 if tiny else max(3, min(50, int(2e11 / (b * h * s * s * hd))))
                    tf, _ = B.kernel_s(fwd, calls)
                    tq = B.queued_s(fwd, calls)
                    tb, _ = B.kernel_s(both, calls)
            except RuntimeError as e:  # backend not available for this shape / GPU
                row(**base, fwd_kernel_s="", fwd_queued_s="", bwd_kernel_s="", fwd_tflops="", bwd_tflops="",
                    status="unsupported: " + str(e).splitlines()[0][:120])
                continue
            ff = 4 * b * h * s * s * hd / (2 if causal else 1)
            tb = tb - tf
            row(**base, fwd_kernel_s=tf, fwd_queued_s=tq, bwd_kernel_s=tb, fwd_tflops=ff / tf / 1e12 if B.cuda else "",
                bwd_tflops=2.5 * ff / tb / 1e12 if B.cuda and tb > 0 else "", status="ok")
    f.close()


def stage_contention(B: Bench, out: Path, tiny: bool, budget_s: float):
    torch = B.torch
    dt = torch.bfloat16 if B.cuda else torch.float32
    row, f = _writer(out, "contention", ["gemm_n", "copy_mib", "gemm_alone_s", "gemm_beside_copy_s", "gemm_slowdown",
                                         "copy_alone_gb_s", "copy_beside_gemm_gb_s"])
    sizes = [(256, 4)] if tiny else [(4096, 256), (8192, 256), (8192, 1024)]
    side = torch.cuda.Stream() if B.cuda else None
    for n, mib in sizes:
        a = torch.randn(n, n, device=B.device, dtype=dt)
        c = torch.empty(n, n, device=B.device, dtype=dt)
        src = torch.empty(mib * 2**20, device=B.device, dtype=torch.uint8)
        dst = torch.empty_like(src)
        gemm = lambda: torch.matmul(a, a, out=c)  # noqa: E731
        copy = lambda: dst.copy_(src)  # noqa: E731
        calls = 5 if tiny else 40
        t_gemm = B.queued_s(gemm, calls)
        t_copy = B.queued_s(copy, calls)
        if B.cuda:
            t_both = _beside(B, side, timed=gemm, background=copy, calls=calls,
                             n_background=int(3 * calls * t_gemm / t_copy) + 4)
            t_copy_both = _beside(B, side, timed=copy, background=gemm, calls=int(calls * t_gemm / t_copy) + 4,
                                  n_background=3 * calls + 4)
        else:
            t_both, t_copy_both = float("nan"), float("nan")
        row(gemm_n=n, copy_mib=mib, gemm_alone_s=t_gemm, gemm_beside_copy_s=t_both, gemm_slowdown=t_both / t_gemm - 1,
            copy_alone_gb_s=2 * src.numel() / t_copy / 1e9, copy_beside_gemm_gb_s=2 * src.numel() / t_copy_both / 1e9)
    f.close()


def _beside(B: Bench, side, *, timed, background, calls: int, n_background: int) -> float:
    """Per-call time of `timed` on the current stream while `n_background` calls of `background` (issued first,
    enough to outlast it) run on the stream `side`. No device-wide synchronisation between the two issues."""
    torch = B.torch
    timed()
    background()
    B.sync()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(n_background):
            background()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(calls):
        timed()
    b.record()
    b.synchronize()
    B.sync()
    return a.elapsed_time(b) * 1e-3 / calls


SMI_QUERY = "clocks.sm,power.draw,temperature.gpu"  # _smi's fields, in its order


def _smi() -> dict:
    q = SMI_QUERY
    try:
        r = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits", "-i", "0"],
                           capture_output=True, text=True, timeout=5)
        sm, pw, tc = (v.strip() for v in r.stdout.splitlines()[0].split(","))
        return {"sm_clock_mhz": sm, "power_w": pw, "temperature_c": tc}
    except (OSError, IndexError, ValueError, subprocess.SubprocessError):
        return {"sm_clock_mhz": "", "power_w": "", "temperature_c": ""}


def stage_sustained(B: Bench, out: Path, tiny: bool, budget_s: float):
    torch = B.torch
    n = 512 if tiny else 8192
    dt = torch.bfloat16 if B.cuda else torch.float32
    a = torch.randn(n, n, device=B.device, dtype=dt)
    c = torch.empty(n, n, device=B.device, dtype=dt)
    row, f = _writer(out, "sustained", ["second", "gemms", "tflops", "sm_clock_mhz", "power_w", "temperature_c"])
    t0 = time.perf_counter()
    sec = 0
    while time.perf_counter() - t0 < budget_s:
        k, w0 = 0, time.perf_counter()
        while time.perf_counter() - w0 < 1.0:
            for _ in range(8):
                torch.matmul(a, a, out=c)
            B.sync()
            k += 8
        dt_s = time.perf_counter() - w0
        row(second=sec, gemms=k, tflops=2 * n**3 * k / dt_s / 1e12, **_smi())
        sec += 1
    f.close()


def decode_layer(F, x, p: dict, kc, vc, *, heads: int, kv_heads: int):
    """One decode step of a Llama-style layer for x [b, 1, h] (no RoPE): RMSNorm, fused QKV, the new K and V
    written into the caches' last slot, SDPA with GQA over the cache, O, RMSNorm, fused gate/up, SiLU x up, down;
    weights in `p` (wqkv, wo, wgu, wd, n1, n2). Shared by the decode stage and its CPU op count
    (gpu_decode_report.py)."""
    b, h = x.shape[0], x.shape[-1]
    d = h // heads
    y = F.rms_norm(x, (h,), p["n1"])
    q, k, v = F.linear(y, p["wqkv"]).view(b, 1, heads + 2 * kv_heads, d).transpose(1, 2).split(
        [heads, kv_heads, kv_heads], 1)
    kc[:, :, -1:].copy_(k)
    vc[:, :, -1:].copy_(v)
    a = F.scaled_dot_product_attention(q, kc, vc, enable_gqa=True)
    x = x + F.linear(a.transpose(1, 2).reshape(b, 1, h), p["wo"])
    g, u = F.linear(F.rms_norm(x, (h,), p["n2"]), p["wgu"]).chunk(2, -1)
    return x + F.linear(F.silu(g) * u, p["wd"])


def stage_decode(B: Bench, out: Path, tiny: bool, budget_s: float):
    """Decode steps of Llama-3-8B-shaped layers: x [b, 1, h] against a KV cache of T tokens."""
    torch, F = B.torch, B.torch.nn.functional
    h, H, kv, ffn, L = (64, 4, 2, 128, 2) if tiny else (4096, 32, 8, 14336, 4)
    d = h // H
    dt = torch.bfloat16 if B.cuda else torch.float32
    mk = lambda *s: torch.randn(*s, device=B.device, dtype=dt) * 0.02  # noqa: E731
    layers = [dict(wqkv=mk((H + 2 * kv) * d, h), wo=mk(h, h), wgu=mk(2 * ffn, h), wd=mk(h, ffn),
                   n1=torch.ones(h, device=B.device, dtype=dt), n2=torch.ones(h, device=B.device, dtype=dt))
              for _ in range(L)]
    row, f = _writer(out, "decode", ["layers", "batch", "kv_len", "queued_s_per_layer", "kernel_s_per_layer",
                                     "kernels_per_layer"])
    grid = [(1, 64), (4, 64)] if tiny else [(b, t) for t in (1024, 8192) for b in (1, 8, 32, 128) if b * t <= 2**20]
    t_end = time.perf_counter() + budget_s
    for b, T in grid:
        if time.perf_counter() > t_end:
            break
        caches = [(mk(b, kv, T, d), mk(b, kv, T, d)) for _ in range(L)]
        x0 = mk(b, 1, h)

        def step():
            x = x0
            for p, (kc, vc) in zip(layers, caches):
                x = decode_layer(F, x, p, kc, vc, heads=H, kv_heads=kv)
            return x

        with torch.no_grad():
            calls = 3 if tiny else 20
            tq = B.queued_s(step, calls)
            tk, kn = B.kernel_s(step, calls)
        row(layers=L, batch=b, kv_len=T, queued_s_per_layer=tq / L, kernel_s_per_layer=tk / L, kernels_per_layer=kn / L)
    f.close()


def stage_layers(B: Bench, out: Path, tiny: bool, budget_s: float):
    """The harness's decoder stack forward + backward, eager and torch.compile'd (default mode)."""
    import train_step

    torch = B.torch
    cfgs = ([train_step.StepConfig(layers=2, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=128, seq=32, micro_batch=1,
                                   recompute="none", dtype="fp32", attention="sdpa")] if tiny else
            [train_step.StepConfig(layers=4, hidden=h, heads=h // 128, kv_heads=8, ffn=ffn, vocab=1024, seq=s,
                                   micro_batch=1, recompute="none", dtype="bf16", attention="sdpa")
             for h, ffn, s in ((2048, 5632, 2048), (4096, 14336, 2048), (4096, 14336, 8192))])
    modes = ("eager",) if tiny and not B.cuda else ("eager", "compiled")
    row, f = _writer(out, "layers", ["run_id", "mode", "step_queued_s", "kernel_s", "profiled_wall_s",
                                      "kernels_per_layer"])
    t_end = time.perf_counter() + budget_s
    for cfg in cfgs:
        td = {"fp32": torch.float32, "bf16": torch.bfloat16}[cfg.dtype]
        tokens = torch.randint(0, cfg.vocab, (cfg.micro_batch, cfg.seq + 1)).to(B.device)
        inp, lab = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        for mode in modes:
            if time.perf_counter() > t_end:
                break
            model = train_step.build_model(cfg, torch, B.device, td)
            fwd = torch.compile(model) if mode == "compiled" else model
            step = lambda: fwd(inp, lab).backward()  # noqa: E731
            for _ in range(2):  # compile and warm up
                step()
            calls = 3 if tiny else 10
            tq = B.queued_s(step, calls)
            tk, kn = B.kernel_s(step, calls)
            row(run_id=cfg.run_id, mode=mode, step_queued_s=tq, kernel_s=tk, profiled_wall_s=B.last_profiled_s,
                kernels_per_layer=kn / cfg.layers)
    f.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--device", default="auto")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (a dry run of every stage)")
    ap.add_argument("--budget-s", type=float, default=90.0, help="time budget of each stage's point loop")
    ap.add_argument("--sustain-s", type=float, default=30.0)
    a = ap.parse_args(argv)
    stages = [s for s in a.stages.split(",") if s]
    bad = [s for s in stages if s not in STAGES]
    if bad:
        raise SystemExit(f"gpu_owed.py: --stages {','.join(bad)!r} unknown; choose from {','.join(STAGES)}")
    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    from simulator.calibrate.microbench import device_info

    info = device_info(device)
    (out / "owed_env.txt").write_text("".join(f"{k}: {v}\n" for k, v in info.items()) + f"smi: {_smi()}\n")
    print(info, flush=True)
    B = Bench(torch, device)
    fns = {"launch": stage_launch, "sdpa": stage_sdpa, "contention": stage_contention, "sustained": stage_sustained,
           "decode": stage_decode, "layers": stage_layers}
    rc = 0
    for s in stages:
        t0 = time.perf_counter()
        try:
            fns[s](B, out, a.tiny, a.sustain_s if s == "sustained" else a.budget_s)
            print(f"stage {s}: ok in {time.perf_counter() - t0:.1f} s", flush=True)
        except Exception as e:  # one failed stage must not lose the others' measurements
            print(f"stage {s}: failed after {time.perf_counter() - t0:.1f} s: {type(e).__name__}: {e}", flush=True)
            rc = 1
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
