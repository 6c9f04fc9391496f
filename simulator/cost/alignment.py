"""GEMM operands that miss the tensor cores' 16-byte alignment: a regime parasim names but does not time.

cuBLAS runs its fastest tensor-core kernels only when every operand's leading dimension and pointer are multiples of
16 bytes (cuBLAS Library, "Tensor Core Usage": 8 elements of fp16/bf16, 16 of fp8, 4 of fp32/tf32); otherwise it
falls back to kernels with narrower loads. The efficiency tables were measured on aligned shapes only, so an estimate
whose per-GPU GEMMs have a misaligned dimension times them as if aligned. This module finds those dimensions from
the same per-op table the cost model times (flops.layer_ops, head_ops), so that an estimate can say so.

What it costs is not modelled: the one measurement in hand is end to end (docs/accuracy.md, BLOOM_PREQUEL: two
runs of one model that differ only in 64 against 128 heads, head dim 216 against 108, measured 103.5 against
147.4 s), and a kernel measurement is owed to a GPU (validation/gpu_unaligned_gemm.py)."""
from __future__ import annotations

from ..units import DTYPE_BYTES

ALIGN_BYTES = 16  # cuBLAS tensor-core operands: leading dimensions and pointers, multiples of 16 bytes

# Per op kind: which GEMM dims are leading dimensions of its row-major operands (torch's layouts). A weight GEMM
# y[T, n] = x[T, k] · W[k, n] has k (x's rows) and n (W's and y's rows); the attention core's scores S = Q·Kᵀ
# contract over the head dim k and read Q, K as strided per-head views (batch stride = head dim), its context
# O = P·V writes n = head dim and reads P with k = keys. m (tokens, queries) is no leading dimension.
_LEADING = {"gemm": ("n", "k"), "attention": ("n", "k")}


def misaligned_gemms(ops, dtype_of) -> tuple[str, ...]:
    """The per-GPU GEMM dimensions of `ops` (flops.LayerOp) that are not multiples of 16 bytes.

    A dimension x of an op in dtype t is misaligned when x · bytes(t) mod 16 ≠ 0 (cuBLAS "Tensor Core Usage").
    `dtype_of(op)` gives the op's operand dtype. Non-integer dims (a TP degree that does not divide a width)
    count as misaligned. Returns one "op dim=value" string per distinct finding, in op order."""
    out: list[str] = []
    for op in ops:
        step = ALIGN_BYTES // DTYPE_BYTES[dtype_of(op)]
        for dim in _LEADING.get(op.kind, ()):
            x = float(getattr(op, dim))
            if x % step:
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
            "as aligned ones (docs/accuracy.md, BLOOM_PREQUEL: the measured runs with such heads)")
