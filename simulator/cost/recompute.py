"""What the recompute forward re-runs before each backward, per recompute mode (spec/rules.py RECOMPUTE):
one rule, `recomputed_fraction`, read by the stage times (cost/compute.py) and the hardware FLOPs (flops.py);
the collectives a mode re-runs are comm.py's (`tp_comm`), the bytes it keeps memory/activations.py's."""
from __future__ import annotations

from ..errors import InputError
from ..spec.model import ModelSpec
from ..spec.rules import DEFAULT_RECOMPUTE_MODULES, RECOMPUTE

RECOMPUTE_MODES = RECOMPUTE  # (spec/rules.py, the one list)


def recompute_forward_flops(ops, recompute: str, model: ModelSpec | None = None, flash_attention: bool = True, *,
                            modules=DEFAULT_RECOMPUTE_MODULES, moe_layer: bool = False):
    """FLOPs of the recompute forward before each backward of one layer's `ops` (formulas.md §2.6).

    none: 0; selective: the forward of the ops of `modules` (`module_share`; default the core attention, QKᵀ
    and A·V, Korthikanti et al. 2022 §5); full: the whole layer forward (Narayanan 2021 App.: 72 → 96 per
    layer, not the LM head); op: each op's `recomputed_fraction` of its forward (torchtitan's op-level
    selective AC; `model` needed). `moe_layer`: the ops are an MoE layer's.
    """
    if recompute not in RECOMPUTE_MODES:
        raise InputError(f"recompute must be one of {', '.join(RECOMPUTE_MODES)}, got {recompute!r}")
    return sum(recomputed_fraction(o.name, recompute, model, core_attention=o.core_attention,
                                   flash_attention=flash_attention, modules=modules, moe_layer=moe_layer)
               * o.forward_flops for o in ops)


def module_share(name: str, model: ModelSpec, modules, *, core_attention: bool = False, moe_layer: bool = False,
                 load_factor: float = 1.0) -> float:
    """Share of one layer op's forward that Megatron-Core's selective recompute of `modules` re-runs before the
    op's backward (--recompute-modules; NVIDIA/Megatron-LM d98e8a6, the Transformer Engine layer spec
    models/gpt/gpt_layer_specs.py). GEMMs by name (flops.py), memory-bound ops by group (memory_ops.py):
      core_attn      the core attention (attention ops; without FlashAttention its softmax and dropout);
      mla_up_proj    MLA's up-projections and RoPE (multi_latent_attention.py qkv_up_proj_and_rope_apply):
                     q_up (q_proj without a q LoRA), kv_up, the latent norms fused into them, rope;
      layernorm      the norms that are modules of their own (transformer_layer.py: not an IdentityOp): an MLA
                     layer's input norm and an MoE layer's pre-MLP norm; the TE spec fuses the others into
                     TELayerNormColumnParallelLinear. 'norms' holds a layer's two: ½ each;
      mlp            a dense layer's MLP (up, down, activation, and its pre-MLP norm, fused into fc1: ½ of 'norms');
      moe            an MoE layer's MoE block (router, dispatch, experts and their output bias, shared experts,
                     combine; its pre-MLP norm is the layer's);
      shared_experts the shared experts' GEMMs and their share of the activation bytes, f_sh/(ρ·k·f_e + f_sh);
      moe_act        the routed experts' activation (moe/experts.py CheckpointWithoutOutput), its share
                     ρ·k·f_e/(ρ·k·f_e + f_sh) of the layer's activation bytes (ρ = `load_factor`).
    Everything else (out_proj, qkv_proj, residual adds, the MLA down-projections) is not re-run: 0."""
    m = set(modules)
    if core_attention:
        return 1.0 if "core_attn" in m else 0.0
    mla, moe = model.is_mla, moe_layer and model.is_moe
    if name in ("q_up", "kv_up", "latent_norms") or (name in ("q_proj", "rope") and mla):
        return 1.0 if (mla and "mla_up_proj" in m) else 0.0
    if name == "norms":
        own = ("layernorm" in m) * (float(mla) + float(moe))
        return 0.5 * (own + float("mlp" in m and not moe))
    if name in ("mlp_up", "mlp_down"):
        return 1.0 if "mlp" in m else 0.0
    if name in ("router", "expert_up", "expert_down", "router_softmax_topk", "moe_permute", "expert_bias"):
        return 1.0 if "moe" in m else 0.0
    if name in ("shared_up", "shared_down"):
        return 1.0 if m & {"moe", "shared_experts"} else 0.0
    if name == "mlp_activation":
        if not moe:
            return 1.0 if "mlp" in m else 0.0
        if "moe" in m:
            return 1.0
        routed = float(load_factor) * model.experts_per_token * model.moe_ffn_hidden_size
        share = routed / (routed + model.shared_expert_ffn_hidden_size)
        return ("moe_act" in m) * share + ("shared_experts" in m) * (1.0 - share)
    return 0.0


def recomputed_fraction(name: str, recompute: str, model: ModelSpec | None, *, core_attention: bool = False,
                        flash_attention: bool = True, gemm: bool = True, modules=DEFAULT_RECOMPUTE_MODULES,
                        moe_layer: bool = False, load_factor: float = 1.0) -> float:
    """Share of one layer op's forward that the recompute forward re-runs before the op's backward.

    none 0; full 1; selective: `module_share` of the stack's `modules` (default: 1 for the core attention,
    Korthikanti et al. 2022 §5, else 0).
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
        if tuple(modules) == DEFAULT_RECOMPUTE_MODULES:
            return 1.0 if core_attention else 0.0
        return module_share(name, model, modules, core_attention=core_attention, moe_layer=moe_layer,
                            load_factor=load_factor)
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
