"""What the recompute forward re-runs before each backward, per recompute mode (spec/rules.py RECOMPUTE):
one rule, `recomputed_fraction`, read by the stage times (cost/compute.py) and the hardware FLOPs (flops.py);
the collectives a mode re-runs are comm.py's (`tp_comm`), the bytes it keeps memory/activations.py's."""
from __future__ import annotations

from ..errors import InputError
from ..spec.model import ModelSpec
from ..spec.rules import RECOMPUTE

RECOMPUTE_MODES = RECOMPUTE  # (spec/rules.py, the one list)


def recompute_forward_flops(ops, recompute: str, model: ModelSpec | None = None, flash_attention: bool = True):
    """FLOPs of the recompute forward before each backward (formulas.md §2.6).

    none: 0; selective: the core-attention forward (QKᵀ and A·V, Korthikanti et al. 2022 §5);
    full: the whole layer forward (Narayanan 2021 App.: 72 → 96 per layer, not the LM head);
    op: each op's `recomputed_fraction` of its forward (torchtitan's op-level selective AC; `model` needed).
    """
    if recompute not in RECOMPUTE_MODES:
        raise InputError(f"recompute must be one of {', '.join(RECOMPUTE_MODES)}, got {recompute!r}")
    return sum(recomputed_fraction(o.name, recompute, model, core_attention=o.core_attention,
                                   flash_attention=flash_attention) * o.forward_flops for o in ops)


def recomputed_fraction(name: str, recompute: str, model: ModelSpec | None, *, core_attention: bool = False,
                        flash_attention: bool = True, gemm: bool = True) -> float:
    """Share of one layer op's forward that the recompute forward re-runs before the op's backward.

    none 0; full 1; selective: 1 for the core attention (Korthikanti et al. 2022 §5), else 0.
    op — torchtitan's op-level selective activation checkpointing (torchtitan/distributed/
    activation_checkpoint.py `_save_list`, `_custom_policy`): the outputs of SDPA and of every other
    aten.mm of a TransformerBlock are saved (the mm counter restarts per block), everything else is
    recomputed. A Llama block calls its mms as wq, wk, wv, wo, w1, w3, w2 (separate q/k/v and gate/up
    linears; a GeLU MLP: w1, w2), so the even ones, wk, wo and w3 (GeLU: w2), are recomputed:
      qkv_proj: kv/(q + 2kv) (wk of the fused GEMM);  out_proj: 1;
      mlp_up: ½ with a GLU (w3 of w1|w3), 0 without;  mlp_down: 0 with a GLU (w2, 7th), 1 without (6th);
      FlashAttention: 0 (SDPA saved); unfused attention (bmm, softmax: not in the save list) and every
      memory-bound op (`gemm=False`): 1.
    Modelled for dense MHA/GQA layers (spec/validate.py refuses it for MoE and MLA models)."""
    if recompute == "none":
        return 0.0
    if recompute == "full":
        return 1.0
    if recompute == "selective":
        return 1.0 if core_attention else 0.0
    if core_attention:
        return 0.0 if (flash_attention and gemm) else 1.0
    if not gemm:
        return 1.0
    glu = model.glu_matrices == 3
    share = {"qkv_proj": model.kv_size / (model.q_size + 2.0 * model.kv_size), "out_proj": 1.0,
             "mlp_up": 0.5 if glu else 0.0, "mlp_down": 0.0 if glu else 1.0}.get(name)
    if share is None:
        raise InputError(f"recompute 'op' (torchtitan's op-level selective AC) is modelled for dense MHA/GQA "
                         f"layers; this model's layer has a {name!r} GEMM")
    return share


def recomputed_layer_share(layers, recompute_layers: int):
    """Share of a virtual stage's `layers` that full recompute re-runs: min(N, L)/L for N = `recompute_layers`
    > 0 (Megatron-LM's --recompute-method block: the first N layers of each stage's block are recomputed,
    the others keep their activations), 1 for N = 0 (every layer); 0 for a stage without layers."""
    import numpy as np

    L = np.asarray(layers, dtype=float)
    if not recompute_layers:
        return np.where(L > 0, 1.0, 0.0)
    return np.divide(np.minimum(float(recompute_layers), L), L, out=np.zeros_like(L), where=L > 0)


def every_kth_layer(layers_per_stage: int, k: int) -> int:
    """Layers of a stage that torchtitan's layer-level selective AC recomputes (`selective_ac_option` = k:
    torchtitan/distributed/activation_checkpoint.py `_apply_ac_to_transformer_block` checkpoints every k-th
    block it wraps, counting the stage's blocks from 1): ⌊L/k⌋; as `Layout.recompute_layers` with full
    recompute it times and stores the same (both depend on the count, not on which layers)."""
    return int(layers_per_stage) // int(k) if k >= 1 else 0
