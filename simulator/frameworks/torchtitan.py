"""A torchtitan job config (TOML) as a parasim scenario.

The keys and defaults are torchtitan's JobConfig (pytorch/torchtitan 238fa99 (2026-02), the last release
configured by TOML files, torchtitan/config/job_config.py; train_configs/llama3_8b.toml is the shape):
- [model] name, flavor -> a parasim model (frameworks/torchtitan_flavors.py), converters "float8" -> fp8
  (torchao tensorwise scaling: the stack's "current" recipe), "mx" -> fp8 with the mxfp8 recipe;
- [parallelism] data_parallel_replicate_degree r, data_parallel_shard_degree s (-1: the GPUs left over,
  so --gpus is needed), tensor/pipeline/context/expert_parallel_degree: dp = r·s; FSDP2 (zero 3) when
  s > 1 or cp > 1, HSDP (shard_group_size = s) when r > 1 too, DDP (zero 0) otherwise (parallel_dims.py);
  sequence parallelism with TP (torchtitan's TP plans shard the norms' sequence); pipeline_parallel_schedule
  (torch.distributed.pipelining's names, case-insensitive), pipeline_parallel_layers_per_stage (stages per
  rank; default 1, or 2 for a multi-stage schedule), the first/last stage one layer fewer
  (pipeline_parallel_first/last_stage_less_layers), fsdp_reshard_after_forward, enable_async_tensor_parallel;
- [training] local_batch_size (per DP rank per step), global_batch_size (-1: local x dp; more: gradient
  accumulation), seq_len, mixed_precision_param, dtype, enable_cpu_offload; with PP the micro-batch is
  pipeline_parallel_microbatch_size, without it the local batch;
- [activation_checkpoint] mode, [compile] enable / components (older: [training] compile), [optimizer]
  name and implementation.
"""
from __future__ import annotations

from ..cost.recompute import every_kth_layer
from ..errors import InputError
from ..spec.placement import torchtitan_split
from .fields import Fields, Report, prefixed
from .torchtitan_flavors import flavor_model

SCHEDULES = {"1f1b": "1f1b", "gpipe": "gpipe", "interleaved1f1b": "interleaved", "zbvzerobubble": "zb-v",
             "dualpipev": "dualpipev"}
NEAREST = {"loopedbfs": "interleaved", "interleavedzerobubble": "interleaved"}
CONVERTERS = ("float8", "mx")  # [model] converters parasim reads (or a registry name ending so: quantize.linear.mx)
MULTI_STAGE = ("interleaved", "zb-v", "dualpipev")
SECTIONS = {"model", "training", "parallelism", "activation_checkpoint", "compile", "optimizer", "float8", "quantize",
            "mx"}  # the job config's tables this importer reads
RESHARD = {"default": None, "always": "yes", "never": "no"}
IGNORED = ("job.", "profiling.", "metrics.", "lr_scheduler.", "checkpoint.", "comm.", "validation.", "debug.",
           "experimental.", "fault_tolerance.", "memory_estimation.", "training.dataset", "training.dataset_path",
           "training.steps", "training.max_norm", "training.gc_freq", "training.gc_debug", "training.seed",
           "training.deterministic", "training.dataloader.", "model.hf_assets_path", "model.tokenizer_path",
           "model.print_after_conversion", "optimizer.lr", "optimizer.beta1", "optimizer.beta2", "optimizer.eps",
           "optimizer.weight_decay", "float8.", "quantize.", "mx.", "compile.backend",
           "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns", "activation_checkpoint.preserve_rng_state",
           "activation_checkpoint.determinism_check", "activation_checkpoint.debug", "activation_checkpoint.early_stop",
           "parallelism.pipeline_parallel_schedule_csv", "parallelism.context_parallel_rotate_method",
           "parallelism.context_parallel_load_balancer")


def toml_fields(doc: dict, where: str) -> Fields:
    """`doc` flattened to "section.key" keys, shown as "[section] key"; a section torchtitan reads that is not a table
    is an error (its keys would otherwise fall back to defaults in silence)."""
    for section in sorted(SECTIONS & set(doc)):
        if not isinstance(doc[section], dict):
            raise InputError(f"{where}: {section} must be a table [{section}], got {doc[section]!r}")
    items = {}

    def walk(tree: dict, path: list[str]) -> None:
        for k, v in tree.items():
            if isinstance(v, dict):
                walk(v, path + [k])
            else:
                shown = f"[{'.'.join(path)}] {k}" if path else k
                items[".".join(path + [k])] = (shown, v)
    walk(doc, [])
    return Fields(items, where, typed=True, whole_floats=False)  # (TOML: 2.0 is no degree, as in a scenario)


def torchtitan_import(f: Fields, *, gpus: int | None, hardware: str, model: str | None,
                      source: str) -> tuple[dict, Report]:
    """(scenario document, report) of a torchtitan job config."""
    rep = Report()
    model_tbl, kernel, layers = _model(f, model, rep)
    deg = _degrees(f, gpus)
    layout = {k: deg[k] for k in ("tp", "pp", "cp", "ep")}
    layout["sequence_parallel"] = deg["tp"] > 1
    layout.update(_sharding(deg))
    training, mbs = _training(f, deg, rep)
    layout["micro_batch_size"] = mbs
    layout.update(_pipeline(f, layers, deg["pp"], rep))
    layout["recompute"], blocks = _recompute(f, rep, layers // (deg["pp"] * layout.get("vpp", 1)))
    if blocks:
        layout["recompute_layers"] = blocks
    stack = _stack(f, training, deg["tp"], rep)
    if kernel:
        stack["attention_kernel"] = kernel
        rep.assume(f"flavor {f.raw('model.flavor')}: the {kernel} attention kernel's efficiency tables")
    rep.leftovers(f, lambda key: prefixed(key, IGNORED))
    doc = {"name": source.rsplit("/", 1)[-1].rsplit(".", 1)[0],
           "description": f"imported from {source} (torchtitan job config) by parasim import torchtitan",
           "model": model_tbl, "hardware": {"preset": hardware, "num_gpus": deg["gpus"]}, "training": training,
           "layout": layout, "stack": stack}
    return doc, rep


def _model(f: Fields, model: str | None, rep: Report) -> tuple[dict, str | None, int]:
    from ..spec.hf import model_from_hf
    from ..spec.load import load_model

    name, flavor = f.text("model.name", "llama3"), f.text("model.flavor", "debugmodel")
    if model is not None:
        rep.assume(f"the model is {model} (--model), not {name} {flavor}")
        return {"hf_config" if model.endswith(".json") else "preset": model}, None, load_model(model).num_layers
    table, kernel = flavor_model(name, flavor, f.where)
    spec = load_model(table["preset"]) if "preset" in table else model_from_hf(table, strict=True)
    rep.assume(f"model {name} {flavor}: " + (f"parasim's {table['preset']} preset (the same shapes)" if "preset" in table
                                             else "inline Hugging Face keys of torchtitan's model args"))
    return table, kernel, spec.num_layers


def _degrees(f: Fields, gpus: int | None) -> dict:
    p = "parallelism."
    d = {k: f.int(p + key, 1) for k, key in (("r", "data_parallel_replicate_degree"), ("tp", "tensor_parallel_degree"),
                                             ("pp", "pipeline_parallel_degree"), ("cp", "context_parallel_degree"),
                                             ("ep", "expert_parallel_degree"))}
    s = f.int(p + "data_parallel_shard_degree", -1, least=-1)
    fixed = d["r"] * d["tp"] * d["pp"] * d["cp"]
    if s == 0 or s < -1:
        raise f.error(p + "data_parallel_shard_degree", f"must be -1 or >= 1, got {s}")
    if s == -1:
        if gpus is None:
            raise f.error(p + "data_parallel_shard_degree", "= -1 takes the GPUs left over: give --gpus N "
                                                            "(torchtitan's NGPU)")
        if gpus % fixed:
            raise f.error(p + "data_parallel_shard_degree", f"= -1: {gpus} GPUs are not divisible by the other "
                                                            f"degrees' product {fixed}")
        s = gpus // fixed
    elif gpus is not None and gpus != s * fixed:
        raise InputError(f"{f.where}: --gpus {gpus} but the degrees multiply to {s * fixed}")
    etp = f.int(p + "expert_tensor_parallel_degree", 1)
    return {**d, "s": s, "dp": d["r"] * s, "gpus": s * fixed, "etp": etp}


def _sharding(deg: dict) -> dict:
    if deg["s"] > 1 or deg["cp"] > 1:
        out = {"zero": 3}
        if deg["r"] > 1 and deg["s"] > 1:
            out["shard_group_size"] = deg["s"]
        return out
    return {"zero": 0}


def _training(f: Fields, deg: dict, rep: Report) -> tuple[dict, int]:
    """([training] table, micro-batch size)."""
    t = "training."
    local_key = t + "local_batch_size" if f.has(t + "local_batch_size") or not f.has(t + "batch_size") else t + "batch_size"
    if not f.has(local_key):
        rep.assume("[training] local_batch_size: torchtitan's default 8")
    local = f.int(local_key, 8)
    gbs = f.int(t + "global_batch_size", -1, least=-1)
    gbs = local * deg["dp"] if gbs in (-1, 0) else gbs
    if gbs % (local * deg["dp"]):
        raise f.error(t + "global_batch_size", f"{gbs} is not a multiple of local_batch_size {local} x dp {deg['dp']}")
    mbs = f.int("parallelism.pipeline_parallel_microbatch_size", 1) if deg["pp"] > 1 else local
    if deg["pp"] > 1 and local % mbs:
        raise f.error("parallelism.pipeline_parallel_microbatch_size", f"{mbs} does not divide local_batch_size {local}")
    if deg["pp"] > 1 and gbs > local * deg["dp"]:
        rep.assume(f"gradient accumulation with PP: torchtitan runs the pipeline {gbs // (local * deg['dp'])} times "
                   f"per step; parasim replays one pipeline of all {gbs // (mbs * deg['dp'])} micro-batches")
    if not f.has(t + "seq_len"):
        rep.assume("[training] seq_len: torchtitan's default 2048")
    tr = {"seq_length": f.int(t + "seq_len", 2048), "global_batch_size": gbs}
    param = f.text(t + "mixed_precision_param", "bfloat16", choices=("bfloat16", "float32"))
    tr["precision"] = "bf16" if param == "bfloat16" else "fp32"
    conv = f.raw("model.converters") or []
    conv = [c.strip() for x in ([conv] if isinstance(conv, str) else conv) for c in str(x).split(",")]
    for c in conv:
        if not c.endswith(CONVERTERS):  # (torchtitan refuses a name its registry lacks)
            rep.unknown_value(f, "model.converters", c, CONVERTERS)
    if any(c.endswith(CONVERTERS) for c in conv):
        tr["precision"] = "fp8"
    if f.text(t + "dtype", "float32", choices=("bfloat16", "float32")) == "bfloat16":
        tr.update(master_weights=False, optimizer_dtype="bf16", grad_dtype="bf16")
        rep.assume("[training] dtype = bfloat16: parameters, gradients and optimizer states in bf16, no fp32 copy")
    if f.flag(t + "enable_cpu_offload"):
        tr.update(offload_optimizer=True, offload_params=True)
    name = f.text("optimizer.name", "AdamW")
    tr["optimizer"] = {"adamw": "adamw", "adam": "adam"}.get(name.lower(), "adamw")
    if name.lower() not in ("adamw", "adam"):
        rep.cannot(f"[optimizer] name = {name!r}: counted as AdamW")
    return tr, mbs


def _pipeline(f: Fields, layers: int, pp: int, rep: Report) -> dict:
    p = "parallelism."
    name = f.text(p + "pipeline_parallel_schedule", "1F1B")
    sched = SCHEDULES.get(name.lower()) or NEAREST.get(name.lower())
    if sched is None:
        raise f.error(p + "pipeline_parallel_schedule", f"{name!r} is not a torch.distributed.pipelining schedule "
                                                         f"parasim knows ({', '.join(SCHEDULES)})")
    if name.lower() in NEAREST:
        rep.cannot(f"[parallelism] pipeline_parallel_schedule = {name!r}: replayed as parasim's {sched}")
    first = f.int(p + "pipeline_parallel_first_stage_less_layers", 1, least=0)
    last = f.int(p + "pipeline_parallel_last_stage_less_layers", 1, least=0)
    per_stage = f.int(p + "pipeline_parallel_layers_per_stage")
    for key in ("pipeline_parallel_split_points", "module_fqns_per_model_part"):
        if f.raw(p + key):
            rep.cannot(f"[parallelism] {key}: a hand-made split; torchtitan's default split used")
    if pp == 1:
        return {"schedule": "1f1b"}
    stages = -(-(layers + first + last) // per_stage) if per_stage else pp * (2 if sched in MULTI_STAGE else 1)
    if stages % pp:
        raise f.error(p + "pipeline_parallel_layers_per_stage", f"gives {stages} stages, not a multiple of pp {pp}")
    chunks = stages // pp
    if (chunks > 1) != (sched in MULTI_STAGE):
        raise f.error(p + "pipeline_parallel_schedule", f"{name} with {chunks} stage(s) per rank: torchtitan runs a "
                                                         f"single-stage schedule with 1, a multi-stage one with 2 or more")
    out = {"schedule": sched}
    if sched in ("zb-v", "dualpipev") and chunks != 2:
        raise f.error(p + "pipeline_parallel_schedule", f"{name} needs 2 stages per rank, got {chunks}")
    if sched == "interleaved":
        out["vpp"] = chunks
    split = torchtitan_split(layers, stages, first, last)
    return {**out, **_split_fields(split, layers, pp, chunks, rep)}


def _split_fields(split: tuple, layers: int, pp: int, chunks: int, rep: Report) -> dict:
    """torchtitan's split as layout fields: uneven per rank (one stage per rank), Megatron's accounted split
    when it is the same, else one entry per virtual stage (a split with an empty stage: parasim's even split,
    with a note)."""
    from ..spec.placement import megatron_split

    if len(set(split)) == 1:
        return {}
    if chunks == 1:
        return {"layers_per_stage": list(split)}
    try:
        same = megatron_split(layers, pp, chunks, embedding=True, loss=True) == split
    except InputError:
        same = False
    if same:
        return {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}
    if min(split) >= 1:
        return {"layers_per_stage": list(split)}
    rep.cannot(f"torchtitan's split {','.join(map(str, split))} over virtual stages leaves a stage without layers: "
               "parasim's even split used")
    return {}


def _recompute(f: Fields, rep: Report, stage_layers: int) -> tuple[str, int]:
    """(recompute mode, recompute_layers) of [activation_checkpoint]: op-level selective AC is 'op', the
    layer-level one (every k-th block) full recompute of ⌊L/k⌋ layers per stage (cost/recompute.py
    every_kth_layer)."""
    a = "activation_checkpoint."
    if not f.has(a + "mode"):
        rep.assume("[activation_checkpoint] mode: torchtitan's default 'selective'")
    mode = f.text(a + "mode", "selective", choices=("none", "selective", "full", "memory_budget"))
    option = str(f.raw(a + "selective_ac_option", "2"))
    if mode == "memory_budget":
        f.take(a + "memory_budget")
        rep.cannot("[activation_checkpoint] mode = 'memory_budget': counted as full recompute")
        return "full", 0
    if mode == "selective" and option == "op":
        return "op", 0
    if mode == "selective":
        if not option.strip().isdigit() or int(option) < 1:
            raise f.error(a + "selective_ac_option", "is neither 'op' nor a positive layer count")
        k = int(option)
        n = every_kth_layer(stage_layers, k)
        if k == 1 or n >= stage_layers:
            return "full", 0
        if n == 0:
            rep.assume(f"[activation_checkpoint] selective_ac_option = {k}: more than the stage's {stage_layers} "
                       f"layers, none recomputed")
            return "none", 0
        rep.assume(f"[activation_checkpoint] selective_ac_option = {k}: every {k}th layer, {n} of each stage's "
                   f"{stage_layers} fully recomputed (recompute_layers {n})")
        return "full", n
    return mode, 0


def _stack(f: Fields, training: dict, tp: int, rep: Report) -> dict:
    st = {"preset": "torchtitan"}
    c = "compile."
    if f.has(c + "enable"):
        compiled = f.flag(c + "enable") and "model" in [str(x) for x in (f.raw(c + "components") or ["model"])]
    else:
        compiled = f.flag("training.compile")
    st["compiled"] = compiled
    impl = f.text("optimizer.implementation", "fused", choices=("for-loop", "foreach", "fused"))
    st["optimizer_impl"] = impl
    reshard = RESHARD[f.text("parallelism.fsdp_reshard_after_forward", "default", choices=tuple(RESHARD))]
    if reshard:
        st["fsdp_reshard_after_forward"] = reshard
    reduce = f.text("training.mixed_precision_reduce", "float32", choices=("float32", "bfloat16"))
    st["fsdp_reduce_dtype"] = "fp32" if reduce == "float32" else "bf16"
    if f.flag("parallelism.enable_async_tensor_parallel") and tp > 1:
        if compiled:
            st["tp_comm_overlap"] = True
        else:
            rep.assume("enable_async_tensor_parallel without compile: torchtitan leaves it off")
    if training["precision"] == "fp8" and any(str(c).endswith("mx") for c in (f.raw("model.converters") or [])):
        st["fp8_recipe"] = "mxfp8"
    if tp > 1 and not f.flag("parallelism.disable_loss_parallel"):
        rep.assume("loss parallel (on with TP): the torchtitan stack's torch-fp32 loss accounting kept")
    return st
