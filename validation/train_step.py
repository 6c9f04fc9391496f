"""Real-run harness: train a Llama-style model with torch for a few steps on one device and record
the step time and peak memory, one CSV row per configuration.

The model is built from the same shape fields parasim's ModelSpec uses (hidden, layers, heads,
kv-heads, ffn, vocab; SwiGLU MLP, RMSNorm, RoPE, no biases, untied embeddings), so
`compare_train_steps.py` can predict each row with parasim and print the error.

Training is "pure" in one dtype: parameters, gradients and AdamW states all in `--dtype` (no fp32
master copy), which parasim describes exactly as Training(precision=d, grad_dtype=d,
master_weights=False, optimizer_dtype=d). Recompute: none; full = torch.utils.checkpoint around every
layer; selective = checkpoint around the core attention only (Korthikanti et al. 2022 §5).
Attention kernel: sdpa (`scaled_dot_product_attention`, FlashAttention on recent GPUs) or eager
(explicit softmax(QKᵀ/√d)·V, which stores the s×s scores).

Measurements:
- step time: median over `--steps` timed steps after `--warmup` untimed ones (forward, backward,
  optimizer step); on CUDA each step is bracketed by CUDA events. The forward (loss included),
  backward and optimizer phases are timed by the same marks (`fwd_time_s`, `bwd_time_s`,
  `opt_time_s`, each a median, so they need not sum to the step's median exactly).
- `state_bytes` (parameters + gradients + optimizer states, from the tensors themselves) and
  `saved_bytes` (tensors saved for backward in one forward, counted with hooks as below) on every
  device, so a memory error can be attributed to states or activations.
- peak memory: on CUDA `torch.cuda.max_memory_allocated()` over the timed steps (reset before);
  on the CPU the sum of parameter, gradient and optimizer-state bytes plus the largest total of
  tensors saved for backward in one forward pass (counted with `torch.autograd.graph.saved_tensors_hooks`,
  each storage once, parameters excluded) — a measured lower bound of the peak, labelled as such.

Examples:
    python validation/train_step.py --layers 2 --hidden 256 --heads 4 --kv-heads 2 --ffn 512 --seq 128 --out runs.csv
    python validation/train_step.py --grid gpu --out validation/train_steps_h100.csv     # on a lent GPU
"""
from __future__ import annotations

import argparse
import csv
import math
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

FIELDS = ["run_id", "device", "gpu_type", "torch_version", "layers", "hidden", "heads", "kv_heads", "ffn_hidden",
          "vocab", "seq_len", "micro_batch", "recompute", "dtype", "attention", "warmup", "steps", "params",
          "step_time_s", "step_time_min_s", "fwd_time_s", "bwd_time_s", "opt_time_s", "peak_mem_bytes", "mem_basis",
          "state_bytes", "saved_bytes", "optimizer_impl", "grad_buffer", "status"]


@dataclass(frozen=True, kw_only=True)
class StepConfig:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int = 32000
    seq: int = 2048
    micro_batch: int = 1
    recompute: str = "none"
    dtype: str = "bf16"
    attention: str = "sdpa"

    @property
    def run_id(self) -> str:
        return (f"L{self.layers}-h{self.hidden}-a{self.heads}-kv{self.kv_heads}-f{self.ffn}-s{self.seq}-b{self.micro_batch}"
                f"-{self.recompute}-{self.dtype}-{self.attention}")


# ≥ 20 configurations for a lent GPU (README.md "GPU protocol"): hidden 1k-8k, layers, seq 1k-32k,
# micro-batch, recompute, GQA, both attention kernels. Sized for one 80 GB GPU.
GPU_GRID = [
    StepConfig(layers=8, hidden=1024, heads=16, kv_heads=16, ffn=2816, seq=1024, micro_batch=8),
    StepConfig(layers=8, hidden=1024, heads=16, kv_heads=4, ffn=2816, seq=2048, micro_batch=4),
    StepConfig(layers=8, hidden=1024, heads=16, kv_heads=4, ffn=2816, seq=8192, micro_batch=1),
    StepConfig(layers=8, hidden=1024, heads=16, kv_heads=4, ffn=2816, seq=32768, micro_batch=1, recompute="full"),
    StepConfig(layers=16, hidden=2048, heads=16, kv_heads=16, ffn=5632, seq=2048, micro_batch=2),
    StepConfig(layers=16, hidden=2048, heads=16, kv_heads=4, ffn=5632, seq=2048, micro_batch=4, recompute="selective"),
    StepConfig(layers=16, hidden=2048, heads=16, kv_heads=4, ffn=5632, seq=4096, micro_batch=2, recompute="full"),
    StepConfig(layers=16, hidden=2048, heads=16, kv_heads=4, ffn=5632, seq=2048, micro_batch=1, attention="eager"),
    StepConfig(layers=16, hidden=2048, heads=16, kv_heads=4, ffn=5632, seq=16384, micro_batch=1, recompute="full"),
    StepConfig(layers=8, hidden=4096, heads=32, kv_heads=8, ffn=14336, seq=2048, micro_batch=1),
    StepConfig(layers=8, hidden=4096, heads=32, kv_heads=8, ffn=14336, seq=4096, micro_batch=1),
    StepConfig(layers=8, hidden=4096, heads=32, kv_heads=8, ffn=14336, seq=8192, micro_batch=1, recompute="selective"),
    StepConfig(layers=8, hidden=4096, heads=32, kv_heads=8, ffn=14336, seq=8192, micro_batch=2, recompute="full"),
    StepConfig(layers=8, hidden=4096, heads=32, kv_heads=32, ffn=11008, seq=4096, micro_batch=1),
    StepConfig(layers=12, hidden=4096, heads=32, kv_heads=8, ffn=14336, seq=2048, micro_batch=2, recompute="full"),
    StepConfig(layers=4, hidden=4096, heads=32, kv_heads=8, ffn=14336, seq=1024, micro_batch=4, attention="eager"),
    StepConfig(layers=4, hidden=6144, heads=48, kv_heads=8, ffn=16384, seq=4096, micro_batch=1),
    StepConfig(layers=4, hidden=6144, heads=48, kv_heads=8, ffn=16384, seq=8192, micro_batch=1, recompute="full"),
    StepConfig(layers=2, hidden=8192, heads=64, kv_heads=8, ffn=28672, seq=4096, micro_batch=1),
    StepConfig(layers=2, hidden=8192, heads=64, kv_heads=8, ffn=28672, seq=8192, micro_batch=1, recompute="selective"),
    StepConfig(layers=4, hidden=8192, heads=64, kv_heads=8, ffn=28672, seq=2048, micro_batch=2, recompute="full"),
    StepConfig(layers=2, hidden=8192, heads=64, kv_heads=64, ffn=22016, seq=2048, micro_batch=1),
    StepConfig(layers=4, hidden=2048, heads=16, kv_heads=4, ffn=5632, seq=32768, micro_batch=1, recompute="selective"),
    StepConfig(layers=8, hidden=2048, heads=16, kv_heads=2, ffn=5632, seq=8192, micro_batch=2, dtype="fp16"),
]

# Held out: shapes of the GPU grid's kind but none of its configurations (other vocabularies, widths,
# depths, micro-batches), measured in the same session and kept apart from any change the GPU grid
# motivates, so the error after such a change is reported on data it did not shape.
HOLDOUT_GRID = [
    StepConfig(layers=4, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256, seq=4096, micro_batch=1),
    StepConfig(layers=4, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256, seq=8192, micro_batch=1,
               recompute="selective"),
    StepConfig(layers=6, hidden=3072, heads=24, kv_heads=8, ffn=8192, vocab=128256, seq=2048, micro_batch=2),
    StepConfig(layers=8, hidden=2560, heads=20, kv_heads=20, ffn=6912, vocab=50304, seq=2048, micro_batch=4),
    StepConfig(layers=8, hidden=2560, heads=20, kv_heads=4, ffn=6912, vocab=50304, seq=4096, micro_batch=2,
               recompute="full"),
    StepConfig(layers=12, hidden=1536, heads=12, kv_heads=4, ffn=4096, vocab=50304, seq=8192, micro_batch=1),
    StepConfig(layers=24, hidden=1024, heads=16, kv_heads=8, ffn=2816, seq=4096, micro_batch=2, recompute="selective"),
    StepConfig(layers=3, hidden=5120, heads=40, kv_heads=8, ffn=13824, seq=4096, micro_batch=2),
    StepConfig(layers=3, hidden=5120, heads=40, kv_heads=40, ffn=13824, seq=2048, micro_batch=2, attention="eager"),
    StepConfig(layers=2, hidden=7168, heads=56, kv_heads=8, ffn=18432, seq=8192, micro_batch=1, recompute="full"),
    StepConfig(layers=6, hidden=4096, heads=32, kv_heads=8, ffn=14336, seq=16384, micro_batch=1, recompute="selective"),
    StepConfig(layers=4, hidden=3072, heads=24, kv_heads=8, ffn=8192, seq=2048, micro_batch=8),
    StepConfig(layers=8, hidden=2048, heads=16, kv_heads=4, ffn=5632, seq=4096, micro_batch=2, dtype="fp16"),
    StepConfig(layers=16, hidden=1024, heads=8, kv_heads=8, ffn=4096, seq=1024, micro_batch=16, recompute="full"),
    StepConfig(layers=4, hidden=4096, heads=32, kv_heads=8, ffn=14336, seq=2048, micro_batch=1, attention="eager"),
    StepConfig(layers=2, hidden=6144, heads=48, kv_heads=8, ffn=16384, vocab=65536, seq=4096, micro_batch=2,
               recompute="selective"),
]

CPU_GRID = [
    StepConfig(layers=2, hidden=128, heads=4, kv_heads=2, ffn=352, vocab=1000, seq=64, micro_batch=2, dtype="fp32"),
    StepConfig(layers=2, hidden=128, heads=4, kv_heads=2, ffn=352, vocab=1000, seq=64, micro_batch=2, dtype="fp32",
               recompute="full"),
    StepConfig(layers=2, hidden=128, heads=4, kv_heads=4, ffn=352, vocab=1000, seq=128, micro_batch=1, dtype="fp32",
               attention="eager"),
]


def training_step(model, cfg: StepConfig, torch, device, *, optimizer_impl: str = "fused",
                  grad_buffer: str = "persistent"):
    """(step, optimizer) of the harness protocol for `model` (plain or wrapped): AdamW in `optimizer_impl`
    ("fused" or "foreach"), a fixed batch of random tokens, and `step()` = zero_grad (gradients kept or set
    to None, `grad_buffer`), forward with the loss, backward, optimizer step."""
    opt = torch.optim.AdamW(list(model.parameters()), lr=1e-4, **{optimizer_impl: True})
    g = torch.Generator(device="cpu").manual_seed(1)
    tokens = torch.randint(0, cfg.vocab, (cfg.micro_batch, cfg.seq + 1), generator=g).to(device)
    inp, lab = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def step():
        opt.zero_grad(set_to_none=grad_buffer == "set-to-none")
        model(inp, lab).backward()
        opt.step()

    return step, opt


def build_model(cfg: StepConfig, torch, device, dtype):
    """A Llama-style decoder (pre-norm RMSNorm, RoPE, GQA attention, SwiGLU MLP, untied head)."""
    nn = torch.nn
    F = torch.nn.functional
    d = cfg.hidden // cfg.heads
    if cfg.hidden % cfg.heads or cfg.heads % cfg.kv_heads:
        raise ValueError(f"hidden {cfg.hidden} must divide by heads {cfg.heads}, heads by kv_heads {cfg.kv_heads}")
    from torch.utils.checkpoint import checkpoint

    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = torch.outer(torch.arange(cfg.seq, dtype=torch.float32), inv)
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(device=device, dtype=dtype)
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(device=device, dtype=dtype)

    def rope(x):
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def core_attention(q, k, v):
        if cfg.attention == "sdpa":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=cfg.kv_heads != cfg.heads)
        rep = cfg.heads // cfg.kv_heads
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        mask = torch.ones(cfg.seq, cfg.seq, dtype=torch.bool, device=q.device).triu(1)
        return torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2 = nn.RMSNorm(cfg.hidden, eps=1e-5), nn.RMSNorm(cfg.hidden, eps=1e-5)
            self.qkv = nn.Linear(cfg.hidden, (cfg.heads + 2 * cfg.kv_heads) * d, bias=False)
            self.o = nn.Linear(cfg.heads * d, cfg.hidden, bias=False)
            self.gate_up = nn.Linear(cfg.hidden, 2 * cfg.ffn, bias=False)
            self.down = nn.Linear(cfg.ffn, cfg.hidden, bias=False)

        def forward(self, x):
            b, s, _ = x.shape
            qkv = self.qkv(self.n1(x)).view(b, s, cfg.heads + 2 * cfg.kv_heads, d).transpose(1, 2)
            q, k, v = qkv.split([cfg.heads, cfg.kv_heads, cfg.kv_heads], dim=1)
            q, k = rope(q), rope(k)
            if cfg.recompute == "selective":
                a = checkpoint(core_attention, q, k, v, use_reentrant=True)
            else:
                a = core_attention(q, k, v)
            x = x + self.o(a.transpose(1, 2).reshape(b, s, cfg.heads * d))
            g, u = self.gate_up(self.n2(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(g) * u)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(cfg.vocab, cfg.hidden)
            self.layers = nn.ModuleList(Layer() for _ in range(cfg.layers))
            self.norm = nn.RMSNorm(cfg.hidden, eps=1e-5)
            self.head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)

        def forward(self, tokens, labels):
            x = self.emb(tokens)
            for layer in self.layers:
                x = checkpoint(layer, x, use_reentrant=True) if cfg.recompute == "full" else layer(x)
            logits = self.head(self.norm(x))
            return F.cross_entropy(logits.float().view(-1, cfg.vocab), labels.view(-1))

    torch.manual_seed(0)
    with torch.device(device):  # initialise on the device: a CPU init of billions of weights takes seconds
        return Model().to(dtype=dtype)


class SavedBytes:
    """Counts the bytes of tensors autograd saves for backward (each storage once, parameters excluded)."""

    def __init__(self, torch, params):
        self.torch = torch
        self.param_ptrs = {p.untyped_storage().data_ptr() for p in params}
        self.seen: dict[int, int] = {}

    def pack(self, t):
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in self.param_ptrs and ptr not in self.seen:
            self.seen[ptr] = st.nbytes()
        return t

    @staticmethod
    def unpack(t):
        return t

    @property
    def total_bytes(self) -> int:
        return sum(self.seen.values())


OPTIMIZER_IMPLS = ("fused", "foreach")
GRAD_BUFFERS = ("persistent", "set-to-none")


def run_config(cfg: StepConfig, *, device: str = "cpu", warmup: int = 2, steps: int = 5, optimizer_impl: str = "fused",
               grad_buffer: str = "persistent") -> dict:
    """Train `cfg` for warmup + steps optimizer steps; return one CSV row (dict of FIELDS).

    optimizer_impl: torch AdamW's `fused=True` (one kernel per step, what Megatron-LM's FusedAdam and
    torchtitan's default do) or `foreach=True` (torch's default on CUDA: one kernel per elementwise op).
    grad_buffer: 'persistent' zeroes gradients in place (they stay allocated, like Megatron-LM's
    contiguous grad buffer and DDP's bucket views, which is what parasim's memory model assumes) or
    'set-to-none' frees them between steps (torch's `zero_grad()` default, so they are allocated
    during backward while activations are being freed).
    """
    if optimizer_impl not in OPTIMIZER_IMPLS:
        raise ValueError(f"optimizer_impl must be one of {', '.join(OPTIMIZER_IMPLS)}, got {optimizer_impl!r}")
    if grad_buffer not in GRAD_BUFFERS:
        raise ValueError(f"grad_buffer must be one of {', '.join(GRAD_BUFFERS)}, got {grad_buffer!r}")
    import torch

    td = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[cfg.dtype]
    cuda = device.startswith("cuda")
    row = {"run_id": cfg.run_id, "device": device, "torch_version": torch.__version__, "layers": cfg.layers,
           "hidden": cfg.hidden, "heads": cfg.heads, "kv_heads": cfg.kv_heads, "ffn_hidden": cfg.ffn, "vocab": cfg.vocab,
           "seq_len": cfg.seq, "micro_batch": cfg.micro_batch, "recompute": cfg.recompute, "dtype": cfg.dtype,
           "attention": cfg.attention, "warmup": warmup, "steps": steps, "optimizer_impl": optimizer_impl,
           "grad_buffer": grad_buffer,
           "gpu_type": torch.cuda.get_device_name(torch.device(device)) if cuda else f"CPU {platform.machine()}"}
    try:
        model = build_model(cfg, torch, device, td)
        params = list(model.parameters())
        row["params"] = sum(p.numel() for p in params)
        opt = torch.optim.AdamW(params, lr=1e-4, **{optimizer_impl: True})
        g = torch.Generator(device="cpu").manual_seed(1)
        tokens = torch.randint(0, cfg.vocab, (cfg.micro_batch, cfg.seq + 1), generator=g).to(device)
        inp, lab = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        saved = SavedBytes(torch, params)

        def mark():
            if cuda:
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                return e
            return time.perf_counter()

        def step(count_saved=False):
            """One optimizer step; returns the (start, after forward, after backward, end) marks."""
            opt.zero_grad(set_to_none=grad_buffer == "set-to-none")
            t0 = mark()
            if count_saved:
                with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
                    loss = model(inp, lab)
            else:
                loss = model(inp, lab)
            t1 = mark()
            loss.backward()
            t2 = mark()
            opt.step()
            t3 = mark()
            return t0, t1, t2, t3

        def elapsed_s(a, b):
            return a.elapsed_time(b) * 1e-3 if cuda else b - a

        for _ in range(warmup):
            step()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(device)
        times, phases = [], []
        for i in range(steps):
            t0, t1, t2, t3 = step()
            if cuda:
                t3.synchronize()
            times.append(elapsed_s(t0, t3))
            phases.append((elapsed_s(t0, t1), elapsed_s(t1, t2), elapsed_s(t2, t3)))
        if cuda:
            row["peak_mem_bytes"] = int(torch.cuda.max_memory_allocated(device))
            row["mem_basis"] = "torch.cuda.max_memory_allocated over the timed steps"
        step(count_saved=True)  # one more step, untimed, to count saved tensors
        state = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values() if torch.is_tensor(t))
        pbytes = sum(p.numel() * p.element_size() for p in params)
        row["state_bytes"] = int(2 * pbytes + state)  # params + grads + optimizer states
        row["saved_bytes"] = int(saved.total_bytes)
        if not cuda:
            row["peak_mem_bytes"] = row["state_bytes"] + row["saved_bytes"]
            row["mem_basis"] = "CPU lower bound: params + grads + optimizer states + saved-for-backward tensors (hooks)"
        row["step_time_s"] = statistics.median(times)
        row["step_time_min_s"] = min(times)
        for k, name in enumerate(("fwd_time_s", "bwd_time_s", "opt_time_s")):
            row[name] = statistics.median(p[k] for p in phases)
        row["status"] = "ok"
    except torch.OutOfMemoryError as exc:  # a config that does not fit is a result, not a crash
        row["status"] = "oom: " + str(exc).splitlines()[0][:120]
    finally:
        if cuda:
            torch.cuda.empty_cache()
    return {k: row.get(k, "") for k in FIELDS}


def write_rows(rows, out: str | Path) -> None:
    p = Path(out)
    new = not p.exists()
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        w.writerows(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", choices=["gpu", "gpu-holdout", "cpu"], help="run the built-in configuration grid instead of one config")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--kv-heads", type=int)
    ap.add_argument("--ffn", type=int)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--recompute", choices=["none", "selective", "full"], default="none")
    ap.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default=None, help="default bf16 on GPU, fp32 on CPU")
    ap.add_argument("--attention", choices=["sdpa", "eager"], default="sdpa")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--optimizer-impl", choices=OPTIMIZER_IMPLS, default="fused", help="torch AdamW kernel (run_config)")
    ap.add_argument("--grads", choices=GRAD_BUFFERS, default="persistent", help="gradient buffer between steps (run_config)")
    ap.add_argument("--out", required=True, help="CSV to append rows to")
    a = ap.parse_args(argv)
    try:
        import torch
    except ModuleNotFoundError:
        print("error: train_step needs torch: pip install torch", file=sys.stderr)
        return 2
    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    if a.grid:
        cfgs = {"gpu": GPU_GRID, "gpu-holdout": HOLDOUT_GRID, "cpu": CPU_GRID}[a.grid]
    else:
        missing = [n for n in ("layers", "hidden", "heads", "ffn") if getattr(a, n) is None]
        if missing:
            print(f"error: --{missing[0]} is required without --grid", file=sys.stderr)
            return 2
        cfgs = [StepConfig(layers=a.layers, hidden=a.hidden, heads=a.heads, kv_heads=a.kv_heads or a.heads, ffn=a.ffn,
                           vocab=a.vocab, seq=a.seq, micro_batch=a.micro_batch, recompute=a.recompute,
                           dtype=a.dtype or ("bf16" if device.startswith("cuda") else "fp32"), attention=a.attention)]
    for cfg in cfgs:
        row = run_config(cfg, device=device, warmup=a.warmup, steps=a.steps, optimizer_impl=a.optimizer_impl,
                         grad_buffer=a.grads)
        write_rows([row], a.out)
        print(f"{row['run_id']}: {row['status']} step {row['step_time_s']} s peak {row['peak_mem_bytes']} B", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
