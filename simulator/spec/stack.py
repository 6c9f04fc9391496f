"""Software stack: the framework and kernels a job runs with, beside the model, the hardware and the layout.

The same model, GPU and layout train 15-50 % apart under different software (eager vs compiled,
attention kernels 2-3x apart on one GPU). A `Stack` says what parasim's physics needs to know of it:

- `attention_kernel`: which attention kernel runs (its efficiency tables are the hardware profile's
  `attention_<kernel>` / `attention_bwd_<kernel>`, falling back to `attention` / `attention_bwd`);
  "unfused" is attention written out as matmuls and a softmax (no FlashAttention);
- `attention_padding`: what the framework does around a FlashAttention call: "none" (the padded
  [b, s, heads, d] tensors go straight in) or "unpad" (flash-attn's `bert_padding`: the q, k and v rows are
  gathered into [tokens, heads, d] before the varlen kernel and the output scattered back after it, each
  `unpad_input` call synchronising the host twice: llm-foundry's `attn_impl: flash`; cost/elementwise.py
  copies, cost/launch.py `padding_sync_s`);
- `cudnn_version`: the cuDNN release the job runs (its container's), whose cuDNN attention tables the profile may
  hold by release (`attention_cudnn-9-13`: the newest published up to it is read; cost/attention.py
  `release_kernel`); "" reads the profile's default table;
- `cp_ring_merge`: whose ring context-parallel attention runs, and so the merge and copies beside its kernels
  (cost/cp_merge.py): "te" (Transformer Engine's fused corrections: Megatron-Core) or "torch" (torch's
  context_parallel, eager fp32 merges: torchtitan, accelerate);
- `cross_entropy`: how the loss is computed (Training.cross_entropy's choices);
- `optimizer_impl`: "fused" (one multi-tensor kernel pass: Megatron FusedAdam, torch fused AdamW),
  "foreach" (torch's default multi-tensor AdamW: one pass per elementwise op, cost/optimizer.py; its step
  allocates one second-moment copy, memory/states.py `optimizer_step_bytes`) or "for-loop" (the same ops one
  parameter at a time: torch `foreach=False`, Composer's DecoupledAdamW);
- `ddp_bucket_view`: under plain data parallelism (ZeRO-0), whether the gradients are views of the
  all-reduce buckets (Megatron-Core's grad buffer, torch DDP `gradient_as_bucket_view=True`) or copied into
  them (torch DDP's default: a second copy of the gradients, memory/states.py `ddp_bucket_bytes`);
- `ddp_one_rank`: whether the model is wrapped in torch DDP also when its data-parallel group has one rank
  (a script that always wraps; torch's Reducer allocates and fills its buckets at any world size), or only
  with more than one (the frameworks: Composer wraps when `dist.get_world_size() > 1`);
- `grad_buffer`: "persistent" (gradients stay allocated between steps, zeroed in place: Megatron-Core's
  contiguous grad buffer, `zero_grad(set_to_none=False)`) or "set-to-none" (torch's `zero_grad()` default
  frees them, so a step's first backward allocates them while activations are freed:
  memory/states.py `absent_grad_bytes`); the zeroing's time is cost/gradients.py `grad_zeroing_s`;
- `grad_accumulation`: "fused" (the weight-gradient GEMM adds into the kept gradient: Megatron-LM's
  gradient_accumulation_fusion) or "autograd" (autograd adds each new weight gradient into the kept one, a
  memory-bound pass per micro-batch: cost/gradients.py `grad_accumulation_s`);
- `train_metric_losses`: cross-entropy evaluations of the logits per micro-batch outside autograd, for training
  metrics (Composer runs each registered train metric's update on the micro-batch's logits after its backward:
  llm-foundry's MPT registers two, LanguageCrossEntropy and LanguagePerplexity); each is torch's
  CrossEntropyLoss under autocast, timed on the head stage (cost/memory_ops.py `_head_memory_ops`);
- `fp8_recipe`: how FP8 training scales its casts (cost/memory_ops.py `fp8_cast_op`); `fp8_params`: FP8 training
  keeps the working weights in FP8 (Transformer Engine's fp8_model_init: NeMo's fp8_params, Megatron-LM's
  --fp8-param-gather), 1 byte per parameter, gathered as such, with an fp32 master copy (Training.param_dtype);
  `fp8_saved_inputs`: whether FP8 GEMMs keep their FP8 input for backward ("quantized": Transformer Engine) or
  the high-precision one ("original": torchao's Float8Linear); memory/fp8_saved.py;
- `moe_router_probs`, `activation_input_fp8`: what a layer keeps around its expert activation
  (memory/activations.py `moe_bytes`, `mlp_bytes`): where the router's probabilities multiply the routed tokens
  ("activation": the weighted SwiGLU output, no h-wide copy kept; "hidden": an h-wide tensor per routed copy), and
  whether the SwiGLU keeps its input as a plain FP8 cast (Megatron-Core --activation-func-fp8-input-store);
- `master_weights`: how the optimizer keeps the fp32 master copy of bf16 weights: "fp32" (4 bytes per
  parameter) or "remainders" (the 16 low bits of each fp32 master weight, whose 16 high bits are the bf16
  weight itself: 2 bytes; Apex DistributedFusedAdam store_param_remainders, which NeMo's distributed_fused_adam
  turns on for bf16 weights; Transformer Engine FusedAdam's; Training.master_bytes);
- `elementwise`: which elementwise ops the framework's layer code runs, and so the non-GEMM bytes per layer
  (cost/elementwise.py): "fused" (Megatron-LM / Transformer Engine / apex fused kernels: one kernel per norm,
  RoPE, activation, residual add), "eager" (torchtitan's plain PyTorch modules: torch's fused RMSNorm
  kernel, complex-multiply RoPE in fp32, silu(x)·y), "hf" (Hugging Face modelling code: RMSNorm upcast to
  fp32 op by op, rotate_half RoPE, act(gate)·up) or "packed" (plain PyTorch with one QKV and one gate/up GEMM
  whose outputs it views: torch's RMSNorm, rotate_half RoPE, silu(g)·u on the chunks, as Phi-3 and nanotron);
- `compiled`: torch.compile (or CUDA graphs) fuses the elementwise ops (Inductor: one kernel per region
  between GEMMs, reading the region's inputs and writing its outputs);
- `kernels_per_layer` (eager) and `compiled_kernels_per_layer`: kernels one transformer layer launches
  in its forward and backward, and `host_s_per_kernel`, the host time to issue one: a layer pass can
  not finish before its kernels are issued (cost/launch.py `launch_bound`); `decode_host_s_per_kernel`, the
  same for an eager forward under no_grad (no autograd bookkeeping: eager decode, cost/inference.py);
- `moe_kernels_per_layer`, `moe_kernels_per_expert`: an MoE layer's launches besides its experts' GEMMs, and the
  GEMM launches per local expert where the experts run as a host loop of one GEMM each (Transformer Engine's
  GroupedLinear), so that an MoE layer with many small experts can be launch-bound (cost/launch.py
  `layer_kernels`); `cuda_graphs`: the parts of a layer replayed as CUDA graphs, one launch each (Megatron-Core
  --cuda-graph-scope: attn, moe_router, moe_preprocess; "layer": the whole layer); `moe_host_s_per_kernel`, the host
  time of an MoE layer's own launches where its framework's MoE code is heavier to issue than a plain layer
  (Megatron-Core's, measured: cost/launch.py `layer_host_s`);
- `fsdp_*`: how its FSDP / ZeRO-3 runs (cost/fsdp.py): layers per FSDP unit, units prefetched ahead,
  whether parameters are freed after forward (and so gathered again in backward), the dtype gradients
  are reduced in, and whether they are reduce-scattered every micro-batch or once per step. Two of them
  may depend on pipelining ("unless-pipelined", "once-if-pipelined"): torchtitan keeps parameters after
  forward and torch.distributed.pipelining reduces once when PP is on;
- `fsdp_copies`: FSDP2's copies on the compute stream (cost/fsdp.py `fsdp_copy_s`): each all-gather's output
  copied into the unsharded parameters, each unit's unsharded gradients copied into the reduce-scatter input;
- `tp_comm_overlap`: tensor-parallel collectives split into chunks pipelined with the GEMMs they feed
  (cost/fsdp.py `chunked_overlap_exposed_s`);
- `moe_shared_expert_overlap`: an MoE layer's shared experts run on a second stream beside its expert-parallel
  all-to-alls (Megatron-Core `--moe-shared-expert-overlap`; cost/moe_overlap.py); no effect without shared experts;
- `moe_dispatcher`: "alltoall" (a copy per expert) or "flex" (DeepEP / HybridEP: once per node; cost/ep_dispatch.py);
- `moe_a2a_overlap`: the forward of one micro-batch runs beside the backward of another, layer by layer, each one's
  expert-parallel all-to-alls beside the other's compute (Megatron-Core `--overlap-moe-expert-parallel-comm`, its
  combined 1F1B; cost/moe_overlap.py), with `moe_delay_wgrad` its experts' weight gradients split off
  (`--delay-wgrad-compute`); the layouts Megatron then refuses join [runs] (framework.A2A_OVERLAP_RULES);
- `dp_bucket_mb`: the gradient bucket of its data-parallel reduction (DDP, ZeRO-1/2): buckets are reduced
  as the last backward fills them, so only the last one is sure to be exposed (kernel.py's DP tail);
- memory (memory/framework.py): `zero_buffers` names whose ZeRO optimizer buffers the memory model adds
  ("deepspeed": DeepSpeedZeroOptimizer's reduce/all-gather buckets and fp32 gradient partition, and
  BF16_Optimizer's gradients; "none": the framework's buffers are the states already counted), sized by
  `zero_reduce_bucket_size` / `zero_allgather_bucket_size` (elements), `zero_contiguous_gradients`,
  `zero_overlap_comm`; `pipe_buffers` ("deepspeed": the PipelineEngine keeps each in-flight micro-batch's
  stage output and a receive buffer per direction; "none": outputs freed after the send, as Megatron's
  deallocate_output_tensor does); `cuda_context_mib`, the CUDA context its torch/CUDA build loads
  (overheads.py);
- `runs`: the layouts its framework can run (the preset's [runs] table: ZeRO stages, parallel dimensions,
  schedules, recompute modes and the combinations it refuses, each with its source; spec/framework.py).

Presets are TOML files in `stacks/` (every number with its source in the file's `[source]` table);
`load_stack(name_or_path, **overrides)` reads one, `DEFAULT_STACK` is used when none is given.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from functools import lru_cache

import numpy as np

from ..errors import InputError
from .framework import FrameworkRules, rules_from_table, summary, with_a2a_overlap_rules
from .presets import check_keys, preset_names, read_toml, resolve
from .rules import DEFAULT_RECOMPUTE_MODULES, RECOMPUTE_MODULES, check_text
from .stack_choices import (  # noqa: F401  (re-exported: the choices are part of this module's interface)
    ATTENTION_KERNELS, ATTENTION_PADDING, CP_RING_MERGES, OPTIMIZER_IMPLS, GRAD_BUFFERS, GRAD_ACCUMULATIONS,
    FP8_RECIPES, FP8_SAVED_INPUTS, MOE_DISPATCHERS, MOE_ROUTER_PROBS, MASTER_WEIGHTS, CROSS_ENTROPY, ELEMENTWISE,
    RESHARD, REDUCE,
    REDUCE_DTYPES, check_memory_fields, check_moe_overlaps, check_release, graph_scopes)

DEFAULT_STACK = "megatron"


@dataclass(frozen=True, kw_only=True)
class Stack:
    """What the framework runs: attention kernel, loss, optimizer implementation, eager or compiled, and
    the kernels a layer launches with the host time to issue each (module docstring)."""

    name: str
    framework: str
    attention_kernel: str = "cudnn"
    attention_padding: str = "none"  # ATTENTION_PADDING (cost/elementwise.py, cost/launch.py)
    # the cuDNN release the job runs ("9.13", "9.20.0"): its attention tables where the profile has them by release
    # (cost/attention.py release_kernel); "": the profile's default, the newest release published for its GPU
    cudnn_version: str = ""
    cp_ring_merge: str = "te"  # CP_RING_MERGES (cost/cp_merge.py)
    cross_entropy: str = "vocab-parallel"
    optimizer_impl: str = "fused"
    grad_buffer: str = "persistent"
    grad_accumulation: str = "fused"  # GRAD_ACCUMULATIONS (cost/gradients.py)
    ddp_bucket_view: bool = True
    ddp_one_rank: bool = False  # torch DDP wraps a one-rank data-parallel group too (memory/states.py)
    train_metric_losses: int = 0  # loss evaluations per micro-batch for training metrics (Composer)
    fp8_recipe: str = "delayed"
    fp8_params: bool = False  # FP8 training stores the working weights in FP8 (Training.param_dtype)
    fp8_saved_inputs: str = "original"  # FP8_SAVED_INPUTS: GEMMs keep their FP8 input or the bf16 one
    master_weights: str = "fp32"  # MASTER_WEIGHTS (Training.master_bytes)
    elementwise: str = "fused"  # ELEMENTWISE: the layer's elementwise op list (cost/elementwise.py)
    compiled: bool = False
    kernels_per_layer: tuple[int, int] = (0, 0)  # (forward, backward), eager; (0, 0): not launch-bound
    compiled_kernels_per_layer: tuple[int, int] = (0, 0)
    # an MoE layer's launches besides its experts' GEMMs, and the experts' GEMM launches per local expert (a host loop
    # of one GEMM per expert, Transformer Engine's GroupedLinear); (0, 0): kernels_per_layer (cost/launch.py)
    moe_kernels_per_layer: tuple[int, int] = (0, 0)
    moe_kernels_per_expert: tuple[int, int] = (0, 0)
    cuda_graphs: tuple[str, ...] = ()  # CUDA_GRAPH_SCOPES a layer replays as CUDA graphs (Megatron --cuda-graph-scope)
    host_s_per_kernel: float = 0.0
    moe_host_s_per_kernel: float = 0.0  # an MoE layer's own launches (all but its experts' loop); 0: host_s_per_kernel
    decode_host_s_per_kernel: float = 0.0  # an eager forward under no_grad (decode); 0: host_s_per_kernel
    fsdp_unit_layers: int = 1
    fsdp_prefetch: int = 1
    fsdp_reshard_after_forward: str = "yes"
    fsdp_reduce_dtype: str = "grad"
    fsdp_reduce: str = "every-microbatch"
    fsdp_copies: bool = False  # FSDP2's copy-out / copy-in kernels on the compute stream (cost/fsdp.py)
    tp_comm_overlap: bool = False  # TP collectives chunked under their GEMMs (Megatron userbuffers, AsyncTP)
    moe_shared_expert_overlap: bool = False  # shared experts beside the EP all-to-alls (cost/moe_overlap.py)
    moe_dispatcher: str = "alltoall"  # MOE_DISPATCHERS
    moe_router_probs: str = "hidden"  # MOE_ROUTER_PROBS: where the router's probabilities multiply the routed tokens
    # the SwiGLU keeps its input in FP8 for backward (Megatron-Core --activation-func-fp8-input-store)
    activation_input_fp8: bool = False
    moe_a2a_overlap: bool = False  # combined 1F1B: one micro-batch's all-to-alls beside another's compute
    moe_delay_wgrad: bool = False  # with moe_a2a_overlap: the MLP's weight gradients after its dispatch gradient
    loss_parallel: bool = True  # the loss runs on vocabulary-sharded logits under TP (`loss_shards`)
    # with expert parallelism the routed experts stay whole (etp 1) instead of split over the TP group (etp tp):
    # the layout's etp when it gives none (spec/scenario.py, the sweep); Megatron-Core's default is tp
    whole_experts_with_ep: bool = False
    ep_dispatch_fp8: bool = False  # FP8 training dispatches the routed tokens in FP8 (Training.ep_dispatch_bytes)
    # what recompute 'selective' re-runs, by module (spec/rules.py RECOMPUTE_MODULES; Megatron --recompute-modules),
    # within what the framework takes ([runs] selective_modules); a TOML list or a comma-separated text
    recompute_modules: tuple[str, ...] = DEFAULT_RECOMPUTE_MODULES
    dp_bucket_mb: float = 25.0  # gradients per data-parallel reduction bucket, MB (PyTorch DDP bucket_cap_mb)
    # memory: framework buffers (memory/framework.py) and the CUDA context (memory/overheads.py)
    zero_buffers: str = "none"  # "deepspeed": DeepSpeed's ZeRO-1/2 and BF16_Optimizer buffers
    zero_reduce_bucket_size: float = 5e8  # elements (DeepSpeed zero_optimization.reduce_bucket_size)
    zero_allgather_bucket_size: float = 5e8  # elements (zero_optimization.allgather_bucket_size)
    zero_contiguous_gradients: bool = True
    zero_overlap_comm: bool = False
    pipe_buffers: str = "none"  # "deepspeed": PipelineEngine output and receive buffers
    cuda_context_mib: float = 512.0  # CUDA context + library handles (memory/overheads.py)
    # the layouts its framework runs ([runs] table, spec/framework.py; a dict is parsed); not part of the physics
    runs: FrameworkRules = field(default_factory=FrameworkRules, compare=False, repr=False)
    source: tuple = field(default=(), compare=False, repr=False)  # ((key, where its value comes from), ...)

    def __post_init__(self):
        if isinstance(self.runs, dict):
            object.__setattr__(self, "runs", rules_from_table(self.runs, framework=self.name,
                                                              where=f"stack {self.name!r}"))
        if not isinstance(self.runs, FrameworkRules):
            raise InputError(f"stack {self.name!r}: runs must be a [runs] table, got {self.runs!r}")
        check_text(self.framework, f"stack {self.name!r}: framework")
        for name, allowed in (("attention_kernel", ATTENTION_KERNELS), ("attention_padding", ATTENTION_PADDING),
                              ("cp_ring_merge", CP_RING_MERGES), ("cross_entropy", CROSS_ENTROPY),
                              ("optimizer_impl", OPTIMIZER_IMPLS), ("grad_buffer", GRAD_BUFFERS),
                              ("grad_accumulation", GRAD_ACCUMULATIONS),
                              ("fp8_recipe", FP8_RECIPES), ("fp8_saved_inputs", FP8_SAVED_INPUTS),
                              ("master_weights", MASTER_WEIGHTS),
                              ("moe_dispatcher", MOE_DISPATCHERS), ("moe_router_probs", MOE_ROUTER_PROBS),
                              ("elementwise", ELEMENTWISE),
                              ("fsdp_reshard_after_forward", RESHARD), ("fsdp_reduce_dtype", tuple(REDUCE_DTYPES)),
                              ("fsdp_reduce", REDUCE)):
            if getattr(self, name) not in allowed:
                raise InputError(f"stack {self.name!r}: {name} must be one of {', '.join(allowed)}, "
                                 f"got {getattr(self, name)!r}")
        for name in ("compiled", "tp_comm_overlap", "loss_parallel", "ddp_bucket_view", "ddp_one_rank",
                     "fsdp_copies", "fp8_params", "whole_experts_with_ep", "ep_dispatch_fp8",
                     "moe_shared_expert_overlap", "moe_a2a_overlap", "moe_delay_wgrad", "activation_input_fp8"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"stack {self.name!r}: {name} must be true or false, got {getattr(self, name)!r}")
        for name in ("kernels_per_layer", "compiled_kernels_per_layer", "moe_kernels_per_layer",
                     "moe_kernels_per_expert"):
            v = getattr(self, name)
            if (not isinstance(v, (tuple, list)) or len(v) != 2
                    or not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= 10**5 for x in v)):
                raise InputError(f"stack {self.name!r}: {name} must be [forward, backward] kernel counts "
                                 f"(integers 0..100000), got {v!r}")
            object.__setattr__(self, name, tuple(v))
        for key, name in US_KEYS.items():
            h = getattr(self, name)
            if not isinstance(h, (int, float)) or isinstance(h, bool) or not 0.0 <= h < 1e-2:
                raise InputError(f"stack {self.name!r}: {key} must be in [0, 10000) microseconds, "
                                 f"got {h * 1e6 if isinstance(h, (int, float)) else h!r}")
        b = self.dp_bucket_mb
        if not isinstance(b, (int, float)) or isinstance(b, bool) or not 1e-6 <= b <= 1e6:  # from one byte:
            # a smaller bucket made its count overflow (1e-300 printed a step of 1e300 s)
            raise InputError(f"stack {self.name!r}: dp_bucket_mb must be a number of MB in [1e-06, 1e6] (one byte "
                             f"to 1 TB), got {b!r}")
        check_memory_fields(self)
        check_release(self.cudnn_version, where=f"stack {self.name!r}")
        object.__setattr__(self, "cuda_graphs", graph_scopes(self.cuda_graphs, where=f"stack {self.name!r}"))
        self._check_recompute_modules()
        check_moe_overlaps(self)
        object.__setattr__(self, "runs", with_a2a_overlap_rules(self.runs, self.moe_a2a_overlap))
        for name, lo in (("fsdp_unit_layers", 1), ("fsdp_prefetch", 0), ("train_metric_losses", 0)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= 1024:
                raise InputError(f"stack {self.name!r}: {name} must be an integer in {lo}..1024, got {v!r}")

    def _check_recompute_modules(self):
        """Normalise `recompute_modules` to RECOMPUTE_MODULES order, once each; InputError for an unknown module, an
        empty list or one the framework's selective recompute does not take ([runs] selective_modules)."""
        v = self.recompute_modules
        if isinstance(v, str):
            v = [m.strip() for m in v.split(",")]
        if not isinstance(v, (list, tuple)) or not v or not all(isinstance(m, str) and m for m in v):
            raise InputError(f"stack {self.name!r}: recompute_modules must be a non-empty list of module names "
                             f"({', '.join(RECOMPUTE_MODULES)}), got {self.recompute_modules!r}")
        bad = [m for m in v if m not in RECOMPUTE_MODULES]
        if bad:
            raise InputError(f"stack {self.name!r}: recompute_modules {bad[0]!r} is not one of "
                             f"{', '.join(RECOMPUTE_MODULES)}")
        takes = self.runs.selective_modules
        refused = [m for m in v if m not in takes]
        if refused:
            raise InputError(f"stack {self.name!r}: recompute_modules {refused[0]!r}: its framework's selective "
                             f"recompute takes {', '.join(takes)} only ([runs] selective_modules)")
        object.__setattr__(self, "recompute_modules", tuple(m for m in RECOMPUTE_MODULES if m in v))

    def fsdp_reshards(self, pp):
        """(N,) bool: FSDP frees parameters after forward (and gathers them again in backward) at `pp`."""
        pp = np.asarray(pp)
        if self.fsdp_reshard_after_forward == "unless-pipelined":
            return pp <= 1
        return np.full(pp.shape, self.fsdp_reshard_after_forward == "yes")

    def fsdp_reduces_every_microbatch(self, pp):
        """(N,) bool: FSDP reduce-scatters the gradients every micro-batch (else once per step) at `pp`."""
        pp = np.asarray(pp)
        if self.fsdp_reduce == "once-if-pipelined":
            return pp <= 1
        return np.full(pp.shape, self.fsdp_reduce == "every-microbatch")

    def loss_shards(self, tp):
        """The ranks a micro-batch's logits are split over for the loss: tp when the loss runs on
        vocabulary-sharded logits (Megatron-LM's vocab-parallel cross-entropy, torchtitan's loss_parallel),
        1 when every TP rank gathers the whole logits first (transformers' tp_plan `lm_head: colwise_rep`)."""
        tp = np.asarray(tp)
        return tp if self.loss_parallel else np.ones_like(tp)

    def fsdp_reduce_bytes(self, grad_bytes: int) -> int:
        """Bytes per element FSDP reduce-scatters the gradients in (`grad`: the gradients' own dtype)."""
        return REDUCE_DTYPES[self.fsdp_reduce_dtype] or grad_bytes

    @property
    def layer_kernels(self) -> tuple[int, int]:
        """(forward, backward) kernels one layer launches, compiled or eager."""
        return self.compiled_kernels_per_layer if self.compiled else self.kernels_per_layer

    @property
    def flash_attention(self) -> bool:
        """A fused attention kernel (every kernel but "unfused")."""
        return self.attention_kernel != "unfused"


US_KEYS = {"host_us_per_kernel": "host_s_per_kernel", "moe_host_us_per_kernel": "moe_host_s_per_kernel",
           "decode_host_us_per_kernel": "decode_host_s_per_kernel"}
_KEYS = {f.name for f in fields(Stack)} - set(US_KEYS.values()) - {"source"} | set(US_KEYS)


def stack_from_dict(d: dict, *, where: str) -> Stack:
    """A Stack from a preset's table (`host_us_per_kernel`, `decode_host_us_per_kernel` in microseconds, `[source]`
    per key)."""
    check_keys(d, where=where, required=("name", "framework"), optional=tuple(_KEYS | {"source"}))
    check_text(d["name"], f"name in {where}")  # (framework: Stack's own check, named with the file below)
    src = d.get("source", {})
    if not isinstance(src, dict):
        raise InputError(f"[source] in {where} must be a table of key = \"source\" lines")
    kw = {k: v for k, v in d.items() if k != "source" and k not in US_KEYS}
    if "runs" in kw:
        kw["runs"] = rules_from_table(kw["runs"], framework=str(d["name"]), where=where)
    kw.update(seconds_from_us({k: d.get(k, 0.0) for k in US_KEYS}, where=where))
    try:
        return Stack(**kw, source=tuple((str(k), str(v)) for k, v in src.items()))
    except InputError as exc:  # Stack's checks name the stack; a file's values are named by the file
        msg = str(exc)
        prefix = f"stack {str(d['name'])!r}: "
        raise InputError(f"{where}: {msg[len(prefix):]}" if msg.startswith(prefix) else msg) from None


def seconds_from_us(table: dict, *, where: str) -> dict:
    """The Stack fields in seconds of a table's `*_us_per_kernel` keys (microseconds: the presets' and
    scenarios' unit); other keys are left out."""
    out = {}
    for key, name in US_KEYS.items():
        if key in table:
            us = table[key]
            if not isinstance(us, (int, float)) or isinstance(us, bool) or not 0.0 <= us < 1e4:  # (an int of
                # 400 digits is no float: the range test comes first)
                raise InputError(f"{key} in {where} must be a number of microseconds in [0, 10000), got {us!r}")
            out[name] = float(us) * 1e-6
    return out


def load_stack(name_or_path: str | None = None, **overrides) -> Stack:
    """The stack preset `name_or_path` (a name in stacks/ or a TOML path; None: DEFAULT_STACK) with
    `overrides` (Stack fields; None values are ignored), e.g. load_stack("hf", compiled=True). A `runs`
    override (a [runs]-like dict) replaces those keys of the preset's [runs] table and keeps the others."""
    name = DEFAULT_STACK if name_or_path in (None, "") else str(name_or_path)
    path = resolve("stacks", name)
    st = stack_from_dict(read_toml(path), where=str(path))
    given = {k: v for k, v in overrides.items() if v is not None}
    unknown = sorted(set(given) - {f.name for f in fields(Stack)})
    if unknown:
        raise InputError(f"unknown stack key {unknown[0]!r}")
    if isinstance(given.get("runs"), dict):
        given["runs"] = rules_from_table({**st.runs.table, **given["runs"]}, framework=st.name,
                                         where=f"the [stack] runs override of {name}")
    return replace(st, **given) if given else st


@lru_cache(maxsize=1)
def default_stack() -> Stack:
    """The DEFAULT_STACK preset (read once)."""
    return load_stack(DEFAULT_STACK)


def stack_names() -> list[str]:
    return preset_names("stacks")


def list_stacks():
    """One row per stack preset: name, framework, attention kernel, loss, optimizer, compiled, kernels, and
    what its framework runs (`framework.summary`)."""
    import pandas as pd

    rows = []
    for n in stack_names():
        s = load_stack(n)
        rows.append({"name": n, "framework": s.framework, "attention_kernel": s.attention_kernel,
                     "cp_ring_merge": s.cp_ring_merge, "cross_entropy": s.cross_entropy,
                     "optimizer_impl": s.optimizer_impl, "grad_buffer": s.grad_buffer,
                     "grad_accumulation": s.grad_accumulation,
                     "elementwise": s.elementwise, "compiled": s.compiled,
                     "kernels_fwd_bwd": "/".join(map(str, s.kernels_per_layer)),
                     "host_us_per_kernel": s.host_s_per_kernel * 1e6, "runs": summary(s.runs)})
    return pd.DataFrame(rows)
