"""GEMM operands that miss the tensor cores' 16-byte alignment: which GEMMs they are, and what they cost.

cuBLAS runs its fastest tensor-core kernels only when every operand's leading dimension and pointer are multiples of
16 bytes (cuBLAS Library, "Tensor Core Usage": 8 elements of fp16/bf16, 16 of fp8, 4 of fp32/tf32); otherwise it
falls back to kernels with narrower loads. The efficiency tables were measured on aligned shapes, so this module
finds the misaligned dimensions from the same per-op table the cost model times (flops.layer_ops, head_ops), and
`fallback_time_s` times such a GEMM at the fallback kernels' measured rate (validation/h200/unaligned_gemm.csv,
validation/unaligned_gemm.py: docs/compute.md, "GEMMs off the 16-byte alignment")."""
from __future__ import annotations

from ..units import DTYPE_BYTES

ALIGN_BYTES = 16  # cuBLAS tensor-core operands: leading dimensions and pointers, multiples of 16 bytes
# The fallback kernels' rate as a fraction of the dense peak of the GEMM's dtype: the median of the misaligned
# materialised-attention GEMMs (head dims 108, 150, 450; fp16 and bf16; forward and forward + backward) measured
# queued on the lent H200 SXM (validation/h200/unaligned_gemm.csv, fitted by validation/unaligned_gemm.py, which
# reports the held-out linears' error)
FALLBACK_EFFICIENCY = 0.1324

# Per op kind: which GEMM dims are leading dimensions of its row-major operands (torch's layouts). A weight GEMM
# y[T, n] = x[T, k] · W[k, n] has k (x's rows) and n (W's and y's rows); the attention core's scores S = Q·Kᵀ
# contract over the head dim k and read Q, K as strided per-head views (batch stride = head dim), its context
# O = P·V writes n = head dim and reads P with k = keys. m (tokens, queries) is no leading dimension.
_LEADING = {"gemm": ("n", "k"), "attention": ("n", "k")}


def is_misaligned(x, dtype: str):
    """True (elementwise for arrays) where a GEMM dimension x in `dtype` is not a multiple of 16 bytes:
    x · bytes(dtype) mod 16 ≠ 0 (cuBLAS "Tensor Core Usage"); a non-integer x (a degree that does not divide a
    width) counts as misaligned."""
    import numpy as np

    return np.asarray(x, dtype=float) % (ALIGN_BYTES // DTYPE_BYTES[dtype]) != 0


def op_misaligned(op, dtype: str):
    """Whether any leading dimension of GEMM `op` (flops.LayerOp, `_LEADING` of its kind) is misaligned in `dtype`
    (elementwise where the op's dims are layout arrays)."""
    import numpy as np

    dims = [is_misaligned(getattr(op, d), dtype) for d in _LEADING.get(op.kind, ())]
    return np.logical_or.reduce(np.broadcast_arrays(*dims)) if dims else np.asarray(False)


def fallback_time_s(t_s, flops, peak_flops_per_s, misaligned):
    """A GEMM's time with its misaligned operands: where `misaligned`, no faster than the fallback kernels' rate,

        t = max(t_aligned, FLOPs / (peak · η_fallback)),   η_fallback = FALLBACK_EFFICIENCY,

    else t_aligned. η_fallback is one rate measured on the lent H200 (module constant): across the measured shapes
    the fallback kernels' rate varies less than their ratio to the aligned kernels (docs/compute.md). Other GPUs:
    [assumption] the same fraction of their dense peak (no other GPU measured)."""
    import numpy as np

    slow = np.asarray(flops, dtype=float) / (peak_flops_per_s * FALLBACK_EFFICIENCY)
    return np.where(misaligned, np.maximum(t_s, slow), t_s)


def misaligned_gemms(ops, dtype_of) -> tuple[str, ...]:
    """The per-GPU GEMM dimensions of `ops` (flops.LayerOp) that are not multiples of 16 bytes.

    A dimension x of an op in dtype t is misaligned when x · bytes(t) mod 16 ≠ 0 (cuBLAS "Tensor Core Usage").
    `dtype_of(op)` gives the op's operand dtype. Non-integer dims (a TP degree that does not divide a width)
    count as misaligned. Returns one "op dim=value" string per distinct finding, in op order."""
    out: list[str] = []
    for op in ops:
        for dim in _LEADING.get(op.kind, ()):
            x = float(getattr(op, dim))
            if is_misaligned(x, dtype_of(op)):
                text = f"{op.name} {dim}={x:g}"
                if text not in out:
                    out.append(text)
    return tuple(out)


def estimate_misaligned(model, training, layout) -> tuple[str, ...]:
    """`misaligned_gemms` of one layout's transformer layers (dense and MoE) and LM head, each op in the dtype the
    cost model runs it in (fp8 for the FP8-eligible linears under FP8 training, else Training.math_dtype)."""
    from .flops import head_ops, layer_ops

    kw = dict(tp=layout.tp, cp=layout.cp, micro_batch_size=layout.micro_batch_size)
    ops = list(layer_ops(model, training, sequence_parallel=layout.sequence_parallel, **kw))
    if model.is_moe:
        ops += layer_ops(model, training, moe=True, ep=layout.ep, etp=layout.etp,
                         sequence_parallel=layout.sequence_parallel, **kw)
    ops += head_ops(model, training, **kw)

    def dtype_of(op):
        return "fp8" if (op.fp8 and training.precision == "fp8") else training.math_dtype

    return misaligned_gemms(ops, dtype_of)


def note(found: tuple[str, ...]) -> str:
    """The one-line caveat an estimate prints for `found` (empty: no caveat)."""
    if not found:
        return ""
    return (f"GEMM dims not multiples of 16 bytes: {', '.join(found)}. cuBLAS's fastest tensor-core kernels need "
            "16-byte-aligned operands (FlashAttention kernels pad the head dim instead); parasim times these GEMMs "
            "at the fallback kernels' rate measured on an H200 (docs/compute.md), a rate that varies by 2x with the "
            "shape")
