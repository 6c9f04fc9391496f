"""A parasim layout as a DeepSpeed config JSON fragment (the inverse of frameworks/deepspeed.py;
microsoft/DeepSpeed deepspeed/runtime/zero/config.py names and defaults).

A DeepSpeed config carries the batch, precision and ZeRO settings; tensor, pipeline, context and expert
parallelism, the sequence length and activation checkpointing are set in the training code, so they are
returned as notes (with the flags of Megatron-DeepSpeed where it has them).
"""
from __future__ import annotations

import json


def emit_deepspeed(sc, layout, *, with_model: bool = False) -> tuple[str, list[str]]:
    """(JSON text, notes on what a DeepSpeed config cannot express)."""
    tr, st = sc.training, sc.training.stack
    notes: list[str] = []
    mbs, dp = layout.micro_batch_size, layout.dp
    doc: dict = {"train_batch_size": tr.global_batch_size, "train_micro_batch_size_per_gpu": mbs,
                 "gradient_accumulation_steps": tr.global_batch_size // (mbs * dp)}
    if tr.precision in ("bf16", "fp8"):
        doc["bf16"] = {"enabled": True}
    elif tr.precision == "fp16":
        doc["fp16"] = {"enabled": True}
    if tr.precision == "fp8":
        notes.append("precision fp8: FP8 comes from Transformer Engine in the model code, not the DeepSpeed config")
    if tr.grad_dtype == "fp32" and tr.precision != "fp32":
        doc["data_types"] = {"grad_accum_dtype": "fp32"}
    doc["zero_optimization"] = _zero(sc, layout, notes)
    if st.fsdp_reduce_dtype in ("fp32", "bf16") and layout.zero == 3 and st.fsdp_reduce_dtype != tr.grad_dtype:
        doc["communication_data_type"] = st.fsdp_reduce_dtype
    for name, degree, flag in (("tp", layout.tp, "--tensor-model-parallel-size"),
                               ("pp", layout.pp, "--pipeline-model-parallel-size"),
                               ("cp", layout.cp, "--ds-sequence-parallel-size"),
                               ("ep", layout.ep, "--moe-expert-parallel-size")):
        if degree > 1:
            notes.append(f"{name} {degree}: set in code (Megatron-DeepSpeed {flag} {degree})")
    if layout.recompute_layers:
        notes.append(f"recompute_layers {layout.recompute_layers}: Megatron-DeepSpeed --recompute-method block "
                     f"--recompute-num-layers {layout.recompute_layers} in the training script")
    if layout.recompute_group > 1:
        notes.append(f"recompute_group {layout.recompute_group}: Megatron-DeepSpeed --recompute-method uniform "
                     f"--recompute-num-layers {layout.recompute_group} in the training script")
    if layout.recompute != "none":
        notes.append(f"recompute {layout.recompute}: set in the training script (Hugging Face "
                     f"gradient_checkpointing, Megatron-DeepSpeed --recompute-granularity {layout.recompute})")
    notes.append(f"seq_length {tr.seq_length}: set in the training script (a DeepSpeed config has none)")
    if with_model:
        notes.append(f"model {sc.model.name}: give its config.json to the training script (--hf-config to import)")
    return json.dumps(doc, indent=2) + "\n", notes


def _zero(sc, layout, notes: list[str]) -> dict:
    tr, st, z = sc.training, sc.training.stack, layout.zero
    out: dict = {"stage": z}
    if z in (1, 2, 3):
        if st.dp_bucket_mb >= 1e6:
            out["overlap_comm"] = False
        else:
            out["overlap_comm"] = True
            out["reduce_bucket_size"] = int(round(st.dp_bucket_mb * 1e6 / tr.grad_bytes))
    elif st.dp_bucket_mb < 1e6:
        notes.append("ZeRO-0: the DeepSpeed engine all-reduces the gradients after the backward (no buckets)")
    if z == 3:
        layer = float(sc.model.layer_params().mean())
        out["stage3_prefetch_bucket_size"] = int(st.fsdp_prefetch * layer)
        if st.fsdp_reshard_after_forward == "no":
            out["stage3_max_reuse_distance"] = int(sc.model.total_params())
            notes.append("fsdp_reshard_after_forward = no: approximated by a stage3_max_reuse_distance of the "
                         "whole model")
        if layout.shard_group_size and layout.shard_group_size < layout.dp:
            out["mics_shard_size"] = layout.shard_group_size
    elif layout.shard_group_size and layout.shard_group_size < layout.dp:
        notes.append(f"shard_group_size with ZeRO-{z}: DeepSpeed's hybrid sharding (MiCS) is ZeRO-3")
    if tr.offload_optimizer:
        out["offload_optimizer"] = {"device": "cpu"}
    if tr.offload_params:
        out["offload_param"] = {"device": "cpu"}
        if z != 3:
            notes.append("offload_params needs ZeRO-3 in DeepSpeed")
    if layout.dp_mode != "ddp":
        notes.append(f"dp_mode {layout.dp_mode}: the DeepSpeed engine's data parallelism only")
    return out
