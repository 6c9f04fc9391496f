"""Host synchronisations on a GPU: what one costs, and what flash-attn's `unpad_input` costs per call, timed
alone on an idle GPU (the parts of validation/gpu_unpad.py's per-layer overhead, measured apart).

    python validation/gpu_sync.py --out sync.csv                       # on a GPU (seconds)
    python validation/gpu_sync.py --out x.csv --device cpu --tiny      # dry run (the tests run it)

Rows (each the median over --repeats of --calls back-to-back calls, wall time by perf_counter, the GPU idle
at the start of every call):
- item: `x.sum().item()` on a one-element tensor (one tiny kernel, a device-to-host copy, a stream sync);
- synchronize: `torch.cuda.synchronize()` with nothing queued;
- add: `x.add_(1)` on a one-element tensor without a sync (the host's issue time of one kernel);
- nonzero: `torch.nonzero(mask)` on a (tokens,) all-true mask (it syncs to size its output);
- unpad_input: gpu_unpad.py's replica of bert_padding.unpad_input on (batch, seq, width) (sum, nonzero,
  max().item(), cumsum, pad, a row gather), then a synchronize;
- gather_only: its row gather alone (indices known), then a synchronize;
plus the CUDA kernels and memcpys one unpad_input call launches (torch.profiler), as `unpad_kernels`.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

FIELDS = ["what", "tokens", "width", "calls", "per_call_s", "note"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    import torch
    from gpu_unpad import _padding_functions
    cuda = args.device.startswith("cuda")
    unpad_input, _, index_first_axis = _padding_functions(torch)
    dt = torch.bfloat16 if cuda else torch.float32

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def per_call(fn, calls):
        got = []
        fn()
        sync()
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            sync()
            got.append((time.perf_counter() - t0) / calls)
        return statistics.median(got)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()

        def emit(**row):
            w.writerow(row)
            fh.flush()
            print(",".join(f"{row[k]:.4g}" if isinstance(row[k], float) else str(row[k]) for k in FIELDS),
                  flush=True)
        one = torch.ones(1, device=args.device)
        emit(what="item", tokens=1, width=1, calls=args.calls, per_call_s=per_call(lambda: one.sum().item(),
                                                                                     args.calls), note="")
        emit(what="synchronize", tokens=0, width=0, calls=args.calls, per_call_s=per_call(sync, args.calls), note="")
        emit(what="add", tokens=1, width=1, calls=args.calls, per_call_s=per_call(lambda: one.add_(1), args.calls),
             note="no sync")
        shapes = [(2, 32, 16)] if args.tiny else [(14, 2048, 2048), (32, 2048, 768), (6, 2048, 4096), (8, 2048, 8192)]
        for b, s, width in shapes:
            x = torch.randn(b, s, 3 * width, device=args.device, dtype=dt)[..., :width]  # a view of fused QKV
            mask = torch.ones(b, s, device=args.device, dtype=torch.bool)
            idx = torch.arange(b * s, device=args.device)
            calls = max(args.calls // 10, 5)
            emit(what="nonzero", tokens=b * s, width=width, calls=calls,
                 per_call_s=per_call(lambda: torch.nonzero(mask.flatten()), calls), note="")
            emit(what="unpad_input", tokens=b * s, width=width, calls=calls,
                 per_call_s=per_call(lambda: (unpad_input(x, mask), sync()), calls), note="then synchronize")
            emit(what="gather_only", tokens=b * s, width=width, calls=calls,
                 per_call_s=per_call(lambda: (index_first_axis(x.reshape(b * s, width), idx), sync()), calls),
                 note="then synchronize")
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=acts) as prof:
            unpad_input(x, mask)
            sync()
        names = [e.name for e in prof.events() if e.device_type.name == "CUDA"] if cuda else []
        ops = [e.name for e in prof.events() if e.name.startswith("aten::")]
        emit(what="unpad_kernels", tokens=b * s, width=width, calls=1, per_call_s=float(len(names)),
             note=f"{len(ops)} aten ops; kernels: " + " | ".join(n[:60] for n in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
