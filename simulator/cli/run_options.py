"""`parasim estimate --tokens N ...`: the run-plan flags (one per [run] key, spec/run.py), the RunSpec they
and a scenario's [run] table give, and the plan's lines in the table output."""
from __future__ import annotations

import click

from ..errors import InputError
from ..report.tables import shorten_words
from ..spec.run import RUN_KEYS, RunSpec, check_run_value, run_flag

HELP = {
    "tokens": "plan a training run on this many tokens (e.g. 15e12): steps, days, GPU-hours, USD, MWh (JSON 'run')",
    "usd_per_gpu_hour": "price per GPU-hour (default: the profile's [gpu] usd_per_gpu_hour; the presets set none, "
                        "so usd is null without it)",
    "checkpoint_interval_h": "hours of training between checkpoints (default: Young's optimum sqrt(2 x write time "
                             "x job MTBF))",
    "mtbf_gpu_h": "mean time between failures of one GPU, GPU-hours (default 50,677: Llama 3, 419 unexpected "
                  "interruptions in 54 days on 16,384 H100)",
    "restart_min": "minutes from an interruption to training again (default 10, an assumption)",
    "checkpoint_write_gb_per_s": "checkpoint write bandwidth per node, GB/s (default 0.977: Llama 3's 2 TB/s "
                                 "storage over 2,048 nodes)",
    "board_power_w": "board power per GPU, W, for the energy (default: the profile's [gpu] board_power_w)",
}


def run_options(fn):
    """Decorate a command with one option per [run] key (`--tokens`, `--usd-per-gpu-hour`, ...), read as text
    so that an error shows the value as written."""
    for key in reversed(RUN_KEYS):
        fn = click.option(run_flag(key), key, type=str, default=None, help=HELP[key])(fn)
    return fn


def _flag_value(key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = None
    return check_run_value(value, run_flag(key), key, written=text)


def run_spec(table: dict, flags: dict) -> RunSpec | None:
    """The RunSpec of a scenario's checked [run] table with the run flags given (not None) on top; None when
    neither gives anything. InputError for a bad flag value, or run flags without tokens."""
    given = {k: _flag_value(k, v) for k, v in flags.items() if v is not None}
    merged = {**table, **given}
    if not merged:
        return None
    if "tokens" not in merged:
        raise InputError(f"{run_flag(sorted(given)[0])} needs --tokens (the run to plan)")
    return RunSpec(**merged)


def run_lines(r: dict) -> list[str]:
    """The text form of a RunPlan's `to_dict()`, assumptions included (the JSON has every source whole)."""
    a = r["assumptions"]
    usd = (f"${r['usd']:,.0f} at ${a['usd_per_gpu_hour']:g} per GPU-hour ({_short(a['price_source'])})"
           if r["usd"] is not None else r["notes"]["usd"])
    energy = (f"{r['energy_mwh']:,.1f} MWh: GPU boards at {a['board_power_w']:g} W for the whole run, an upper "
              "bound; nodes and cooling not included" if r["energy_mwh"] is not None else r["notes"]["energy_mwh"])
    return [
        f"run                 {r['tokens']:,.0f} tokens: {r['steps']:,} steps ({r['tokens_trained']:,} tokens trained)",
        f"  wall clock        {r['days']:10.2f} days = {r['train_days']:.2f} training + "
        f"{r['checkpoint_hours'] / 24:.2f} checkpoints + {r['failure_hours'] / 24:.2f} failures "
        f"(goodput {100 * r['goodput']:.1f} %)",
        f"  checkpoints       {r['checkpoints']:,} x {r['checkpoint_bytes'] / 1e12:.3g} TB in "
        f"{r['checkpoint_write_s']:.3g} s, every {r['checkpoint_interval_h']:.3g} h ({a['checkpoint_interval']}); "
        f"{a['checkpoint_write_gb_per_s']:.3g} GB/s per node ({_short(a['write_source'])})",
        f"  failures          {r['expected_interruptions']:,.1f} expected interruptions, one per "
        f"{a['job_mtbf_h']:.3g} h (MTBF {a['mtbf_gpu_h']:,.0f} GPU-hours per GPU: {_short(a['mtbf_source'])}), "
        f"each {a['restart_min']:g} min restart + half an interval lost",
        f"  GPU-hours         {r['gpu_hours']:,.0f}",
        f"  cost              {usd}",
        f"  energy            {energy}",
    ] + ([f"  NOTE              the layout {r['notes']['layout']}"] if "layout" in r["notes"] else [])


def _short(source: str) -> str:
    return shorten_words(source, 60)
