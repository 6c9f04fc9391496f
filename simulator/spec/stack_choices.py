"""The values each `Stack` field takes (spec/stack.py): one tuple per categorical field, with what each value means
and where the physics reads it."""
from __future__ import annotations

import re

from ..errors import InputError

ATTENTION_KERNELS = ("flash3", "flash2", "flash1", "cudnn", "triton", "triton-pre-mlir", "xformers", "unfused")
ATTENTION_PADDING = ("none", "unpad")  # attention_padding: flash-attn bert_padding around each attention call
CP_RING_MERGES = ("te", "torch")  # cp_ring_merge: whose ring-CP attention (cost/cp_merge.py)
OPTIMIZER_IMPLS = ("fused", "foreach", "for-loop")
GRAD_BUFFERS = ("persistent", "set-to-none")  # grad_buffer: gradients kept between steps or freed by zero_grad
GRAD_ACCUMULATIONS = ("fused", "autograd")  # grad_accumulation: the wgrad GEMM adds into .grad, or autograd does
# FP8 scaling recipes (Transformer Engine recipes; torchao's tensorwise dynamic scaling is "current"):
#   delayed: scale from the amax history, amax taken inside the cast kernel; current: an amax pass over
#   the tensor before the cast; mxfp8: one 1-byte scale per 32 elements (block scaling); blockwise: one fp32 scale
#   per 1x128 block of activations and gradients, per 128x128 block of weights (Float8BlockScaling, DeepSeek-V3's
#   fine-grained FP8; Megatron-Core --fp8-recipe blockwise)
FP8_RECIPES = ("delayed", "current", "mxfp8", "blockwise")
FP8_SAVED_INPUTS = ("quantized", "original")  # what an FP8 GEMM keeps for backward (memory/fp8_saved.py)
# moe_router_probs: where the router's probabilities multiply the routed tokens (memory/activations.py `moe_bytes`):
#   activation: the expert's activation output (Megatron-Core >= 0.13, weighted SwiGLU): no h-wide tensor kept;
#   hidden: an h-wide tensor per routed copy, at the combine or before the experts, kept for the probabilities' gradient
MOE_ROUTER_PROBS = ("activation", "hidden")
MOE_DISPATCHERS = ("alltoall", "flex")  # moe_dispatcher (cost/comm.py ep_comm, cost/ep_dispatch.py)
MASTER_WEIGHTS = ("fp32", "remainders")  # master_weights: the fp32 master copy, or its 16 low bits beside bf16
# How the loss is computed over the logits (memory/head_activations.py `logits_bytes`, `loss_backward_bytes`;
# cost/memory_ops.py `_head_memory_ops`):
#   vocab-parallel: Megatron-LM's vocab-parallel cross-entropy, in place on an fp32 copy of the logits
#   torch-fp32:     torch.nn.functional.cross_entropy(logits.float()) (torchtitan, Hugging Face Trainer)
#   torch:          torch.nn.functional.cross_entropy(logits) on the e-byte logits as they are (a training loop's own
#                   nn.CrossEntropyLoss on bf16 logits): log_softmax keeps an e-byte output
#   fused:          a fused / chunked kernel that never materialises fp32 logits
#   xentropy:       flash-attn's xentropy CUDA kernel (flash_attn.losses.cross_entropy; llm-foundry MPT's
#                   default loss_fn 'fused_crossentropy'): keeps the e-byte logits and their log-sum-exp,
#                   the backward writes an e-byte logit gradient (inplace_backward=False, its default)
#   te:             Transformer Engine's parallel_cross_entropy before v2.18 (Megatron-Core cross_entropy_fusion_impl
#                   'te'): writes the logit gradient in place into the e-byte logits and keeps them
CROSS_ENTROPY = ("vocab-parallel", "torch-fp32", "torch", "fused", "xentropy", "te")
ELEMENTWISE = ("fused", "eager", "hf", "packed")  # which elementwise ops the layer runs (cost/elementwise.py)
RESHARD = ("yes", "no", "unless-pipelined")  # fsdp_reshard_after_forward
REDUCE = ("every-microbatch", "once", "once-if-pipelined")  # fsdp_reduce: when gradients are reduce-scattered
# cuda_graphs: parts of a layer replayed as CUDA graphs (Megatron-Core --cuda-graph-scope with the transformer_engine
# implementation; "layer": the whole layer, its local per-layer graphs); cost/launch.py GRAPH_SCOPE_KERNELS
CUDA_GRAPH_SCOPES = ("layer", "attn", "moe_router", "moe_preprocess")
BUFFER_MODELS = ("none", "deepspeed")  # zero_buffers, pipe_buffers: whose buffers memory/framework.py adds
REDUCE_DTYPES = {"fp32": 4, "bf16": 2, "grad": None}  # fsdp_reduce_dtype: bytes per element (grad: the gradients')


def fp8_scale_bytes_per_element(recipe: str) -> float:
    """Scale bytes an FP8 tensor carries per element, for one layout (row- or column-wise): MXFP8 one 1-byte E8M0
    scale per 32-element block, 1/32 (OCP Microscaling Formats v1.0 §5: block size 32, 8-bit shared scale;
    Transformer Engine MXFP8Tensor `rowwise_scale_inv` / `columnwise_scale_inv`); blockwise one fp32 scale per
    128-element block of an activation or gradient, 4/128 = 1/32 (Transformer Engine Float8BlockScaling: 1D blocks
    of 128 for inputs and gradients, 2D 128x128 for weights, "float32 containers"); delayed and current scaling one
    fp32 scale per tensor, 0."""
    return {"mxfp8": 1.0 / 32.0, "blockwise": 4.0 / 128.0}.get(recipe, 0.0)


def graph_scopes(v, *, where: str) -> tuple[str, ...]:
    """`cuda_graphs` (a TOML list or a comma-separated text; "none" alone or an empty list: no scope) as a tuple in
    CUDA_GRAPH_SCOPES order; InputError for an empty item, an unknown scope, "none" or "layer" beside another
    scope, or moe_preprocess without moe_router (Megatron-Core's rule, transformer_config.py)."""
    given = v
    if isinstance(v, str):
        v = [m.strip() for m in v.split(",")]
    if not isinstance(v, (list, tuple)) or not all(isinstance(m, str) for m in v):
        raise InputError(f"{where}: cuda_graphs must be a list of scopes ({', '.join(CUDA_GRAPH_SCOPES)}) or none, "
                         f"got {given!r}")
    if "" in v or ("none" in v and len(v) > 1):
        raise InputError(f"{where}: cuda_graphs must name scopes ({', '.join(CUDA_GRAPH_SCOPES)}) separated by "
                         f"commas, or be none alone, got {given!r}")
    v = [m for m in v if m != "none"]
    bad = [m for m in v if m not in CUDA_GRAPH_SCOPES]
    why = (f"{bad[0]!r} is not one of {', '.join(CUDA_GRAPH_SCOPES)}" if bad
           else "'layer' captures the whole layer: name no other scope with it" if "layer" in v and len(set(v)) > 1
           else "moe_preprocess needs moe_router" if "moe_preprocess" in v and "moe_router" not in v else "")
    if why:
        raise InputError(f"{where}: cuda_graphs {why}")
    return tuple(m for m in CUDA_GRAPH_SCOPES if m in v)


def check_memory_fields(st) -> None:
    """InputError naming the stack for a framework-buffer field (memory/framework.py) out of its range."""
    for name in ("zero_buffers", "pipe_buffers"):
        if getattr(st, name) not in BUFFER_MODELS:
            raise InputError(f"stack {st.name!r}: {name} must be one of {', '.join(BUFFER_MODELS)}, "
                             f"got {getattr(st, name)!r}")
    for name in ("zero_contiguous_gradients", "zero_overlap_comm"):
        if not isinstance(getattr(st, name), bool):
            raise InputError(f"stack {st.name!r}: {name} must be true or false, got {getattr(st, name)!r}")
    for name, hi in (("zero_reduce_bucket_size", 1e13), ("zero_allgather_bucket_size", 1e13),
                     ("cuda_context_mib", 1e6)):
        v = getattr(st, name)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0.0 <= v <= hi:
            raise InputError(f"stack {st.name!r}: {name} must be a number in [0, {hi:g}], got {v!r}")
    for name in ("zero_reduce_bucket_size", "zero_allgather_bucket_size"):
        if getattr(st, name) < 1:
            raise InputError(f"stack {st.name!r}: {name} must be at least 1 element, got {getattr(st, name)!r}")


def check_release(v, *, where: str) -> None:
    """InputError unless `cudnn_version` is a release like "9.13" or "9.20.0", or "" (the profile's default)."""
    if not isinstance(v, str) or not re.fullmatch(r"(\d+\.\d+(\.\d+)?)?", v):
        raise InputError(f"{where}: cudnn_version must be a release like \"9.13\" or \"9.20.0\" (\"\": the profile's "
                         f"default), got {v!r}")


def check_moe_overlaps(st) -> None:
    """Megatron-Core's asserts on the MoE overlaps that read no layout (transformer_config.py, d98e8a6); the layout's
    join the [runs] rules (framework.with_a2a_overlap_rules)."""
    a2a = "moe_a2a_overlap (Megatron-Core --overlap-moe-expert-parallel-comm)"
    if st.moe_delay_wgrad and not st.moe_a2a_overlap:
        raise InputError(f"stack {st.name!r}: moe_delay_wgrad needs {a2a} ('overlap_moe_expert_parallel_comm "
                         f"must be enabled when enabling delay_wgrad_compute')")
    if st.moe_a2a_overlap and st.moe_shared_expert_overlap:
        raise InputError(f"stack {st.name!r}: {a2a} with moe_shared_expert_overlap: Megatron-Core refuses it "
                         f"('disable moe_shared_expert_overlap when enabling overlap_moe_expert_parallel_comm')")
    if st.moe_a2a_overlap and "moe" in st.recompute_modules:
        raise InputError(f"stack {st.name!r}: {a2a} with recompute_modules moe: Megatron-Core refuses it "
                         f"('disable moe in recompute_modules when enabling overlap_moe_expert_parallel_comm')")
