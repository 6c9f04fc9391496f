"""Training and stack settings checked against the model and the layout they run on, beside the rules of
spec/validate.py: the MoE load factors' physical range and the FSDP unit's size. Each rule is one function here;
spec/validate.py runs them (training_problem, validate) and the sweep masks its candidates with `moe_load_fits`
(sweep/enumerate.py, sweep/empty_reason.py).

MoE load (Training.moe_load_factor, what the step time and the busiest rank's memory scale by), with E routed
experts, top-k routing, ep expert-parallel ranks and T tokens per rank and micro-batch (micro_batch_size ·
seq_length / cp; the ep ranks of a group hold different tokens, T·ep in all):

- `moe_imbalance` (dropless: the busiest EP rank's routed token copies over the mean, k·T·ep copies over ep ranks
  = k·T) is at most min(ep, E / k). Its cause bounds it: the busiest rank receives at most every routed token copy
  destined to it. A token picks k distinct experts and the rank holds E/ep of them, so it sends that rank at most
  min(k, E/ep) copies; the T·ep tokens of the group send it T·ep·min(k, E/ep) copies at most, over the mean k·T:
  ep·min(k, E/ep)/k = min(ep, E/k). One rank (ep = 1) holds every copy: at most 1, its load is the mean. Mixtral
  (E = 8, k = 2) on ep = 8: at most 4, every token sending one of its two copies to the same rank.
- `moe_capacity_factor` C (each expert's buffer: C·k·T·ep/E slots, GShard/Switch) is at most E / k: a buffer of
  C·k/E of the group's tokens that holds more than all of them (C·k/E > 1) is larger than any routing can fill
  (an expert receives a token at most once), only padding. And each expert has at least one slot per micro-batch,
  C·k·T·ep/E >= 1: below that the modelled expert is empty (Megatron-Core's get_capacity rounds the capacity up to
  whole tokens) and the step time printed would be that of a layer that routes nothing. How many tokens a C < 1
  drops (its effect on the loss) is not modelled either way: docs/compute.md times the C·k·T·e/E slots only.
"""
from __future__ import annotations

import numpy as np

from .model import ModelSpec
from .training import Training


def moe_limits(model: ModelSpec, training: Training, *, ep, cp, micro_batch_size):
    """(largest moe_imbalance, smallest and largest moe_capacity_factor) of an MoE `model` on the layouts
    (ep, cp, micro_batch_size: scalars or arrays) by the module's rules."""
    E, k = float(model.num_experts), float(model.experts_per_token)
    ep = np.asarray(ep, dtype=float)
    tokens = np.asarray(micro_batch_size, dtype=float) * training.seq_length / np.asarray(cp, dtype=float)
    return np.minimum(ep, E / k), E / (k * tokens * ep), E / k


def moe_load_fits(model: ModelSpec, training: Training, *, ep, cp, micro_batch_size) -> np.ndarray:
    """True where `training`'s MoE load factor lies in its range on the layouts (`moe_limits`; a sweep's
    candidates); all True for a dense model or the defaults (dropless, uniform routing)."""
    shape = np.broadcast(np.asarray(ep), np.asarray(cp), np.asarray(micro_batch_size)).shape
    if not model.is_moe:
        return np.ones(shape, dtype=bool)
    imbalance, low, high = moe_limits(model, training, ep=ep, cp=cp, micro_batch_size=micro_batch_size)
    C, rho = training.moe_capacity_factor, training.moe_imbalance
    ok = (rho <= imbalance) & ((C == 0) | ((C >= low) & (C <= high)))
    return np.broadcast_to(ok, shape)


def moe_factor_problem(model: ModelSpec, training: Training) -> str:
    """Why `training`'s MoE load factor cannot occur on `model` on any layout ('' when it can): a moe_imbalance or a
    moe_capacity_factor above num_experts / top-k (the module's rules at their widest, ep = E)."""
    if not model.is_moe:
        return ""
    E, k, C = model.num_experts, model.experts_per_token, training.moe_capacity_factor
    if training.moe_imbalance > E / k:
        return (f"moe_imbalance {training.moe_imbalance:g} is more than num_experts / top-k = {E}/{k} = {E / k:g} "
                f"(the busiest expert-parallel rank receives at most every routed token copy destined to it)")
    if C > E / k:
        return (f"moe_capacity_factor {C:g} is more than num_experts / top-k = {E}/{k} = {E / k:g}: each expert's "
                f"buffer would hold more than every token (0: dropless)")
    return ""


def moe_load_problem(model: ModelSpec, training: Training, *, ep: int, cp: int = 1, micro_batch_size: int = 1) -> str:
    """Why `training`'s MoE load factor cannot occur on `model` with the layout's ep, cp and micro-batch ('' when
    it can): the module's rules, the message naming the setting, its value and the bound's terms."""
    if not model.is_moe or moe_load_fits(model, training, ep=ep, cp=cp, micro_batch_size=micro_batch_size):
        return ""
    problem = moe_factor_problem(model, training)
    if problem:
        return problem
    imbalance, low, _ = (float(x) for x in moe_limits(model, training, ep=ep, cp=cp, micro_batch_size=micro_batch_size))
    E, k, C = model.num_experts, model.experts_per_token, training.moe_capacity_factor
    if training.moe_imbalance > imbalance:
        return (f"moe_imbalance {training.moe_imbalance:g} is more than ep({ep}) allows: at most min(ep, num_experts "
                f"/ top-k) = min({ep}, {E}/{k}) = {imbalance:g} (the busiest expert-parallel rank receives at most "
                f"every routed token copy destined to it)")
    tokens = micro_batch_size * training.seq_length // cp
    return (f"moe_capacity_factor {C:g} leaves each expert {C * k * tokens * ep / E:.3g} token slots per "
            f"micro-batch (C x top-k {k} x {tokens} tokens x ep({ep}) / {E} experts): at least 1 is needed, "
            f"C >= {low:.3g} (0: dropless)")


def fsdp_unit_problem(model: ModelSpec, training: Training) -> str:
    """Why the stack's FSDP unit cannot be formed from `model`'s layers ('' when it can): a unit of more layers
    than the model has is the whole model (the same memory and time as its layer count), so a larger value is a
    slip, refused as recompute_layers is."""
    n = training.stack.fsdp_unit_layers
    if n > model.num_layers:
        return f"fsdp_unit_layers {n} is more than the model's {model.num_layers} layers"
    return ""
