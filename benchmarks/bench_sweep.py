"""Sweep speed: layouts evaluated per second (enumeration + vectorised memory/time kernel + schedule
replays + ranking) and peak resident memory, for the three cases of GitHub issue 4.

Protocol: each case runs in fresh Python processes, imports done before timing; `time parasim
sweep ...` gives the end-to-end figure of a command, imports and output included (benchmarks/ab_sweep.py
times that, old code against new, alternately). Each case gets an empty schedule-shape cache folder of
its own (`PARASIM_CACHE_DIR`, pipeline/cache.py), removed at the end.
- "first": the first sweep in a fresh process with the shape cache still empty. Every schedule
  shape is built and compiled (and written to the cache): what the first `parasim sweep` of a
  parasim version pays after its imports.
- "cold": the first sweep in a second fresh process, the shapes now read from the cache: what every
  later `parasim sweep` command pays after its imports (a new model or layout space needs only the
  shapes it has not met before).
- "again": the best of `--repeat` further sweeps in that process (a notebook or service sweeping again).
CPU s: user + system CPU time of the cold sweep (getrusage), which a loaded machine's stolen time does
not inflate as it does wall time. Peak RSS: the sweeping process (getrusage ru_maxrss).

"timed": which layouts get a step time. `fit` (the sweep's default): memory is evaluated for every
layout, the time (stage times, communication, schedule replay, DP tail) only for those that fit;
`all` (`--time-infeasible`): the time of every layout too. Both rows are printed per case.

Usage: python benchmarks/bench_sweep.py [--case 70b|405b|mixtral|all] [--timed fit|all|both] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from simulator.spec.layout import SCHEDULES

SYNC_SCHEDULES = tuple(s for s in SCHEDULES if s != "pipedream")  # pipedream is asynchronous
CASES = {
    # name: (scenario preset, SweepSpace overrides, description)
    "70b": ("llama3-70b-512xh100", {"schedule": SYNC_SCHEDULES},
            "Llama-3-70B, 512 H100, all synchronous schedules"),
    "405b": ("llama3.1-405b-16k-h100", {"schedule": SYNC_SCHEDULES, "max_micro_batch_size": 16},
             "Llama-3.1-405B, 16,384 H100, whole space (all synchronous schedules, mbs 1-16)"),
    "mixtral": ("mixtral-8x7b-64xh100", {"schedule": SYNC_SCHEDULES},
                "Mixtral-8x7B, 64 H100, all synchronous schedules, EP 1-8"),
}


def _cpu_s() -> float:
    """User + system CPU seconds of this process and its finished children."""
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def run_case(name: str, repeat: int, time_infeasible: bool, first_only: bool = False) -> dict:
    import simulator.estimate  # noqa: F401  (the kernel; run_sweep imports it lazily)
    import simulator.pipeline  # noqa: F401  (the replay; imported lazily by the kernel)
    from simulator.spec.scenario import load_scenario
    from simulator.sweep import SweepSpace, enumerate_layouts, run_sweep

    preset, over, desc = CASES[name]
    sc = load_scenario(preset, require_layout=False)
    space = SweepSpace.from_table(sc.sweep).replace(**over)
    t0 = time.perf_counter()
    cands = enumerate_layouts(sc.model, sc.training, sc.num_gpus, space, hardware=sc.hardware)
    t_enum = time.perf_counter() - t0
    timed, cpu = [], []
    for _ in range(1 if first_only else 1 + repeat):
        c0, t0 = _cpu_s(), time.perf_counter()
        df = run_sweep(sc, space, time_infeasible=time_infeasible)
        timed.append(time.perf_counter() - t0)
        cpu.append(_cpu_s() - c0)
    n = len(df)
    if first_only:
        return {"first_s": timed[0], "first_cpu_s": cpu[0], "first_layouts_per_s": n / timed[0]}
    cold, again = timed[0], min(timed[1:])
    return {"case": name, "timed": "all" if time_infeasible else "fit", "description": desc, "layouts": n, "feasible": int(df["feasible"].sum()),
            "shapes": len(cands[["schedule", "pp", "vpp", "num_microbatches"]].drop_duplicates()), "enumerate_s": t_enum,
            "cold_s": cold, "cold_cpu_s": cpu[0], "again_s": again, "cold_layouts_per_s": n / cold,
            "again_layouts_per_s": n / again, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "winner": df.iloc[0]["label"] if n else ""}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="all", choices=["all", *CASES])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timed", default="both", choices=["fit", "all", "both"],
                    help="time the layouts that fit (the sweep's default), all of them, or run both")
    ap.add_argument("--child", choices=["first", "rest"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(run_case(a.case, a.repeat, a.timed == "all", first_only=a.child == "first")))
        return
    names = list(CASES) if a.case == "all" else [a.case]
    modes = ["fit", "all"] if a.timed == "both" else [a.timed]
    print(f"{'case':<8} {'timed':<5} {'layouts':>8} {'shapes':>6} {'first s':>7} {'first /s':>8} {'cold s':>7} {'cold /s':>8} "
          f"{'CPU s':>6} {'again s':>7} {'again /s':>8} {'RSS MiB':>8}  winner")
    for n, mode in [(n, mode) for n in names for mode in modes]:
        r, failed = {}, None
        with tempfile.TemporaryDirectory(prefix="parasim-bench-cache-") as cache:
            for child in ("first", "rest"):
                p = subprocess.run([sys.executable, __file__, "--case", n, "--repeat", str(a.repeat), "--timed", mode,
                                    "--child", child], capture_output=True, text=True,
                                   env={**os.environ, "PARASIM_CACHE_DIR": cache, "PARASIM_NO_CACHE": ""})
                if p.returncode:
                    failed = (p.stderr or p.stdout).strip().splitlines()[-1]
                    break
                r.update(json.loads(p.stdout.strip().splitlines()[-1]))
        if failed:
            print(f"{n:<8} {mode:<5} failed: {failed}")
            continue
        print(f"{n:<8} {mode:<5} {r['layouts']:>8,} {r['shapes']:>6,} {r['first_s']:>7.2f} {r['first_layouts_per_s']:>8,.0f} "
              f"{r['cold_s']:>7.2f} {r['cold_layouts_per_s']:>8,.0f} {r['cold_cpu_s']:>6.2f} "
              f"{r['again_s']:>7.2f} {r['again_layouts_per_s']:>8,.0f} {r['rss_mib']:>8,.0f}  {r['winner']}")
    print("(reference: Calculon's exhaustive search ran 307 layouts/s on the same 2-core machine, per issue 4)")


if __name__ == "__main__":
    main()
