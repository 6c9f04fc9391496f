"""GPT-OSS's expert activation and expert output bias (simulator/cost/gpt_oss_ops.py) against the aten ops the same
code records on CPU, op by op (name, bytes read + written), bf16.

Truths: transformers' own GptOssExperts._apply_gate (the eager op list), and Megatron-core's
weighted_bias_quick_geglu_impl and TEGroupedMLP._apply_bias written out line by line below (Megatron-core is not
installed here; NVIDIA/Megatron-LM d98e8a6 megatron/core/fusions/fused_bias_geglu.py and moe/experts.py). The
torch.compile'd quick-GEGLU kernel is one kernel on the GPU: the test runs its math unrecorded and records one op
with its interface (what it reads and writes), as Inductor's fused kernel moves it.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from test_elementwise_ops import Recorder, measure  # noqa: E402

from simulator.cost.elementwise import layer_graph, layer_sizes, region_bytes  # noqa: E402
from simulator.spec.model import ModelSpec  # noqa: E402
from simulator.spec.stack import load_stack  # noqa: E402
from simulator.spec.training import Training  # noqa: E402

H, FFN, S, B, E, K, LIMIT = 256, 192, 64, 2, 4, 2, 7.0
BF16 = torch.bfloat16


def gpt_oss(**kw) -> ModelSpec:
    return ModelSpec(**{**dict(name="test", hidden_size=H, num_layers=1, num_heads=4, num_kv_heads=2,
                               ffn_hidden_size=FFN, vocab_size=1000, mlp="clamped-swiglu", num_experts=E,
                               experts_per_token=K, moe_ffn_hidden_size=FFN), **kw})


def predicted(stack: str, block: str, **kw):
    """{phase: [(op, bytes)]} of the layer graph's `block` for the GPT-OSS test model on one rank."""
    m = gpt_oss(**kw)
    tr = Training(seq_length=S, global_batch_size=B, stack=load_stack(stack))
    g = layer_graph(m, tr, moe=True)
    sizes = layer_sizes(m, tr, moe=True, tp=1, cp=1, micro_batch_size=B, sequence_parallel=False)
    return {ph: [(u.name, float(region_bytes(g, [u]).value(sizes))) for b in g.blocks
                 if b.phase == ph and b.name == block for u in b.ops] for ph in ("forward", "backward")}


def recorded(ops):
    """(name, bytes) of recorded ops, slice_backward as its two kernels (zero fill, copy into the slice)."""
    out = []
    for name, r, w, *_ in ops:
        if name == "slice_backward":
            out += [("zeros", float(w - r)), ("copy_", float(2 * r))]
        else:
            out.append((name, float(r + w)))
    return out


def same(want, got) -> bool:
    """The same ops in the same order with the same bytes, up to the 0-dim zero of clamp's backward (2 bytes)."""
    return [n for n, _ in want] == [n for n, _ in got] and all(
        w == pytest.approx(r, abs=8.0) for (_, w), (_, r) in zip(want, got))


def routed_tokens() -> int:
    return B * S * K  # every routed copy on the one rank (ep 1)


def test_transformers_activation_is_the_recorded_op_list():
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

    cfg = GptOssConfig(hidden_size=H, intermediate_size=FFN, num_local_experts=E, swiglu_limit=LIMIT)
    experts = GptOssExperts(cfg)
    x = torch.randn(routed_tokens(), 2 * FFN, dtype=BF16, requires_grad=True)
    fwd, bwd = measure(experts._apply_gate, x, [], torch.randn(routed_tokens(), FFN, dtype=BF16))
    want = predicted("torchtitan", "act")  # any stack but the fused one runs transformers' op list
    assert same(want["forward"], recorded(fwd)), (want["forward"], recorded(fwd))
    assert same(want["backward"], recorded(bwd)), (want["backward"], recorded(bwd))


class QuickGeGLU(torch.autograd.Function):
    """Megatron-core's WeightedQuickGeGLUFunction (linear offset 1, routing weights 1): its forward and backward are
    torch.compile'd kernels; recorded as one op each with the tensors they read and write."""

    recorder: Recorder | None = None

    @staticmethod
    def forward(ctx, y):
        ctx.save_for_backward(y)
        with torch.utils._python_dispatch._disable_current_modes():
            g, u = torch.chunk(y, 2, -1)
            out = g * torch.sigmoid(1.702 * g) * (u + 1.0)
        QuickGeGLU.recorder.ops.append(("quick_geglu", y.nbytes, out.nbytes, 1, "", False))
        return out

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        with torch.utils._python_dispatch._disable_current_modes():
            g, u = torch.chunk(y, 2, -1)
            s = torch.sigmoid(1.702 * g)
            dy = torch.cat((grad * s * (1 + 1.702 * g * (1 - s)) * (u + 1.0), grad * g * s), -1)
        QuickGeGLU.recorder.ops.append(("quick_geglu_backward", grad.nbytes + y.nbytes, dy.nbytes, 1, "", False))
        return dy


def megatron_activation(y):
    """weighted_bias_quick_geglu_impl with clamp_value 7 (fused_bias_geglu.py), bias None."""
    x_glu, x_linear = y.chunk(2, -1)
    y = torch.cat((x_glu.clamp(min=None, max=LIMIT), x_linear.clamp(min=-LIMIT, max=LIMIT)), -1)
    return QuickGeGLU.apply(y)


class _Recorder(Recorder):
    def __enter__(self):
        QuickGeGLU.recorder = self
        return super().__enter__()


def test_megatron_activation_is_the_recorded_op_list(monkeypatch):
    import test_elementwise_ops

    monkeypatch.setattr(test_elementwise_ops, "Recorder", _Recorder)
    x = torch.randn(routed_tokens(), 2 * FFN, dtype=BF16, requires_grad=True)
    fwd, bwd = measure(megatron_activation, x, [], torch.randn(routed_tokens(), FFN, dtype=BF16))
    want = predicted("megatron", "act")
    assert same(want["forward"], recorded(fwd)), (want["forward"], recorded(fwd))
    assert same(want["backward"], recorded(bwd)), (want["backward"], recorded(bwd))


def test_megatron_expert_bias_is_the_recorded_op_list():
    # TEGroupedMLP._apply_bias, the eager path (moe/experts.py): per local expert t + b·p on its rows, then a cat;
    # the routing weights in bf16 (the GPT-OSS bridge leaves moe_router_dtype unset). Each predicted op stands for
    # that op over every expert; the bias and routing weights (O(width), O(tokens)) count 0 bytes, so each op's
    # total agrees within their share of its bytes, (h + n)/(n·h) of an expert's rows (2 % at this size)
    n = routed_tokens() // E
    bias = [torch.randn(H, dtype=BF16, requires_grad=True) for _ in range(E)]
    probs = torch.rand(E * n, 1, dtype=BF16, requires_grad=True)

    def apply_bias(flat):
        return torch.cat([t + b * p for t, b, p in zip(torch.split(flat, n), bias, torch.split(probs, n))])

    x = torch.randn(E * n, H, dtype=BF16, requires_grad=True)
    fwd, bwd = measure(apply_bias, x, bias, torch.randn(E * n, H, dtype=BF16))
    want = predicted("megatron", "expert_bias", expert_bias=True)
    for phase, rec in (("forward", fwd), ("backward", bwd)):
        by_name: dict[str, float] = {}
        for name, nbytes in recorded(rec):
            by_name[name] = by_name.get(name, 0.0) + nbytes
        got: dict[str, float] = {}
        for name, nbytes in want[phase]:
            got[name] = got.get(name, 0.0) + nbytes
        assert got.keys() == by_name.keys(), (phase, got, by_name)
        for name in got:
            assert got[name] == pytest.approx(by_name[name], rel=1.01 * (H + n) / (n * H)), (phase, name)
    # only Megatron's fused setting runs the bias as eager per-expert ops; without expert biases there is no block
    assert predicted("megatron", "expert_bias") == {"forward": [], "backward": []}


def test_the_clamps_cost_more_than_a_fused_swiglu():
    # GPT-OSS's activation under Megatron moves more bytes than the fused SwiGLU it was timed as before: two clamps
    # and a cat before the compiled kernel, their backward after it (3 + 8 elements per element of a half forward,
    # against 3)
    def act_bytes(mlp):
        m = gpt_oss(mlp=mlp)
        tr = Training(seq_length=S, global_batch_size=B, stack=load_stack("megatron"))
        g = layer_graph(m, tr, moe=True)
        sizes = layer_sizes(m, tr, moe=True, tp=1, cp=1, micro_batch_size=B, sequence_parallel=False)
        (fwd,) = [b for b in g.blocks if b.phase == "forward" and b.name == "act"]
        units = fwd.ops or (fwd,)
        return sum(float(region_bytes(g, [u]).value(sizes)) for u in units)

    half = routed_tokens() * FFN * 2.0
    assert act_bytes("swiglu") == pytest.approx(3 * half)
    assert act_bytes("clamped-swiglu") == pytest.approx((2 + 2 + 4 + 3) * half)


def test_hf_gpt_oss_config_is_the_clamped_swiglu():
    from simulator.spec.hf import model_from_hf

    m = model_from_hf({"model_type": "gpt_oss", "hidden_size": H, "num_hidden_layers": 2,
                              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
                              "intermediate_size": FFN, "num_local_experts": E, "num_experts_per_tok": K,
                              "vocab_size": 1000})
    assert m.mlp == "clamped-swiglu" and m.glu_matrices == 3 and m.expert_bias
