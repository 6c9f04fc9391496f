"""An MoE layer's expert block on one GPU, op by op: what the Megatron MoE rows' 23-33 % under-prediction at
micro-batch 4-8 (docs/compute.md 'MoE layers in Megatron-Core') would need to be read off.

    python validation/gpu_moe_layer.py --out some/folder                  # about 3 minutes on an H100
    python validation/gpu_moe_layer.py --out some/folder --device cpu --tiny   # dry run (the tests run it)

Qwen3-30B-A3B's expert block (hidden 2048, expert FFN 768, top-8 of 128 experts, SwiGLU), balanced routing, the
routed copies of one rank (R = tokens x top-k, as an expert-parallel group of E / G ranks delivers them) split over
G local experts (m = R / G rows each), bf16, forward and backward, each op timed apart ('kernel': the summed device
time of its kernels, torch.profiler / CUPTI; 'queued': CUDA events around back-to-back calls, the host's issue
included; 'host': the issue time alone):
- router: the gating GEMM (tokens x 2048 @ 2048 x 128), softmax and top-k;
- permute: the routed copies gathered by expert (index_select), and the combine (index_add of the weighted copies);
- chunk_sort: the received copies re-sorted by local expert (split + cat, Megatron-Core's unfused sort_chunks);
- experts_loop: one GEMM per local expert and pass (fc1 gate+up, SwiGLU, fc2), as Transformer Engine's GroupedLinear
  launches them;
- experts_grouped: the same work as torch._grouped_mm (one kernel per pass) where the build has it.
Each row also gives the op's FLOPs and the bytes parasim counts, so validation/gpu_moe_layer_report.py (owed with the
data) can set the measured times beside the device's preset: the expert GEMMs at the GEMM table per call, the
permutes and sorts at the memory table.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))

from gpu_owed import Bench, _writer  # noqa: E402

H, F_E, E, K = 2048, 768, 128, 8


def points(tiny: bool) -> list[tuple[int, int]]:
    """(tokens per rank, local experts G): micro-batch 1, 4 and 8 of 4096 tokens; G 16 (EP 8), 8 (EP 16), 4 (EP 32)."""
    if tiny:
        return [(64, 4), (128, 2)]
    return [(t, g) for t in (4096, 16384, 32768) for g in (16, 8, 4)]


def _timed(B: Bench, row, name: str, tokens: int, g: int, fwd, bwd, flops: float, bytes_: float, n: int) -> None:
    """One op's forward and backward: kernel, queued and host time per call, kernels per call."""
    kf, nf = B.kernel_s(fwd, max(2, n // 4))
    kb, nb = B.kernel_s(bwd, max(2, n // 4)) if bwd else (float("nan"), float("nan"))
    row(op=name, tokens=tokens, local_experts=g, rows_per_expert=tokens * K // g, fwd_kernel_us=kf * 1e6,
        fwd_queued_us=B.queued_s(fwd, n) * 1e6, fwd_host_us=B.host_s(fwd, n) * 1e6, fwd_kernels=nf,
        bwd_kernel_us=kb * 1e6, bwd_queued_us=(B.queued_s(bwd, n) * 1e6) if bwd else float("nan"), bwd_kernels=nb,
        flops=flops, bytes=bytes_)


def stage(B: Bench, out: Path, tiny: bool, budget_s: float) -> None:
    torch, F = B.torch, B.torch.nn.functional
    dt = torch.bfloat16 if B.cuda else torch.float32
    e = 2 if B.cuda else 4
    h, fe = (64, 32) if tiny else (H, F_E)
    n = 5 if tiny else 20
    row, f = _writer(out, "moe_layer", ["op", "tokens", "local_experts", "rows_per_expert", "fwd_kernel_us",
                                        "fwd_queued_us", "fwd_host_us", "fwd_kernels", "bwd_kernel_us",
                                        "bwd_queued_us", "bwd_kernels", "flops", "bytes"])
    t_end = time.perf_counter() + budget_s
    grouped = hasattr(torch, "_grouped_mm") and B.cuda
    for tokens, g in points(tiny):
        if time.perf_counter() > t_end:
            break
        r = tokens * K
        m = r // g
        x = torch.randn(tokens, h, device=B.device, dtype=dt, requires_grad=True)
        wr = torch.randn(h, E, device=B.device, dtype=dt) * 0.02
        _timed(B, row, "router", tokens, g, lambda: torch.topk(F.softmax((x @ wr).float(), -1), K, -1), None,
               2.0 * tokens * h * E, e * tokens * (h + E) + 4 * 2 * tokens * E, n)
        idx = torch.randint(0, tokens, (r,), device=B.device)
        xp = x.detach().index_select(0, idx).requires_grad_()
        dy = torch.randn(r, h, device=B.device, dtype=dt)
        _timed(B, row, "permute", tokens, g, lambda: x.detach().index_select(0, idx),
               lambda: torch.zeros(tokens, h, device=B.device, dtype=dt).index_add_(0, idx, dy),
               0.0, e * (tokens + r) * h, n)
        sizes = [r // (g * 4)] * (g * 4)  # chunks by (source rank, local expert) of a 4-rank group
        order = [s * g + j for j in range(g) for s in range(4)]
        _timed(B, row, "chunk_sort", tokens, g, lambda: torch.cat([torch.split(xp.detach(), sizes)[i] for i in order]),
               None, 0.0, 2.0 * e * r * h, n)
        w1 = [torch.randn(h, 2 * fe, device=B.device, dtype=dt, requires_grad=True) for _ in range(g)]
        w2 = [torch.randn(fe, h, device=B.device, dtype=dt, requires_grad=True) for _ in range(g)]
        parts = xp.split(m)

        def loop():
            outs = []
            for j in range(g):
                gu = parts[j] @ w1[j]
                a, b = gu.chunk(2, -1)
                outs.append((F.silu(a) * b) @ w2[j])
            return torch.cat(outs)

        y = loop()
        flops = 2.0 * r * h * 3 * fe  # fc1 (gate + up) and fc2, forward
        _timed(B, row, "experts_loop", tokens, g, loop, lambda: torch.autograd.grad(y, [xp, *w1, *w2], dy,
                                                                                    retain_graph=True),
               flops, e * (r * h * 2 + g * 3 * h * fe + r * 3 * fe * 2), n)
        if grouped:
            offs = torch.arange(m, r + 1, m, device=B.device, dtype=torch.int32)
            g1, g2 = torch.stack(w1).detach(), torch.stack(w2).detach()
            xg = xp.detach()

            def grouped_fwd():
                gu = torch._grouped_mm(xg, g1, offs=offs)
                a, b = gu.chunk(2, -1)
                return torch._grouped_mm((F.silu(a) * b).contiguous(), g2, offs=offs)

            try:
                _timed(B, row, "experts_grouped", tokens, g, grouped_fwd, None, flops, 0.0, n)
            except RuntimeError as exc:  # (a device or build without the grouped kernel)
                print(f"experts_grouped skipped: {exc}", flush=True)
                grouped = False
    f.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (a dry run)")
    ap.add_argument("--budget-s", type=float, default=240.0, help="time budget of the point loop")
    a = ap.parse_args(argv)
    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    from simulator.calibrate.microbench import device_info

    info = device_info(device)
    (out / "moe_env.txt").write_text("".join(f"{k}: {v}\n" for k, v in info.items()))
    print(info, flush=True)
    stage(Bench(torch, device), out, a.tiny, a.budget_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
