"""Does the summed kernel time of a profiled harness step count every kernel the GPU ran?

    python validation/kernel_sum_check.py --out sums.csv [--config RUN_ID ...] [--device cpu]

On the 2026-11-27 lease, harness steps profiled back to back (validation/gpu_power_step.py) took as long per step
as unprofiled ones, yet the kernels' summed device time from torch's `prof.events()` (what
`profile_step.device_kernels` read then) was 8-13 % shorter than the step, while the same steps' Chrome trace
(validation/idle_gaps.py) showed the GPU busy for 98-99 % of its span. One of the two counts misses device time.
This profiles the same steps once with CUDA activity only (as `Bench.kernel_s` does) and once with CPU + CUDA (as
idle_gaps does) and, for each, writes per step: the step's wall time, the events' sum, the trace's summed device activity by category
(kernel, gpu_memcpy, gpu_memset), the trace's busy union, and the kernels by name whose trace time the events
miss (largest first); and, per kernel name, its calls, trace and events time and the aten ops (with shapes) that
launched it (`<out>.kernels.csv`). Every row is printed as it is measured.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _union_us(iv) -> float:
    total, end = 0.0, None
    for a, b in sorted(iv):
        if end is None or a > end:
            total, end = total + b - a, b
        elif b > end:
            total, end = total + b - end, b
    return total


def measure(cfg, device: str, with_cpu: bool, steps: int, warmup: int = 3) -> tuple[dict, list[tuple]]:
    import torch

    import train_step
    from profile_step import profiled_steps

    td = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[cfg.dtype]
    model = train_step.build_model(cfg, torch, device, td)
    cuda = device.startswith("cuda")
    step, _ = train_step.training_step(model, cfg, torch, device, optimizer_impl="fused" if cuda else "foreach")
    for _ in range(warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
    prof, wall = profiled_steps(step, steps, torch, cuda=cuda, cpu=with_cpu, record_shapes=with_cpu)
    ev_by_name: dict[str, float] = defaultdict(float)
    for e in prof.events():  # what `profile_step.device_kernels` read before it read the trace
        if not str(getattr(e, "device_type", "")).endswith("CUDA") or getattr(e, "is_user_annotation", False):
            continue
        if "#" not in e.name:
            ev_by_name[e.name] += getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "trace.json"
        prof.export_chrome_trace(str(p))
        trace = json.loads(p.read_text())
    evs = trace["traceEvents"] if isinstance(trace, dict) else trace
    ops = {e["args"].get("External id"): f"{e['name']}{e['args'].get('Input Dims', '')}" for e in evs
           if e.get("cat") == "cpu_op" and e.get("ph") == "X" and "args" in e}
    launched_by: dict[str, set] = defaultdict(set)
    count: dict[str, int] = defaultdict(int)
    by_cat: dict[str, float] = defaultdict(float)
    tr_by_name: dict[str, float] = defaultdict(float)
    iv = []
    for e in evs:
        if e.get("ph") != "X" or e.get("cat") not in DEVICE_CATS:
            continue
        dur = float(e.get("dur", 0.0))
        by_cat[e["cat"]] += dur
        tr_by_name[e["name"]] += dur
        count[e["name"]] += 1
        xid = e.get("args", {}).get("External id")
        if xid in ops:
            launched_by[e["name"]].add(ops[xid][:160])
        iv.append((float(e["ts"]), float(e["ts"]) + dur))
    span = (max(b for _, b in iv) - min(a for a, _ in iv)) if iv else 0.0
    res = dict(run_id=cfg.run_id, activities="cpu+cuda" if with_cpu else "cuda", wall_s=wall,
               events_sum_s=sum(ev_by_name.values()) * 1e-6 / steps,
               trace_kernel_s=by_cat["kernel"] * 1e-6 / steps, trace_memcpy_s=by_cat["gpu_memcpy"] * 1e-6 / steps,
               trace_memset_s=by_cat["gpu_memset"] * 1e-6 / steps, trace_busy_s=_union_us(iv) * 1e-6 / steps,
               trace_span_s=span * 1e-6 / steps, events_n=len(ev_by_name), trace_n=len(tr_by_name))
    missed = sorted(((n, (tr_by_name[n] - ev_by_name.get(n, 0.0)) * 1e-6 / steps) for n in tr_by_name),
                    key=lambda x: -x[1])
    table = [dict(run_id=cfg.run_id, activities=res["activities"], kernel=n, calls_per_step=count[n] / steps,
                  trace_s=tr_by_name[n] * 1e-6 / steps, events_s=ev_by_name.get(n, 0.0) * 1e-6 / steps,
                  launched_by=" | ".join(sorted(launched_by[n]))[:600]) for n in tr_by_name]
    return res, [m for m in missed if m[1] > 0][:12], table


def main(argv=None) -> int:
    import train_step

    grid = {c.run_id: c for c in train_step.GPU_GRID + train_step.HOLDOUT_GRID + train_step.CPU_GRID}
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", action="append")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    rids = a.config or (["L8-h4096-a32-kv8-f14336-s4096-b1-none-bf16-sdpa",
                         "L2-h8192-a64-kv64-f22016-s2048-b1-none-bf16-sdpa"] if device != "cpu"
                        else [train_step.CPU_GRID[0].run_id])
    fields = ["run_id", "activities", "wall_s", "events_sum_s", "trace_kernel_s", "trace_memcpy_s", "trace_memset_s",
              "trace_busy_s", "trace_span_s", "events_n", "trace_n", "missed"]
    tables: list[dict] = []
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for rid in rids:
            if rid not in grid:
                raise SystemExit(f"kernel_sum_check.py: --config {rid!r} is not a harness run id")
            for with_cpu in (False, True):
                res, missed, table = measure(grid[rid], device, with_cpu, a.steps)
                tables += table
                res["missed"] = "; ".join(f"{n[:90]}={s:.6f}" for n, s in missed)
                print({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in res.items()}, flush=True)
                w.writerow(res)
                f.flush()
                if device.startswith("cuda"):
                    torch.cuda.empty_cache()
    with open(Path(a.out).with_suffix(".kernels.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["run_id", "activities", "kernel", "calls_per_step", "trace_s", "events_s",
                                          "launched_by"])
        w.writeheader()
        w.writerows(tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
