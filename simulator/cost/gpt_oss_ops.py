"""GPT-OSS's expert activation and expert output bias as each stack's code runs them (elementwise.py builds them
into the layer graph for models with `mlp = "clamped-swiglu"` and `expert_bias`).

The activation (OpenAI gpt-oss; transformers GptOssExperts._apply_gate): gate and up clamped at limit 7
(gate from above only, up on both sides), then a = g·σ(1.702·g)·(u + 1). Megatron-core writes it as its
quick-GEGLU with `activation_func_clamp_value` 7 and `glu_linear_offset` 1.

- fused (Megatron-core TEGroupedMLP, `bias_activation_fusion`: fusions/fused_bias_geglu.py
  `weighted_bias_quick_geglu_impl`): the clamps run in eager PyTorch on the two halves of the first GEMM's
  output (strided views), `torch.cat` joins them, and one torch.compile'd kernel (`jit_fuser`) computes
  the weighted quick-GEGLU from the joined tensor, which its autograd Function keeps for backward.
  Backward: one compiled kernel (read the output gradient and the joined tensor, write its gradient), then
  autograd's clamp backward per half (derivatives.yaml clamp: `where(self <= max, grad, 0)` one-sided,
  `(self >= min).logical_and_(self <= max)` two-sided, each beginning with the 0-dim zero) and the chunk's
  backward, a cat of the two halves' gradients into the GEMM output's gradient.
- any other setting (transformers GptOssExperts._apply_gate, op by op): clamp, clamp, gate·1.702, sigmoid,
  gate·σ, up + 1, product; autograd's backward of each, the gate's two gradients added, the clamps' backward
  as above, and each strided slice's `slice_backward` (a zero fill of the whole tensor and a copy into its
  slice) with the two full-size gradients added.

The expert output bias under Megatron-core (moe/experts.py `TEGroupedMLP._apply_bias`, the eager path of the
releases Megatron-Bridge's GPT-OSS recipes ran): per local expert `t + b·p` on its rows of the second GEMM's
output (b the expert's bias, p the token's routing weight), then a cat of the experts' rows. Each op here
stands for that op over all local experts (bytes summed; the launches are one per expert, which only an
eager launch-bound stack would feel: the megatron stack is not launch-bound). Backward: mul's gradients of b
and p (grad·p and grad·b, each then summed to the small tensor's shape) and the split's cat. Tensors of
O(tokens) or O(width) (the routing weights, the bias, their gradients) count 0 bytes (elementwise_ops.py).
Checked op by op against the aten ops the same code records on CPU (tests/test_gpt_oss_ops.py).
"""
from __future__ import annotations

from .elementwise_ops import Graph, Op

FLAG = 1.0  # bytes per element of a bool mask


def _clamp_backward(g: Graph, p: str, grad: str, x: str, out: str, *, two_sided: bool, strided: bool) -> list:
    """autograd's clamp backward of `x` (derivatives.yaml clamp -> clamp_backward, aten FunctionsManual.cpp): the
    0-dim zero, the mask (le; ge, le and logical_and_ when both bounds are set) and `where(mask, grad, 0)`."""
    zero = g.small(f"{p}.zero")[0]
    le = g.like(f"{p}.le", x, FLAG)
    ops = [Op("scalar_tensor", (), (zero,))]
    if two_sided:
        ge, both = g.like(f"{p}.ge", x, FLAG), g.like(f"{p}.mask", x, FLAG)
        ops += [Op("ge", (x,), (ge,), strided=True), Op("le", (x,), (le,), strided=True),
                Op("logical_and_", (ge, le), (both,))]
        le = both
    else:
        ops += [Op("le", (x,), (le,), strided=True)]
    return ops + [Op("where", (le, grad, zero), (out,), strided=strided)]


def clamped_swiglu_forward(g: Graph, impl: str, ins: tuple, **flags) -> str:
    """a = clamp(g)·σ(1.702·clamp(g))·(clamp(u) + 1) over the GEMM output halves `ins` (module docstring)."""
    gi, ui = ins
    a, cg, cu = g.like("act.a", gi), g.like("act.cg", gi), g.like("act.cu", ui)
    ops = [Op("clamp", (gi,), (cg,), strided=True), Op("clamp", (ui,), (cu,), strided=True)]
    if impl == "fused":
        c = g.t("act.c", g.size[gi][0] * 2.0)
        ops += [Op("cat", (cg, cu), (c,)), Op("quick_geglu", (c,), (a,))]
    else:
        ga, sg, glu, u1 = (g.like(f"act.{n}", gi) for n in ("ga", "sg", "glu", "u1"))
        ops += [Op("mul", (cg,), (ga,)), Op("sigmoid", (ga,), (sg,)), Op("mul", (cg, sg), (glu,)),
                Op("add", (cu,), (u1,)), Op("mul", (u1, glu), (a,))]
    g.block("forward", "act", "mlp_activation", ins, (a,), ops, ffn=True, **flags)
    return a


def clamped_swiglu_backward(g: Graph, impl: str, da: str, ins: tuple, **flags) -> tuple:
    """The gradient of the first GEMM's output (one tensor of both halves) from `da` (module docstring)."""
    gi, ui = ins
    n = g.size[gi][0]
    gu = g.t("d.up.gu", n * 2.0)
    dg, du = g.like("d.up.g", gi), g.like("d.up.u", ui)
    if impl == "fused":
        dcg, dcu = g.like("d.act.cg", gi), g.like("d.act.cu", ui)
        ops = [Op("quick_geglu_backward", (da, "act.c"), (dcg, dcu)),
               *_clamp_backward(g, "d.act.clamp_u", dcu, ui, du, two_sided=True, strided=True),
               *_clamp_backward(g, "d.act.clamp_g", dcg, gi, dg, two_sided=False, strided=True),
               Op("cat", (dg, du), (gu,))]
    else:
        du1, dglu, dcg1, dsg, dga, dcg2, dcg = (g.like(f"d.act.{k}", gi)
                                                for k in ("u1", "glu", "cg1", "sg", "ga", "cg2", "cg"))
        full_g, full_u = g.t("d.act.full_g", n * 2.0), g.t("d.act.full_u", n * 2.0)
        ops = [Op("mul", (da, "act.glu"), (du1,)), Op("mul", (da, "act.u1"), (dglu,)),
               Op("mul", (dglu, "act.sg"), (dcg1,)), Op("mul", (dglu, "act.cg"), (dsg,)),
               Op("sigmoid_backward", (dsg, "act.sg"), (dga,)), Op("mul", (dga,), (dcg2,)),
               Op("add", (dcg1, dcg2), (dcg,)),
               *_clamp_backward(g, "d.act.clamp_u", du1, ui, du, two_sided=True, strided=False),
               *_clamp_backward(g, "d.act.clamp_g", dcg, gi, dg, two_sided=False, strided=False),
               Op("zeros", (), (full_g,)), Op("copy_", (dg,), (g.like("d.act.slice_g", gi),), strided=True),
               Op("zeros", (), (full_u,)), Op("copy_", (du,), (g.like("d.act.slice_u", ui),), strided=True),
               Op("add", (full_g, full_u), (gu,))]
    g.block("backward", "act", "mlp_activation", (da, *ins), (gu,), ops, ffn=True, **flags)
    return (gu,)


def expert_bias_forward(g: Graph, out: str) -> str:
    """Megatron-core's per-expert `t + b·p` on the second GEMM's output `out`, then the cat (module docstring)."""
    bp, t, y = g.like("moe.bias.bp", out), g.like("moe.bias.t", out), g.like("moe.out.b", out)
    ops = [Op("mul", g.small("moe.bias", "moe.bias.p"), (bp,), strided=True), Op("add", (out, bp), (t,)),
           Op("cat", (t,), (y,))]
    g.block("forward", "expert_bias", "expert_bias", (out,), (y,), ops, ffn=True)
    return y


def expert_bias_backward(g: Graph, dy: str, out: str) -> str:
    """The gradient of `out` (the split's cat of the experts' rows) and of the bias and routing weights (each
    a product with the gradient, summed to its small shape)."""
    gb, gp, dout = g.like("d.moe.bias.gb", dy), g.like("d.moe.bias.gp", dy), g.like("d." + out, out)
    db, dp = g.small("d.moe.bias", "d.moe.bias.p")
    ops = [Op("mul", (dy,), (gb,), strided=True), Op("sum", (gb,), (db,), reduction=True),
           Op("mul", (dy,), (gp,), strided=True), Op("sum", (gp,), (dp,), reduction=True),
           Op("cat", (dy,), (dout,))]
    g.block("backward", "expert_bias", "expert_bias", (dy,), (dout,), ops, ffn=True)
    return dout
