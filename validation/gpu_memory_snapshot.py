"""What holds a step's peak allocated bytes: torch's CUDA allocator history replayed to its peak, the live blocks
there grouped by the Python code that allocated them (`gpu_memory_phases.py --snapshot`).

The history (`torch.cuda.memory._record_memory_history`, recorded around one training step) lists every
allocation and free with its size and the Python frames that made it. Replaying it from the bytes allocated when
recording started (the states, which the history does not list) gives the allocated total after each event; at its
maximum, the live blocks the step allocated are grouped by `label` (the innermost frame in torch's FSDP, DDP,
optimizer, autograd or loss code, else in the harness, else the innermost frame). Blocks allocated before the
step and freed during it lower the pre-step part ("before the step"). The question it answers: what the FSDP2
one-rank peak holds beyond the modelled states, activations and buffers (docs/gpu-measurements.md, memory
section, finding 6), not established from the peaks alone.
"""
from __future__ import annotations

# Where a frame's file shows whose allocation it is, the most specific first (path fragments, '/' separated).
OWNERS = (("torch/distributed/fsdp/", "FSDP"), ("torch/nn/parallel/", "DDP"), ("torch/optim/", "optimizer"),
          ("torch/autograd/", "autograd"), ("torch/nn/functional.py", "torch.nn.functional"),
          ("validation/", "harness"))


def label(frames) -> str:
    """'owner: file:line function' of an allocation's Python frames (innermost first): the first frame in an
    OWNERS path, else the innermost frame; '(no Python frame)' for a C++-only allocation (e.g. autograd's
    engine)."""
    frames = [f for f in frames if str(f.get("filename", "")).endswith(".py")]
    for frag, owner in OWNERS:
        for f in frames:
            name = str(f["filename"]).replace("\\", "/")
            if frag in name:
                return f"{owner}: {name.rsplit('/', 1)[-1]}:{f.get('line', '?')} {f.get('name', '')}"
    if not frames:
        return "(no Python frame)"
    f = frames[0]
    return f"other: {str(f['filename']).rsplit('/', 1)[-1]}:{f.get('line', '?')} {f.get('name', '')}"


def peak_live(events, base_bytes: int) -> tuple[int, dict[str, int]]:
    """(peak allocated bytes, {label: live bytes at the peak}) of one device's history `events` (dicts with
    'action', 'addr', 'size', 'frames') replayed from `base_bytes` allocated before the first event. Actions:
    'alloc' adds a block, 'free_completed' removes one (a block not allocated in the history was allocated
    before it: it comes off the pre-step bytes); other actions (segment maps, free requests) change nothing."""
    live: dict[int, tuple[int, str]] = {}
    before, total, peak, at_peak = base_bytes, base_bytes, base_bytes, {}
    for e in events:
        act, addr, size = e.get("action"), e.get("addr"), int(e.get("size", 0))
        if act == "alloc":
            live[addr] = (size, label(e.get("frames", ())))
            total += size
        elif act == "free_completed":
            if addr in live:
                total -= live.pop(addr)[0]
            else:
                before -= size
                total -= size
        else:
            continue
        if total > peak:
            peak = total
            at_peak = {"before the step": before}
            for s, lab in live.values():
                at_peak[lab] = at_peak.get(lab, 0) + s
    if not at_peak:
        at_peak = {"before the step": base_bytes}
    return peak, at_peak


def record(torch, device, fn) -> tuple[int, dict[str, int]]:
    """Run `fn` with the allocator's history recorded (Python frames) and return `peak_live` of it."""
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=1_000_000)
    try:
        fn()
        torch.cuda.synchronize(device)
        snap = torch.cuda.memory._snapshot(device)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    idx = torch.device(device).index or 0
    traces = snap.get("device_traces", [])
    return peak_live(traces[idx] if idx < len(traces) else [], base)
