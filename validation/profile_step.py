"""Kernel-time breakdown of `train_step.py` configurations: where a measured step's time goes.

For each configuration: build the harness model (train_step.build_model), run the warm-up steps, then
profile `--steps` steps with torch.profiler and sum the device time of every kernel by category
(`kernel_category`: gemm, attention, optimizer, elementwise / reduction, copy, other). The GPU's busy
time (the union of kernel intervals) against the steps' wall time gives the idle share: launch gaps
the GPU spends waiting on the host. One CSV row per (configuration, category), a `_busy` and a
`_wall` row, and the 25 longest kernels by name (`kernel:<category>` rows). Times are per step.

    python validation/profile_step.py --grid gpu --pick 9,21 --out validation/h100/kernel_breakdown.csv
"""
from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import train_step  # noqa: E402

CATEGORIES = (  # first match wins; names of CUDA kernels as torch 2.x / cuBLAS / FlashAttention / cuDNN emit them
    ("optimizer", re.compile(r"adam|multi_tensor|fused_adamw", re.I)),
    ("attention", re.compile(r"flash|fmha|sdpa|attention|cudnn_generated|scaled_dot", re.I)),
    ("gemm", re.compile(r"gemm|xmma|cutlass|sm90|sm80|nvjet|matmul|cublas", re.I)),
    ("copy", re.compile(r"memcpy|memset|copy|cat|fill", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|reduce|softmax|norm|loss|nll|index|scatter|gather|silu|"
                               r"mul|add|div|where|unrolled", re.I)),
)


def kernel_category(name: str) -> str:
    for cat, rx in CATEGORIES:
        if rx.search(name):
            return cat
    return "other"


def device_kernels(prof):
    """[(name, start µs, device µs)] of every kernel, memcpy and memset a torch.profiler run recorded on the GPU,
    read from the run's exported Chrome trace (activities of cat kernel / gpu_memcpy / gpu_memset).

    Not `prof.events()`: with torch 2.11 + CUDA 13 on the lent H100 it reported no device time at all for whole
    kernel families (the non-vectorised `elementwise_kernel<128, 4, ...>` of mul, add, neg, silu, silu_backward
    and copy_, the fp32 logits cast), about 10 % of a harness step's kernel time, while the same run's trace
    had them (validation/kernel_sum_check.py, validation/h100_owed2/kernel_sum*.csv)."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "trace.json"
        prof.export_chrome_trace(str(p))
        trace = json.loads(p.read_text())
    evs = trace["traceEvents"] if isinstance(trace, dict) else trace
    return [(e["name"], float(e["ts"]), float(e["dur"])) for e in evs
            if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and float(e.get("dur", 0))]


def _union_s(intervals) -> float:
    """Total length of the union of [start, end) intervals (microseconds in, seconds out)."""
    total, end_max = 0.0, None
    for a, b in sorted(intervals):
        if end_max is None or a > end_max:
            total += b - a
            end_max = b
        elif b > end_max:
            total += b - end_max
            end_max = b
    return total * 1e-6


def profiled_steps(step, steps: int, torch, *, cuda: bool, cpu: bool, record_shapes: bool = False):
    """(profiler, wall seconds per step) of `steps` calls of `step` under torch.profiler (CUDA activity on a GPU,
    CPU activity with `cpu` or off one), synchronised at the end."""
    import time

    from torch.profiler import ProfilerActivity, profile

    acts = ([ProfilerActivity.CPU] if cpu or not cuda else []) + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts, record_shapes=record_shapes) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        if cuda:
            torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / steps
    return prof, wall


def profile_config(cfg, *, device: str, warmup: int, steps: int, optimizer_impl: str = "fused",
                   grad_buffer: str = "persistent") -> list[dict]:
    import torch

    td = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[cfg.dtype]
    cuda = device.startswith("cuda")
    model = train_step.build_model(cfg, torch, device, td)
    step, _ = train_step.training_step(model, cfg, torch, device, optimizer_impl=optimizer_impl,
                                       grad_buffer=grad_buffer)
    for _ in range(warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
    prof, wall = profiled_steps(step, steps, torch, cuda=cuda, cpu=True)
    sums: dict[str, float] = {}
    names: dict[str, float] = {}
    intervals = []
    for name, t0_us, us in (device_kernels(prof) if cuda else ()):
        cat = kernel_category(name)
        sums[cat] = sums.get(cat, 0.0) + us * 1e-6 / steps
        names[name] = names.get(name, 0.0) + us * 1e-6 / steps
        intervals.append((t0_us, t0_us + us))
    rows = [{"run_id": cfg.run_id, "category": c, "kernel": "", "time_s": t} for c, t in sorted(sums.items())]
    rows.append({"run_id": cfg.run_id, "category": "_busy", "kernel": "", "time_s": _union_s(intervals) / steps})
    rows.append({"run_id": cfg.run_id, "category": "_wall", "kernel": "", "time_s": wall})
    top = sorted(names.items(), key=lambda kv: -kv[1])[:25]  # the kernels behind the categories
    rows += [{"run_id": cfg.run_id, "category": "kernel:" + kernel_category(n), "kernel": n[:160], "time_s": t}
             for n, t in top]
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", choices=["gpu", "gpu-holdout", "cpu"], required=True)
    ap.add_argument("--pick", default="", help="comma-separated indices into the grid (default: all)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--optimizer-impl", default="fused", choices=["fused", "foreach"])
    ap.add_argument("--grad-buffer", default="persistent", choices=["persistent", "set-to-none"])
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    grid = {"gpu": train_step.GPU_GRID, "gpu-holdout": train_step.HOLDOUT_GRID, "cpu": train_step.CPU_GRID}[a.grid]
    cfgs = [grid[int(i)] for i in a.pick.split(",")] if a.pick else grid
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["run_id", "category", "kernel", "time_s"])
        w.writeheader()
        for cfg in cfgs:
            rows = profile_config(cfg, device=device, warmup=a.warmup, steps=a.steps, optimizer_impl=a.optimizer_impl,
                                  grad_buffer=a.grad_buffer)
            w.writerows(rows)
            f.flush()
            print(cfg.run_id, {r["category"]: round(r["time_s"] * 1e3, 2) for r in rows if not r["kernel"]}, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
