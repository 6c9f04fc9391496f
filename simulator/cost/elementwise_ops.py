"""The elementwise ops of a transformer layer as each stack's code runs them: one function per building block.

A `Graph` holds named tensors (elements, bytes per element) and the blocks of one layer's forward and
backward. A block (a norm, RoPE on one tensor, the FFN activation, a residual add, ...) has an interface,
the tensors it reads and writes as one kernel (what a fused kernel moves, and what torch.compile's regions
see), and, where the stack's code runs it as several aten ops, those ops with the tensors each reads and
writes. No op carries a byte count of its own: elementwise.py derives every byte from the tensors
(`region_bytes`). Backward ops follow autograd's formulas (tools/autograd/derivatives.yaml, torch 2.13).

Implementations (elementwise.py `SETTINGS` picks them per Stack.elementwise):
- norm: "te" one fused kernel each way (Transformer Engine rmsnorm_fwd/bwd, apex FusedLayerNorm);
  "torch": torch's own kernels, nn.RMSNorm → aten::_fused_rms_norm on CUDA (layer_norm_kernel.cu
  vectorized_layer_norm_kernel<T, float, rms_norm=true>, seen in validation/h100/kernel_breakdown.csv),
  nn.LayerNorm → native_layer_norm; the backward is two kernels, grad input and the weight-gradient
  reduction, each reading dy and x; "hf": transformers' LlamaRMSNorm op by op (`hf_rmsnorm_*`).
- RoPE (rope_ops.py): "te" (fused_rope), "complex" (torchtitan ComplexRoPE.apply_rotary_emb), "rotate_half"
  (transformers apply_rotary_pos_emb).
- activation: "fused" (Megatron bias_swiglu / bias_gelu), "eager" (F.silu(g) * u, F.gelu).
- softmax without FlashAttention: "fused" (Megatron FusedScaleMaskSoftmax), "eager" (plain PyTorch
  softmax(QKᵀ/√d masked): div, masked_fill, softmax), "hf" (eager_attention_forward: ·scaling, + mask,
  softmax in fp32, cast back).
Small tensors (per-row statistics such as rstd, norm weights, the masked_fill mask) count 0 bytes: they are
O(tokens) or O(width) against the O(tokens·width) tensors (under 1/width of a block's bytes)."""
from __future__ import annotations

from dataclasses import dataclass

FP32 = 4.0


class Lin(dict):
    """A size as a linear combination of named layer sizes {name: coefficient} (elementwise.py `_dims`): the
    graph is built once per model and setting and evaluated for any layout (scalars or arrays)."""

    def __add__(self, other):
        out = Lin(self)
        for k, c in (other or {}).items():
            out[k] = out.get(k, 0.0) + c
        return out

    __radd__ = __add__  # sum() starts from 0

    def __sub__(self, other):
        return self + Lin(other) * -1.0

    def __mul__(self, c):
        return Lin({k: v * c for k, v in self.items()})

    __rmul__ = __mul__

    def __truediv__(self, c):
        return self * (1.0 / c)

    def value(self, sizes: dict):
        """The number for `sizes` {name: value}: Σ coefficient · value (0.0 when empty)."""
        return sum((c * sizes[k] for k, c in self.items()), 0.0)


@dataclass(frozen=True)
class Op:
    """One aten op (one GPU kernel, `kernels` for ops that launch several): the tensors it reads and writes.
    `strided`: an operand is a strided (non-contiguous) view or broadcast, so torch runs its generic elementwise
    loop (`elementwise_kernel<128, 4>`) instead of the vectorised kernel, which needs every operand contiguous in one
    layout (TensorIterator `is_contiguous`, aten/src/ATen/native/cuda/CUDALoops.cuh `gpu_kernel_impl`); the
    profile's `memory_strided` table times it (memory_ops.py)."""

    name: str
    reads: tuple
    writes: tuple
    kernels: int = 1
    strided: bool = False
    reduction: bool = False  # reduces along a dimension (norms, softmax, sums): the `memory_reduction` table
    indexed: bool = False  # writes rows by an index tensor (index_put_): the `memory_indexed` table


@dataclass(frozen=True, kw_only=True)
class Block:
    """A building block's forward or backward: its interface (reads, writes) and its eager ops (empty: the
    block runs as one kernel over its interface). `boundary`: a GEMM or attention kernel (not elementwise; a
    torch.compile region never spans it)."""

    name: str
    group: str
    phase: str
    reads: tuple
    writes: tuple
    ops: tuple = ()
    ffn: bool = False
    core: bool = False
    boundary: bool = False
    reduction: bool = False  # as one kernel (no ops), a row reduction (a fused norm or softmax)


class Graph:
    """Tensors (elements as `Lin`, bytes per element) and blocks of one layer (forward blocks in order,
    backward blocks in the order they run)."""

    def __init__(self, e: float):
        self.e = float(e)
        self.size: dict[str, tuple] = {}
        self.blocks: list[Block] = []
        self.inputs: dict[str, str] = {}  # norm prefix -> the tensor it normalised (its backward reads it)

    def t(self, name: str, elems, nbytes: float | None = None) -> str:
        self.size[name] = (elems, self.e if nbytes is None else float(nbytes))
        return name

    def small(self, *names: str) -> tuple:
        for n in names:
            self.size[n] = (Lin(), 0.0)
        return names

    def like(self, name: str, src: str, nbytes: float | None = None) -> str:
        """A tensor of `src`'s elements (`nbytes` per element, default src's)."""
        elems, b = self.size[src]
        return self.t(name, elems, b if nbytes is None else nbytes)

    def cast(self, src: str, name: str, nbytes: float) -> tuple[str, list]:
        """`src.to(dtype)`: a copy kernel when the dtype changes, else torch returns `src` itself (no op)."""
        if self.size[src][1] == nbytes:
            return src, []
        return self.like(name, src, nbytes), [Op("_to_copy", (src,), (name,))]

    def block(self, phase, name, group, reads, writes, ops=(), **flags) -> None:
        self.blocks.append(Block(name=name, group=group, phase=phase, reads=tuple(reads), writes=tuple(writes),
                                 ops=tuple(ops), **flags))

    def boundary(self, phase, name, reads, writes) -> None:
        self.block(phase, name, "gemm", reads, writes, boundary=True)


# ---- norms ----------------------------------------------------------------------------------------------
def norm_forward(g: Graph, impl: str, p: str, x: str, *, group: str = "norms", **flags) -> str:
    """y = norm(x) over the last dimension. te: one kernel, read x, write y. torch: the same one kernel
    (aten::_fused_rms_norm / native_layer_norm, rstd small). hf: `hf_rmsnorm_forward`."""
    y = g.like(f"{p}.y", x)
    g.inputs[p] = x
    ops = (hf_rmsnorm_forward(g, p, x, y) if impl == "hf" else
           [Op("norm", (x,), (y,), reduction=True)] if impl == "torch" else [])
    g.block("forward", p, group, (x,), (y,), ops, reduction=True, **flags)
    return y


def norm_backward(g: Graph, impl: str, p: str, dy: str, *, group: str = "norms", **flags) -> str:
    """dx of y = norm(x) (the weight gradient is a reduction to a small tensor). te: one kernel, read dy, x,
    write dx. torch: two kernels (layer_norm_kernel.cu: layer_norm_grad_input_kernel reads dy, x, rstd,
    writes dx; the γ-gradient kernel reads dy, x again). hf: `hf_rmsnorm_backward`."""
    x = g.inputs[p]
    dx = g.like(f"d.{p}.x", x)
    if impl == "hf":
        ops = hf_rmsnorm_backward(g, p, dy, x, dx)
    elif impl == "torch":
        dw = g.small(f"d.{p}.w")[0]
        ops = [Op("norm_grad_input", (dy, x), (dx,), reduction=True),
               Op("norm_grad_weight", (dy, x), (dw,), reduction=True)]
    else:
        ops = []
    g.block("backward", p, group, (dy, x), (dx,), ops, reduction=True, **flags)
    return dx


def hf_rmsnorm_forward(g: Graph, p: str, x: str, y: str) -> list:
    """transformers LlamaRMSNorm.forward (models/llama/modeling_llama.py, 5.x), per element of x (e bytes):

        h32 = x.to(float32)                 _to_copy   read e, write 4   (no op in fp32)
        var = h32.pow(2).mean(-1, keepdim)  pow        read 4, write 4;  mean: read 4, write a row value
        r = rsqrt(var + eps)                add, rsqrt on row values (small)
        n32 = h32 * r                       mul        read 4, write 4
        n = n32.to(x.dtype)                 _to_copy   read 4, write e   (no op in fp32)
        y = weight * n                      mul        read e, write e
    The products with the row value r and with the weight broadcast an operand (`Op.strided`).
    """
    x32, c1 = g.cast(x, f"{p}.x32", FP32)
    sq, n32 = g.like(f"{p}.sq", x, FP32), g.like(f"{p}.n32", x, FP32)
    var, ve, r, w = g.small(f"{p}.var", f"{p}.ve", f"{p}.r", f"{p}.w")
    n, c2 = g.cast(n32, f"{p}.n", g.e)
    return [*c1, Op("pow", (x32,), (sq,)), Op("mean", (sq,), (var,), reduction=True), Op("add", (var,), (ve,)),
            Op("rsqrt", (ve,), (r,)), Op("mul", (x32, r), (n32,), strided=True), *c2,
            Op("mul", (w, n), (y,), strided=True)]


def hf_rmsnorm_backward(g: Graph, p: str, dy: str, x: str, dx: str) -> list:
    """Autograd's backward of `hf_rmsnorm_forward` (derivatives.yaml: mul, _to_copy, rsqrt
    −0.5·grad·result³, mean grad.expand(x.shape)/h, pow grad·2·x^(2−1)), per element (e bytes):

        dn = dy * weight; dw = sum(dy * n)          mul read e, write e; mul read 2e, write e; sum read e
        dn32 = dn.to(float32)                       _to_copy read e, write 4
        dr = sum(dn32 * h32); d1 = dn32 * r         mul read 8, write 4; mul read 4, write 4; sum read 4
        dvar = -0.5 * dr * r³                       pow, mul, mul on row values (small)
        dsq = dvar.expand(x.shape) / h              div        write 4
        d2 = dsq * (2 * h32.pow(1))                 pow read 4, write 4; mul read 4, write 4; mul read 8, write 4
        dx = (d1 + d2).to(x.dtype)                  add read 8, write 4; _to_copy read 4, write e
    The products with the weight and with r, and the division of the expanded row values, broadcast an operand.
    """
    x32 = f"{p}.x32" if f"{p}.x32" in g.size else x
    n = f"{p}.n" if f"{p}.n" in g.size else f"{p}.n32"
    dn, dwt = g.like(f"d.{p}.n", x), g.like(f"d.{p}.wt", x)
    dw, dr, r3, r3s, dvar = g.small(f"d.{p}.w", f"d.{p}.r", f"d.{p}.r3", f"d.{p}.r3s", f"d.{p}.var")
    dn32, c1 = g.cast(dn, f"d.{p}.n32", FP32)
    drt, d1, dsq, p1, p2, d2 = (g.like(f"d.{p}.{k}", x, FP32) for k in ("rt", "a", "sq", "p1", "p2", "b"))
    dx32 = g.like(f"d.{p}.x32", x, FP32) if g.e != FP32 else dx
    _, c2 = g.cast(dx32, dx, g.e) if g.e != FP32 else (dx, [])
    return [Op("mul", (dy,), (dn,), strided=True), Op("mul", (dy, n), (dwt,)), Op("sum", (dwt,), (dw,), reduction=True),
            *c1, Op("mul", (dn32, x32), (drt,)), Op("mul", (dn32,), (d1,), strided=True),
            Op("sum", (drt,), (dr,), reduction=True),
            Op("pow", (), (r3,)), Op("mul", (), (r3s,)), Op("mul", (), (dvar,)), Op("div", (), (dsq,), strided=True),
            Op("pow", (x32,), (p1,)), Op("mul", (p1,), (p2,)), Op("mul", (dsq, p2), (d2,)),
            Op("add", (d1, d2), (dx32,)), *c2]


# ---- FFN activation ------------------------------------------------------------------------------------
def act_forward(g: Graph, impl: str, glu: bool, ins: tuple, *, kind: str = "", **flags) -> str:
    """a = act(gate) * up (GLU) or act(x). fused: one kernel (read gate, up, write a). eager
    (F.silu(g) * u, torchtitan FeedForward, transformers LlamaMLP): silu read e, write e; mul read 2e, write
    e. chunked (one gate/up GEMM, `g, u = gate_up(x).chunk(2, -1)`: validation/train_step.py, Phi-3's and
    nanotron's MLP): the same ops on the two halves, strided views of the GEMM's output (`Op.strided`). Without
    GLU one gelu kernel (read e, write e) in every setting. `kind` "squared-relu" (Nemotron-4, relu(x)²): two
    kernels in every setting, relu read e, write e, then pow (or square) read e, write e: Megatron-core's
    squared_relu is torch.pow(F.relu(x), 2) with no fused kernel (megatron/core/activations.py; the MLP fuses only
    gelu and swiglu: megatron/core/transformer/mlp.py), transformers' ReLUSquaredActivation square(relu(x))."""
    a = g.like("act.a", ins[0])
    ops = []
    if kind == "squared-relu":
        r = g.like("act.r", ins[0])
        ops = [Op("relu", (ins[0],), (r,)), Op("pow", (r,), (a,))]
    elif impl in ("eager", "chunked") and glu:
        s, strided = g.like("act.s", ins[0]), impl == "chunked"
        ops = [Op("silu", (ins[0],), (s,), strided=strided), Op("mul", (s, ins[1]), (a,), strided=strided)]
    g.block("forward", "act", "mlp_activation", ins, (a,), ops, ffn=True, **flags)
    return a


def act_backward(g: Graph, impl: str, glu: bool, da: str, ins: tuple, *, kind: str = "", **flags) -> tuple:
    """Gradients of `act_forward`. fused: one kernel (read da, gate, up; write dgate, dup). eager GLU
    (autograd: mul's grad·other for each input, silu_backward): mul read da, up, write ds; mul read da,
    silu(gate), write dup; silu_backward read ds, gate, write dgate. chunked: the same, the ops reading a half
    strided, then chunk's backward concatenates the two gradients into the GEMM output's gradient (cat: read 2e,
    write 2e per element of a half; one tensor returned). gelu: gelu_backward read dy, x, write dx. squared-relu
    (autograd, derivatives.yaml pow_backward grad·(2·r.pow(1)), then relu's threshold_backward on the saved relu
    output r): pow read r, write p; mul by 2 read p, write p2; mul read da, p2, write dr; threshold_backward read
    dr, r, write dx; its backward reads r, not the GEMM's output."""
    if kind == "squared-relu":
        r, dx = "act.r", g.like("d." + ins[0], ins[0])
        p, p2, dr = (g.like(f"d.act.{n}", ins[0]) for n in ("p", "p2", "r"))
        ops = [Op("pow", (r,), (p,)), Op("mul", (p,), (p2,)), Op("mul", (da, p2), (dr,)),
               Op("threshold_backward", (dr, r), (dx,))]
        g.block("backward", "act", "mlp_activation", (da, r), (dx,), ops, ffn=True, **flags)
        return (dx,)
    d = tuple(g.like(f"d.{t}", t) for t in ins)
    ops = []
    if impl in ("eager", "chunked") and glu:
        ds, strided = g.like("d.act.s", ins[0]), impl == "chunked"
        ops = [Op("mul", (da, ins[1]), (ds,), strided=strided), Op("mul", (da, "act.s"), (d[1],)),
               Op("silu_backward", (ds, ins[0]), (d[0],), strided=strided)]
        if strided:
            gu = g.t("d.up.gu", g.size[ins[0]][0] * 2.0)
            g.block("backward", "act", "mlp_activation", (da, *ins), (gu,), ops + [Op("cat", d, (gu,))], ffn=True,
                    **flags)
            return (gu,)
    g.block("backward", "act", "mlp_activation", (da, *ins), d, ops, ffn=True, **flags)
    return d


# ---- residual adds, dropout, gradient accumulation, layout copies ---------------------------------------
def add_forward(g: Graph, p: str, a: str, b: str, out: str, *, group: str = "residual_adds", **flags) -> str:
    """out = a + b: one add kernel in every stack (read 2, write 1)."""
    g.like(out, a)
    g.block("forward", p, group, (a, b), (out,), **flags)
    return out


def accumulate(g: Graph, p: str, grads: tuple, out: str, *, group: str = "residual_adds", **flags) -> str:
    """The gradient of a tensor that several ops read: autograd adds the contributions (InputBuffer::
    accumulate), one add per extra contribution (read 2, write 1 each); as one kernel, read all, write 1."""
    g.like(out, grads[0])
    acc, ops = grads[0], []
    for i, gr in enumerate(grads[1:]):
        nxt = out if i == len(grads) - 2 else g.like(f"{out}+{i}", grads[0])
        ops.append(Op("add", (acc, gr), (nxt,)))
        acc = nxt
    g.block("backward", p, group, grads, (out,), ops if len(grads) > 2 else (), **flags)
    return out


def dropout_forward(g: Graph, p: str, x: str, *, group: str = "hidden_dropout", **flags) -> str:
    """y = dropout(x): one kernel (native_dropout; Megatron's bias-dropout-add counted apart from its add):
    read x, write y and a 1-byte mask."""
    y, mask = g.like(f"{p}.y", x), g.like(f"{p}.mask", x, 1.0)
    g.block("forward", p, group, (x,), (y, mask), **flags)
    return y


def dropout_backward(g: Graph, p: str, dy: str, *, group: str = "hidden_dropout", **flags) -> str:
    """native_dropout_backward: read dy and the mask, write dx."""
    dx = g.like(f"d.{p}.x", dy)
    g.block("backward", p, group, (dy, f"{p}.mask"), (dx,), **flags)
    return dx


def copies(g: Graph, phase: str, p: str, srcs: tuple, outs: tuple, group: str, op: str = "clone",
           strided: bool = True, **flags):
    """One kernel per (src, out) pair reading src and writing out (both registered by the caller), as one
    block: torchtitan FusedQKVLinear's `.reshape(...).contiguous()` of the q, k, v views of the fused
    projection (models/common/attention.py), the repeat of K and V to every query head (transformers
    repeat_kv's expand, torch repeat_interleave) and its backward, a sum over the repeats (`strided` False: a
    reduction, not the elementwise loop). The copies read a strided or expanded view (`Op.strided`)."""
    g.block(phase, p, group, srcs, outs, [Op(op, (s,), (o,), strided=strided) for s, o in zip(srcs, outs)], **flags)


# ---- softmax over the scores (no FlashAttention) --------------------------------------------------------
def softmax_forward(g: Graph, impl: str, S: str, mask_elems) -> str:
    """P = softmax(scale·S + causal mask) over S (b·heads/t·s/c·s scores). fused (Megatron
    FusedScaleMaskSoftmax): read S, write P. eager (plain PyTorch, e.g. validation/train_step.py): div by
    √d, masked_fill, softmax: read e, write e each. hf (transformers eager_attention_forward): mul by
    scaling (e, e); + causal_mask (read e + the b·s·s mask, write e); softmax(dtype=float32) (read e,
    write 4); .to(q.dtype) (read 4, write e). The masked_fill and the mask's add broadcast the mask (`Op.strided`)."""
    P = g.like("sm.P", S)
    if impl == "eager":
        s1, s2 = g.like("sm.s1", S), g.like("sm.s2", S)
        ops = [Op("div", (S,), (s1,)), Op("masked_fill", (s1,), (s2,), strided=True),
               Op("_softmax", (s2,), (P,), reduction=True)]
    elif impl == "hf":
        s1, s2, m = g.like("sm.s1", S), g.like("sm.s2", S), g.t("sm.mask", mask_elems)
        p32 = g.like("sm.P32", S, FP32) if g.e != FP32 else P
        _, c = g.cast(p32, P, g.e) if g.e != FP32 else (P, [])
        ops = [Op("mul", (S,), (s1,)), Op("add", (s1, m), (s2,), strided=True),
               Op("_softmax", (s2,), (p32,), reduction=True), *c]
    else:
        ops = []
    g.block("forward", "softmax", "softmax", (S,), (P,), ops, core=True, reduction=True)
    return P


def softmax_backward(g: Graph, impl: str, dP: str) -> str:
    """dS of `softmax_forward`. fused: read P, dP, write dS. eager: _softmax_backward_data (read P, dP,
    write dS), masked_fill of the gradient, div by √d (read e, write e each). hf: dP.to(float32) (e, 4),
    _softmax_backward_data on the fp32 output (read 4 + 4, write e), mul by scaling (e, e)."""
    dS = g.like("d.sm.S", dP)
    P = "sm.P"
    if impl == "eager":
        a, b = g.like("d.sm.s2", dP), g.like("d.sm.s1", dP)
        ops = [Op("_softmax_backward_data", (dP, P), (a,), reduction=True), Op("masked_fill", (a,), (b,), strided=True),
               Op("div", (b,), (dS,))]
    elif impl == "hf":
        d32, c = g.cast(dP, "d.sm.P32", FP32)
        a = g.like("d.sm.s2", dP)
        ops = [*c, Op("_softmax_backward_data", (d32, "sm.P32" if "sm.P32" in g.size else P), (a,), reduction=True),
               Op("mul", (a,), (dS,))]
    else:
        ops = []
    g.block("backward", "softmax", "softmax", (dP, P), (dS,), ops, core=True, reduction=True)
    return dS


# ---- MoE (one kernel each in every stack; not yet per stack) --------------------------------------------
def moe_forward(g: Graph, tokens_h, routed_h, scores) -> tuple:
    """Router softmax/top-k over the fp32 scores `moe.logits` (read, write 4 bytes each) and the token
    dispatch (read T·h, write the k·T·h routed copies); the combine is a block of the layer (elementwise.py)."""
    logits, probs = "moe.logits", g.t("moe.probs", scores, FP32)
    g.block("forward", "router", "router_softmax_topk", (logits,), (probs,), ffn=True)
    x, xp = g.t("moe.in", tokens_h), g.t("moe.perm", routed_h)
    g.block("forward", "dispatch", "moe_permute", (x,), (xp,), ffn=True)
    return xp


def sort_chunks(g: Graph, phase: str, name: str, size) -> None:
    """Megatron-Core's all-to-all dispatcher re-sorts the routed copies it received by local expert after the
    dispatch and back before the combine (token_dispatcher.py dispatch_postprocess and combine_preprocess,
    sort_chunks_by_idxs with --moe-permute-fusion: Transformer Engine's moe_sort_chunks_by_index, one map kernel
    and one copy; the backward sorts the gradients the same way; NVIDIA/Megatron-LM core_v0.14.0-0.16.0): each
    reads and writes every routed copy (`size`: layer_sizes' `sorted`, none with a single local expert)."""
    src, dst = g.t(f"{phase}.{name}.in", size), g.t(f"{phase}.{name}.out", size)
    g.block(phase, name, "moe_sort_chunks", (src,), (dst,), ffn=True)


def moe_backward(g: Graph, dxp: str) -> str:
    """Dispatch backward (read the routed gradients, write T·h) and the router's (read, write 4 bytes)."""
    dx = g.like("d.moe.in", "moe.in")
    g.block("backward", "dispatch", "moe_permute", (dxp,), (dx,), ffn=True)
    dl, dp = g.like("d.moe.logits", "moe.logits"), g.like("d.moe.probs", "moe.probs")
    g.block("backward", "router", "router_softmax_topk", (dp,), (dl,), ffn=True)
    return dx
