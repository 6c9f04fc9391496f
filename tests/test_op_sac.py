"""recompute 'op': torchtitan's op-level selective activation checkpointing, checked against a real torch
run of the same policy on CPU (a torchtitan-style Llama block: separate wq/wk/wv/wo and w1/w3/w2
linears, SDPA): the bytes the policy saves and the FLOPs its recompute re-runs in the backward."""
from functools import partial

import numpy as np
import pytest

from simulator.cost import flops as F
from simulator.errors import InputError
from simulator.memory.activations import layer_activation_bytes
from simulator.spec.model import ModelSpec
from simulator.spec.stack import load_stack
from simulator.spec.training import Training

H, HEADS, KV, FFN, B, S = 256, 8, 2, 704, 2, 64
MODEL = ModelSpec(name="block", hidden_size=H, num_layers=1, num_heads=HEADS, num_kv_heads=KV, ffn_hidden_size=FFN,
                  vocab_size=1000)


def _block(torch):
    nn, Fn = torch.nn, torch.nn.functional
    d = H // HEADS

    class Block(nn.Module):  # torchtitan models/llama3 TransformerBlock, without RoPE (elementwise, recomputed)
        def __init__(self):
            super().__init__()
            self.wq, self.wk = nn.Linear(H, HEADS * d, bias=False), nn.Linear(H, KV * d, bias=False)
            self.wv, self.wo = nn.Linear(H, KV * d, bias=False), nn.Linear(HEADS * d, H, bias=False)
            self.w1, self.w3 = nn.Linear(H, FFN, bias=False), nn.Linear(H, FFN, bias=False)
            self.w2 = nn.Linear(FFN, H, bias=False)
            self.n1, self.n2 = nn.RMSNorm(H), nn.RMSNorm(H)

        def forward(self, x):
            y = self.n1(x)
            q = self.wq(y).view(B, S, HEADS, d).transpose(1, 2)
            k = self.wk(y).view(B, S, KV, d).transpose(1, 2)
            v = self.wv(y).view(B, S, KV, d).transpose(1, 2)
            k, v = (t.repeat_interleave(HEADS // KV, dim=1) for t in (k, v))
            o = Fn.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, S, H)
            x = x + self.wo(o)
            y = self.n2(x)
            return x + self.w2(Fn.silu(self.w1(y)) * self.w3(y))

    return Block()


def _policy(torch, decisions):
    """torchtitan/distributed/activation_checkpoint.py `_custom_policy` (SDPA: the CPU flash op stands for
    the CUDA ones of `_save_list`); appends (op, saved) for each mm and SDPA call of the forward."""
    from torch.utils.checkpoint import CheckpointPolicy

    ops = torch.ops.aten
    save = {ops.mm.default, ops._scaled_dot_product_flash_attention_for_cpu.default}
    meta = {"forward": 0, "recompute": 0}

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == ops.mm.default:
            meta[mode] += 1
        keep = func in save and not (func == ops.mm.default and meta[mode] % 2 == 0)
        if func in save and not ctx.is_recompute:
            decisions.append((str(func), keep))
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _decisions(torch):
    """(op, saved) for each mm and SDPA call of one checkpointed forward + backward of the block under the
    policy (the backward must succeed: the saved set is enough to recompute the rest)."""
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    torch.manual_seed(0)
    block = _block(torch)
    x = torch.randn(B, S, H, requires_grad=True)
    decisions = []
    ctx = partial(create_selective_checkpoint_contexts, _policy(torch, decisions))
    checkpoint(block, x, use_reentrant=False, context_fn=ctx).sum().backward()
    assert x.grad is not None and block.wk.weight.grad is not None
    return decisions


def _output_bytes(torch):
    """(op, bytes of its outputs, FLOPs) of every mm and SDPA call of the block's forward, in order."""
    from torch.utils._python_dispatch import TorchDispatchMode

    ops = torch.ops.aten
    watched = {ops.mm.default, ops._scaled_dot_product_flash_attention_for_cpu.default}
    got = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func in watched:
                outs = out if isinstance(out, tuple) else (out,)
                fl = 2 * args[0].shape[0] * args[0].shape[1] * args[1].shape[1] if func == ops.mm.default else 0
                got.append((str(func), sum(t.numel() * t.element_size() for t in outs if isinstance(t, torch.Tensor)),
                            fl))
            return out

    torch.manual_seed(0)
    block = _block(torch)
    with Record():
        block(torch.randn(B, S, H))
    return got


def test_saved_bytes_match_torchtitans_policy_run_on_cpu():
    torch = pytest.importorskip("torch")
    decisions = _decisions(torch)
    outputs = _output_bytes(torch)
    assert [d[0] for d in decisions] == [o[0] for o in outputs] and len(outputs) == 8  # 7 mms + SDPA
    assert sum(keep for _, keep in decisions) == 5  # wq, wv, SDPA, w1, w2: the odd mms and the attention
    measured = sum(b for (_, keep), (_, b, _) in zip(decisions, outputs) if keep) + B * S * H * 4  # + input
    tr = Training(seq_length=S, global_batch_size=B, precision="fp32", stack=load_stack("torchtitan"))
    predicted = float(layer_activation_bytes(MODEL, tr, tp=1, cp=1, micro_batch_size=B, sequence_parallel=False,
                                             recompute="op"))
    assert predicted == pytest.approx(measured, rel=1e-9)
    none = float(layer_activation_bytes(MODEL, tr, tp=1, cp=1, micro_batch_size=B, sequence_parallel=False,
                                        recompute="none"))
    assert predicted < 0.7 * none


def test_recompute_flops_are_the_forward_flops_of_the_mms_the_policy_does_not_save():
    torch = pytest.importorskip("torch")
    decisions = _decisions(torch)
    outputs = _output_bytes(torch)
    measured = sum(fl for (_, keep), (_, _, fl) in zip(decisions, outputs) if not keep)  # wk, wo, w3
    tr = Training(seq_length=S, global_batch_size=B, precision="fp32", stack=load_stack("torchtitan"))
    ops = F.layer_ops(MODEL, tr, micro_batch_size=B, attention_flops="causal", flash_attention=True)
    predicted = F.recompute_forward_flops(ops, "op", MODEL, flash_attention=True)
    assert predicted == pytest.approx(measured, rel=1e-12)
    assert predicted == 2 * B * S * H * (KV * H // HEADS + H + FFN)


def test_op_recompute_is_refused_for_moe_and_mla_models():
    from simulator.spec.layout import Layout
    from simulator.spec.load import load_model
    from simulator.spec.validate import validate

    moe = load_model("mixtral-8x7b")
    with pytest.raises(InputError, match="op"):
        validate(moe, Training(seq_length=4096, global_batch_size=8), Layout(num_gpus=8, recompute="op"))


def test_op_recompute_in_the_estimate_and_between_none_and_full():
    from simulator.estimate import estimate
    from simulator.spec.hardware import load_hardware
    from simulator.spec.layout import Layout
    from simulator.spec.load import load_model

    m = load_model("llama3-8b")
    tr = Training(seq_length=8192, global_batch_size=64, stack=load_stack("torchtitan"))
    hw = load_hardware("dgx-h100")
    got = {r: estimate(m, tr, Layout(num_gpus=64, micro_batch_size=1, zero=3, recompute=r), hw)
           for r in ("none", "op", "full")}
    step = {r: e.step_s for r, e in got.items()}
    act = {r: e.memory.worst.activations_bytes for r, e in got.items()}
    assert step["none"] < step["op"] < step["full"]
    assert act["full"] < act["op"] < act["none"]
    assert np.isfinite(list(step.values())).all()
