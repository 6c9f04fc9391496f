"""Training, Layout, cross-spec validation and scenario loading: rules and one-line errors."""
import math
import re

import numpy as np
import pytest

from simulator.errors import InputError
from simulator.spec.layout import Layout
from simulator.spec.load import load_model
from simulator.spec.training import Training
from simulator.spec.validate import layout_valid_mask, layout_violations, validate


def test_layout_product_message_names_every_factor():
    with pytest.raises(InputError, match=re.escape("tp(8) * cp(1) * pp(4) * dp(16) = 512 != num_gpus(256)")):
        Layout(num_gpus=256, tp=8, pp=4, dp=16)


def test_dp_is_derived_when_omitted():
    lay = Layout(num_gpus=512, tp=8, pp=4)
    assert lay.dp == 16 and lay.label == "TP8-CP1-PP4-DP16"
    assert lay.num_microbatches(512) == 32  # 512 / (16 · 1)


def test_dp_cannot_be_derived_from_non_divisible_gpus():
    with pytest.raises(InputError, match=re.escape("num_gpus(100) is not divisible by tp(8) * cp(1) * pp(4) = 32")):
        Layout(num_gpus=100, tp=8, pp=4)


@pytest.mark.parametrize("kw,msg", [
    (dict(tp=0), "tp must be > 0, got 0"),
    (dict(tp=-2), "tp must be > 0, got -2"),
    (dict(tp=2.5), "tp must be an integer, got 2.5"),
    (dict(tp="8"), "tp must be a number, got '8'"),
    (dict(micro_batch_size=math.nan), "micro_batch_size must be finite, got nan"),
    (dict(zero=4), "zero must be 0, 1, 2 or 3, got 4"),
    (dict(recompute="some"), "recompute must be one of none, selective, full, op, got 'some'"),
    (dict(schedule="1f1b2"), "schedule must be one of"),
    (dict(vpp=2), "vpp(2) > 1 needs schedule = 'interleaved'"),
    (dict(ep=3), "ep(3) must divide dp(8) * cp(1) = 8"),
    (dict(zero=3, shard_group_size=3), "shard_group_size(3) must divide dp(8)"),
])
def test_bad_layout_fields_raise_one_line_errors(kw, msg):
    with pytest.raises(InputError, match=re.escape(msg)) as exc:
        Layout(num_gpus=8, **kw)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("kw,msg", [
    (dict(seq_length=0), "seq_length must be > 0"),
    (dict(global_batch_size=-1), "global_batch_size must be > 0"),
    (dict(precision="int4"), "precision must be one of bf16, fp16, fp8, fp32, got 'int4'"),
    (dict(optimizer="lion"), "optimizer must be one of"),
    (dict(grad_dtype="fp8"), "grad_dtype must be one of fp32, bf16, fp16"),
    (dict(flash_attention="yes"), "flash_attention must be true or false"),
    (dict(cross_entropy="torch-fp16"),
     "cross_entropy must be one of vocab-parallel, torch-fp32, torch, fused, xentropy, te, got 'torch-fp16'"),
])
def test_bad_training_fields_raise(kw, msg):
    base = dict(seq_length=2048, global_batch_size=64)
    base.update(kw)
    with pytest.raises(InputError, match=re.escape(msg)):
        Training(**base)


def test_mixed_precision_adam_is_megatron_18_bytes_per_param():
    # formulas.md §3.1: bf16 param 2 + fp32 main grad 4 + (fp32 master 4 + m 4 + v 4) = 18
    t = Training(seq_length=2048, global_batch_size=64)
    assert t.param_bytes + t.grad_bytes + t.optimizer_bytes == 18
    # ZeRO paper accounting: 2 + 2 + K=12 = 16
    t2 = Training(seq_length=2048, global_batch_size=64, grad_dtype="bf16")
    assert t2.param_bytes + t2.grad_bytes + t2.optimizer_bytes == 16
    sgd = Training(seq_length=2048, global_batch_size=64, optimizer="sgd-momentum", precision="fp32")
    assert sgd.optimizer_bytes == 4  # fp32 params: no master copy; one momentum buffer


@pytest.mark.parametrize("kw,msg", [
    (dict(tp=3), "num_attention_heads(64) is not divisible by tp(3)"),
    (dict(pp=3), "num_hidden_layers(80) is not divisible by pp(3) * chunks(1); give an uneven split: "
                 "layers_per_stage / --layers-per-stage 27,27,26"),
    # several stages per rank: one entry per virtual stage, as even as it goes (80 = 6 x 13 + 2: the first two 14),
    # which an interleaved Layout takes; no framework's rule is named (the stack's own gave no split)
    (dict(pp=3, vpp=2, schedule="interleaved"), "num_hidden_layers(80) is not divisible by pp(3) * chunks(2); give an "
     "uneven split: layers_per_stage / --layers-per-stage 14,14,13,13,13,13 (one per virtual stage, in layer order)"),
    (dict(micro_batch_size=3), "global_batch_size(512) is not divisible by dp(16) * micro_batch_size(3)"),
    (dict(cp=3), "seq_length(8192) is not divisible by 2 * cp(3)"),
    (dict(ep=2), "ep(2) > 1 needs an MoE model"),
])
def test_cross_rules_name_the_factors(kw, msg):
    m = load_model("llama3-70b")
    t = Training(seq_length=8192, global_batch_size=512)
    lay = dict(tp=1, pp=1, cp=1, ep=1, vpp=1, dp=16, micro_batch_size=1)
    lay.update(kw)
    assert layout_violations(m, t, **lay) == msg
    with pytest.raises(InputError, match=re.escape(msg)):
        validate(m, t, Layout(num_gpus=lay["tp"] * lay["pp"] * lay["cp"] * 16, **lay))


def test_valid_mask_agrees_with_messages_on_a_grid():
    m = load_model("mixtral-8x7b")
    t = Training(seq_length=4096, global_batch_size=256)
    tp, pp, dp, ep = np.meshgrid([1, 2, 3, 4, 8], [1, 2, 3, 4], [1, 2, 4, 8, 16], [1, 2, 4, 8, 16], indexing="ij")
    kw = dict(tp=tp.ravel(), pp=pp.ravel(), dp=dp.ravel(), cp=1, ep=ep.ravel(), vpp=1, micro_batch_size=1)
    msgs = layout_violations(m, t, **kw)
    assert np.array_equal(layout_valid_mask(m, t, **kw), msgs == "")
    # brute force: heads 32 % tp, kv 8 % tp, layers 32 % pp, 256 % dp, experts 8 % ep
    brute = [(32 % a == 0 and 8 % a == 0 and 32 % b == 0 and 256 % c == 0 and 8 % d == 0)
             for a, b, c, d in zip(kw["tp"], kw["pp"], kw["dp"], kw["ep"])]
    assert list(msgs == "") == brute
