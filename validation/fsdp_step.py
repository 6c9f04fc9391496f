"""Multi-GPU harness for issue 23: FSDP2 training steps measured on N GPUs, and parasim's prediction of each.

    torchrun --nproc_per_node 8 validation/fsdp_step.py --out fsdp_steps.csv [--layers 16 --hidden 4096 ...]
    python validation/fsdp_step.py --predict fsdp_steps.csv [--hardware dgx-h100]

The measuring run builds the Llama-style decoder of validation/train_step.py (RMSNorm, RoPE, GQA, SwiGLU,
untied head, torch's fp32 cross-entropy), shards it the way torchtitan does (`fully_shard` on every
layer, then on the root; MixedPrecisionPolicy: bf16 parameters, `--reduce-dtype` gradients; parameters
resharded after forward unless `--no-reshard`), trains `--warmup` + `--steps` steps of `--accum` micro-batches
of `--micro-batch` sequences per GPU with fused AdamW, and writes one CSV row: the configuration, the world
size and node count, the median step time (CUDA-synchronised wall clock, barrier before each step), the
largest `max_memory_allocated` over the ranks, and the versions. No multi-GPU machine was lent so far: this
is ready for one (nodes: run it with torchrun's multi-node flags; `--backend gloo --device cpu` is the dry
run the tests use).

`--predict` maps each row to a parasim estimate with the torchtitan stack (FSDP2: unit = one layer,
prefetch 1, the row's reshard and reduce dtype, reduce every micro-batch without PP), ZeRO-3 over all
GPUs, and prints measured, predicted and error, so the per-unit FSDP model (cost/fsdp.py) is checked
against a real FSDP step as soon as one is measured.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation"))

FIELDS = ["layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq", "micro_batch", "accum", "reshard",
          "reduce_dtype", "world_size", "nodes", "device", "backend", "step_s", "peak_bytes", "torch", "nccl"]


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (("layers", 8), ("hidden", 2048), ("heads", 16), ("kv_heads", 8), ("ffn", 5632),
                          ("vocab", 32000), ("seq", 2048), ("micro_batch", 1), ("accum", 2), ("warmup", 2),
                          ("steps", 5)):
        ap.add_argument("--" + name.replace("_", "-"), type=int, default=default)
    ap.add_argument("--reshard", action=argparse.BooleanOptionalAction, default=True,
                    help="free parameters after forward (FSDP2 reshard_after_forward)")
    ap.add_argument("--reduce-dtype", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    ap.add_argument("--out", default="fsdp_steps.csv")
    ap.add_argument("--predict", metavar="CSV", help="predict the rows of CSV with parasim instead of measuring")
    ap.add_argument("--hardware", default="dgx-h100", help="parasim hardware preset for --predict")
    return ap.parse_args(argv)


def _model(args, torch, device):
    from train_step import StepConfig, build_model

    cfg = StepConfig(layers=args.layers, hidden=args.hidden, heads=args.heads, kv_heads=args.kv_heads,
                     ffn=args.ffn, vocab=args.vocab, seq=args.seq, micro_batch=args.micro_batch, recompute="none",
                     attention="sdpa", dtype="fp32")
    return cfg, build_model(cfg, torch, device, torch.float32)


def _shard(model, torch, args):
    """fully_shard on every layer, then the root (torchtitan's parallelize), with bf16 parameters on GPU."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = None
    if args.device == "cuda":
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                  reduce_dtype=torch.float32 if args.reduce_dtype == "fp32" else torch.bfloat16)
    kw = {"mp_policy": mp} if mp is not None else {}
    for layer in model.layers:
        fully_shard(layer, reshard_after_forward=args.reshard, **kw)
    fully_shard(model, **kw)
    return model


def _time_steps(model, opt, torch, dist, args, device) -> list[float]:
    """Wall time of each measured step (synchronised, after a barrier), `accum` micro-batches each."""
    g = torch.Generator(device="cpu").manual_seed(dist.get_rank())
    times = []
    for step in range(args.warmup + args.steps):
        tokens = torch.randint(0, args.vocab, (args.accum, args.micro_batch, args.seq), generator=g).to(device)
        dist.barrier()
        if args.device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for k in range(args.accum):
            model(tokens[k], tokens[k]).backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        if args.device == "cuda":
            torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    return times


def measure(args) -> dict | None:
    """One configuration on the ranks torchrun started; the row (rank 0) or None (other ranks)."""
    import os

    import torch
    import torch.distributed as dist

    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if args.device == "cuda" else torch.device("cpu")
    if args.device == "cuda":
        torch.cuda.set_device(device)
    _, model = _model(args, torch, device)
    model = _shard(model, torch, args)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=args.device == "cuda")
    times = _time_steps(model, opt, torch, dist, args, device)
    peak = torch.tensor([float(torch.cuda.max_memory_allocated(device)) if args.device == "cuda" else 0.0])
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    row = None
    if rank == 0:
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if args.device == "cuda" else ""
        row = {**{k: getattr(args, k) for k in FIELDS[:11]}, "world_size": world, "nodes": max(world // per_node, 1),
               "device": args.device, "backend": args.backend, "step_s": statistics.median(times),
               "peak_bytes": int(peak.item()), "torch": torch.__version__, "nccl": nccl}
    dist.barrier()  # no rank tears gloo down while another still reads from it (a reset peer fails the run)
    dist.destroy_process_group()
    return row


def write_row(row: dict, out: str) -> None:
    path = Path(out)
    new = not path.exists()
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        w.writerow(row)


def predict_row(row: dict, hardware: str) -> float:
    """parasim's step time of a measured row: the model inline (Hugging Face keys), torchtitan's stack with
    the row's reshard and reduce dtype, ZeRO-3 over the row's GPUs."""
    from simulator.estimate import estimate
    from simulator.spec.hardware import load_hardware
    from simulator.spec.hf import model_from_hf
    from simulator.spec.layout import Layout
    from simulator.spec.stack import load_stack
    from simulator.spec.training import Training

    i = {k: int(row[k]) for k in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq", "micro_batch",
                                  "accum", "world_size")}
    model = model_from_hf({"model_type": "llama", "hidden_size": i["hidden"], "num_hidden_layers": i["layers"],
                           "num_attention_heads": i["heads"], "num_key_value_heads": i["kv_heads"],
                           "intermediate_size": i["ffn"], "vocab_size": i["vocab"], "tie_word_embeddings": False},
                          name="fsdp-harness")
    stack = load_stack("torchtitan", fsdp_reshard_after_forward="yes" if str(row["reshard"]) == "True" else "no",
                       fsdp_reduce_dtype=row["reduce_dtype"])
    world = i["world_size"]
    training = Training(seq_length=i["seq"], global_batch_size=i["micro_batch"] * i["accum"] * world, stack=stack,
                        grad_dtype="fp32")
    layout = Layout(num_gpus=world, dp=world, zero=3, micro_batch_size=i["micro_batch"])
    return float(estimate(model, training, layout, load_hardware(hardware)).step_s)


def main(argv=None) -> int:
    args = parse(argv)
    if args.predict:
        rows = list(csv.DictReader(open(args.predict)))
        print(f"{'GPUs':>5} {'layers':>6} {'hidden':>6} {'measured s':>11} {'predicted s':>12} {'error':>8}")
        for r in rows:
            p = predict_row(r, args.hardware)
            m = float(r["step_s"])
            print(f"{r['world_size']:>5} {r['layers']:>6} {r['hidden']:>6} {m:>11.4f} {p:>12.4f} {100 * (p / m - 1):>+7.1f}%")
        return 0
    row = measure(args)
    if row is not None:
        write_row(row, args.out)
        print(f"wrote {args.out}: step {row['step_s']:.4f} s on {row['world_size']} GPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
