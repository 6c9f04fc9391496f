"""Replay speed: p = 64, m = 1024, v = 2 interleaved 1F1B (262,144 ops) and zb-h1 / zb-v peers.

Reports, per schedule: build (schedule as data), compile (levels, once per schedule shape), replay
(timeline with bubbles, in-flight, critical path), and the compiled pass over N layouts
(`makespan_multi`, the sweep's path: each layout with and without its p2p delay); ops/s = ops /
seconds (for the batch: N x ops / seconds). Median of `--repeat` runs; wall-clock, one process.
Run: python benchmarks/bench_engine.py [--repeat 3]
"""
import argparse
import platform
import statistics
import time

import numpy as np

from simulator.pipeline import compile_schedule, makespan_multi, replay
from simulator.schedules import build


def _time(fn, repeat):
    ts = []
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args()
    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}")
    print(f"{'schedule':<12}{'ops':>9}{'build_s':>9}{'compile_s':>11}{'replay_s':>10}{'replay ops/s':>14}"
          f"{'compile+replay ops/s':>22}{'batch N':>8}{'batch ops/s':>13}")
    for name, p, m, v in (("interleaved", 64, 1024, 2), ("1f1b", 64, 1024, 1), ("zb-h1", 64, 1024, 1), ("zb-v", 64, 1024, 1)):
        tb, sch = _time(lambda: build(name, pp=p, microbatches=m, vpp=v), 1)
        sch.arrays  # flatten once (part of build)
        tc, comp = _time(lambda: compile_schedule(sch), args.repeat)
        S = sch.num_stages
        tr, tl = _time(lambda: replay(comp, forward_s=np.full(S, 1.0 / v), backward_s=np.full(S, 2.0 / v),
                                      weight_s=0.0, p2p_s=0.01), args.repeat)
        N = args.batch
        rng = np.random.default_rng(0)
        f = rng.uniform(0.5, 1.5, (N, S))
        tbatch, _ = _time(lambda: makespan_multi([comp], np.zeros(N, dtype=np.int64), f, 2 * f, np.zeros((N, S)),
                                                 np.full(N, 0.01)), args.repeat)
        n = sch.num_ops
        print(f"{name:<12}{n:>9}{tb:>9.2f}{tc:>11.3f}{tr:>10.3f}{n / tr:>14,.0f}{n / (tc + tr):>22,.0f}"
              f"{N:>8}{N * n / tbatch:>13,.0f}")


if __name__ == "__main__":
    main()
