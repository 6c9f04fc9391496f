"""Which kernels flash-attn's unpadding adds to an MPT block, and how long each takes on the GPU: the blocks of
validation/gpu_unpad.py (attention direct, through the bert_padding replica, and the replica without host
synchronisations) run forward + backward under torch.profiler, every kernel read from the Chrome trace
(profile_step.device_kernels), summed by name per block stack and step.

    python validation/gpu_unpad_kernels.py --out unpad_kernels.csv                 # on a GPU (seconds)
    python validation/gpu_unpad_kernels.py --out x.csv --device cpu --tiny          # dry run (the tests run it)

Rows: model, variant, kernel (name, cut to 120 characters), calls per step, device seconds per step (the median of
--steps profiled steps), and the step's GPU busy time; the kernels the unpadding adds are those of the unpad
variant that the direct one does not run, or runs more of.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

FIELDS = ["model", "d_model", "seq", "micro_batch", "variant", "kernel", "calls", "device_s", "step_busy_s"]
CONFIGS = [("MPT-1b", 2048, 16, 2048, 14), ("MPT-7b", 4096, 32, 2048, 6)]
TINY = [("tiny", 64, 4, 32, 2)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args(argv)
    import torch
    from torch.profiler import ProfilerActivity, profile

    import gpu_unpad
    from profile_step import device_kernels

    cuda = args.device.startswith("cuda")
    dtype = torch.bfloat16 if cuda else torch.float32
    padding = gpu_unpad._padding_functions(torch)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        for model, d, heads, s, mb in (TINY if args.tiny else CONFIGS):
            for variant in ("direct", "unpad", "nosync"):
                step = gpu_unpad.block_stack_step(torch, variant, d=d, heads=heads, seq=s, micro_batch=mb,
                                                  layers=args.layers, padding=padding, device=args.device,
                                                  dtype=dtype)
                step()
                per = defaultdict(list)
                busy = []
                for _ in range(args.steps):
                    acts = [ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
                    with profile(activities=acts) as prof:
                        step()
                        if cuda:
                            torch.cuda.synchronize()
                    ks = device_kernels(prof) if cuda else []
                    agg = defaultdict(lambda: [0, 0.0])
                    for name, _, dur in ks:
                        agg[name[:120]][0] += 1
                        agg[name[:120]][1] += dur * 1e-6
                    for name, (n, t) in agg.items():
                        per[name].append((n, t))
                    busy.append(sum(t for _, t in agg.values()))
                for name, vals in sorted(per.items(), key=lambda kv: -statistics.median(t for _, t in kv[1])):
                    w.writerow(dict(model=model, d_model=d, seq=s, micro_batch=mb, variant=variant, kernel=name,
                                    calls=vals[0][0], device_s=statistics.median(t for _, t in vals),
                                    step_busy_s=statistics.median(busy)))
                fh.flush()
                print(model, variant, "busy", f"{statistics.median(busy) * 1e3:.3f} ms" if busy else "-",
                      "kernels", len(per), flush=True)
                step = None
                if cuda:
                    torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
