"""Collective microbenchmarks through torch.distributed on the local host.

`bench_collectives` spawns `world_size` processes (backend `nccl` on GPUs, `gloo` on the CPU),
times all_reduce / all_gather / reduce_scatter / all_to_all / send-recv over buffer sizes with the
microbench protocol (warm-up, then per-call timings, median; every call is followed by a
barrier-free device synchronisation, and rank 0's time is reported), and returns rows shaped like
the nccl-tests parser's (`size_bytes` as nccl-tests defines it, `time_s`, algbw, busbw), so the
same fitting code turns both into efficiency tables.
"""
from __future__ import annotations

import os
import socket
import tempfile
from typing import Sequence

from ..errors import InputError
from .microbench import import_torch
from .nccl_tests import busbw_factor

__all__ = ["bench_collectives", "TORCH_COLLECTIVES"]

TORCH_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world_size, port, backend, collectives, sizes, warmup, iters, out_path):
    """One spawned rank: join the process group, time every (collective, size), and on rank 0 write
    the rows as JSON to `out_path`. A collective the backend refuses gets one `error` row and its
    larger sizes are skipped."""
    import statistics

    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    cuda = backend == "nccl"
    if cuda:
        torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    rows = []
    try:
        for coll in collectives:
            for size in sizes:
                n = world_size
                numel = max(n, int(size) // 4 // n * n)  # float32 elements, divisible by n
                fn = _collective_call(coll, numel, rank, n, dev, ag, rs)
                try:
                    times = _time_calls(fn, warmup, iters, cuda)
                except (RuntimeError, NotImplementedError, ValueError) as exc:
                    rows.append({"collective": coll, "size_bytes": float(numel * 4), "error": str(exc).splitlines()[0][:200]})
                    break
                rows.append({"collective": coll, "size_bytes": float(numel * 4), "time_s": statistics.median(times)})
    finally:
        dist.destroy_process_group()
    if rank == 0:
        import json

        with open(out_path, "w") as f:
            json.dump(rows, f)


def _collective_call(coll: str, numel: int, rank: int, n: int, dev, ag, rs):
    """A no-argument callable running collective `coll` once on fresh float32 buffers of `numel`
    elements (the gathered / scattered part: numel / n) on device `dev` of rank `rank` among `n`;
    `ag` / `rs` are this torch's all-gather / reduce-scatter into one tensor."""
    import torch
    import torch.distributed as dist

    buf = torch.ones(numel, dtype=torch.float32, device=dev)
    part = torch.ones(numel // n, dtype=torch.float32, device=dev)
    full = torch.empty(numel, dtype=torch.float32, device=dev)
    if coll == "all_reduce":
        return lambda: dist.all_reduce(buf)
    if coll == "all_gather":
        return lambda: ag(full, part)
    if coll == "reduce_scatter":
        return lambda: rs(part, buf)
    if coll == "alltoall":
        return lambda: dist.all_to_all_single(full, buf)

    def sendrecv():  # ring shift, every rank sends `buf` to rank+1 and receives from rank-1
        reqs = [dist.isend(buf, (rank + 1) % n), dist.irecv(full, (rank - 1) % n)]
        for r in reqs:
            r.wait()
    return sendrecv


def _time_calls(fn, warmup: int, iters: int, cuda: bool) -> list[float]:
    """`warmup` untimed calls of `fn`, then the wall time of each of `iters` calls (with a device
    synchronisation before and after each on CUDA)."""
    import time

    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return times


def bench_collectives(*, world_size: int = 2, sizes_bytes: Sequence[int] = (2**16, 2**20), device: str = "cpu",
                      collectives: Sequence[str] = TORCH_COLLECTIVES, warmup: int = 2, iters: int = 5):
    """Run the collectives on `world_size` local processes; DataFrame in the nccl-tests parser's columns.

    Collectives the backend does not implement (gloo lacks some) are reported in an `error` column
    and left out of the timings. Size = nccl-tests' buffer size: the all-reduce buffer, the gathered
    output, the reduce-scatter input, the all-to-all per-rank buffer, the send payload.
    """
    torch = import_torch()
    import json

    import pandas as pd

    bad = [c for c in collectives if c not in TORCH_COLLECTIVES]
    if bad:
        raise InputError(f"unknown collective {bad[0]!r}; expected one of {', '.join(TORCH_COLLECTIVES)}")
    if world_size < 2:
        raise InputError(f"collective benchmarks need world_size >= 2, got {world_size}")
    backend = "nccl" if str(device).startswith("cuda") else "gloo"
    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise InputError(f"world_size {world_size} exceeds the {torch.cuda.device_count()} visible GPUs")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        torch.multiprocessing.spawn(_worker, args=(world_size, _free_port(), backend, tuple(collectives),
                                                   tuple(int(s) for s in sizes_bytes), warmup, iters, out),
                                    nprocs=world_size, join=True)
        with open(out) as f:
            rows = json.load(f)
    df = pd.DataFrame(rows)
    if "error" not in df:
        df["error"] = None
    df["nranks"] = world_size
    df["nodes"] = 1
    df["gpus_per_node"] = world_size
    df["placement"] = "out-of-place"
    df["source"] = f"torch.distributed ({backend})"
    ok = df["time_s"].notna() if "time_s" in df else df["error"].isna()
    df.loc[ok, "algbw_bytes_per_s"] = df.loc[ok, "size_bytes"] / df.loc[ok, "time_s"]
    df.loc[ok, "busbw_bytes_per_s"] = [a * float(busbw_factor(c, world_size)) for a, c in
                                       zip(df.loc[ok, "algbw_bytes_per_s"], df.loc[ok, "collective"])]
    return df
