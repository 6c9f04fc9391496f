"""Per-source rules: what the rows of each source leave out, filled from the source's framework.

`SOURCE_RULES` (one `SourceRules` per `source_id`) holds what the source's framework did at the time,
never values chosen from the errors; `map_run` (mapping.py) applies it and records each statement per
row in `MappedRun.assumptions`. How the row's cells are read is in mapping.py.

Per-source assumptions (`SOURCE_RULES`; the text of each is what the row records):

NARAYANAN21 — Narayanan et al. 2021 (SC'21) Table 1, Megatron-LM on Selene (DGX A100 80 GB):
- GPT architecture: LayerNorm, GeLU MLP (f = 4h), biases on QKV/output/MLP, learned position table of
  seq_len rows, input embedding tied to the output layer (Megatron `GPTModel` shares the word
  embeddings; the paper's parameter formula P = 12lh²(1 + 13/12h + (V + s)/12lh) counts V·h once).
- vocabulary as given (51200 = GPT-2's 50257 padded by Megatron to a multiple of 128·tp).
- no FlashAttention (published 2022; Megatron 2021 materialises the s×s scores with its fused
  scale-mask-softmax); dropout on (Megatron defaults hidden_dropout = attention_dropout = 0.1).
- fp16 rows keep fp16 gradients (Megatron `--accumulate-allreduce-grads-in-fp32` is off by default and
  forced on only for bf16); no sequence parallelism (2022).
- micro-batch not given -> 1; schedule '1F1B (interleaving not stated)' -> plain 1f1b.
- the step time compared is *derived* from the reported TFLOP/s with Megatron's FLOP formula (it
  counts the recompute forward and full, non-causal attention) and is labelled so.

KORTHIKANTI22 — Korthikanti et al. 2022 (arXiv 2205.05198) Table 5, Megatron-LM on Selene (A100 80 GB),
measured end-to-end iteration times (validation/korthikanti22.csv): the GPT architecture and 2022
settings of NARAYANAN21 (no FlashAttention, dropout on, fp16 gradients, vocabulary 51200 padded to
128·tp); 'full' rows recompute every layer without sequence parallelism, 'seqsel' rows run sequence
parallelism with Megatron's selective (attention-core) recompute.

ZB24 — Qi et al. 2024, Zero Bubble Pipeline Parallelism, Megatron-LM fork, A100 80 GB, pure PP:
- GPT-like model as NARAYANAN21 (LayerNorm, GeLU, biases, learned positions of seq_len rows) with the
  embedding tied to the output layer and a 32000-token vocabulary (padded to a multiple of 128·tp):
  the repository's sample dataset ships a SentencePiece tokenizer (`--tokenizer-type
  GPTSentencePieceTokenizer`, examples/pretrain_zero_bubble.sh), and the paper's Table 3 sizes
  (1.5, 6.2, 14.6, 28.3 B) are what this gives (1.48, 6.18, 14.63, 28.28 B); GPT-2's 50304 gives
  6.25, 14.74, 28.41 B and an untied head 6.30, 14.80, 28.48 B (tests/test_validate.py). The
  repository's later example scripts untie the embeddings; the paper-era sizes say tied.
- no FlashAttention and dropout on: the paper's own activation model M_B = (34h + 5as)·sb is
  Korthikanti's count with materialised attention scores and dropout masks.
- precision 'mixed (not stated)' -> fp16 with fp16 gradients (the repository's example scripts pass
  `--fp16` unless FP32 is set; Megatron keeps fp16 gradients unless
  `--accumulate-allreduce-grads-in-fp32`; A100 fp16 and bf16 peaks are equal);
  'none stated' recompute -> none (M_B has no recompute).
- first and last stages hold one layer fewer (row notes); schedules: '1F1B' -> 1f1b, 'activation
  limit p*M_B' (ZB-1p) -> zb-h1, '2p*M_B' (ZB-2p) -> zb-h2, ZB-V -> zb-v, 'interleaved 1F1B, 1 layer
  per chunk' -> interleaved with vpp = ceil(total chunks / pp) per rank.

BLOOM_PREQUEL — bigscience BLOOM-176B topology runs (Megatron-DeepSpeed, Jean Zay A100 80 GB, 2022):
- BLOOM architecture: LayerNorm, GeLU, biases, tied embeddings, ALiBi (no position table) (BLOOM
  paper §3.2; tr11 `--position-embedding-type alibi`), and the LayerNorm on the word embeddings
  (`--embed-layernorm` in train/tr11-200B-ml/tr11-200B-ml.slurm from 2022-02-05, bigscience 628b562, on
  every run of these tables: their dates are 02-17 and later).
- vocabulary: the BLOOM tokenizer's 250680 (rows with only '~250k' included) padded to a multiple
  of 128·tp (`--make-vocab-size-divisible-by 128`; tp = 4 gives BLOOM's released 250880).
- no FlashAttention (not available in Megatron-DeepSpeed then); no dropout (tr11 hidden_dropout =
  attention_dropout = 0); full recompute and ZeRO-1 as the rows say.
- fp16 rows keep fp16 gradients (DeepSpeed fp16 ZeRO-1 reduces fp16 gradients); bf16 rows fp32
  gradient accumulation (BF16_Optimizer, row text).
- layer split: before 02-28 (`--pp-partition-method type:transformer`) transformer layers balanced
  with any extra layer on the first stages; rows whose notes say the embedding has its own PP slot
  (`type:transformer|embedding`, 02-28) give the first and last stage one transformer layer fewer.
- memory compared with the larger of the first and last stage (mem_basis: nvidia-smi on the GPUs
  holding the embedding); measured values are nvidia-smi readings, compared with the device total
  (predict.py `memory_counter`: CUDA context, NCCL buffers and the caching allocator's reserve
  included). The CUDA context is the one the source measured on this software: 1573 MiB on an A100
  40GB (chronicles-prequel.md: `torch.ones(1).cuda()` then nvidia-smi, "probably about the same for
  80GB"), not the lazy-loading default of 512 MiB (stack override `cuda_context_mib`).
- DeepSpeed's buffers at its defaults (the stack `deepspeed`): the tr11 ds_config sets only the ZeRO
  stage (1 for fp16, 0 with BF16_Optimizer for bf16), no bucket sizes (tr11-200B-ml.slurm at
  bigscience 8aff319, tr11-176B-ml.slurm), so reduce_bucket_size = allgather_bucket_size = 5e8
  elements; fp16 ZeRO-1 runs DeepSpeedZeroOptimizer, bf16 BF16_Optimizer (memory/framework.py).

LLMFOUNDRY — mosaicml/llm-foundry MPT benchmarks (Composer, FSDP, A100 40/80 GB):
- MPT benchmark configuration (MPTConfig defaults: learned_pos_emb = True, no_bias = False,
  low_precision_layernorm, expansion_ratio 4; row notes 'learned positional embeddings, biases on'):
  LayerNorm with bias, GeLU MLP f = 4h, biases on, learned position table of seq_len rows, logits
  computed with the input embedding (tied). These give exactly the README's NumParams (tests).
- FlashAttention on (row notes: attn_impl=flash); no dropout (MPTConfig pdrop defaults 0).
- FSDP FULL_SHARD over all GPUs -> ZeRO-3; 'MP mode DEFAULT' reduces gradients in fp32, 'PURE' in
  bf16 (Composer `get_mixed_precision`) -> grad_dtype fp32 / bf16.
- step time from the measured Throughput (T/s).

TORCHTITAN_A100 — pytorch/torchtitan performance doc (older), Llama 2/3 on 64 A100 80 GB, FSDP2:
- Llama shapes: SwiGLU, RMSNorm, no biases, RoPE (no position table), untied output layer, GQA
  from the row.
- FlashAttention on (torchtitan calls `scaled_dot_product_attention`, whose flash backend runs bf16 on
  A100); no dropout.
- FSDP2 fully sharded -> ZeRO-3; bf16 parameters with fp32 gradient reduction (torchtitan's
  mixed_precision_param = bfloat16, mixed_precision_reduce = float32 defaults).
- recompute 'selective (per op)' (op-level SAC: matmul and SDPA outputs kept, every second matmul
  recomputed) -> parasim 'selective' [approximation]; 'selective (per layer)' (every 2nd layer fully
  recomputed) has no parasim equivalent -> skipped.
- step time from measured tokens/s (WPS per GPU × GPUs).

The rule type, the family table and the family and hardware defaults are in families.py.
"""
from __future__ import annotations

from .families import SourceRules

# Megatron-LM's GPT runs of 2021-22 (NARAYANAN21, KORTHIKANTI22): their settings, and what each states
_MEGATRON_GPT_2022 = dict(family="gpt", tie_word_embeddings=True, learned_positions=True, vocab_pad_per_tp=128,
                          flash_attention=False, dropout=True, stack="megatron",
                          grad_dtype=((r"fp16", "fp16"), (r".", "fp32")))
# llm-foundry's MPT benchmarks (LLMFOUNDRY, LLMFOUNDRY_H100): one benchmark script, one set of settings
_LLMFOUNDRY = dict(family="mpt", tie_word_embeddings=True, learned_positions=True, flash_attention=True,
                   dropout=False, stack="fsdp", grad_dtype=((r"pure", "bf16"), (r".", "fp32")),
                   stack_overrides=(("attention_kernel", "triton-pre-mlir"), ("fsdp_reduce_dtype", "grad"),
                                    ("cross_entropy", "xentropy"), ("optimizer_impl", "for-loop"),
                                    ("train_metric_losses", 2)))
# NVIDIA's DGX Cloud NeMo recipes (DGXC_H100*): one release, one cluster, the settings every recipe shares
_DGXC = dict(vocab_pad_per_tp=128, flash_attention=True, grad_dtype=((r".", "bf16"),), stack="megatron",
             hardware="dgx-h100")
# (regex on the notes, Stack field, value): TP overlap where the recipe turns it on; FP8 rows keep FP8 weights
_DGXC_NOTES = ((r"ub_tp_comm_overlap", "tp_comm_overlap", True), (r", FP8;", "fp8_params", True))
# NeMo's distributed_fused_adam with megatron_amp_O2 and bf16 weights keeps 16-bit remainders of the fp32 master
_DGXC_STACK = (("master_weights", "remainders"),)
_DGXC_FP8 = ("FP8 rows: TE delayed scaling (fp8_hybrid, amax history 1024), the megatron stack's fp8_recipe; FP8 "
             "weights (+model.fp8_params, so distributed_fused_adam keeps an fp32 master copy: store_params)")
_DGXC_OPTIMIZER = ("distributed_fused_adam (Apex DistributedFusedAdam) with megatron_amp_O2 and bf16 weights: NeMo's "
                   "megatron_base_model.setup_optimization sets store_params False, store_param_remainders True, "
                   "2 bytes of master copy per parameter (the stack's master_weights remainders)")
_MEGATRON_GPT_2022_STATEMENTS = (
    "GPT (Megatron GPTModel): LayerNorm, GeLU, biases, learned positions, tied embeddings",
    "no FlashAttention (2021-22: materialised scores, Megatron's fused scale-mask-softmax)",
    "dropout 0.1 (Megatron default)",
    "fp16 gradients (Megatron 2021-22: --accumulate-allreduce-grads-in-fp32 off unless bf16)",
    "vocab padded to 128·tp (Megatron --make-vocab-size-divisible-by 128)",
)

_MBRIDGE = dict(  # NVIDIA's Megatron-Bridge performance tables (validation/mbridge_h100.py, mbridge_blackwell.py)
    family="llama", tie_word_embeddings=False, learned_positions=False, dropout=False, flash_attention=True,
    grad_dtype=((r".", "bf16"),), stack="megatron",
    stack_overrides=(("fp8_recipe", "current"), ("fp8_params", True), ("cross_entropy", "te")),
    stack_by_notes=((r"TP communication overlap \(userbuffers\)", "tp_comm_overlap", True),
                    (r"EP A2A overlap \(overlap_moe_expert_parallel_comm", "moe_a2a_overlap", True),
                    (r"delay_wgrad_compute", "moe_delay_wgrad", True),
                    (r"recompute_modules mla_up_proj,mlp", "recompute_modules", "mla_up_proj,mlp"),
                    (r"recompute_modules layernorm,moe_act", "recompute_modules", "layernorm,moe_act"),
                    (r"recompute_modules mla_up_proj(?!,)", "recompute_modules", "mla_up_proj"),
                    (r"no gradient-accumulation fusion", "grad_accumulation", "autograd"),
                    (r"dispatcher flex \((?:DeepEP|HybridEP)\)", "moe_dispatcher", "flex"),
                    (r"shared experts overlapped", "moe_shared_expert_overlap", True),
                    (r"FP8 MXFP8 block scaling", "fp8_recipe", "mxfp8"),
                    (r"^NeMo 25\.09\b", "cudnn_version", "9.11.0"), (r"^NeMo 25\.11\b", "cudnn_version", "9.13.1"),
                    (r"^NeMo 26\.02\b", "cudnn_version", "9.18.0"), (r"^NeMo 26\.04\b", "cudnn_version", "9.20.0"),
                    (r"^NeMo 26\.06\b", "cudnn_version", "9.21.1"),
                    (r"CUDA graphs \(local, per layer\)", "cuda_graphs", "layer"),
                    (r"CUDA graphs \(TE, scope moe_router, moe_preprocess\)", "cuda_graphs", "moe_router,moe_preprocess"),
                    (r"CUDA graphs \(TE, scope attn, moe_router, moe_preprocess\)", "cuda_graphs",
                     "attn,moe_router,moe_preprocess")),
    training_by_notes=((r"token drop: capacity factor 1\.0", "moe_capacity_factor", 1.0),
                       (r"precision-aware optimizer \(bf16 moments", "optimizer_dtype", "bf16")),
    model_presets=((r"^Llama-3-8B$", "llama3-8b"), (r"^Llama-3-70B$", "llama3-70b"),
                   (r"^Llama-3\.1-405B$", "llama3.1-405b"), (r"^DeepSeek-V3$", "deepseek-v3"),
                   (r"^Qwen3-30B-A3B$", "qwen3-30b-a3b"), (r"^Qwen3-235B-A22B$", "qwen3-235b-a22b"),
                   (r"^GPT-OSS-120B$", "gpt-oss-120b")))
_MBRIDGE_STATEMENTS = (
    "Megatron-Bridge performance recipes (NVIDIA-NeMo/Megatron-Bridge, the release's commit: "
    "validation/mbridge_h100.py and mbridge_blackwell.py COMMITS): Megatron-core with Transformer Engine, the "
    "megatron stack",
    "models: parasim's presets (the recipes build them from the Hugging Face configs)",
    "gradients reduced in bf16 (grad_reduce_in_fp32 False), the distributed optimizer with fp32 master "
    "weights, sequence parallelism with TP",
    "MoE: force-balanced routing (moe_router_force_load_balancing: parasim's uniform routing), dropless "
    "except where the notes give token drop; DeepEP and HybridEP (the flex dispatcher) send each token once "
    "per destination node or NVLink domain (the stack's moe_dispatcher flex)",
    "the loss: Transformer Engine's parallel cross-entropy (scripts/performance/utils/overrides.py sets "
    "cross_entropy_fusion_impl 'te'; GPTModelProvider cross_entropy_loss_fusion True), which before TE 2.18 keeps "
    "the bf16 logits with their gradient written in place (the stack's cross_entropy te)",
    "the step: GBS x sequence / (published tokens/s/GPU x GPUs)",
    "CUDA graphs as the row's notes give them (the stack's cuda_graphs: a graphed part of a layer is one launch)",
    "cuDNN as the row's container ran it (the stack's cudnn_version; docs/releases/software-versions.md of "
    "NVIDIA-NeMo/Megatron-Bridge at 067f987: NeMo 25.09 9.11.0, 25.11 9.13.1, 26.02 9.18.0, 26.04 9.20.0, 26.06 "
    "9.21.1; a patch container as its release, not stated there): the Blackwell presets' cuDNN attention table of "
    "the newest release published up to it")

SOURCE_RULES: dict[str, SourceRules] = {r.source_id: r for r in (
    SourceRules(source_id="NARAYANAN21", statements=_MEGATRON_GPT_2022_STATEMENTS, **_MEGATRON_GPT_2022),
    SourceRules(source_id="KORTHIKANTI22", statements=_MEGATRON_GPT_2022_STATEMENTS, **_MEGATRON_GPT_2022),
    SourceRules(
        source_id="ZB24", family="gpt", tie_word_embeddings=True, learned_positions=True,
        vocab_base=32000, vocab_pad_per_tp=128, flash_attention=False, dropout=True, stack="megatron",
        grad_dtype=((r"fp16", "fp16"), (r".", "fp32")), precision_unstated="fp16",
        statements=(
            "GPT-like (Megatron fork): LayerNorm, GeLU, biases, learned positions, tied embeddings "
            "(Table 3 sizes count V·h once)",
            "vocab: 32000 SentencePiece tokenizer of the repo's sample dataset, padded to 128·tp",
            "no FlashAttention and dropout on (paper's M_B = (34h + 5as)·sb, Korthikanti)",
            "fp16 with fp16 gradients (repo example scripts pass --fp16, Megatron default gradients)",
        )),
    SourceRules(
        source_id="BLOOM_PREQUEL", family="bloom", tie_word_embeddings=True, learned_positions=False,
        hardware="jean-zay-a100",
        vocab_base=250680, vocab_pad_per_tp=128, flash_attention=False, dropout=False, stack="deepspeed",
        stack_overrides=(("cuda_context_mib", 1573.0),),
        grad_dtype=((r"fp16", "fp16"), (r".", "fp32")),
        statements=(
            "BLOOM: LayerNorm, GeLU, biases, ALiBi (no position table), tied embeddings, embedding LayerNorm "
            "(--embed-layernorm in tr11-200B-ml.slurm from 2022-02-05)",
            "vocab: BLOOM tokenizer 250680 padded to 128·tp (Megatron-DeepSpeed)",
            "no FlashAttention (Megatron-DeepSpeed 2022)",
            "hardware jean-zay-a100: the A100 nodes' 4 Omni-Path 100 Gb/s links (the rows' interconnect), "
            "not a DGX's 8 HDR 200 Gb/s",
            "no dropout (tr11 config)",
            "fp16 rows fp16 gradients (DeepSpeed fp16 ZeRO-1), bf16 rows fp32 (BF16_Optimizer)",
            "CUDA context 1573 MiB (measured by the source with its torch build: chronicles-prequel.md, "
            "A100 40GB, torch.ones(1).cuda() + nvidia-smi; cuda_context_mib)",
            "DeepSpeed buckets at their defaults, 5e8 elements (the tr11 ds_config sets only the ZeRO stage)",
        )),
    SourceRules(
        source_id="LLMFOUNDRY", **_LLMFOUNDRY,
        statements=(
            "attention: the Triton FlashAttention kernel on the pre-MLIR Triton fork (attention_kernel "
            "triton-pre-mlir; setup.py pins triton-pre-mlir@...triton_pre_mlir_sm90; "
            "scripts/train/benchmarking/submit_benchmarks.py "
            "--attn_impl default 'triton' at b2a43a1, 2023-10-19, the commit that wrote the A100 tables; "
            "default image mosaicml/pytorch:1.13.1, before torch SDPA's FlashAttention-2)",
            "loss: flash-attn's xentropy kernel (llmfoundry/models/mpt/modeling_mpt.py at b2a43a1: "
            "loss_fn default 'fused_crossentropy' = flash_attn.losses.cross_entropy.CrossEntropyLoss; the "
            "benchmark yamls set none): keeps the bf16 logits, no fp32 copy (cross_entropy = xentropy)",
            "FSDP reduces gradients in the mixed-precision mode's dtype (fsdp_reduce_dtype = grad)",
            "optimizer: Composer's DecoupledAdamW (the yamls/pretrain/mpt-*.yaml the benchmark reads: optimizer "
            "name decoupled_adamw), a loop over the parameters (composer/optim/decoupled_weight_decay.py "
            "adamw): optimizer_impl for-loop",
            "training metrics: ComposerMPTCausalLM registers LanguageCrossEntropy and LanguagePerplexity as train "
            "metrics (use_train_metrics default true; the benchmark yamls set none), and Composer updates both on "
            "every micro-batch's logits after its backward (composer/trainer/trainer.py _eval_train_metrics, "
            "v0.16.4 and v0.17.2, the versions setup.py pins at b2a43a1 and 5e85bd6; the same from v0.13): two "
            "torch cross-entropy evaluations per micro-batch (train_metric_losses = 2)",
            "MPT benchmark config (MPTConfig defaults): LayerNorm with bias, GeLU f=4h, biases, "
            "learned positions, tied embeddings",
            "FlashAttention (attn_impl=flash)",
            "no dropout (MPTConfig pdrop 0)",
            "FSDP mixed precision: DEFAULT reduces fp32 gradients, PURE bf16 (Composer)",
        )),
    SourceRules(
        source_id="LLMFOUNDRY_H100", **_LLMFOUNDRY,
        stack_by_notes=((r"attn_impl=flash", "attention_kernel", "flash2"),
                        (r"attn_impl=flash", "attention_padding", "unpad"),
                        (r"attn_impl=triton", "attention_kernel", "triton-pre-mlir")),
        statements=(
            "the LLMFOUNDRY rules (MPT architecture, xentropy loss, training metrics, FSDP reduce dtype, "
            "DecoupledAdamW, no dropout) for the README's H100 tables (validation/llmfoundry_h100.py)",
            "attention per row (notes): attn_impl=flash -> FlashAttention-2 (the 2024-01 sweep installs "
            "llm-foundry[gpu-flash2]), attn_impl=triton -> the Triton FlashAttention kernel on the pre-MLIR "
            "Triton fork (setup.py at 5e85bd6: triton-pre-mlir@...triton_pre_mlir_sm90; Ampere mma.sync code on "
            "the H100: attention_kernel triton-pre-mlir, not the FlashAttention-3 charts' Hopper Triton)",
            "attn_impl=flash rows unpad: llmfoundry/models/layers/attention.py flash_attn_fn at 5e85bd6 calls "
            "flash-attn's bert_padding.unpad_input on q, k, v and pad_input on the output in every layer "
            "(attention_padding unpad: the copies and host synchronisations measured on an H100, "
            "validation/h100_cp_unpad/); the Triton path takes the padded tensors",
            "hardware dgx-h100 (the H100 tables state no interconnect: a DGX H100's 8x400 Gb/s assumed)",
            "FP8 rows: Transformer Engine's delayed scaling (Composer amp_fp8, TE v0.10 installed by "
            "submit_benchmarks.py at b2a43a1)",
        )),
    SourceRules(
        source_id="TORCHTITAN_H100", family="llama", tie_word_embeddings=False, learned_positions=False,
        flash_attention=True, dropout=False, grad_dtype=((r".", "fp32"),), stack="torchtitan",
        stack_overrides=(("attention_kernel", "flash2"), ("grad_buffer", "set-to-none")),
        stack_by_notes=((r"torch\.compile", "compiled", True), (r"AsyncTP", "tp_comm_overlap", True)),
        hardware="dgx-h100", hardware_overrides=(("hbm_bytes", 96e9), ("hbm_bytes_per_s", 2.4e12)),
        statements=(
            "hardware: the Grand Teton H100s (96GB HBM2e, 2.4 TB/s, 500 W power limit): dgx-h100 with that memory; "
            "its SXM peaks and 700 W tables are kept (the source: 'the actual peak TFLOPs number is between SXM "
            "and NVL, and we don't know its exact value'), so predicted times are lower bounds and the ratios "
            "between rows (compile, Float8, AsyncTP, schedules, CP) are the check",
            "attention: SDPA's FlashAttention-2 backend (torch nightly 2024-12; cuDNN attention not first on H100)",
            "torch.compile and AsyncTP per row (notes); Float8: torchao tensorwise dynamic scaling "
            "(fp8_recipe current, the torchtitan stack's)",
            "interleaved 1F1B: 2 stages per rank (torchtitan's looped-schedule split at 9dec370), pp microbatches",
            "gradients freed between steps (grad_buffer set-to-none): train.py at 9dec370 calls "
            "optimizers.zero_grad(), torch's default set_to_none=True (torchtitan/optimizer.py)",
            "Llama 3.1: SwiGLU, RMSNorm, no biases, RoPE, untied output layer, GQA 8 KV heads",
        )),
    SourceRules(
        source_id="DGXC_H100", family="llama", tie_word_embeddings=False, learned_positions=False, dropout=False,
        stack_overrides=_DGXC_STACK, stack_by_notes=_DGXC_NOTES, **_DGXC,
        statements=(
            "NeMo 24.09 recipes (NVIDIA/dgxc-benchmarking 35a9aec, llama3.1/*.yaml, configure.sh): Megatron-core "
            "with Transformer Engine, the megatron stack",
            "Llama 3.1: RMSNorm, SwiGLU, RoPE, no biases, untied output layer; vocabulary padded to 128·tp "
            "(make_vocab_size_divisible_by 128)",
            "attention: cuDNN fused attention (configure.sh NVTE_FUSED_ATTN=1, NVTE_FLASH_ATTN=0)",
            "gradients reduced in bf16 (distributed_fused_adam grad_sync_dtype bf16), no dropout, no recompute",
            "TP communication overlap with userbuffers where the row's notes say so (ub_tp_comm_overlap: 70B, 405B)",
            "NVLS off (configure.sh NCCL_NVLS_ENABLE=0): parasim runs NVLS for all-reduces only, which these "
            "layouts do not time (sequence-parallel TP and the distributed optimizer gather and scatter), so "
            "dgx-h100 as it is",
            _DGXC_FP8, _DGXC_OPTIMIZER,
        )),
    SourceRules(
        source_id="DGXC_H100_NEMOTRON", family="nemotron", tie_word_embeddings=False, learned_positions=False,
        dropout=False, stack_overrides=_DGXC_STACK,
        stack_by_notes=_DGXC_NOTES + ((r"NVTE_FUSED_ATTN=0", "attention_kernel", "flash2"),), **_DGXC,
        statements=(
            "NeMo 24.09 recipes (NVIDIA/dgxc-benchmarking 35a9aec, nemotron/nemotron4-{15b,340b}-synth.yaml, "
            "configure.sh): Megatron-core with Transformer Engine, the megatron stack",
            "Nemotron-4: LayerNorm (layernorm1p), squared-ReLU MLP (bias_activation_fusion false: relu and pow "
            "kernels), RoPE, no biases, untied output layer, GQA 8 groups; the 256,000-token tokenizer "
            "(nemotron_2_256k.model) padded to 128·tp",
            "attention: cuDNN fused attention for 15B (configure.sh NVTE_FUSED_ATTN=1), FlashAttention-2 for 340B "
            "(NVTE_FUSED_ATTN=0)",
            "TP communication overlap with userbuffers (configure.sh model.ub_tp_comm_overlap=True), sequence "
            "parallelism, gradients reduced in bf16 (distributed_fused_adam grad_sync_dtype bf16), no dropout, no "
            "recompute",
            _DGXC_FP8, _DGXC_OPTIMIZER,
        )),
    SourceRules(
        source_id="DGXC_H100_GPT3", family="gpt", tie_word_embeddings=True, learned_positions=True, dropout=True,
        stack_overrides=_DGXC_STACK + (("attention_kernel", "flash2"),), stack_by_notes=_DGXC_NOTES, **_DGXC,
        statements=(
            "NeMo 24.05 container (NVIDIA/dgxc-benchmarking 35a9aec, nemo_megatron/gpt3_175b_hydra.yaml, "
            "launch.sh): Megatron-core with Transformer Engine, the megatron stack",
            "GPT-3: LayerNorm, GeLU, biases, learned positions, the input embedding tied to the output layer "
            "(NeMo's megatron_gpt defaults; the yaml sets none of them); GPT-2's 50257 tokens padded to 128·tp",
            "attention: FlashAttention-2 through Transformer Engine (launch.sh NVTE_FUSED_ATTN=0), dropout 0.1 "
            "(hidden_dropout, attention_dropout)",
            "TP communication overlap with userbuffers (ub_tp_comm_overlap), sequence parallelism, gradients "
            "reduced in bf16 (distributed_fused_adam grad_sync_dtype bf16), no recompute",
            _DGXC_FP8, _DGXC_OPTIMIZER,
        )),
    SourceRules(
        source_id="DGXC_MOE", family="llama", tie_word_embeddings=False, learned_positions=False, dropout=False,
        vocab_pad_per_tp=128, flash_attention=True, grad_dtype=((r".", "bf16"),), stack="megatron",
        stack_overrides=_DGXC_STACK + (("moe_router_probs", "hidden"),),
        stack_by_notes=((r", FP8;", "fp8_params", True), (r"recompute_modules mla_up_proj", "recompute_modules",
                                                             "mla_up_proj"),
                        (r"TP communication overlap \(userbuffers\)", "tp_comm_overlap", True),
                        (r"shared experts overlapped", "moe_shared_expert_overlap", True)),
        training_overrides=(("moe_capacity_factor", 1.0),), model_presets=((r"^DeepSeek-V3", "deepseek-v3"),),
        statements=(
            "NeMo 2 performance recipes (NVIDIA/dgxc-benchmarking 6be5ea0; NeMo 6f2c6fd scripts/performance/llm/"
            "pretrain_grok1_314b.py): Megatron-core with Transformer Engine, the megatron stack",
            "NeMo 25.04 containers (the recipes' metadata.yaml): NeMo v2.3.0 pins Megatron-LM 3cdfd613 "
            "(core_r0.12.0, requirements/manifest.json), before Megatron-Core weighted the experts' activation "
            "with the router's probabilities (2659630721, core_v0.13.0): its unpermute weights the expert outputs "
            "and keeps them (the stack's moe_router_probs hidden)",
            "Grok-1 as NeMo builds it: MixtralConfig8x7B (RMSNorm, SwiGLU experts, RoPE, no biases, untied output "
            "layer) with the recipe's shapes; the Llama 3 tokenizer's 128256 tokens padded to 128·tp",
            "routed experts: token drop padded to capacity factor 1.0 (MegatronTokenDropCallback: "
            "moe_expert_capacity_factor 1.0, moe_pad_expert_input_to_capacity), the experts' tensor-parallel "
            "degree as the layout table's ETP",
            "Grok-1: TP communication overlap with userbuffers (MegatronCommOverlapCallback tp_comm_overlap True); "
            "DeepSeek-V3: none (pretrain_deepseek_v3.py tp_comm_overlap=False), its shared experts beside the "
            "all-to-all dispatcher (DeepSeekConfig moe_shared_expert_overlap True); sequence parallelism, the "
            "distributed optimizer with bf16 gradient reduction (grad_reduce_in_fp32 False), 16-bit master "
            "remainders (use_precision_aware_optimizer), no dropout; Grok-1 without recompute",
            "FP8 rows: TE delayed scaling (bf16_with_fp8_mixed: hybrid, amax history 1024) with FP8 parameters "
            "(fp8_param_gather)",
            "GB200 rows ran with CUDA graphs (launch.sh CUDA_GRAPH true): not modelled (their steps are GPU-bound)",
            "DeepSeek-V3 (NeMo 7a8f1cc pretrain_deepseek_v3.py): parasim's deepseek-v3 preset (MLA, 1 shared expert, "
            "3 dense layers; the DeepSeek-V3-Base tokenizer's 129280 tokens) with one multi-token-prediction module "
            "(recipes/deepseek_v3.py use_mtp); selective recompute (pretrain_deepseek_v3.py recompute_granularity "
            "selective) of the MLA up-projections on H100 (launch.sh RM='mla_up_proj': the stack's recompute_modules) "
            "and of the core attention on GB200 (RM='core_attn', Megatron-Core's default)",
        )),
    SourceRules(source_id="MBRIDGE_H100", hardware="dgx-h100", **_MBRIDGE, statements=(
        *_MBRIDGE_STATEMENTS,
        "FP8 with per-tensor current scaling (bf16_with_fp8_current_scaling_mixed: fp8_recipe tensorwise, all "
        "layers FP8) and FP8 weights (fp8_param_gather); the 25.09 table names no precision: FP8 current "
        "scaling, as the same layouts of 25.11 are labelled",
        "DeepSeek-V3's precision-aware optimizer: bf16 moments (optimizer_dtype) and main gradients, fp32 "
        "master weights (recipes/deepseek/deepseek_v3.py:240-244)")),
    *(SourceRules(source_id=f"MBRIDGE_{gpu}", hardware=hw, **_MBRIDGE, statements=(
        *_MBRIDGE_STATEMENTS,
        "FP8 rows: per-tensor current scaling (FP8-CS) or MXFP8 (32-element blocks, 1-byte scales: the "
        "stack's fp8_recipe mxfp8) as the row's notes say, FP8 weights (fp8_param_gather); the 25.09 and 25.11 "
        "tables give the MXFP8 number in parentheses (validation/mbridge_blackwell.py)"))
      for gpu, hw in (("B200", "dgx-b200"), ("B300", "b300"), ("GB200", "gb200-nvl72"))),
    SourceRules(
        source_id="TORCHTITAN_A100", family="llama", tie_word_embeddings=False, learned_positions=False,
        flash_attention=True, dropout=False, grad_dtype=((r".", "fp32"),), stack="torchtitan",
        stack_overrides=(("attention_kernel", "flash2"), ("grad_buffer", "set-to-none")),
        statements=(
            "gradients freed between steps (grad_buffer set-to-none): train.py at 04133643 calls "
            "optimizer.zero_grad(), torch's default set_to_none=True",
            "attention: torch SDPA's flash backend, FlashAttention-2 on A100 since torch 2.2 (PyTorch 2.2 "
            "release notes: 'FlashAttention-2 in scaled_dot_product_attention')",
            "Llama: SwiGLU, RMSNorm, no biases, RoPE, untied output layer",
            "FlashAttention (torchtitan SDPA flash backend)",
            "no dropout",
            "FSDP2 bf16 parameters, fp32 gradient reduction (torchtitan defaults)",
        )),
)}
