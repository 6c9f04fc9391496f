"""Inference estimate of one layout: prefill, decode, memory and the largest batch (composition only;
the formulas are in cost/inference.py, the memory in memory/breakdown.py, docs/inference.md says what is
and is not modelled).

Meaning of the inputs (`InferenceSetup`):
- batch: sequences one model replica (tp·pp GPUs) serves together, static batching: all prompts are
  prefilled, then all sequences decode together for `output_tokens` steps. Default: the scenario's
  global_batch_size / dp, as `parasim memory --inference` sizes the cache.
- prompt_tokens (default: the scenario's seq_length) and output_tokens (default 256): the KV cache
  grows to prompt + output tokens, which is what the memory verdict and max_batch are sized for.
- the layout's micro_batch_size: sequences per prefill forward pass (the prefill runs ⌈batch / b⌉ of
  them one after another, pipelined over the stages); its activation working set is what memory reserves
  (scaling-book inference chapter: prefill at batch 1, decode batched).
- decode: the batch in m = min(pp, batch) micro-batches in flight; CUDA graphs (no host launch bound)
  unless `eager_decode`.
The layout's vpp, schedule and ZeRO are training choices: inference keeps one model chunk per pipeline
rank and unsharded weights; cp > 1 is refused (context-parallel decoding is not modelled).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from .cost import collectives as C
from .cost import comm
from .cost.compute import BASIS, BASIS_KEYS, layer_basis_times_by_mode, mfu_peak_flops
from .cost.inference import (DecodeCost, decode_head, decode_layer, decode_period_s, max_batch_size,
                             mean_decode_context, pipelined_forward_s, prefill_flops)
from .cost.topology import DEFAULT_ORDER, group_span
from .errors import InputError
from .memory.breakdown import memory_breakdown
from .memory.overheads import Overheads, overhead_bytes
from .spec.layout import Layout
from .spec.model import ModelSpec
from .spec.placement import stage_placement, uneven_split
from .spec.rules import BOUNDS, check_count
from .spec.training import Training
from .spec.validate import validate

DEFAULT_OUTPUT_TOKENS = 256


@dataclass(frozen=True, kw_only=True)
class InferenceSetup:
    """What is served: `batch` sequences per replica of `prompt_tokens` + `output_tokens` (module docstring)."""

    batch: int
    prompt_tokens: int
    output_tokens: int = DEFAULT_OUTPUT_TOKENS
    eager_decode: bool = False  # the stack's host launch bound on every decode layer (no CUDA graphs)

    def __post_init__(self):
        object.__setattr__(self, "batch", check_count("global_batch_size", self.batch, label="batch"))
        for name in ("prompt_tokens", "output_tokens"):
            object.__setattr__(self, name, check_count("seq_length", getattr(self, name), label=name))
        limit = BOUNDS["seq_length"][0]
        if self.prompt_tokens + self.output_tokens > limit:
            raise InputError(f"prompt_tokens({self.prompt_tokens}) + output_tokens({self.output_tokens}) = "
                             f"{self.prompt_tokens + self.output_tokens} tokens must be <= {limit}")
        if not isinstance(self.eager_decode, bool):
            raise InputError(f"eager_decode must be true or false, got {self.eager_decode!r}")

    @classmethod
    def for_scenario(cls, training: Training, layout: Layout, *, batch=None, prompt_tokens=None, output_tokens=None,
                     eager_decode: bool = False) -> "InferenceSetup":
        """The setup with the scenario's defaults for what is None (module docstring)."""
        limit = BOUNDS["global_batch_size"][0]
        if batch is not None and isinstance(batch, int) and batch * layout.dp > limit:  # (the replicas' total)
            raise InputError(f"batch {batch} x dp {layout.dp} replicas = {batch * layout.dp} sequences must be <= "
                             f"{limit} (2**31)")
        return cls(batch=max(training.global_batch_size // layout.dp, 1) if batch is None else batch,
                   prompt_tokens=training.seq_length if prompt_tokens is None else prompt_tokens,
                   output_tokens=DEFAULT_OUTPUT_TOKENS if output_tokens is None else output_tokens,
                   eager_decode=eager_decode)


@dataclass(frozen=True, kw_only=True)
class InferenceEstimate:
    """Prefill, decode and memory of one replica; `to_dict()` is the JSON "inference" object."""

    setup: InferenceSetup
    layout: Layout
    values: dict  # the scalars of to_dict()
    prefill: dict
    decode: dict

    def __getattr__(self, name):
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def to_dict(self) -> dict:
        s = self.setup
        return {"batch": s.batch, "prompt_tokens": s.prompt_tokens, "output_tokens": s.output_tokens,
                **self.values, "prefill": self.prefill, "decode": self.decode,
                "assumptions": ASSUMPTIONS}


ASSUMPTIONS = ("static batching: the batch is prefilled, then decoded together for output_tokens steps",
               "decode time per output token at the mean context prompt + output/2",
               "routed experts: uniform routing, the experts a step's tokens reach are read",
               "KV cache in the activation dtype, contiguous (no paged-attention blocks), no quantisation",
               "no speculative decoding, continuous batching or prefix caching")


def inference_layout(layout: Layout, model: ModelSpec) -> Layout:
    """The layout inference runs: one model chunk per pipeline rank (vpp 1, plain schedule), the
    layout's per-rank split if it has one, else an even one (or `uneven_split`'s when pp does not divide)."""
    if layout.cp > 1:
        raise InputError(f"--inference models cp = 1 (context-parallel decoding is not modelled), got cp({layout.cp})")
    if layout.etp != layout.tp:
        raise InputError(f"--inference models the experts split over tp (etp = tp), got etp({layout.etp}) and "
                         f"tp({layout.tp})")
    split = layout.layers_per_stage
    if not split or len(split) != layout.pp or layout.accounted_in_split:
        split = uneven_split(model.num_layers, layout.pp)
    return replace(layout, vpp=1, schedule="1f1b", layers_per_stage=split, zero=0, shard_group_size=None,
                   account_for_embedding_in_pipeline_split=False, account_for_loss_in_pipeline_split=False)


def _spans(hardware, lay: Layout) -> dict:
    kw = dict(tp=lay.tp, cp=1, dp=lay.dp, pp=lay.pp, order=DEFAULT_ORDER)
    return {"tp": group_span(hardware, group="tp", ep=1, **kw), "pp": group_span(hardware, group="pp", ep=1, **kw),
            "ep": group_span(hardware, group="ep", ep=lay.ep, **{**kw, "dp": max(lay.dp // lay.ep, 1)})}


def _ep_forward_s(model, training, hardware, span, *, tokens, moe_layers):
    """Dispatch + combine all-to-all of `tokens` per rank over the stage's MoE layers (cost/comm.ep_comm)."""
    if not model.is_moe or int(span.size) == 1:
        return np.zeros_like(np.asarray(moe_layers, dtype=float))
    e = training.activation_bytes
    return comm.ep_comm(hardware, span, tokens_per_rank=tokens, hidden_size=model.hidden_size,
                        top_k=model.experts_per_token, num_moe_layers=moe_layers,
                        dispatch_bytes_per_element=training.ep_dispatch_bytes,
                        combine_bytes_per_element=e, load_factor=training.moe_load_factor).forward_s


def _prefill(model, training, hardware, lay, pl, spans, setup) -> dict:
    """Prefill of the batch: n = ⌈B / b⌉ micro-batches of B/n sequences × P tokens; per stage the training
    forward (compute.py basis: layers, embedding) + the last token's LM head + TP and EP forward traffic;
    pipelined over the stages (cost/inference.pipelined_forward_s)."""
    B, P = setup.batch, setup.prompt_tokens
    n = math.ceil(B / min(lay.micro_batch_size, B))
    b = B / n
    tp_, sp = lay.tp, lay.sequence_parallel
    trp = replace(training, seq_length=P)
    basis = layer_basis_times_by_mode(model, trp, hardware, tp=tp_, cp=1, ep=lay.ep, micro_batch_size=b,
                                      modes=("none",), sequence_parallel=sp)["none"]
    col = {name: basis[:, i] for i, name in enumerate(BASIS)}
    f = BASIS_KEYS.index("forward_s")
    head = decode_head(model, training, hardware, tp=tp_, batch=b)
    compute = (pl.dense_layers * col["dense_layer"][f] + pl.moe_layers * col["moe_layer"][f]
               + pl.embedding * col["embedding"][f] + pl.head * head.time_s)
    e = training.activation_bytes
    tp_s = comm.tp_comm(hardware, spans["tp"], hidden_size=model.hidden_size, seq_length=P, micro_batch_size=b,
                        num_layers=pl.layers, bytes_per_element=e, sequence_parallel=sp).forward_s
    ep_s = _ep_forward_s(model, training, hardware, spans["ep"], tokens=b * P / (tp_ if sp else 1),
                         moe_layers=pl.moe_layers)
    p2p = float(comm.pp_comm(hardware, spans["pp"], hidden_size=model.hidden_size, seq_length=P, micro_batch_size=b,
                             bytes_per_element=e, tp=tp_, sequence_parallel=sp).forward_s)
    stage = compute + tp_s + ep_s
    total = float(pipelined_forward_s(stage, p2p, n))
    i = int(np.argmax(stage))  # the busiest stage's breakdown, per micro-batch
    flops = float(prefill_flops(model, training, prompt_tokens=P, batch=B))
    return {"prefill_s": total, "microbatches": n, "micro_batch_size": b, "stage": i, "flops": flops,
            "compute_s": float(compute[i]), "tp_comm_s": float(np.asarray(tp_s)[i]),
            "ep_comm_s": float(np.asarray(ep_s)[i]), "p2p_s": p2p, "stage_s": [float(x) for x in stage],
            "mfu": flops / (total * tp_ * lay.pp * mfu_peak_flops(hardware, training))}


def _decode(model, training, hardware, lay, pl, spans, setup) -> dict:
    """One decode step at the mean context: m = min(pp, B) micro-batches of B/m sequences; per stage the
    layers' rooflines (cost/inference.decode_layer), the head on the last stage, 2 TP all-reduces per
    layer, the EP all-to-all per MoE layer; the period between a sequence's tokens from decode_period_s."""
    B = setup.batch
    m = min(lay.pp, B)
    b = B / m
    c = float(mean_decode_context(setup.prompt_tokens, setup.output_tokens))
    kw = dict(tp=lay.tp, ep=lay.ep, batch=b, context=c, launch_bound=setup.eager_decode)
    dense = decode_layer(model, training, hardware, moe=False, **kw)
    moe = decode_layer(model, training, hardware, moe=True, **kw) if model.is_moe else DecodeCost()
    head = decode_head(model, training, hardware, tp=lay.tp, batch=b)
    per_stage = dense.times(pl.dense_layers) + moe.times(pl.moe_layers) + head.times(pl.head)
    e = training.activation_bytes
    tp_s = comm.tp_comm(hardware, spans["tp"], hidden_size=model.hidden_size, seq_length=1, micro_batch_size=b,
                        num_layers=pl.layers, bytes_per_element=e, sequence_parallel=False).forward_s
    ep_s = _ep_forward_s(model, training, hardware, spans["ep"], tokens=b, moe_layers=pl.moe_layers)
    p2p = float(comm.pp_comm(hardware, spans["pp"], hidden_size=model.hidden_size, seq_length=1, micro_batch_size=b,
                             bytes_per_element=e, tp=lay.tp, scatter_gather=False).forward_s)
    ret = float(C.p2p_s(hardware, 4.0 * b, spans["pp"])) if lay.pp > 1 else 0.0  # int32 token ids back to stage 0
    stage = np.asarray(per_stage.time_s, dtype=float) + tp_s + ep_s
    period, latency = decode_period_s(stage, p2p, ret, m)
    i = int(np.argmax(stage))  # the busiest stage's breakdown
    at = {k: float(np.asarray(getattr(per_stage, k))[i]) for k in DecodeCost.__dataclass_fields__}
    return {"decode_s_per_token": float(period), "latency_s": float(latency), "microbatches": m, "micro_batch_size": b,
            "context_tokens": c, "stage": i, "weight_read_bytes": at["weight_bytes"], "kv_read_bytes": at["kv_bytes"],
            "activation_bytes": at["activation_bytes"], "flops": at["flops"], "memory_s": at["memory_s"],
            "compute_s": at["compute_s"], "tp_comm_s": float(np.asarray(tp_s)[i]),
            "ep_comm_s": float(np.asarray(ep_s)[i]),
            "p2p_s": p2p, "return_s": ret, "bound": "memory" if at["memory_s"] >= at["compute_s"] else "compute",
            "stage_s": [float(x) for x in stage]}


def _memory(model, training, hardware, lay, setup) -> dict:
    """Memory at the end of generation (prompt + output tokens cached) from memory/breakdown.py in
    inference mode, and the largest batch it allows (cost/inference.max_batch_size, binding stage)."""
    B = setup.batch
    trm = replace(training, seq_length=setup.prompt_tokens + setup.output_tokens, global_batch_size=B * lay.dp)
    laym = replace(lay, micro_batch_size=min(lay.micro_batch_size, B))
    res = memory_breakdown(model, trm, laym, hardware, inference=True)
    ov = Overheads.for_stack(training.stack, hardware, inference=True)  # what memory_breakdown counted
    fixed = overhead_bytes(ov, tensor_bytes=0.0, tp=lay.tp, pp=lay.pp, dp=lay.dp, cp=1, ep=lay.ep)
    # context + NCCL buffers + the BLAS workspace (the reserve is the fraction r)
    fixed = float(np.asarray(fixed).ravel()[0]) + ov.blas_workspace_bytes
    st = res.per_stage
    kv_seq = np.array([s.kv_cache_bytes for s in st]) / B
    n, free = max_batch_size(hbm_bytes=hardware.hbm_bytes, weight_bytes=np.array([s.params_bytes for s in st]),
                             activation_bytes=np.array([s.activations_bytes for s in st]), fixed_bytes=fixed,
                             reserve_fraction=ov.allocator_reserve_fraction, kv_bytes_per_sequence=kv_seq)
    i = int(np.argmin(n))
    w = res.worst
    return {"max_batch": int(n[i]) if np.isfinite(n[i]) else None, "kv_cache_bytes_per_sequence": float(kv_seq[i]),
            "kv_free_bytes": float(free[i]), "max_batch_stage": i, "weights_bytes": w.params_bytes,
            "kv_cache_bytes": w.kv_cache_bytes, "peak_bytes": w.peak_bytes, "hbm_bytes": float(hardware.hbm_bytes),
            "fixed_overhead_bytes": fixed, "feasible": res.feasible, "reason": res.reason}


def estimate_inference(model: ModelSpec, training: Training, layout: Layout, hardware,
                       setup: InferenceSetup) -> InferenceEstimate:
    """Prefill, decode, throughput and memory of one replica of `layout` serving `setup` (module docstring). The
    model's multi-token-prediction modules train only: decoding here is one token per step (no speculative
    decoding with them)."""
    validate(model, training, layout)
    model = model.with_(mtp_layers=0)
    lay = inference_layout(layout, model)
    tr = replace(training, dropout=False)
    pl = stage_placement(model, pp=lay.pp, layers_per_stage=lay.layers_per_stage)
    spans = _spans(hardware, lay)
    pre = _prefill(model, tr, hardware, lay, pl, spans, setup)
    dec = _decode(model, tr, hardware, lay, pl, spans, setup)
    mem = _memory(model, tr, hardware, lay, setup)
    B, O, gpus = setup.batch, setup.output_tokens, lay.tp * lay.pp
    tpot = dec["decode_s_per_token"]
    request = pre["prefill_s"] + (O - 1) * tpot
    values = {"context_tokens": setup.prompt_tokens + O, "decode_context_tokens": dec["context_tokens"],
              "eager_decode": setup.eager_decode,
              "prefill_s": pre["prefill_s"], "time_to_first_token_s": pre["prefill_s"], "decode_s_per_token": tpot,
              "time_per_output_token_s": tpot, "decode_latency_s": dec["latency_s"], "request_s": request,
              "tokens_per_s_per_gpu": B * O / request / gpus, "decode_tokens_per_s_per_gpu": B / tpot / gpus,
              "prefill_tokens_per_s_per_gpu": B * setup.prompt_tokens / pre["prefill_s"] / gpus,
              "tokens_per_s": B * O * lay.dp / request, "gpus_per_replica": gpus, "replicas": lay.dp, **mem}
    return InferenceEstimate(setup=setup, layout=lay, values=values,
                             prefill={k: v for k, v in pre.items() if k != "prefill_s"},
                             decode={k: v for k, v in dec.items() if k not in ("decode_s_per_token", "context_tokens")})


def estimate_inference_scenario(scenario, setup: InferenceSetup) -> InferenceEstimate:
    """`estimate_inference` of a loaded Scenario (spec/scenario.py)."""
    if scenario.layout is None:
        raise InputError("the scenario has no [layout]; --inference estimates one layout")
    return estimate_inference(scenario.model, scenario.training, scenario.layout, scenario.hardware, setup)
