"""What llm-foundry's FlashAttention path costs beyond the attention kernel: MPT blocks timed forward + backward
with attention called directly against attention called through flash-attn's `bert_padding` unpad / pad,
as llm-foundry 5e85bd6 (`llmfoundry/models/layers/attention.py flash_attn_fn`) calls it in every layer.

    python validation/gpu_unpad.py --out unpad.csv                       # on a GPU (under a minute)
    python validation/gpu_unpad.py --out x.csv --device cpu --tiny        # dry run (the tests run it)

Per layer and micro-batch, `flash_attn_fn` runs `bert_padding.unpad_input` on the query, the key and the value
(each: mask sum, `nonzero` and `max().item()` - two host synchronisations - cumsum, pad, and a row gather,
`index_first_axis`, whose backward is a zero-fill and a scatter) and `pad_input` on the output (zero-fill and
row scatter; backward a gather). With no padding (the benchmarks' data) this is pure overhead: copies of
Q, K, V, O and host syncs that drain the launch queue. This script replicates those functions (flash-attn
2.3.6's bert_padding, the version llm-foundry pinned) in plain torch and times the block both ways, so the
overhead is measured, not estimated. The attention kernel is torch SDPA's flash (FlashAttention-2) in both
variants (on the unpadded (tokens, heads, d) tensor viewed back as (b, heads, s, d): the same kernel the
varlen call runs when every sequence is full).

Rows: model, d_model, heads, seq, micro_batch, layers, variant (direct / unpad / nosync: the unpad path's copies
with the indices known ahead, no host synchronisation - what the copies alone cost), step_s (the median wall time
of one forward + backward over `layers` blocks, synchronised), per_layer_s, and overhead_pct (over
direct, on the unpad and nosync rows; direct_s the faster of its two alternating runs).
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path

FIELDS = ["model", "d_model", "heads", "seq", "micro_batch", "layers", "checkpoint", "variant", "step_s",
          "per_layer_s", "overhead_pct"]
# (model, d_model, heads, seq, micro batch): llm-foundry's benchmark rows (validation/llmfoundry_h100.csv).
CONFIGS = [("MPT-1b", 2048, 16, 2048, 14), ("MPT-125m", 768, 12, 2048, 32), ("MPT-7b", 4096, 32, 2048, 6),
           ("MPT-1b", 2048, 16, 8192, 3), ("MPT-350m", 1024, 16, 512, 64), ("MPT-3b", 2560, 20, 2048, 10),
           ("MPT-13b", 5120, 40, 2048, 16), ("MPT-30b", 7168, 56, 2048, 8), ("MPT-760m", 1536, 12, 2048, 24)]
TINY = [("tiny", 64, 4, 32, 2)]


def _padding_functions(torch):
    class IndexFirstAxis(torch.autograd.Function):  # bert_padding.index_first_axis
        @staticmethod
        def forward(ctx, x, indices):
            ctx.save_for_backward(indices)
            ctx.first_axis_dim, other = x.shape[0], x.shape[1:]
            flat = x.reshape(x.shape[0], -1)
            idx = indices[:, None].expand(-1, flat.shape[1])  # einops repeat "z -> z d": an expanded view
            return torch.gather(flat, 0, idx).reshape(-1, *other)

        @staticmethod
        def backward(ctx, grad):
            (indices,) = ctx.saved_tensors
            other = grad.shape[1:]
            g = grad.reshape(grad.shape[0], -1)
            out = torch.zeros(ctx.first_axis_dim, g.shape[1], device=g.device, dtype=g.dtype)
            out.scatter_(0, indices[:, None].expand(-1, g.shape[1]), g)
            return out.reshape(ctx.first_axis_dim, *other), None

    class IndexPutFirstAxis(torch.autograd.Function):  # bert_padding.index_put_first_axis
        @staticmethod
        def forward(ctx, values, indices, first_axis_dim):
            ctx.save_for_backward(indices)
            out = torch.zeros(first_axis_dim, *values.shape[1:], device=values.device, dtype=values.dtype)
            out[indices] = values
            return out

        @staticmethod
        def backward(ctx, grad):
            (indices,) = ctx.saved_tensors
            return grad[indices], None, None

    def unpad_input(x, mask):
        seqlens = mask.sum(dim=-1, dtype=torch.int32)
        indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
        max_seqlen = seqlens.max().item()
        cu = torch.nn.functional.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
        return IndexFirstAxis.apply(x.reshape(-1, *x.shape[2:]), indices), indices, cu, max_seqlen

    def pad_input(x, indices, batch, seqlen):
        return IndexPutFirstAxis.apply(x, indices, batch * seqlen).reshape(batch, seqlen, *x.shape[1:])
    return unpad_input, pad_input, IndexFirstAxis.apply


def _block(torch, d, heads, variant, padding, device, dtype):
    unpad_input, pad_input, index_first_axis = padding
    nosync_indices = {}
    nn, F = torch.nn, torch.nn.functional
    ln1, ln2 = nn.LayerNorm(d, device=device, dtype=dtype), nn.LayerNorm(d, device=device, dtype=dtype)
    wqkv, out = nn.Linear(d, 3 * d, bias=False, device=device, dtype=dtype), nn.Linear(d, d, bias=False,
                                                                                         device=device, dtype=dtype)
    up, down = nn.Linear(d, 4 * d, bias=False, device=device, dtype=dtype), nn.Linear(4 * d, d, bias=False,
                                                                                        device=device, dtype=dtype)
    params = [p for m in (ln1, ln2, wqkv, out, up, down) for p in m.parameters()]

    def attention(q, k, v, mask):  # q, k, v: (b, s, h*dh) views of the fused QKV output
        b, s = q.shape[:2]
        if variant == "direct":
            q4, k4, v4 = (t.reshape(b, s, heads, -1).transpose(1, 2) for t in (q, k, v))
            o = F.scaled_dot_product_attention(q4, k4, v4, is_causal=True)
            return o.transpose(1, 2).reshape(b, s, d)
        if variant == "nosync":  # the same copies with the indices known ahead: no host synchronisation
            idx = nosync_indices.setdefault(b * s, torch.arange(b * s, device=q.device))
            qu, ku, vu = (index_first_axis(t.reshape(b * s, d), idx) for t in (q, k, v))
        else:
            qu, idx, _, _ = unpad_input(q, mask)
            ku, _, _, _ = unpad_input(k, mask)
            vu, _, _, _ = unpad_input(v, mask)
        q4, k4, v4 = (t.reshape(b, s, heads, -1).transpose(1, 2) for t in (qu, ku, vu))
        o = F.scaled_dot_product_attention(q4, k4, v4, is_causal=True).transpose(1, 2).reshape(b * s, d)
        return pad_input(o, idx, b, s)

    def forward(x, mask):
        q, k, v = wqkv(ln1(x)).split(d, dim=-1)
        x = x + out(attention(q, k, v, mask))
        return x + down(F.gelu(up(ln2(x)), approximate="tanh"))
    return forward, params


def block_stack_step(torch, variant: str, *, d, heads, seq, micro_batch, layers, padding, device, dtype,
                     checkpoint: bool = False):
    """One forward + backward of `layers` MPT blocks (fresh, seeded weights) on a [micro_batch, seq, d] input with
    attention `variant` (direct / unpad / nosync), gradients dropped after: a closure to time or profile."""
    from torch.utils.checkpoint import checkpoint as ckpt

    torch.manual_seed(0)
    blocks = [_block(torch, d, heads, variant, padding, device, dtype) for _ in range(layers)]
    x0 = torch.randn(micro_batch, seq, d, device=device, dtype=dtype, requires_grad=True)
    mask = torch.ones(micro_batch, seq, device=device, dtype=torch.bool)

    def step():
        x = x0
        for f, _ in blocks:
            x = ckpt(f, x, mask, use_reentrant=False) if checkpoint else f(x, mask)
        x.float().pow(2).mean().backward()
        for _, ps in blocks:
            for p in ps:
                p.grad = None
        x0.grad = None
    return step


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--checkpoint", action="store_true",
                    help="each block under activation checkpointing (its forward runs again in the backward, "
                         "as FSDP activation_checkpointing does for llm-foundry's large models)")
    ap.add_argument("--models", default="", help="comma-separated model names of CONFIGS to run (default: all)")
    args = ap.parse_args(argv)
    import torch
    cuda = args.device.startswith("cuda")
    dtype = torch.bfloat16 if cuda else torch.float32
    padding = _padding_functions(torch)
    configs = TINY if args.tiny else [c for c in CONFIGS if not args.models or c[0] in args.models.split(",")]
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)

    def sync():
        if cuda:
            torch.cuda.synchronize()
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        print(",".join(FIELDS), flush=True)
        for model, d, heads, s, mb in configs:
            direct_s = None
            for variant in ("direct", "unpad", "nosync", "direct", "unpad", "nosync")[: 3 if args.tiny else 6]:
                step = block_stack_step(torch, variant, d=d, heads=heads, seq=s, micro_batch=mb,
                                        layers=args.layers, padding=padding, device=args.device, dtype=dtype,
                                        checkpoint=args.checkpoint)
                for _ in range(2):
                    step()
                got = []
                for _ in range(args.steps):
                    sync()
                    t0 = time.perf_counter()
                    step()
                    sync()
                    got.append(time.perf_counter() - t0)
                t = statistics.median(got)
                if variant == "direct":
                    direct_s = t if direct_s is None else min(direct_s, t)
                row = dict(model=model, d_model=d, heads=heads, seq=s, micro_batch=mb, layers=args.layers,
                           checkpoint=args.checkpoint,
                           variant=variant, step_s=t, per_layer_s=t / args.layers,
                           overhead_pct=100.0 * (t / direct_s - 1) if variant != "direct" else 0.0)
                w.writerow(row)
                fh.flush()
                print(",".join(f"{row[k]:.4g}" if isinstance(row[k], float) else str(row[k]) for k in FIELDS),
                      flush=True)
                step = None  # free the blocks before the next variant
                if cuda:
                    torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
