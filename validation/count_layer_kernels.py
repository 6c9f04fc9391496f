"""Kernels one transformer layer launches, and the host time to issue one, measured on CPU.

    python validation/count_layer_kernels.py [--out validation/cpu/layer_kernels.csv]
    python validation/count_layer_kernels.py --model-ops validation/h100_owed/layers_cpu_ops.csv

For each layer implementation (the Hugging Face transformers LlamaDecoderLayer with SDPA and with eager
attention; the plain-torch layer of validation/train_step.py), one forward and one backward run under
torch.profiler on CPU; the count is the leaf aten ops that do work (views, reshapes, empty allocations
and no-op casts are not kernels). On a GPU each such op launches one kernel (a cuBLAS GEMM sometimes
two), so the counts stand for the eager kernels per layer of those stacks (stacks/*.toml).

Host time per kernel: the same layer at a tiny size (hidden 64, 8 tokens), forward + backward timed
without the profiler (median of 200 after 20 warm-up), divided by the kernel count: the framework's
dispatch per op (Python, autograd, the ATen dispatcher) on this machine's CPU. The CUDA driver's own
launch cost is not in it (no GPU here): the figure is a lower bound for a GPU host. `--model-ops` counts the
whole harness models the lent H100 timed (validation/h100_owed/layers.csv); their host-bound time over that
count is the host time per op on a GPU host (validation/gpu_layers_report.py), which the stacks now carry.
"""
from __future__ import annotations

import argparse
import csv
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))

NOT_KERNELS = {
    "aten::view", "aten::reshape", "aten::transpose", "aten::split", "aten::chunk", "aten::slice", "aten::expand",
    "aten::as_strided", "aten::t", "aten::detach", "aten::alias", "aten::unsqueeze", "aten::_unsafe_view",
    "aten::permute", "aten::split_with_sizes", "aten::select", "aten::squeeze", "aten::empty", "aten::empty_like",
    "aten::empty_strided", "aten::resolve_conj", "aten::resolve_neg", "aten::_reshape_alias", "aten::lift_fresh",
    "aten::result_type", "aten::contiguous", "aten::unbind", "aten::narrow", "aten::flatten", "aten::new_empty_strided",
    "aten::unflatten", "aten::expand_as", "aten::is_nonzero", "aten::item", "aten::_local_scalar_dense", "aten::to",
    "aten::_to_copy_view", "aten::new_empty", "aten::set_", "aten::_has_compatible_shallow_copy_type"}


def leaf_kernels(prof) -> list[str]:
    """Names of the leaf aten ops that do work (one GPU kernel each) in a profile."""
    out = []
    for e in prof.events():
        if not e.name.startswith("aten::") or e.name in NOT_KERNELS:
            continue
        if any(c.name.startswith("aten::") and c.name not in NOT_KERNELS for c in e.cpu_children):
            continue
        out.append(e.name)
    return out


def _hf_layer(torch, impl: str, h: int, heads: int, kv: int, ffn: int, s: int):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    cfg = LlamaConfig(hidden_size=h, num_attention_heads=heads, num_key_value_heads=kv, intermediate_size=ffn)
    cfg._attn_implementation = impl
    layer = LlamaDecoderLayer(cfg, 0).to(torch.bfloat16)
    pos = torch.arange(s)[None]
    x0 = torch.randn(1, s, h, dtype=torch.bfloat16)
    pe = LlamaRotaryEmbedding(cfg)(x0, pos)

    def run(x):
        return layer(x, position_embeddings=pe, attention_mask=None, position_ids=pos)

    return run


def _harness_layer(torch, h: int, heads: int, kv: int, ffn: int, s: int):
    from train_step import StepConfig, build_model

    cfg = StepConfig(layers=1, hidden=h, heads=heads, kv_heads=kv, ffn=ffn, vocab=32, seq=s, micro_batch=1,
                     recompute="none", dtype="bf16", attention="sdpa")
    return build_model(cfg, torch, "cpu", torch.bfloat16).layers[0]


def layers(torch, h, heads, kv, ffn, s):
    yield "hf-sdpa", "transformers LlamaDecoderLayer, attn_implementation=sdpa", _hf_layer(torch, "sdpa", h, heads, kv, ffn, s)
    yield "hf-eager", "transformers LlamaDecoderLayer, attn_implementation=eager", _hf_layer(torch, "eager", h, heads, kv, ffn, s)
    yield "plain-torch-sdpa", "validation/train_step.py layer (nn.RMSNorm, RoPE, SDPA, SwiGLU)", _harness_layer(torch, h, heads, kv, ffn, s)


def count(torch, run, h, s):
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(1, s, h, dtype=torch.bfloat16, requires_grad=True)
    y = run(x)
    (y[0] if isinstance(y, tuple) else y).float().sum().backward()
    with profile(activities=[ProfilerActivity.CPU]) as pf:
        y = run(x)
    loss = (y[0] if isinstance(y, tuple) else y).float().sum()
    with profile(activities=[ProfilerActivity.CPU]) as pb:
        loss.backward()
    return leaf_kernels(pf), leaf_kernels(pb)


def host_time(torch, run, h, s, reps=200, warm=20) -> float:
    x = torch.randn(1, s, h, dtype=torch.bfloat16, requires_grad=True)
    ts = []
    for i in range(warm + reps):
        t0 = time.perf_counter()
        y = run(x)
        (y[0] if isinstance(y, tuple) else y).float().sum().backward()
        if i >= warm:
            ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def harness_model_ops(torch, run_id: str) -> int:
    """Leaf aten ops (counted as above) of one forward + loss + backward of the whole harness model of `run_id`
    (validation/train_step.py: embedding, layers, final norm, head, fp32 cross-entropy) at a tiny width: the
    count does not depend on the width, only on the structure (layers, attention kernel, recompute)."""
    from torch.profiler import ProfilerActivity, profile

    from train_step import StepConfig, build_model

    p = run_id.split("-")
    cfg = StepConfig(layers=int(p[0][1:]), hidden=256, heads=8, kv_heads=2, ffn=704, vocab=1024, seq=64, micro_batch=1,
                     recompute=p[7], dtype="bf16", attention=p[9])
    model = build_model(cfg, torch, "cpu", torch.bfloat16)
    tok = torch.randint(0, cfg.vocab, (1, cfg.seq + 1))
    model(tok[:, :-1], tok[:, 1:]).backward()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        model(tok[:, :-1], tok[:, 1:]).backward()
    return len(leaf_kernels(prof))


def write_model_ops(out: str) -> None:
    """validation/h100_owed/layers_cpu_ops.csv: the CPU-counted ops of the models the GPU's layers stage timed
    (validation/h100_owed/layers.csv), which turn its host-bound time into a host time per op (gpu_layers_report)."""
    import torch

    torch.manual_seed(0)
    ids = sorted({r["run_id"] for r in csv.DictReader(open(ROOT / "validation" / "h100_owed" / "layers.csv"))})
    with open(out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["run_id", "cpu_ops_fwd_bwd", "torch"])
        w.writeheader()
        for rid in ids:
            w.writerow({"run_id": rid, "cpu_ops_fwd_bwd": harness_model_ops(torch, rid), "torch": torch.__version__})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "validation" / "cpu" / "layer_kernels.csv"))
    ap.add_argument("--model-ops", metavar="CSV", help="instead: write the harness models' op counts (layers stage)")
    a = ap.parse_args(argv)
    if a.model_ops:
        write_model_ops(a.model_ops)
        return 0
    import torch
    import transformers

    torch.manual_seed(0)
    torch.set_num_threads(1)
    rows = []
    for name, what, run in layers(torch, 256, 8, 2, 704, 64):
        f, b = count(torch, run, 256, 64)
        rows.append({"layer": name, "what": what, "forward_kernels": len(f), "backward_kernels": len(b),
                     "forward_ops": " ".join(f"{k.removeprefix('aten::')}:{v}" for k, v in Counter(f).most_common()),
                     "backward_ops": " ".join(f"{k.removeprefix('aten::')}:{v}" for k, v in Counter(b).most_common())})
    for row, (name, _, run) in zip(rows, layers(torch, 64, 4, 2, 176, 8)):
        t = host_time(torch, run, 64, 8)
        row["host_s_fwd_bwd_tiny"] = t
        row["host_us_per_kernel"] = round(t / (row["forward_kernels"] + row["backward_kernels"]) * 1e6, 2)
        row.update(torch=torch.__version__, transformers=transformers.__version__, python=platform.python_version(),
                   cpu=platform.processor() or platform.machine(), threads=1)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    for r in rows:
        print(r["layer"], r["forward_kernels"], r["backward_kernels"], r["host_us_per_kernel"], "us/kernel")
    return 0


if __name__ == "__main__":
    sys.exit(main())
