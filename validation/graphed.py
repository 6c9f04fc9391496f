"""The kernels' own time back to back in an eager stack, from the CUDA-graph measurements of the lent H100 and H200.

`validation/gpu_graphed.py` timed each kernel two ways in one run (README in validation/h100_graphed/ and
validation/h200_graphed/): captured back to back in one CUDA graph (`graph_s`: the GPU's time per kernel with no
host issue in the loop) and queued eagerly between two CUDA events (`queued_s`). Below ~10 us of GPU time the
queued calls measure the host's issue (8-12 us per call on these hosts), which parasim charges separately as an
eager stack's launch bound (cost/launch.py); above it both measure the GPU, and queued is the longer by a gap
per kernel that a graph does not pay (an eager launch into a stream against a graph node). So the time a kernel
costs an eager step whose host runs ahead is

    t_eager = graph_s + gap,   gap = median(queued_s − graph_s) over the class's GPU-bound points

(GPU-bound: graph_s >= GPU_BOUND_S, where the host issues faster than the GPU runs). A kernel class is a GEMM
dtype (bf16, fp8) or the memory-bound kernels (add and SiLU: torch's elementwise kernels; copy is left out, since
a contiguous copy_ becomes a memcpy node in a graph, which the copy engines run at 2.4-2.7 TB/s, not a kernel).
Within the L2 (inputs up to ~2x its 50-60 MB) a replayed kernel reads operands the previous replay left in the
L2: `memory_points` keeps the sizes below L2_FREE_MAX_BYTES (the per-kernel cost) and above HBM_MIN_BYTES (the
stream from HBM) only.
"""
from __future__ import annotations

import csv
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent
DATA = {"H100": ROOT / "h100_graphed" / "graphed.csv", "H200": ROOT / "h200_graphed" / "graphed.csv"}
GPU_BOUND_S = 30e-6  # a queued call of >= 30 us of GPU time is not host-bound (host issue 8-12 us per call)
GRAPH_MAX_FLOPS = 5e10  # the H100's graphed GEMM grid goes up to here (gpu_graphed.py --gemm-max-flops)
MEMORY_KERNELS = ("add", "silu")
L2_FREE_MAX_BYTES = 2**20  # bytes moved: far below the L2, the kernel's fixed cost dominates
HBM_MIN_BYTES = 2**27  # bytes moved: over twice the L2 of either GPU (50 MB H100, 60 MB H200), streamed from HBM


def rows(gpu: str = "H100") -> list[dict]:
    with open(DATA[gpu]) as f:
        return list(csv.DictReader(f))


def _class(r: dict, what: str, dtype: str | None) -> bool:
    if what == "gemm":
        return r["what"] == "gemm" and r["dtype"] == dtype
    return r["what"] == "memory" and r["kernel"] in MEMORY_KERNELS


def eager_gap_s(gpu: str, what: str, dtype: str | None = None) -> float:
    """The gap an eager launch adds per kernel over a graph node: median(queued − graph) of the class's GPU-bound
    points (module docstring)."""
    d = [float(r["queued_s"]) - float(r["graph_s"]) for r in rows(gpu)
         if _class(r, what, dtype) and float(r["graph_s"]) >= GPU_BOUND_S]
    return median(d)


def gemm_points(gpu: str = "H100", dtype: str = "bfloat16") -> list[dict]:
    """The graphed GEMMs of `dtype` (bfloat16 / bf16 or fp8) as dicts with op, flops and t_eager_s."""
    dtype = {"bf16": "bfloat16"}.get(dtype, dtype)
    gap = eager_gap_s(gpu, "gemm", dtype)
    return [{"op": r["kernel"], "flops": float(r["flops"]), "t_eager_s": float(r["graph_s"]) + gap}
            for r in rows(gpu) if _class(r, "gemm", dtype)]


def back_to_back(dtype: str, queued) -> list[tuple[str, float, float]]:
    """(op, FLOPs, seconds) of a GEMM table's back-to-back points: the H100's graphed kernels' eager time up to
    GRAPH_MAX_FLOPS, where queued calls still hold the host's issue, and `queued` ((op, FLOPs, seconds) of queued
    calls, GPU-bound there) above it."""
    out = [(g["op"], g["flops"], g["t_eager_s"]) for g in gemm_points("H100", dtype) if g["flops"] <= GRAPH_MAX_FLOPS]
    return out + [(op, x, t) for op, x, t in queued if x > GRAPH_MAX_FLOPS]


def memory_points(gpu: str = "H100") -> list[dict]:
    """The graphed add and SiLU calls outside the L2's range, as dicts with kernel, bytes_moved and t_eager_s."""
    gap = eager_gap_s(gpu, "memory")
    out = []
    for r in rows(gpu):
        if not _class(r, "memory", None):
            continue
        x = float(r["bytes_moved"])
        if x <= L2_FREE_MAX_BYTES or x >= HBM_MIN_BYTES:
            out.append({"kernel": r["kernel"], "bytes_moved": x, "t_eager_s": float(r["graph_s"]) + gap})
    return out


def floor_s(gpu: str = "H100") -> float:
    """A one-element add inside a graph: the GPU's per-kernel floor back to back."""
    return next(float(r["graph_s"]) for r in rows(gpu) if r["what"] == "floor")
