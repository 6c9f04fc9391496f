"""The step's memory phases on one GPU: the harness step's peak allocated and reserved bytes with foreach or fused
AdamW, gradients kept or set to None, plain, under torch DDP (the buckets copy the gradients, or the gradients
are views of them) and under FSDP2 on a one-rank group.

    python validation/gpu_memory_phases.py --out memory_phases.csv [--config RUN_ID] [--device cuda]
        [--snapshot peak_owners.csv]     # also: what holds each case's peak (gpu_memory_snapshot.py; a GPU only)

What it checks (memory/states.py, memory/worst.py `peak_terms`), each as a difference between two cases of the
same model, so nothing of the model's own accounting enters:
- foreach AdamW's step allocates one second-moment copy (`optimizer_step_bytes`): foreach − fused, when the
  step's phase holds the peak;
- gradients set to None are absent at the activation peak of a step's only micro-batch (`absent_grad_bytes`):
  kept − set-to-None in allocated bytes;
- FSDP2's sharded gradients, the reduce-scatter stream's outputs, keep their reserved bytes under set-to-None
  (the allocator reuses a freed block only on its own stream): kept − set-to-None in reserved bytes ≈ 0 while
  the allocated bytes drop;
- torch DDP's buckets copy the gradients (`ddp_bucket_bytes`): `ddp` − `ddp-views` ≈ the gradient bytes.
Each case is measured after two warm-up steps (the allocator's cache filled, the optimizer state allocated) and
printed as soon as it is measured; on a CPU the peaks are left empty (a dry run of every case).
"""
from __future__ import annotations

import argparse
import csv
import gc
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# (wrap, AdamW implementation, gradients between steps)
CASES = (("none", "foreach", "persistent"), ("none", "foreach", "set-to-none"), ("none", "fused", "persistent"),
         ("none", "fused", "set-to-none"), ("ddp", "fused", "persistent"), ("ddp-views", "fused", "persistent"),
         ("fsdp2", "foreach", "persistent"), ("fsdp2", "foreach", "set-to-none"))
FIELDS = ("run_id", "device", "torch_version", "wrap", "optimizer_impl", "grad_buffer", "param_bytes", "grad_bytes",
          "optimizer_state_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "status")
SNAPSHOT_FIELDS = ("run_id", "wrap", "optimizer_impl", "grad_buffer", "peak_bytes", "owner", "bytes")


def _local_bytes(tensors) -> int:
    """Bytes of the tensors' local shards (a DTensor's own), each storage once."""
    seen, total = set(), 0
    for t in tensors:
        t = getattr(t, "_local_tensor", t)
        key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        if key not in seen:
            seen.add(key)
            total += key[1]
    return total


def measure(cfg, *, device: str, wrap: str, impl: str, grads: str, warmup: int = 2,
            owners: dict | None = None) -> dict:
    """One case: the peak allocated and reserved bytes of one training step after `warmup` steps, and the bytes
    of the parameters, gradients and optimizer states it holds (local shards). With `owners` (a dict, on a GPU)
    a second measured step is recorded and `owners` gets the live bytes at its peak by allocating code
    (gpu_memory_snapshot.py)."""
    import torch

    import train_step
    from idle_gaps import wrap_model

    td = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[cfg.dtype]
    cuda = device.startswith("cuda")
    model = wrap_model(train_step.build_model(cfg, torch, device, td), wrap, torch, device, td)
    params = list(model.parameters())
    step, opt = train_step.training_step(model, cfg, torch, device, optimizer_impl=impl, grad_buffer=grads)
    for _ in range(warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
    step()
    if cuda:
        torch.cuda.synchronize()
    row = {"wrap": wrap, "optimizer_impl": impl, "grad_buffer": grads,
           "param_bytes": _local_bytes(params), "grad_bytes": _local_bytes(p.grad for p in params if p.grad is not None),
           "optimizer_state_bytes": _local_bytes(v for s in opt.state.values() for v in s.values()
                                                 if torch.is_tensor(v) and v.numel() > 1),
           "peak_allocated_bytes": torch.cuda.max_memory_allocated(device) if cuda else "",
           "peak_reserved_bytes": torch.cuda.max_memory_reserved(device) if cuda else ""}
    if owners is not None and cuda:
        from gpu_memory_snapshot import record

        owners["peak_bytes"], owners["by_owner"] = record(torch, device, step)
    return row


def _release(device: str) -> None:
    """Free what the last case left (its model and optimizer went out of scope) and the allocator's cache."""
    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def main(argv=None) -> int:
    import train_step

    grid = {c.run_id: c for c in train_step.GPU_GRID + train_step.HOLDOUT_GRID + train_step.CPU_GRID}
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=None, help="harness run id (default: L8-h2048, s2048, b2 on a GPU)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", required=True)
    ap.add_argument("--snapshot", default=None, help="CSV of what holds each case's peak (allocator history)")
    a = ap.parse_args(argv)
    import torch

    from idle_gaps import release_group

    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    rid = a.config or ("L16-h2048-a16-kv16-f5632-s2048-b2-none-bf16-sdpa" if device != "cpu"
                       else train_step.CPU_GRID[0].run_id)
    if rid not in grid:
        raise SystemExit(f"gpu_memory_phases.py: --config {rid!r} is not a harness run id (validation/train_step.py)")
    snap = open(a.snapshot, "w", newline="") if a.snapshot else None
    sw = csv.DictWriter(snap, fieldnames=SNAPSHOT_FIELDS) if snap else None
    if sw:
        sw.writeheader()
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for wrap, impl, grads in CASES:
            base = {"run_id": rid, "device": device, "torch_version": torch.__version__}
            owners = {} if sw else None
            try:
                row = {**base, **measure(grid[rid], device=device, wrap=wrap, impl=impl, grads=grads, owners=owners),
                       "status": "ok"}
                for lab, b in sorted((owners or {}).get("by_owner", {}).items(), key=lambda kv: -kv[1]):
                    sw.writerow({"run_id": rid, "wrap": wrap, "optimizer_impl": impl, "grad_buffer": grads,
                                 "peak_bytes": owners["peak_bytes"], "owner": lab, "bytes": b})
                if snap:
                    snap.flush()
            except (RuntimeError, ValueError) as e:  # (e.g. a fused AdamW the device lacks): the others still count
                row = {**base, "wrap": wrap, "optimizer_impl": impl, "grad_buffer": grads,
                       "status": "failed: " + str(e).splitlines()[0][:160]}
            _release(device)
            print({k: row.get(k, "") for k in FIELDS[3:]}, flush=True)
            w.writerow(row)
            f.flush()
    if snap:
        snap.close()
    release_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
