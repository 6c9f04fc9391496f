"""KV cache for inference (bytes), formulas.md §3.7.

Per token per layer (elements):
- MHA/GQA/MQA: 2·n_kv·d_h (K and V), split over TP as ceil(n_kv/t) heads per rank — each rank holds
  n_kv/t heads when n_kv ≥ t and one replicated head when t > n_kv (vLLM replicates KV heads then);
- MLA (DeepSeek-V2 Table 1): the compressed latent plus the decoupled RoPE key, r_kv + d_rope,
  replicated on every TP rank (the latent is shared by all heads).
Per rank: layers on the stage × tokens (batch · context / cp) × elements × bytes per element.
DeepSeek-V3 check: 61 · (512 + 64) · 2 B = 70,272 B per token; Llama-3-70B: 80·2·8·128·2 = 320 KiB.
"""
from __future__ import annotations

import numpy as np

from ..spec.model import ModelSpec


def kv_elements_per_token_per_layer(model: ModelSpec, *, tp) -> np.ndarray:
    """Cached elements per token per layer on one TP rank (see module docstring)."""
    t = np.asarray(tp, dtype=float)
    if model.is_mla:
        return np.zeros_like(t) + (model.kv_lora_rank + model.qk_rope_head_dim)
    heads = np.ceil(model.num_kv_heads / t)
    return 2.0 * heads * model.head_dim


def kv_cache_bytes(model: ModelSpec, *, layers, batch, context: int, tp, cp=1, dtype_bytes: int = 2) -> np.ndarray:
    """KV cache bytes per rank per stage: layers_stage · batch · context/cp · elements · bytes.

    `layers` has one entry per stage (shape (pp,)); tp, cp, batch scalars or arrays of shape (N,);
    returns (pp,) or (N, pp). Equation: KV = 2·L·n_kv·d_h·S·B·bytes (formulas.md §3.7) for t = cp = 1.
    """
    el = kv_elements_per_token_per_layer(model, tp=tp)[..., None]
    tokens = (np.asarray(batch, dtype=float) * model.attended_keys(context) / np.asarray(cp, dtype=float))[..., None]
    return np.asarray(layers, dtype=float) * tokens * el * dtype_bytes
