"""Speed of the compute-time calls simulator/kernel.py makes: `layer_basis_times_by_mode` (per-block F, B,
W, recompute times) for one layout (scalar path) and N layouts at once, and the optimizer step of N
layouts (parameters per rank from spec/placement.py, ZeRO degrees from spec/rules.py,
`optimizer_params_step_s`).

Layouts are drawn at random over tp ∈ {1,2,4,8}, cp ∈ {1,2,4}, ep (MoE only) ∈ {1,2,4,8},
micro_batch_size ∈ {1,2,4} for each model; pp and the recompute mode are fixed per call, as the kernel
groups them. Reports the median of `--repeat` wall-clock runs in one process, µs per layout.
Run: python benchmarks/bench_compute.py [--n 100000] [--repeat 5] [--hardware dgx-h100]
"""
import argparse
import platform
import statistics
import time

import numpy as np

from simulator.cost.compute import layer_basis_times_by_mode
from simulator.cost.optimizer import optimizer_params_step_s
from simulator.spec.hardware import load_hardware
from simulator.spec.load import load_model
from simulator.spec.placement import params_per_rank, stage_param_split, stage_placement
from simulator.spec.rules import shard_degrees
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


def _optimizer(m, tr, hw, *, pp, tp, dp, cp, ep):
    """Optimizer-step time per rank (N, pp) of N layouts with ZeRO-1."""
    ne, ex = params_per_rank(stage_param_split(m, stage_placement(m, pp=pp)), tp=tp, ep=ep)
    d, d_e = shard_degrees(dp=dp, cp=cp, ep=ep)
    return optimizer_params_step_s(tr, hw, non_expert=ne, expert=ex, shard_degree=d[:, None],
                                   expert_shard_degree=d_e[:, None])


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
        kw = dict(modes=(rc,), sequence_parallel=True)
        t1 = _median_s(lambda: layer_basis_times_by_mode(m, tr, hw, tp=8, ep=8 if moe else 1, **kw),
                       max(args.repeat, 50))
        n = args.n
        tp = rng.choice([1, 2, 4, 8], n)
        cp = rng.choice([1, 2, 4], n)
        ep = rng.choice([1, 2, 4, 8], n) if moe else np.ones(n, int)
        mbs = rng.choice([1, 2, 4], n)
        dp = rng.choice([8, 16, 32], n)
        tv = _median_s(lambda: layer_basis_times_by_mode(m, tr, hw, tp=tp, cp=cp, ep=ep, micro_batch_size=mbs, **kw),
                       args.repeat)
        to = _median_s(lambda: _optimizer(m, tr, hw, pp=pp, tp=tp, dp=dp, cp=cp, ep=ep), args.repeat)
        print(f"{name:<14}{pp:>4}{rc:>11}{t1 * 1e6:>13.0f}{n:>9}{tv / n * 1e6:>18.3f}{to / n * 1e6:>21.3f}")


if __name__ == "__main__":
    main()
