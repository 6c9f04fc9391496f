"""Compute time per op and per building block of a (virtual) pipeline stage, per microbatch: F, B, W,
recompute (the optimizer step: optimizer.py).

Time per op (formulas.md §6.3, §7.1; scaling-book `T = max(T_math, T_mem)`):
- GEMM:        t_math = FLOPs / (peak(dtype) · η_gemm(FLOPs of one GEMM call)),
               t_mem  = bytes / (HBM bytes/s · η_memory(bytes)), bytes = operands + result.
               FP8 training runs the transformer-layer linears at the FP8 peak (TransformerEngine); the
               router, the LM head and attention stay in bf16 (DeepSeek-V3 report §3.3, Megatron).
- Attention:   FlashAttention kernels at peak(bf16) · η_attention(s, d) forward and η_attention_bwd(s, d)
               backward (recomputes QKᵀ: 2.5× forward FLOPs when d_qk = d_v); FLOPs skip masked blocks
               (causal: s²/2). Unfused: batched GEMMs over the whole s² matrix + a memory-bound softmax.
- Memory-bound ops (norms, SwiGLU/GeLU, residual adds, RoPE, dropout, softmax when not flash, MoE
               permutation, cross-entropy, embedding lookup, optimizer step): bytes / (HBM bytes/s ·
               η_memory(bytes per kernel)).
- Per op: `roofline=True` (default) takes max(t_math, t_mem); `roofline=False` adds them (Calculon's
  `no_overlap` mode, the one its shipped A100/H100 configs use; formulas.md §7.1).

The efficiency curves (η) are data of the hardware profile (`[efficiency.gemm]`, `[efficiency.attention]`,
optional `[efficiency.attention_bwd]`, `[efficiency.gemm_fp8]`, `[efficiency.memory]`), read with
`hardware.interp_efficiency(name, x)`; this module holds no efficiency numbers.

The byte counts of the memory-bound ops are in memory_ops.py (`memory_ops`: the stack's elementwise op
list, elementwise.py), the optimizer step in optimizer.py, the list of ops a stage runs in stage_ops.py; this
module times the ops of a layer and of a stage's building blocks.

Stages (the schedule family's geometry, simulator/schedules/family.py): pp·vpp (interleaved), 2·pp
(zb-v, dualpipev: V shape), else pp. `spec.placement.stage_layer_split` splits the layers over the virtual stages in
layer order (evenly, or `layers_per_stage`), following `ModelSpec.moe_layer_mask`; the embedding is on the
first virtual stage, the final norm, LM head and loss on the last. `layer_basis_times_by_mode` times the
four building blocks (dense layer, MoE layer, embedding, head; `BASIS`) once per distinct (tp, cp, ep,
micro_batch_size) tuple; a stage's time is their product with its block counts (simulator/kernel.py).

B/W split: weight-gradient GEMMs (and the embedding-table gradient) are W; everything else in the
backward (dgrad GEMMs, attention backward, memory-bound backward ops) is B. The recompute forward
(selective: core attention; full: the whole layer forward; never the LM head) is `recompute_s`, to be
run before B by the pipeline engine.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..dedup import distinct_rows
from ..errors import InputError
from ..spec.model import ModelSpec
from ..spec.training import Training
from . import flops as F
from .attention import (Q_TILE, attention_efficiency, flash_occupancy, in_kernel_dropout_factor, release_kernel,
                        unfused_core_times, window_occupancy)
from .alignment import fallback_time_s, op_misaligned
from .window import layer_kinds, mean_fraction, window_kernel
from .launch import launch_bound, layer_host_s, padding_sync_s
from .memory_ops import _memory_time
from .stage_ops import stage_op_groups

__all__ = ["OpTime", "BASIS", "BASIS_KEYS", "gemm_dtype", "gemm_table", "mfu_peak_flops", "layer_op_times",
           "layer_basis_times_by_mode"]


# ---- dtypes and peaks -------------------------------------------------------------------------------
def gemm_dtype(training: Training) -> str:
    """Dtype whose dense peak the transformer-layer GEMMs run at: the training precision (fp8 → fp8)."""
    return training.precision


def gemm_table(training: Training, hardware, fp8: bool) -> str:
    """The efficiency table a weight GEMM reads: bf16/fp16 GEMMs `gemm`; FP8 GEMMs `gemm_fp8` (per-tensor
    scaled kernels), and with the stack's fp8_recipe "mxfp8" `gemm_mxfp8` (the block-scaled kernels, which
    read a 1-byte scale per 32 elements of each operand inside the kernel and run slower than per-tensor
    FP8 on Blackwell: validation/mxfp8_gemm.py), each falling back to the one before where the profile lacks it."""
    if not fp8:
        return "gemm"
    if training.stack.fp8_recipe == "mxfp8" and hardware.has_efficiency("gemm_mxfp8"):
        return "gemm_mxfp8"
    return "gemm_fp8" if hardware.has_efficiency("gemm_fp8") else "gemm"


def _peak(hardware, dtype: str) -> float:
    """Dense peak FLOP/s for dtype; fp16 falls back to bf16 (equal dense peaks on every listed GPU,
    formulas.md §6.1) when a profile lists only bf16."""
    if dtype == "fp16" and "fp16" not in hardware.peak_flops_per_s:
        dtype = "bf16"
    return hardware.peak_flops(dtype)


def mfu_peak_flops(hardware, training: Training) -> float:
    """Denominator peak of the MFU parasim reports: the dense peak of the training GEMM dtype
    (bf16 989 TFLOP/s on H100 SXM; fp8 training: the fp8 peak)."""
    return _peak(hardware, gemm_dtype(training))


def _combine(t_math, t_mem, roofline: bool):
    """Op time from its compute and memory times: max (roofline) or sum (Calculon no_overlap)."""
    return np.maximum(t_math, t_mem) if roofline else t_math + t_mem


# ---- stages ----------------------------------------------------------------------------------------
# ---- op tables -------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class OpTime:
    """Time of one op for one microbatch on one rank: forward, B (input gradient), W (weight gradient),
    and its executed FLOPs (hardware FLOPs: B includes FlashAttention's QKᵀ recompute)."""

    name: str
    kind: str  # gemm | attention | memory
    forward_s: object
    backward_s: object
    weight_s: object
    forward_flops: object = 0.0
    backward_flops: object = 0.0
    weight_flops: object = 0.0
    core_attention: bool = False


def _stack(values) -> np.ndarray:
    """Scalars/arrays -> one float array with a leading op axis (broadcast to a common shape).

    All-scalar input (a single layout) takes the cheap path: one small 1-D array.
    """
    try:  # all scalars, or arrays of one shape
        return np.array(values, dtype=float)
    except ValueError:  # mixed shapes: broadcast first
        return np.stack(np.broadcast_arrays(*[np.asarray(v, dtype=float) for v in values]))


_TIME_KEYS = ("forward_s", "backward_s", "weight_s", "forward_flops", "backward_flops", "weight_flops")


def _table(*rows) -> np.ndarray:
    """Rows in `_TIME_KEYS` order, each with a leading op axis -> one array (6, ops, ...)."""
    try:
        return np.array(rows, dtype=float)
    except ValueError:  # rows of different shapes (some independent of the layout arrays)
        return np.array(np.broadcast_arrays(*rows), dtype=float)


def _gemm_times(ops, training: Training, hardware, roofline: bool) -> np.ndarray:
    """Weight GEMMs as a `_table` (rows forward_s, backward_s, weight_s and their FLOPs; one column per op):

        t_math = FLOPs / (peak · η_gemm(FLOPs per call)),  t_mem = bytes / (HBM · η_memory(bytes per call)),
        t = max(t_math, t_mem) (roofline) or t_math + t_mem.

    Bytes per call: forward and dgrad read two operands and write one, e_in·(m·k + k·n) + e_out·m·n;
    wgrad reads the two activations and accumulates into the gradient buffer (read + write at
    grad_bytes, Megatron gradient-accumulation fusion): e_in·(m·k + m·n) + 2·g·k·n.
    FP8 (precision fp8 and op.fp8): FP8 peak, 1-byte operands, η from the table `gemm_table` names
    (`gemm_fp8`, `gemm_mxfp8` for the mxfp8 recipe, else `gemm` as a fraction of the FP8 peak).
    """
    m, n, k, calls, fl = (_stack([getattr(o, a) for o in ops]) for a in ("m", "n", "k", "calls", "forward_flops"))
    pad = (len(ops),) + (1,) * (m.ndim - 1)
    fp8 = np.array([o.fp8 and training.precision == "fp8" for o in ops]).reshape(pad)
    peak = np.where(fp8, _peak(hardware, "fp8") if fp8.any() else 0.0, _peak(hardware, training.math_dtype))
    x = np.maximum(fl / calls, 1.0)
    eff = hardware.interp_efficiency("gemm", x)
    table = gemm_table(training, hardware, bool(fp8.any()))
    if table != "gemm":
        eff = np.where(fp8, hardware.interp_efficiency(table, x), eff)
    e = float(training.activation_bytes)
    e_in = np.where(fp8, 1.0, e)
    t_math = fl / (peak * eff)
    by = np.stack([calls * (e_in * (m * k + k * n) + e * m * n),
                   calls * (e_in * (m * k + m * n) + 2.0 * training.grad_bytes * k * n)])
    t_mem = _memory_time(by, calls, hardware)
    t_f = _combine(t_math, t_mem[0], roofline)
    t_w = _combine(t_math, t_mem[1], roofline)
    dg, wg = _stack([o.dgrad_flops for o in ops]), _stack([o.wgrad_flops for o in ops])
    slow = _stack([op_misaligned(o, "fp8" if f else training.math_dtype) for o, f in zip(ops, np.ravel(fp8))])
    if slow.any():  # operands off the 16-byte alignment: the fallback kernels' rate (alignment.fallback_time_s)
        return _table(fallback_time_s(t_f, fl, peak, slow), fallback_time_s(t_f, dg, peak, slow),
                      fallback_time_s(t_w, wg, peak, slow), fl, dg, wg)
    return _table(t_f, t_f, t_w, fl, dg, wg)


def _memory_times(ops, hardware) -> np.ndarray:
    """Memory-bound ops as a `_table`: bytes / (HBM bytes/s · η(bytes per kernel)), η from each op's kernel-class
    table (memory_ops._memory_time); no FLOPs."""
    n = len(ops)
    by = _stack([o.forward_bytes for o in ops] + [o.backward_bytes for o in ops] + [o.weight_bytes for o in ops])
    k = [o.kernels for o in ops]
    kb = [o.kernels if o.backward_kernels is None else o.backward_kernels for o in ops]
    kernels = _stack(k + kb + k)  # scalars, or arrays where the count follows the layout (cp_merge.py)
    kernels = kernels.reshape(kernels.shape + (1,) * (by.ndim - kernels.ndim))
    tables = np.array([o.table for o in ops] * 3).reshape((3 * n,) + (1,) * (by.ndim - 1))
    t = _memory_time(by, kernels, hardware, tables)
    z = np.zeros_like(t[:n])
    return _table(t[:n], t[n:2 * n], t[2 * n:], z, z, z)


def _attention_times(ops, model, training, hardware, *, tp, cp, micro_batch_size, cp_algorithm, roofline) -> np.ndarray:
    """Core attention (QKᵀ and A·V) as a `_table` (one column with FlashAttention, two without).

    FlashAttention (one fused kernel per pass): forward t = FLOPs_fwd / (peak · η_attention(x, d) · occ),
    backward t = (2·FLOPs_fwd + QKᵀ recompute) / (peak · η_attention_bwd(x, d) · occ) (η at the QK head dim d:
    attention.attention_efficiency), x = s/c (ring CP: each kernel sees s/c queries) or s (Ulysses),
    occ = attention.flash_occupancy of the kernel's grid;
    memory: Q, K, V, O once in the forward, twice in the backward. Peak: bf16 (fp16/fp32 when training
    in those), also under fp8 training. With attention dropout both passes × attention.in_kernel_dropout_factor.
    Without FlashAttention: QKᵀ and A·V are batched GEMMs (b·n_h/t heads), timed from the profile's
    measured standard-attention tables (attention.unfused_core_times) where it has them, else with
    η_gemm(FLOPs of the whole batched call), bytes e·(m·k + k·n + m·n) per head, backward = 2 such GEMMs.
    """
    peak = _peak(hardware, training.math_dtype)
    e = float(training.activation_bytes)
    fl = _stack([o.forward_flops for o in ops])
    bwd_fl = _stack([o.dgrad_flops + o.backward_recompute_flops for o in ops])
    if not training.flash_attention:
        m, n, k, calls = (_stack([getattr(o, a) for o in ops]) for a in ("m", "n", "k", "calls"))
        t_math = fl / (peak * hardware.interp_efficiency("gemm", np.maximum(fl, 1.0)))
        t = _combine(t_math, _memory_time(calls * e * (m * k + k * n + m * n), 1.0, hardware), roofline)
        got = unfused_core_times(t, fl, calls[0] * m[0] * n[0], k[0], n[0], e, hardware, peak)
        t_f, t_b = got if got is not None else (t, 2.0 * t)
        slow = _stack([op_misaligned(o, training.math_dtype) for o in ops])
        if slow.any():  # a head dim off the 16-byte alignment (alignment.fallback_time_s)
            t_f, t_b = fallback_time_s(t_f, fl, peak, slow), fallback_time_s(t_b, bwd_fl, peak, slow)
        return _table(t_f, t_b, 0.0 * t, fl, bwd_fl, 0.0 * fl)
    fwd, bwd = fl.sum(axis=0, keepdims=True), bwd_fl.sum(axis=0, keepdims=True)
    x = np.maximum(float(training.seq_length) / (F._f(cp) if cp_algorithm == "ring" else 1.0), 1.0)
    tp_, cp_, b = F._f(tp), F._f(cp), F._f(micro_batch_size)
    s = float(training.seq_length)
    occ = flash_occupancy(b, model.num_heads, s, tp=tp_, cp=cp_, ring=cp_algorithm == "ring",
                          sm_count=hardware.sm_count, head_dim=model.qk_head_dim)
    if model.is_mla:
        qk_w = model.num_heads * (model.qk_nope_head_dim + model.qk_rope_head_dim)
        v_w = model.num_heads * model.v_head_dim
        kv_w = qk_w + v_w
    else:
        qk_w, v_w, kv_w = model.q_size, model.q_size, 2 * model.kv_size
    by = e * b / tp_ * ((s / cp_) * (qk_w + v_w) + s * kv_w)  # Q, O of the rank's queries; K, V of all s keys
    t_mem = _memory_time(np.stack(np.broadcast_arrays(by, 2.0 * by)), 1.0, hardware)
    kinds = layer_kinds(model, s, 0.5, causal=True)  # executed FLOPs: causal, a windowed layer its band
    mean_phi = mean_fraction(model, s, 0.5, causal=True)
    t_f = t_b = 0.0
    for share, phi, windowed in kinds:  # full and windowed layers, each at its kernel's rate
        xk, factor, band = window_kernel(x, model.sliding_window, Q_TILE) if windowed else (x, 1.0, False)
        kernel = release_kernel(hardware, training.stack.attention_kernel, training.stack.cudnn_version)
        eff_f, eff_b = attention_efficiency(hardware, kernel, model.qk_head_dim, xk)
        o = np.where(band, window_occupancy(b, model.num_heads, s, tp=tp_, cp=cp_, ring=cp_algorithm == "ring",
                                            sm_count=hardware.sm_count), occ) if windowed else occ
        per_layer = phi / mean_phi  # this kind's FLOPs over the mean layer's
        t_f = t_f + share * _combine(per_layer * fwd / (peak * eff_f * factor * o), t_mem[0], roofline)
        t_b = t_b + share * _combine(per_layer * bwd / (peak * eff_b * factor * o), t_mem[1], roofline)
    drop_f, drop_b = in_kernel_dropout_factor(training.stack.attention_kernel, training.dropout)
    return _table(drop_f * t_f, drop_b * t_b, 0.0 * t_f, fwd, bwd, 0.0 * fwd)


def layer_op_times(model: ModelSpec, training: Training, hardware, *, moe: bool = False, tp=1, cp=1, ep=1,
                   micro_batch_size=1, sequence_parallel: bool = False, cp_algorithm: str = "ring",
                   roofline: bool = True, core_attention_only: bool = False, etp=None) -> list[OpTime]:
    """Per-op times of one transformer layer for one microbatch on one rank (a breakdown table).

    Executed attention FLOPs: causal halving with FlashAttention (masked blocks are skipped), the full
    s² without it — independent of the `attention_flops` reporting convention. `core_attention_only`:
    the core-attention ops only (the GEMMs are not timed: the sweep asks for these per CP setting).
    """
    one = np.ones(1)
    groups = stage_op_groups(model, training, tp=tp, cp=cp, ep=ep, micro_batch_size=micro_batch_size,
                              sequence_parallel=sequence_parallel, n_dense=0 * one if moe else one,
                              n_moe=one if moe else 0 * one, first=0 * one, last=0 * one, recompute="none",
                              cp_algorithm=cp_algorithm, etp=etp)
    out = []
    for kind, ops, W, _ in groups:
        if core_attention_only and kind == "gemm":  # (projections, FFN, head: no core attention)
            continue
        t = _evaluate(kind, ops, model, training, hardware, tp=tp, cp=cp, micro_batch_size=micro_batch_size,
                      cp_algorithm=cp_algorithm, roofline=roofline)
        names = [o.name for o in ops] if (kind != "attention" or not training.flash_attention) else ["attention"]
        for i, name in enumerate(names):
            if not W[i].any():  # embedding / head / the other FFN kind: not part of this layer
                continue
            core = kind == "attention" or (kind == "memory" and ops[i].core_attention)
            if core_attention_only and not core:
                continue
            out.append(OpTime(name=name, kind=kind, core_attention=core,
                              **{k: t[j, i] for j, k in enumerate(_TIME_KEYS)}))
    return out


def _evaluate(kind, ops, model, training, hardware, *, tp, cp, micro_batch_size, cp_algorithm, roofline) -> np.ndarray:
    if kind == "gemm":
        return _gemm_times(ops, training, hardware, roofline)
    if kind == "attention":
        return _attention_times(ops, model, training, hardware, tp=tp, cp=cp, micro_batch_size=micro_batch_size,
                                cp_algorithm=cp_algorithm, roofline=roofline)
    return _memory_times(ops, hardware)


def _per_stage(t: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Σ_ops t[r, o, ...] · W[o, j]: (rows, ops) -> (rows, S); (rows, ops, n, 1) -> (rows, n, S)."""
    if t.ndim == 2:
        return t @ W
    return np.swapaxes(t[..., 0], 1, 2) @ W


# ---- per-block basis times ------------------------------------------------------------------------
def _unique_layouts(values):
    """Distinct combinations of the numeric layout fields: (unique columns, inverse index, batch shape);
    a sweep repeats few distinct (tp, cp, ep, etp, micro_batch_size) tuples (dedup.distinct_rows)."""
    arrays = np.broadcast_arrays(*[np.asarray(v) for v in values])
    flat = [x.ravel() for x in arrays]
    first, inverse = distinct_rows(*flat)
    return [x[first] for x in flat], inverse, arrays[0].shape


BASIS = ("dense_layer", "moe_layer", "embedding", "head")
BASIS_KEYS = _TIME_KEYS + ("recompute_s", "recompute_flops")


def layer_basis_times_by_mode(model: ModelSpec, training: Training, hardware, *, tp=1, cp=1, ep=1, micro_batch_size=1,
                              modes=F.RECOMPUTE_MODES, sequence_parallel: bool = False, cp_algorithm: str = "ring",
                              roofline: bool = True, etp=None) -> dict:
    """Times and FLOPs per microbatch of the four building blocks of a virtual stage, for each recompute
    mode in `modes`: {mode: table}, each table of shape (8, 4) or (8, N, 4): rows `BASIS_KEYS` (F, B, W,
    their FLOPs, recompute forward and its FLOPs), columns `BASIS` (one dense layer, one MoE layer, the
    input embedding, final norm + LM head + loss).

    A virtual stage with d dense and e MoE layers (`spec.placement.stage_layer_split`), holding the embedding (first)
    and/or the head (last), takes  d·t_dense + e·t_moe + first·t_embedding + last·t_head  — every op
    time is linear in those counts (`_stage_op_groups`), so any pipeline split is a product with this
    table (the kernel's per-stage times). Only the recompute rows differ between modes, so the op times
    are evaluated once. tp, cp, ep, micro_batch_size, etp (the routed experts' tensor-parallel degree; None:
    tp): scalars or (N,) arrays (distinct tuples are evaluated once and gathered, exact).
    """
    for r in modes:
        if r not in F.RECOMPUTE_MODES:
            raise InputError(f"recompute must be one of {', '.join(F.RECOMPUTE_MODES)}, got {r!r}")
    if cp_algorithm not in ("ring", "ulysses"):
        raise InputError(f"cp_algorithm must be ring or ulysses, got {cp_algorithm!r}")
    kw = dict(modes=tuple(modes), sequence_parallel=bool(sequence_parallel), cp_algorithm=cp_algorithm,
              roofline=roofline)
    etp = tp if etp is None else etp
    if any(np.ndim(x) > 0 for x in (tp, cp, ep, micro_batch_size, etp)):
        cols, inverse, shape = _unique_layouts([tp, cp, ep, micro_batch_size, etp])
        u = _basis(model, training, hardware, tp=cols[0][:, None].astype(float), cp=cols[1][:, None].astype(float),
                   ep=cols[2][:, None].astype(float), micro_batch_size=cols[3][:, None].astype(float),
                   etp=cols[4][:, None].astype(float), **kw)
        out = {}
        for r, t in u.items():
            t = np.broadcast_to(t, (len(BASIS_KEYS), len(cols[0]), len(BASIS)))
            out[r] = t[:, inverse].reshape((len(BASIS_KEYS),) + shape + (len(BASIS),))
        return out
    return _basis(model, training, hardware, tp=float(tp), cp=float(cp), ep=float(ep),
                  micro_batch_size=float(micro_batch_size), etp=float(etp), **kw)


def _basis(model, training, hardware, *, tp, cp, ep, micro_batch_size, modes, sequence_parallel, cp_algorithm,
           roofline, etp) -> dict:
    """{mode: basis table} for scalars or (K, 1) columns: the four blocks as four pseudo-stages."""
    one_hot = np.eye(len(BASIS))
    moe = one_hot[1] if (model.is_moe and model.moe_layer_mask.any()) else 0.0 * one_hot[1]
    kw = dict(tp=tp, cp=cp, micro_batch_size=micro_batch_size)
    shape = dict(ep=ep, etp=etp, sequence_parallel=sequence_parallel, n_dense=one_hot[0], n_moe=moe,
                 first=one_hot[2], last=one_hot[3], mtp=model.mtp_layers * one_hot[3], cp_algorithm=cp_algorithm, **kw)
    per_mode = {r: stage_op_groups(model, training, recompute=r, **shape) for r in modes}  # same ops, own R
    acc = {r: 0.0 for r in modes}
    for g, (kind, ops, W, _) in enumerate(per_mode[modes[0]]):
        t = _evaluate(kind, ops, model, training, hardware, cp_algorithm=cp_algorithm, roofline=roofline, **kw)
        rows = _per_stage(t, W)
        for r in modes:
            rc = _per_stage(t[0::3], per_mode[r][g][3])  # forward_s and forward_flops of the recomputed ops
            both = rows
            if rows.shape[1:] != rc.shape[1:]:
                common = np.broadcast_shapes(rows.shape[1:], rc.shape[1:])
                both, rc = np.broadcast_to(rows, (6,) + common), np.broadcast_to(rc, (2,) + common)
            acc[r] = acc[r] + np.concatenate([both, rc])
    g_ops, g_w = per_mode[modes[0]][0][1], per_mode[modes[0]][0][2]  # the GEMMs: one wgrad kernel per weight GEMM
    weight_gemms = [sum(1 for o, w in zip(g_ops, g_w) if np.any(w[..., c] > 0) and np.any(F._f(o.wgrad_flops) > 0))
                    for c in (BASIS.index("dense_layer"), BASIS.index("moe_layer"))]
    host_s = [layer_host_s(training.stack, weight_gemms=weight_gemms[0]),  # the MoE column's per layout: (K,)
              layer_host_s(training.stack, weight_gemms=weight_gemms[1],
                           experts_local=model.local_experts(np.ravel(ep) if np.ndim(ep) else float(ep)))]
    rows = tuple(BASIS_KEYS.index(k) for k in ("forward_s", "backward_s", "weight_s", "recompute_s"))
    cols = (BASIS.index("dense_layer"), BASIS.index("moe_layer"))
    sync_s = padding_sync_s(training.stack, training.flash_attention)
    return {r: launch_bound(np.asarray(a, dtype=float), r, host_s, rows=rows, layer_cols=cols,
                            sync_s=sync_s) for r, a in acc.items()}
