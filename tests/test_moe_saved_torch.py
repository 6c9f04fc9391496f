"""What a routed-expert block keeps for backward (memory/activations.py `moe_bytes`) against the bytes torch keeps for
the block built as Megatron-Core builds it.

Truth: the routed experts of one MoE layer in plain torch on CPU, bf16. The permuted token copies and their router
probabilities come in as leaves (the router and the permutation keep only indices and the router's own outputs, counted
apart); each expert runs fc1, the activation and fc2 as separate GEMMs, and the combine scatter-adds the copies back to
their tokens (it keeps only the index, which the model does not count). Two places for the probabilities:

- "activation" (Megatron-Core from 0.13, experts.py `weighted_bias_swiglu_impl`): one fused kernel computes
  silu(g)·u·p and keeps its 2f-wide input (or, with activation_func_fp8_input_store, its plain float8_e4m3fn cast:
  fusions/fused_bias_swiglu.py) and the probabilities;
- "hidden" (before 0.13: unpermute with probs): the fused SwiGLU keeps its input, the combine multiplies each expert
  output by its probability, which keeps that h-wide output.

The bytes kept are measured with `saved_tensors_hooks` by storage (tests/test_activations_torch.py `saved_bytes`), the
weights excluded, and the block trains (its backward runs). The model leaves out the permuted probabilities (4 bytes
per copy, under 0.1 % of a copy's bytes at these widths and less at real ones): the test adds them explicitly.
"""
import dataclasses

import pytest

from simulator.memory.activations import moe_bytes, routed_tokens
from simulator.spec.model import ModelSpec

torch = pytest.importorskip("torch")
from test_activations_torch import FusedSwiGLU, saved_bytes  # noqa: E402

F = torch.nn.functional


class WeightedSwiGLU(torch.autograd.Function):
    """silu(g)·u·p as one kernel (Megatron-Core weighted_bias_swiglu): keeps its input, as a float8_e4m3fn cast when
    `fp8_store`, and the probabilities."""

    @staticmethod
    def forward(ctx, gu, p, fp8_store):
        ctx.save_for_backward(gu.to(torch.float8_e4m3fn) if fp8_store else gu, p)
        ctx.dtype = gu.dtype
        g, u = gu.float().chunk(2, dim=-1)
        return (F.silu(g) * u * p).to(gu.dtype)

    @staticmethod
    def backward(ctx, grad):
        kept, p = ctx.saved_tensors
        g, u = kept.to(torch.float32).chunk(2, dim=-1)
        sg = torch.sigmoid(g)
        gr = grad.float()
        dg = gr * p * u * sg * (1 + g * (1 - sg))
        du = gr * p * g * sg
        dp = (gr * F.silu(g) * u).sum(-1, keepdim=True)
        return torch.cat([dg, du], dim=-1).to(ctx.dtype), dp, None


class Combine(torch.autograd.Function):
    """Scatter-add each copy back to its token (Megatron-Core unpermute, Transformer Engine moe_unpermute): keeps
    only the index (torch's index_add would keep the source for its shape)."""

    @staticmethod
    def forward(ctx, out, dest, tokens):
        ctx.save_for_backward(dest)
        return torch.zeros(tokens, out.shape[-1], dtype=out.dtype).index_add(0, dest, out)

    @staticmethod
    def backward(ctx, grad):
        (dest,) = ctx.saved_tensors
        return grad.index_select(0, dest), None, None


def _block(h, f, n_experts, copies_per_expert, tokens, *, probs, fp8_store=False, seed=0):
    """(bytes kept, copies R): the routed experts of one layer over R = n_experts · copies_per_expert copies."""
    gen = torch.Generator().manual_seed(seed)
    R = n_experts * copies_per_expert
    w1 = [torch.randn(h, 2 * f, generator=gen, dtype=torch.bfloat16, requires_grad=True) for _ in range(n_experts)]
    w2 = [torch.randn(f, h, generator=gen, dtype=torch.bfloat16, requires_grad=True) for _ in range(n_experts)]
    x = torch.randn(R, h, generator=gen, dtype=torch.bfloat16, requires_grad=True)  # permuted token copies
    p = torch.rand(R, 1, generator=gen, dtype=torch.float32, requires_grad=True)  # their probabilities
    dest = torch.randint(0, tokens, (R,), generator=gen)  # each copy's token (the combine's index)

    def run():
        outs = []
        for i in range(n_experts):
            rows = slice(i * copies_per_expert, (i + 1) * copies_per_expert)
            y = x[rows] @ w1[i]
            if probs == "activation":
                outs.append(WeightedSwiGLU.apply(y, p[rows], fp8_store) @ w2[i])
            else:
                outs.append((FusedSwiGLU.apply(y) @ w2[i]) * p[rows])  # bf16 x fp32: keeps both as they are
        return Combine.apply(torch.cat(outs).to(torch.bfloat16), dest, tokens)

    kept, out = saved_bytes(run, exclude=w1 + w2 + [dest])  # (the model counts no index tensors)
    out.float().square().sum().backward()  # the block trains
    assert x.grad is not None and p.grad is not None and w1[0].grad is not None
    return kept, R


@pytest.mark.parametrize("probs, fp8_store", [("activation", False), ("activation", True), ("hidden", False)])
@pytest.mark.parametrize("h, f, n_experts, copies, tokens", [(256, 96, 4, 48, 96), (192, 128, 3, 40, 60)])
def test_routed_experts_keep_what_the_model_counts(probs, fp8_store, h, f, n_experts, copies, tokens):
    kept, R = _block(h, f, n_experts, copies, tokens, probs=probs, fp8_store=fp8_store)
    model = ModelSpec(hidden_size=h, num_layers=1, num_heads=4, num_kv_heads=4, ffn_hidden_size=4 * h,
                      vocab_size=128, num_experts=n_experts, experts_per_token=2, moe_ffn_hidden_size=f)
    T = R / model.experts_per_token  # tokens whose top-2 copies these are (uniform routing: R = k·T)
    assert float(routed_tokens(tokens=T, experts_per_token=2, load_factor=1.0)) == R
    full = moe_bytes(model, tokens=T, e=2, t=1, t_s=1, load_factor=1.0, probs=probs,
                     glu_input_bytes=1 if fp8_store else None)
    routed = float(full) - (2 * h * T + 4.0 * n_experts * T)  # less the layer input and the router's probabilities
    assert kept == routed + 4 * R  # + the permuted probabilities (fp32, one per copy), which the model leaves out


def test_weighting_the_activation_frees_one_hidden_copy_per_routed_token():
    # the difference between the two placements is exactly the expert output the old combine kept: e·h per copy
    a, R = _block(256, 96, 4, 48, 96, probs="activation")
    b, _ = _block(256, 96, 4, 48, 96, probs="hidden")
    assert b - a == 2 * 256 * R


def test_the_megatron_stack_weights_the_activation_and_the_others_an_h_wide_tensor():
    from simulator.spec.stack import load_stack

    assert load_stack("megatron").moe_router_probs == "activation"
    for name in ("torchtitan", "fsdp", "hf", "deepspeed"):
        assert load_stack(name).moe_router_probs == "hidden"
    assert not any(load_stack(n).activation_input_fp8 for n in ("megatron", "torchtitan", "fsdp", "hf", "deepspeed"))


def test_fp8_store_is_swiglu_only():
    from simulator.errors import InputError
    from simulator.spec.training import Training
    from simulator.spec.validate import activation_store_problem

    tr = Training(seq_length=128, global_batch_size=1)
    tr = dataclasses.replace(tr, stack=dataclasses.replace(tr.stack, activation_input_fp8=True))
    swiglu = ModelSpec(hidden_size=256, num_layers=1, num_heads=4, num_kv_heads=4, ffn_hidden_size=512,
                       vocab_size=128)
    assert activation_store_problem(swiglu, tr) == ""
    geglu = swiglu.with_(mlp="geglu")
    assert "SwiGLU only" in activation_store_problem(geglu, tr)
    with pytest.raises(InputError):
        from simulator.spec.layout import Layout
        from simulator.spec.validate import validate

        validate(geglu, tr, Layout(num_gpus=1))
