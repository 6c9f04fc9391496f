"""The elementwise op lists' structure, without torch (the torch comparison: test_elementwise_ops.py):
the fused list gives the closed forms of cost/memory_ops.py's docstring, the compiled regions read their
inputs and write their outputs, and the stacks name their setting."""
import numpy as np
import pytest

from simulator.cost.elementwise import SETTINGS, compiled_regions, kernel_counts, layer_graph
from simulator.cost.memory_ops import memory_ops
from simulator.errors import InputError
from simulator.spec.model import ModelSpec
from simulator.spec.stack import ELEMENTWISE, load_stack, stack_names
from simulator.spec.training import Training

LLAMA = ModelSpec(name="llama", hidden_size=4096, num_layers=2, num_heads=32, num_kv_heads=8, ffn_hidden_size=14336,
                  vocab_size=32000)
GPT = ModelSpec(name="gpt", hidden_size=2048, num_layers=2, num_heads=16, ffn_hidden_size=8192, vocab_size=50000,
                mlp="gelu", norm="layernorm", learned_position_embeddings=2048)


def _ops(model, stack="megatron", **kw):
    """{group: MemoryOp} of one layer; a group's rows of other kernel classes ("<group> (strided)", "<group>
    (reduction)") merged back into it (bytes and kernels summed)."""
    from dataclasses import replace

    tr = Training(seq_length=kw.pop("seq", 4096), global_batch_size=1, stack=load_stack(stack, **kw.pop("st", {})),
                  **kw)
    out = {}
    for o in memory_ops(model, tr):
        name = o.name.removesuffix(" (strided)").removesuffix(" (reduction)")
        if name not in out:
            out[name] = replace(o, name=name)
            continue
        a = out[name]
        out[name] = replace(a, forward_bytes=a.forward_bytes + o.forward_bytes,
                            backward_bytes=a.backward_bytes + o.backward_bytes, kernels=a.kernels + o.kernels,
                            backward_kernels=(a.backward_kernels or a.kernels) + (o.backward_kernels or o.kernels))
    return out


def test_fused_op_list_gives_the_closed_forms():
    T, h, e, q, kv, f = 4096, 4096, 2, 4096, 1024, 14336
    ops = _ops(LLAMA)
    assert set(ops) == {"norms", "rope", "residual_adds", "mlp_activation"}
    assert (ops["norms"].forward_bytes, ops["norms"].backward_bytes) == (2 * 2 * T * h * e, 2 * 3 * T * h * e)
    assert ops["residual_adds"].forward_bytes == ops["residual_adds"].backward_bytes == 2 * 3 * T * h * e
    assert ops["rope"].forward_bytes == ops["rope"].backward_bytes == 2 * T * (q + kv) * e
    assert (ops["mlp_activation"].forward_bytes, ops["mlp_activation"].backward_bytes) == (3 * T * f * e, 5 * T * f * e)
    assert [ops[k].kernels for k in ("norms", "rope", "residual_adds", "mlp_activation")] == [2, 2, 2, 1]
    # no RoPE on a model with a learned position table; dropout (2e + 1) per element; softmax 2e, 3e per score
    g = _ops(GPT, seq=2048, dropout=True, flash_attention=False)
    assert "rope" not in g
    assert g["hidden_dropout"].forward_bytes == 2 * (2 * e + 1) * 2048 * 2048
    S = 16 * 2048 * 2048
    assert g["softmax"].forward_bytes == (2 * e + 2 * e + 1) * S  # softmax + attention dropout
    assert g["softmax"].backward_bytes == (3 * e + 2 * e + 1) * S


def test_eager_and_hf_lists_add_the_frameworks_ops():
    T, h, e = 4096, 4096, 2
    fused, titan, hf = _ops(LLAMA), _ops(LLAMA, "torchtitan"), _ops(LLAMA, "hf")
    assert titan["norms"].backward_bytes == 2 * 5 * T * h * e  # torch's grad-input and weight-gradient kernels
    assert hf["norms"].forward_bytes == 2 * 36 * T * h and hf["norms"].backward_bytes == 2 * 92 * T * h
    assert titan["input_grad_adds"].backward_bytes == 3 * T * h * e  # w1 and w3 read the same input
    assert hf["input_grad_adds"].backward_bytes == 3 * 3 * T * h * e  # + q, k, v
    assert "qkv_layout" in titan and "qkv_layout" not in hf
    for a, b in ((fused, titan), (titan, hf)):
        assert sum(o.forward_bytes + o.backward_bytes for o in a.values()) < \
            sum(o.forward_bytes + o.backward_bytes for o in b.values())
    # fp32: the casts are no ops (transformers' fp32 RMSNorm moves 28 bytes per element forward)
    assert _ops(LLAMA, "hf", precision="fp32")["norms"].forward_bytes == 2 * 28 * T * h


@pytest.mark.parametrize("stack", ["megatron", "torchtitan", "hf"])
def test_compiled_regions_read_their_inputs_and_write_their_outputs(stack):
    T, h, e, q, kv, f = 4096, 4096, 2, 4096, 1024, 14336
    ops = _ops(LLAMA, stack, st=dict(compiled=True))
    fwd = sum(o.forward_bytes for o in ops.values())
    # norm (x → y), RoPE (q, k [, v copy] → q', k'), residual + norm (x, o → h, y), act (g, u → a), residual
    v_copy = 2 * T * kv * e if stack == "torchtitan" else 0
    assert fwd == (2 + 4 + 3) * T * h * e + 2 * T * (q + kv) * e + v_copy + 3 * T * f * e
    assert all(o.kernels == 1 for o in ops.values())
    tr = Training(seq_length=4096, global_batch_size=1, stack=load_stack(stack, compiled=True))
    g = layer_graph(LLAMA, tr)
    k = kernel_counts(g, compiled=True)
    phases = [r[0].phase for r in compiled_regions(g)]
    assert (k["forward"]["elementwise"], k["backward"]["elementwise"]) == (5, 4)
    assert (phases.count("forward"), phases.count("backward")) == (5, 4)
    fused = _ops(LLAMA, stack)
    assert fwd <= sum(o.forward_bytes for o in fused.values())


def test_vectorised_layouts_give_the_scalar_bytes():
    tr = Training(seq_length=2048, global_batch_size=8, stack=load_stack("hf"))
    tp, b = np.array([[1.0], [2.0], [4.0]]), np.array([[1.0], [2.0], [4.0]])
    vec = memory_ops(LLAMA, tr, tp=tp, micro_batch_size=b, sequence_parallel=True)
    for i in range(3):
        one = memory_ops(LLAMA, tr, tp=float(tp[i, 0]), micro_batch_size=float(b[i, 0]), sequence_parallel=True)
        for a, s in zip(vec, one):
            assert a.name == s.name and float(a.backward_bytes[i, 0]) == pytest.approx(float(s.backward_bytes))


def test_stacks_name_their_setting_and_bad_values_are_refused():
    assert set(SETTINGS) == set(ELEMENTWISE)
    want = {"megatron": "fused", "deepspeed": "fused", "torchtitan": "eager", "fsdp": "hf", "hf": "hf"}
    for name in stack_names():
        st = load_stack(name)
        assert st.elementwise == want[name]
        assert "elementwise" in dict(st.source)
    with pytest.raises(InputError, match="elementwise"):
        load_stack("hf", elementwise="unfused")
