"""Where an eager training step leaves the GPU idle, and why: the gaps between kernels of a torch.profiler
trace, each split into the time the host was late (the launch of the next kernel began after the GPU ran
dry: what the host was doing then is named) and the launch latency that remains.

    python validation/idle_gaps.py --out idle.csv [--config L8-h4096-a32-kv8-f14336-s2048-b1-none-bf16-sdpa]

docs/validation-h100.md (finding 9) once reported the lent H100 idle for 4-32 % of eager steps; that idle time
was kernels torch's `prof.events()` sum had missed (validation/h100_owed2/README.md), and this script, which
reads the trace, found the GPU busy for 97-99 % of GPU-bound steps. It still names the cause of the idle time
that host-bound and FSDP-wrapped steps do have. It reads the Chrome trace torch.profiler exports (device activities with
`cat` kernel / gpu_memcpy / gpu_memset, host runtime calls `cuda_runtime` / `cuda_driver`, host `cpu_op`s;
device activity and its launch share `args.correlation`).

For each gap between the GPU's busy intervals (the union of device activities on all streams), let L be the
runtime call that launched the first activity after the gap:
- host late = L.start − gap start, when positive: the GPU had run dry before the host issued the next work.
  It is attributed to the synchronising or allocating runtime calls the host was inside then (by name), and
  the rest to the outermost `cpu_op` covering that time (or 'host: outside any op').
- launch latency = the rest of the gap (from max(L.start, gap start) to the activity's start).
"""
from __future__ import annotations

import argparse
import bisect
import csv
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")


def blocking(name: str) -> bool:
    """A runtime call that waits for the device or the allocator: synchronisations, (de)allocations and the
    synchronous cudaMemcpy (not cudaMemcpyAsync)."""
    return any(s in name for s in ("Synchronize", "Malloc", "Free")) or name in ("cudaMemcpy", "cuMemcpyDtoH_v2")


def _x(events, cats):
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in cats and "dur" in e]


def _overlap(a0, a1, b0, b1) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def analyse(trace: dict | list, *, min_gap_us: float = 1.0) -> dict:
    """Idle-time split of one trace (a Chrome trace dict or its event list; times in µs in the trace, seconds
    out). Gaps shorter than `min_gap_us` count as idle but are not split.

    Returns {"span_s", "busy_s", "idle_s", "host_late_s", "launch_latency_s", "gaps", "by_cause": {name: s},
    "gap_histogram": {bucket: count}}. span: first device activity's start to the last one's end."""
    ev = trace if isinstance(trace, list) else trace.get("traceEvents", [])
    dev = sorted(_x(ev, DEVICE_CATS), key=lambda e: e["ts"])
    out = {"span_s": 0.0, "busy_s": 0.0, "idle_s": 0.0, "host_late_s": 0.0, "launch_latency_s": 0.0, "gaps": 0,
           "by_cause": {}, "gap_histogram": {}}
    if not dev:
        return out
    launches = {e.get("args", {}).get("correlation"): e for e in _x(ev, RUNTIME_CATS)}
    runtime = sorted(_x(ev, RUNTIME_CATS), key=lambda e: e["ts"])
    ops = sorted(_x(ev, ("cpu_op",)), key=lambda e: (e["ts"], -e["dur"]))
    op_starts = [o["ts"] for o in ops]
    by_cause: dict[str, float] = defaultdict(float)
    hist: dict[str, int] = defaultdict(int)
    busy, end = 0.0, None
    span0 = dev[0]["ts"]
    span1 = max(e["ts"] + e["dur"] for e in dev)
    for e in dev:
        s, f = e["ts"], e["ts"] + e["dur"]
        if end is None or s >= end:
            if end is not None and s - end >= min_gap_us:
                _gap(end, s, launches.get(e.get("args", {}).get("correlation")), runtime, ops, op_starts,
                     by_cause, out)
                hist[_bucket(s - end)] += 1
            busy += f - s
            end = f
        elif f > end:
            busy += f - end
            end = f
    out["span_s"] = (span1 - span0) * 1e-6
    out["busy_s"] = busy * 1e-6
    out["idle_s"] = out["span_s"] - out["busy_s"]
    out["by_cause"] = {k: v * 1e-6 for k, v in sorted(by_cause.items(), key=lambda kv: -kv[1])}
    out["gap_histogram"] = dict(hist)
    out["host_late_s"] *= 1e-6
    out["launch_latency_s"] *= 1e-6
    return out


def _bucket(us: float) -> str:
    for edge in (5, 20, 100, 1000):
        if us < edge:
            return f"<{edge} us"
    return ">=1 ms"


def _gap(g0, g1, launch, runtime, ops, op_starts, by_cause, out) -> None:
    """Split the idle interval [g0, g1) (µs) into host-late and launch-latency parts and name the host's
    work in the late part."""
    out["gaps"] += 1
    late_end = min(g1, launch["ts"]) if launch is not None else g0
    late = max(0.0, late_end - g0)
    out["host_late_s"] += late
    out["launch_latency_s"] += (g1 - g0) - late
    if late <= 0:
        return
    named = 0.0
    for r in runtime:  # blocking runtime calls inside the late part
        if r["ts"] >= late_end:
            break
        if blocking(r["name"]):
            ov = _overlap(g0, late_end, r["ts"], r["ts"] + r["dur"])
            if ov > 0:
                by_cause["runtime: " + r["name"]] += ov
                named += ov
    rest = late - named
    if rest <= 0:
        return
    mid = 0.5 * (g0 + late_end)
    i = bisect.bisect_right(op_starts, mid)
    outer = None
    for o in ops[:i]:  # the first-starting (outermost) op that covers the midpoint
        if o["ts"] + o["dur"] >= mid:
            outer = o
            break
    by_cause["host op: " + outer["name"] if outer else "host: outside any op"] += rest


def rows(run_id: str, res: dict) -> list[dict]:
    """CSV rows: totals, causes and the gap histogram of one analysed trace."""
    out = [{"run_id": run_id, "kind": "total", "name": k, "value": res[k]}
           for k in ("span_s", "busy_s", "idle_s", "host_late_s", "launch_latency_s", "gaps")]
    out += [{"run_id": run_id, "kind": "cause_s", "name": k, "value": v} for k, v in res["by_cause"].items()]
    out += [{"run_id": run_id, "kind": "gaps", "name": k, "value": v} for k, v in res["gap_histogram"].items()]
    return out


WRAPS = ("none", "fsdp1", "fsdp2", "ddp", "ddp-views")
_OWN_GROUP: list = []


def wrap_model(model, wrap: str, torch, device: str, td):
    """The harness model as plain torch, or sharded per decoder layer by FSDP1 (FullyShardedDataParallel with a
    per-layer wrap policy, bf16 mixed precision, limit_all_gathers: llm-foundry / accelerate) or FSDP2
    (fully_shard per layer then the root, fp32 reduce: torchtitan), or replicated by torch DDP (`ddp`: its
    default gradient_as_bucket_view=False, the buckets copy the gradients; `ddp-views`: True), on a one-rank
    process group: the collectives are trivial, so what the wrapper adds to the step is its host work,
    synchronisation and buffers."""
    if wrap == "none":
        return model
    import os
    import socket

    import torch.distributed as dist
    if not dist.is_initialized():
        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(sk.getsockname()[1]))
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo", rank=0, world_size=1)
        _OWN_GROUP.append(True)  # main() destroys it: a caller's process keeps no group of ours
    layer = type(model.layers[0])
    if wrap in ("ddp", "ddp-views"):
        from torch.nn.parallel import DistributedDataParallel
        ids = [torch.device(device).index or 0] if device.startswith("cuda") else None
        return DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=wrap == "ddp-views")
    if wrap == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mp = MixedPrecisionPolicy(param_dtype=td, reduce_dtype=torch.float32)
        for m in model.layers:
            fully_shard(m, mp_policy=mp)
        return fully_shard(model, mp_policy=mp)
    from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    return FullyShardedDataParallel(model, auto_wrap_policy=ModuleWrapPolicy({layer}), use_orig_params=True,
                                    mixed_precision=MixedPrecision(param_dtype=td, reduce_dtype=td, buffer_dtype=td),
                                    limit_all_gathers=True,
                                    device_id=torch.device(device) if device.startswith("cuda") else None)


def release_group() -> None:
    """Destroy the one-rank process group `wrap_model` created, if it did (a caller's own group is kept)."""
    if _OWN_GROUP:
        import torch.distributed as dist
        dist.destroy_process_group()
        _OWN_GROUP.clear()


def profile_trace(cfg, *, device: str, warmup: int = 3, steps: int = 3, wrap: str = "none") -> dict:
    """Run the harness's training step (validation/train_step.py, AdamW, persistent gradients; `wrap`: plain,
    FSDP1 or FSDP2 per layer, `wrap_model`) under torch.profiler (CPU + CUDA activities) and return the exported
    Chrome trace."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    import train_step

    td = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[cfg.dtype]
    model = wrap_model(train_step.build_model(cfg, torch, device, td), wrap, torch, device, td)
    impl = "fused" if device != "cpu" and wrap == "none" else "foreach"
    step, _ = train_step.training_step(model, cfg, torch, device, optimizer_impl=impl)

    for _ in range(warmup):
        step()
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        for _ in range(steps):
            step()
        if cuda:
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "trace.json"
        prof.export_chrome_trace(str(p))
        return json.loads(p.read_text())


def main(argv=None) -> int:
    import train_step

    grid = {c.run_id: c for c in train_step.GPU_GRID + train_step.HOLDOUT_GRID + train_step.CPU_GRID}
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", action="append", help="harness run id (repeatable; default: three SDPA runs)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--wrap", default="none", help=f"comma-separated, of {', '.join(WRAPS)} (FSDP on one rank)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    default = (["L8-h4096-a32-kv8-f14336-s2048-b1-none-bf16-sdpa", "L8-h4096-a32-kv8-f14336-s4096-b1-none-bf16-sdpa",
                "L8-h1024-a16-kv16-f2816-s1024-b8-none-bf16-sdpa"] if device != "cpu"
               else [train_step.CPU_GRID[0].run_id])
    wraps = [w for w in a.wrap.split(",") if w]
    if any(w not in WRAPS for w in wraps):
        raise SystemExit(f"idle_gaps.py: --wrap {a.wrap!r}: each must be one of {', '.join(WRAPS)}")
    out = []
    for rid in a.config or default:
        if rid not in grid:
            raise SystemExit(f"idle_gaps.py: --config {rid!r} is not a harness run id (validation/train_step.py)")
        for w in wraps:
            name = rid if w == "none" else f"{rid}+{w}"
            try:
                res = analyse(profile_trace(grid[rid], device=device, steps=a.steps, wrap=w))
            except RuntimeError as e:  # (FSDP1 needs an accelerator): the other runs still count
                print(name, "failed:", str(e).splitlines()[0][:160], flush=True)
                continue
            print(name, {k: round(v, 6) if isinstance(v, float) else v for k, v in res.items() if k != "by_cause"},
                  dict(list(res["by_cause"].items())[:6]), flush=True)
            out += rows(name, res)
    release_group()
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["run_id", "kind", "name", "value"])
        w.writeheader()
        w.writerows(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
