"""Serving sweep: every layout of N GPUs that can serve the model and every batch per replica the KV cache
allows, each estimated by `simulator.inference.estimate_inference` (prefill, decode, memory: the one
inference path), ranked by output tokens/s per GPU among those meeting the latency limits.

A serving layout is a replica of tp x pp GPUs holding the whole model (ep = 1: a MoE's experts are split by
tp inside the replica; expert parallelism across replicas is not enumerated), with N / (tp x pp) replicas.
Batches per replica: 1, 2, 4, ... up to the replica's `max_batch` and `max_batch`
itself (static batching, inference.py's module docstring). A row that cannot run (a tp that does not divide
the heads, a batch over `max_batch`, a limit missed) is kept with its reason, as the training sweep does.
"""
from __future__ import annotations

import math

import pandas as pd

from ..errors import InputError
from ..inference import InferenceSetup, estimate_inference
from ..spec.layout import Layout

COLUMNS = ("label", "tp", "pp", "ep", "replicas", "batch", "feasible", "reason", "tokens_per_s_per_gpu",
           "tokens_per_s", "time_to_first_token_s", "time_per_output_token_s", "request_s", "max_batch")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def serving_layouts(model, num_gpus: int, gpus_per_node: int) -> list[Layout]:
    """Replica shapes tp x pp with tp within one node (decode's all-reduces are latency-bound: NVLink) and
    pp no larger than the layers, the rest of the N GPUs as replicas."""
    out = []
    for tp in _divisors(num_gpus):
        if tp > gpus_per_node:
            continue
        for pp in _divisors(num_gpus // tp):
            if pp > model.num_layers:
                continue
            out.append(Layout(num_gpus=num_gpus, tp=tp, pp=pp, dp=num_gpus // (tp * pp)))
    return out


def _batches(max_batch: int, limit: int | None) -> list[int]:
    """1, 2, 4, ... below max_batch, and max_batch itself (capped by `limit`)."""
    top = max(1, min(max_batch, limit or max_batch))
    return sorted({2 ** k for k in range(int(math.log2(top)) + 1)} | {top})


def _row(lay: Layout, batch: int, est=None, reason: str = "") -> dict:
    base = {"label": f"TP{lay.tp}-PP{lay.pp} x{lay.dp}", "tp": lay.tp, "pp": lay.pp, "ep": lay.ep,
            "replicas": lay.dp, "batch": batch}
    if est is None:
        return {**base, "feasible": False, "reason": reason}
    return {**base, "feasible": not reason, "reason": reason,
            **{k: float(getattr(est, k)) for k in COLUMNS[8:-1]}, "max_batch": int(est.max_batch)}


def _limits(est, max_ttft_s, max_tpot_s) -> str:
    """Why a fitting row misses the latency limits ('' when it meets them)."""
    if max_ttft_s is not None and est.time_to_first_token_s > max_ttft_s:
        return f"time to first token {est.time_to_first_token_s * 1e3:.1f} ms > {max_ttft_s * 1e3:g} ms"
    if max_tpot_s is not None and est.time_per_output_token_s > max_tpot_s:
        return f"time per output token {est.time_per_output_token_s * 1e3:.2f} ms > {max_tpot_s * 1e3:g} ms"
    return ""


def run_serving_sweep(model, training, hardware, num_gpus: int, *, prompt_tokens: int, output_tokens: int,
                      max_batch: int | None = None, max_ttft_s: float | None = None,
                      max_tpot_s: float | None = None) -> pd.DataFrame:
    """Every serving layout x batch of `num_gpus` GPUs, ranked: rows that fit and meet the limits first, by
    output tokens/s per GPU (then lower time per output token); a `rank` column 1..n."""
    for name, v in (("max_ttft_s", max_ttft_s), ("max_tpot_s", max_tpot_s)):
        if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise InputError(f"{name} must be a finite number > 0, got {v!r}")
    rows = []
    for lay in serving_layouts(model, num_gpus, hardware.gpus_per_node):
        try:
            one = InferenceSetup(batch=1, prompt_tokens=prompt_tokens, output_tokens=output_tokens)
            first = estimate_inference(model, training, lay, hardware, one)
        except InputError as exc:
            rows.append(_row(lay, 1, reason=str(exc).splitlines()[0]))
            continue
        if first.max_batch < 1:
            rows.append(_row(lay, 1, first, "the weights leave no room for one sequence's KV cache"))
            continue
        for b in _batches(int(first.max_batch), max_batch):
            est = first if b == 1 else estimate_inference(
                model, training, lay, hardware, InferenceSetup(batch=b, prompt_tokens=prompt_tokens,
                                                               output_tokens=output_tokens))
            rows.append(_row(lay, b, est, _limits(est, max_ttft_s, max_tpot_s)))
    df = pd.DataFrame(rows, columns=COLUMNS)
    df = df.sort_values(["feasible", "tokens_per_s_per_gpu", "time_per_output_token_s"],
                        ascending=[False, False, True], kind="stable").reset_index(drop=True)
    df.insert(0, "rank", range(1, len(df) + 1))
    return df
