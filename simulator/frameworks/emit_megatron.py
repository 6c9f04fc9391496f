"""A parasim layout (and, on request, its model) as Megatron-LM's command line.

The inverse of frameworks/megatron.py, with the same argument names and defaults (NVIDIA/Megatron-LM
d98e8a6 (2026-08-22) megatron/training/arguments.py): a torchrun launch line for the GPU count, then one
flag per line. Only what Megatron has is written; what it cannot express (a schedule other than 1F1B or
interleaved, a pipeline split that is neither Megatron's first/last nor its accounted split, ZeRO-3
parameter offload, ...) is returned as notes naming it.
"""
from __future__ import annotations

from ..errors import InputError
from ..schedules import family
from ..spec.placement import megatron_split
from ..spec.rules import DEFAULT_RECOMPUTE_MODULES
from .megatron_layout import layout_text

LAYOUT_FLAG = "--pipeline-model-parallel-layout"

RECIPES = {"delayed": "delayed", "current": "tensorwise", "mxfp8": "mxfp8", "blockwise": "blockwise"}


def effective_split(layout, num_layers: int) -> tuple[int, ...]:
    """The layers of each (virtual) stage parasim runs: the layout's split, else even."""
    stages = family(layout.schedule).num_stages(layout.pp, layout.vpp)
    if layout.layers_per_stage:
        return tuple(layout.layers_per_stage)
    return tuple([num_layers // stages] * stages)


def rank_totals(split, pp: int) -> tuple[int, ...]:
    """Layers per pipeline rank of a split per virtual stage (interleaved: stage s on rank s mod pp)."""
    return tuple(sum(split[r::pp]) for r in range(pp))


def emit_megatron(sc, layout, *, with_model: bool = False) -> tuple[str, list[str]]:
    """(launch script text, notes on what Megatron-LM cannot express)."""
    flags: list[tuple[str, object]] = []
    notes: list[str] = []
    if with_model:
        flags += _model_flags(sc, notes)
    flags += _layout_flags(sc, layout, notes)
    flags += _training_flags(sc, layout, notes)
    if sc.model.mtp_layers:  # (a training choice in Megatron-LM: emitted with or without the model's sizes)
        flags.append(("--mtp-num-layers", sc.model.mtp_layers))
    per = sc.hardware.gpus_per_node
    nodes, rest = divmod(sc.num_gpus, per)
    launch = (f"torchrun --nnodes {nodes} --nproc-per-node {per} pretrain_gpt.py" if not rest and nodes
              else f"torchrun --nnodes 1 --nproc-per-node {sc.num_gpus} pretrain_gpt.py")
    body = [launch] + [f"    {flag}" + ("" if v is None else f" {v}") for flag, v in flags]
    head = f"# parasim emit megatron: {layout.label} of {sc.name}, {sc.num_gpus} GPUs"
    return head + "\n" + " \\\n".join(body) + "\n", notes


def _layout_flags(sc, layout, notes: list[str]) -> list:
    f = [("--tensor-model-parallel-size", layout.tp), ("--pipeline-model-parallel-size", layout.pp)]
    if layout.cp > 1:
        f += [("--context-parallel-size", layout.cp), ("--cp-comm-type", "a2a" if layout.cp_algorithm == "ulysses" else "p2p")]
    if layout.ep > 1:
        f.append(("--expert-model-parallel-size", layout.ep))
    if layout.etp != layout.tp:  # (Megatron-Core's default is tp)
        f.append(("--expert-tensor-parallel-size", layout.etp))
    if layout.sequence_parallel and layout.tp > 1:
        f.append(("--sequence-parallel", None))
    if layout.pp > 1 and layout.schedule not in ("1f1b", "interleaved"):
        notes.append(f"schedule {layout.schedule}: Megatron-LM runs 1F1B or interleaved 1F1B only")
    split = _split_flags(sc, layout, notes)
    if layout.schedule == "interleaved" and layout.vpp > 1 and not any(k == LAYOUT_FLAG for k, _ in split):
        f.append(("--num-virtual-stages-per-pipeline-rank", layout.vpp))  # (the layout gives vpp: arguments.py)
    f += split
    z = layout.zero
    if z == 1:
        f.append(("--use-distributed-optimizer", None))
    elif z >= 2:
        f += [("--use-megatron-fsdp", None),
              ("--data-parallel-sharding-strategy", "optim_grads" if z == 2 else "optim_grads_params")]
    if layout.shard_group_size and layout.shard_group_size < layout.dp:
        if z == 1:
            f.append(("--num-distributed-optimizer-instances", layout.dp // layout.shard_group_size))
        else:
            notes.append(f"shard_group_size {layout.shard_group_size} with ZeRO-{z}: Megatron-FSDP's outer "
                         f"data-parallel sharding is not written")
    if layout.recompute == "selective":
        f.append(("--recompute-granularity", "selective"))
        if sc.training.stack.recompute_modules != DEFAULT_RECOMPUTE_MODULES:
            f.append(("--recompute-modules", " ".join(sc.training.stack.recompute_modules)))
    elif layout.recompute == "full" and layout.recompute_layers:
        f += [("--recompute-granularity", "full"), ("--recompute-method", "block"),
              ("--recompute-num-layers", layout.recompute_layers)]
    elif layout.recompute == "full":
        f += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
              ("--recompute-num-layers", layout.recompute_group)]
    elif layout.recompute == "op":
        notes.append("recompute op (torchtitan's op-level selective AC): Megatron-LM has no such mode; "
                     "--recompute-granularity selective is the nearest")
    if layout.dp_mode != "ddp":
        notes.append(f"dp_mode {layout.dp_mode}: Megatron-LM runs DistributedDataParallel only")
    return f


def _split_flags(sc, layout, notes: list[str]) -> list:
    """Megatron's flags for the layout's pipeline split, or a note."""
    if layout.pp == 1:
        return []
    L = sc.model.num_layers
    split = effective_split(layout, L)
    if len(set(split)) == 1 and not layout.accounted_in_split:
        return []
    chunks = family(layout.schedule).num_stages(layout.pp, layout.vpp) // layout.pp
    per_rank = len(split) == layout.pp < layout.pp * chunks  # a split per rank of an interleaved schedule
    for emb, loss in ((True, False), (False, True), (True, True)):
        try:
            theirs = megatron_split(L, layout.pp, chunks, embedding=emb, loss=loss)
        except InputError:  # that flag's count does not divide: try the next
            continue
        if theirs == split or (per_rank and rank_totals(theirs, layout.pp) == split):
            if theirs != split:
                notes.append(f"layers per rank {','.join(map(str, split))}: written as Megatron's accounted split, "
                             f"{','.join(map(str, theirs))} per virtual stage (the same layers per rank)")
            return [(f"--account-for-{p}-in-pipeline-split", None)
                    for p, on in (("embedding", emb), ("loss", loss)) if on]
    inner = split[1:-1]
    if chunks == 1 and len(set(inner)) <= 1:
        if not inner:  # pp 2: the first stage's layers, the last takes the rest
            return [("--decoder-first-pipeline-num-layers", split[0])]
        return ([("--decoder-first-pipeline-num-layers", split[0])] if split[0] != inner[0] else []) + \
            ([("--decoder-last-pipeline-num-layers", split[-1])] if split[-1] != inner[0] else [])
    if len(split) == layout.pp * chunks:  # one entry per virtual stage: Megatron-Core's layout text gives any split
        return [(LAYOUT_FLAG, f'"{layout_text(split, mtp_layers=sc.model.mtp_layers)}"')]
    notes.append(f"layers per rank {','.join(map(str, split))} of an interleaved schedule: not written (Megatron's "
                 f"--pipeline-model-parallel-layout needs the layers of each virtual stage)")
    return []


def _training_flags(sc, layout, notes: list[str]) -> list:
    tr, st = sc.training, sc.training.stack
    f = [("--micro-batch-size", layout.micro_batch_size), ("--global-batch-size", tr.global_batch_size),
         ("--seq-length", tr.seq_length)]
    if tr.precision in ("bf16", "fp8"):
        f.append(("--bf16", None))
    elif tr.precision == "fp16":
        f.append(("--fp16", None))
    if tr.precision == "fp8":
        f += [("--fp8-format", "hybrid"), ("--fp8-recipe", RECIPES[st.fp8_recipe])]
    if layout.zero >= 2:  # Megatron-FSDP's own gradient dtypes (its auto: the model's dtype, the main grads')
        f.append(("--megatron-fsdp-main-grads-dtype", tr.grad_dtype))
        if st.fsdp_reduce_dtype in ("fp32", "bf16") and st.fsdp_reduce_dtype != tr.grad_dtype:
            f.append(("--megatron-fsdp-grad-comm-dtype", st.fsdp_reduce_dtype))
    elif tr.grad_dtype == "bf16":
        f.append(("--grad-reduce-in-bf16", None))
    if st.grad_accumulation == "autograd":
        f.append(("--no-gradient-accumulation-fusion", None))
    if tr.optimizer in ("sgd", "sgd-momentum"):
        f.append(("--optimizer", "sgd"))
        if tr.optimizer == "sgd":
            f.append(("--sgd-momentum", 0))
    if tr.optimizer_dtype != "fp32":
        f += [("--use-precision-aware-optimizer", None), ("--exp-avg-dtype", tr.optimizer_dtype),
              ("--exp-avg-sq-dtype", tr.optimizer_dtype)]
    if not tr.master_weights and tr.param_dtype != "fp32":
        notes.append("master_weights = false: Megatron-LM keeps an fp32 main copy")
    if tr.offload_optimizer:
        f.append(("--optimizer-cpu-offload", None))
        if layout.zero == 0:
            notes.append("offload_optimizer needs --use-distributed-optimizer in Megatron-LM")
    if tr.offload_params:
        notes.append("offload_params: Megatron-LM does not offload parameters")
    if not tr.flash_attention:
        f.append(("--attention-backend", "unfused"))
    if tr.moe_capacity_factor > 0:
        f.append(("--moe-expert-capacity-factor", tr.moe_capacity_factor))
    if st.tp_comm_overlap and layout.tp > 1:
        f.append(("--tp-comm-overlap", None))
    if st.moe_dispatcher == "flex" and sc.model.is_moe:
        f += [("--moe-token-dispatcher-type", "flex"), ("--moe-flex-dispatcher-backend", "deepep")]
    if st.moe_shared_expert_overlap and sc.model.shared_expert_ffn_hidden_size:
        f.append(("--moe-shared-expert-overlap", None))
    for on, flag in ((st.moe_a2a_overlap, "--overlap-moe-expert-parallel-comm"),
                     (st.moe_delay_wgrad, "--delay-wgrad-compute"),
                     (st.activation_input_fp8, "--activation-func-fp8-input-store")):
        if on:
            f.append((flag, None))
    if "layer" in st.cuda_graphs:  # (Megatron-Core's per-layer graphs: NVIDIA/Megatron-LM d98e8a6 arguments.py)
        f.append(("--cuda-graph-impl", "local"))
    elif st.cuda_graphs:
        f += [("--cuda-graph-impl", "transformer_engine"), ("--cuda-graph-modules", " ".join(st.cuda_graphs))]
    f += _bucket_flags(layout, tr)
    return f


def _bucket_flags(layout, tr) -> list:
    """--overlap-grad-reduce and --ddp-bucket-size from the stack's bucket (1e6 MB: no overlap)."""
    mb = tr.stack.dp_bucket_mb
    if mb >= 1e6 or layout.zero >= 3:
        return []
    params = int(round(mb * 1e6 / tr.grad_bytes))
    if params == max(40_000_000, 1_000_000 * layout.dp):
        return [("--overlap-grad-reduce", None)]
    return [("--overlap-grad-reduce", None), ("--ddp-bucket-size", params)]


def _model_flags(sc, notes: list[str]) -> list:
    m, tr = sc.model, sc.training
    f = [("--num-layers", m.num_layers), ("--hidden-size", m.hidden_size), ("--num-attention-heads", m.num_heads)]
    if m.num_kv_heads != m.num_heads:
        f += [("--group-query-attention", None), ("--num-query-groups", m.num_kv_heads)]
    if not m.is_mla and m.head_dim * m.num_heads != m.hidden_size:
        f.append(("--kv-channels", m.head_dim))
    f.append(("--ffn-hidden-size", m.ffn_hidden_size))
    if m.mlp == "swiglu":
        f.append(("--swiglu", None))
    elif m.mlp == "squared-relu":
        f.append(("--squared-relu", None))
    elif m.mlp == "geglu":
        notes.append("mlp geglu: Megatron-LM has no GeGLU flag (--quick-geglu is another activation)")
    elif m.mlp == "clamped-swiglu":
        f.append(("--quick-geglu", None))
        notes.append("mlp clamped-swiglu (GPT-OSS): --quick-geglu; its clamp at 7 and linear offset 1 are "
                     "TransformerConfig fields (activation_func_clamp_value, glu_linear_offset) with no flag: "
                     "Megatron-Bridge's GPT-OSS provider sets them")
    if m.norm == "rmsnorm":
        f.append(("--normalization", "RMSNorm"))
    biases = (m.qkv_bias, m.out_bias, m.mlp_bias)
    if not any(biases):
        f.append(("--disable-bias-linear", None))
    elif biases == (True, False, False):
        f += [("--disable-bias-linear", None), ("--add-qkv-bias", None)]
    elif not all(biases):
        notes.append(f"biases qkv={m.qkv_bias} out={m.out_bias} mlp={m.mlp_bias}: Megatron-LM has all, none or QKV only")
    if m.qk_norm:
        f.append(("--qk-layernorm", None))
    if not m.tie_word_embeddings:
        f.append(("--untie-embeddings-and-output-weights", None))
    if m.learned_position_embeddings:
        f += [("--position-embedding-type", "learned_absolute"), ("--max-position-embeddings", m.learned_position_embeddings)]
    else:
        f.append(("--position-embedding-type", "rope"))
    f.append(("--vocab-size", m.vocab_size))
    p = m.config_dropout if tr.dropout else 0.0
    f += [("--attention-dropout", p), ("--hidden-dropout", p)]
    if m.norms_per_layer != 2 or m.shared_expert_gate:
        notes.append(f"model {m.name}: its extra norms / shared-expert gate have no Megatron-LM flag")
    return f + _moe_flags(m)


def _moe_flags(m) -> list:
    f = []
    if m.is_moe:
        f += [("--num-experts", m.num_experts), ("--moe-router-topk", m.experts_per_token),
              ("--moe-ffn-hidden-size", m.moe_ffn_hidden_size)]
        if m.shared_expert_ffn_hidden_size:
            f.append(("--moe-shared-expert-intermediate-size", m.shared_expert_ffn_hidden_size))
        mask = [int(x) for x in m.moe_layer_mask]
        if not all(mask):
            runs: list[list[int]] = []
            for x in mask:
                if runs and runs[-1][0] == x:
                    runs[-1][1] += 1
                else:
                    runs.append([x, 1])
            f.append(("--moe-layer-freq", "'(" + "+".join(f"[{x}]*{n}" for x, n in runs) + ")'"))
    if m.is_mla:
        f += [("--multi-latent-attention", None)] + ([("--q-lora-rank", m.q_lora_rank)] if m.q_lora_rank else [])
        f += [("--kv-lora-rank", m.kv_lora_rank), ("--qk-head-dim", m.qk_nope_head_dim),
              ("--qk-pos-emb-head-dim", m.qk_rope_head_dim), ("--v-head-dim", m.v_head_dim)]
    return f
