"""Layout rules written once: the allowed values of each categorical field, the upper bound of each
count (`BOUNDS`) and the ZeRO/FSDP sharding degrees. Every module that checks a choice or a count, or
shards a state, calls these.

The divisibility rules between model, training and layout live in `spec/validate.py` (vectorised over
sweep candidates); the rules of each pipeline schedule in its `ScheduleFamily` (simulator/schedules).
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..errors import InputError, check_positive
from .efficiency import is_finite_number

# none | selective (Megatron: the core attention) | full (every layer) | op (torchtitan's op-level selective
# AC: SDPA and every other matmul saved, the rest recomputed; cost/flops.py op_sac_recompute_fraction)
RECOMPUTE = ("none", "selective", "full", "op")
# What 'selective' recomputes, by module: Megatron-Core's --recompute-modules (TransformerConfig.recompute_modules,
# NVIDIA/Megatron-LM d98e8a6 transformer_config.py; default ["core_attn"]) less the modules of architectures
# parasim does not model (gdn_norm_out, gdp_in_proj, gdp_qkv, mhc). Stack.recompute_modules holds a stack's;
# cost/recompute.py `module_share` what each re-runs, memory/activations.py `module_recompute_bytes` what each frees.
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
DEFAULT_RECOMPUTE_MODULES = ("core_attn",)
ZERO_STAGES = (0, 1, 2, 3)
CP_ALGORITHMS = ("ring", "ulysses")
DP_MODES = ("ddp", "dataparallel", "async")  # DDP (default), single-process DataParallel, asynchronous DP

# The largest accepted value of each count: (limit, what it counts). Far beyond any real job (the largest
# runs: ~1e5 GPUs, 1e6-token contexts, 1e4-way DP), yet low enough that every product the simulator forms
# (tokens per step x hidden size x bytes, ranks x degrees) stays exact in float64 and int64: past them a
# value silently wrapped or overflowed (issue 24: seq_length = 1e30 printed negative GiB). Checked where the
# value is read (spec/training.py, spec/layout.py, spec/hardware.py) by `check_count`, whose message names
# the key, the value as written and the limit.
BOUNDS = {
    "seq_length": (2**24, "tokens"),
    "global_batch_size": (2**31, "sequences"),
    "micro_batch_size": (2**31, "sequences"),
    "num_gpus": (2**20, "GPUs"),
    "dp": (2**20, "data-parallel replicas"),
    "shard_group_size": (2**20, "data-parallel replicas"),
    "tp": (2**16, "ranks"),
    "pp": (2**16, "pipeline stages"),
    "cp": (2**16, "ranks"),
    "ep": (2**16, "ranks"),
    "etp": (2**16, "ranks"),
    "vpp": (2**16, "chunks per pipeline rank"),
    "layers_per_stage": (2**20, "layers"),
    "recompute_layers": (2**20, "layers"),
    "recompute_group": (2**20, "layers"),
    "gpus_per_node": (2**20, "GPUs"),
    "nvlink_domain_gpus": (2**20, "GPUs"),
    "nics_per_node": (2**16, "NICs"),
    "nodes_per_leaf": (2**20, "nodes"),
    "sm_count": (2**16, "streaming multiprocessors"),
}


def choice_error(name: str, value, allowed) -> InputError:
    """The one message for a value outside its choices: `name must be one of a, b, c, got 'x'`."""
    return InputError(f"{name} must be one of {', '.join(map(str, allowed))}, got {value!r}")


def check_count(name: str, value, *, label: str | None = None) -> int:
    """`value` as an int if it is a whole number from 1 to the bound of `name` in BOUNDS, else InputError
    naming `label` (default `name`), the value as written and the limit."""
    n = check_positive(label or name, value, integer=True)
    limit, unit = BOUNDS[name]
    if n > limit:
        raise InputError(f"{label or name} must be <= {limit} (2**{limit.bit_length() - 1} {unit}), got {value!r}")
    return n


def check_written_integer(value, what: str) -> None:
    """InputError naming `what` and the value as written unless a number read from a file for an integer key is
    written as an integer, or a list of them (8, not 8.0: TOML reads 8.0 as a float; a count, a degree or a stage is
    written as an integer, as a hardware profile's counts are). Only the form: the ranges are the readers' checks."""
    items = value if isinstance(value, list) else [value]
    if any(isinstance(v, float) for v in items):
        what_is = "a list of integers" if isinstance(value, list) else "an integer"
        raise InputError(f"{what} must be {what_is}, written without a decimal point, got {value!r}")


def check_choice(name: str, value, allowed) -> None:
    """InputError (`choice_error`) unless `value` is one of `allowed`."""
    if isinstance(value, bool) or value not in allowed:
        raise choice_error(name, value, allowed)


def check_choices(name: str, values, allowed) -> None:
    """`check_choice` for a scalar or every distinct element of an array (the first bad one, sorted)."""
    if np.ndim(values) == 0:
        check_choice(name, values.item() if isinstance(values, np.ndarray) else values, allowed)
        return
    from ..dedup import factorize

    bad = [v for v in factorize(np.asarray(values).ravel())[1].tolist() if v not in allowed or isinstance(v, bool)]
    if bad:
        raise choice_error(name, sorted(bad, key=str)[0], allowed)


def check_zero(zero, *, scalar: bool = False) -> None:
    """ZeRO stage 0-3 (a scalar or an array of them; one stage only when `scalar`: a layout's, where a list,
    even an empty one, is no stage)."""
    z = np.asarray(zero)
    if z.dtype == bool or (z.ndim == 0 and isinstance(zero, bool)) or not np.isin(z, ZERO_STAGES).all() \
            or (scalar and z.ndim):
        shown = z.ravel()[:4].tolist() if z.ndim else zero
        raise InputError(f"zero must be 0, 1, 2 or 3, got {shown!r}")


def shard_degrees(*, dp, cp, ep, shard_group_size: int | None = None, tp=1, etp=None) -> tuple[np.ndarray, np.ndarray]:
    """(d, d_e): the ZeRO/FSDP sharding degree of dense and of expert states, in memory and in time.

    d = (shard_group_size or dp) · cp: the data-parallel shard group, CP ranks included (Megatron's
        distributed optimizer shards over dp×cp; FSDP HYBRID_SHARD shards inside a group of
        `shard_group_size` replicas and replicates across groups; torchtitan puts CP in the FSDP mesh).
    d_e = max(d / ep, 1): a routed expert lives on one rank of each expert-parallel group of ep ranks,
        so within a shard group of d ranks each expert has d / ep copies, and its states shard over
        those (Megatron "expert data parallel" = dp·cp/ep without HSDP). When ep > d the EP group spans
        several shard groups: every copy is then alone in its shard group and nothing shards (1).
        With an expert tensor-parallel degree etp other than tp, the expert layers regroup a stage's tp·d ranks
        as etp × ep × expert-dp (Megatron-Core's expert RankGenerator, parallel_state.py): each expert shard
        has tp·d/(etp·ep) copies, d_e = max(d·(tp/etp) / ep, 1) (etp = tp: the rule above).
    Worked example (tests/test_rules.py): dp = 8, cp = 1, ep = 4, HSDP shard group 2: d = 2; a shard
    group of 2 ranks holds experts of 2 different EP ranks, one copy each, so d_e = max(2/4, 1) = 1, not
    dp·cp/ep = 2 (which would shard across replicas that HSDP keeps whole).
    """
    g = np.asarray(dp if shard_group_size is None else shard_group_size, dtype=float)
    d = g * np.asarray(cp, dtype=float)
    regroup = 1.0 if etp is None else np.asarray(tp, dtype=float) / np.asarray(etp, dtype=float)
    return d, np.maximum(d * regroup / np.asarray(ep, dtype=float), 1.0)


POSITIVE, NONNEGATIVE = "a finite number > 0", "a finite number >= 0"
# The range of each hardware-profile number as written (its TOML key: (lowest, highest)): far beyond any real GPU,
# node or network both ways, yet close enough that a step time or a memory total formed from them stays a number
# a person can read (issue 24's fuzzing: peak_tflops 1e-300 printed a 305-digit step time, blas_workspace_mib 1e300
# a negative GiB). Checked by `check_number`'s `bounds`. leaf_oversubscription is a ratio of a leaf's downlinks to
# its uplinks: 1 is full bisection, and below 1 the spine would carry more than the NICs can send.
HARDWARE_RANGES = {
    "hbm_gb": (0.1, 1e5), "hbm_usable_mib": (100.0, 1e8), "hbm_gb_per_s": (1.0, 1e6), "blas_workspace_mib": (0.0, 1e5),
    "peak_tflops": (1e-3, 1e6), "nvlink_gb_per_s": (0.1, 1e6), "nvlink_link_gb_per_s": (0.1, 1e6),
    "nvlink_latency_us": (0.0, 1e6), "nvls_latency_us": (0.0, 1e6), "nvls_min_bytes": (0.0, 1e15),
    "nic_gbit_per_s": (0.1, 1e7), "ib_latency_us": (0.0, 1e6), "leaf_oversubscription": (1.0, 1e3),
    "pcie_gb_per_s": (0.01, 1e6), "host_mem_gb_per_s": (0.01, 1e6), "host_mem_gb": (0.1, 1e8)}


def check_text(value, what: str, *, empty: bool = False) -> str:
    """`value` if it is a text (non-empty unless `empty`), else InputError naming `what` and the value as written: a
    name or description of a file's table (a number there is a typing slip, not a name)."""
    if not isinstance(value, str) or not (empty or value.strip()):
        raise InputError(f"{what} must be a{'' if empty else ' non-empty'} text, got {value!r}")
    return value


def check_fraction(value, what: str, *, below_one: bool = False) -> float:
    """`value` as a float if it is a finite number in [0, 1] ([0, 1) with `below_one`), else InputError naming
    `what` and the value as written (an overlap share, a slowdown, a relative spread)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not is_finite_number(value) \
            or not (0 <= value < 1 if below_one else 0 <= value <= 1):
        raise InputError(f"{what} must be in [0, 1{')' if below_one else ']'}, got {value!r}")
    return float(value)


def check_number(value, what: str, rule: str = POSITIVE, factor: float = 1.0, bounds=None) -> float:
    """`value` times `factor` (its unit in SI) if `value` meets `rule` (POSITIVE or NONNEGATIVE), lies in `bounds`
    ((lowest, highest) as written: HARDWARE_RANGES) and the product is finite, else InputError naming `what` and the
    value as written."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not is_finite_number(value) \
            or not (value > 0 if rule == POSITIVE else value >= 0):
        raise InputError(f"{what} must be {rule}, got {value!r}")
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        raise InputError(f"{what} must be in [{bounds[0]:g}, {bounds[1]:g}], got {value!r}")
    if not math.isfinite(v := float(value) * factor):
        raise InputError(f"{what} is too large, got {value!r}")
    return v
