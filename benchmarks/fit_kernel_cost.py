"""The sweep's kernel-call cost models (`simulator/sweep.py`: WARM_CALL, SPLIT_CALL), from measured calls.

Two situations, two models of one form: t = call_s + row_s·rows + cell_s·padded + op_s·ops, with
rows, padded cells (rows x widest virtual-stage count: the per-stage arrays' size) and replay ops
(sum over rows of virtual stages x microbatches).
- `collect` (WARM_CALL: one process choosing its calls): single kernel calls (`sweep._evaluate_rows`)
  on random contiguous row ranges of 2,000-30,000 candidates, this process pinned to one core, best
  of 3 CPU seconds each after one unmeasured sweep (shapes in memory).
- `collect-split` (SPLIT_CALL: cutting the rows among processes): what a sweep on two cores does.
  The process enumerates the candidates (nothing else: the kernel has not run in it, and the schedule
  shapes are in the on-disk cache only, which a child filled beforehand), then forks two children at
  once, each pinned to its own core and given fresh huge-page heap as a sweep worker is: one evaluates
  rows [0, c), the other rows [c, n) (joined=False, as a worker; it also times pickling its answer,
  `put_s`, unpickling + joining it, `take_s`, which the sweeping process then does, and then the rank's
  tie keys of all rows, `ties_s`, which the first process idle does). Cut c random in 15-85 % of the rows. Times are
  each child's CPU seconds (`t`; the wall clock in `wall_s`): on a shared VM the host takes up to ~20 %
  of the wall clock at times, unevenly between the two cores, which CPU time leaves out.
  First calls in fresh processes running side by side: their cost is what the cut must balance.
One JSON line per call. `fit`: least squares, the median error in and out of sample (`--check`), and
for split data the per-row costs of `put` and of taking an answer back.

Cases: bench_sweep.py's three sweeps, the default `fit` mode (`--time-infeasible`: every layout timed).

Usage:
  python benchmarks/fit_kernel_cost.py collect --seed 7 --per-case 14 > fit.jsonl
  python benchmarks/fit_kernel_cost.py collect-split --seed 11 --per-case 20 > split.jsonl
  python benchmarks/fit_kernel_cost.py fit split.jsonl [--check heldout.jsonl]
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import tempfile
import time

import numpy as np

CASES = ("llama3-70b-512xh100", "llama3.1-405b-16k-h100", "mixtral-8x7b-64xh100")
FEATURES = ("rows", "padded", "ops")


def _sweep(name: str):
    import simulator.sweep as S
    from simulator.spec.layout import SCHEDULES
    from simulator.spec.scenario import load_scenario

    sc = load_scenario(name, require_layout=False)
    over = {"schedule": tuple(s for s in SCHEDULES if s != "pipedream")}
    if "405b" in name:
        over["max_micro_batch_size"] = 16
    return sc, S.SweepSpace.from_table(sc.sweep).replace(**over)


def _features(stages: np.ndarray, micro: np.ndarray, a: int, b: int) -> dict:
    s = stages[a:b]
    return dict(rows=b - a, padded=int((b - a) * s.max()), ops=int((s * micro[a:b]).sum()))


def collect(seed: int, per_case: int, time_infeasible: bool) -> None:
    import simulator.estimate  # noqa: F401  (the kernel)
    import simulator.sweep as S

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    for name in CASES:
        rng = np.random.default_rng(seed)
        sc, space = _sweep(name)
        cands = S.enumerate_layouts(sc.model, sc.training, sc.num_gpus, space, hardware=sc.hardware)
        ctx = (sc.model, sc.training, sc.hardware, sc.num_gpus, S._timing(S._default_evaluator(), time_infeasible))
        S.run_sweep(sc, space, workers=1, time_infeasible=time_infeasible)  # shapes built and memoised
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
            print(json.dumps(dict(case=name, a=a, b=b, **_features(stages, micro, a, b), t=best)), flush=True)


def _split_child(cands, ctx, a: int, b: int, core: int, worker: bool, fd: int) -> None:
    """In a forked child: evaluate rows a..b-1 as a sweep process does, write the timings to `fd`, exit."""
    import simulator.sweep as S
    from simulator.cores import huge_page_heap

    try:
        os.sched_setaffinity(0, {core})
        huge_page_heap()
        rec = {}

        def timed(key, f):  # CPU seconds of this (single-threaded, pinned) process: what the host's stolen
            c0, t0 = time.process_time(), time.perf_counter()  # time leaves out, unlike the wall clock
            out = f()
            rec[key], rec[key.replace("_s", "_wall_s") if key != "t" else "wall_s"] = (
                time.process_time() - c0, time.perf_counter() - t0)
            return out

        res = timed("t", lambda: S._evaluate_rows(cands, a, b, ctx, joined=not worker))
        if worker:
            data = timed("put_s", lambda: pickle.dumps((a, b, res), protocol=pickle.HIGHEST_PROTOCOL))
            timed("take_s", lambda: S._join(cands.iloc[a:b], pickle.loads(data)[2], ctx[2]))
            timed("ties_s", lambda: S._rank_ties(cands))  # the rank's tie keys, as an idle worker (sweep._TIES)
        os.write(fd, json.dumps(rec).encode())
    finally:
        os._exit(0)


def collect_split(seed: int, per_case: int, time_infeasible: bool) -> None:
    from simulator.cores import keep_freed_memory

    keep_freed_memory()  # as the parasim command does
    import simulator.estimate  # noqa: F401  (the kernel)
    import simulator.pipeline  # noqa: F401
    import simulator.sweep as S

    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        sys.exit("collect-split needs two cores")
    with tempfile.TemporaryDirectory(prefix="parasim-fit-cache-") as cache:
        os.environ["PARASIM_CACHE_DIR"] = cache
        for name in CASES:
            rng = np.random.default_rng(seed)
            sc, space = _sweep(name)
            pid = os.fork()
            if pid == 0:  # the shapes into the on-disk cache, not into this process's memory
                try:
                    S.run_sweep(sc, space, workers=1, time_infeasible=time_infeasible)
                finally:
                    os._exit(0)
            os.waitpid(pid, 0)
            cands = S.enumerate_layouts(sc.model, sc.training, sc.num_gpus, space, hardware=sc.hardware)
            ctx = (sc.model, sc.training, sc.hardware, sc.num_gpus,
                   S._timing(S._default_evaluator(), time_infeasible))
            stages, micro = S._chunk_stages(cands), cands["num_microbatches"].to_numpy()
            n = len(cands)
            for _ in range(per_case):
                c = int(rng.integers(int(0.15 * n), int(0.85 * n)))
                kids = []
                for a, b, core, worker in ((0, c, cores[0], False), (c, n, cores[1], True)):
                    r, w = os.pipe()
                    pid = os.fork()
                    if pid == 0:
                        os.close(r)
                        _split_child(cands, ctx, a, b, core, worker, w)
                    os.close(w)
                    kids.append((pid, r, a, b, worker))
                for pid, r, a, b, worker in kids:
                    os.waitpid(pid, 0)
                    rec = json.loads(os.read(r, 1 << 16).decode())
                    os.close(r)
                    print(json.dumps(dict(case=name, a=a, b=b, n=n, worker=worker, **_features(stages, micro, a, b), **rec)),
                          flush=True)


def _load(path: str) -> tuple[np.ndarray, np.ndarray, list]:
    rows = [json.loads(line) for line in open(path)]
    return np.array([[1.0] + [r[f] for f in FEATURES] for r in rows]), np.array([r["t"] for r in rows]), rows


def coefficients(path: str) -> np.ndarray:
    """Least-squares (call_s, row_s, cell_s, op_s) of the calls in `path`."""
    A, y, _ = _load(path)
    return np.linalg.lstsq(A, y, rcond=None)[0]


def per_row(path: str, key: str, rows: str = "rows") -> float:
    """Median seconds per row of a worker's `key` in split data: `put_s` per row of its range, `ties_s` per
    candidate row (rows="n")."""
    return float(np.median([r[key] / r[rows] for r in map(json.loads, open(path)) if key in r]))


def fit(path: str, check: str | None) -> None:
    A, y, rows = _load(path)
    c = coefficients(path)
    err = np.abs(A @ c - y) / y
    print(f"{len(y)} calls: t = {c[0] * 1e3:.1f} ms + {c[1] * 1e6:.2f} us/row + {c[2] * 1e6:.4f} us/padded cell "
          f"+ {c[3] * 1e6:.4f} us/op; median error {np.median(err):.1%}")
    print(f"CallCost(call_s={c[0]:.4g}, row_s={c[1]:.4g}, cell_s={c[2]:.4g}, op_s={c[3]:.4g})")
    if any("put_s" in r for r in rows):
        put, take, ties = per_row(path, "put_s"), per_row(path, "take_s"), per_row(path, "ties_s", "n")
        print(f"answers: put {put * 1e6:.2f} us/row (worker), take + join {take * 1e6:.2f} us/row (sweeping process); "
              f"tie keys {ties * 1e6:.3f} us per candidate row (worker)")
    if check:
        B, z, held = _load(check)
        e = np.abs(B @ c - z) / z
        print(f"held-out {len(z)} calls ({check}): median error {np.median(e):.1%}, max {e.max():.1%}")
        if any("put_s" in r for r in held):  # the cut's question: the two sides' time ratio, predicted / measured
            pred = B @ c
            ratio = (pred[0::2] / pred[1::2]) / (z[0::2] / z[1::2])
            print(f"  first/second side time ratio, predicted over measured: median {np.median(ratio):.3f}, "
                  f"quartiles {np.quantile(ratio, 0.25):.3f}-{np.quantile(ratio, 0.75):.3f}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for cmd in ("collect", "collect-split"):
        c = sub.add_parser(cmd)
        c.add_argument("--seed", type=int, default=7)
        c.add_argument("--per-case", type=int, default=14)
        c.add_argument("--time-infeasible", action="store_true", help="time every layout (default: those that fit)")
    f = sub.add_parser("fit")
    f.add_argument("data")
    f.add_argument("--check", default=None)
    args = ap.parse_args(argv)
    if args.cmd == "collect":
        collect(args.seed, args.per_case, args.time_infeasible)
    elif args.cmd == "collect-split":
        collect_split(args.seed, args.per_case, args.time_infeasible)
    else:
        fit(args.data, args.check)


if __name__ == "__main__":
    sys.exit(main())
