"""RunSpec: the assumptions of a training-run plan (`parasim estimate --tokens`, a scenario's `[run]` table).

The formulas that use them are in `simulator/run_plan.py`; this module holds the inputs, their defaults
and the source of each default. Every value is a finite number > 0; a `[run]` key and its flag share one
name (`usd_per_gpu_hour` = `--usd-per-gpu-hour`).

| key                        | unit          | default                                                        |
|----------------------------|---------------|----------------------------------------------------------------|
| tokens                     | tokens        | required                                                       |
| usd_per_gpu_hour           | USD / GPU-h   | the hardware profile's `[gpu] usd_per_gpu_hour`, else none     |
| checkpoint_interval_h      | hours         | Young's optimum sqrt(2 δ M) (run_plan.young_interval_s)        |
| mtbf_gpu_h                 | GPU-hours     | MTBF_GPU_H, from Llama 3's 54-day interruption count           |
| restart_min                | minutes       | RESTART_MIN                                                    |
| checkpoint_write_gb_per_s  | GB/s per node | CHECKPOINT_WRITE_GB_PER_S, from Llama 3's storage fabric       |
| board_power_w              | W per GPU     | the hardware profile's `[gpu] board_power_w`                   |
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

from ..errors import InputError
from .presets import check_keys

# Mean time between failures of one GPU, in GPU-hours, from Dubey et al. 2024, "The Llama 3 Herd of Models"
# (arXiv 2407.21783), §3.3.4 "Reliability and Operational Challenges": a 54-day snapshot of Llama 3 405B
# pre-training on up to 16,384 H100 GPUs had 466 job interruptions, 419 of them unexpected (about 78 % confirmed
# or suspected hardware). Counting every unexpected interruption as one failure of one GPU [derived]:
#     MTBF_gpu = 16,384 GPUs x 54 days x 24 h / 419 = 50,677 GPU-hours (5.8 years of one GPU),
# i.e. a 16,384-GPU job fails every 50,677 / 16,384 = 3.1 h, the paper's "one failure every three hours".
# The run used "up to" 16,384 GPUs, so the GPU-hours are an upper bound and so is this MTBF (optimistic).
LLAMA3_UNEXPECTED_INTERRUPTIONS, LLAMA3_SNAPSHOT_DAYS, LLAMA3_GPUS, LLAMA3_GPUS_PER_NODE = 419, 54, 16384, 8
MTBF_GPU_H = LLAMA3_GPUS * LLAMA3_SNAPSHOT_DAYS * 24 / LLAMA3_UNEXPECTED_INTERRUPTIONS
MTBF_SOURCE = ("Llama 3 (Dubey et al. 2024, arXiv 2407.21783, §3.3.4): 419 unexpected interruptions in 54 days "
               "on up to 16,384 H100 = 16,384 x 54 x 24 / 419 = 50,677 GPU-hours per failure [derived; an "
               "upper bound: 'up to' 16,384 GPUs]")
# Checkpoint write bandwidth per node, from the same paper, §3.3.1 (Storage): Meta's Tectonic file system
# sustains 2 TB/s (peak 7 TB/s) for the Llama 3 pre-training fabric, whose checkpoint writes "saturate the
# storage fabric for short durations". Shared by the 16,384 / 8 = 2,048 training nodes [derived]:
#     2e12 B/s / 2,048 = 0.977 GB/s per node.
LLAMA3_STORAGE_BYTES_PER_S = 2e12
CHECKPOINT_WRITE_GB_PER_S = LLAMA3_STORAGE_BYTES_PER_S / (LLAMA3_GPUS / LLAMA3_GPUS_PER_NODE) / 1e9
WRITE_SOURCE = ("Llama 3 (arXiv 2407.21783, §3.3.1 Storage): Tectonic sustains 2 TB/s for 16,384 GPUs = "
                "2,048 nodes: 2e12 / 2,048 = 0.977 GB/s per node [derived]; writes are counted as blocking "
                "(no asynchronous checkpointing)")
# Time from an interruption to training again (detect, reschedule, reload the checkpoint, warm up) [assumption]:
# 10 minutes. A check against the same paper: effective training time was above 90 % with 419 interruptions in
# 54 days, so each cost at most 0.1 x 54 x 24 h / 419 = 18.6 min of restart plus lost work; with the defaults
# the paper's layout loses 10 + 2.1 min per interruption and keeps 92.4 % (docs/planning.md).
RESTART_MIN = 10.0
RESTART_SOURCE = ("[assumption] 10 min; consistent with Llama 3's >90 % effective training time (arXiv 2407.21783, "
                  "§3.3.4): at most 0.1 x 54 x 24 h / 419 = 18.6 min of restart plus lost work per interruption")
# tokens: at most 1e18 (64,000 x Llama 3's 15.6e12), so the step count stays an exact int64 even at one token
# per step and every product of the plan stays finite. The price and the board power: at most 1e4 $ per GPU-hour
# and 1e5 W (a thousand times today's rates and boards), so cost and energy stay finite. A checkpoint interval:
# from one second (1/3600 h) to 1e6 h, so the checkpoint count stays finite.
LIMITS = {"tokens": 1e18, "usd_per_gpu_hour": 1e4, "board_power_w": 1e5, "checkpoint_interval_h": 1e6}
MINIMA = {"checkpoint_interval_h": 1 / 3600, "tokens": 1.0}  # (a run trains at least one token)


def check_run_value(value, what: str, key: str, written: str | None = None) -> float:
    """`value` of [run] key `key` as a float if it is a finite number > 0 (and within LIMITS and MINIMA), else
    InputError naming `what` (the key and its file, or the flag) and the value as written (`written`, default its
    repr)."""
    shown = repr(value) if written is None else written
    try:
        ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(float(value)) \
            and value > 0
    except OverflowError:  # an integer too large for a float
        ok = False
    if not ok:
        raise InputError(f"{what} must be a finite number > 0, got {shown}")
    if key in LIMITS and value > LIMITS[key]:
        raise InputError(f"{what} must be <= {LIMITS[key]:g}, got {shown}")
    if key in MINIMA and value < MINIMA[key]:
        raise InputError(f"{what} must be >= {MINIMA[key]:.3g}, got {shown}")
    return float(value)


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """What a run plan assumes beyond the estimate (units in the names). None: the default of the table above
    (run_plan.plan_run applies it and reports its source; a value given is reported as 'given')."""

    tokens: float
    usd_per_gpu_hour: float | None = None
    checkpoint_interval_h: float | None = None
    mtbf_gpu_h: float | None = None
    restart_min: float | None = None
    checkpoint_write_gb_per_s: float | None = None
    board_power_w: float | None = None

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None:
                object.__setattr__(self, f.name, check_run_value(v, f.name, f.name))


RUN_KEYS = tuple(f.name for f in fields(RunSpec))


def run_flag(key: str) -> str:
    """The command-line flag of a [run] key: `usd_per_gpu_hour` -> `--usd-per-gpu-hour`."""
    return "--" + key.replace("_", "-")


def run_table(table, where: str) -> dict:
    """The `[run]` table of a scenario, checked: a table, `tokens` present, no unknown key, every value a
    finite number > 0 (the message names the key, `where` and the value as written)."""
    if not isinstance(table, dict):
        raise InputError(f"run in {where} must be a table [run] (tokens = 15e12, ...)")
    check_keys(table, where=f"[run] of {where}", required=("tokens",), optional=RUN_KEYS)
    return {k: check_run_value(v, f"{k} in [run] of {where}", k) for k, v in table.items()}


# Optional [gpu] keys of a hardware profile for run planning (spec/hardware.py reads them here), each > 0 and
# given with its source key: the board power (W per GPU, the datasheet's maximum) and an on-demand price (USD
# per GPU-hour; no preset sets one: docs/planning.md says why). {value key: its source key}
GPU_RUN_KEYS = {"board_power_w": "board_power_source", "usd_per_gpu_hour": "price_source"}
GPU_RUN_OPTIONAL = tuple(GPU_RUN_KEYS) + tuple(GPU_RUN_KEYS.values())


def gpu_run_values(gpu: dict, where: str) -> tuple[dict, dict]:
    """({key: value}, {key: source}) of the GPU_RUN_KEYS a profile's [gpu] table gives; InputError for a value
    that is not a finite number > 0 or one given without its source (or a source without its value)."""
    values, sources = {}, {}
    for k, src in GPU_RUN_KEYS.items():
        if (k in gpu) != (src in gpu):
            have, lack = (k, src) if k in gpu else (src, k)
            raise InputError(f"missing key {lack!r} in {where} [gpu] (it goes with {have!r})")
        if k in gpu:
            values[k] = check_run_value(gpu[k], f"{where} gpu.{k}", k)
            sources[k] = str(gpu[src])
    return values, sources
