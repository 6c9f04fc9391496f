"""The stacks' elementwise op lists (simulator/cost/elementwise.py) against the ops torch really runs.

A transformers LlamaDecoderLayer (sdpa) and a plain-torch layer written as torchtitan's Llama3 block
(FusedQKVLinear, nn.RMSNorm, ComplexRoPE, SDPA with enable_gqa, FeedForward) run one forward and one
backward on CPU under a TorchDispatchMode that records every aten op with the tensors it reads and writes.
Measured bytes: each non-view op's inputs plus outputs (a broadcast input counted once, at its stored
size; an in-place op writes its first argument), leaving out the GEMMs (mm, bmm, addmm) and the attention
kernel with its backward. The op list's bytes for the same shapes must agree within TOL.

What the op list leaves out, and so the residual differences: tensors of O(tokens) or O(width) elements
(RMSNorm's row statistics, the norm weights and their reductions: about 1/h of a norm's bytes, ~1 % at
h = 256); views (reshape, transpose, view_as_complex, ...) are not kernels in either. Two CPU-build
details are set to what CUDA runs, each with its source: nn.RMSNorm dispatches to aten::_fused_rms_norm on
CUDA but decomposes on CPU, so the torchtitan-style layer calls a custom op with the CUDA kernels'
interface (`_fused_rms_norm` forward: read x, write y and rstd; backward: the grad-input kernel and the
weight-gradient kernel, each reading dy and x); `slice_backward` is a zero fill of the whole tensor and a
copy into its slice (aten TensorShape.cpp), two kernels, recorded as such.

Kernel counts: each recorded op is one kernel; they must equal the op list's kernels exactly, and the
counts of validation/cpu/layer_kernels.csv (torch.profiler leaf ops, CPU) up to the CPU-only ops
itemised in `test_hf_kernel_counts_match_the_profiled_csv`.
"""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from simulator.cost.elementwise import kernel_counts, layer_graph  # noqa: E402
from simulator.cost.memory_ops import memory_ops  # noqa: E402
from simulator.spec.model import ModelSpec  # noqa: E402
from simulator.spec.stack import load_stack  # noqa: E402
from simulator.spec.training import Training  # noqa: E402

TOL = 0.05  # relative, on the forward and on the backward bytes of one layer (measured residual: under 1 %)
H, HEADS, KV, FFN, S, B = 256, 8, 2, 704, 64, 2
GEMMS = ("mm", "bmm", "addmm", "matmul")
NO_KERNEL = {"_unsafe_view", "_reshape_alias", "empty", "empty_like", "empty_strided", "new_empty",
             "new_empty_strided", "lift_fresh", "detach", "alias"}
WRITE_ONLY = {"zero_", "fill_", "zeros", "new_zeros", "zeros_like", "ones_like", "full", "scalar_tensor"}


def _stored(t) -> int:
    """Bytes a tensor occupies once (broadcast, stride-0 dimensions counted once)."""
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        n *= size if stride else 1
    return n * t.element_size()


def _tensors(xs):
    for x in xs:
        if isinstance(x, torch.Tensor):
            yield x
        elif isinstance(x, (list, tuple)):
            yield from _tensors(x)


def _strided(t, shape) -> bool:
    """A strided view, or an operand broadcast to the op's `shape` (by its strides or its shape; a one-element
    tensor is a scalar to TensorIterator): what keeps torch off its vectorised elementwise kernel."""
    expanded = any(st == 0 and n > 1 for n, st in zip(t.shape, t.stride()))
    return not t.is_contiguous() or expanded or (t.numel() > 1 and tuple(t.shape) != tuple(shape))


class Recorder(TorchDispatchMode):
    """Every aten op that is a kernel: (name, bytes read, bytes written, kernels, "excluded" or "", an operand
    strided or broadcast)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        schema = func._schema
        if name in NO_KERNEL or any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
            return out  # a view or an allocation: no kernel
        if name.startswith(GEMMS) or name.startswith("_scaled_dot_product"):
            self.ops.append((name, 0, 0, 0, "excluded", False))
            return out
        ins = list(_tensors(list(args) + list(kwargs.values())))
        first = next(_tensors(out if isinstance(out, (tuple, list)) else [out]), None)
        if name == "cat":  # not TensorIterator: its vectorised variant needs contiguous inputs only
            strided = any(not t.is_contiguous() for t in ins)
        else:  # reductions and the norm kernels are not the elementwise loop
            strided = (first is not None and name not in ("mean", "sum") and not name.startswith("rms_")
                       and any(_strided(t, first.shape) for t in ins))
        if name in WRITE_ONLY or name == "copy_":
            ins = ins[1:] if schema.arguments[0].alias_info is not None else []
        outs = list(_tensors(out if isinstance(out, (tuple, list)) else [out]))
        read, written, kernels = sum(map(_stored, ins)), sum(map(_stored, outs)), 1
        if name == "slice_backward":  # zeros(input_sizes) + copy_ into the slice (TensorShape.cpp): 2 kernels
            written, kernels = written + read, 2
        self.ops.append((name, read, written, kernels, "", strided))
        return out


def measure(run, x, params, grad):
    """(forward ops, backward ops) of one forward and backward (gradients start as None: no accumulation
    into kept .grad buffers, which the GEMM model counts with the weight-gradient GEMMs)."""
    for p in params:
        p.grad = None
    with Recorder() as fwd:
        y = run(x)
    y = y[0] if isinstance(y, tuple) else y
    with Recorder() as bwd:
        y.backward(grad)
    return fwd.ops, bwd.ops


def totals(ops):
    kept = [o for o in ops if o[4] != "excluded"]
    return sum(o[1] + o[2] for o in kept), sum(o[3] for o in kept)


def model_spec():
    return ModelSpec(name="test", hidden_size=H, num_layers=1, num_heads=HEADS, num_kv_heads=KV, ffn_hidden_size=FFN,
                     vocab_size=1000)


def strided_kernels(ops) -> int:
    """Recorded kernels with a strided or broadcast operand (the zero fill of slice_backward is not one)."""
    return sum(1 for o in ops if o[4] != "excluded" and o[5])


def predicted_strided(stack, elementwise=None) -> tuple[int, int]:
    """The op list's kernels marked `strided`, forward and backward."""
    tr = Training(seq_length=S, global_batch_size=B, stack=load_stack(stack, elementwise=elementwise))
    g = layer_graph(model_spec(), tr)
    return tuple(sum(u.kernels for b in g.blocks if b.phase == ph for u in b.ops if u.strided)
                 for ph in ("forward", "backward"))


def predicted(stack, dtype_name, elementwise=None):
    tr = Training(seq_length=S, global_batch_size=B, precision=dtype_name,
                  stack=load_stack(stack, elementwise=elementwise))
    ops = memory_ops(model_spec(), tr, micro_batch_size=B)
    g = layer_graph(model_spec(), tr)
    k = kernel_counts(g)
    return (sum(float(o.forward_bytes) for o in ops), sum(float(o.backward_bytes) for o in ops),
            k["forward"]["elementwise"], k["backward"]["elementwise"])


# ---- the layers ------------------------------------------------------------------------------------------
def hf_layer(dtype):
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    cfg = transformers.LlamaConfig(hidden_size=H, num_attention_heads=HEADS, num_key_value_heads=KV,
                                   intermediate_size=FFN)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    layer = LlamaDecoderLayer(cfg, 0).to(dtype)
    pos = torch.arange(S)[None].expand(B, S)
    pe = tuple(t.to(dtype) for t in LlamaRotaryEmbedding(cfg)(torch.zeros(B, S, H, dtype=dtype), pos))
    return (lambda x: layer(x, position_embeddings=pe, attention_mask=None, position_ids=pos)), list(layer.parameters())


def _rms_norm_ops():
    """Custom ops with the interface of CUDA's aten::_fused_rms_norm and its two backward kernels."""
    lib = "parasim_elementwise_test"
    if hasattr(torch.ops, lib) and hasattr(getattr(torch.ops, lib), "rms_fwd"):
        return getattr(torch.ops, lib)

    @torch.library.custom_op(f"{lib}::rms_fwd", mutates_args=())
    def rms_fwd(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)
        return (x.float() * rstd).to(x.dtype) * w, rstd

    @torch.library.custom_op(f"{lib}::rms_grad_input", mutates_args=())
    def rms_grad_input(dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xh, g = x.float() * rstd, dy.float() * w.float()
        return (rstd * (g - xh * (g * xh).mean(-1, keepdim=True))).to(x.dtype)

    @torch.library.custom_op(f"{lib}::rms_grad_weight", mutates_args=())
    def rms_grad_weight(dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor) -> torch.Tensor:
        return (dy.float() * x.float() * rstd).flatten(0, -2).sum(0).to(x.dtype)

    def backward(ctx, dy, _):
        x, rstd, w = ctx.saved_tensors
        ops = getattr(torch.ops, lib)
        return ops.rms_grad_input(dy, x, rstd, w), ops.rms_grad_weight(dy, x, rstd)

    def setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], output[1], inputs[1])
        ctx.set_materialize_grads(False)  # rstd has no gradient (aten's formula takes only y's)

    rms_fwd.register_autograd(backward, setup_context=setup)
    return getattr(torch.ops, lib)


def titan_layer(dtype):
    """torchtitan's Llama3TransformerBlock (b5bcd76: models/llama3/model.py, models/common/attention.py
    FusedQKVLinear, rope.py ComplexRoPE, feed_forward.py FeedForward) in plain torch, one layer."""
    nn, F = torch.nn, torch.nn.functional
    d, r = H // HEADS, HEADS // KV + 2
    ops = _rms_norm_ops()
    torch.manual_seed(0)
    lin = {k: nn.Linear(i, o, bias=False).to(dtype) for k, (i, o) in dict(
        wqkv=(H, KV * r * d), wo=(H, H), w1=(H, FFN), w2=(FFN, H), w3=(H, FFN)).items()}
    norms = [torch.ones(H, dtype=dtype, requires_grad=True) for _ in range(2)]
    ang = torch.outer(torch.arange(S, dtype=torch.float32), 1.0 / 10000 ** (torch.arange(0, d, 2).float() / d))
    freqs = torch.polar(torch.ones_like(ang), ang)[:, None, :]  # (S, 1, d/2) complex64

    def rope(t):
        tc = torch.view_as_complex(t.float().reshape(*t.shape[:-1], -1, 2))
        return torch.view_as_real(tc * freqs).flatten(-2).type_as(t)

    def run(x):
        qkv = lin["wqkv"](ops.rms_fwd(x, norms[0])[0]).view(B, S, KV, r, d)
        q, k, v = (t.reshape(B, S, -1, d).contiguous() for t in torch.split(qkv, [r - 2, 1, 1], dim=-2))
        q, k = rope(q), rope(k)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                           enable_gqa=True).transpose(1, 2).contiguous()
        h = x + lin["wo"](o.view(B, S, H))
        n = ops.rms_fwd(h, norms[1])[0]
        return h + lin["w2"](F.silu(lin["w1"](n)) * lin["w3"](n))

    return run, [p for m in lin.values() for p in m.parameters()] + norms


# ---- the tests -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype_name", ["bf16", "fp32"])
@pytest.mark.parametrize("stack,build", [("hf", hf_layer), ("torchtitan", titan_layer)])
def test_op_list_bytes_and_kernels_match_the_recorded_ops(stack, build, dtype_name):
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
    run, params = build(dtype)
    x = torch.randn(B, S, H, dtype=dtype, requires_grad=True)
    fwd, bwd = measure(run, x, params, torch.randn(B, S, H, dtype=dtype))
    (mf, kf), (mb, kb) = totals(fwd), totals(bwd)
    pf, pb, pkf, pkb = predicted(stack, dtype_name)
    print(f"{stack} {dtype_name}: forward {mf} measured, {pf:.0f} op list ({pf / mf - 1:+.1%}), {kf} / {pkf} "
          f"kernels; backward {mb} measured, {pb:.0f} op list ({pb / mb - 1:+.1%}), {kb} / {pkb} kernels")
    assert pf == pytest.approx(mf, rel=TOL)
    assert pb == pytest.approx(mb, rel=TOL)
    assert (pkf, pkb) == (kf, kb)


def test_hf_kernel_counts_match_the_profiled_csv():
    """validation/cpu/layer_kernels.csv counts torch.profiler's leaf aten ops of the transformers layer on
    CPU (validation/count_layer_kernels.py: the second forward and backward, gradients kept). The op list
    counts the kernels a GPU runs; the difference is itemised, each item read off the profile's tree:
    forward: mean is a sum (fill_) and a div_ on CPU (+1 per norm), and the CPU wraps the Python scalars
    of `+ eps` and of mean's divisor in tensors with a copy each (+2 per norm); backward: AccumulateGrad adds
    each gradient into the kept .grad of the 9 parameters and of the input (+10), the loss seed's fill and
    the backward of its .float() (+2), the CPU SDPA backward shows as its three zero_ fills (+2), and the
    scalar wrapping of the norm backward's −0.5, 2 and 1/h (+3 per norm)."""
    pytest.importorskip("transformers")
    path = Path(__file__).resolve().parent.parent / "validation" / "cpu" / "layer_kernels.csv"
    row = next(r for r in csv.DictReader(open(path)) if r["layer"] == "hf-sdpa")
    tr = Training(seq_length=S, global_batch_size=B, stack=load_stack("hf"))
    k = kernel_counts(layer_graph(model_spec(), tr))
    gemm_f, gemm_b = 7 + 1, 2 * 7 + 1  # q, k, v, o, gate, up, down and SDPA; dgrad + wgrad each and SDPA backward
    fwd = k["forward"]["elementwise"] + gemm_f
    bwd = k["backward"]["elementwise"] + gemm_b
    assert int(row["forward_kernels"]) - fwd == 2 * (1 + 2)
    assert int(row["backward_kernels"]) - bwd == 10 + 2 + 2 + 2 * 3


def harness_layer(monkeypatch, dtype):
    """validation/train_step.py's layer (one QKV GEMM viewed as heads, rotate_half RoPE, one gate/up GEMM
    chunked), its nn.RMSNorm as CUDA's kernels."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "validation"))
    from train_step import StepConfig, build_model

    ops = _rms_norm_ops()
    cfg = StepConfig(layers=1, hidden=H, heads=HEADS, kv_heads=KV, ffn=FFN, vocab=32, seq=S, micro_batch=B)
    layer = build_model(cfg, torch, "cpu", dtype).layers[0]
    for norm in (layer.n1, layer.n2):
        monkeypatch.setattr(norm, "forward", lambda x, w=norm.weight: ops.rms_fwd(x, w)[0])
    x = torch.randn(B, S, H, dtype=dtype, requires_grad=True)
    return measure(layer, x, list(layer.parameters()), torch.randn(B, S, H, dtype=dtype))


def test_h100_harness_layer_is_not_torchtitans(monkeypatch):
    """The H100 harness's layer differs from torchtitan's block: rotate_half RoPE on views of one QKV GEMM (no
    copies forward; backward, the slice fills and a copy of the whole QKV gradient back to its layout) and one
    gate/up GEMM whose backward concatenates the two gradients. It moves fewer forward and more backward bytes
    than the eager op list (docs/compute.md: about −7.5 % and +29 % at these shapes)."""
    fwd, bwd = harness_layer(monkeypatch, torch.bfloat16)
    (mf, _), (mb, _) = totals(fwd), totals(bwd)
    pf, pb, _, _ = predicted("torchtitan", "bf16")
    print(f"harness layer: forward {mf / pf - 1:+.1%}, backward {mb / pb - 1:+.1%} against the eager op list")
    assert -0.15 < mf / pf - 1 < 0 and 0.15 < mb / pb - 1 < 0.45


@pytest.mark.parametrize("dtype_name", ["bf16", "fp32"])
def test_packed_op_list_is_the_harness_layer(monkeypatch, dtype_name):
    """The "packed" op list (cost/elementwise.py), which the H100 harness rows are predicted with
    (validation/compare_train_steps.py), against the harness layer's recorded ops: bytes within TOL, kernels
    exactly, and the kernels with a strided or broadcast operand (torch's generic elementwise loop, timed with
    the `memory_strided` table) exactly."""
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
    fwd, bwd = harness_layer(monkeypatch, dtype)
    (mf, kf), (mb, kb) = totals(fwd), totals(bwd)
    pf, pb, pkf, pkb = predicted("torchtitan", dtype_name, elementwise="packed")
    sf, sb = predicted_strided("torchtitan", "packed")
    print(f"packed {dtype_name}: forward {pf / mf - 1:+.1%}, {kf} / {pkf} kernels, strided {strided_kernels(fwd)} / "
          f"{sf}; backward {pb / mb - 1:+.1%}, {kb} / {pkb}, strided {strided_kernels(bwd)} / {sb}")
    assert pf == pytest.approx(mf, rel=TOL)
    assert pb == pytest.approx(mb, rel=TOL)
    assert (pkf, pkb) == (kf, kb)
    assert (sf, sb) == (strided_kernels(fwd), strided_kernels(bwd))


@pytest.mark.parametrize("stack,build", [("hf", hf_layer), ("torchtitan", titan_layer)])
def test_strided_ops_are_the_recorded_ones(stack, build):
    """Which kernels of the transformers and torchtitan layers have a strided or broadcast operand: the op list's
    `strided` marks against the recorded operands' layouts (bf16)."""
    run, params = build(torch.bfloat16)
    x = torch.randn(B, S, H, dtype=torch.bfloat16, requires_grad=True)
    fwd, bwd = measure(run, x, params, torch.randn(B, S, H, dtype=torch.bfloat16))
    rec = (strided_kernels(fwd), strided_kernels(bwd))
    print(stack, "strided kernels recorded", rec, "op list", predicted_strided(stack))
    assert predicted_strided(stack) == rec


@pytest.mark.parametrize("stack", ["megatron", "torchtitan", "hf"])
def test_squared_relu_ops_are_the_recorded_ones(stack):
    # Nemotron-4's MLP activation relu(x)² as Megatron-core runs it (megatron/core/activations.py squared_relu:
    # torch.pow(F.relu(x), 2), unfused in every stack): the op list's activation blocks against the aten ops one
    # forward and backward of it record on CPU, op by op (name, bytes read + written), bf16
    from simulator.cost.elementwise import layer_sizes, region_bytes

    F = torch.nn.functional
    m = ModelSpec(name="test", hidden_size=H, num_layers=1, num_heads=HEADS, num_kv_heads=KV, ffn_hidden_size=FFN,
                  vocab_size=1000, mlp="squared-relu", norm="layernorm")
    tr = Training(seq_length=S, global_batch_size=B, stack=load_stack(stack))
    g = layer_graph(m, tr)
    sizes = layer_sizes(m, tr, moe=False, tp=1, cp=1, micro_batch_size=B, sequence_parallel=False)
    x = torch.randn(B * S, FFN, dtype=torch.bfloat16, requires_grad=True)
    fwd, bwd = measure(lambda t: torch.pow(F.relu(t), 2), x, [], torch.randn(B * S, FFN, dtype=torch.bfloat16))
    for phase, rec in (("forward", fwd), ("backward", bwd)):
        (act,) = [b for b in g.blocks if b.phase == phase and b.name == "act"]
        got = [(u.name, float(region_bytes(g, [u]).value(sizes))) for u in act.ops]
        assert got == [(name, float(r + w)) for name, r, w, *_ in rec], (phase, got, rec)
    # what the backward reads of the forward: the relu output, not the first GEMM's output
    (back,) = [b for b in g.blocks if b.phase == "backward" and b.name == "act"]
    assert "act.r" in back.reads and "up.x" not in back.reads
