"""What FP8 training changes in the bytes a layer keeps for backward: Transformer Engine's GEMMs keep their
FP8 input, not the bf16 one (per layer per micro-batch; notation as memory/activations.py).

Transformer Engine's `Linear`, `LayerNormLinear` and `GroupedLinear` quantize their input for the FP8 GEMM and,
when the weight needs a gradient, save that quantized input for the weight-gradient GEMM, with only the
column-wise data kept once the forward is done (transformer_engine/pytorch/module/linear.py at v2.10,
"Discard row-wise data since it is not needed in backward pass"; TE 1.x saved the FP8 input or its FP8
transpose, v1.11). The bf16 input is then freed unless another op keeps it. Megatron-Core (NVIDIA/Megatron-LM
d98e8a6) turns this off, keeping the original input instead (`set_save_original_input`), where the bf16 tensor
is kept anyway or is recomputed:
- `linear_proj`: core attention keeps its output O itself (attention.py), for FP8 recipes other than
  delayed scaling (and Transformer Engine >= 2.6); under delayed scaling the projection keeps an FP8 copy of O
  beside it;
- the routed experts' `linear_fc2` under `moe_act` recompute (moe/experts.py, Megatron-LM !3465, 2025-08);
- the GEMMs after a recomputed norm (`layernorm` recompute: `set_for_recompute_input_layernorm`,
  `set_for_recompute_pre_mlp_layernorm`).

torchao's Float8Linear (torchtitan) keeps the high-precision input (float8_linear.py
`matmul_with_hp_or_float8_args`: `ctx.save_for_backward(input_hp, weight_hp_t)`), so nothing changes there:
`Stack.fp8_saved_inputs` says which a stack does.
"""
from __future__ import annotations

import numpy as np

from ..spec.model import ModelSpec
from ..spec.stack_choices import fp8_scale_bytes_per_element
from ..spec.training import Training
from .activations import _regroup, _setup, attention_widths, routed_tokens


def fp8_saved_bytes_per_element(recipe: str) -> float:
    """Bytes per element of a kept FP8 GEMM input: 1 (E4M3 data) plus its column-wise scales,
    `fp8_scale_bytes_per_element` (MXFP8: 1 + 1/32)."""
    return 1.0 + fp8_scale_bytes_per_element(recipe)


def fp8_saved_delta_bytes(model: ModelSpec, training: Training, *, tp, cp, micro_batch_size, sequence_parallel: bool,
                          recompute: str, moe: bool = False, etp=None) -> np.ndarray:
    """Bytes one layer keeps under FP8 training less what `layer_activation_bytes` counts in bf16, for stacks whose
    GEMMs keep their FP8 input (`Stack.fp8_saved_inputs` "quantized"; 0 otherwise, and for recompute 'full' and
    'op', whose kept tensors are the layer input or a policy's outputs). With q = `fp8_saved_bytes_per_element`
    and d = q − e, for Megatron-Core's layer (its TE spec):
      attention   QKV input (TELayerNormColumnParallelLinear's norm output) d·T·h/t_s; under MLA the input norm
                  feeds two down-projections, each keeping an FP8 copy (2q ≈ e: 0), and the up-projections'
                  inputs (their fused latent norms' outputs) d·T·(r_q + r_kv) unless `mla_up_proj` is recomputed;
                  under delayed scaling the output projection's FP8 copy of O, + q·T·o/t;
      dense MLP   fc1 input d·T·h/t_s and fc2 input d·T·f/t, unless `mlp` is recomputed;
      MoE         each routed copy's fc1 input d·h·(u/t) and fc2 input d·f_e/t (ρ·k·T copies: `moe_bytes`), the
                  fc2 input unless `moe_act` is recomputed, neither under `moe`; shared experts: fc1's FP8 copy of
                  the MoE input (kept in bf16 for the router) + q·T·h/t_s unless `layernorm` is recomputed, and
                  the fc2 input d·T·f_sh/t, unless `shared_experts` is recomputed.
    The GLU's 2f-wide input stays in bf16 (Megatron's bias_swiglu keeps it)."""
    t, t_s, T, e = _setup(model, training, tp=tp, cp=cp, micro_batch_size=micro_batch_size,
                          sequence_parallel=sequence_parallel)
    zeros = np.zeros(np.broadcast_shapes(np.shape(t), np.shape(T)))
    stack = training.stack
    if training.precision != "fp8" or stack.fp8_saved_inputs != "quantized" or recompute not in ("none", "selective"):
        return zeros
    q = fp8_saved_bytes_per_element(stack.fp8_recipe)
    d = q - e
    mods = set(stack.recompute_modules) if recompute == "selective" else set()
    h = model.hidden_size
    out = zeros
    if model.is_mla:
        if "mla_up_proj" not in mods:
            out = out + d * T * (model.q_lora_rank + model.kv_lora_rank)
    else:
        out = out + d * T * h / t_s
    if stack.fp8_recipe == "delayed":
        out = out + q * T * attention_widths(model)["o"] / t
    if not (moe and model.is_moe):
        if "mlp" not in mods:
            out = out + d * T * (h / t_s + model.ffn_hidden_size / t)
        return out
    if "moe" in mods:
        return out
    R = routed_tokens(tokens=T, experts_per_token=model.experts_per_token, load_factor=training.moe_load_factor)
    out = out + d * R * h * _regroup(t, etp)
    if "moe_act" not in mods:
        out = out + d * R * model.moe_ffn_hidden_size / t
    f_sh = model.shared_expert_ffn_hidden_size
    if f_sh and "shared_experts" not in mods:
        out = out + (0.0 if "layernorm" in mods else q * T * h / t_s) + d * T * f_sh / t
    return out
