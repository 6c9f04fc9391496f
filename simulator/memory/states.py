"""Model states per GPU: weights, gradients, optimizer states (ZeRO 0-3, FSDP, HSDP, offload).

Notation (formulas.md §0, §3.1): Ψ parameters resident on a rank before data-parallel sharding,
P/G bytes per parameter of weights/gradients, K bytes per parameter of optimizer state (fp32 master
copy + moments: 12 for mixed-precision Adam), d the sharding degree.

Parameters resident on a rank (formulas.md §1.5, Megatron-LM `theoretical_memory_usage.py`):
    Ψ_rank = Ψ_tp / t + Ψ_rep + Ψ_exp / (e · t)
- Ψ_tp: tensor-parallel weights (QKV/out projections, dense and shared-expert MLPs, vocab-parallel
  embedding and LM head), split over t;
- Ψ_rep: weights every TP rank keeps whole: norms, MoE router, row-parallel biases, QK-norm, MLA
  down-projections (Megatron-Core builds `linear_q_down_proj`/`linear_kv_down_proj` duplicated),
  learned position table;
- Ψ_exp: routed experts, split over e (expert parallel) and over u (expert tensor parallel,
  Megatron-Core's `expert_tensor_parallel_size`: tensor parallel by default).
Sharding degrees d (dense) and d_e (experts): `spec.rules.shard_degrees`, the one rule for memory
and the optimizer step's time.
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..spec.model import ModelSpec
from ..spec.training import Training
from ..spec.placement import StagePlacement, params_per_rank, stage_param_split  # noqa: F401 (re-exported)
from ..spec.rules import shard_degrees
from ..spec.validate import offload_problem
from ..units import DTYPE_BYTES


def zero_state_bytes_per_param(*, zero: int, shard_degree, param_bytes: float, grad_bytes: float,
                               optimizer_bytes: float, offload_optimizer: bool = False,
                               offload_params: bool = False) -> dict[str, np.ndarray]:
    """Bytes per parameter on the GPU and on the host under ZeRO stage `zero` (ZeRO §5, Fig. 1).

        stage 0 (DDP):        P + G + K
        stage 1 (P_os):       P + G + K/d
        stage 2 (P_os+g):     P + (G + K)/d
        stage 3 (P_os+g+p):   (P + G + K)/d      (= FSDP FULL_SHARD; HYBRID_SHARD with d = group size)
    Megatron's distributed optimizer with bf16 params and fp32 main grads is stage 1 with G = 4:
    2 + 4 + 12/d (Megatron-LM README, "6 + 12/d"; 18 without it).
    ZeRO-Offload (Ren et al. 2021, §4.1): the optimizer state (fp32 master + moments, K/d) and an fp32
    gradient partition (4/d) live in host memory; the GPU keeps weights and gradients.
    Parameter offload (ZeRO-Infinity, stage 3 only): the weight shard P/d lives on the host.
    Returns {'params', 'grads', 'optimizer', 'host'} (bytes per parameter; arrays if d is).
    """
    d = np.asarray(shard_degree, dtype=float)
    z = np.asarray(zero)
    d, z = np.broadcast_arrays(d, z)
    one = np.ones_like(d)
    params = param_bytes * np.where(z >= 3, one / d, one)
    grads = grad_bytes * np.where(z >= 2, one / d, one)
    opt = optimizer_bytes * np.where(z >= 1, one / d, one)
    host = np.zeros_like(d)
    if offload_optimizer:
        host = host + opt + 4.0 * np.where(z >= 1, one / d, one)
        opt = np.zeros_like(d)
    if offload_params:
        host = host + params
        params = np.zeros_like(d)
    return {"params": params, "grads": grads, "optimizer": opt, "host": host}


def model_state_bytes(model: ModelSpec, training: Training, placement: StagePlacement, *, tp, dp, cp, ep,
                      zero: int, shard_group_size: int | None = None, etp=None,
                      inference: bool = False, pp=1, num_microbatches=1, dp_mode: str = "ddp") -> dict[str, np.ndarray]:
    """Weights, gradients, optimizer state (GPU) and host bytes per rank per stage.

    Combines `params_per_rank` with `zero_state_bytes_per_param` for the dense (degree d) and expert
    (degree d_e) parts (`etp`: the experts' tensor-parallel degree, None: tp; `shard_degrees`). Inference keeps
    only the weights, unsharded over data parallelism.
    Also returns 'gather' = transient bytes of ZeRO-3/FSDP: the all-gathered weights of the layer being
    computed and of the prefetched next layer plus the unsharded gradient of one layer before its
    reduce-scatter, 2·P·Ψ_layer + G·Ψ_layer (formulas.md §3.2, [derived]; Playbook: prefetch layer n+1
    during layer n). Where the stack keeps parameters unsharded after forward at this `pp`
    (Stack.fsdp_reshards: torchtitan with PP, `reshard_after_forward = False`), every gathered layer
    stays until its backward: P·Ψ_rank + G·Ψ_layer. Where gradients are reduce-scattered once per step
    (Stack.fsdp_reduces_every_microbatch false) and more than one backward runs before that reduction
    (m > 1 micro-batches, or any pipelined stage: torch.distributed.pipelining turns gradient sync off for
    every micro-batch and reduce-scatters after the last one), the stage's unsharded gradients accumulate:
    + R·Ψ_rank, R the stack's reduce dtype bytes (`accumulated_grad_bytes`). Shapes (pp,) or (N, pp).
    """
    split = stage_param_split(model, placement)
    dense, expert = params_per_rank(split, tp=tp, ep=ep, etp=etp)
    P, G, K = training.param_bytes, training.grad_bytes, training.optimizer_bytes
    zeros = np.zeros_like(dense + expert)
    if inference:
        return {"params": P * (dense + expert), "grads": zeros, "optimizer": zeros, "host": zeros,
                "gather": zeros, "optimizer_step": zeros, "grad_buckets": zeros, "params_count": dense + expert}
    if training.offload_params or training.offload_optimizer:  # (a sweep's stages: spec.validate.zero_stages)
        problem = next(filter(None, (offload_problem(training, int(z)) for z in np.unique(zero))), "")
        if problem:
            raise InputError(problem)
    d, d_e = shard_degrees(dp=dp, cp=cp, ep=ep, shard_group_size=shard_group_size, tp=tp, etp=etp)
    kw = dict(zero=zero, param_bytes=P, grad_bytes=G, optimizer_bytes=K,
              offload_optimizer=training.offload_optimizer, offload_params=training.offload_params)
    bd = zero_state_bytes_per_param(shard_degree=d, **kw)
    be = zero_state_bytes_per_param(shard_degree=d_e, **kw)
    out = {k: bd[k][..., None] * dense + be[k][..., None] * expert for k in ("params", "grads", "optimizer", "host")}
    z3 = (np.asarray(zero) == 3)
    if z3.any():
        layers = np.maximum(placement.layers, 1)
        per_layer = (dense + expert) / layers * (placement.layers > 0)
        keep = ~training.stack.fsdp_reshards(pp)
        keep = keep[..., None] if np.ndim(keep) else keep
        gather = np.where(keep, P * (dense + expert) + G * per_layer, (2 * P + G) * per_layer)
        gather = gather + accumulated_grad_bytes(dense + expert, training.stack, grad_bytes=G, pp=pp,
                                                 num_microbatches=num_microbatches)
        out["gather"] = gather * (z3[..., None] if z3.ndim else 1.0)
    else:
        out["gather"] = zeros
    out["grad_buckets"] = ddp_bucket_bytes(dense + expert, training, zero=zero, shard_degree=d, dp_mode=dp_mode)
    out["grads"] = out["grads"] + out["grad_buckets"]
    out["optimizer_step"] = optimizer_step_bytes(out["optimizer"], training)
    out["params_count"] = dense + expert
    return out


def ddp_bucket_bytes(params_per_rank, training: Training, *, zero, shard_degree, dp_mode: str = "ddp") -> np.ndarray:
    """The second copy of the gradients torch's DistributedDataParallel keeps in its communication buckets:

        G · Ψ_rank   under ZeRO-0 in DDP mode (`dp_mode` "ddp"; torch's single-process DataParallel and
                     asynchronous data parallelism have no buckets) where the model is wrapped in DDP (more
                     than one data-parallel rank, or one where the stack wraps a one-rank group too:
                     Stack.ddp_one_rank) and the stack's DDP copies the gradients into its buckets
                     (Stack.ddp_bucket_view false); else 0

    torch's Reducer allocates one flat tensor per bucket covering every parameter (reducer.cpp
    `initialize_buckets`: `bucket.gradients = at::empty(...)`, with no world-size condition, so a one-rank
    group has them too: +G·Ψ measured on an H100 at world size 1, validation/gpu_memory_report.py; a one-rank
    gloo group on CPU, tests/test_memory_phases.py) and, with `gradient_as_bucket_view=False` (DDP's default),
    copies each gradient into it before the all-reduce (`copy_grad_to_bucket`), so both stay allocated;
    with True the parameters' `.grad` are views of the buckets ("the saved memory size will be equal to the
    total gradients size", DDP docs; pytorch/pytorch#41954: ~1 GB less peak for a model of ~1 GB of
    parameters). Megatron-Core's DDP keeps one contiguous buffer that is both; FSDP and DeepSpeed reduce
    their own buffers (memory/framework.py). In the gradients' dtype (G bytes), counted with the gradients
    and kept between steps (DDP allocates the buckets once)."""
    z = np.asarray(zero)
    ddp = (z == 0) & ((np.asarray(shard_degree) > 1) | training.stack.ddp_one_rank)
    ddp = ddp[..., None] if ddp.ndim else ddp
    if training.stack.ddp_bucket_view or dp_mode != "ddp" or not np.any(ddp):
        return np.zeros_like(np.asarray(params_per_rank, dtype=float))
    return np.where(ddp, float(training.grad_bytes) * np.asarray(params_per_rank, dtype=float), 0.0)


def optimizer_step_bytes(optimizer_bytes, training: Training) -> np.ndarray:
    """Bytes the optimizer step allocates beyond the model states, alive while the step runs:

        foreach Adam / AdamW:  (b_m / K) · optimizer_bytes  = b_m · Ψ_opt     (one second-moment copy)
        otherwise:             0

    torch's multi-tensor Adam (torch/optim/adam.py `_multi_tensor_adam`, the `foreach` implementation,
    torch's default on CUDA tensors) computes the denominator out of place, `exp_avg_sq_sqrt =
    torch._foreach_sqrt(device_exp_avg_sqs)`, then divides and adds eps into it in place and frees it after
    `_foreach_addcdiv_`: one new tensor per second moment, b_m bytes (the moments' dtype) for each of the
    rank's Ψ_opt optimizer-owned parameters, all alive at once (one call over the whole list). AdamW's
    decay (`_foreach_mul_` on the parameters) and the moment updates (`_foreach_lerp_`, `_foreach_mul_`,
    `_foreach_addcmul_`) work in place. The fused kernels (torch `fused=True`, Apex / Megatron / DeepSpeed
    FusedAdam) update in registers: nothing. The for-loop implementations (torch `_single_tensor_adam`,
    Composer's DecoupledAdamW `adamw`) compute the denominator one parameter at a time, `exp_avg_sq.sqrt()`
    then its division by a scalar (a second new tensor): at most 2·b_m bytes of the largest parameter at
    once, not counted (one tensor of a transformer's many; the embedding, the largest, is ~3-7 % of Llama 3
    8B-70B's parameters). SGD's foreach step without Nesterov or weight decay updates in place:
    nothing. `optimizer_bytes` is the rank's K·Ψ_opt (K = Training.optimizer_bytes: master copy +
    moments; 0 when offloaded), so the share b_m / K of it is one moment's bytes."""
    k = float(training.optimizer_bytes)
    foreach_adam = training.stack.optimizer_impl == "foreach" and training.optimizer in ("adam", "adamw")
    if not foreach_adam or k <= 0.0:
        return np.zeros_like(np.asarray(optimizer_bytes, dtype=float))
    return np.asarray(optimizer_bytes, dtype=float) * (DTYPE_BYTES[training.optimizer_dtype] / k)


def absent_grad_bytes(grads_bytes, stack, *, inflight, num_microbatches, zero,
                      counter: str = "reserved") -> np.ndarray:
    """Gradient bytes not yet allocated when a rank's activations peak, as `counter` sees them:

        G_rank   where the stack frees gradients between steps (grad_buffer "set-to-none"), the rank runs
                 every forward of the step before its first backward (m ≤ its in-flight micro-batches: one
                 micro-batch without a pipeline, GPipe, a 1F1B stage that holds all m) and, for the device's
                 reserved peak (`counter` "reserved", what parasim's peak is), autograd allocates them on the
                 compute stream (zero ≤ 1); for the allocator's allocated peak (`counter` "allocated":
                 torch.cuda.max_memory_allocated, MemoryBreakdown.allocated_bytes) at every zero; else 0

    `zero_grad(set_to_none=True)` (torch.optim.Optimizer and nn.Module default since torch 2.0) drops every
    `.grad`; autograd's AccumulateGrad allocates each gradient when the backward first reaches its
    parameter, while that backward frees the activations saved for it. The step's activation peak (all
    micro-batches in flight, the loss's backward working set) therefore holds no gradients when no backward
    ran before it; once one has, they stay allocated until the next zero_grad, so a forward after a
    backward (gradient accumulation, 1F1B's steady state) peaks with them, as persistent buffers do
    (Megatron-Core's contiguous grad buffer, zeroed in place). Sharded gradients (ZeRO-2/3: FSDP1's
    SHARD_GRAD_OP / FULL_SHARD, FSDP2) are the reduce-scatter's outputs, allocated on its own stream (FSDP1
    `_reduce_grad` on the post-backward stream, FSDP2 `foreach_reduce` on the reduce-scatter stream); the
    CUDA caching allocator reuses a freed block only for allocations on the stream it was allocated on
    (torch.Tensor.record_stream docs, "CUDA semantics: memory management"), so the activations freed on the
    compute stream cannot hold them and the device's reserved peak keeps them: 0 there. They are still not
    allocated at that moment, so the allocated peak drops by them all the same (FSDP2 on one H100 rank:
    −G_rank allocated, −15 % of it reserved; validation/gpu_memory_report.py). `grads_bytes` the rank's
    G_rank, `inflight` its in-flight micro-batches, `zero` the ZeRO stage; shapes broadcast."""
    if counter not in ("reserved", "allocated"):
        raise ValueError(f"counter must be 'reserved' or 'allocated', got {counter!r}")
    shape = np.broadcast_shapes(np.shape(grads_bytes), np.shape(inflight))
    if stack.grad_buffer != "set-to-none":
        return np.zeros(shape)
    m, z = np.asarray(num_microbatches, dtype=float), np.asarray(zero)
    m, z = (m[..., None] if m.ndim else m), (z[..., None] if z.ndim else z)
    off = (m <= np.asarray(inflight, dtype=float)) & ((z <= 1) | (counter == "allocated"))
    return np.where(off, np.asarray(grads_bytes, dtype=float), 0.0)


def accumulated_grad_bytes(params_per_rank, stack, *, grad_bytes: float, pp, num_microbatches) -> np.ndarray:
    """Unsharded gradients FSDP keeps across the micro-batches of a step when it reduce-scatters once:

        R · Ψ_rank   where the stack reduces once per step at this pp, and (pp > 1 or m > 1); else 0

    Ψ_rank the stage's parameters on the rank before sharding, R the reduce dtype's bytes
    (Stack.fsdp_reduce_bytes). Sources: torch.distributed.pipelining stage.py `backward_maybe_with_nosync`
    (FSDP2 stages: set_requires_gradient_sync(False) and set_reshard_after_backward(False) for every
    micro-batch, all reduce-scatters in `run_post_backward` after the last one); FSDP2
    `FSDPParam.to_accumulated_grad_if_needed` (torch/distributed/fsdp/_fully_shard/_fsdp_param.py: the
    unsharded gradient is upcast to the reduce dtype and accumulated there); FSDP1 `no_sync` ("gradients
    are accumulated ... in the unsharded form", torch FullyShardedDataParallel.no_sync docstring). The
    term is counted beside the peak's in-flight activations: exact when the stage runs more micro-batches
    than it holds in flight (1F1B's steady state), one micro-batch's activations high otherwise (its first
    backward frees one before the gradients exist)."""
    pp = np.asarray(pp)
    once = ~stack.fsdp_reduces_every_microbatch(pp)
    acc = once & ((pp > 1) | (np.asarray(num_microbatches) > 1))
    acc = acc[..., None] if np.ndim(acc) else acc
    return np.where(acc, float(stack.fsdp_reduce_bytes(grad_bytes)) * np.asarray(params_per_rank, dtype=float), 0.0)


def host_bytes_per_gpu_limit(*, host_mem_bytes: float, gpus_per_node: int) -> float:
    """Host RAM one GPU may fill with offloaded states: the node's RAM shared by its GPUs,

        limit = host_mem_bytes / gpus_per_node

    (every GPU of a node offloads the same share: ZeRO-Offload partitions the states over the data-parallel
    ranks, Ren et al. 2021 §4.2). host_mem_bytes: the profile's [host] host_mem_gb (NVIDIA DGX datasheets)."""
    return float(host_mem_bytes) / float(gpus_per_node)


def host_memory_reason(host_bytes: float, *, host_mem_bytes: float, gpus_per_node: int, stage: int = 0) -> str:
    """'' when `host_bytes` (a GPU's offloaded states, memory's `host_bytes`) fit its share of the node's host
    RAM (`host_bytes_per_gpu_limit`), else the reason naming host memory."""
    limit = host_bytes_per_gpu_limit(host_mem_bytes=host_mem_bytes, gpus_per_node=gpus_per_node)
    if host_bytes <= limit:
        return ""
    gib = 2.0**30
    return (f"host memory: {host_bytes / gib:.1f} GiB offloaded per GPU > {limit / gib:.1f} GiB host RAM per GPU "
            f"({host_mem_bytes / gib:.1f} GiB per node / {gpus_per_node} GPUs) (stage {stage})")
