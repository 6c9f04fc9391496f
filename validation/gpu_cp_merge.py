"""torch's ring context-parallel attention on one GPU, as one rank of a fake process group: the device time of its
kernels beside the attention kernels (the merge, the gradient accumulation and the K/V copies that
simulator/cost/cp_merge.py models as the "torch" implementation), per layer pass.

    python validation/gpu_cp_merge.py --out cp_merge.csv                   # on a GPU (about a minute)
    python validation/gpu_cp_merge.py --out x.csv --device cpu --tiny       # dry run (the tests run it)

The rank is the last of c (`_templated_ring_attention` and its backward from torch.distributed.tensor.
experimental's context_parallel, with torch's defaults: fp32 merge, all-gather rotation); the fake process
group's collectives move nothing, so every recorded kernel is compute. Queries and keys arrive as transposed views
of [b, s/c, heads, d] tensors, as torchtitan passes them. Per (c, heads, kv heads, queries per rank): the device
time of every kernel in one forward and one backward, read from the profiler's Chrome trace
(profile_step.device_kernels), split into the attention kernels (flash/cudnn/fmha/attention in the name) and the
rest; median of --repeats profiled runs after a warm-up. The rest is what cost/cp_merge.py predicts.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

FIELDS = ["cp", "heads", "kv_heads", "queries", "head_dim", "backend", "fwd_other_s", "bwd_other_s",
          "fwd_attention_s", "bwd_attention_s", "fwd_other_kernels", "bwd_other_kernels", "status"]
SHAPES = [(2, 32, 8, 4096), (2, 32, 32, 4096), (8, 32, 8, 4096), (2, 32, 8, 32768), (8, 32, 8, 32768),
          (4, 16, 2, 16384)]
TINY = [(2, 4, 2, 64), (4, 4, 4, 64)]
ATTENTION = ("flash", "cudnn", "fmha", "attention", "sdpa")


def _split(kernels) -> tuple[float, float, int]:
    att = sum(d for n, _, d in kernels if any(a in n.lower() for a in ATTENTION))
    other = [(n, d) for n, _, d in kernels if not any(a in n.lower() for a in ATTENTION)]
    return att * 1e-6, sum(d for _, d in other) * 1e-6, len(other)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--head-dim", type=int, default=128)
    args = ap.parse_args(argv)
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor.experimental._context_parallel import _attention as ring
    from torch.profiler import ProfilerActivity, profile
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from profile_step import device_kernels

    cuda = args.device.startswith("cuda")
    d = 16 if args.tiny else args.head_dim
    if cuda:
        fwd_op = torch.ops.aten._scaled_dot_product_flash_attention.default
        bwd_op = torch.ops.aten._scaled_dot_product_flash_attention_backward.default
    else:
        fwd_op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
        bwd_op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        print(",".join(FIELDS), flush=True)
        for c, h, hkv, n in (TINY if args.tiny else SHAPES):
            row = dict(cp=c, heads=h, kv_heads=hkv, queries=n, head_dim=d, backend="flash")
            try:
                if dist.is_initialized():
                    dist.destroy_process_group()
                dist.init_process_group("fake", store=FakeStore(), rank=c - 1, world_size=c)
                g = dist.group.WORLD
                dt = torch.bfloat16
                q, k, v = (torch.randn(1, n, heads, d, device=args.device, dtype=dt).transpose(1, 2)
                           for heads in (h, hkv, hkv))
                if hkv < h and cuda:  # the flash backend takes as many K/V heads as query heads: repeated (as
                    # torchtitan's repeat_kv did), transposed views again; the row records the heads it ran with
                    k, v = (t.repeat_interleave(h // hkv, dim=1).transpose(1, 2).contiguous().transpose(1, 2)
                            for t in (k, v))
                    row["kv_heads"] = h
                kw = dict(dropout_p=0.0) if cuda else {}

                def fwd():
                    return ring._templated_ring_attention(g, 2, fwd_op, q, k, v, is_causal=True, **kw)

                def bwd(out, lse, rest):
                    extra = dict(cum_seq_q=rest[0], cum_seq_k=rest[1], max_q=rest[2], max_k=rest[3],
                                 philox_seed=rest[4], philox_offset=rest[5]) if cuda else {}
                    return ring._templated_ring_attention_backward(g, 2, bwd_op, grad, "grad_out", q, k, v, out,
                                                                   lse, True, dropout_p=0.0, **extra)
                out, lse, *rest = fwd()
                grad = torch.randn_like(out)
                bwd(out, lse, rest)
                got = {"f": [], "b": []}
                acts = [ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
                for _ in range(args.repeats):
                    for key, fn in (("f", fwd), ("b", lambda: bwd(out, lse, rest))):
                        with profile(activities=acts) as prof:
                            fn()
                            if cuda:
                                torch.cuda.synchronize()
                        got[key].append(_split(device_kernels(prof)) if cuda else (0.0, 0.0, 0))
                for key, name in (("f", "fwd"), ("b", "bwd")):
                    att, other, kernels = (statistics.median(x[i] for x in got[key]) for i in range(3))
                    row.update({f"{name}_attention_s": att, f"{name}_other_s": other, f"{name}_other_kernels": kernels})
                row["status"] = "ok"
            except Exception as exc:  # a shape or backend that cannot run here: a row saying why
                row["status"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
            w.writerow(row)
            fh.flush()
            print(",".join(f"{row.get(k, ''):.4g}" if isinstance(row.get(k), float) else str(row.get(k, ''))
                           for k in FIELDS), flush=True)
            if cuda:
                torch.cuda.empty_cache()
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
