"""Options shared by the commands that take a scenario (memory, estimate, sweep)."""
from __future__ import annotations

import functools

import click

from ..errors import InputError
from ..schedules import SCHEDULE_NAMES
from ..spec.rules import CP_ALGORITHMS, DP_MODES, RECOMPUTE, RECOMPUTE_MODULES
from ..spec.scenario import load_scenario
from ..spec.stack import GRAD_ACCUMULATIONS, GRAD_BUFFERS, MOE_DISPATCHERS, REDUCE, REDUCE_DTYPES, RESHARD
from ..spec.training import CROSS_ENTROPY, OPTIMIZERS, PRECISIONS, STATE_DTYPES
from .flagnames import flag_names, given_flags
from .lists import comma_ints

# (flag, destination keyword of load_scenario, click type, help)
CROSS_ENTROPY_FLAG = (
    "--cross-entropy", "cross_entropy", click.Choice(list(CROSS_ENTROPY)),
    "how the loss is computed: vocab-parallel (Megatron-LM, in place), torch-fp32 "
    "(F.cross_entropy(logits.float()): torchtitan, Hugging Face; 8 bytes per logit more at its backward, "
    "12 under TP's loss_parallel), torch (F.cross_entropy(logits) on the bf16 logits as they are), "
    "fused (no fp32 logits), xentropy (flash-attn's kernel: bf16 logits kept, llm-foundry's default), "
    "te (Transformer Engine's parallel cross-entropy before v2.18: gradient in place in the bf16 logits)")
_FLAGS = [
    ("--model", "model", str, "model preset name, path to a Hugging Face config.json (or its folder), or a Hub id "
                              "such as Qwen/Qwen2.5-7B[@revision] (needs huggingface_hub; cache first)"),
    ("--mtp-layers", "mtp_layers", int, "multi-token-prediction modules trained on the last pipeline stage "
                                        "(DeepSeek-V3; Megatron --mtp-num-layers); default: the [model] table's, 0"),
    ("--hardware", "hardware", str, "hardware preset name or profile TOML path"),
    ("--stack", "stack", str, "software stack preset (parasim stacks: megatron, torchtitan, fsdp, deepspeed, hf) "
                              "or a stack TOML path; default megatron"),
    ("--gpus", "num_gpus", int, "number of GPUs"),
    ("--seq", "seq_length", int, "sequence length (tokens)"),
    ("--global-batch", "global_batch_size", int, "global batch size (sequences)"),
    ("--micro-batch", "micro_batch_size", int, "micro-batch size (sequences)"),
    ("--tp", "tp", int, "tensor-parallel degree"),
    ("--pp", "pp", int, "pipeline-parallel degree"),
    ("--dp", "dp", int, "data-parallel degree (default: derived)"),
    ("--cp", "cp", int, "context-parallel degree"),
    ("--ep", "ep", int, "expert-parallel degree (MoE)"),
    ("--etp", "etp", int, "expert tensor-parallel degree: the routed experts split over etp ranks (Megatron-Core "
                          "--expert-tensor-parallel-size; default: tp)"),
    ("--vpp", "vpp", int, "virtual pipeline chunks per rank (interleaved schedule)"),
    ("--layers-per-stage", "layers_per_stage", str, "uneven pipeline split, e.g. 7,8,8,7: one entry per pp rank "
                                                    "or per virtual stage (default: even, or the first and last "
                                                    "stage one layer fewer when pp does not divide the layers)"),
    ("--zero", "zero", int, "ZeRO stage 0-3 (3 = FSDP full shard)"),
    ("--shard-group", "shard_group_size", int, "ZeRO/FSDP shard group size (hybrid sharding)"),
    ("--recompute", "recompute", click.Choice(list(RECOMPUTE)), "activation recomputation"),
    ("--recompute-layers", "recompute_layers", int, "with --recompute full: recompute only the first N layers of "
                                                    "each pipeline stage (Megatron --recompute-method block "
                                                    "--recompute-num-layers N); the others keep their activations"),
    ("--recompute-group", "recompute_group", int, "with --recompute full: a checkpoint every N layers (Megatron "
                                                  "--recompute-method uniform --recompute-num-layers N): fewer layer "
                                                  "inputs kept, N layers re-created at once in backward; default 1"),
    ("--recompute-modules", "recompute_modules", str,
     "what --recompute selective re-runs, comma-separated: " + ", ".join(RECOMPUTE_MODULES) + " (Megatron-Core "
     "--recompute-modules; default: the stack's, core_attn)"),
    ("--schedule", "schedule", click.Choice(list(SCHEDULE_NAMES)), "pipeline schedule"),
    ("--precision", "precision", click.Choice(list(PRECISIONS)), "training precision"),
    ("--optimizer", "optimizer", click.Choice(list(OPTIMIZERS)), "optimizer"),
    ("--grad-dtype", "grad_dtype", click.Choice(list(STATE_DTYPES)), "gradient accumulation/reduction dtype"),
    CROSS_ENTROPY_FLAG,
    ("--cp-algorithm", "cp_algorithm", click.Choice(list(CP_ALGORITHMS)), "context-parallel algorithm"),
    ("--moe-capacity-factor", "moe_capacity_factor", float,
     "MoE capacity factor C (expert buffers padded to C x the uniform share); 0: dropless (default)"),
    ("--moe-imbalance", "moe_imbalance", float,
     "dropless MoE: the busiest expert-parallel rank's tokens over the mean (>= 1; default 1, uniform routing); "
     "its expert GEMMs and all-to-all set the step"),
    ("--fsdp-unit-layers", "fsdp_unit_layers", int, "transformer layers per FSDP unit (default: the stack's, 1)"),
    ("--fsdp-prefetch", "fsdp_prefetch", int, "FSDP units all-gathered ahead (0: none; default: the stack's, 1)"),
    ("--fsdp-reshard-after-forward", "fsdp_reshard_after_forward", click.Choice(list(RESHARD)),
     "FSDP frees parameters after forward and gathers them again in backward (default: the stack's)"),
    ("--fsdp-reduce", "fsdp_reduce", click.Choice(list(REDUCE)),
     "when FSDP reduce-scatters gradients (default: the stack's)"),
    ("--fsdp-reduce-dtype", "fsdp_reduce_dtype", click.Choice(list(REDUCE_DTYPES)),
     "dtype FSDP reduces gradients in (grad: the gradients' own; default: the stack's)"),
    ("--dp-bucket-mb", "dp_bucket_mb", float, "data-parallel gradient bucket, MB (default: the stack's)"),
    ("--grad-buffer", "grad_buffer", click.Choice(list(GRAD_BUFFERS)),
     "persistent: gradients stay allocated between steps (Megatron-LM's grad buffer, zero_grad(set_to_none=False)); "
     "set-to-none: zero_grad() frees them, so the first backward of a step allocates them while it frees the "
     "activations (default: the stack's)"),
    ("--grad-accumulation", "grad_accumulation", click.Choice(list(GRAD_ACCUMULATIONS)),
     "fused: the weight-gradient GEMM adds into the kept gradient (Megatron-LM's gradient accumulation fusion); "
     "autograd: autograd adds each micro-batch's new weight gradients into the kept ones, a memory-bound pass "
     "(default: the stack's)"),
    ("--moe-dispatcher", "moe_dispatcher", click.Choice(list(MOE_DISPATCHERS)),
     "alltoall: one all-to-all, a copy of each token per expert; flex: DeepEP / HybridEP (Megatron "
     "--moe-token-dispatcher-type flex), each token once per destination node, then NVLink (default: the stack's)"),
    ("--cuda-graphs", "cuda_graphs", str,
     "parts of each layer replayed as CUDA graphs, one launch each: comma-separated attn, moe_router, moe_preprocess "
     "(Megatron --cuda-graph-impl transformer_engine --cuda-graph-scope), layer (the whole layer), or none "
     "(default: the stack's)"),
    ("--dp-mode", "dp_mode", click.Choice(list(DP_MODES)),
     "ddp: DistributedDataParallel, one process per GPU, gradients all-reduced in buckets during backward; "
     "dataparallel: single-process torch DataParallel, inputs scattered and outputs/gradients gathered "
     "through one master GPU each step; async: asynchronous data parallel, workers never wait for the "
     "gradient sync (stale gradients)"),
]



def flags(*dests: str) -> list:
    """The scenario flags whose destination keywords are `dests`, in that order (for commands that take
    only some of them, e.g. `sweep`, whose layout fields are lists)."""
    by_dest = {f[1]: f for f in _FLAGS}
    return [by_dest[d] for d in dests]


# Megatron-Core's flags that count the embedding / the loss as a layer in the pipeline split
# (spec.placement.megatron_split): layout fields for memory and estimate, sweep space fields for sweep
PIPELINE_SPLIT_FLAGS = (
    ("account_for_embedding_in_pipeline_split", "the embedding counts as one layer on the first (virtual) stage"),
    ("account_for_loss_in_pipeline_split", "the output layer and loss count as one layer on the last (virtual) stage"),
)


def pipeline_split_options(fn):
    """Decorate a command with --account-for-{embedding,loss}-in-pipeline-split (Megatron-Core), default None."""
    for dest, what in reversed(PIPELINE_SPLIT_FLAGS):
        flag = dest.replace("_", "-")
        fn = click.option(f"--{flag}/--no-{flag}", dest, default=None,
                          help=f"Megatron-Core --{flag}: {what}; the L (+1, +2) layers split evenly over the "
                               f"pp·vpp virtual stages")(fn)
    return fn


def split_text(layout: dict) -> str:
    """', layers per stage 7,8,...,8,7' (', layers per virtual stage ...' with one entry per chunk) and, where
    Megatron's flags set it, which parts count as a layer; '' for an even split. `layout`: an estimate's
    or a Layout's fields (layers_per_stage, pp, account_for_*_in_pipeline_split)."""
    split = layout.get("layers_per_stage")
    if not split:
        return ""
    per = "stage" if len(split) == layout["pp"] else "virtual stage"
    parts = [part for (dest, _), part in zip(PIPELINE_SPLIT_FLAGS, ("embedding", "loss")) if layout.get(dest)]
    return (f", layers per {per} {','.join(map(str, split))}"
            + (f" (Megatron split: {' and '.join(parts)} counted as a layer)" if parts else ""))


# the Stack's on/off fields a --x/--no-x switch sets (estimate, memory and sweep; default: the stack's)
STACK_SWITCHES = (
    ("--compile/--no-compile", "compiled",
     "torch.compile / CUDA graphs: fused elementwise kernels, fewer launches (the stack's default)"),
    ("--tp-comm-overlap/--no-tp-comm-overlap", "tp_comm_overlap",
     "TP collectives in chunks pipelined with their GEMMs (Megatron --tp-comm-overlap, torchtitan AsyncTP; default: "
     "the stack's)"),
    ("--moe-shared-expert-overlap/--no-moe-shared-expert-overlap", "moe_shared_expert_overlap",
     "MoE shared experts on a second stream beside the expert-parallel all-to-alls (Megatron "
     "--moe-shared-expert-overlap; default: the stack's)"),
    ("--moe-a2a-overlap/--no-moe-a2a-overlap", "moe_a2a_overlap",
     "one micro-batch's forward beside another's backward, layer by layer, each one's expert-parallel all-to-alls "
     "beside the other's compute (Megatron --overlap-moe-expert-parallel-comm, combined 1F1B; default: the stack's)"),
    ("--moe-delay-wgrad/--no-moe-delay-wgrad", "moe_delay_wgrad",
     "with --moe-a2a-overlap: the experts' weight gradients after their dispatch gradient (Megatron "
     "--delay-wgrad-compute; default: the stack's)"),
)


def stack_switches(fn):
    """Decorate a click command with the STACK_SWITCHES."""
    for flag, dest, hlp in reversed(STACK_SWITCHES):
        fn = click.option(flag, dest, default=None, help=hlp)(fn)
    return fn


def scenario_options(fn):
    """Decorate a click command with the scenario argument and the DESIGN.md flags."""
    @click.argument("scenario", required=False)
    @click.option("--sequence-parallel/--no-sequence-parallel", "sequence_parallel", default=None,
                  help="Megatron sequence parallelism (with TP)")
    @click.option("--flash-attention/--no-flash-attention", "flash_attention", default=None,
                  help="FlashAttention (no a·s² tensors stored)")
    @click.option("--offload-optimizer/--no-offload-optimizer", "offload_optimizer", default=None,
                  help="ZeRO-Offload: optimizer states in host memory (needs --zero 1, 2 or 3)")
    @stack_switches
    @click.option("--allow-unsupported", "allow_unsupported", is_flag=True, default=False,
                  help="evaluate a layout the stack's framework cannot run (default: exit 2 naming the rule; "
                       "the rules and their sources are each stack's [runs], docs/stacks.md)")
    @pipeline_split_options
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    for flag, dest, typ, hlp in reversed(_FLAGS):
        wrapper = click.option(flag, dest, type=typ, default=None, help=hlp)(wrapper)
    return wrapper


# the on/off flags of scenario_options: (flag, destination keyword)
SWITCH_FLAGS = (("--sequence-parallel", "sequence_parallel"), ("--flash-attention", "flash_attention"),
                ("--offload-optimizer", "offload_optimizer"))
SCENARIO_KEYS = [dest for _, dest, _, _ in _FLAGS] + [dest for _, dest in SWITCH_FLAGS]
SCENARIO_KEYS += [dest for _, dest, _ in STACK_SWITCHES]
SCENARIO_KEYS += [dest for dest, _ in PIPELINE_SPLIT_FLAGS]


def scenario_from_options(kwargs: dict, *, require_layout: bool = True, batch_per_replica: int | None = None):
    """Pop the scenario argument and flags from a command's kwargs and load the Scenario (an error about
    a flag's value names the flag: `flag_names`). A training layout the stack's framework cannot run is an
    InputError naming the rule (`check_supported`) unless --allow-unsupported. `batch_per_replica` (estimate
    --inference --batch) gives the global batch neither the file nor --global-batch gives (load_scenario)."""
    path = kwargs.pop("scenario", None)
    allow = kwargs.pop("allow_unsupported", True)
    over = {k: kwargs.pop(k) for k in SCENARIO_KEYS if k in kwargs}
    if over.get("layers_per_stage") is not None:
        over["layers_per_stage"] = tuple(comma_ints("--layers-per-stage", over["layers_per_stage"],
                                                       example="7,8,8,7"))
    with flag_names(given_flags(_FLAGS + list(SWITCH_FLAGS), over)):
        sc = load_scenario(path, require_layout=require_layout, batch_per_replica=batch_per_replica, **over)
    if sc.sweep:  # the file's [sweep] table, checked as `sweep` checks it (its keys are no flags here)
        from ..sweep.space import SweepSpace

        SweepSpace.from_table(sc.sweep, where=f"[sweep] of {path}")
    ctx = click.get_current_context(silent=True)
    if not allow and sc.layout is not None and not (ctx is not None and ctx.params.get("inference")):
        check_supported(sc)
    return sc


def check_supported(sc) -> None:
    """InputError (exit 2, one line) if the scenario's stack's framework cannot run its layout: the rule,
    its reason and where its source is. Training only: the rules are about training runs."""
    from ..spec.framework import layout_verdict
    from ..spec.stack import DEFAULT_STACK

    st = sc.training.stack
    v = layout_verdict(st, sc.layout, sc.model, sc.training)
    if v.rule:
        default = " (the default; --stack names another)" if st.name == DEFAULT_STACK else ""
        raise InputError(f"the {st.name} stack{default} cannot run {sc.layout.label}: {v.reason} [rule {v.rule!r}; "
                         f"its source: docs/stacks.md]; --allow-unsupported evaluates it anyway")


GPU_SPEED_CV_HELP = ("relative standard deviation of per-GPU speed in the cluster: the compute runs at the slowest of "
                     "the layout's GPUs, x (1 + value x E[max of n standard normals]) (default: the hardware "
                     "profile's [gpu] speed_cv, 0 in every shipped one; measure with validation/gpu_spread.py)")


def with_gpu_speed_cv(hardware, value):
    """`hardware` with `--gpu-speed-cv` in place of its `[gpu] speed_cv` (cost/variability.py); unchanged for
    None; a value outside [0, 1) is a one-line error naming the flag."""
    if value is None:
        return hardware
    from dataclasses import replace

    from ..spec.rules import check_fraction

    return replace(hardware, gpu_speed_cv=check_fraction(value, "--gpu-speed-cv", below_one=True))


MAX_STAGE_TIME_S = 1e6  # a per-microbatch stage time beyond 11.6 days is not a pipeline anyone runs


def stage_time_s(flag: str, value) -> float:
    """A per-microbatch stage time given on the command line (`schedule`, `plot bubble`, `plot timeline`): a finite
    number from 0 to MAX_STAGE_TIME_S seconds, else InputError naming the flag and value (larger values overflow the
    replay's makespan and bubble to inf and nan)."""
    import math

    if value is None or not math.isfinite(value) or not 0 <= value <= MAX_STAGE_TIME_S:
        raise InputError(f"--{flag} must be a number of seconds from 0 to {MAX_STAGE_TIME_S:g}, got {value!r}")
    return float(value)


def stage_times_s(**times) -> None:
    """Every stage time checked (`stage_time_s`), and some work in a micro-batch: with forward, backward and weight
    all 0 the replay's makespan is 0 and its bubble 0/0."""
    for flag, v in times.items():
        stage_time_s(flag, v)
    if sum(times.get(k) or 0.0 for k in ("forward", "backward", "weight")) <= 0.0:
        raise InputError("--forward, --backward and --weight are all 0: a micro-batch must take some time")
