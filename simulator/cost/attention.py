"""Attention kernels on a GPU: which efficiency tables a stack's kernel reads, at which head dimension,
and how much of the GPU one kernel fills (split from compute.py, which times the ops)."""
from __future__ import annotations

import heapq
import re
from functools import lru_cache

import numpy as np


Q_TILE = 128  # query rows per FlashAttention thread block on Hopper/Ampere (FA2/FA3, cuDNN fprop kernel_m=128)
REFERENCE_TILES = 2048  # the published benchmarks' grid: 16k tokens x 16 heads (hdim 128) / 128-row tiles
BASE_HEAD_DIM = 128  # the head dimension of a table without an `_hd<d>` suffix


def attention_occupancy(tiles, sm_count: int):
    """How much of the GPU an attention kernel of `tiles` thread blocks (batch x heads x query tiles of
    Q_TILE rows) keeps busy, relative to the benchmarks the efficiency tables come from (REFERENCE_TILES
    blocks: 16k tokens x 2048 = heads x head dim, the FlashAttention papers' grid), by wave quantization:

        occ(n) = n / (SMs · ceil(n / SMs)),   factor = occ(tiles) / occ(REFERENCE_TILES)

    (one block per SM per wave, the last wave partly idle: the CUDA occupancy model for kernels whose
    blocks fill an SM; Dao 2023, FlashAttention-2 §3.2, parallelises over batch, heads and query blocks so
    that small batches fill the GPU). 1 when the profile gives no sm_count."""
    if not sm_count:
        return np.ones_like(np.asarray(tiles, dtype=float))
    n = np.maximum(np.asarray(tiles, dtype=float), 1.0)
    occ = n / (sm_count * np.ceil(n / sm_count))
    ref = REFERENCE_TILES / (sm_count * np.ceil(REFERENCE_TILES / sm_count))
    return np.minimum(occ / ref, 1.0)


def causal_occupancy(rows, tiles_per_row, sm_count, head_dim=BASE_HEAD_DIM):
    """How much of the GPU a causal attention kernel keeps busy, relative to the benchmark grid its tables come
    from, when its thread blocks carry unequal work.

    A causal kernel's `rows` = batch × heads-per-rank rows of T = `tiles_per_row` query tiles launch in order,
    the query tile fastest (FlashAttention-2's grid(num_m_blocks, b, h)); tile i of a row sees i key tiles, so
    its work is i units. The GPU's block scheduler hands each block to the SM that frees first: greedy list
    scheduling on `sm_count` SMs, one block each. occ = W / (SMs · makespan), W = rows · T(T+1)/2; simulated
    for up to 32768 blocks, above that makespan ≈ W/SMs + T/2 (the last row's heavy tiles, within 0.5 % of the
    simulation there). The factor is occ over the occupancy of the published benchmarks' grid at the same T
    (16k tokens × 2048/d heads: REFERENCE_TILES · 128/d blocks), at most 1 (grids larger than the benchmarks'
    are not measured here). Measured on an H100 (validation/h100_owed/sdpa.csv): batch 1 × 32 heads runs at
    0.43-0.84 of the 16k-token rate at 512-2048 tokens and 0.83-1.03 from 4096, which equal-work wave
    quantization (`attention_occupancy`, 1 at every point there) cannot see. 1 when the profile gives no
    sm_count."""
    rows, tiles, d = np.broadcast_arrays(np.asarray(rows, dtype=float), np.asarray(tiles_per_row, dtype=float),
                                         np.asarray(head_dim, dtype=float))
    if not sm_count:
        return np.ones(rows.shape)
    keys = np.stack([np.maximum(np.rint(rows), 1), np.maximum(np.rint(tiles), 1), np.maximum(d, 1.0)], -1)
    uniq, inverse = np.unique(keys.reshape(-1, 3), axis=0, return_inverse=True)  # (a sweep: few distinct shapes)
    vals = np.array([min(_list_occupancy(int(r), int(T), int(sm_count))
                         / _list_occupancy(max(int(round(REFERENCE_TILES * BASE_HEAD_DIM / dd / T)), 1), int(T),
                                           int(sm_count)), 1.0) for r, T, dd in uniq])
    return vals[inverse.reshape(-1)].reshape(rows.shape)


def flash_occupancy(micro_batch_size, heads, seq_length, *, tp, cp, ring: bool, sm_count, head_dim):
    """The occupancy factor of one FlashAttention call on a rank: its b · heads/t rows (heads/(t·c) under Ulysses
    CP) of ⌈queries/Q_TILE⌉ causal query tiles (queries s/c under ring CP, else s), `causal_occupancy`; under
    ring CP over c > 1 ranks the steps' work is balanced across ranks, so equal-work waves of all the blocks,
    `attention_occupancy`."""
    tp, cp, b = (np.asarray(x, dtype=float) for x in (tp, cp, micro_batch_size))
    rows = b * heads / (tp if ring else tp * cp)
    per_row = np.ceil((seq_length / cp if ring else seq_length) / Q_TILE)
    return np.where(ring & (cp > 1), attention_occupancy(rows * per_row, sm_count),
                    causal_occupancy(rows, per_row, sm_count, head_dim))


def window_occupancy(micro_batch_size, heads, seq_length, *, tp, cp, ring: bool, sm_count):
    """The occupancy factor of one sliding-window FlashAttention call: its blocks (b · heads/t rows of query tiles,
    counted as flash_occupancy counts them) each visit the same k_w key tiles (window.window_kernel), so equal-work
    waves, `attention_occupancy`."""
    tp, cp, b = (np.asarray(x, dtype=float) for x in (tp, cp, micro_batch_size))
    rows = b * heads / (tp if ring else tp * cp)
    return attention_occupancy(rows * np.ceil((seq_length / cp if ring else seq_length) / Q_TILE), sm_count)


@lru_cache(maxsize=4096)
def _list_occupancy(rows: int, T: int, sms: int) -> float:
    """W / (SMs · makespan) of `rows` rows of tiles with work 1..T, launched row by row onto `sms` SMs
    (causal_occupancy)."""
    work = rows * T * (T + 1) / 2.0
    if rows * T > 32768:
        return (work / sms) / (work / sms + T / 2.0)
    free = [0.0] * sms
    for _ in range(rows):
        for w in range(1, T + 1):
            heapq.heappush(free, heapq.heappop(free) + w)
    return work / (sms * max(free))


# A kernel a GPU has no table for reads its parent's: llm-foundry's 2022 Triton FlashAttention on the pre-MLIR
# Triton fork is on an A100 the kernel the A100 presets' `triton` tables chart (FlashAttention-2's README
# Triton, Ampere code); Hopper presets give it its own tables (validation/attention_tables.py).
KERNEL_PARENT = {"triton-pre-mlir": "triton"}


def release_kernel(hardware, kernel: str, version: str = "") -> str:
    """The kernel name whose tables a job on cuDNN release `version` reads: `<kernel>-<major>-<minor>` for the newest
    release of `kernel` the profile holds by release (`attention_<kernel>-9-13`, ...) not newer than `version` in
    major and minor (a patch release runs its minor release's kernels), the oldest it holds when `version` predates
    them all (the nearest), and `kernel` itself (the profile's default table) without a version or release tables.
    cuDNN's attention kernels change with its releases (validation/cudnn_sdpa_tables.py: 14-29 % between 9.13 and
    9.17-9.22 on the GB300 at 8k tokens), so a job's container decides which published release describes it."""
    if not version:
        return kernel
    want = tuple(int(x) for x in version.split(".")[:2])
    held = sorted((int(m.group(1)), int(m.group(2))) for m in
                  (re.fullmatch(rf"attention_{re.escape(kernel)}-(\d+)-(\d+)", n) for n in hardware.efficiency) if m)
    if not held:
        return kernel
    best = max((r for r in held if r <= want), default=held[0])
    return f"{kernel}-{best[0]}-{best[1]}"


def attention_tables(hardware, kernel: str) -> tuple[str, str]:
    """(forward, backward) base efficiency tables (head dim BASE_HEAD_DIM) of attention kernel `kernel`
    (spec/stack.py) on `hardware`: `attention_<kernel>` / `attention_bwd_<kernel>` where the profile has
    them (published or measured per-kernel benchmarks), else its parent kernel's (KERNEL_PARENT), else the
    generic `attention` / `attention_bwd`; a backward without its own table reads the generic backward
    table, then the forward one."""
    if not hardware.has_efficiency(f"attention_{kernel}") and kernel in KERNEL_PARENT:
        return attention_tables(hardware, KERNEL_PARENT[kernel])
    fwd = f"attention_{kernel}" if hardware.has_efficiency(f"attention_{kernel}") else "attention"
    bwd = next((t for t in (f"attention_bwd_{kernel}", "attention_bwd") if hardware.has_efficiency(t)), "attention")
    return fwd, bwd


def head_dim_tables(hardware, base: str) -> dict[int, str]:
    """{head dim: table} of base table `base` and its `<base>_hd<d>` variants in `hardware`."""
    out = {BASE_HEAD_DIM: base}
    for name in hardware.efficiency:
        m = re.fullmatch(re.escape(base) + r"_hd(\d+)", name)
        if m:
            out[int(m.group(1))] = name
    return dict(sorted(out.items()))


def _bracket(dims: dict[int, str], head_dim: float) -> tuple[str, str, float]:
    """(lower table, upper table, weight of the upper) for `head_dim` among `dims`: linear in log2(d)
    between the two nearest head dims that have tables, the end table outside them."""
    ds = list(dims)
    d = min(max(float(head_dim), ds[0]), ds[-1])
    hi = next(i for i, x in enumerate(ds) if x >= d)
    lo = max(hi - 1, 0)
    if ds[hi] == d or lo == hi:
        return dims[ds[hi]], dims[ds[hi]], 0.0
    w = (np.log2(d) - np.log2(ds[lo])) / (np.log2(ds[hi]) - np.log2(ds[lo]))
    return dims[ds[lo]], dims[ds[hi]], float(w)


def _bwd_follows_fwd(fd: dict, bd: dict) -> bool:
    """A backward without head-dim tables of its own follows its forward's head-dim ratio (when it has any)."""
    return len(bd) == 1 and len(fd) > 1


def _at(hardware, dims: dict[int, str], head_dim: float, x) -> np.ndarray:
    lo, hi, w = _bracket(dims, head_dim)
    e = hardware.interp_efficiency(lo, x)
    return e if w == 0.0 else (1.0 - w) * e + w * hardware.interp_efficiency(hi, x)


def attention_efficiency(hardware, kernel: str, head_dim: float, x) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) efficiency of attention kernel `kernel` at `x` keys per query and head dim
    `head_dim`, before occupancy.

    A table holds one head dim (BASE_HEAD_DIM, or d for `<table>_hd<d>`); FlashAttention-style kernels run
    head dim 64 at about 0.7 of head dim 128's TFLOP/s on an H100 (FlashAttention-3 README charts,
    kernel_benchmarks.csv; measured 0.69-0.77 with torch SDPA, validation/h100/calib_points*.csv), so the
    head dim is read, not assumed: η(x, d) is interpolated linearly in log2(d) between the two nearest
    head dims with tables (the nearest one outside them). A backward with no head-dim tables of its own
    follows its forward's head-dim ratio:

        η_bwd(x, d) = η_bwd(x, 128) · η_fwd(x, d) / η_fwd(x, 128)

    (no published backward by head dim for that kernel; stated, not measured)."""
    f_base, b_base = attention_tables(hardware, kernel)
    fd, bd = head_dim_tables(hardware, f_base), head_dim_tables(hardware, b_base)
    eff_f = _at(hardware, fd, head_dim, x)
    if not _bwd_follows_fwd(fd, bd):
        return eff_f, _at(hardware, bd, head_dim, x)
    ratio = eff_f / np.maximum(hardware.interp_efficiency(f_base, x), 1e-12)
    return eff_f, hardware.interp_efficiency(b_base, x) * ratio


def attention_table_names(hardware, kernel: str, head_dim: float) -> tuple[str, str]:
    """(forward, backward) table names read for `kernel` at `head_dim` ('a + b' when interpolated between
    two head dims; the backward names its forward's ratio when it has no head-dim tables of its own)."""
    f_base, b_base = attention_tables(hardware, kernel)
    fd, bd = head_dim_tables(hardware, f_base), head_dim_tables(hardware, b_base)

    def name(dims):
        lo, hi, w = _bracket(dims, head_dim)
        return lo if w == 0.0 else f"{lo} + {hi}"

    f = name(fd)
    if not _bwd_follows_fwd(fd, bd) or f == f_base:
        return f, name(bd)
    return f, f"{b_base} x ({f}) / {f_base}"


def unfused_core_times(gemm_s, forward_flops, scores, head_dim, keys, e: float, hardware, peak: float):
    """(forward, backward) time of each of materialised attention's two batched GEMMs (QKᵀ, A·V), from the
    profile's measured `attention_unfused` tables when it has them; None when it has none.

    The tables time PyTorch's standard attention: QKᵀ batched GEMM, softmax, A·V, forward and backward
    (FlashAttention-2/3 README charts, kernel_benchmarks.csv; FLOPs of the full s² matrix, backward 2.5 ×
    forward in the charts' convention), at the model's head dim and `keys` per query:

        T_fwd = F / (peak · η_unfused(x, d)),  T_bwd = 2.5·F / (peak · η_bwd_unfused(x, d))

    or, where only the two passes' total was published (no `attention_bwd_unfused`: the A100),
    T = 3.5·F / (peak · η_unfused(x, d)) split as the modelled passes split it (materialised attention is
    memory-bound: the backward moves 14 bytes per score where the forward moves 8; on the H100, where both
    are published, the measured split is 1 : 1.87 at 2k tokens, the modelled 1 : 1.75). The softmax
    kernel stays an op of the stack's list (elementwise.py: fused, eager or hf, with its dropout), so its
    plain pass (read e + write e per score forward; read 2e + write e backward, timed with the table of the
    op list's softmax kernel: memory_ops.softmax_table) is taken out, and the rest is split over the two GEMMs
    as their modelled times `gemm_s` (rows QKᵀ, A·V; backward modelled as twice the forward) split it:

        GEMMs_fwd = max(T_fwd − t_softmax_fwd, 0),  GEMMs_bwd = max(T_bwd − t_softmax_bwd, 0)

    F = `forward_flops` summed over the two GEMMs (4·b·heads·s_q·s_k·d), `scores` = b·heads·s_q·s_k."""
    if not hardware.has_efficiency("attention_unfused"):
        return None
    from .memory_ops import _memory_time, softmax_table

    f = np.sum(forward_flops, axis=0)
    sm = softmax_table()
    sm_f, sm_b = _memory_time(2.0 * e * scores, 1.0, hardware, sm), _memory_time(3.0 * e * scores, 1.0, hardware, sm)
    eff_f = _at(hardware, head_dim_tables(hardware, "attention_unfused"), head_dim, keys)
    if hardware.has_efficiency("attention_bwd_unfused"):
        eff_b = _at(hardware, head_dim_tables(hardware, "attention_bwd_unfused"), head_dim, keys)
        t_fwd, t_bwd = f / (peak * eff_f), 2.5 * f / (peak * eff_b)
    else:
        g = np.sum(gemm_s, axis=0)
        fwd_share = (g + sm_f) / (3.0 * g + sm_f + sm_b)  # modelled forward / (forward + backward)
        total = 3.5 * f / (peak * eff_f)
        t_fwd, t_bwd = fwd_share * total, (1.0 - fwd_share) * total
    share = gemm_s / np.maximum(np.sum(gemm_s, axis=0), 1e-300)
    return share * np.maximum(t_fwd - sm_f, 0.0), share * np.maximum(t_bwd - sm_b, 0.0)


# In-kernel attention dropout: (forward, backward) kernel time at dropout_p 0.1 over the time at 0, per kernel family,
# and the torch SDPA backend that measured it on a lent H200 SXM (torch 2.11.0+cu130, cuDNN 9.19;
# validation/h200/attention_dropout.csv, fitted and checked on held-out shapes by validation/attention_dropout.py)
DROPOUT_FACTORS = {"flash2": ("flash", 1.213, 1.115), "cudnn": ("cudnn", 2.052, 1.231),
                   "xformers": ("efficient", 1.613, 1.659)}


def in_kernel_dropout_factor(kernel: str, dropout: bool) -> tuple[float, float]:
    """(forward, backward) multiplier on the time of fused attention kernel `kernel` (spec/stack.py) when it applies
    attention dropout (Training.dropout), from DROPOUT_FACTORS:

        T_fwd(p > 0) = f_fwd · T_fwd(p = 0),   T_bwd(p > 0) = f_bwd · T_bwd(p = 0)

    The kernel draws one Philox number per score element it computes, forward and again backward (to rebuild the
    mask), so the added work scales as the kernel's own: measured on torch's scaled_dot_product_attention on an
    H200 SXM (validation/h200/attention_dropout.csv: causal, bf16, head dim 128, 24 or 32 heads, 2048-8192 tokens,
    dropout_p 0 vs 0.1; backward = (forward + backward call) − forward call), each factor the geometric mean of
    two shapes (4×24×2048, 1×32×8192), the other two held out (validation/attention_dropout.py reports their
    error and the one suspect point). Families: flash2 (FlashAttention-2: Transformer Engine's flash path, torch
    SDPA's flash backend, the one measured); cudnn (cuDNN fused attention: Transformer Engine's fused-attention
    path, torch SDPA's cudnn backend, measured); xformers (xFormers' CUTLASS kernels: SDPA's memory-efficient
    backend, measured).
    The probability does not enter (one draw per element at any p > 0). Measured on Hopper: on other GPUs an
    assumption (the kernels' code, and the draws' share of them, differ by architecture). 1 without dropout, for
    "unfused" (its dropout is an op of the layer's list, elementwise.py) and for families not measured
    (flash_dropout_note names those)."""
    if not dropout or kernel not in DROPOUT_FACTORS:
        return 1.0, 1.0
    _, fwd, bwd = DROPOUT_FACTORS[kernel]
    return fwd, bwd


def flash_dropout_note(training) -> str:
    """The caveat of an estimate whose fused attention kernel applies attention dropout (Training.dropout with
    flash_attention) but whose kernel family has no measured dropout factor (in_kernel_dropout_factor: flash2, cudnn
    and xformers are measured): its attention tables come from benchmarks run with dropout 0, so the in-kernel draws
    are not timed. FlashAttention-3 has no dropout at all (Dao-AILab/flash-attention#1251: "FA3 doesn't have
    dropout"), so a job with dropout does not run it as given. Without FlashAttention the dropout is an op of the
    layer's list (elementwise.py) and timed; "" then, without dropout, and for the measured families."""
    kernel = training.stack.attention_kernel
    if not (training.dropout and training.flash_attention) or kernel in DROPOUT_FACTORS:
        return ""
    return (f"attention dropout inside the {kernel} attention kernel: its tables were measured without dropout and "
            f"its in-kernel random draws are not timed (measured for {', '.join(DROPOUT_FACTORS)} only)")
