"""RoPE's elementwise ops as each stack's code runs them (split from elementwise_ops.py, whose `Graph` they
build on): torch's rotate_half (transformers apply_rotary_pos_emb, validation/train_step.py) and torchtitan's
complex multiply; "te" is one fused kernel each way. Backward ops follow autograd's formulas
(tools/autograd/derivatives.yaml, torch 2.13).

Which ops run torch's generic elementwise loop (`Op.strided`: an operand is a strided view or broadcast; timed
with the profile's `memory_strided` table, measured on the lent H100 by validation/h100_strided_table.py):
rotate_half runs on Q and K as [b, heads, s, d] views of the projection's [b·s, heads·d] output (transpose) with
cos / sin broadcast over the heads, so all its products, sums, negations and copies do (the lent H100's profiled
harness step ran every one of them as `elementwise_kernel<128, 4>`, its fills vectorised); torchtitan's complex
multiply reads the complex64 table broadcast over batch and heads, its casts contiguous tensors.
"""
from __future__ import annotations

from .elementwise_ops import FP32, Graph, Op

# transformers' apply_rotary_pos_emb computes q·cos before rotate_half slices q; validation/train_step.py slices q
# first. Autograd runs the later-created nodes first, so the order in which q's three gradients arrive and are
# added differs, and with it which add has a strided operand (the ops and bytes are the same).
ROTATE_HALF = ("rotate_half", "rotate_half_sliced")


def rope_forward(g: Graph, impl: str, p: str, q: str, table: str | None, *, group: str = "rope") -> str:
    """RoPE on one tensor q (n elements; `table`: the rotation table of the layer's tokens, T·d elements).

    te: one kernel, read q, write q' (the table is small). complex (torchtitan ComplexRoPE, models/common/
    rope.py: view_as_complex(q.float()) * freqs_cis, view_as_real, .type_as(q)): _to_copy read e, write 4;
    complex mul read 4 + the complex64 table, write 4; _to_copy read 4, write e (the casts are no ops in
    fp32). rotate_half (transformers apply_rotary_pos_emb: q·cos + cat(−q₂, q₁)·sin, cos/sin in q's dtype;
    rotate_half_sliced the same with the halves sliced first):
    mul read e + cos, write e; neg read e/2, write e/2; cat read e, write e; mul read e + sin, write e;
    add read 2e, write e.
    """
    out = g.like(f"{p}.out", q)
    g.inputs[p] = q
    if impl == "complex":
        q32, c1 = g.cast(q, f"{p}.q32", FP32)
        rot = g.like(f"{p}.rot", q, FP32) if g.e != FP32 else out
        _, c2 = g.cast(rot, out, g.e) if g.e != FP32 else (out, [])
        ops = [*c1, Op("mul", (q32, table), (rot,), strided=True), *c2]
    elif impl in ROTATE_HALF:
        n = g.size[q][0]
        lo, hi, ng = g.t(f"{p}.lo", n / 2), g.t(f"{p}.hi", n / 2), g.t(f"{p}.neg", n / 2)
        m1, rh, m2 = g.like(f"{p}.m1", q), g.like(f"{p}.rh", q), g.like(f"{p}.m2", q)
        ops = [Op("mul", (q, f"{table}.cos"), (m1,), strided=True), Op("neg", (hi,), (ng,), strided=True),
               Op("cat", (ng, lo), (rh,), strided=True), Op("mul", (rh, f"{table}.sin"), (m2,), strided=True),
               Op("add", (m1, m2), (out,), strided=True)]
    else:
        ops = []
    g.block("forward", p, group, (q,), (out,), ops)
    return out


def rope_backward(g: Graph, impl: str, p: str, dout: str, table: str | None, *, group: str = "rope",
                  clone: bool = True) -> str:
    """dq of `rope_forward`. te: read dq', write dq. complex: the cast back (read e, write 4), grad ·
    conj(freqs) (read 4 + table, write 4; the conjugate view of the small table is materialised first, a
    copy kernel of its own), the cast (read 4, write e). rotate_half
    (autograd): mul dq'·sin and dq'·cos (read e + table, write e each), neg of the first half (e/2, e/2), two
    slice_backward (each a zero fill of the whole tensor, write e, and a copy of its half, e/2 + e/2; aten
    TensorShape.cpp), two adds accumulating the three gradients of q (read 2e, write e each) and the copy
    that lays the [b, heads, s, d] gradient out as the projection's [b·s, heads·d] (read e, write e; the
    view's backward on a non-contiguous gradient, seen under torch.profiler as clone; `clone` False: the caller
    lays out Q, K and V's gradients together, as a fused projection's views do)."""
    q = g.inputs[p]
    dq = g.like(f"d.{p}.q", q)
    if impl == "complex":
        d32, c1 = g.cast(dout, f"d.{p}.o32", FP32)
        dr = g.like(f"d.{p}.r32", q, FP32) if g.e != FP32 else dq
        _, c2 = g.cast(dr, dq, g.e) if g.e != FP32 else (dq, [])
        conj = g.small(f"d.{p}.conj")[0]
        ops = [*c1, Op("resolve_conj", (), (conj,)), Op("mul", (d32, table), (dr,), strided=True), *c2]
    elif impl in ROTATE_HALF:
        n = g.size[q][0]
        drh, dm1, acc1 = (g.like(f"d.{p}.{k}", q) for k in ("rh", "m1", "acc1"))
        acc2 = g.like(f"d.{p}.acc2", q) if clone else dq
        lo, hi, dng, h1, h2 = (g.t(f"d.{p}.{k}", n / 2) for k in ("lo", "hi", "ng", "h1", "h2"))
        sb1, sb2 = g.like(f"d.{p}.sb1", q), g.like(f"d.{p}.sb2", q)
        ops = [Op("mul", (dout, f"{table}.sin"), (drh,), strided=True),
               Op("mul", (dout, f"{table}.cos"), (dm1,), strided=True), Op("neg", (lo,), (dng,), strided=True),
               Op("zeros", (), (sb1,)), Op("copy_", (dng,), (h1,), strided=True), Op("zeros", (), (sb2,)),
               Op("copy_", (hi,), (h2,), strided=True)]
        if impl == "rotate_half":  # q·cos's gradient arrives last: the two halves' (contiguous) are added first
            ops += [Op("add", (sb1, sb2), (acc1,)), Op("add", (acc1, dm1), (acc2,), strided=True)]
        else:
            ops += [Op("add", (dm1, sb1), (acc1,), strided=True), Op("add", (acc1, sb2), (acc2,), strided=True)]
        ops += [Op("clone", (acc2,), (dq,), strided=True)] if clone else []
    else:
        ops = []
    g.block("backward", p, group, (dout,), (dq,), ops)
    return dq


def rope_tables(g: Graph, impl: str, tokens, positions, head_dim) -> str | None:
    """The rotation tables the eager RoPE ops read: torchtitan's complex64 freqs_cis, one row per position
    (s/c·d/2 values, 8 bytes each, broadcast over the batch), or transformers' cos and sin, one row per token
    (position_ids are per sequence: T·d values each, in the activation dtype)."""
    if impl == "complex":
        return g.t("rope.freqs", positions * head_dim / 2, 8.0)
    if impl in ROTATE_HALF:
        g.t("rope.cos", tokens * head_dim)
        g.t("rope.sin", tokens * head_dim)
        return "rope"
    return None
