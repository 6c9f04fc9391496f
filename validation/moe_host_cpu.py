"""The host time Megatron-Core's MoE block takes to issue one kernel, measured on CPU against a plain torch layer.

    python validation/moe_host_cpu.py --megatron PATH [--megatron PATH ...] [--out validation/cpu/moe_host.csv]

Each PATH is a Megatron-LM source tree (e.g. `git archive core_v0.15.0 megatron/core` of NVIDIA/Megatron-LM); it is
not a dependency of parasim and is only read here.

What runs: Megatron-Core's own `MoELayer` (TopKRouter with the global aux loss, the all-to-all token dispatcher,
the local spec's SequentialMLP experts) on two CPU processes joined by gloo (expert parallelism 2, so the
dispatcher takes its EP > 1 path: split sizes, the count all-gather, the all-to-alls, the chunk sorts) and on one
(`--ep`, default both), tiny (hidden 64, 64 tokens), forward and backward timed without the profiler (median of
`--reps` after 10 warm-up steps), for G = 2, 4, 8, 16 local experts, `--rounds` times. A CPU-only torch cannot
create CUDA streams and events, so no-op stand-ins replace them (`install_cpu_standins`), Transformer Engine's
router GEMM is absent (its torch fallback runs, as Megatron-Core does without TE) and the device-to-host copies of
the split sizes take their GPU path (a copy to the CPU and `.numpy()`). The time a process spends inside a
collective (waiting for its peer through gloo) is left out: on a GPU an NCCL call returns once enqueued.

What is counted: the leaf aten ops that do work (count_layer_kernels.leaf_kernels: one GPU kernel each), forward
and backward, per G. Both the time and the count grow linearly with G (the experts' loop); the intercepts
a (time) and c (kernels) of the fits over G are the block besides the experts' loop: router, dispatcher and
combine. Their ratio a / c is the host time per kernel of that code; divided by the host time per kernel of
validation/train_step.py's plain layer timed in the same processes right after (count_layer_kernels' layer, whose
GPU-host time per op the stacks carry: 14.8 us), it is how much heavier Megatron-Core's MoE code is to issue
than a plain layer, per kernel: the megatron stack's `moe_host_us_per_kernel` is that ratio at EP 2 times its
`host_us_per_kernel` (spec/stack.py; cost/launch.py), the median over the trees and rounds (`megatron_ratio`).

For contrast, transformers' Qwen3MoeDecoderLayer (validation/count_moe_kernels.py, grouped_mm experts) is timed and
counted the same way in one process (rows `code` = transformers ...): plain torch code, whose host time per kernel is
a plain layer's, as the hf and fsdp stacks take it.

`--busy-peer` runs a busy loop in another process throughout (rows `peer` = busy): on a machine of two cores it shows
how much a loaded CPU slows each code, the check that the EP 2 rows' rate (two processes load both cores) is the
EP > 1 path's code and not the load (validation/cpu/moe_host_busy_peer.csv: the block and the plain layer slow
alike). The stack takes the EP 2 rows; EP 1 (one process) skips the dispatcher's split sizes, count all-gather and
all-to-all bookkeeping.

`--device cuda --ep 1` runs the same layer on a GPU (NCCL, no stand-ins, one process per GPU) and times what its
host takes to issue the forward and backward (the GPU idles at these sizes; the collectives are not left out, an NCCL
call returning once enqueued): the GPU host's time per kernel of this code, the direct check of the CPU-derived rate
(carry the Megatron-LM tree to the device, e.g. as an ignored folder; the plain layer's GPU-host time per op is the
stacks' 14.8 us, validation/gpu_layers_report.py). Compare it with `--device cpu --ep 1` on the same tree.

The fused paths a GPU run takes (--moe-router-fusion, --moe-permute-fusion, TE's GroupedLinear) need Transformer
Engine and a GPU and are not timed: their kernel counts are the stack's (read from the code), charged at the rate
measured on the unfused code.
"""
from __future__ import annotations

import argparse
import csv
import itertools
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))

LOCAL_EXPERTS = (2, 4, 8, 16)
FIELDS = ["code", "device", "ep", "round", "local_experts", "forward_s", "backward_s", "forward_kernels",
          "backward_kernels", "forward_collectives", "backward_collectives", "reps", "plain_us_per_kernel", "torch",
          "python", "cpu", "peer"]
_COMM = {"s": 0.0, "n": 0}


def install_cpu_standins() -> None:
    """No-op CUDA streams and events for a CPU-only torch, and timers around the collectives (before Megatron-Core
    is imported: its mappings bind torch.distributed's functions at import)."""
    import contextlib

    import torch
    import torch.distributed as dist

    class Event:
        def synchronize(self):
            pass

        def record(self, *a, **k):
            pass

        def wait(self, *a, **k):
            pass

    class Stream:
        def __init__(self, *a, **k):
            pass

        def wait_stream(self, other):
            pass

        def record_event(self, *a, **k):
            return Event()

        def wait_event(self, e):
            pass

        def synchronize(self):
            pass

    current = Stream()
    torch.cuda.Stream = Stream
    torch.cuda.Event = lambda *a, **k: Event()
    torch.cuda.current_stream = lambda *a, **k: current
    torch.cuda.stream = lambda s: contextlib.nullcontext()
    torch.cuda.current_device = lambda: torch.device("cpu")
    torch.cuda.synchronize = lambda *a, **k: None
    torch.Tensor.record_stream = lambda self, s: None

    def timed(f):
        def g(*a, **k):
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                _COMM["s"] += time.perf_counter() - t0
                _COMM["n"] += 1
        return g

    for name in ("all_gather_into_tensor", "_all_gather_base", "reduce_scatter_tensor", "all_reduce", "all_gather",
                 "reduce_scatter", "all_to_all_single"):
        if hasattr(dist, name):
            setattr(dist, name, timed(getattr(dist, name)))


def _gpu_path_copies(moe_utils, token_dispatcher) -> None:
    """The dispatcher's split sizes take their GPU path (moved to the CPU, as numpy where asked)."""
    def to_cpu(tensor, as_numpy=False, record_stream=False):
        import torch
        if torch.is_tensor(tensor):
            tensor = tensor.to(torch.device("cpu"), non_blocking=True)
            if as_numpy:
                tensor = tensor.numpy()
        return tensor

    moe_utils.maybe_move_tensor_to_cpu = to_cpu
    token_dispatcher.maybe_move_tensor_to_cpu = to_cpu
    if not hasattr(moe_utils, "te_general_gemm"):  # (core_v0.15.0 leaves it undefined without Transformer Engine)
        moe_utils.te_general_gemm = None


def _worker(rank: int, world: int, port: int, megatron: str, local: int, reps: int, out, device: str = "cpu") -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    sys.path.insert(0, megatron)
    cpu = device == "cpu"
    if cpu:
        install_cpu_standins()
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    from count_layer_kernels import leaf_kernels

    torch.set_num_threads(1)
    torch.manual_seed(rank)
    if not cpu:
        torch.cuda.set_device(rank)
    dist.init_process_group("gloo" if cpu else "nccl", rank=rank, world_size=world)
    from megatron.core import package_info, parallel_state
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.moe import moe_utils, token_dispatcher
    from megatron.core.transformer.moe.moe_layer import MoELayer
    from megatron.core.transformer.transformer_config import TransformerConfig

    if cpu:
        _gpu_path_copies(moe_utils, token_dispatcher)
    elif not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
    parallel_state.initialize_model_parallel(1, 1, expert_model_parallel_size=world)
    E = local * world
    cfg = TransformerConfig(num_layers=1, hidden_size=64, num_attention_heads=4, num_moe_experts=E, moe_router_topk=2,
                            moe_ffn_hidden_size=32, ffn_hidden_size=128, moe_token_dispatcher_type="alltoall",
                            use_cpu_initialization=True, add_bias_linear=False, gated_linear_unit=True,
                            activation_func=F.silu, moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=1e-3,
                            expert_model_parallel_size=world, moe_router_dtype="fp32", params_dtype=torch.float32)
    layer = MoELayer(cfg, get_gpt_layer_local_spec(num_experts=E, moe_grouped_gemm=False).submodules.mlp.submodules)
    layer = layer.to(device)
    x = torch.randn(64, 1, 64, device=device, requires_grad=True)
    sync = (lambda: None) if cpu else torch.cuda.synchronize
    for _ in range(10):
        layer(x)[0].sum().backward()
    fw, bw, cf, cb = [], [], [], []
    for _ in range(reps):
        sync()
        dist.barrier()
        c0, n0 = _COMM["s"], _COMM["n"]
        t0 = time.perf_counter()
        y = layer(x)[0]
        t1 = time.perf_counter()
        c1, n1 = _COMM["s"], _COMM["n"]
        loss = y.sum()
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        waited = (c1 - c0, _COMM["s"] - c1) if cpu else (0.0, 0.0)  # (an NCCL call returns once enqueued)
        fw.append(t1 - t0 - waited[0])
        bw.append(t3 - t2 - waited[1])
        cf.append(n1 - n0)
        cb.append(_COMM["n"] - n1)
    sync()
    dist.barrier()
    with profile(activities=[ProfilerActivity.CPU]) as pf:
        y = layer(x)[0]
    loss = y.sum()
    with profile(activities=[ProfilerActivity.CPU]) as pb:
        loss.backward()
    dist.barrier()
    plain = plain_us_per_kernel(reps)  # timed in every process at once: the CPU as loaded as for the block's steps
    if rank == 0:
        out.put({"code": f"megatron-core {package_info.__version__}", "device": device, "local_experts": local,
                 "forward_s": statistics.median(fw), "backward_s": statistics.median(bw),
                 "forward_kernels": len(leaf_kernels(pf)), "backward_kernels": len(leaf_kernels(pb)),
                 "forward_collectives": statistics.median(cf), "backward_collectives": statistics.median(cb),
                 "reps": reps, "plain_us_per_kernel": round(plain, 3), "torch": torch.__version__})
    dist.barrier()
    dist.destroy_process_group()


def fwd_bwd_s(torch, run, x, reps: int) -> tuple[float, float]:
    """Median forward and backward host time of a layer `run` on `x` (10 warm-up steps), the loss between them not
    timed: the protocol of the MoE block's steps (`_worker`) for the one-process layers."""
    fw, bw = [], []
    for i in range(10 + reps):
        t0 = time.perf_counter()
        y = run(x)
        t1 = time.perf_counter()
        loss = (y[0] if isinstance(y, tuple) else y).float().sum()
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        if i >= 10:
            fw.append(t1 - t0)
            bw.append(t3 - t2)
    return statistics.median(fw), statistics.median(bw)


def plain_us_per_kernel(reps: int) -> float:
    """validation/train_step.py's plain layer on this CPU: host time per kernel (count_layer_kernels' layer, counted
    at its width, timed tiny as the MoE block is)."""
    import torch

    import count_layer_kernels as ck

    torch.set_num_threads(1)
    torch.manual_seed(0)
    f, b = ck.count(torch, ck._harness_layer(torch, 256, 8, 2, 704, 64), 256, 64)
    x = torch.randn(1, 8, 64, dtype=torch.bfloat16, requires_grad=True)
    return sum(fwd_bwd_s(torch, ck._harness_layer(torch, 64, 4, 2, 176, 8), x, 4 * reps)) / (len(f) + len(b)) * 1e6


def fit(rows) -> dict:
    """Least-squares lines over the local experts G of one code's rows: intercepts (the block besides the experts'
    loop) and slopes, and the block's host time per kernel against the plain layer's."""
    import numpy as np

    g = np.array([float(r["local_experts"]) for r in rows])
    out = {}
    for key in ("forward_s", "backward_s", "forward_kernels", "backward_kernels"):
        slope, icept = np.polyfit(g, np.array([float(r[key]) for r in rows]), 1)
        out[key] = (float(icept), float(slope))
    a = out["forward_s"][0] + out["backward_s"][0]
    c = out["forward_kernels"][0] + out["backward_kernels"][0]
    plain = statistics.median(float(r["plain_us_per_kernel"]) for r in rows)
    out["block_us_per_kernel"] = a / c * 1e6
    out["ratio_to_plain"] = a / c * 1e6 / plain
    return out


def groups(rows, *, ep=None, device="cpu") -> dict:
    """{(code, ep, round): rows} of the Megatron-Core rows (of one expert-parallel size where `ep` is given)."""
    out: dict = {}
    for r in rows:
        if (r["code"].startswith("megatron-core") and r["device"] == device and (ep is None or int(r["ep"]) == ep)
                and r.get("peer", "idle") == "idle"):
            out.setdefault((r["code"], int(r["ep"]), int(r["round"])), []).append(r)
    return out


def megatron_ratio(rows, ep: int = 2) -> float:
    """The median over the Megatron-Core trees and rounds of their MoE block's host time per kernel over the plain
    layer's, at expert parallelism `ep` (2: the dispatcher's EP > 1 path, which MoE runs take: what the stack
    carries)."""
    return statistics.median(fit(g)["ratio_to_plain"] for g in groups(rows, ep=ep).values())


def hf_rows(plain: float, reps: int) -> list[dict]:
    """transformers' Qwen3MoeDecoderLayer (grouped_mm experts) timed and counted as the plain layer is."""
    import torch
    import transformers

    import count_layer_kernels as ck
    import count_moe_kernels as cm

    torch.set_num_threads(1)
    out = []
    for e in (4, 16):
        run = cm._layer(torch, "grouped_mm", e, 64, 16)
        f, b = ck.count(torch, run, 64, 16)
        fw, bw = fwd_bwd_s(torch, run, torch.randn(1, 16, 64, dtype=torch.bfloat16, requires_grad=True), reps)
        out.append({"code": f"transformers {transformers.__version__} Qwen3MoeDecoderLayer", "device": "cpu",
                    "ep": 1, "round": 0, "local_experts": e,
                    "forward_s": fw, "backward_s": bw,
                    "forward_kernels": len(f), "backward_kernels": len(b), "forward_collectives": 0,
                    "backward_collectives": 0, "reps": reps, "plain_us_per_kernel": round(plain, 3),
                    "torch": torch.__version__})
    return out


def read(path=ROOT / "validation" / "cpu" / "moe_host.csv") -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--megatron", required=True, action="append", help="a Megatron-LM source tree (megatron/core)")
    ap.add_argument("--out", default=str(ROOT / "validation" / "cpu" / "moe_host.csv"))
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cuda: the same layer on GPUs (NCCL), timed as the host issues it")
    ap.add_argument("--ep", type=int, action="append", help="expert-parallel processes, repeatable (default 1 and 2; "
                    "one GPU each with --device cuda)")
    ap.add_argument("--rounds", type=int, default=1, help="repeat every measurement (rows keep their round)")
    ap.add_argument("--busy-peer", action="store_true",
                    help="a busy loop on another process throughout: how much a loaded CPU slows each code")
    a = ap.parse_args(argv)
    import torch.multiprocessing as mp

    rows = []
    port = 29650
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if a.busy_peer else None
    for rnd, ep, tree, g in itertools.product(range(a.rounds), a.ep or [1, 2], a.megatron, LOCAL_EXPERTS):
        q = mp.get_context("spawn").SimpleQueue()
        port += 1
        mp.spawn(_worker, args=(ep, port, str(Path(tree).resolve()), g, a.reps, q, a.device), nprocs=ep, join=True)
        rows.append(q.get() | {"ep": ep, "round": rnd})
        r = rows[-1]
        print(f"{r['code']} ({a.device}, EP {ep}, round {rnd}) G={g}: forward {r['forward_s'] * 1e3:.3f} ms / "
              f"{r['forward_kernels']} kernels, backward {r['backward_s'] * 1e3:.3f} ms / {r['backward_kernels']} "
              f"kernels", flush=True)
    rows += hf_rows(plain_us_per_kernel(a.reps), a.reps) if a.device == "cpu" else []
    if busy is not None:
        busy.kill()
    for r in rows:
        r["peer"] = "busy" if busy is not None else "idle"
    for r in rows:
        r.update(python=platform.python_version(), cpu=platform.processor() or platform.machine())
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    for (code, ep, rnd), mine in groups(rows, device=a.device).items():
        f = fit(mine)
        print(f"{code} EP {ep} round {rnd}: the MoE block besides the experts: forward "
              f"{f['forward_s'][0] * 1e3:.3f} ms / "
              f"{f['forward_kernels'][0]:.1f} kernels, backward {f['backward_s'][0] * 1e3:.3f} ms / "
              f"{f['backward_kernels'][0]:.1f} kernels: {f['block_us_per_kernel']:.2f} us per kernel, "
              f"{f['ratio_to_plain']:.2f}x the plain layer's {f['block_us_per_kernel'] / f['ratio_to_plain']:.2f} us "
              f"in the same processes")
    for r in rows:
        if not r["code"].startswith("megatron-core"):
            us = (r["forward_s"] + r["backward_s"]) / (r["forward_kernels"] + r["backward_kernels"]) * 1e6
            print(f"{r['code']} ({r['local_experts']} experts): {us:.2f} us per kernel, "
                  f"{us / float(r['plain_us_per_kernel']):.2f}x the plain layer's")
    for ep in sorted(set(a.ep or [1, 2])) if a.device == "cpu" else ():
        print(f"Megatron-Core's MoE block over the plain layer, EP {ep}, median over the trees and rounds: "
              f"{megatron_ratio(rows, ep):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
