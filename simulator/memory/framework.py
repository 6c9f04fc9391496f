"""Framework buffers beyond the model states (bytes per GPU): DeepSpeed's, for the stacks whose
`zero_buffers` / `pipe_buffers` are "deepspeed" (spec/stack.py; stacks/deepspeed.toml has the sizes).

Read from microsoft/DeepSpeed 3401d2516 (2022-02, the release Megatron-DeepSpeed's BLOOM runs used:
deepspeed/runtime/zero/stage_1_and_2.py, engine.py, pipe/engine.py) and 56c522386 (2022-04,
deepspeed/runtime/bf16_optimizer.py, the BF16_Optimizer that tr11 ran with ZeRO stage 0: "bf16 must use
z0! it implements its own zero stage 1 equivalent", bigscience train/tr11-176B-ml/tr11-176B-ml.slurm).
Ψ = parameters on the rank (all of its flat parameter groups), d = the data-parallel degree, g / p the
gradient / parameter bytes, B_r / B_a the reduce / all-gather bucket sizes (elements).

Each buffer lives in one of two phases:
- A, the forward and backward (alive with the activations): BF16_Optimizer's bf16 gradients, ZeRO-2's
  contiguous-gradient bucket, the pipeline engine's receive buffers (and its kept stage outputs, which
  scale with the micro-batches in flight: `pipe_output_bytes`, counted with the activations);
- S, after the last backward (activations freed): the reduction's flattened bucket, the optimizer step's
  gradient partition, the all-gather of the updated parameters.
What `torch.cuda.max_memory_allocated` sees is the larger of the two phases. What the caching allocator
holds (and nvidia-smi shows) also keeps the segments phase S had to add: a cached block serves only a
request no larger than itself and separate segments are never merged (c10/cuda/CUDACachingAllocator.cpp),
and phase S's requests (hundreds of MB to GBs each) are assumed larger than every block the forward and
backward freed, so they take segments of their own, reused among themselves (`step_segment_bytes`) and
kept cached into the next iteration (Megatron-DeepSpeed's loop calls no empty_cache). That assumption
makes the cached term an upper bound of this mechanism; allocation-order effects beyond it
(fragmentation of the forward/backward blocks) are not derived.
Not modelled: DeepSpeed ZeRO-0 with fp16/fp32 (FP16_Optimizer's fp32 gradients), ZeRO-3 buffers other
than the gather buffers of states.py, CPU offload's pinned buffers.
"""
from __future__ import annotations

import numpy as np

from ..units import MiB

SMALL_REQUEST = 1 * MiB  # kSmallSize: requests up to 1 MiB come from the small pool
SMALL_SEGMENT = 2 * MiB  # kSmallBuffer
MID_REQUEST = 10 * MiB  # kMinLargeAlloc: requests below it share 20 MiB segments
MID_SEGMENT = 20 * MiB  # kLargeBuffer
ROUND_LARGE = 2 * MiB  # kRoundLarge: larger requests get their own segment rounded up to 2 MiB
MIN_BLOCK = 512  # kMinBlockSize: every block is a multiple of 512 bytes


def _f(x):
    return np.asarray(x, dtype=float)


def segment_bytes(request) -> np.ndarray:
    """The segment the caching allocator reserves (cudaMalloc) for one request that no cached block can
    serve (c10/cuda/CUDACachingAllocator.cpp, round_size and get_allocation_size): blocks are multiples of
    512 B; requests of at most 1 MiB take a 2 MiB segment, below 10 MiB a 20 MiB one, larger ones their
    size rounded up to 2 MiB. 0 for no request."""
    r = np.ceil(_f(request) / MIN_BLOCK) * MIN_BLOCK
    large = np.ceil(r / ROUND_LARGE) * ROUND_LARGE
    seg = np.where(r <= SMALL_REQUEST, SMALL_SEGMENT, np.where(r < MID_REQUEST, MID_SEGMENT, large))
    return np.where(r > 0, seg, 0.0)


# ---- DeepSpeedZeroOptimizer (ZeRO-1/2) ------------------------------------------------------------------
def zero_reduce_bucket_bytes(psi, *, grad_bytes: float, bucket: float) -> np.ndarray:
    """The flattened copy of one reduction bucket: g·min(B_r, Ψ).

    ZeRO-1 (and ZeRO-2 without contiguous gradients): reduce_independent_p_g_buckets_and_remove_grads
    collects gradients until B_r elements, then reduce_ipg_grads -> buffered_reduce_fallback ->
    allreduce_bucket does `tensor = self.flatten(bucket)` (a new tensor) before the all-reduce; the engine
    forces contiguous_gradients off for stage 1. One bucket at a time (each freed after its copy-back);
    the largest is min(B_r, Ψ). ZeRO-1 reduces after the backward (phase S), ZeRO-2 during it (A)."""
    return float(grad_bytes) * np.minimum(float(bucket), _f(psi))


def zero2_ipg_buffer_bytes(*, grad_bytes: float, bucket: float, overlap_comm: bool) -> float:
    """ZeRO-2 with contiguous_gradients: the ipg buffer g·B_r, two of them with overlap_comm.

    DeepSpeedZeroOptimizer.backward allocates `torch.empty(reduce_bucket_size)` (one more with
    overlap_comm, swapped by ipg_index) before the backward and releases them at the epilogue (phase A)."""
    return float(grad_bytes) * float(bucket) * (2.0 if overlap_comm else 1.0)


def zero_flat_grad_partition_bytes(psi, *, dp, grad_bytes: float) -> np.ndarray:
    """The step's flattened gradient partition g·Ψ/d (phase S).

    step(): `self.flatten(self.averaged_gradients[i])` (flatten_dense_tensors_aligned on the last rank)
    in the gradients' dtype, alive until its `.to(fp32)` copy exists."""
    return float(grad_bytes) * _f(psi) / _f(dp)


def zero_fp32_grad_partition_bytes(psi, *, dp) -> np.ndarray:
    """The fp32 gradient partition 4·Ψ/d the optimizer steps on (phase S).

    step(): `single_grad_partition = ...to(self.single_partition_of_fp32_groups[i].dtype)`, set as the
    fp32 master partition's .grad and freed after optimizer.step() ('get rid of the fp32 gradients')."""
    return 4.0 * _f(psi) / _f(dp)


def zero_allgather_bytes(psi, *, param_bytes: float, bucket: float) -> np.ndarray:
    """The all-gather output of one shard of updated parameters: p·Ψ/max(1, ⌊Ψ/B_a⌋) (phase S).

    step() (ZeRO-1/2) and runtime/utils.py all_gather_dp_groups (BF16_Optimizer): num_shards =
    max(1, ⌊(Ψ/d)·d / B_a⌋), shard = (Ψ/d)/num_shards per rank, `dist.all_gather(shard_list, ...)` over
    d views of the flat parameters; ProcessGroupNCCL gathers a tensor list into a new flat tensor of
    d·shard elements (flatten_for_scatter_gather) before copying it out. Counted for d = 1 too (the
    same call)."""
    psi = _f(psi)
    shards = np.maximum(1.0, np.floor(psi / float(bucket)))
    return float(param_bytes) * psi / shards


# ---- BF16_Optimizer -------------------------------------------------------------------------------------
def bf16_low_precision_grad_bytes(psi, *, param_bytes: float) -> np.ndarray:
    """BF16_Optimizer's bf16 gradients p·Ψ beside its fp32 accumulation buffer (phase A and S).

    The pipeline engine's _exec_backward_pass calls clear_lp_grads() before and
    update_hp_grads(clear_lp_grads=False) after each backward: autograd's bf16 .grad tensors are added
    into fp32_groups_gradients_flat (4Ψ, the fp32 gradients of states.py) and kept until the next
    backward starts, so they are alive through the forwards in between and the step."""
    return float(param_bytes) * _f(psi)


def bf16_reduce_copy_bytes(psi, *, comm_bytes: float = 2.0) -> np.ndarray:
    """The bf16 copy of the fp32 gradients the all-reduce sends: 2·Ψ (phase S).

    pipe/engine.py _bf16_reduce_grads -> buffered_allreduce_fallback(grads=[the fp32 flat gradients]):
    one tensor, so flatten returns it without a copy, but allreduce_bucket then does
    `tensor.to(self.communication_data_type)`, bf16 for a bf16 ZeRO-0 engine (engine.py
    communication_data_type)."""
    return float(comm_bytes) * _f(psi)


# ---- the allocator's view of phase S ---------------------------------------------------------------------
def step_segment_bytes(reduce, flat, fp32, gather) -> np.ndarray:
    """Segments phase S adds to the cache, its requests in DeepSpeed's order with best-fit reuse:

        reduce (freed)  ->  flat and fp32 together (flat freed, fp32 after the step)  ->  gather (freed)

    the first request takes a segment R; flat reuses R when it fits (leaving R − flat), else a new
    segment; fp32 reuses what is left of R when it fits, else a new segment; gather, after all are free,
    reuses the largest segment when it fits, else a new one. Each new segment is `segment_bytes` of its
    request (a zero request takes none). Returns the sum of the segments."""
    R, F, G, A = (segment_bytes(x) for x in (reduce, flat, fp32, gather))
    f_in_r = _f(flat) <= R
    f_new = np.where(f_in_r, 0.0, F)
    left = np.where(f_in_r, R - _f(flat), R)
    g_new = np.where(_f(fp32) <= left, 0.0, G)
    largest = np.maximum(np.maximum(R, f_new), g_new)
    a_new = np.where(_f(gather) <= largest, 0.0, A)
    return R + f_new + g_new + a_new


def zero_buffer_terms(stack, training, psi, *, dp, zero) -> dict[str, np.ndarray]:
    """DeepSpeed's optimizer buffers of a rank holding Ψ parameters, in three parts (module docstring):
    'with_activations' (phase A), 'step_peak' (phase S's largest live set beyond the states, for the
    allocated peak) and 'step_cached' (segments phase S keeps beyond phase A). Zeros for a stack whose
    zero_buffers is "none". bf16 with ZeRO <= 1 runs BF16_Optimizer (the engine's choice for bf16 with
    ZeRO stage 0, which shards the optimizer states as ZeRO-1); ZeRO-1/2 otherwise
    DeepSpeedZeroOptimizer; ZeRO-0 and ZeRO-3 add nothing here. psi, dp, zero broadcast."""
    psi = _f(psi)
    zeros = np.zeros(np.broadcast_shapes(psi.shape, np.shape(dp), np.shape(zero)))
    if stack.zero_buffers != "deepspeed":
        return {"with_activations": zeros, "step_peak": zeros, "step_cached": zeros}
    z = np.asarray(zero)
    g, p = float(training.grad_bytes), float(training.param_bytes)
    gather = zero_allgather_bytes(psi, param_bytes=p, bucket=stack.zero_allgather_bucket_size)
    if training.param_dtype == "bf16":  # BF16_Optimizer (ZeRO <= 1)
        lp, red = bf16_low_precision_grad_bytes(psi, param_bytes=p), bf16_reduce_copy_bytes(psi)
        bf = {"with_activations": lp, "step_peak": lp + np.maximum(red, gather),
              "step_cached": step_segment_bytes(red, 0.0, 0.0, gather)}
    flat = zero_flat_grad_partition_bytes(psi, dp=dp, grad_bytes=g)
    fp32 = zero_fp32_grad_partition_bytes(psi, dp=dp)
    red = zero_reduce_bucket_bytes(psi, grad_bytes=g, bucket=stack.zero_reduce_bucket_size)
    contiguous = (z == 2) & stack.zero_contiguous_gradients
    ipg = zero2_ipg_buffer_bytes(grad_bytes=g, bucket=stack.zero_reduce_bucket_size,
                                 overlap_comm=stack.zero_overlap_comm)
    first = np.where(contiguous, g * float(stack.zero_reduce_bucket_size), red)  # phase S's first segment
    in_a = np.where(contiguous, ipg, np.where(z == 2, red, 0.0))  # ZeRO-2 reduces during the backward
    segs = step_segment_bytes(first, flat, fp32, gather) - np.where(z == 2, segment_bytes(first), 0.0)
    ds = {"with_activations": in_a,
          "step_peak": np.maximum(np.maximum(np.where(z == 1, red, 0.0), flat + fp32), gather),
          "step_cached": segs}
    out = {}
    for k in ds:
        v = np.where((z == 1) | (z == 2), ds[k], 0.0)
        if training.param_dtype == "bf16":
            v = np.where(z <= 1, bf[k], v)
        out[k] = zeros + v
    return out


def pipe_output_bytes(model, training, *, tp, cp=1, micro_batch_size=1) -> np.ndarray:
    """One micro-batch's stage output the DeepSpeed PipelineEngine keeps until its backward: e·(b·s/c)·h/t.

    _exec_forward_pass stores `self.pipe_buffers['outputs'][buffer_id] = outputs` and _exec_backward_pass
    frees it; with tp > 1 (is_pipe_partitioned) the output is a PartitionedTensor, 1/t of it per rank, and
    the full tensor's data is dropped (`first_output.data = torch.zeros(1)`). Counted per micro-batch in
    flight on every stage but the last (whose output is the loss)."""
    tokens = _f(micro_batch_size) * training.seq_length / _f(cp)
    return float(training.activation_bytes) * tokens * model.hidden_size / _f(tp)


def pipe_receive_bytes(model, training, *, tp, cp=1, micro_batch_size=1, first, last) -> np.ndarray:
    """The PipelineEngine's receive buffers, kept for the run: `pipe_recv_buf` (activations, on every stage
    but the first) and `grad_layer` (gradients, on every stage but the last), each one partitioned stage
    output (`pipe_output_bytes`). `first` / `last`: 0/1 arrays of the rank's position."""
    one = pipe_output_bytes(model, training, tp=tp, cp=cp, micro_batch_size=micro_batch_size)
    return one * ((1.0 - _f(first)) + (1.0 - _f(last)))


def _col(x):
    """A per-layout value (scalar or (N,)) as a column against per-rank arrays (..., q)."""
    x = np.asarray(x)
    return x[..., None] if x.ndim else x


def with_framework_terms(st: dict, model, training, placement, *, tp, dp, cp, zero, micro_batch_size,
                         inference: bool = False) -> dict:
    """The model states `st` (states.model_state_bytes, per rank or class) with the stack's buffers:
    'gather' (bytes alive with the activations) gains phase A's buffers (zero_buffer_terms
    'with_activations' + pipe_receive_bytes); new keys 'cached' (phase S's extra segments, in the
    reserved memory only), 'step' (phase S's live bytes beyond the states, for the allocated peak) and
    'framework' (phase A's buffers + 'cached', reported). Zeros in inference and for stacks without."""
    stack = training.stack
    if inference or (stack.zero_buffers == "none" and stack.pipe_buffers == "none"):
        return {**st, "cached": 0.0, "step": 0.0, "framework": 0.0}
    psi = st["params_count"]
    zeros = np.zeros(np.broadcast_shapes(np.shape(psi), np.shape(st["gather"]), np.shape(_col(dp))))
    z = zero_buffer_terms(stack, training, psi, dp=_col(dp), zero=_col(zero))
    in_a = z["with_activations"]
    if stack.pipe_buffers == "deepspeed":
        in_a = in_a + pipe_receive_bytes(model, training, tp=_col(tp), cp=_col(cp),
                                         micro_batch_size=_col(micro_batch_size), first=placement.embedding,
                                         last=placement.head)
    out = dict(st)
    if np.any(in_a):
        out["gather"] = st["gather"] + in_a
    out.update({"cached": zeros + z["step_cached"], "step": zeros + z["step_peak"],
                "framework": zeros + in_a + z["step_cached"]})
    return out
