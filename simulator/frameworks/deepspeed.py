"""A DeepSpeed config (ds_config.json) plus the model's Hugging Face config.json as a parasim scenario.

The keys and defaults are DeepSpeed's (microsoft/DeepSpeed, deepspeed/runtime/config.py and
deepspeed/runtime/zero/config.py DeepSpeedZeroConfig; docs: deepspeed.ai/docs/config-json):
- zero_optimization.stage -> zero; offload_optimizer / offload_param {device: cpu | nvme} -> the
  offload switches (offload_param: stage 3 only); mics_shard_size -> shard_group_size (MiCS, stage 3);
- train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x data-parallel GPUs
  (DeepSpeed asserts it): two of them and the GPU count give the third; "auto" (filled in by the Hugging
  Face Trainer) counts as absent;
- bf16 / bfloat16 / fp16 {enabled} -> precision (none: fp32); gradients in the model's dtype
  (grad_dtype bf16, DeepSpeed's accounting) unless data_types.grad_accum_dtype = "fp32";
  communication_data_type -> the stack's fsdp_reduce_dtype;
- the stack `deepspeed` with: reduce_bucket_size (elements, default 5e8) x the gradient's bytes -> dp_bucket_mb;
  reduce_bucket_size, allgather_bucket_size (default 5e8), contiguous_gradients (default on) and
  overlap_comm -> the memory model's zero_* buffer sizes (memory/framework.py);
  overlap_comm (DeepSpeed's default: on for stage 3 only) off -> one bucket reduced after the backward;
  stage3_prefetch_bucket_size (elements, default 5e7) / a layer's parameters -> fsdp_prefetch (at least 1
  when > 0). "auto" sizes are the Hugging Face Trainer's: reduce_bucket_size = h², prefetch 0.9·h²
  (transformers integrations/deepspeed.py).
A DeepSpeed config holds no tensor, pipeline or sequence parallel degree (those are set in code), no
sequence length and no activation checkpointing of a Hugging Face model (`gradient_checkpointing`): they
come from the command's --seq / --recompute or are assumed, and said so.
"""
from __future__ import annotations


from ..errors import InputError
from ..spec.presets import parse_json
from .fields import Fields, Report, prefixed

Z = "zero_optimization."
IGNORED = ("steps_per_print", "wall_clock_breakdown", "gradient_clipping", "scheduler.", "optimizer.params.",
           "tensorboard.", "wandb.", "csv_monitor.", "comet.", "flops_profiler.", "comms_logger.", "monitor_config.",
           "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "prescale_gradients",
           "gradient_predivide_factor", "sparse_gradients", "dump_state", "fp16.", "bf16.", "bfloat16.", "aio.",
           "checkpoint.", "data_efficiency.", "curriculum_learning.", "elasticity.", "autotuning.", "memory_breakdown",
           "seed", "activation_checkpointing.", Z + "reduce_scatter", Z + "allgather_partitions",
           Z + "stage3_gather_16bit_weights_on_model_save",
           Z + "gather_16bit_weights_on_model_save", Z + "sub_group_size", Z + "round_robin_gradients",
           Z + "load_from_fp32_weights", Z + "ignore_unused_parameters", Z + "elastic_checkpoint",
           Z + "offload_optimizer.", Z + "offload_param.", Z + "stage3_param_persistence_threshold",
           Z + "stage3_model_persistence_threshold", Z + "memory_efficient_linear", Z + "override_module_apply",
           Z + "use_multi_rank_bucket_allreduce", Z + "cpu_offload_use_pin_memory", "train_batch_size",
           "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


def json_fields(doc: dict, where: str) -> Fields:
    items = {}

    def walk(tree: dict, path: list[str]) -> None:
        for k, v in tree.items():
            if isinstance(v, dict) and v:
                walk(v, path + [k])
            else:
                items[".".join(path + [k])] = (".".join(path + [k]), v)
    walk(doc, [])
    return Fields(items, where, typed=True)  # JSON: "256" or "yes" is text, not a number or a switch


def read_ds_config(text: str, where: str) -> Fields:
    doc = parse_json(text, where)
    if not isinstance(doc, dict):
        raise InputError(f"{where}: a DeepSpeed config must hold a JSON object")
    for section in ("zero_optimization", "bf16", "fp16", "activation_checkpointing", "optimizer"):
        if section in doc and not isinstance(doc[section], dict):
            raise InputError(f"{where}: {section} must be a JSON object, got {doc[section]!r}")
    return json_fields(doc, where)


def deepspeed_import(f: Fields, *, spec, model_table: dict, gpus: int | None, seq: int | None,
                     micro_batch: int | None, global_batch: int | None, recompute: str | None, hardware: str,
                     source: str) -> tuple[dict, Report]:
    """(scenario document, report); `spec` is the model (ModelSpec of --hf-config or --model), `model_table`
    its [model] table."""
    rep = Report()
    zero = f.int(Z + "stage", 0, least=0)
    if zero > 3:
        raise f.error(Z + "stage", f"must be 0, 1, 2 or 3, got {zero}")
    gpus, mbs, gbs = _batch(f, gpus, micro_batch, global_batch, rep)
    rep.assume("tp = pp = cp = 1: a DeepSpeed config holds no tensor, pipeline or sequence parallel degree "
               "(they are set in code)")
    if seq is None:
        rep.assume("seq_length 4096: a DeepSpeed config holds no sequence length (give --seq)")
    if recompute is None:
        rep.assume("recompute none: activation checkpointing of a Hugging Face model is set in the training script "
                   "(give --recompute full for gradient_checkpointing)")
    layout = {"tp": 1, "pp": 1, "zero": zero, "micro_batch_size": mbs, "recompute": recompute or "none"}
    training = {"seq_length": seq or 4096, "global_batch_size": gbs, **_precision(f, rep)}
    training.update(_offload(f, zero, rep))
    training.update(_optimizer(f, rep))
    mics = f.int(Z + "mics_shard_size", -1, least=-1)
    if mics > 0 and zero == 3:
        layout["shard_group_size"] = mics
    elif mics > 0:
        rep.cannot(f"{Z}mics_shard_size with stage {zero}: MiCS shards ZeRO-3 only")
    stack = _stack(f, zero, spec, training, rep)
    for key in ("partition_activations", "cpu_checkpointing"):
        if f.flag("activation_checkpointing." + key):
            rep.cannot(f"activation_checkpointing.{key}: DeepSpeed's checkpointed activations partitioned over "
                       f"model-parallel ranks / kept in host memory are not modelled")
    rep.leftovers(f, lambda key: prefixed(key, IGNORED))
    doc = {"name": source.rsplit("/", 1)[-1].rsplit(".", 1)[0],
           "description": f"imported from {source} (DeepSpeed config) by parasim import deepspeed",
           "model": model_table, "hardware": {"preset": hardware, "num_gpus": gpus}, "training": training,
           "layout": layout, "stack": stack}
    return doc, rep


def _auto(f: Fields, key: str):
    """A whole number, or None when absent or "auto"."""
    return None if f.raw(key) in (None, "auto") else f.int(key)


def _batch(f: Fields, gpus, mbs_given, gbs_given, rep: Report) -> tuple[int, int, int]:
    """(GPUs, micro-batch, global batch) from train_batch_size = micro x accumulation x GPUs."""
    tbs, mbs, gas = _auto(f, "train_batch_size"), _auto(f, "train_micro_batch_size_per_gpu"), \
        _auto(f, "gradient_accumulation_steps")
    tbs, mbs = gbs_given or tbs, mbs_given or mbs
    if gpus is None:
        if None in (tbs, mbs, gas):
            raise InputError(f"{f.where}: the GPU count is not in a DeepSpeed config (train_batch_size, "
                             f"train_micro_batch_size_per_gpu and gradient_accumulation_steps do not all give it); "
                             f"give --gpus N")
        if tbs % (mbs * gas):
            raise f.error("train_batch_size", f"{tbs} is not micro-batch {mbs} x accumulation {gas} x a GPU count")
        gpus = tbs // (mbs * gas)
    if mbs is None and tbs is not None:
        mbs = tbs // ((gas or 1) * gpus) or None
    if mbs is None:
        raise InputError(f"{f.where}: train_micro_batch_size_per_gpu and train_batch_size are missing or 'auto' "
                         f"(the Hugging Face Trainer fills them in); give --micro-batch and --global-batch")
    if tbs is None:
        gas = gas or 1
        if not f.has("gradient_accumulation_steps"):
            rep.assume("gradient_accumulation_steps: DeepSpeed's default 1")
        tbs = mbs * gas * gpus
    if gas is not None and tbs != mbs * gas * gpus:
        raise f.error("train_batch_size", f"{tbs} != micro-batch {mbs} x gradient_accumulation_steps {gas} x "
                                          f"{gpus} GPUs (DeepSpeed asserts they agree)")
    if tbs % (mbs * gpus):
        raise f.error("train_batch_size", f"{tbs} is not a multiple of micro-batch {mbs} x {gpus} GPUs")
    return gpus, mbs, tbs


def _enabled(f: Fields, section: str, rep: Report) -> bool:
    v = f.raw(section + ".enabled")
    if v == "auto":
        rep.assume(f"{section}.enabled = 'auto': taken as enabled" if section != "fp16" else
                   "fp16.enabled = 'auto': taken as disabled")
        return section != "fp16"
    f.read.discard(section + ".enabled")
    return f.flag(section + ".enabled")


def _precision(f: Fields, rep: Report) -> dict:
    bf16 = _enabled(f, "bf16", rep) or _enabled(f, "bfloat16", rep)
    fp16 = _enabled(f, "fp16", rep)
    if bf16 and fp16:
        raise InputError(f"{f.where}: bf16 and fp16 are both enabled")
    prec = "bf16" if bf16 else "fp16" if fp16 else "fp32"
    if prec == "fp32":
        rep.assume("precision fp32: neither bf16 nor fp16 is enabled")
    accum = f.text("data_types.grad_accum_dtype", None, choices=("fp32", "fp16", "bf16"))
    grad = accum or ("fp32" if prec == "fp32" else prec)
    if accum is None and prec != "fp32":
        rep.assume(f"gradients in {prec}: DeepSpeed keeps them in the model's dtype (data_types.grad_accum_dtype "
                   f"unset)")
    return {"precision": prec, "grad_dtype": grad}


def _offload(f: Fields, zero: int, rep: Report) -> dict:
    out = {}
    dev = f.text(Z + "offload_optimizer.device", "none", choices=("none", "cpu", "nvme"))
    if f.flag(Z + "cpu_offload"):
        dev = "cpu"
    if dev != "none":
        out["offload_optimizer"] = True
        if dev == "nvme":
            rep.assume("offload_optimizer to NVMe: counted as host memory (no NVMe bandwidth modelled)")
        if f.float(Z + "offload_optimizer.ratio", 1.0) < 1:
            rep.cannot(f"{Z}offload_optimizer.ratio < 1: parasim offloads all the optimizer states")
    pdev = f.text(Z + "offload_param.device", "none", choices=("none", "cpu", "nvme"))
    if f.flag(Z + "cpu_offload_param"):
        pdev = "cpu"
    if pdev != "none":
        if zero != 3:
            raise f.error(Z + "offload_param.device", f"needs stage 3 (DeepSpeed), got stage {zero}")
        out["offload_params"] = True
    return out


def _optimizer(f: Fields, rep: Report) -> dict:
    kind = f.text("optimizer.type", "AdamW")
    k = kind.lower().replace("_", "")
    if k in ("adamw", "fusedadamw"):
        return {"optimizer": "adamw"}
    if k in ("adam", "fusedadam", "cpuadam", "deepspeedcpuadam"):
        return {"optimizer": "adam"}
    if k == "sgd":
        return {"optimizer": "sgd-momentum"}
    rep.cannot(f"optimizer.type {kind!r}: counted as Adam (2 states per parameter)")
    return {"optimizer": "adam"}


def _stack(f: Fields, zero: int, spec, training: dict, rep: Report) -> dict:
    st = {"preset": "deepspeed"}
    gb = {"fp32": 4, "bf16": 2, "fp16": 2}[training["grad_dtype"]]
    h2 = spec.hidden_size ** 2
    bucket = _size(f, Z + "reduce_bucket_size", 500_000_000, h2, rep)
    overlap = f.raw(Z + "overlap_comm", zero == 3)
    overlap = f.flag(Z + "overlap_comm", zero == 3) if overlap != "auto" else True
    if zero == 0 or (zero in (1, 2) and not overlap):
        st["dp_bucket_mb"] = 1e6
        rep.assume("gradients reduced after the backward, one bucket (dp_bucket_mb = 1e6): " +
                   ("the DeepSpeed engine all-reduces at the step" if zero == 0 else
                    "overlap_comm is off (DeepSpeed's default below stage 3)"))
    else:
        st["dp_bucket_mb"] = bucket * gb / 1e6
    st["zero_reduce_bucket_size"] = max(bucket, 1)
    st["zero_allgather_bucket_size"] = max(_size(f, Z + "allgather_bucket_size", 500_000_000, 500_000_000, rep), 1)
    st["zero_contiguous_gradients"] = f.flag(Z + "contiguous_gradients", True)
    st["zero_overlap_comm"] = bool(overlap)
    if zero == 3:
        prefetch = _size(f, Z + "stage3_prefetch_bucket_size", 50_000_000, int(0.9 * h2), rep)
        layer = float(spec.layer_params().mean())
        st["fsdp_prefetch"] = 0 if prefetch == 0 else max(1, int(prefetch // layer))
        rep.assume(f"stage3_prefetch_bucket_size {prefetch:,} elements / {layer:,.0f} parameters per layer: "
                   f"fsdp_prefetch = {st['fsdp_prefetch']} layer(s)")
        for key in ("stage3_max_live_parameters", "stage3_max_reuse_distance"):
            if f.has(Z + key):
                f.take(Z + key)
                rep.cannot(f"{Z}{key}: parasim frees parameters after use (fsdp_reshard_after_forward = yes)")
    comm = f.text("communication_data_type", None, choices=("fp32", "fp16", "bf16"))
    if comm is not None:
        st["fsdp_reduce_dtype"] = comm if comm != "fp16" else "grad"
    for key in ("zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_gradients",
                "zero_quantized_nontrainable_weights"):
        v = f.raw(Z + key)
        if v not in (None, False, 1, 0):
            rep.cannot(f"{Z}{key} = {v}: ZeRO++ is not modelled")
    return st


def _size(f: Fields, key: str, default: int, auto: int, rep: Report) -> int:
    v = f.raw(key)
    if v == "auto":
        rep.assume(f"{key} = 'auto': the Hugging Face Trainer's {auto:,}")
        return auto
    f.read.discard(key)
    return f.int(key, default, least=0)
