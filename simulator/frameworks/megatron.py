"""A Megatron-LM command line or NeMo config (read by frameworks/megatron_args.py) as a parasim scenario.

The arguments and their defaults are Megatron-LM's (NVIDIA/Megatron-LM d98e8a6 (2026-08-22):
megatron/training/arguments.py validate_args, megatron/core/model_parallel_config.py,
megatron/core/transformer/transformer_config.py, megatron/core/distributed/distributed_data_parallel_config.py):
- layout: `--tensor-/--pipeline-model-parallel-size`, `--context-parallel-size`,
  `--expert-model-parallel-size`; dp = world size / (tp·pp·cp); `--sequence-parallel` (switched off by
  Megatron when tp = 1); interleaving from `--num-layers-per-virtual-pipeline-stage` ((L [+1 +1]) / pp /
  that) or `--num-virtual-stages-per-pipeline-rank` (NeMo: `virtual_pipeline_model_parallel_size`);
  `--decoder-first/last-pipeline-num-layers` and `--account-for-embedding/loss-in-pipeline-split` as the
  pipeline split; ZeRO 1 = `--use-distributed-optimizer`, 2/3 = Megatron-FSDP's
  `--data-parallel-sharding-strategy optim_grads / optim_grads_params` (default), 3 = `--use-torch-fsdp2`;
  `--num-distributed-optimizer-instances` k: shards of dp / k (HSDP); `--recompute-granularity`
  (`--recompute-activations` = selective; full with `--recompute-method block --recompute-num-layers N`:
  Layout.recompute_layers N, with `uniform` N: Layout.recompute_group N); `--cp-comm-type` p2p = ring,
  a2a = Ulysses;
- training: `--seq-length`, `--global-batch-size` (default micro x dp), `--bf16` / `--fp16` / `--fp8-format`,
  `--optimizer`, fp32 gradients unless `--grad-reduce-in-bf16`, `--optimizer-cpu-offload`;
- stack `megatron` with: `--tp-comm-overlap`, `--moe-shared-expert-overlap`, `--overlap-moe-expert-parallel-comm`,
  `--delay-wgrad-compute`, `--fp8-recipe`, `--attention-backend`; the gradient bucket: `--ddp-bucket-size`
  parameters (default max(40M, 1M x dp), training.py) x the gradient's bytes with `--overlap-grad-reduce`;
  without it Megatron reduces after the backward: one bucket (dp_bucket_mb 1e6).
The model: frameworks/megatron_model.py.
"""
from __future__ import annotations

from ..errors import InputError
from .fields import Fields, Report, prefixed
from .megatron_layout import pipeline_fields
from .megatron_model import megatron_model

SHARDING = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
FP8_RECIPES = {"delayed": "delayed", "tensorwise": "current", "mxfp8": "mxfp8", "blockwise": "blockwise"}
ATTENTION_BACKENDS = ("flash", "fused", "unfused", "local", "auto")  # Megatron-Core's AttnBackend
CP_COMM = {"p2p": "ring", "a2a": "ulysses"}
# arguments (dests, and prefixes ending in _ or .) that change neither memory nor step time
IGNORED = (
    "lr", "lr_", "min_lr", "weight_decay", "start_weight_decay", "end_weight_decay", "weight_decay_incr_style",
    "adam_", "clip_grad", "init_method_", "seed", "train_iters", "train_samples", "eval_", "exit_", "log_",
    "tensorboard_", "wandb_", "save", "save_", "load", "no_load_", "pretrained_checkpoint", "ckpt_", "dist_ckpt_",
    "async_save", "use_dist_ckpt", "data_path", "train_data_path", "valid_data_path", "test_data_path", "split",
    "data_cache_path", "mock_data", "vocab_file", "merge_file", "num_workers", "dataloader_type",
    "distributed_backend", "distributed_timeout_minutes", "use_mcore_models", "transformer_impl", "spec",
    "rotary_base", "rotary_percent", "rope_scaling_factor", "use_rope_scaling", "rotary_seq_len_interpolation_factor",
    "norm_epsilon", "layernorm_epsilon", "attention_softmax_in_fp32", "no_masked_softmax_fusion", "no_bias_",
    "no_rope_fusion", "apply_query_key_layer_scaling", "timing_log_",
    "profile", "profile_", "use_pytorch_profiler", "manual_gc", "manual_gc_", "check_for_", "calculate_per_token_loss",
    "eod_mask_loss", "reset_position_ids", "reset_attention_mask", "no_create_attention_mask_in_dataloader",
    "num_dataset_builder_threads", "object_storage_cache_path", "use_cpu_initialization", "override_opt_param_scheduler",
    "use_checkpoint_opt_param_scheduler", "loss_scale", "initial_loss_scale", "min_loss_scale", "loss_scale_window",
    "hysteresis", "deterministic_mode", "straggler_", "enable_one_logger", "one_logger_", "no_persist_layer_norm",
    "use_checkpoint_args", "finetune", "moe_router_load_balancing_type", "moe_aux_loss_coeff", "moe_z_loss_coeff",
    "moe_router_score_function", "moe_router_pre_softmax", "moe_router_dtype", "moe_token_dispatcher_type",
    # RoPE scaling (YaRN), loss weights, checks, logging and checkpoint formats: neither memory nor step time;
    # --moe-router-force-load-balancing routes uniformly, parasim's default (moe_imbalance 1)
    "rotary_scaling_factor", "mscale", "mscale_all_dim", "mtp_loss_scaling_factor",
    "no_check_for_nan_in_loss_and_grad",
    "no_mmap_bin_files", "auto_detect_ckpt_format", "logging_level", "enable_experimental",
    "init_model_with_meta_device", "moe_router_force_load_balancing",
    "moe_grouped_gemm", "moe_permute_fusion", "moe_router_enable_expert_bias", "moe_router_bias_update_rate",
    "moe_router_topk_scaling_factor", "moe_router_num_groups", "moe_router_group_topk", "moe_enable_deepep",
    "bf16_", "accumulate_allreduce_grads_in_fp32", "node_rank", "master_addr", "master_port", "rdzv_",
    "standalone", "max_restarts", "monitor_interval", "start_method", "role", "log_dir", "redirects", "tee",
    "fp16_lm_cross_entropy",
    # NeMo (the YAML's trees other than the model's sizes and parallelism)
    "name", "restore_from_path", "exp_manager.", "trainer.", "data.", "optim.", "nsys_profile.", "tokenizer.",
    "mcore_gpt", "init_method_std", "use_scaled_init_method", "ffn_dropout", "headscale", "transformer_block_type",
    "openai_gelu", "normalize_attention_scores", "rotary_percentage", "attention_type", "overlap_p2p_comm",
    "batch_p2p_comm", "native_amp_", "fp32_residual_connection", "megatron_amp_O2", "grad_allreduce_chunk_size_mb",
    "grad_div_ar_fusion", "gradient_accumulation_fusion", "bias_activation_fusion", "bias_dropout_add_fusion",
    "masked_softmax_fusion", "get_attention_mask_from_fusion", "resume_from_checkpoint", "onnx_safe",
    "apex_transformer_log_level", "gradient_as_bucket_view", "sync_batch_comm", "pre_process", "post_process",
    "persist_layer_norm", "do_layer_norm_weight_decay", "transformer_engine", "fp8_margin", "fp8_interval",
    "fp8_amax_", "reduce_amax", "use_emha", "model.data.", "model.nsys_profile.", "model.optim.",
    "model.tokenizer.", "fp32",
)


def megatron_import(f: Fields, *, gpus: int | None, hardware: str, model: str | None, vocab_size: int | None,
                    source: str, kind: str) -> tuple[dict, Report]:
    """(scenario document, report) of the Megatron arguments `f` (`kind`: "Megatron-LM command line" or
    "NeMo config"); `gpus` the world size (--gpus, torchrun's or NeMo's trainer), `model` a preset or
    config.json replacing the arguments' model."""
    rep = Report()
    gpus = _world(f, gpus)
    seq = f.int("seq_length")
    if seq is None:
        raise InputError(f"{f.where}: --seq-length is missing (the training sequence length)")
    tp = f.int("tensor_model_parallel_size", 1)
    model_tbl, layers = _model(f, tp, seq, rep, model, vocab_size)
    layout, dp = megatron_layout(f, gpus, layers, rep)
    training = _training(f, dp, layout["micro_batch_size"], seq, rep)
    stack = _stack(f, dp, training, rep)
    rep.leftovers(f, lambda key: prefixed(key, IGNORED))
    doc = {"name": source.rsplit("/", 1)[-1].rsplit(".", 1)[0],
           "description": f"imported from {source} ({kind}) by parasim import megatron",
           "model": model_tbl, "hardware": {"preset": hardware, "num_gpus": gpus}, "training": training,
           "layout": layout, "stack": stack}
    return doc, rep


def _world(f: Fields, gpus: int | None) -> int:
    given = f.int("world_size")
    if gpus is not None and given is not None and gpus != given:
        raise InputError(f"{f.where}: --gpus {gpus} but {f.name('world_size')} = {given}")
    gpus = gpus or given
    if gpus is None:
        raise InputError(f"{f.where}: the GPU count is not in the arguments (no torchrun --nnodes/--nproc-per-node); "
                         f"give --gpus N")
    return gpus


def _model(f: Fields, tp: int, seq: int, rep: Report, model: str | None, vocab_size) -> tuple[dict, int]:
    """([model] table, layers): the arguments' model, or `model` (a preset or config.json) instead; with
    --mtp-num-layers, the multi-token-prediction modules it trains (mtp_layers)."""
    mtp = f.int("mtp_num_layers")
    if model is None:
        table = megatron_model(f, tp, seq, rep, vocab_size)
        layers = table["num_hidden_layers"]
    else:
        from ..spec.load import load_model

        layers = load_model(model).num_layers
        f.take(*[k for k in f.items if k in _MODEL_KEYS or k.startswith(("moe_", "num_experts"))])
        rep.assume(f"the model is {model} (--model); the arguments' model sizes were not used")
        table = {"hf_config" if model.endswith(".json") else "preset": model}
    if mtp:
        table["mtp_layers"] = mtp
    return table, layers


_MODEL_KEYS = ("num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "group_query_attention",
               "ffn_hidden_size", "kv_channels", "swiglu", "normalization", "disable_bias_linear", "add_qkv_bias",
               "untie_embeddings_and_output_weights", "vocab_size", "make_vocab_size_divisible_by",
               "hidden_dropout", "attention_dropout", "position_embedding_type", "max_position_embeddings",
               "use_rotary_position_embeddings", "qk_layernorm", "multi_latent_attention", "q_lora_rank",
               "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim", "tokenizer_type", "tokenizer_model")


def megatron_layout(f: Fields, gpus: int, layers: int, rep: Report) -> tuple[dict, int]:
    """([layout] table, dp) of the parallel arguments."""
    tp, pp = f.int("tensor_model_parallel_size", 1), f.int("pipeline_model_parallel_size", 1)
    cp, ep = f.int("context_parallel_size", 1), f.int("expert_model_parallel_size", 1)
    if gpus % (tp * pp * cp):
        raise InputError(f"{f.where}: {gpus} GPUs are not divisible by tensor({tp}) x pipeline({pp}) x "
                         f"context({cp}) parallel sizes")
    dp = gpus // (tp * pp * cp)
    etp = f.int("expert_tensor_parallel_size")
    if not f.has("micro_batch_size"):
        rep.assume("--micro-batch-size: 1")
    lay = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "micro_batch_size": f.int("micro_batch_size", 1)}
    if etp is not None and etp != tp:  # (Layout: etp·ep must divide tp·cp·dp; validate: SP with tp > 1)
        lay["etp"] = etp
    sp = f.flag("sequence_parallel")
    if sp and tp == 1:
        rep.assume("--sequence-parallel with tp 1: Megatron switches it off")
    lay["sequence_parallel"] = sp and tp > 1
    lay.update(pipeline_fields(f, layers, pp, rep))
    lay.update(_sharding(f, dp, rep))
    lay["recompute"], blocks, group = _recompute(f, rep)
    if blocks:
        lay["recompute_layers"] = blocks
    if group > 1:
        lay["recompute_group"] = group
    comm = f.raw("cp_comm_type")
    if comm is not None:
        kinds = set(comm if isinstance(comm, list) else [comm])
        if len(kinds) != 1 or next(iter(kinds)) not in CP_COMM:
            rep.cannot(f"{f.name('cp_comm_type')} {' '.join(map(str, comm if isinstance(comm, list) else [comm]))}: "
                       f"parasim models p2p (ring) or a2a (Ulysses) for every layer; ring used")
        else:
            lay["cp_algorithm"] = CP_COMM[next(iter(kinds))]
    return lay, dp


def _sharding(f: Fields, dp: int, rep: Report) -> dict:
    """ZeRO stage and the HSDP shard group."""
    if f.flag("use_torch_fsdp2"):
        zero = 3
    elif f.flag("use_megatron_fsdp") or f.flag("use_custom_fsdp"):
        zero = SHARDING[f.text("data_parallel_sharding_strategy", "optim_grads_params", choices=tuple(SHARDING))]
        f.take("use_distributed_optimizer")  # (Megatron-FSDP's examples pass it too: the strategy sets the sharding)
        if f.flag("fsdp_double_buffer"):
            rep.assume(f"{f.name('fsdp_double_buffer')}: persistent buffers for two units' gathers, as parasim's "
                       f"FSDP prefetch of one unit holds them")
        if f.flag("use_nccl_ub"):
            rep.cannot(f"{f.name('use_nccl_ub')}: NCCL user-buffer registration (fewer copies and SMs per "
                       f"collective) is not modelled; the collectives are timed as without it")
    else:
        zero = 1 if f.flag("use_distributed_optimizer") else 0
        if f.has("data_parallel_sharding_strategy"):
            f.take("data_parallel_sharding_strategy")
            rep.assume(f"{f.name('data_parallel_sharding_strategy')}: no effect without --use-megatron-fsdp")
    out = {"zero": zero}
    inst = f.int("num_distributed_optimizer_instances", 1)
    if inst > 1:
        if dp % inst:
            raise f.error("num_distributed_optimizer_instances", f"{inst} does not divide dp ({dp})")
        if zero:
            out["shard_group_size"] = dp // inst
        else:
            rep.assume(f"{f.name('num_distributed_optimizer_instances')}: no effect without a sharded optimizer")
    return out


def _recompute(f: Fields, rep: Report) -> tuple[str, int, int]:
    """(recompute mode, recompute_layers, recompute_group): `--recompute-method block --recompute-num-layers N`
    recomputes the first N layers of each stage (Layout.recompute_layers); `uniform` with N keeps a checkpoint every
    N layers (Layout.recompute_group)."""
    method, n = f.text("recompute_method"), f.int("recompute_num_layers")
    if f.flag("recompute_activations"):
        return "selective", 0, 1
    g = f.text("recompute_granularity", None, choices=("full", "selective"))
    if g == "full" and method == "block":
        return g, n or 0, 1
    if g == "full":
        return g, 0, n or 1
    return g or "none", 0, 1


def _training(f: Fields, dp: int, mbs: int, seq: int, rep: Report) -> dict:
    gbs = f.int("global_batch_size")
    if gbs is None:
        gbs = mbs * dp
        rep.assume(f"--global-batch-size: Megatron's default micro-batch x dp = {gbs}")
    if f.has("rampup_batch_size"):
        f.take("rampup_batch_size")
        rep.cannot(f"{f.name('rampup_batch_size')}: the batch ramp-up; the final global batch used")
    tr = {"seq_length": seq, "global_batch_size": gbs, "precision": _precision(f, rep)}
    tr.update(_optimizer(f, rep))
    grads16 = f.flag("grad_reduce_in_bf16") or f.text("main_grads_dtype", "fp32", choices=("fp32", "bf16")) == "bf16"
    tr["grad_dtype"] = "bf16" if grads16 else "fp32"
    fsdp_grads = f.text("megatron_fsdp_main_grads_dtype", "auto", choices=("fp32", "bf16", "fp16", "auto"))
    if fsdp_grads != "auto":  # Megatron-FSDP's main gradient buffer (it replaces --main-grads-dtype there)
        tr["grad_dtype"] = fsdp_grads
    elif f.flag("use_megatron_fsdp") or f.flag("use_custom_fsdp"):  # auto: the model's compute dtype
        tr["grad_dtype"] = {"fp16": "fp16", "fp32": "fp32"}.get(tr["precision"], "bf16")
        rep.assume(f"Megatron-FSDP's main gradients in the model's dtype, {tr['grad_dtype']} (--megatron-fsdp-main-"
                   f"grads-dtype auto: DistributedDataParallelConfig.megatron_fsdp_main_grads_dtype None)")
    factor = f.float("moe_expert_capacity_factor")
    if factor:
        tr["moe_capacity_factor"] = factor
    if f.text("attention_backend", "auto") in ("unfused", "local"):
        tr["flash_attention"] = False
    return tr


def _precision(f: Fields, rep: Report) -> str:
    fmt = f.text("fp8_format")
    bf16, fp16 = f.flag("bf16"), f.flag("fp16")
    f.take("fp32")
    if fmt is not None:
        if fmt not in ("hybrid", "e4m3"):
            raise f.error("fp8_format", f"must be hybrid or e4m3, got {fmt!r}")
        return "fp8"
    if not (bf16 or fp16):
        rep.assume("precision fp32: neither --bf16 nor --fp16")
    return "bf16" if bf16 else "fp16" if fp16 else "fp32"


def _optimizer(f: Fields, rep: Report) -> dict:
    name = f.text("optimizer", "adam")
    if name not in ("adam", "sgd"):
        rep.cannot(f"{f.name('optimizer')} {name}: counted as Adam")
    out = {"optimizer": "adam"}
    if name == "sgd":
        out["optimizer"] = "sgd-momentum" if f.float("sgd_momentum", 0.9) > 0 else "sgd"
    if f.flag("use_precision_aware_optimizer"):
        avg, sq = f.text("exp_avg_dtype", "fp32"), f.text("exp_avg_sq_dtype", "fp32")
        if avg == sq and avg in ("fp32", "bf16", "fp16"):
            out["optimizer_dtype"] = avg
        else:
            rep.cannot(f"--exp-avg-dtype {avg} --exp-avg-sq-dtype {sq}: parasim has one optimizer-state dtype; fp32 used")
        if f.text("main_params_dtype", "fp32") != "fp32":
            rep.cannot("--main-params-dtype fp16: parasim's master copy is fp32")
    if f.flag("optimizer_cpu_offload"):
        out["offload_optimizer"] = True
        frac = f.float("optimizer_offload_fraction", 1.0)
        if frac < 1:
            rep.cannot(f"--optimizer-offload-fraction {frac:g}: parasim offloads all the optimizer states")
    return out


GRAPH_MODULES = ("attn", "moe_router", "moe_preprocess")  # the Stack's cuda_graphs scopes Megatron-Core names so


def _cuda_graphs(f: Fields, rep: Report) -> list[str] | None:
    """The stack's cuda_graphs from `--cuda-graph-impl` and `--cuda-graph-modules` (`--cuda-graph-scope` before
    it, NeMo's cuda_graph_scope): transformer_engine graphs the named modules, local and full_iteration every layer
    whole ("layer"; full_iteration also the rest of the step, not modelled apart); None without graphs."""
    impl = f.text("cuda_graph_impl", "none", choices=("none", "local", "transformer_engine", "full_iteration"))
    raw = f.raw("cuda_graph_modules") if f.has("cuda_graph_modules") else f.raw("cuda_graph_scope")
    items = raw if isinstance(raw, list) else str(raw or "").replace(",", " ").split()
    if impl == "none":
        return None
    if impl in ("local", "full_iteration"):
        if impl == "full_iteration":
            rep.assume(f"{f.name('cuda_graph_impl')} full_iteration: every layer one graph launch each way (the "
                       "rest of the step's launches are not modelled)")
        return ["layer"]
    kept = [m for m in items if m in GRAPH_MODULES]
    if len(kept) < len(items):
        rep.cannot(f"CUDA graphs of {', '.join(m for m in items if m not in GRAPH_MODULES)}: parasim counts the "
                   f"launches of {', '.join(GRAPH_MODULES)} graphs only")
    return kept


def _stack(f: Fields, dp: int, training: dict, rep: Report) -> dict:
    st = {"preset": "megatron"}
    if f.flag("tp_comm_overlap"):
        st["tp_comm_overlap"] = True
    for dest, key in (("moe_shared_expert_overlap", "moe_shared_expert_overlap"),  # (cost/moe_overlap.py)
                      ("overlap_moe_expert_parallel_comm", "moe_a2a_overlap"),
                      ("delay_wgrad_compute", "moe_delay_wgrad"),
                      ("activation_func_fp8_input_store", "activation_input_fp8")):  # (memory/activations.py)
        if f.flag(dest):
            st[key] = True
    if f.flag("no_gradient_accumulation_fusion"):  # main_grad += the new gradient, a pass of its own
        st["grad_accumulation"] = "autograd"
    comm = f.text("megatron_fsdp_grad_comm_dtype", "auto", choices=("fp32", "bf16", "fp16", "auto"))
    if comm != "auto":  # Megatron-FSDP's gradient reduce-scatter dtype (fp16 moves as many bytes as bf16)
        st["fsdp_reduce_dtype"] = "fp32" if comm == "fp32" else "bf16"
    if f.peek("moe_token_dispatcher_type") in ("flex", ["flex"]):  # (alltoall, allgather: ignored, listed so)
        f.take("moe_token_dispatcher_type")
        backend = f.text("moe_flex_dispatcher_backend", "deepep")
        st["moe_dispatcher"] = "flex"
        rep.assume(f"{f.name('moe_token_dispatcher_type')} flex ({backend}): each token sent once per destination "
                   f"node, then forwarded over NVLink (cost/ep_dispatch.py)")
    graphs = _cuda_graphs(f, rep)
    if graphs is not None:
        st["cuda_graphs"] = graphs
    modules = f.raw("recompute_modules")  # (a list on the command line and in YAML; a comma text also passes)
    if modules is not None:
        items = modules if isinstance(modules, list) else str(modules).replace(",", " ").split()
        if not all(isinstance(m, str) for m in items):
            raise f.error("recompute_modules", f"must be module names, got {modules!r}")
        st["recompute_modules"] = [m for m in items if m]
    recipe = f.text("fp8_recipe")
    if recipe is not None and training["precision"] == "fp8":
        if recipe in FP8_RECIPES:
            st["fp8_recipe"] = FP8_RECIPES[recipe]
        else:
            rep.cannot(f"{f.name('fp8_recipe')} {recipe}: parasim models delayed, tensorwise (current), mxfp8 "
                       "and blockwise")
    backend, legacy_flash = f.text("attention_backend", "auto"), f.flag("use_flash_attn")
    if backend not in ATTENTION_BACKENDS:  # (Megatron's argparse refuses it: the default kernel is kept)
        rep.unknown_value(f, "attention_backend", backend, ATTENTION_BACKENDS)
    if backend == "flash" or (legacy_flash and backend == "auto"):
        st["attention_kernel"] = "flash2"
        rep.assume("attention backend flash: FlashAttention-2's efficiency tables")
    elif backend == "fused":
        st["attention_kernel"] = "cudnn"
    grad_bytes = 2 if training["grad_dtype"] == "bf16" else 4
    overlap = f.flag("overlap_grad_reduce")
    if overlap and f.has("bucket_cap_mb"):
        st["dp_bucket_mb"] = f.float("bucket_cap_mb")
    elif overlap:
        size = f.int("ddp_bucket_size")
        if size is None:
            size = max(40_000_000, 1_000_000 * dp)
            rep.assume(f"--ddp-bucket-size: Megatron's default max(40M, 1M x dp) = {size:,} parameters")
        st["dp_bucket_mb"] = size * grad_bytes / 1e6
    else:
        f.take("bucket_cap_mb")
        f.take("ddp_bucket_size")
        st["dp_bucket_mb"] = 1e6
        rep.assume("no --overlap-grad-reduce: gradients reduced after the backward, one bucket (dp_bucket_mb = 1e6)")
    if f.flag("grad_reduce_in_bf16"):
        st["fsdp_reduce_dtype"] = "bf16"
    if f.flag("overlap_param_gather"):
        rep.assume("--overlap-param-gather: an estimate option, not a scenario key: run "
                   "`parasim estimate --param-gather-overlap`")
    return st
