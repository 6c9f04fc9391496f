"""Old code against new, alternately, on the same machine in one run: the end-to-end `parasim sweep`
command (imports, enumeration, evaluation, ranking, CSV output) and the in-process sweeps of
bench_sweep.py's cases.

Each tree (a checkout of parasim with its compiled loops built in place) runs in fresh processes
with PYTHONPATH pointing at it; rounds alternate old, new, old, new, ... so a slow hour hits both.
Every process gets its own empty schedule-shape cache, filled by one unmeasured warm-up command
first (so "cold" is every later `parasim sweep`, as in bench_sweep.py).

Usage: python benchmarks/ab_sweep.py OLD_TREE NEW_TREE [--rounds 5] [--case cli|70b|405b|mixtral|all]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

CLI = ["sweep", "--model", "llama3-70b", "--hardware", "dgx-h100", "--gpus", "512", "--seq", "8192",
       "--global-batch", "512", "--no-progress", "--top", "1"]
INPROC = """
import time, json
from simulator.spec.scenario import load_scenario
from simulator.sweep import SweepSpace, run_sweep
from simulator.spec.layout import SCHEDULES
sync = tuple(s for s in SCHEDULES if s != "pipedream")
cases = {{"70b": ("llama3-70b-512xh100", {{"schedule": sync}}),
         "405b": ("llama3.1-405b-16k-h100", {{"schedule": sync, "max_micro_batch_size": 16}}),
         "mixtral": ("mixtral-8x7b-64xh100", {{"schedule": sync}})}}
preset, over = cases[{case!r}]
sc = load_scenario(preset, require_layout=False)
space = SweepSpace.from_table(sc.sweep).replace(**over)
run_sweep(sc, space)  # shapes read or built
best = float("inf")
for _ in range(3):
    t0 = time.perf_counter(); df = run_sweep(sc, space); best = min(best, time.perf_counter() - t0)
print(json.dumps({{"rows": len(df), "s": best}}))
"""


def _one(tree: str, case: str, cache: str, out: str) -> tuple[float, int]:
    env = {**os.environ, "PYTHONPATH": tree, "PARASIM_CACHE_DIR": cache, "MPLBACKEND": "Agg"}
    if case == "cli":
        cmd = [sys.executable, "-c", "from simulator.cli import main; main()", *CLI, "--out", out]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tree)
        dt = time.perf_counter() - t0
        if p.returncode:
            raise SystemExit(f"{tree}: {p.stderr.strip().splitlines()[-1]}")
        return dt, int(p.stdout.split(" layouts")[0].split()[-1].replace(",", ""))
    p = subprocess.run([sys.executable, "-c", INPROC.format(case=case)], env=env, capture_output=True, text=True,
                       cwd=tree)
    if p.returncode:
        raise SystemExit(f"{tree}: {p.stderr.strip().splitlines()[-1]}")
    import json

    got = json.loads(p.stdout.strip().splitlines()[-1])
    return got["s"], got["rows"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--case", default="all", choices=["all", "cli", "70b", "405b", "mixtral"])
    a = ap.parse_args()
    cases = ["cli", "70b", "405b", "mixtral"] if a.case == "all" else [a.case]
    print(f"{'case':<8} {'rows old':>9} {'rows new':>9} {'old median s':>12} {'new median s':>12} {'new/old':>8} "
          f"{'old rows/s':>11} {'new rows/s':>11}  (rounds: old, new)")
    for case in cases:
        times = {"old": [], "new": []}
        rows = {}  # (the trees may enumerate different spaces: each one's rows, and its layouts per second)
        with tempfile.TemporaryDirectory(prefix="parasim-ab-") as tmp:
            caches = {k: os.path.join(tmp, f"cache-{k}") for k in times}
            for k, tree in (("old", a.old), ("new", a.new)):  # warm-up: fill each tree's shape cache
                _one(tree, case, caches[k], os.path.join(tmp, f"{k}.csv"))
            for _ in range(a.rounds):
                for k, tree in (("old", a.old), ("new", a.new)):
                    dt, rows[k] = _one(tree, case, caches[k], os.path.join(tmp, f"{k}.csv"))
                    times[k].append(dt)
        mo, mn = statistics.median(times["old"]), statistics.median(times["new"])
        print(f"{case:<8} {rows['old']:>9,} {rows['new']:>9,} {mo:>12.3f} {mn:>12.3f} {mn / mo:>8.2f} "
              f"{rows['old'] / mo:>11,.0f} {rows['new'] / mn:>11,.0f}  "
              f"{' '.join(f'{x:.3f}' for x in times['old'])} | {' '.join(f'{x:.3f}' for x in times['new'])}", flush=True)


if __name__ == "__main__":
    main()
