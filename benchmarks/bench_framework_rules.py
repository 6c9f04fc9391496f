"""What the stacks' framework rules cost a sweep (issue 25): the rule pass (`sweep.supported.
leave_out_unsupported`, one vectorised `first_refusal` over the candidate table) against the sweep it
filters.

Protocol: one process, imports and the schedule-shape cache warmed by a first sweep; each figure the best of
`--repeat` runs (wall clock, time.perf_counter).
- "rules": the rule pass alone on the case's candidates, per stack, and its rows per second;
- "sweep": `run_sweep` of the case with the default stack's rules and with `allow_unsupported=True` (every
  candidate evaluated, no rule pass), wall seconds and layouts per second;
- "10^6 rows": the rule pass alone on the 70b candidates repeated to a million rows (the size of the
  largest sweeps), not evaluated.

Usage: python benchmarks/bench_framework_rules.py [--repeat 3]
"""
from __future__ import annotations

import argparse
import platform
import time

import pandas as pd

from simulator.spec.layout import SCHEDULES

SYNC = tuple(s for s in SCHEDULES if s != "pipedream")


def best(fn, repeat: int) -> tuple[float, object]:
    out, t = None, float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        t = min(t, time.perf_counter() - t0)
    return t, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    from simulator.spec.scenario import load_scenario
    from simulator.spec.stack import load_stack, stack_names
    from simulator.sweep import SweepSpace, enumerate_layouts, run_sweep
    from simulator.sweep.supported import leave_out_unsupported

    print(f"# bench_framework_rules, {time.strftime('%Y-%m-%d')}, {platform.processor() or platform.machine()}, "
          f"python {platform.python_version()}, best of {a.repeat}")
    sc = load_scenario("llama3-70b-512xh100", require_layout=False)
    space = SweepSpace.from_table(sc.sweep).replace(schedule=SYNC)
    run_sweep(sc, space)  # warm the imports and the shape cache
    cands = enumerate_layouts(sc.model, sc.training, sc.num_gpus, space, hardware=sc.hardware)
    print(f"70b: Llama-3-70B, 512 H100, all synchronous schedules: {len(cands):,} candidates")
    for name in stack_names():
        t, (kept, left) = best(lambda: leave_out_unsupported(cands, load_stack(name), sc.model), a.repeat)
        print(f"  rules {name:<11} {t * 1e3:8.1f} ms ({len(cands) / t:>12,.0f} rows/s), kept {len(kept):>7,}, "
              f"left out {sum(left.values()):>7,}")
    t_rules, df = best(lambda: run_sweep(sc, space), a.repeat)
    t_all, df_all = best(lambda: run_sweep(sc, space, allow_unsupported=True), a.repeat)
    t_pass, _ = best(lambda: leave_out_unsupported(cands, sc.training.stack, sc.model), a.repeat)
    print(f"  sweep with megatron's rules   {t_rules:7.3f} s, {len(df):>7,} layouts ({len(df) / t_rules:,.0f}/s); "
          f"the rule pass is {100 * t_pass / t_rules:.1f} % of it")
    print(f"  sweep, allow_unsupported      {t_all:7.3f} s, {len(df_all):>7,} layouts ({len(df_all) / t_all:,.0f}/s)")
    print(f"  with rules / without: {t_rules / t_all:.3f} of the time; per layout evaluated "
          f"{(t_rules / len(df)) / (t_all / len(df_all)):.3f}")
    big = pd.concat([cands] * (-(-10**6 // len(cands))), ignore_index=True)
    t, (kept, left) = best(lambda: leave_out_unsupported(big, sc.training.stack, sc.model), a.repeat)
    print(f"10^6 rows (the 70b candidates repeated): megatron's rules {t:.3f} s ({len(big) / t:,.0f} rows/s), "
          f"kept {len(kept):,}")

if __name__ == "__main__":
    main()
