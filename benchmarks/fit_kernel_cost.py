"""The sweep's kernel-call cost models (`simulator/sweep.py`: WARM_CALL, SPLIT_CALL), from measured calls.

Two situations, two models of one form: t = call_s + row_s·rows + cell_s·padded + op_s·ops, with
rows, padded cells (rows x widest virtual-stage count: the per-stage arrays' size) and replay ops
(sum over rows of virtual stages x microbatches).
- `collect` (WARM_CALL: one process choosing its calls): single kernel calls (`sweep._evaluate_rows`)
  on random contiguous row ranges of 2,000-30,000 candidates, this process pinned to one core, best
  of 3 CPU seconds each after one unmeasured sweep (shapes in memory).
- `collect-split` (SPLIT_CALL: cutting the rows among processes): real two-process sweeps
  (`run_sweep` with the local pool, one fresh process each: `split-sample`), their rows cut at a
  random c (15-85 % of the rows) instead of where the model cuts them; the sweeping process
  evaluates rows [0, c), the forked worker rows [c, n), and each side's kernel call is timed where
  it runs, with the worker's pickling of its answer (`put_s`). Schedule shapes come from the
  on-disk cache, which a first sweep filled. Times are wall seconds (`t`, what the cut balances;
  each process's CPU seconds in `cpu_s`: the worker's wall time ran up to ~40 % over its CPU time).
  (Fitted on the same cuts measured in two bare forked processes, or on CPU time, the model gave
  the worker 10-65 ms too much in real sweeps.)
One JSON line per call. `fit`: least squares, the median error in and out of sample (`--check`), and
for split data the worker's pickling per row (sent_s) and, held out, the two sides' time ratio.

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


def _timed(rec: dict, key: str, f):
    """f(), its wall seconds in rec[key] (what the cut balances) and its CPU seconds (this process's)."""
    c0, t0 = time.process_time(), time.perf_counter()
    out = f()
    rec[key], rec["cpu_s" if key == "t" else key.replace("_s", "_cpu_s")] = (time.perf_counter() - t0,
                                                                           time.process_time() - c0)
    return out


def split_sample(name: str, c: int, time_infeasible: bool) -> None:
    """One measured cut, in a fresh process: a real two-process sweep (`run_sweep`, the local pool,
    with the `parasim` command's process settings) whose rows are cut at c instead of where the model
    would cut them: this process evaluates rows [0, c), the forked worker rows [c, n). Each side's
    kernel call is timed where it runs (CPU and wall seconds of `_evaluate_rows`), and the worker's
    pickling of its answer (`put_s`); the rows' answers, the rank and the rest run as in any sweep.
    Prints one JSON line per side."""
    import threading

    from simulator.cores import keep_freed_memory

    keep_freed_memory()  # as the parasim command does
    import simulator.estimate  # noqa: F401  (the kernel)
    import simulator.pipeline  # noqa: F401
    import simulator.sweep as S

    sc, space = _sweep(name)
    cands = S.enumerate_layouts(sc.model, sc.training, sc.num_gpus, space, hardware=sc.hardware)
    stages, micro = S._chunk_stages(cands), cands["num_microbatches"].to_numpy()
    n = len(cands)
    r, w = os.pipe()
    lock = threading.Lock()
    evaluate, put = S._evaluate_rows, S._ResultSlots.put

    def timed_evaluate(cands_, a, b, ctx, joined=True):  # both processes: the worker inherits it by fork
        rec = {}
        out = _timed(rec, "t", lambda: evaluate(cands_, a, b, ctx, joined))
        rec.update(a=a, b=b, pid=os.getpid())
        with lock:
            os.write(w, (json.dumps(rec) + "\n").encode())
        return out

    def timed_put(self, slot, answer):
        rec = {}
        got = _timed(rec, "put_s", lambda: put(self, slot, answer))
        if answer[0] is not None:
            os.write(w, (json.dumps(dict(rec, a=answer[0], pid=os.getpid())) + "\n").encode())
        return got

    S._evaluate_rows, S._ResultSlots.put = timed_evaluate, timed_put
    S._tasks = lambda todo, chunk_size, stages_, micro_, nproc, *args, **kw: [(c, n), (0, c), S._TIES]
    S.run_sweep(sc, space, workers=2, time_infeasible=time_infeasible)
    os.close(w)
    got: dict = {}
    with os.fdopen(r) as f:
        for line in f:
            rec = json.loads(line)
            got.setdefault(rec.pop("a"), {}).update({k: v for k, v in rec.items() if k not in ("b", "pid")})
    for a, b, worker in ((0, c, False), (c, n, True)):
        print(json.dumps(dict(case=name, a=a, b=b, n=n, worker=worker, **_features(stages, micro, a, b), **got[a])))


def collect_split(seed: int, per_case: int, time_infeasible: bool) -> None:
    import subprocess

    if len(os.sched_getaffinity(0)) < 2:
        sys.exit("collect-split needs two cores")
    mode = ["--time-infeasible"] if time_infeasible else []
    with tempfile.TemporaryDirectory(prefix="parasim-fit-cache-") as cache:
        env = {**os.environ, "PARASIM_CACHE_DIR": cache, "PARASIM_NO_CACHE": ""}
        import simulator.sweep as S

        for name in CASES:
            sc, space = _sweep(name)
            n = len(S.enumerate_layouts(sc.model, sc.training, sc.num_gpus, space, hardware=sc.hardware))
            # the shapes into the on-disk cache first (a sweep's later commands read them from there)
            subprocess.run([sys.executable, __file__, "split-sample", "--case", name, "--cut", str(n // 2), *mode],
                           env=env, check=True, capture_output=True)
            rng = np.random.default_rng(seed)
            for _ in range(per_case):
                c = int(rng.integers(int(0.15 * n), int(0.85 * n)))
                out = subprocess.run([sys.executable, __file__, "split-sample", "--case", name, "--cut", str(c), *mode],
                                     env=env, check=True, capture_output=True, text=True).stdout
                print(out.strip(), flush=True)


def _load(path: str) -> tuple[np.ndarray, np.ndarray, list]:
    rows = [json.loads(line) for line in open(path)]
    return np.array([[1.0] + [r[f] for f in FEATURES] for r in rows]), np.array([r["t"] for r in rows]), rows


def coefficients(path: str) -> np.ndarray:
    """Least-squares (call_s, row_s, cell_s, op_s) of the calls in `path`."""
    A, y, _ = _load(path)
    return np.linalg.lstsq(A, y, rcond=None)[0]


def per_row(path: str, key: str) -> float:
    """Median seconds per row of its range of a worker's `key` (`put_s`) in split data."""
    return float(np.median([r[key] / r["rows"] for r in map(json.loads, open(path)) if key in r]))


def fit(path: str, check: str | None) -> None:
    A, y, rows = _load(path)
    c = coefficients(path)
    err = np.abs(A @ c - y) / y
    print(f"{len(y)} calls: t = {c[0] * 1e3:.1f} ms + {c[1] * 1e6:.2f} us/row + {c[2] * 1e6:.4f} us/padded cell "
          f"+ {c[3] * 1e6:.4f} us/op; median error {np.median(err):.1%}")
    print(f"CallCost(call_s={c[0]:.4g}, row_s={c[1]:.4g}, cell_s={c[2]:.4g}, op_s={c[3]:.4g})")
    sent = per_row(path, "put_s") if any("put_s" in r for r in rows) else 0.0
    if sent:
        print(f"sent_s (the worker's pickling of its answer): {sent * 1e6:.2f} us/row")
    if check:
        B, z, held = _load(check)
        e = np.abs(B @ c - z) / z
        print(f"held-out {len(z)} calls ({check}): median error {np.median(e):.1%}, max {e.max():.1%}")
        if any("put_s" in r for r in held):  # the cut's question: the two sides' time ratio, predicted / measured
            pred = B @ c + sent * np.array([r["rows"] * r["worker"] for r in held])
            took = z + np.array([r.get("put_s", 0.0) for r in held])
            ratio = (pred[0::2] / pred[1::2]) / (took[0::2] / took[1::2])
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
    c = sub.add_parser("split-sample", help="one measured cut in this (fresh) process (collect-split runs it)")
    c.add_argument("--case", required=True)
    c.add_argument("--cut", type=int, required=True)
    c.add_argument("--time-infeasible", action="store_true")
    f = sub.add_parser("fit")
    f.add_argument("data")
    f.add_argument("--check", default=None)
    args = ap.parse_args(argv)
    if args.cmd == "collect":
        collect(args.seed, args.per_case, args.time_infeasible)
    elif args.cmd == "collect-split":
        collect_split(args.seed, args.per_case, args.time_infeasible)
    elif args.cmd == "split-sample":
        split_sample(args.case, args.cut, args.time_infeasible)
    else:
        fit(args.data, args.check)


if __name__ == "__main__":
    sys.exit(main())
