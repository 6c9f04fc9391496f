"""Per-row throughput columns of evaluated layouts (split from kernel.py): tokens/s, model and hardware
TFLOP/s per GPU, MFU and HFU, the hardware FLOPs counting the recompute each row runs."""
from __future__ import annotations

import numpy as np

from .cost.compute import mfu_peak_flops
from .cost.flops import step_flops
from .cost.recompute import recomputed_layer_share
from .dedup import categories


def recomputed_share(pt, rec, recompute_layers: int) -> np.ndarray:
    """(N,) share of each row's layers its recompute re-runs: 1 (all, or none at all), or with
    recompute_layers N and full recompute Σ_stages min(N, L_j) / Σ L_j (cost/recompute.py)."""
    if not recompute_layers:
        return np.ones(len(rec))
    layers = pt.layers
    share = (recomputed_layer_share(layers, recompute_layers) * layers).sum(axis=1) / np.maximum(layers.sum(axis=1), 1)
    return np.where(np.asarray(rec) == "full", share, 1.0)


def throughput(model, training, hardware, num_gpus, rec, rec_c, step, share) -> dict:
    """tokens/s, model and hardware TFLOP/s per GPU, MFU and HFU of rows with step times `step`: PaLM
    App. B, model FLOPs (no recompute) or executed FLOPs per step / (step × GPUs × dense peak); `share`:
    the part of the recompute's FLOPs the row runs (recomputed_share)."""
    model_flops, hw_flops = np.zeros(len(step)), np.zeros(len(step))
    for _, idx in categories(rec_c):
        model_flops[idx], hw_flops[idx] = step_flops(model, training, recompute=rec[idx[0]])
        if rec[idx[0]] != "none":
            none = step_flops(model, training, recompute="none")[1]
            hw_flops[idx] = none + share[idx] * (hw_flops[idx] - none)
    peak_flops = mfu_peak_flops(hardware, training)
    return {"tokens_per_s": training.global_batch_size * training.seq_length / step,
            "model_tflops_per_gpu": model_flops / (step * num_gpus) / 1e12,
            "hardware_tflops_per_gpu": hw_flops / (step * num_gpus) / 1e12,
            "mfu": model_flops / (step * num_gpus * peak_flops),
            "hfu": hw_flops / (step * num_gpus * peak_flops)}
