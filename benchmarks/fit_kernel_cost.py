"""The sweep's kernel-call cost model (`simulator/sweep.py`: _ROW_CELLS, _OP_CELLS, _CALL_CELLS), from
measured calls.

Collect: single kernel calls (`sweep._evaluate_rows`) on random contiguous row ranges of 2,000-30,000
candidates of the three benchmark sweeps (bench_sweep.py's cases, default `fit` mode), this process
pinned to one core, best of 3 CPU seconds each after one unmeasured sweep; one JSON line per call
with rows, padded cells (rows x widest virtual-stage count), replay ops (sum of stages x
microbatches) and seconds. Fit: least squares t = c0 + c_row·rows + c_cell·padded + c_op·ops;
the sweep uses the coefficients in units of one padded cell.

Usage:
  python benchmarks/fit_kernel_cost.py collect --seed 7 --per-case 14 > fit.jsonl
  python benchmarks/fit_kernel_cost.py fit fit.jsonl [--check heldout.jsonl]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

CASES = ("llama3-70b-512xh100", "llama3.1-405b-16k-h100", "mixtral-8x7b-64xh100")
FEATURES = ("rows", "padded", "ops")


def collect(seed: int, per_case: int) -> None:
    import simulator.estimate  # noqa: F401  (the kernel)
    import simulator.sweep as S
    from simulator.spec.layout import SCHEDULES
    from simulator.spec.scenario import load_scenario

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    for name in CASES:
        rng = np.random.default_rng(seed)
        sc = load_scenario(name, require_layout=False)
        over = {"schedule": tuple(s for s in SCHEDULES if s != "pipedream")}
        if "405b" in name:
            over["max_micro_batch_size"] = 16
        space = S.SweepSpace.from_table(sc.sweep).replace(**over)
        cands = S.enumerate_layouts(sc.model, sc.training, sc.num_gpus, space, hardware=sc.hardware)
        ctx = (sc.model, sc.training, sc.hardware, sc.num_gpus, S._timing(S._default_evaluator(), False))
        S.run_sweep(sc, space, workers=1)  # shapes built and memoised
        stages, micro = S._chunk_stages(cands), cands["num_microbatches"].to_numpy()
        n = len(cands)
        for _ in range(per_case):
            size = int(rng.choice([2000, 5000, 10000, 15000, 20000, 30000]))
            a = int(rng.integers(0, max(1, n - size)))
            b = min(n, a + size)
            best = float("inf")
            for _ in range(3):
                c = time.process_time()
                S._evaluate_rows(cands, a, b, ctx)
                best = min(best, time.process_time() - c)
            s = stages[a:b]
            print(json.dumps(dict(case=name, a=a, b=b, rows=b - a, padded=int((b - a) * s.max()),
                                  ops=int((s * micro[a:b]).sum()), t=best)), flush=True)


def _load(path: str) -> tuple[np.ndarray, np.ndarray]:
    rows = [json.loads(line) for line in open(path)]
    return np.array([[1.0] + [r[f] for f in FEATURES] for r in rows]), np.array([r["t"] for r in rows])


def fit(path: str, check: str | None) -> None:
    A, y = _load(path)
    c, *_ = np.linalg.lstsq(A, y, rcond=None)
    err = np.abs(A @ c - y) / y
    print(f"{len(y)} calls: t = {c[0] * 1e3:.1f} ms + {c[1] * 1e6:.2f} us/row + {c[2] * 1e6:.4f} us/padded cell "
          f"+ {c[3] * 1e6:.4f} us/op; median error {np.median(err):.1%}")
    print(f"in cells: call {c[0] / c[2]:,.0f}, row {c[1] / c[2]:.1f}, op {c[3] / c[2]:.3f}")
    if check:
        B, z = _load(check)
        e = np.abs(B @ c - z) / z
        print(f"held-out {len(z)} calls ({check}): median error {np.median(e):.1%}, max {e.max():.1%}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--seed", type=int, default=7)
    c.add_argument("--per-case", type=int, default=14)
    f = sub.add_parser("fit")
    f.add_argument("data")
    f.add_argument("--check", default=None)
    args = ap.parse_args(argv)
    if args.cmd == "collect":
        collect(args.seed, args.per_case)
    else:
        fit(args.data, args.check)


if __name__ == "__main__":
    sys.exit(main())
