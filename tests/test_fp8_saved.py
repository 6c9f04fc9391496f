"""FP8 training's saved GEMM inputs (memory/fp8_saved.py) against the bytes torch keeps for a layer built so.

Truth: a Megatron-style Llama layer (tests/test_activations_torch.py's reference layer) whose GEMMs are a
Transformer-Engine-like FP8 linear: it casts its input with torch's float8_e4m3fn cast and keeps that cast for the
weight gradient (with MXFP8 also one 1-byte scale per 32 elements), or keeps the bf16 input where Megatron-Core sets
`save_original_input` (the output projection outside delayed scaling). The bytes kept are measured with
`saved_tensors_hooks` by storage, as the bf16 tests measure them; the layer trains (its backward runs).
"""
import dataclasses

import pytest

from simulator.memory.activations import layer_activation_bytes
from simulator.memory.fp8_saved import fp8_saved_bytes_per_element, fp8_saved_delta_bytes
from simulator.spec.model import ModelSpec
from simulator.spec.stack import load_stack
from simulator.spec.training import Training

torch = pytest.importorskip("torch")
from test_activations_torch import (  # noqa: E402
    FusedRMSNorm, FusedSwiGLU, MegatronStyleLlamaLayer, _rotate_half, saved_bytes)

F = torch.nn.functional


BLOCK_SCALES = {"mxfp8": (32, torch.uint8), "blockwise": (128, torch.float32)}


class TEStyleFp8Linear(torch.autograd.Function):
    """y = x·wᵀ with x cast to FP8 for the GEMM; keeps the FP8 cast (and a block recipe's scales) for the weight
    gradient, or x itself when `save_original` (the GEMM runs in bf16 here: CPU torch has no FP8 GEMM)."""

    @staticmethod
    def forward(ctx, x, w, recipe, save_original):
        xq = x.to(torch.float8_e4m3fn)
        if save_original:
            kept = (x,)
        elif recipe in BLOCK_SCALES:  # MXFP8: a uint8 (E8M0) per 32; Float8BlockScaling: an fp32 per 1x128 block
            block, dtype = BLOCK_SCALES[recipe]
            kept = (xq, torch.ones(x.numel() // block, dtype=dtype))
        else:
            kept = (xq,)
        ctx.save_for_backward(w, *kept)
        ctx.dtype = x.dtype
        return F.linear(x, w)

    @staticmethod
    def backward(ctx, g):
        w, xk = ctx.saved_tensors[:2]
        x = xk.to(ctx.dtype)
        gw = g.reshape(-1, g.shape[-1]).t() @ x.reshape(-1, x.shape[-1])
        return g @ w, gw, None, None


class Fp8LlamaLayer(MegatronStyleLlamaLayer):
    """The reference layer with its four GEMMs as TEStyleFp8Linear under a recipe (flash attention only)."""

    def __init__(self, *args, recipe, **kw):
        super().__init__(*args, **kw)
        self.recipe = recipe

    def lin(self, x, w, *, save_original=False):
        return TEStyleFp8Linear.apply(x, w, self.recipe, save_original)

    def forward(self, x, cos, sin, mask):
        b, s, _ = x.shape
        qkv = self.lin(FusedRMSNorm.apply(x, self.n1, 1e-5), self.wqkv)
        q, k, v = qkv.split([self.n_h * self.d, self.n_kv * self.d, self.n_kv * self.d], dim=-1)
        q = q.view(b, s, self.n_h, self.d).transpose(1, 2)
        k = k.view(b, s, self.n_kv, self.d).transpose(1, 2)
        v = v.contiguous().view(b, s, self.n_kv, self.d).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        o = self.core(q, k, v, mask)
        # Megatron-Core: linear_proj keeps the attention output itself outside delayed scaling
        x = x + self.lin(o.transpose(1, 2).reshape(b, s, self.n_h * self.d), self.wo,
                         save_original=self.recipe != "delayed")
        gu = self.lin(FusedRMSNorm.apply(x, self.n2, 1e-5), self.wgu)
        return x + self.lin(FusedSwiGLU.apply(gu), self.wd)


def _measure(h, n_h, n_kv, f, s, b, recipe):
    torch.manual_seed(0)
    layer = Fp8LlamaLayer(h, n_h, n_kv, f, flash=True, recipe=recipe)
    cos, sin, mask = layer.constants(s, torch.bfloat16)
    x = torch.randn(b, s, h, dtype=torch.bfloat16, requires_grad=True)
    n, y = saved_bytes(lambda: layer(x, cos, sin, mask), exclude=list(layer.parameters()) + [cos, sin, mask])
    y.float().sum().backward()
    assert torch.isfinite(x.grad.float()).all()
    return n


def _training(s, b, *, recipe, precision="fp8", stack="megatron", **over):
    st = dataclasses.replace(load_stack(stack), fp8_recipe=recipe, **over)
    return Training(seq_length=s, global_batch_size=b, flash_attention=True, precision=precision, stack=st)


def _layer(model, tr, b, recompute="none"):
    return float(layer_activation_bytes(model, tr, tp=1, cp=1, micro_batch_size=b, sequence_parallel=False,
                                        recompute=recompute))


SHAPES = [(256, 8, 2, 704, 128, 2), (192, 6, 3, 512, 96, 3)]


@pytest.mark.parametrize("recipe", ["current", "delayed", "mxfp8", "blockwise"])
@pytest.mark.parametrize("shape", SHAPES)
def test_an_fp8_layer_keeps_what_the_model_counts(shape, recipe):
    h, n_h, n_kv, f, s, b = shape
    model = ModelSpec(hidden_size=h, num_layers=1, num_heads=n_h, num_kv_heads=n_kv, ffn_hidden_size=f,
                      vocab_size=128)
    measured = _measure(h, n_h, n_kv, f, s, b, recipe)
    predicted = _layer(model, _training(s, b, recipe=recipe), b)
    assert predicted == pytest.approx(measured, rel=0.01)
    # and it is not the bf16 count: FP8 keeps less (the four GEMM inputs at 1 byte, O once outside delayed)
    bf16 = _layer(model, _training(s, b, recipe=recipe, precision="bf16"), b)
    assert measured < bf16


def test_torchao_keeps_the_high_precision_inputs():
    model = ModelSpec(hidden_size=256, num_layers=1, num_heads=8, num_kv_heads=2, ffn_hidden_size=704,
                      vocab_size=128)
    fp8 = _training(128, 2, recipe="current", stack="torchtitan")
    assert fp8.stack.fp8_saved_inputs == "original"
    bf16 = _training(128, 2, recipe="current", stack="torchtitan", precision="bf16")
    assert _layer(model, fp8, 2) == _layer(model, bf16, 2)


def test_mxfp8_keeps_one_scale_byte_per_32_elements():
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    assert x.to(torch.float8_e4m3fn).element_size() == 1
    assert fp8_saved_bytes_per_element("current") == 1.0
    assert fp8_saved_bytes_per_element("mxfp8") * 32 == 33
    assert fp8_saved_bytes_per_element("blockwise") * 128 == 132  # one fp32 scale per 1x128 block


def test_recomputed_moe_activation_keeps_no_fp8_copy():
    # Megatron-Core keeps fc2's original input under moe_act recompute (set_save_original_input), which the
    # checkpoint frees: the fc2 inputs leave the FP8 delta, and the bytes recompute frees are the bf16 ones
    moe = ModelSpec(hidden_size=256, num_layers=1, num_heads=8, num_kv_heads=2, ffn_hidden_size=704, vocab_size=128,
                    num_experts=8, experts_per_token=2, moe_ffn_hidden_size=128)
    kw = dict(tp=1, cp=1, micro_batch_size=2, sequence_parallel=False, moe=True)
    plain = _training(128, 2, recipe="current")
    act = _training(128, 2, recipe="current", recompute_modules=("moe_act",))
    d_none = fp8_saved_delta_bytes(moe, plain, recompute="none", **kw)
    d_act = fp8_saved_delta_bytes(moe, act, recompute="selective", **kw)
    T, copies = 128 * 2, 128 * 2 * 2
    assert float(d_none - d_act) == pytest.approx(-1.0 * copies * 128)  # d = 1 - 2 per fc2 input element
    assert float(d_act) == pytest.approx(-1.0 * (T * 256 + copies * 256))  # QKV input, the routed fc1 inputs


def test_transformer_engine_cross_entropy_keeps_the_bf16_logits_and_no_backward_set():
    # TE's parallel_cross_entropy before v2.18 writes the gradient into the logits in place and keeps them: half of
    # the fp32 softmax Megatron's own loss keeps, and nothing more at the backward (it scales the kept gradient)
    from simulator.cost.memory_ops import _head_memory_ops
    from simulator.memory.head_activations import logits_bytes, loss_backward_bytes

    model = ModelSpec(hidden_size=256, num_layers=1, num_heads=8, num_kv_heads=2, ffn_hidden_size=704,
                      vocab_size=1024)
    kw = dict(tp=2, cp=1, micro_batch_size=2)
    te = dataclasses.replace(_training(128, 2, recipe="current", precision="bf16"), cross_entropy="te")
    vp = dataclasses.replace(te, cross_entropy="vocab-parallel")
    assert float(logits_bytes(model, te, **kw)) == 2 * 128 * 2 * 1024 / 2
    assert float(logits_bytes(model, vp, **kw)) == 2 * float(logits_bytes(model, te, **kw))
    assert float(loss_backward_bytes(model, te, **kw)) == 0.0
    loss = [o for o in _head_memory_ops(model, te, sequence_parallel=False, **kw) if o.name.startswith("loss")]
    X = 128 * 2 * 1024 / 2
    assert sum(float(o.forward_bytes) for o in loss) == 3 * 2 * X  # two passes: online softmax, gradient in place
    assert sum(float(o.backward_bytes) for o in loss) == 2 * 2 * X  # the in-place scale by the loss's gradient
