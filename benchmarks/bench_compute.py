"""Speed of `stage_compute_times` (and `optimizer_step_s`): one layout (scalar path) and N layouts at once.

Layouts are drawn at random over tp ∈ {1,2,4,8}, cp ∈ {1,2,4}, ep (MoE only) ∈ {1,2,4,8},
micro_batch_size ∈ {1,2,4} for each model; pp, vpp and the categorical fields are fixed per call, as
the sweep groups them. Reports the median of `--repeat` wall-clock runs in one process, µs per layout.
Run: python benchmarks/bench_compute.py [--n 100000] [--repeat 5] [--hardware dgx-h100]
"""
import argparse
import platform
import statistics
import time

import numpy as np

from simulator.cost.compute import optimizer_step_s, stage_compute_times
from simulator.spec.hardware import load_hardware
from simulator.spec.layout import Layout
from simulator.spec.load import load_model
from simulator.spec.training import Training


def _median_s(fn, repeat):
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _tiny_numpy_op_us(repeat=20000):
    a = np.ones(4)
    t0 = time.perf_counter()
    for _ in range(repeat):
        a * a
    return (time.perf_counter() - t0) / repeat * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--hardware", default="dgx-h100")
    args = ap.parse_args()
    hw = load_hardware(args.hardware)
    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}, "
          f"tiny numpy op {_tiny_numpy_op_us():.2f} µs (machine speed reference)")
    print(f"{'model':<14}{'pp':>4}{'recompute':>11}{'1 layout µs':>13}{'N':>9}{'vector µs/layout':>18}"
          f"{'optimizer µs/layout':>21}")
    rng = np.random.default_rng(0)
    cases = (("llama3-70b", 8, "selective"), ("mixtral-8x7b", 4, "full"), ("deepseek-v3", 1, "none"))
    for name, pp, rc in cases:
        m = load_model(name)
        tr = Training(seq_length=8192 if name != "deepseek-v3" else 4096, global_batch_size=1024)
        moe = m.is_moe
        lay = Layout(num_gpus=64 * pp, tp=8, pp=pp, ep=8 if moe else 1, recompute=rc, sequence_parallel=True)
        t1 = _median_s(lambda: stage_compute_times(m, tr, lay, hw), max(args.repeat, 50))
        n = args.n
        tp = rng.choice([1, 2, 4, 8], n)
        cp = rng.choice([1, 2, 4], n)
        ep = rng.choice([1, 2, 4, 8], n) if moe else np.ones(n, int)
        mbs = rng.choice([1, 2, 4], n)
        dp = rng.choice([8, 16, 32], n)
        tv = _median_s(lambda: stage_compute_times(m, tr, hardware=hw, tp=tp, pp=pp, cp=cp, ep=ep, micro_batch_size=mbs,
                                                   recompute=rc, sequence_parallel=True), args.repeat)
        to = _median_s(lambda: optimizer_step_s(m, tr, hardware=hw, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, zero=1),
                       args.repeat)
        print(f"{name:<14}{pp:>4}{rc:>11}{t1 * 1e6:>13.0f}{n:>9}{tv / n * 1e6:>18.3f}{to / n * 1e6:>21.3f}")


if __name__ == "__main__":
    main()
