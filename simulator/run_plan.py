"""Run planning: how long, how many GPU-hours, how much money and energy a training run on N tokens takes
(`parasim estimate --tokens N`), from one layout's step time and the assumptions of a RunSpec (spec/run.py).

Notation (SI inside; hours, days, USD and MWh only in `RunPlan.to_dict`):

| symbol | meaning                                                      | where it comes from                  |
|--------|--------------------------------------------------------------|--------------------------------------|
| D      | tokens to train on                                           | --tokens, [run] tokens               |
| B, S   | global batch (sequences), sequence length (tokens)           | the scenario                         |
| t_step | step time (s)                                                | the estimate                         |
| N, g   | GPUs, GPUs per node                                          | the scenario, the hardware profile   |
| Ψ      | parameters (all experts of an MoE)                           | the model                            |
| P, K   | bytes per parameter of weights and of optimizer state        | Training.param_bytes, optimizer_bytes|
| b      | checkpoint write bandwidth per node (B/s)                    | RunSpec.checkpoint_write_gb_per_s    |
| M_gpu  | mean time between failures of one GPU (s)                    | RunSpec.mtbf_gpu_h                   |
| R      | restart time after an interruption (s)                       | RunSpec.restart_min                  |
| τ      | compute time between two checkpoints (s)                     | RunSpec.checkpoint_interval_h / Young|
| W      | board power of one GPU (W)                                   | profile [gpu] board_power_w          |

Every interruption is taken to stop the whole job (synchronous training: "a single GPU failure may require a
restart of the entire job", Llama 3 §3.3.4) and to arrive at random (Poisson) times, as in Young 1974 and
Daly 2006. Checkpoint writes are counted as blocking the training (no asynchronous checkpointing).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .errors import InputError
from .spec.run import (CHECKPOINT_WRITE_GB_PER_S, MTBF_GPU_H, MTBF_SOURCE, RESTART_MIN, RESTART_SOURCE,
                       WRITE_SOURCE, RunSpec)

HOUR, DAY, J_PER_MWH = 3600.0, 86400.0, 3.6e9
ENERGY_MODEL = ("GPU boards at their board power for the whole wall-clock time, the convention of Meta's Llama 3 "
                "model card (GPU-hours x 700 W 'peak power capacity per GPU device'); an upper bound: an 8 x H100 "
                "node training Llama 2 13B drew at most 8.4 kW of its rated 10.2 kW (Latif et al. 2024, arXiv "
                "2412.08602), compute-heavy training averaged 76 % of it (Newkirk et al. 2025, arXiv 2506.14551); "
                "CPUs, NICs, switches, storage and cooling (PUE) not included")


def steps_for_tokens(tokens: float, tokens_per_step: int) -> int:
    """Optimizer steps to see `tokens`: steps = ⌈D / (B·S)⌉ (the last step is a whole batch), in integers so
    that it stays exact for any D up to spec.run.LIMITS."""
    return -(-math.ceil(tokens) // tokens_per_step)


def checkpoint_bytes(params: float, param_bytes: float, optimizer_bytes: float) -> float:
    """Bytes of one checkpoint: C = Ψ·(P + K), the weights in the training dtype plus the optimizer state
    (mixed-precision Adam: 2 + 12 = 14 bytes per parameter, ZeRO §3.1's P + K). Computed from the parameter
    count, not from the estimate's per-GPU memory: a checkpoint stores each tensor once, whereas the per-GPU
    numbers count every data-parallel replica (ZeRO-0/1 weights) again. Gradients are not saved."""
    return params * (param_bytes + optimizer_bytes)


def checkpoint_write_s(ckpt_bytes: float, num_gpus: int, gpus_per_node: int, bytes_per_s_per_node: float) -> float:
    """Time to write one checkpoint: δ = C / (⌈N / g⌉ · b), every node writing its shard in parallel
    (distributed checkpointing: torch.distributed.checkpoint, Megatron dist-ckpt)."""
    return ckpt_bytes / (math.ceil(num_gpus / gpus_per_node) * bytes_per_s_per_node)


def young_interval_s(write_s: float, job_mtbf_s: float) -> float:
    """Young's optimum compute time between checkpoints: τ = sqrt(2·δ·M) with M = M_gpu / N the job's mean
    time between failures (J. W. Young 1974, "A first order approximation to the optimum checkpoint interval",
    Commun. ACM 17(9)). It minimises the time lost to writes (δ/τ per unit of work) plus the work lost to
    failures (τ/(2M)); re-derived by Saxena et al. 2024 (arXiv 2410.18124)."""
    return math.sqrt(2.0 * write_s * job_mtbf_s)


def wall_clock(train_s: float, interval_s: float, write_s: float, restart_s: float, job_mtbf_s: float) -> dict:
    """Expected wall-clock time of `train_s` seconds of failure-free training.

        checkpoints  n = ⌊T / τ⌋, each blocking for δ:          T₀ = T + n·δ
        loss per interruption   c = R + (min(τ, T) + δ) / 2     (restart plus, on average, half a segment of
                                                                  work and write since the last checkpoint:
                                                                  Young 1974; R as in Daly 2006, FGCS 22(3))
        interruptions arrive at 1/M over the whole wall clock:   T_wall = T₀ + (T_wall / M)·c
                                                             =>  T_wall = T₀ / (1 - c/M)     [derived]
    InputError when c >= M: an interruption every M seconds costs more than M, the run never finishes.
    Returns checkpoints, checkpoint_s (n·δ), interruptions (T_wall / M), failure_s and wall_s."""
    n = math.floor(train_s / interval_s)
    base_s = train_s + n * write_s
    loss_s = restart_s + (min(interval_s, train_s) + write_s) / 2.0
    if loss_s >= job_mtbf_s:
        raise InputError(f"the run never finishes: an interruption every {job_mtbf_s / HOUR:.3g} h (--mtbf-gpu-h / "
                         f"GPUs) costs {loss_s / HOUR:.3g} h (restart + half a checkpoint interval); checkpoint "
                         "more often (--checkpoint-interval-h) or use fewer GPUs")
    wall_s = base_s / (1.0 - loss_s / job_mtbf_s)
    return {"checkpoints": n, "checkpoint_s": n * write_s, "interruptions": wall_s / job_mtbf_s,
            "failure_s": wall_s - base_s, "wall_s": wall_s}


def energy_mwh(num_gpus: int, board_power_w: float, wall_s: float) -> float:
    """E = N · W · T_wall, in MWh (1 MWh = 3.6e9 J): every GPU at its board power for the whole run
    (ENERGY_MODEL says why, and what it leaves out)."""
    return num_gpus * board_power_w * wall_s / J_PER_MWH


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """A run's time, cost and energy (SI; `to_dict` converts), with the assumptions behind them."""

    tokens: float
    tokens_per_step: int
    steps: int
    num_gpus: int
    train_s: float
    checkpoint_bytes: float
    checkpoint_write_s: float
    checkpoint_interval_s: float
    checkpoints: int
    checkpoint_s: float
    interruptions: float
    failure_s: float
    wall_s: float
    usd_per_gpu_hour: float | None
    board_power_w: float | None
    assumptions: dict
    layout_problem: str = ""  # why the layout does not fit ('' when it does): a plan for a job that cannot run

    @property
    def gpu_hours(self) -> float:
        """GPU-hours = N · T_wall / 3600: every GPU of the job is held (and paid for) the whole wall clock."""
        return self.num_gpus * self.wall_s / HOUR

    @property
    def usd(self) -> float | None:
        """usd = GPU-hours × price per GPU-hour; None without a price."""
        return None if self.usd_per_gpu_hour is None else self.gpu_hours * self.usd_per_gpu_hour

    @property
    def energy_mwh(self) -> float | None:
        return None if self.board_power_w is None else energy_mwh(self.num_gpus, self.board_power_w, self.wall_s)

    def notes(self) -> dict:
        """{key: why it is null} for `usd` and `energy_mwh` when they are, and 'layout' when it does not fit."""
        out = {"layout": f"does NOT fit ({self.layout_problem}): a plan for a job that cannot run as laid out"} \
            if self.layout_problem else {}
        if self.usd is None:
            out["usd"] = "no price: give --usd-per-gpu-hour (or [run] usd_per_gpu_hour, or [gpu] usd_per_gpu_hour " \
                         "in the hardware profile)"
        if self.energy_mwh is None:
            out["energy_mwh"] = "no board power: give --board-power-w (the hardware profile has no [gpu] board_power_w)"
        return out

    def to_dict(self) -> dict:
        return {"steps": self.steps, "days": self.wall_s / DAY, "gpu_hours": self.gpu_hours, "usd": self.usd,
                "energy_mwh": self.energy_mwh, "tokens": self.tokens,
                "tokens_trained": self.steps * self.tokens_per_step, "train_days": self.train_s / DAY,
                "checkpoint_hours": self.checkpoint_s / HOUR, "failure_hours": self.failure_s / HOUR,
                "expected_interruptions": self.interruptions, "goodput": self.train_s / self.wall_s,
                "checkpoint_bytes": self.checkpoint_bytes, "checkpoint_write_s": self.checkpoint_write_s,
                "checkpoint_interval_h": self.checkpoint_interval_s / HOUR, "checkpoints": self.checkpoints,
                "assumptions": dict(self.assumptions), "notes": self.notes()}


def plan_run(spec: RunSpec, *, step_s: float, tokens_per_step: int, num_gpus: int, gpus_per_node: int,
             ckpt_bytes: float, hardware=None) -> RunPlan:
    """The RunPlan of `spec` for a job whose step takes `step_s` (composes the functions above). Price and
    board power: the spec's, else the hardware profile's [gpu] keys, else None."""
    steps = steps_for_tokens(spec.tokens, tokens_per_step)
    train_s = steps * step_s
    mtbf_h, mtbf_src = _or(spec.mtbf_gpu_h, MTBF_GPU_H, MTBF_SOURCE)
    restart_min, restart_src = _or(spec.restart_min, RESTART_MIN, RESTART_SOURCE)
    write_gb_per_s, write_src = _or(spec.checkpoint_write_gb_per_s, CHECKPOINT_WRITE_GB_PER_S, WRITE_SOURCE)
    write_s = checkpoint_write_s(ckpt_bytes, num_gpus, gpus_per_node, write_gb_per_s * 1e9)
    job_mtbf_s = mtbf_h * HOUR / num_gpus
    given = spec.checkpoint_interval_h is not None
    interval_s = spec.checkpoint_interval_h * HOUR if given else young_interval_s(write_s, job_mtbf_s)
    clock = wall_clock(train_s, interval_s, write_s, restart_min * 60.0, job_mtbf_s)
    price, price_src = _or(spec.usd_per_gpu_hour, *_profile_value(hardware, "usd_per_gpu_hour"))
    power, power_src = _or(spec.board_power_w, *_profile_value(hardware, "board_power_w"))
    assumptions = {
        "mtbf_gpu_h": mtbf_h, "mtbf_source": mtbf_src, "job_mtbf_h": job_mtbf_s / HOUR,
        "restart_min": restart_min, "restart_source": restart_src,
        "checkpoint_write_gb_per_s": write_gb_per_s, "write_source": write_src,
        "checkpoint_contents": "parameters x (weights + optimizer state) bytes, each tensor once "
                               "(run_plan.checkpoint_bytes); writes blocking",
        "checkpoint_interval": "given" if given else "Young 1974 optimum sqrt(2 x write time x job MTBF)",
        "usd_per_gpu_hour": price, "price_source": price_src,
        "board_power_w": power, "power_source": power_src, "energy_model": ENERGY_MODEL}
    return RunPlan(tokens=spec.tokens, tokens_per_step=tokens_per_step, steps=steps, num_gpus=num_gpus,
                   train_s=train_s, checkpoint_bytes=ckpt_bytes, checkpoint_write_s=write_s,
                   checkpoint_interval_s=interval_s, usd_per_gpu_hour=price, board_power_w=power,
                   assumptions=assumptions, **{k: clock[k] for k in ("checkpoints", "checkpoint_s", "interruptions",
                                                                      "failure_s", "wall_s")})


def _or(given, default, source) -> tuple:
    """(value, its source): `given` ('given') when the RunSpec has it, else (`default`, `source`)."""
    return (given, "given") if given is not None else (default, source)


def _profile_value(hardware, key: str) -> tuple:
    """(value, source) of the profile's optional [gpu] `key` (spec/run.py GPU_RUN_KEYS); (None, None) without."""
    value = getattr(hardware, key, None)
    if value is None:
        return None, None
    return value, f"{hardware.name} [gpu]: {hardware.sources.get(key, '')}"


def plan_for_estimate(estimate, spec: RunSpec) -> RunPlan:
    """The RunPlan of an Estimate (simulator/estimate.py): its step time, layout, model and profile; a layout
    that does not fit is planned all the same and says so (RunPlan.layout_problem)."""
    tr, hw = estimate.training, estimate.hardware
    plan = plan_run(spec, step_s=estimate.step_s, tokens_per_step=tr.tokens_per_step,
                    num_gpus=estimate.layout.num_gpus, gpus_per_node=hw.gpus_per_node,
                    ckpt_bytes=checkpoint_bytes(estimate.model.total_params(), tr.param_bytes, tr.optimizer_bytes),
                    hardware=hw)
    return plan if estimate.feasible else replace(plan, layout_problem=estimate.reason or "memory")
