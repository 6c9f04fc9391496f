"""DeepSpeed's buffers (simulator/memory/framework.py) against hand computation from DeepSpeed's defaults
(reduce_bucket_size = allgather_bucket_size = 5e8 elements; stacks/deepspeed.toml), the caching
allocator's segment rounding, the counter a measured peak is read with (validate/predict.py
memory_counter), and the sweep's worst-stage path with the buffers on."""
import dataclasses

import numpy as np
import pytest

from simulator.errors import InputError
from simulator.memory import memory_breakdown, stage_memory_arrays
from simulator.memory.framework import (bf16_low_precision_grad_bytes, bf16_reduce_copy_bytes, pipe_output_bytes,
                                        pipe_receive_bytes, segment_bytes, step_segment_bytes,
                                        zero2_ipg_buffer_bytes, zero_allgather_bytes, zero_buffer_terms,
                                        zero_flat_grad_partition_bytes, zero_fp32_grad_partition_bytes,
                                        zero_reduce_bucket_bytes)
from simulator.spec.layout import Layout
from simulator.spec.model import ModelSpec
from simulator.spec.stack import load_stack
from simulator.spec.training import Training
from simulator.units import MiB

DS = load_stack("deepspeed")
PSI = 2_300_000_000  # parameters on BLOOM's first stage at TP8-PP12 (~2.3e9)


def _bloom(**kw):
    # a BLOOM-candidate shape (h 14336, 64 heads, 72 layers, vocab 250880), as the BLOOM_PREQUEL rows map it
    model = ModelSpec(name="bloom-like", num_layers=72, hidden_size=14336, num_heads=64, ffn_hidden_size=57344,
                      vocab_size=250880, mlp="gelu", norm="layernorm", qkv_bias=True, out_bias=True, mlp_bias=True,
                      tie_word_embeddings=True)
    tr = dict(seq_length=2048, global_batch_size=2048, precision="fp16", grad_dtype="fp16", flash_attention=False,
              stack=DS)
    tr.update(kw)
    return model, Training(**tr)


def test_deepspeed_defaults_are_the_stack_fields():
    assert (DS.zero_buffers, DS.pipe_buffers) == ("deepspeed", "deepspeed")
    assert DS.zero_reduce_bucket_size == DS.zero_allgather_bucket_size == 500_000_000
    assert DS.zero_contiguous_gradients and not DS.zero_overlap_comm and DS.cuda_context_mib == 512
    meg = load_stack("megatron")
    assert (meg.zero_buffers, meg.pipe_buffers) == ("none", "none")
    with pytest.raises(InputError, match="zero_buffers"):
        load_stack("deepspeed", zero_buffers="apex")
    with pytest.raises(InputError, match="zero_reduce_bucket_size"):
        load_stack("deepspeed", zero_reduce_bucket_size=0)


def test_each_buffer_by_hand():
    # ZeRO-1 reduce: flatten of one bucket of fp16 gradients, min(5e8, Ψ) elements x 2 B
    assert zero_reduce_bucket_bytes(PSI, grad_bytes=2, bucket=5e8) == 1e9
    assert zero_reduce_bucket_bytes(3e8, grad_bytes=2, bucket=5e8) == 6e8
    # ZeRO-2 contiguous gradients: the ipg buffer, two with overlap_comm
    assert zero2_ipg_buffer_bytes(grad_bytes=2, bucket=5e8, overlap_comm=False) == 1e9
    assert zero2_ipg_buffer_bytes(grad_bytes=2, bucket=5e8, overlap_comm=True) == 2e9
    # the step: the flattened fp16 partition 2·Ψ/d and its fp32 copy 4·Ψ/d (d = 4)
    assert zero_flat_grad_partition_bytes(PSI, dp=4, grad_bytes=2) == 1.15e9
    assert zero_fp32_grad_partition_bytes(PSI, dp=4) == 2.3e9
    # all-gather: num_shards = max(1, 2.3e9 // 5e8) = 4, output Ψ/4 elements x 2 B; below a bucket: Ψ
    assert zero_allgather_bytes(PSI, param_bytes=2, bucket=5e8) == 1.15e9
    assert zero_allgather_bytes(4e8, param_bytes=2, bucket=5e8) == 8e8
    # BF16_Optimizer: bf16 gradients kept beside the fp32 ones (2Ψ), bf16 copy for the all-reduce (2Ψ)
    assert bf16_low_precision_grad_bytes(4e9, param_bytes=2) == 8e9 == bf16_reduce_copy_bytes(4e9)
    # pipeline engine: the partitioned stage output 2·s·b·h/t = 2·2048·4·14336/8 per micro-batch in flight
    model, tr = _bloom()
    assert pipe_output_bytes(model, tr, tp=8, micro_batch_size=4) == 29_360_128
    assert pipe_receive_bytes(model, tr, tp=8, micro_batch_size=4, first=1, last=0) == 29_360_128  # grads only
    assert pipe_receive_bytes(model, tr, tp=8, micro_batch_size=4, first=0, last=0) == 2 * 29_360_128
    assert pipe_receive_bytes(model, tr, tp=8, micro_batch_size=4, first=1, last=1) == 0  # pp = 1


def test_segments_follow_the_caching_allocators_rounding():
    # kSmallBuffer 2 MiB for <= 1 MiB, kLargeBuffer 20 MiB below 10 MiB, else rounded up to 2 MiB (kRoundLarge)
    assert segment_bytes(1) == 2 * MiB and segment_bytes(MiB) == 2 * MiB
    assert segment_bytes(1.5 * MiB) == 20 * MiB
    assert segment_bytes(10 * MiB + 1) == 12 * MiB and segment_bytes(12 * MiB) == 12 * MiB
    assert segment_bytes(1e9) == 477 * 2 * MiB and segment_bytes(0) == 0


def test_step_segments_reuse_what_fits():
    r, f, g, a = 1e9, 1.15e9, 2.3e9, 1.15e9  # BLOOM TP8-PP12-DP4 stage 0: nothing fits the bucket's segment
    want = segment_bytes(r) + segment_bytes(f) + segment_bytes(g)  # the all-gather fits the fp32 segment
    assert step_segment_bytes(r, f, g, a) == want
    # d = 24: flat (1.9e8) fits the bucket's segment, fp32 (3.8e8) fits what is left of it, the all-gather too
    assert step_segment_bytes(1e9, 1.9e8, 3.8e8, 9e8) == segment_bytes(1e9)
    # BF16_Optimizer: the bf16 copy, then an all-gather output no larger than it
    assert step_segment_bytes(8e9, 0.0, 0.0, 1.1e9) == segment_bytes(8e9)


def test_zero_buffer_terms_pick_the_optimizer():
    model, fp16 = _bloom()
    t = zero_buffer_terms(DS, fp16, PSI, dp=4, zero=np.array([0, 1, 2, 3]))
    assert t["with_activations"][[0, 1, 3]].tolist() == [0, 0, 0] and t["with_activations"][2] == 1e9  # ZeRO-2 ipg
    assert t["step_peak"][1] == max(1e9, 1.15e9 + 2.3e9, 1.15e9)
    assert t["step_cached"][1] == step_segment_bytes(1e9, 1.15e9, 2.3e9, 1.15e9)
    assert t["step_peak"][0] == t["step_peak"][3] == 0  # FP16_Optimizer and ZeRO-3: not modelled here
    _, bf16 = _bloom(precision="bf16", grad_dtype="fp32")
    t = zero_buffer_terms(DS, bf16, PSI, dp=4, zero=1)  # BF16_Optimizer
    assert t["with_activations"] == 2 * PSI and t["step_peak"] == 2 * PSI + max(2 * PSI, 1.15e9)
    assert t["step_cached"] == segment_bytes(2 * PSI)
    none = zero_buffer_terms(load_stack("megatron"), fp16, PSI, dp=4, zero=1)
    assert all(not np.any(v) for v in none.values())


def test_breakdown_adds_the_buffers_on_their_stage():
    # BLOOM TP8-PP12-DP4, mbs 4, fp16 ZeRO-1, full recompute: stage 0 holds the embedding and 6 layers
    model, tr = _bloom()
    lay = Layout(num_gpus=384, tp=8, pp=12, dp=4, micro_batch_size=4, zero=1, recompute="full")
    r = memory_breakdown(model, tr, lay).per_stage
    meg = memory_breakdown(model, dataclasses.replace(tr, stack=load_stack("megatron")), lay).per_stage
    s0, s11 = r[0], r[11]
    psi = s0.params
    cached = step_segment_bytes(2 * min(5e8, psi), 2 * psi / 4, 4 * psi / 4, zero_allgather_bytes(psi, param_bytes=2,
                                                                                                  bucket=5e8))
    out = pipe_output_bytes(model, tr, tp=8, micro_batch_size=4)
    assert s0.framework_bytes == pytest.approx(cached + out)  # + the gradient receive buffer
    assert s0.activations_bytes - meg[0].activations_bytes == pytest.approx(s0.inflight_microbatches * out)
    assert s11.activations_bytes == meg[11].activations_bytes  # the last stage's output is the loss
    assert s0.context_bytes == 512 * MiB + 3 * 128 * MiB  # TP, PP, DP communicators
    states = s0.params_bytes + s0.grads_bytes + s0.optimizer_bytes
    assert s0.allocated_bytes == pytest.approx(max(states + s0.activations_bytes + s0.transient_bytes,
                                                   states + max(1e9, 6 * psi / 4)))
    assert s0.allocated_bytes < s0.peak_bytes - s0.context_bytes < s0.peak_bytes
    # the megatron stack has none of these, and its numbers are what they were
    assert meg[0].framework_bytes == 0 and meg[0].peak_bytes < s0.peak_bytes


def test_the_counter_a_basis_names():
    import types

    from simulator.validate import memory_counter, memory_counter_bytes, predicted_memory

    smi = "max nvidia-smi memory on first/last PP stage GPUs (which hold the embedding)"
    assert memory_counter(smi) == "nvidia-smi"
    assert memory_counter("torch.cuda.max_memory_allocated per GPU") == "torch-allocated"
    assert memory_counter("torch.cuda.max_memory_reserved") == "torch-reserved"
    assert memory_counter("peak memory per GPU (GB) as reported") == "device"
    st = types.SimpleNamespace(stage=0, peak_bytes=10.0, context_bytes=1.5, allocated_bytes=7.0)
    assert [memory_counter_bytes(st, c) for c in ("nvidia-smi", "device", "torch-reserved", "torch-allocated")] == \
        [10.0, 10.0, 8.5, 7.0]
    st1 = types.SimpleNamespace(stage=1, peak_bytes=9.0, context_bytes=0.5, allocated_bytes=8.0)
    mem = types.SimpleNamespace(per_stage=[st, st1], peak_bytes=10.0)
    assert predicted_memory(mem, "nvidia-smi", 2) == (10.0, 0)
    assert predicted_memory(mem, "max_memory_allocated", 2) == (8.0, 1)  # the counter picks the stage too


@pytest.mark.parametrize("precision, grad", [("fp16", "fp16"), ("bf16", "fp32")])
def test_worst_stage_form_equals_the_per_rank_arrays_with_deepspeed_buffers(precision, grad):
    # the sweep's short paths (rank classes, worst_of, in-flight key) add the cached step segments and the
    # pipeline engine's outputs as the per-rank arrays do, bit for bit
    from simulator.structure import pipeline_table

    model, tr = _bloom(precision=precision, grad_dtype=grad)
    pp, tp = np.array([2, 4, 12, 1, 6]), np.array([8, 4, 8, 8, 2])
    dp = np.array([24, 12, 4, 1, 8])
    sched = np.array(["1f1b"] * 5, dtype=object)
    pt = pipeline_table(model, schedule=sched, pp=pp, chunks=np.ones(5, dtype=int))
    P = pt.padded_ranks
    inflight = np.where(pt.rank_valid, np.minimum(pp[:, None] - np.arange(P), 64), 0.0)
    kw = dict(tp=tp, pp=pp, dp=dp, cp=1, ep=1, vpp=1, micro_batch_size=np.array([1, 2, 4, 1, 2]),
              num_microbatches=np.full(5, 64), zero=1, recompute="full", sequence_parallel=False, schedule=sched,
              inflight_per_stage=inflight, placement=pt.classes, rank_class=pt.rank_class)
    full = stage_memory_arrays(model, tr, **kw)
    w = np.argmax(np.where(pt.rank_valid, full["peak_bytes"], -np.inf), axis=1)
    rows = np.arange(5)
    for key in (None, np.arange(5)):
        worst = stage_memory_arrays(model, tr, **kw, worst_of=pt.rank_valid, inflight_key=key)
        assert np.array_equal(worst["worst_stage"], w)
        for k in ("peak_bytes", "activations_bytes", "other_bytes"):
            assert np.array_equal(worst[k], full[k][rows, w]), k
    assert (full["framework_bytes"][pt.rank_valid] > 0).all()
