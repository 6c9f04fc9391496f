"""Eager decode steps of Llama-3-8B-shaped layers measured on the lent H100 (2026-11-27) against parasim's decode
model (cost/inference.py decode_layer: a roofline per op, plus the stack's launch bound when eager).

    python validation/gpu_decode_report.py

Data: `validation/h100_owed/decode.csv` (`validation/gpu_owed.py --stages decode`, README there): one decode step
of 4 layers (hidden 4096, 32 heads, 8 KV heads, head dim 128, FFN 14336, bf16; F.rms_norm, one fused QKV
F.linear, the new K/V written into a preallocated cache, F.scaled_dot_product_attention(enable_gqa=True) over T
cached tokens, O, fused gate/up F.linear, F.silu(g) * u, down; no RoPE) for batch b and KV length T, 20 calls:
`queued_s_per_layer` (CUDA events around back-to-back calls: max(host issue, device)), `kernel_s_per_layer`
(CUPTI-summed kernel time), `kernels_per_layer`; `launch.csv` (the host's issue time of bare eager ops).

parasim's side: `decode_layer` for one layer of llama3-8b on the shipped dgx-h100 with the torchtitan stack
(plain PyTorch modules: nn.RMSNorm (one fused kernel), fused QKV, SwiGLU as F.silu(w1 x) * w3 x, torch SDPA with
enable_gqa: the measured layer's code), at context c = T. The measured layer has no RoPE, so the model is
llama3-8b with a learned position table (`learned_position_embeddings` > 0 drops the layer's RoPE ops and
nothing else of a decode layer); the shipped llama3-8b (with RoPE) is shown too. Kernel time is compared with
`launch_bound=False` (CUDA-graph decode, parasim's default: no host in the step); queued time with
`launch_bound=True` (`--eager-decode`: the layer takes at least the stack's forward kernels x its host time per
kernel), with the stack's own kernel count, with this layer's ops counted the stack's way (on CPU,
`cpu_op_count`) and with the GPU kernels measured per layer.

The what-if column replaces dgx-h100's `[efficiency.memory]` curve by its highest value (the way decode_layer
already takes η_c as the highest value of `[efficiency.gemm]`), to show how much of the gap is the small-size end
of that curve: its points were timed one call at a time (validation/h100/calib_points.csv: copies of 1, 4 and
16 MiB tensors took 34.8, 25.2 and 25.5 µs, a flat floor over 16x the bytes), so they hold the host's issue of
each call, which decode with CUDA graphs does not pay and eager decode pays through the launch bound.
"""
from __future__ import annotations

import csv
import statistics
import sys
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent
DATA = ROOT / "h100_owed"
DATA2 = ROOT / "h100_owed2"  # the second lease
sys.path.insert(0, str(ROOT.parent))

STACK = "torchtitan"
HARDWARE = "dgx-h100"
MODEL = "llama3-8b"


def _read(name: str, data: Path = DATA) -> list[dict]:
    with open(data / name) as f:
        return list(csv.DictReader(f))


@lru_cache(maxsize=None)
def _specs(rope: bool = False, plateau: bool = False):
    """(model, hardware): llama3-8b (without RoPE unless `rope`: a learned position table of 8192 rows)
    and dgx-h100 (with `[efficiency.memory]` flat at its highest value when `plateau`)."""
    from simulator.spec.efficiency import EfficiencyCurve
    from simulator.spec.hardware import load_hardware
    from simulator.spec.load import load_model

    model = load_model(MODEL)
    if not rope:
        model = replace(model, learned_position_embeddings=8192)  # Llama 3 8B: max_position_embeddings 8192
    hw = load_hardware(HARDWARE)
    if plateau:
        c = hw.efficiency["memory"]
        flat = EfficiencyCurve(x=c.x, efficiency=(max(c.efficiency),) * len(c.x), x_unit=c.x_unit,
                               source="what-if: the highest value of " + HARDWARE + "'s [efficiency.memory]")
        hw = replace(hw, efficiency={**hw.efficiency, "memory": flat})
    return model, hw


def predicted_s(batch: int, kv_len: int, *, rope: bool = False, plateau: bool = False, eager: bool = False,
                kernels: int | None = None) -> float:
    """parasim's time of one decode layer (seconds): decode_layer on dgx-h100 with the torchtitan stack at context
    `kv_len`; `eager`: with the stack's launch bound, at `kernels` forward kernels per layer when given (else the
    stack's own count)."""
    from simulator.cost.inference import decode_layer
    from simulator.spec.stack import load_stack
    from simulator.spec.training import Training

    model, hw = _specs(rope, plateau)
    stack = load_stack(STACK)
    if kernels is not None:
        stack = replace(stack, kernels_per_layer=(int(kernels), stack.kernels_per_layer[1]))
    training = Training(seq_length=kv_len, global_batch_size=batch, stack=stack)
    cost = decode_layer(model, training, hw, moe=False, batch=batch, context=kv_len, launch_bound=eager)
    return float(cost.time_s)


def elementwise_s(batch: int) -> float:
    """parasim's time for one decode layer's memory-bound ops (norms, Q/K/V copies, residual adds, SwiGLU; no RoPE)
    at `batch` sequences: cost/inference.py's op list, each at memory_ops._memory_time (η_mem per kernel)."""
    from simulator.cost.inference import _elementwise_ops
    from simulator.cost.memory_ops import _memory_time
    from simulator.spec.stack import load_stack
    from simulator.spec.training import Training

    model, hw = _specs()
    one = Training(seq_length=1, global_batch_size=batch, stack=load_stack(STACK), dropout=False)
    return sum(float(_memory_time(op.forward_bytes, op.kernels, hw))
               for op in _elementwise_ops(model, one, moe=False, tp=1, ep=1, batch=batch))


def elementwise_bytes(batch: int) -> float:
    """Bytes the memory-bound ops of `elementwise_s` move."""
    from simulator.cost.inference import _elementwise_ops
    from simulator.spec.stack import load_stack
    from simulator.spec.training import Training

    model, _ = _specs()
    one = Training(seq_length=1, global_batch_size=batch, stack=load_stack(STACK), dropout=False)
    return sum(float(op.forward_bytes) for op in _elementwise_ops(model, one, moe=False, tp=1, ep=1, batch=batch))


def calibration_copy_floor() -> list[tuple[float, float]]:
    """(tensor bytes, seconds) of the dgx-h100 calibration's smallest copies (validation/h100/calib_points.csv, one
    call at a time): their time hardly grows with the bytes, the host's issue of each call."""
    with open(ROOT / "h100" / "calib_points.csv") as f:
        pts = [(float(r["size_bytes"]), float(r["time_s"])) for r in csv.DictReader(f)
               if r["kernel"] == "copy" and r["measurement"] == "memory"]
    return sorted(pts)[:3]


@lru_cache(maxsize=1)
def cpu_op_count() -> int | None:
    """Kernels one measured decode layer issues, counted as the stacks count `kernels_per_layer`: the leaf aten ops
    that do work (validation/count_layer_kernels.py leaf_kernels) of gpu_owed.py stage_decode's layer, run once at a
    tiny size on CPU under no_grad (the count does not depend on the size). None without torch."""
    try:
        import torch
        import torch.nn.functional as F
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return None
    sys.path.insert(0, str(ROOT))
    from count_layer_kernels import leaf_kernels

    h, H, kv, ffn, b, T = 64, 4, 2, 128, 2, 16
    d, dt = h // H, torch.bfloat16
    mk = lambda *s: torch.randn(*s, dtype=dt) * 0.02  # noqa: E731
    p = dict(wqkv=mk((H + 2 * kv) * d, h), wo=mk(h, h), wgu=mk(2 * ffn, h), wd=mk(h, ffn),
             n1=torch.ones(h, dtype=dt), n2=torch.ones(h, dtype=dt))
    kc, vc, x0 = mk(b, kv, T, d), mk(b, kv, T, d), mk(b, 1, h)

    from gpu_owed import decode_layer

    def layer(x):  # gpu_owed.py stage_decode's loop body, one layer
        return decode_layer(F, x, p, kc, vc, heads=H, kv_heads=kv)

    with torch.no_grad():
        layer(x0)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            layer(x0)
    return len(leaf_kernels(prof))


def _training_h() -> float:
    from simulator.spec.stack import load_stack

    return load_stack(STACK).host_s_per_kernel


def decode_cpu_ops() -> int:
    """The measured decode layer's CPU-counted ops under no_grad, as `cpu_op_count` counted them when the stacks'
    value was derived (validation/h100_owed/decode_cpu_ops.csv: no torch needed to read it)."""
    return int(_read("decode_cpu_ops.csv")[0]["cpu_ops_forward_no_grad"])


def lease_no_grad_host_s_per_op(data: Path = DATA) -> float:
    """Host seconds per dispatched op of an eager forward under no_grad on one lease's host (`data`: its folder):
    the median over the host-bound rows (queued > 1.15 x kernel: the GPU waited for the host) of the queued time
    per layer over the layer's CPU-counted ops."""
    return statistics.median(float(r["queued_s_per_layer"]) / decode_cpu_ops() for r in _read("decode.csv", data)
                             if host_bound({"queued_s": float(r["queued_s_per_layer"]),
                                            "kernel_s": float(r["kernel_s_per_layer"])}))


def no_grad_host_s_per_op() -> float:
    """What the stacks carry as `decode_host_us_per_kernel`: the faster of the two leases' hosts (10.3 and 9.9 µs),
    the rule the training figure and the GEMM tables combine two leases by (validation/gpu_layers_report.py
    host_s_per_op)."""
    return min(lease_no_grad_host_s_per_op(DATA), lease_no_grad_host_s_per_op(DATA2))


def stack_launch_floor_s() -> tuple[int, float]:
    """(forward kernels per layer, host seconds per kernel under no_grad) of the stack: its eager decode floor is
    their product (cost/inference.py decode_layer)."""
    from simulator.spec.stack import load_stack

    st = load_stack(STACK)
    return st.layer_kernels[0], st.decode_host_s_per_kernel or st.host_s_per_kernel


def rows() -> list[dict]:
    """One dict per measured row: the measurements and parasim's predictions (seconds per layer)."""
    out = []
    for r in _read("decode.csv"):
        b, t = int(r["batch"]), int(r["kv_len"])
        k = float(r["kernels_per_layer"])
        out.append({"batch": b, "kv_len": t, "kernel_s": float(r["kernel_s_per_layer"]),
                    "queued_s": float(r["queued_s_per_layer"]), "kernels": k,
                    "pred_s": predicted_s(b, t), "pred_rope_s": predicted_s(b, t, rope=True),
                    "plateau_s": predicted_s(b, t, plateau=True),
                    "eager_stack_s": predicted_s(b, t, eager=True),
                    "eager_measured_kernels_s": predicted_s(b, t, eager=True, kernels=round(k)),
                    "eager_cpu_ops_s": predicted_s(b, t, eager=True, kernels=decode_cpu_ops())})
    return out


def _err(pred: float, meas: float) -> float:
    """Signed relative error of a prediction, (pred - meas) / meas."""
    return pred / meas - 1.0


def kernel_lines(rs: list[dict]) -> list[str]:
    out = ["| batch | KV tokens | measured kernel µs | parasim µs (no RoPE) | error | parasim µs (llama3-8b, RoPE) "
           "| what-if: η_mem at its plateau, µs | error |", "|---|---|---|---|---|---|---|---|"]
    for r in rs:
        out.append(f"| {r['batch']} | {r['kv_len']} | {1e6 * r['kernel_s']:.1f} | {1e6 * r['pred_s']:.1f} "
                   f"| {100 * _err(r['pred_s'], r['kernel_s']):+.1f} % | {1e6 * r['pred_rope_s']:.1f} "
                   f"| {1e6 * r['plateau_s']:.1f} | {100 * _err(r['plateau_s'], r['kernel_s']):+.1f} % |")
    return out + [""]


def per_kernel(r: dict) -> str:
    """Host µs per kernel (queued / kernels) of a host-bound row, else a dash."""
    return f"{1e6 * r['queued_s'] / r['kernels']:.1f}" if host_bound(r) else "—"


def queued_lines(rs: list[dict]) -> list[str]:
    kf, h = stack_launch_floor_s()
    n = decode_cpu_ops()
    out = ["| batch | KV tokens | measured queued µs | measured kernel µs | GPU kernels per layer | host µs per GPU "
           f"kernel (host-bound rows) | parasim eager µs ({STACK}'s {kf} kernels x {1e6 * h:.1f} µs) | error "
           f"| parasim eager µs (this layer's {n} CPU-counted ops) | error | parasim eager µs (measured GPU kernels) "
           "| error |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rs:
        out.append(f"| {r['batch']} | {r['kv_len']} | {1e6 * r['queued_s']:.1f} | {1e6 * r['kernel_s']:.1f} "
                   f"| {r['kernels']:.0f} | {per_kernel(r)} | {1e6 * r['eager_stack_s']:.1f} "
                   f"| {100 * _err(r['eager_stack_s'], r['queued_s']):+.1f} % | {1e6 * r['eager_cpu_ops_s']:.1f} "
                   f"| {100 * _err(r['eager_cpu_ops_s'], r['queued_s']):+.1f} % "
                   f"| {1e6 * r['eager_measured_kernels_s']:.1f} "
                   f"| {100 * _err(r['eager_measured_kernels_s'], r['queued_s']):+.1f} % |")
    return out + [""]


def host_bound(r: dict) -> bool:
    """A row whose queued time exceeds its kernel time by more than 15 %: the host, not the GPU, set the pace."""
    return r["queued_s"] > 1.15 * r["kernel_s"]


def marginal_kv_bandwidth() -> list[tuple[int, float]]:
    """(batch, bytes/s) of the KV cache read from the two KV lengths at the same batch: the extra kernel time of
    T = 8192 over T = 1024 divided by the extra cache bytes, 2 (K, V) x 8 KV heads x 128 x 2 bytes x b x ΔT."""
    by = {(r["batch"], r["kv_len"]): r["kernel_s"] for r in rows()}
    out = []
    for b in sorted({k[0] for k in by}):
        if (b, 1024) in by and (b, 8192) in by:
            out.append((b, 2 * 8 * 128 * 2 * b * (8192 - 1024) / (by[(b, 8192)] - by[(b, 1024)])))
    return out


def findings(rs: list[dict]) -> list[str]:
    _, hw = _specs()
    peak = max(hw.efficiency["memory"].efficiency)
    e = [_err(r["pred_s"], r["kernel_s"]) for r in rs]
    ep = [_err(r["plateau_s"], r["kernel_s"]) for r in rs]
    small = [_err(r["pred_s"], r["kernel_s"]) for r in rs if r["batch"] == 1]
    floor = calibration_copy_floor()
    kvb = [v for b, v in marginal_kv_bandwidth() if b >= 8]
    kv_bytes = 2 * 8 * 128 * 2 * 128 * 8192  # the cache of b = 128, T = 8192, one layer
    eta_kv = float(hw.interp_efficiency("memory", kv_bytes))
    big = next(r for r in rs if (r["batch"], r["kv_len"]) == (128, 8192))
    hb = [r for r in rs if host_bound(r)]
    kf, h = stack_launch_floor_s()
    per_kernel = [r["queued_s"] / r["kernels"] for r in hb]
    e_stack = [_err(r["eager_stack_s"], r["queued_s"]) for r in hb]
    e_meas = [_err(r["eager_measured_kernels_s"], r["queued_s"]) for r in hb]
    e_cpu = [_err(r["eager_cpu_ops_s"], r["queued_s"]) for r in hb]
    n = decode_cpu_ops()
    per_op = [r["queued_s"] / n for r in hb]
    b1 = [r["queued_s"] for r in rs if r["batch"] == 1]
    return [
        f"- **Kernel time: {100 * min(e):+.1f} to {100 * max(e):+.1f} % (median {100 * statistics.median(e):+.1f} %), "
        f"with {HARDWARE}'s `[efficiency.memory]` fitted to the memory-bound kernels queued back to back on the same "
        "GPU (validation/h100_memory_table.py: one kernel's time t0 + bytes/B, t0 the device's own cost per kernel), "
        "which never saw these rows.** At batch 1 "
        f"({100 * min(small):+.1f} to {100 * max(small):+.1f} %) the layer is its 436 MB of weights read by four "
        f"GEMMs. From batch 8 the layer's memory-bound ops (norms, Q/K/V copies, residual adds, SwiGLU: "
        f"{elementwise_bytes(32) / 1e6:.0f} MB at batch 32, {elementwise_bytes(128) / 1e6:.0f} MB at batch 128) take "
        f"{1e6 * elementwise_s(32):.0f} and {1e6 * elementwise_s(128):.0f} µs. The table it replaced was timed one "
        "call at a time, and its points below ~30 MB held the host's issue of each call (calib_points.csv: copies "
        "of " + ", ".join(f"{x / 2**20:.0f}" for x, _ in floor) + " MiB took "
        + ", ".join(f"{1e6 * t:.1f}" for _, t in floor) + " µs): with it these rows were over-predicted by +7 to "
        "+41 % (median +17 %).",
        f"- **The per-kernel cost, as a what-if.** With `[efficiency.memory]` flat at its highest value "
        f"({peak:.3f}: no cost per kernel) the error is {100 * min(ep):+.0f} to {100 * max(ep):+.0f} % (median "
        f"|error| {100 * statistics.median(abs(x) for x in ep):.0f} %): it under-predicts at batch 1-8, where the "
        "layer's small kernels cost the device its own floor per kernel (1.2-3.4 µs on this GPU, launch.csv; the "
        "table's t0).",
        f"- **The KV cache streams faster than the memory curve says.** The extra cache bytes of T = 8192 over "
        f"T = 1024 at the same batch (b ≥ 8) take {min(kvb) / 1e12:.2f}-{max(kvb) / 1e12:.2f} TB/s, "
        f"{min(kvb) / hw.hbm_bytes_per_s:.2f}-{max(kvb) / hw.hbm_bytes_per_s:.2f} of the datasheet's "
        f"{hw.hbm_bytes_per_s / 1e12:.2f} TB/s; parasim reads a {kv_bytes / 1e9:.1f} GB cache at η_mem = "
        f"{eta_kv:.2f} ({eta_kv * hw.hbm_bytes_per_s / 1e12:.2f} TB/s: the curve averages copy, add, RMSNorm and "
        "SiLU). At b = 128, T = 8192 the cache read at the measured rate takes "
        f"{1e6 * kv_bytes * (1 / (eta_kv * hw.hbm_bytes_per_s) - 1 / min(kvb)):.0f} µs less than parasim's, "
        f"more than the what-if's whole excess ({1e6 * (big['plateau_s'] - big['kernel_s']):.0f} µs).",
        f"- **Queued (eager) time.** {len(hb)} of {len(rs)} rows are host-bound (queued > 1.15 x kernel), at "
        f"{1e6 * min(per_kernel):.0f}-{1e6 * max(per_kernel):.0f} µs of host time per GPU kernel. parasim's eager "
        f"decode floor is the stack's {kf} forward kernels (a training layer with RoPE, counted on CPU) x "
        f"{1e6 * h:.1f} µs, the stacks' host time per op under no_grad, taken from these rows (median of "
        f"{1e6 * min(per_op):.1f}-{1e6 * max(per_op):.1f} µs per op over this layer's {n} CPU-counted ops; the "
        f"training figure, with autograd, is {1e6 * _training_h():.1f} µs): {100 * min(e_stack):+.0f} to "
        f"{100 * max(e_stack):+.0f} % on those rows; with this layer's own {n} ops {100 * min(e_cpu):+.0f} to "
        f"{100 * max(e_cpu):+.0f} % (the fit's own data: not a held-out check). With the GPU's kernel "
        f"count the prediction is {100 * min(e_meas):+.0f} to {100 * max(e_meas):+.0f} %. The same host work "
        f"(batch 1) queued in {1e6 * min(b1):.0f} µs at one KV length and {1e6 * max(b1):.0f} µs at the other: "
        "with 20 calls on this VM the host-bound rows are uncertain by up to 2x.",
    ]


def section() -> list[str]:
    rs = rows()
    return (["## Decode steps: kernel and queued time against parasim's decode model", "",
             "Measured on the lent H100 on 2026-11-27 (`validation/h100_owed/decode.csv`, "
             "`validation/gpu_owed.py --stages decode`; README there): one decode step of 4 Llama-3-8B-shaped "
             "layers (RMSNorm, fused QKV, the new K/V copied into the cache, SDPA with enable_gqa over T cached "
             "tokens, O, fused gate/up, SiLU x up, down; bf16, no RoPE), 20 calls, per layer: CUPTI-summed kernel "
             "time and queued time (CUDA events around back-to-back calls). parasim: `decode_layer` "
             f"(simulator/cost/inference.py) of {MODEL} on the shipped `{HARDWARE}`, stack `{STACK}` (its layer "
             "code is the measured one's), context T, without RoPE (a learned position table) unless said; "
             "kernel time against CUDA-graph decode, queued time against `--eager-decode` (the stack's launch "
             "bound). Errors are (parasim − measured) / measured. `validation/gpu_decode_report.py`.", "",
             "### Kernel time", ""] + kernel_lines(rs)
            + ["### Queued time (eager decode)", ""] + queued_lines(rs) + findings(rs) + [""])


if __name__ == "__main__":
    print("\n".join(section()))
