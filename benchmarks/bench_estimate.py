"""Speed of `estimate` (one layout, full composition incl. the replayed pipeline) and of the vectorised
`evaluate_layouts` over many layouts sharing the scalar fields. Prints µs per layout.

    python benchmarks/bench_estimate.py
"""
import time
from pathlib import Path
import sys

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.estimate import estimate, evaluate_layouts  # noqa: E402
from simulator.spec.scenario import load_scenario  # noqa: E402


def best_of(fn, repeat=5):
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def main():
    sc = load_scenario("llama3-70b-512xh100")
    lay = sc.layout
    estimate(sc.model, sc.training, lay, sc.hardware)  # warm caches (compiled schedule)
    t1 = best_of(lambda: estimate(sc.model, sc.training, lay, sc.hardware))
    print(f"estimate, one layout ({lay.label}, {lay.schedule}): {t1 * 1e3:.2f} ms")
    for n in (1_000, 100_000):
        rng = np.random.default_rng(0)
        tp = rng.choice([1, 2, 4, 8], n)
        mbs = np.ones(n, dtype=int)
        dp = 512 // (tp * 4)
        kw = dict(num_gpus=512, pp=4, vpp=2, schedule="interleaved", zero=1, recompute="selective",
                  sequence_parallel=True, tp=tp, dp=dp, cp=1, ep=1, micro_batch_size=mbs)
        evaluate_layouts(sc.model, sc.training, sc.hardware, **kw)
        t = best_of(lambda: evaluate_layouts(sc.model, sc.training, sc.hardware, **kw), repeat=3)
        print(f"evaluate_layouts, {n:,} layouts: {t:.3f} s = {t / n * 1e6:.2f} µs per layout ({n / t:,.0f} layouts/s)")


if __name__ == "__main__":
    main()
