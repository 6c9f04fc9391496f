"""A parasim layout as a torchtitan job-config TOML fragment (the inverse of frameworks/torchtitan.py;
pytorch/torchtitan 238fa99 (2026-02) torchtitan/config/job_config.py names and defaults).

Batch: without PP the local batch is the micro-batch (torchtitan accumulates gradients up to the global
batch); with PP the local batch is the step's whole share of a DP rank, split into
pipeline_parallel_microbatch_size micro-batches, so one pipeline runs per step, as parasim replays it.
The pipeline split: the first/last_stage_less_layers (and layers_per_stage) that give parasim's split
under torchtitan's rule, when some do.
"""
from __future__ import annotations

from ..cost.recompute import every_kth_layer
from ..errors import InputError
from .emit_megatron import effective_split
from .scenario_doc import toml_value
from ..spec.placement import torchtitan_split
from .torchtitan_flavors import flavor_of

SCHEDULE_NAMES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B", "zb-v": "ZBVZeroBubble",
                  "dualpipev": "DualPipeV"}
RESHARD = {"yes": "always", "no": "never", "unless-pipelined": "default"}


def emit_torchtitan(sc, layout, *, with_model: bool = False) -> tuple[str, list[str]]:
    """(TOML fragment, notes on what torchtitan cannot express)."""
    notes: list[str] = []
    tables: dict[str, dict] = {}
    if with_model:
        key = flavor_of(sc.model)
        if key:
            tables["model"] = {"name": key[0], "flavor": key[1]}
        else:
            notes.append(f"model {sc.model.name}: no torchtitan flavor has its shapes")
    if sc.training.precision == "fp8":  # torchao Float8Linear (tensorwise) or MX (mxfp8)
        mx = sc.training.stack.fp8_recipe == "mxfp8"
        tables.setdefault("model", {})["converters"] = ["mx" if mx else "float8"]
        if sc.training.stack.fp8_recipe == "blockwise":
            notes.append("fp8_recipe blockwise: torchtitan's float8 converter scales per tensor; written as float8")
    tables["training"] = _training(sc, layout, notes)
    tables["parallelism"] = _parallelism(sc, layout, notes)
    stage_layers = sc.model.num_layers // (layout.pp * layout.vpp)
    k = stage_layers // layout.recompute_layers if layout.recompute_layers else 0
    if layout.recompute in ("op", "selective"):  # (Megatron's attention-core recompute: op-level is nearest)
        tables["activation_checkpoint"] = {"mode": "selective", "selective_ac_option": "op"}
    elif k > 1 and every_kth_layer(stage_layers, k) == layout.recompute_layers:  # every k-th layer: as many
        tables["activation_checkpoint"] = {"mode": "selective", "selective_ac_option": str(k)}
    else:
        tables["activation_checkpoint"] = {"mode": layout.recompute}
        if layout.recompute_layers:
            notes.append(f"recompute_layers {layout.recompute_layers} of {stage_layers} layers per stage: "
                         f"torchtitan recomputes every layer or every k-th one; written as full")
        if layout.recompute_group > 1:
            notes.append(f"recompute_group {layout.recompute_group}: torchtitan checkpoints each layer on its own; "
                         f"written as full")
    if layout.recompute == "selective":
        notes.append("recompute selective (Megatron's attention-core recompute): torchtitan's 'selective' "
                     "recomputes by op or by layer, not the attention alone; written as op-level")
    st = sc.training.stack
    tables["compile"] = {"enable": bool(st.compiled), "components": ["model", "loss"]}
    tables["optimizer"] = {"name": "AdamW" if sc.training.optimizer == "adamw" else "Adam",
                           "implementation": st.optimizer_impl}
    if sc.training.optimizer.startswith("sgd"):
        notes.append(f"optimizer {sc.training.optimizer}: torchtitan's job config names AdamW or Adam")
    lines = [f"# parasim emit torchtitan: {layout.label} of {sc.name}, {sc.num_gpus} GPUs (NGPU={sc.num_gpus})"]
    for name, table in tables.items():
        lines += ["", f"[{name}]"] + [f"{k} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n", notes


def _training(sc, layout, notes: list[str]) -> dict:
    tr = sc.training
    local = layout.micro_batch_size if layout.pp == 1 else tr.global_batch_size // layout.dp
    out = {"local_batch_size": local, "global_batch_size": tr.global_batch_size, "seq_len": tr.seq_length,
           "mixed_precision_param": "float32" if tr.precision == "fp32" else "bfloat16"}
    if tr.precision == "fp16":
        notes.append("precision fp16: torchtitan's mixed precision is bfloat16 or float32 (bfloat16 written)")
    if not tr.master_weights:
        out["dtype"] = "bfloat16"
    if tr.offload_optimizer or tr.offload_params:
        out["enable_cpu_offload"] = True
        if not (tr.offload_optimizer and tr.offload_params):
            notes.append("enable_cpu_offload offloads parameters, gradients and optimizer states together")
    return out


def _parallelism(sc, layout, notes: list[str]) -> dict:
    z, dp = layout.zero, layout.dp
    if z in (1, 2):
        notes.append(f"ZeRO-{z}: torchtitan's FSDP2 shards parameters too (written as FSDP, ZeRO-3)")
    shard = (layout.shard_group_size or dp) if z else 1
    out = {"data_parallel_replicate_degree": dp // shard, "data_parallel_shard_degree": shard,
           "tensor_parallel_degree": layout.tp, "pipeline_parallel_degree": layout.pp,
           "context_parallel_degree": layout.cp, "expert_parallel_degree": layout.ep}
    if layout.tp > 1 and not layout.sequence_parallel:
        notes.append("sequence_parallel = false: torchtitan's TP plans always shard the sequence")
    if layout.cp > 1 and layout.cp_algorithm != "ring":
        notes.append(f"cp_algorithm {layout.cp_algorithm}: torchtitan's context parallelism is ring attention")
    if layout.dp_mode != "ddp":
        notes.append(f"dp_mode {layout.dp_mode}: torchtitan runs FSDP2 or replication only")
    st = sc.training.stack
    if st.fsdp_reshard_after_forward != "unless-pipelined" and z == 3:
        out["fsdp_reshard_after_forward"] = RESHARD[st.fsdp_reshard_after_forward]
    if st.tp_comm_overlap and layout.tp > 1:
        out["enable_async_tensor_parallel"] = True
        if not st.compiled:
            notes.append("enable_async_tensor_parallel works only with [compile] enable = true")
    if layout.pp > 1:
        out.update(_pipeline(sc, layout, notes))
    return out


def _pipeline(sc, layout, notes: list[str]) -> dict:
    if layout.schedule not in SCHEDULE_NAMES:
        notes.append(f"schedule {layout.schedule}: not a torch.distributed.pipelining schedule torchtitan runs")
    out = {"pipeline_parallel_schedule": SCHEDULE_NAMES.get(layout.schedule, "1F1B"),
           "pipeline_parallel_microbatch_size": layout.micro_batch_size}
    L = sc.model.num_layers
    split = effective_split(layout, L)
    stages = len(split)
    default_stages = layout.pp * (2 if layout.schedule in ("interleaved", "zb-v", "dualpipev") else 1)
    for first, last in ((1, 1), (0, 0), (1, 0), (0, 1), (2, 2), (2, 1), (1, 2), (2, 0), (0, 2)):
        per_stage = None if stages == default_stages else -(-(L + first + last) // stages)
        if per_stage and -(-(L + first + last) // per_stage) != stages:
            continue
        try:
            if torchtitan_split(L, stages, first, last) != split:
                continue
        except InputError:  # torchtitan cannot split so
            continue
        if per_stage:
            out["pipeline_parallel_layers_per_stage"] = per_stage
        if (first, last) != (1, 1):
            out["pipeline_parallel_first_stage_less_layers"] = first
            out["pipeline_parallel_last_stage_less_layers"] = last
        return out
    notes.append(f"layers per stage {','.join(map(str, split))}: torchtitan's split rule does not give it "
                 f"(module_fqns_per_model_part could)")
    return out
