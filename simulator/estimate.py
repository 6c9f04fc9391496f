"""Estimate: memory + step time + throughput of one layout (`estimate`), with its per-stage memory.

The composition — compute, communication and what overlaps it, the pipeline replay, the
data-parallel tail, memory — lives in the vectorised kernel, `simulator/kernel.py` (its docstring
has the rules); one layout is a one-row `LayoutBatch` of it, whose per-stage memory comes from the
same call.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from .errors import InputError
from .batch import LayoutBatch
from .cost.variability import slowest_gpu_factor
from .kernel import EXPOSED, HIDDEN, EstimateOptions, evaluate
from .memory.result import memory_result
from .spec.layout import Layout
from .spec.model import ModelSpec
from .spec.training import Training
from .spec.validate import validate


# ---- one layout --------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Estimate:
    """Memory + time of one layout; `to_dict()` follows DESIGN.md's JSON contract."""

    model: ModelSpec
    training: Training
    layout: Layout
    hardware_name: str
    hardware: object = None  # HardwareProfile (where its efficiencies come from)
    row: dict  # the kernel's row (kernel.evaluate's columns), for tables
    memory: object  # MemoryResult (per stage)
    pipeline: str = "replayed"  # how the pipeline part was obtained
    comm_slowdown: float = 0.0  # the SM-contention fraction the estimate used (EstimateOptions.for_hardware)
    gpu_speed_cv: float = 0.0  # the per-GPU speed spread it used: compute at the slowest GPU's pace
    stage_times: dict | None = None  # with keep_stage_times: kernel.Evaluation.stage_times of the one-row batch
    options: EstimateOptions | None = None  # the options it ran with (for `host_bound_s`)

    @cached_property
    def host_bound_s(self) -> float:
        """What the host's issue of kernels adds to the step (module function `host_bound_s`; evaluated on first
        use: one more evaluation of the layout)."""
        if self.options is None or self.hardware is None:
            return 0.0
        return host_bound_s(self.model, self.training, self.layout, self.hardware, self.options, self.step_s)

    @property
    def slowest_gpu_factor(self) -> float:
        """How much longer the compute took at the pace of the slowest of the layout's GPUs
        (cost/variability.py; 1 without a speed spread)."""
        return float(slowest_gpu_factor(self.gpu_speed_cv, self.layout.num_gpus))  # (= tp·cp·pp·dp, Layout's rule)

    # the step (seconds) and its breakdown: step_s = compute_s + exposed_comm_s + bubble_s
    @property
    def step_s(self) -> float:
        return float(self.row["step_s"])

    @property
    def compute_s(self) -> float:
        return float(self.row["compute_s"])

    @property
    def exposed_comm_s(self) -> float:
        return float(self.row["exposed_comm_s"])

    @property
    def exposed_comm_by_group_s(self) -> dict:
        """Exposed communication per group (tp, cp, ep, pp, dp, zero3); sums to exposed_comm_s."""
        return {k: float(self.row[f"exposed_{k}_s"]) for k in EXPOSED}

    @property
    def bubble_s(self) -> float:
        return float(self.row["bubble_s"])

    @property
    def bubble_fraction(self) -> float:
        return float(self.row["bubble_fraction"])

    @property
    def optimizer_s(self) -> float:
        return float(self.row["optimizer_s"])

    # throughput
    @property
    def tokens_per_s(self) -> float:
        return float(self.row["tokens_per_s"])

    @property
    def mfu(self) -> float:
        return float(self.row["mfu"])

    @property
    def hfu(self) -> float:
        return float(self.row["hfu"])

    @property
    def peak_bytes(self) -> float:
        return float(self.row["peak_bytes"])

    @property
    def feasible(self) -> bool:
        return bool(self.row["feasible"])

    @property
    def reason(self) -> str:
        return str(self.row["reason"])

    def to_dict(self) -> dict:
        lay, r = self.layout, self.row
        mem = self.memory.to_dict()["memory"]
        return {
            "model": self.model.summary(),
            "hardware": self.hardware_name,
            "layout": lay.to_dict(self.training.global_batch_size),
            "memory": mem,
            "time": {"step_s": r["step_s"], "compute_s": r["compute_s"], "exposed_comm_s": r["exposed_comm_s"],
                     "bubble_s": r["bubble_s"], "bubble_fraction": r["bubble_fraction"],
                     "optimizer_s": r["optimizer_s"], "contention_s": r["contention_s"],
                     "host_bound_s": self.host_bound_s, "comm_slowdown": self.comm_slowdown,
                     "gpu_speed_cv": self.gpu_speed_cv,
                     "slowest_gpu_factor": self.slowest_gpu_factor,
                     "exposed_comm_by_group_s": {k: r[f"exposed_{k}_s"] for k in EXPOSED},
                     "hidden_comm_by_group_s": {k: r[f"hidden_{k}_s"] for k in HIDDEN},
                     "pipeline": self.pipeline},
            "throughput": {"tokens_per_s": r["tokens_per_s"], "model_tflops_per_gpu": r["model_tflops_per_gpu"],
                           "hardware_tflops_per_gpu": r["hardware_tflops_per_gpu"], "mfu": r["mfu"], "hfu": r["hfu"],
                           "mfu_formula": "PaLM App. B: model FLOPs per step (no recompute, attention "
                                          f"'{self.training.attention_flops}' convention) / (step_s x GPUs x dense "
                                          f"{self.training.precision} peak)"},
            "stack": stack_summary(self.training.stack, float(self.model.local_experts(self.layout.ep))),
            "efficiency_sources": efficiency_sources(self.model, self.training, self.hardware),
            "validated_error": validated_error(self.hardware, self.training.stack),
            "not_modelled": not_modelled(self.model, self.training, self.layout),
            "feasible": self.feasible, "reason": self.reason,
        }


def stack_summary(stack, experts_local: float = 0.0) -> dict:
    """The software stack an estimate assumed (spec/stack.py), for its JSON and table; `moe_layer_kernels`: the
    launches of one MoE layer with `experts_local` experts per rank (cost/launch.py layer_kernels), absent for a
    dense model."""
    from .cost.launch import layer_kernels

    return {"name": stack.name, "framework": stack.framework, "attention_kernel": stack.attention_kernel,
            "attention_padding": stack.attention_padding, "cp_ring_merge": stack.cp_ring_merge, "compiled": stack.compiled, "optimizer_impl": stack.optimizer_impl, "grad_buffer": stack.grad_buffer,
            "grad_accumulation": stack.grad_accumulation, "cross_entropy": stack.cross_entropy,
            "elementwise": stack.elementwise,
            "kernels_per_layer": [int(float(k)) for k in layer_kernels(stack, weight_gemms=0)[:2]],
            "train_metric_losses": stack.train_metric_losses, "recompute_modules": list(stack.recompute_modules),
            "host_us_per_kernel": stack.host_s_per_kernel * 1e6,
            "decode_host_us_per_kernel": (stack.decode_host_s_per_kernel or stack.host_s_per_kernel) * 1e6,
            "moe_dispatcher": stack.moe_dispatcher, "cuda_graphs": list(stack.cuda_graphs),
            **({"moe_layer_kernels": [int(float(k)) for k in layer_kernels(stack, weight_gemms=0,
                                                                           experts_local=experts_local)[:2]]}
               if experts_local else {}),
            **({"moe_host_us_per_kernel": stack.moe_host_s_per_kernel * 1e6}
               if experts_local and stack.moe_host_s_per_kernel and any(stack.moe_kernels_per_layer) else {}),
            "overlaps": [name for name in ("tp_comm_overlap", "moe_shared_expert_overlap", "moe_a2a_overlap",
                                           "moe_delay_wgrad") if getattr(stack, name)]}


def validated_error(hardware, stack) -> dict:
    """The measured error of parasim on this hardware and stack, or the nearest validated one, labelled
    (simulator/spec/validated.py: exact, same hardware, same GPU family, none)."""
    from .spec.validated import for_estimate

    return for_estimate(hardware, stack)


def not_modelled(model: ModelSpec, training: Training, layout) -> list[str]:
    """Caveats for regimes this estimate falls in that parasim names but times only roughly or not at all: GEMM
    operands off the tensor cores' 16-byte alignment (cost/alignment.py: one measured fallback rate), attention
    dropout inside a fused attention kernel not measured with dropout (cost/attention.py `flash_dropout_note`)."""
    from .cost.alignment import estimate_misaligned, note
    from .cost.attention import flash_dropout_note

    return [t for t in (note(estimate_misaligned(model, training, layout)), flash_dropout_note(training)) if t]


def efficiency_sources(model: ModelSpec, training: Training, hardware) -> dict:
    """{role: {table, source}} of the efficiency tables this estimate read: GEMMs (the FP8 table under fp8
    training: cost/compute.py gemm_table), attention forward and backward (the stack's kernel at the model's
    QK head dim: `table` says which tables and how they were combined, `source` is the head-dim table's; without FlashAttention the `attention_unfused` tables,
    cost/attention.py unfused_core_times, or the GEMM table where the profile has none), memory-bound
    kernels, and those of the other kernel classes the layer's op list uses (strided or broadcast operands, row
    reductions: memory_ops.kernel_table) where the profile has their tables, the optimizer step."""
    if hardware is None or not hasattr(hardware, "efficiency"):
        return {}
    from .cost.attention import attention_table_names, attention_tables, release_kernel

    kernel = (release_kernel(hardware, training.stack.attention_kernel, training.stack.cudnn_version)
              if training.flash_attention else "unfused")
    d = model.qk_head_dim
    fused = training.stack.optimizer_impl == "fused" or training.optimizer not in ("adam", "adamw")
    opt = "optimizer" if fused and hardware.has_efficiency("optimizer") else "memory"  # (cost/optimizer.py)
    from .cost.memory_ops import KERNEL_TABLES, memory_ops

    used = {o.table for o in memory_ops(model, training)} | {"memory"}  # the layer's kernel classes (memory_ops.py)
    from .cost.compute import gemm_table

    gemm = gemm_table(training, hardware, training.precision == "fp8")
    roles = {"gemm": gemm, "attention": None, "attention_bwd": None,
             **{t: t for t in KERNEL_TABLES if t in used}, "optimizer": opt}
    out = {role: {"table": t, "source": hardware.efficiency[t].source} for role, t in roles.items()
           if t and hardware.has_efficiency(t)}
    unfused = kernel == "unfused"
    for role, base, label in zip(("attention", "attention_bwd"), attention_tables(hardware, kernel),
                                 attention_table_names(hardware, kernel, d)):
        if unfused and not hardware.has_efficiency("attention_unfused"):  # batched GEMMs + a softmax
            label = base = "gemm"
        elif unfused and role == "attention_bwd" and not hardware.has_efficiency("attention_bwd_unfused"):
            base = "attention_unfused"
            label = f"{attention_table_names(hardware, kernel, d)[0]} (the two passes' total, split as modelled)"
        read = label.split(" ")[0]  # the first (head-dim) table read; its source is the one shown
        out[role] = {"table": label, "source": hardware.efficiency[read if hardware.has_efficiency(read) else base].source}
    return {role: out[role] for role in roles if role in out}


def host_bound_s(model: ModelSpec, training: Training, layout: Layout, hardware, options: EstimateOptions,
                 step_s: float) -> float:
    """How much of `step_s` the host's issue of kernels adds: step_s less the same step with the stack's host times
    per kernel (plain and MoE-layer) at 0 (its layer passes at their GPU time: cost/launch.py `launch_bound`). What
    the prediction owes to the host's speed, which differs between machines of one kind (docs/stacks.md); 0 for a
    GPU-bound step."""
    if training.stack.host_s_per_kernel <= 0.0 and training.stack.moe_host_s_per_kernel <= 0.0:
        return 0.0
    free = replace(training, stack=replace(training.stack, host_s_per_kernel=0.0, moe_host_s_per_kernel=0.0))
    row = evaluate(model, free, hardware, LayoutBatch.of_layout(layout), options=options).rows.iloc[0]
    return max(0.0, step_s - float(row["step_s"]))


def estimate(model: ModelSpec, training: Training, layout: Layout, hardware, *,
             options: EstimateOptions | None = None, keep_stage_times: bool = False) -> Estimate:
    """Memory + step time + throughput of one layout (validated first; InputError on a broken rule);
    `keep_stage_times`: keep the parts of the step (for its timeline: report/step_timeline.py)."""
    validate(model, training, layout)
    opt = (options or EstimateOptions()).for_hardware(hardware)
    got = evaluate(model, training, hardware, LayoutBatch.of_layout(layout), options=opt, per_stage=True,
                   keep_stage_times=keep_stage_times)
    row = got.rows.iloc[0].to_dict()
    mem = memory_result({k: v[0] for k, v in got.stages.items()}, model, training, layout, hardware)
    how = "replayed schedule (engine fast path)" if opt.pipeline == "replay" \
        else "analytic closed form (formulas.md §5.2)"
    return Estimate(model=model, training=training, layout=layout, hardware_name=getattr(hardware, "name", ""),
                    hardware=hardware, row=row, memory=mem, pipeline=how,
                    comm_slowdown=opt.comm_slowdown, gpu_speed_cv=opt.gpu_speed_cv, stage_times=got.stage_times,
                    options=opt)


def estimate_scenario(scenario, *, options: EstimateOptions | None = None,
                      keep_stage_times: bool = False) -> Estimate:
    """`estimate` of a loaded Scenario (spec/scenario.py)."""
    if scenario.layout is None:
        raise InputError("the scenario has no [layout]; use `parasim sweep` for a sweep space")
    return estimate(scenario.model, scenario.training, scenario.layout, scenario.hardware, options=options,
                    keep_stage_times=keep_stage_times)
