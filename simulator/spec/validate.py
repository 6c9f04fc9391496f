"""Rules between the model, the training setup and the layout, in one place.

`layout_violations` is vectorised: the numeric layout fields may be numpy arrays (the sweep passes
millions of candidates at once) and it returns, per candidate, the first broken rule as a message
naming every factor ('' when valid). `validate` applies it to one Layout and raises InputError.
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..schedules import family
from .layout import Layout, expert_tp_needs_sp
from .model import ModelSpec
from .model_fit import fsdp_unit_problem, moe_factor_problem, moe_load_problem
from .rules import DEFAULT_RECOMPUTE_MODULES, RECOMPUTE, ZERO_STAGES
from .training import Training


def layout_violations(model: ModelSpec, training: Training, *, tp, pp, dp, cp, ep, vpp, micro_batch_size,
                      sequence_parallel: bool = False, schedule: str = "1f1b", uneven_layers: bool = False,
                      cp_algorithm: str = "ring", messages: bool = True) -> np.ndarray:
    """First violated divisibility rule per candidate ('' if none). Rules (Megatron-LM arguments.py):

    - num_attention_heads % tp == 0 and num_key_value_heads % tp == 0 (TP shards whole heads);
    - num_hidden_layers % (pp·chunks) == 0 unless an uneven split is given (chunks: the schedule
      family's stages per rank: vpp, or 2 for zb-v/dualpipev; dualpipe holds 2 copies of L/pp layers);
    - global_batch_size % (dp·micro_batch_size) == 0;
    - num_experts % ep == 0 (MoE), ep == 1 for dense models;
    - seq_length % (2·cp) == 0 when cp > 1 (load-balanced causal split, Megatron CP docs);
    - num_attention_heads % (tp·cp) == 0 with cp_algorithm = "ulysses": its all-to-all hands each CP rank
      whole heads of its TP rank's h/tp (Jacobs et al. 2023, DeepSpeed-Ulysses: heads % sp degree);
    - seq_length % tp == 0 with sequence parallelism.
    """
    tp, pp, dp, cp, ep, vpp, mbs = (np.asarray(x) for x in (tp, pp, dp, cp, ep, vpp, micro_batch_size))
    shape = np.broadcast(tp, pp, dp, cp, ep, vpp, mbs).shape
    out = np.full(shape, "", dtype=object) if messages else None
    valid = np.ones(shape, dtype=bool)

    def rule(bad, msg_fn):
        bad = np.broadcast_to(bad, shape)
        valid[...] &= ~bad
        if messages and bad.any():
            bad = bad & (out == "")
            for i in (zip(*np.nonzero(bad)) if shape else ([()] if bad else [])):
                out[i] = msg_fn(i)

    def at(a, i):
        a = np.broadcast_to(a, shape)
        return int(a[i])

    h, kv = model.num_heads, model.num_kv_heads
    rule(h % tp != 0, lambda i: f"num_attention_heads({h}) is not divisible by tp({at(tp, i)})")
    rule(kv % tp != 0, lambda i: f"num_key_value_heads({kv}) is not divisible by tp({at(tp, i)})")
    fam = family(schedule)
    chunks = vpp if fam.takes_vpp else fam.num_stages(1)  # layer chunks per rank in layer order
    if not uneven_layers:
        L = model.num_layers
        rule(L % (pp * chunks) != 0,
             lambda i: f"num_hidden_layers({L}) is not divisible by pp({at(pp, i)}) * chunks({at(chunks, i)})"
                       + _split_hint(L, at(pp, i), at(chunks, i)))
    B = training.global_batch_size
    rule(B % (dp * mbs) != 0,
         lambda i: f"global_batch_size({B}) is not divisible by dp({at(dp, i)}) * micro_batch_size({at(mbs, i)})")
    if model.is_moe:
        E = model.num_experts
        rule(E % ep != 0, lambda i: f"num_experts({E}) is not divisible by ep({at(ep, i)})")
    else:
        rule(ep != 1, lambda i: f"ep({at(ep, i)}) > 1 needs an MoE model")
    s = training.seq_length
    rule((cp > 1) & (s % (2 * cp) != 0), lambda i: f"seq_length({s}) is not divisible by 2 * cp({at(cp, i)})")
    if cp_algorithm == "ulysses":
        rule(h % (tp * cp) != 0, lambda i: f"num_attention_heads({h}) is not divisible by tp({at(tp, i)}) * "
                                           f"cp({at(cp, i)}) (cp_algorithm = 'ulysses' splits heads over CP ranks)")
    if sequence_parallel:
        rule(s % tp != 0, lambda i: f"seq_length({s}) is not divisible by tp({at(tp, i)}) (sequence parallel)")
    if not messages:
        return valid
    return out.item() if out.shape == () else out


def layout_valid_mask(model: ModelSpec, training: Training, **layout) -> np.ndarray:
    """Boolean array: True where `layout_violations` finds no broken rule (fast, no messages)."""
    return layout_violations(model, training, messages=False, **layout)


def _split_hint(num_layers: int, pp, chunks) -> str:
    """What to pass instead: an uneven split over the pp·chunks (virtual) stages, as even as it goes with the
    earlier stages one layer more: one entry per pipeline rank for one stage per rank, one per virtual stage (in
    layer order) for schedules with several stages per rank. It is reached only where the stack's own rule
    (`placement.default_split` under its [runs] pipeline_split) gives no split, so it names no framework's rule."""
    try:
        p, c = int(pp), int(chunks)
    except (TypeError, ValueError):
        return ""
    S = p * c
    if p < 2 or S > num_layers:
        return ""
    base, extra = divmod(num_layers, S)
    split = [base + 1] * extra + [base] * (S - extra)
    what = " (one per virtual stage, in layer order)" if c > 1 else ""
    shown = ",".join(map(str, split)) if S <= 16 else f"{split[0]},{split[1]},...,{split[-1]} ({S} numbers)"
    return f"; give an uneven split: layers_per_stage / --layers-per-stage {shown}{what}"


def recompute_problem(model: ModelSpec, recompute: str) -> str:
    """Why `recompute` cannot be modelled for `model` ('' when it can): torchtitan's op-level selective AC
    ('op', cost/flops.py recomputed_fraction) follows the matmul order of a dense MHA/GQA block."""
    if recompute == "op" and (model.is_moe or model.is_mla):
        return (f"recompute 'op' (torchtitan's op-level selective AC) is modelled for dense MHA/GQA layers; "
                f"{model.name or 'this model'} has {'MoE' if model.is_moe else 'MLA'} layers: use full or none")
    return ""


def expert_tp_problem(model: ModelSpec, layout: Layout) -> str:
    """Why the layout's expert tensor-parallel degree cannot be modelled ('' when it can): it splits routed
    experts (a dense model has none), and an etp other than tp regroups the token shards of sequence
    parallelism (`layout.expert_tp_needs_sp`)."""
    if layout.etp == layout.tp:
        return ""
    if not model.is_moe:
        return f"etp({layout.etp}) applies to routed experts; {model.name or 'this model'} is dense (no experts)"
    if expert_tp_needs_sp(layout.tp, layout.etp) and not layout.sequence_parallel:
        return (f"etp({layout.etp}) other than tp({layout.tp}) needs sequence_parallel (the expert layers take "
                f"each rank's sequence shard: Megatron-Core's expert and tensor parallelism need it)")
    return ""


def moe_settings_problem(model: ModelSpec, training: Training) -> str:
    """Why `training`'s MoE settings cannot apply to `model` ('' when they can): a capacity factor, a routing
    imbalance, the router's CUDA graphs, the flex dispatcher, the MoE overlaps and the dispatch's FP8 payload describe
    routed experts, and a dense model has none (a number for it would be nonsense)."""
    if model.is_moe:
        return ""
    for key, value, default in (("moe_capacity_factor", training.moe_capacity_factor, 0.0),
                                ("moe_imbalance", training.moe_imbalance, 1.0)):
        if value != default:
            return f"{key} {value:g} applies to routed experts; {model.name or 'this model'} is dense (no experts)"
    st = training.stack
    for key, on in (("cuda_graphs " + "+".join(g for g in st.cuda_graphs if g.startswith("moe")),
                     any(g.startswith("moe") for g in st.cuda_graphs)),
                    ("moe_dispatcher flex", st.moe_dispatcher == "flex"),
                    ("moe_shared_expert_overlap", st.moe_shared_expert_overlap),
                    ("moe_a2a_overlap", st.moe_a2a_overlap), ("ep_dispatch_fp8", st.ep_dispatch_fp8)):
        if on:
            return f"{key} applies to routed experts; {model.name or 'this model'} is dense (no experts)"
    return ""


def activation_store_problem(model: ModelSpec, training: Training) -> str:
    """Why the stack's activation_input_fp8 cannot apply to `model` ('' when it can): Megatron-Core stores the
    activation's input in FP8 for SwiGLU only ('Storing activation input in FP8 is supported only for SwiGLU',
    transformer_config.py __post_init__, NVIDIA/Megatron-LM d98e8a6)."""
    if training.stack.activation_input_fp8 and model.mlp != "swiglu":
        return (f"activation_input_fp8 true with mlp {model.mlp!r}: Megatron-Core stores the activation input in "
                f"FP8 for SwiGLU only")
    return ""


def training_problem(model: ModelSpec, training: Training) -> str:
    """The first reason `training` (its MoE settings, its stack's recompute modules and activation store) cannot
    apply to `model`, '' when it can: the one list of these checks that scenarios, sweeps and `validate` run."""
    return (moe_settings_problem(model, training) or recompute_modules_problem(model, training)
            or activation_store_problem(model, training) or positions_problem(model, training)
            or moe_factor_problem(model, training) or fsdp_unit_problem(model, training))


def positions_problem(model: ModelSpec, training: Training) -> str:
    """Why the sequence cannot run on `model` ('' when it can): a learned position table (GPT-2's wpe) has one row
    per position, so a longer sequence has no embedding (RoPE models extrapolate and are not refused)."""
    if 0 < model.learned_position_embeddings < training.seq_length:
        return (f"seq_length {training.seq_length} is longer than {model.name or 'the model'}'s learned position "
                f"table ({model.learned_position_embeddings} positions, max_position_embeddings)")
    return ""


def recompute_modules_problem(model: ModelSpec, training: Training) -> str:
    """Why the stack's selective-recompute modules (Stack.recompute_modules) cannot apply to `model` under `training`
    ('' when they can). Megatron-Core refuses mla_up_proj without MLA and, under FP8 with delayed scaling, moe_act and
    layernorm, and shared_experts with moe_shared_expert_overlap (transformer_config.py __post_init__,
    NVIDIA/Megatron-LM d98e8a6); a module the model does not have
    (moe, moe_act or shared_experts without routed or shared experts) would recompute nothing: refused as a mistake."""
    mods, name = training.stack.recompute_modules, model.name or "this model"
    needs = (("mla_up_proj", model.is_mla, "multi-latent attention"), ("moe", model.is_moe, "routed experts"),
             ("moe_act", model.is_moe, "routed experts"),
             ("shared_experts", bool(model.shared_expert_ffn_hidden_size), "shared experts"))
    for module, has, what in needs:
        if module in mods and not has:
            return f"recompute_modules {module} needs {what}; {name} has none"
    if "shared_experts" in mods and training.stack.moe_shared_expert_overlap:
        return ("recompute_modules shared_experts with moe_shared_expert_overlap: Megatron-Core refuses it "
                "('shared_experts recompute cannot work with --moe-shared-expert-overlap')")
    if training.precision == "fp8" and training.stack.fp8_recipe == "delayed":
        bad = [m for m in ("moe_act", "layernorm") if m in mods]
        if bad:
            return (f"recompute_modules {bad[0]} with FP8 delayed scaling (fp8_recipe 'delayed'): Megatron-Core "
                    f"refuses it ('Delayed scaling does not support moe_act and layernorm recompute for fp8')")
    return ""


def offload_problem(training: Training, zero: int) -> str:
    """Why `training`'s offloads cannot run at ZeRO stage `zero` ('' when they can): ZeRO-Offload moves the
    data-parallel shard of the optimizer states and fp32 gradients to the host (Ren et al. 2021, §4.1; docs/memory.md),
    so it needs a sharded optimizer, zero >= 1 (DeepSpeed's offload_optimizer runs with ZeRO stages 1-3; Megatron-LM's
    --optimizer-cpu-offload with --use-distributed-optimizer; FSDP's CPU offload with FSDP); parameter offload
    (ZeRO-Infinity) moves the parameters' shard, which only ZeRO-3 has. The one rule for scenarios (`validate`), the
    memory model (memory/states.py) and the sweep's stages (`zero_stages`)."""
    if training.offload_params and zero != 3:
        return f"offload_params needs zero = 3, got zero({zero})"
    if training.offload_optimizer and zero == 0:
        return (f"offload_optimizer needs zero >= 1 (ZeRO-Offload moves the optimizer's shard to the host: DeepSpeed "
                f"stages 1-3, Megatron-LM's distributed optimizer), got zero({zero})")
    return ""


def precision_problem(training: Training, hardware) -> str:
    """Why `hardware` cannot run `training`'s GEMM precision ('' when it can): FP8 training needs FP8 tensor cores,
    a dense fp8 peak in the profile (Hopper, Blackwell, MI300X and later; not the A100); the mxfp8 recipe needs
    block-scaled FP8 kernels, whose rate the profile holds as [efficiency.gemm_mxfp8] (the Blackwell presets:
    validation/mxfp8_gemm.py; Hopper has no block-scaled FP8 instructions, Transformer Engine runs MXFP8 on
    Blackwell only). The one check for every command that reads a scenario (spec/scenario.py load_scenario)."""
    if training.precision != "fp8":
        return ""
    if "fp8" not in hardware.peak_flops_per_s:
        return (f"precision 'fp8' needs FP8 tensor cores: hardware {hardware.name!r} has no fp8 peak "
                f"(has: {', '.join(hardware.peak_flops_per_s)})")
    if training.stack.fp8_recipe == "mxfp8" and not hardware.has_efficiency("gemm_mxfp8"):
        return (f"fp8_recipe 'mxfp8' needs block-scaled FP8 kernels: hardware {hardware.name!r} has no "
                "[efficiency.gemm_mxfp8] (the Blackwell presets have one; Hopper has no block-scaled FP8)")
    return ""


def zero_stages(training: Training, asked=None) -> tuple[int, ...]:
    """The ZeRO stages a sweep tries: every stage `training`'s offloads run with (asked=None), or the stages asked
    for, InputError (`offload_problem`) if one of them cannot run."""
    problems = [(z, offload_problem(training, z)) for z in (ZERO_STAGES if asked is None else asked)]
    if asked is not None and any(p for _, p in problems):
        raise InputError(next(p for _, p in problems if p))
    return tuple(z for z, p in problems if not p)


def recompute_modes(model: ModelSpec, asked=None) -> tuple[str, ...]:
    """The recompute modes a sweep tries: every mode `model` can run (asked=None), or the modes asked for,
    InputError (`recompute_problem`) if one of them cannot run."""
    problems = [(r, recompute_problem(model, r)) for r in (RECOMPUTE if asked is None else asked)]
    if asked is not None and any(p for _, p in problems):
        raise InputError(next(p for _, p in problems if p))
    return tuple(r for r, p in problems if not p)


def validate(model: ModelSpec, training: Training, layout: Layout) -> None:
    """Raise InputError with the first rule the (model, training, layout) triple breaks."""
    _check_accounted_split(model, layout)
    if training_problem(model, training):
        raise InputError(training_problem(model, training))
    if training.stack.moe_a2a_overlap and model.mtp_layers > 1:
        raise InputError(f"mtp_layers {model.mtp_layers} with moe_a2a_overlap: Megatron-Core refuses it ('MTP supports "
                         f"at most one layer when enabling overlap_moe_expert_parallel_comm')")
    if training.stack.recompute_modules != DEFAULT_RECOMPUTE_MODULES and layout.recompute != "selective":
        raise InputError(f"recompute_modules {','.join(training.stack.recompute_modules)} apply to recompute "
                         f"'selective' (Megatron --recompute-granularity selective); this layout's recompute is "
                         f"{layout.recompute!r}")
    if expert_tp_problem(model, layout):
        raise InputError(expert_tp_problem(model, layout))
    if recompute_problem(model, layout.recompute):
        raise InputError(recompute_problem(model, layout.recompute))
    if problem := moe_load_problem(model, training, ep=layout.ep, cp=layout.cp,
                                   micro_batch_size=layout.micro_batch_size):
        raise InputError(problem)
    if offload_problem(training, layout.zero):
        raise InputError(offload_problem(training, layout.zero))
    msg = layout_violations(model, training, tp=layout.tp, pp=layout.pp, dp=layout.dp, cp=layout.cp,
                            ep=layout.ep, vpp=layout.vpp, micro_batch_size=layout.micro_batch_size,
                            sequence_parallel=layout.sequence_parallel, schedule=layout.schedule,
                            uneven_layers=layout.layers_per_stage is not None, cp_algorithm=layout.cp_algorithm)
    msg = str(msg)
    if msg:
        raise InputError(msg)
    for key, v in (("recompute_layers", layout.recompute_layers), ("recompute_group", layout.recompute_group)):
        if v > model.num_layers:
            raise InputError(f"{key} {v} is more than the model's {model.num_layers} layers")
    if layout.layers_per_stage is not None and sum(layout.layers_per_stage) != model.num_layers:
        raise InputError(f"layers_per_stage sums to {sum(layout.layers_per_stage)} != "
                         f"num_hidden_layers({model.num_layers})")


def _check_accounted_split(model: ModelSpec, layout: Layout) -> None:
    """With Megatron's account_for_{embedding,loss}_in_pipeline_split, Megatron's divisibility check
    (`megatron_split` raises) and layers_per_stage = that split (load_scenario sets it)."""
    if not layout.accounted_in_split:
        return
    from .placement import ACCOUNT_FLAGS, megatron_split

    split = megatron_split(model.num_layers, layout.pp, family(layout.schedule).num_stages(layout.pp, layout.vpp)
                           // layout.pp, embedding=layout.account_for_embedding_in_pipeline_split,
                           loss=layout.account_for_loss_in_pipeline_split)
    if layout.layers_per_stage != split:
        raise InputError(f"layers_per_stage {list(layout.layers_per_stage or ())} is not the split that "
                         f"{' and '.join(k for k in ACCOUNT_FLAGS if getattr(layout, k))} give "
                         f"({','.join(map(str, split))}): give one or the other")
