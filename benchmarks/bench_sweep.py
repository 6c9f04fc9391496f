"""Sweep speed: layouts evaluated per second (enumeration + vectorised memory/time kernel + schedule
replays + ranking) and peak resident memory, for the three cases of GitHub issue 4.

Protocol: each case runs in a fresh Python process (so peak RSS is that case's alone). "cold" is the
first sweep in that process: it builds and compiles every schedule shape the space needs (what a
`parasim sweep` command pays; numba's compiled kernels come from its on-disk cache after the first
run on a machine). "warm" is the best of `--repeat` further sweeps in the same process, with the
schedule shapes cached (a notebook or a service sweeping again). Peak RSS is the process high-water
mark (getrusage ru_maxrss), imports included.

Usage: python benchmarks/bench_sweep.py [--case 70b|405b|mixtral|all] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
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


def run_case(name: str, repeat: int) -> dict:
    from simulator.spec.scenario import load_scenario
    from simulator.sweep import SweepSpace, enumerate_layouts, run_sweep

    preset, over, desc = CASES[name]
    sc = load_scenario(preset, require_layout=False)
    space = SweepSpace.from_table(sc.sweep).replace(**over)
    t0 = time.perf_counter()
    cands = enumerate_layouts(sc.model, sc.training, sc.num_gpus, space, hardware=sc.hardware)
    t_enum = time.perf_counter() - t0
    t0 = time.perf_counter()
    run_sweep(sc, space)  # cold: builds the schedule shapes
    cold = time.perf_counter() - t0
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        df = run_sweep(sc, space)
        best = min(best, time.perf_counter() - t0)
    return {"case": name, "description": desc, "layouts": len(df), "feasible": int(df["feasible"].sum()),
            "shapes": len(cands[["schedule", "pp", "vpp", "num_microbatches"]].drop_duplicates()), "enumerate_s": t_enum, "cold_s": cold, "sweep_s": best,
            "layouts_per_s": len(df) / best, "cold_layouts_per_s": len(df) / cold, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "winner": df.iloc[0]["label"] if len(df) else ""}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="all", choices=["all", *CASES])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(run_case(a.case, a.repeat)))
        return
    names = list(CASES) if a.case == "all" else [a.case]
    print(f"{'case':<8} {'layouts':>9} {'feasible':>9} {'shapes':>7} {'cold s':>7} {'cold /s':>9} "
          f"{'warm s':>7} {'warm /s':>9} {'peak RSS MiB':>13}  winner")
    for n in names:
        p = subprocess.run([sys.executable, __file__, "--case", n, "--repeat", str(a.repeat), "--child"],
                           capture_output=True, text=True)
        if p.returncode:
            print(f"{n:<8} failed: {(p.stderr or p.stdout).strip().splitlines()[-1]}")
            continue
        r = json.loads(p.stdout.strip().splitlines()[-1])
        print(f"{n:<8} {r['layouts']:>9,} {r['feasible']:>9,} {r['shapes']:>7,} {r['cold_s']:>7.2f} "
              f"{r['cold_layouts_per_s']:>9,.0f} {r['sweep_s']:>7.2f} {r['layouts_per_s']:>9,.0f} "
              f"{r['peak_rss_mib']:>13,.0f}  {r['winner']}")
    print("(reference: Calculon's exhaustive search ran 307 layouts/s on the same 2-core machine, per issue 4)")


if __name__ == "__main__":
    main()
