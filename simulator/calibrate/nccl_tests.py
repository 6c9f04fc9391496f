"""Parse NVIDIA/nccl-tests output and turn it into collective efficiency points.

Input: the text a `*_perf` binary prints (all_reduce_perf, all_gather_perf, reduce_scatter_perf,
alltoall_perf, sendrecv_perf, ...): a `# nThread .. nGpus ..` header, the `# Using devices` block
(one `#  Rank r Group g Pid p on HOST device d [bus] NAME` line per rank), the column header

    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong

(older releases: no `root` column, `error` instead of `#wrong`), one row per message size with the
out-of-place and in-place columns, and `# Avg bus bandwidth`. Noise lines (NCCL INFO, MPI
messages) between rows are ignored. Several runs may follow each other in one file.

Definitions (NVIDIA/nccl-tests doc/PERFORMANCE.md; formulas.md §4.2): `size` S is the full buffer
(all-reduce buffer, all-gather output, reduce-scatter input, all-to-all per-rank buffer, sendrecv
payload); algbw = S / t; busbw = algbw × factor with factor 2(n−1)/n for all_reduce, (n−1)/n for
all_gather, reduce_scatter and alltoall, 1 for sendrecv, broadcast and reduce.

Efficiency (what `[efficiency.*]` tables hold; spec/hardware.py):

| table        | points from                                  | efficiency                                      |
|--------------|----------------------------------------------|-------------------------------------------------|
| nvlink_ring  | one node: all_reduce (ring), all_gather, reduce_scatter, alltoall | busbw / nvlink_bytes_per_s |
| nvls         | one node: all_reduce run with NVLS           | algbw / nvlink_bytes_per_s                      |
| nvlink_p2p   | one node: sendrecv                           | busbw / nvlink_bytes_per_s                      |
| network      | several nodes: any collective                | per-NIC rate / nic_bytes_per_s                  |

Per-NIC rate across N nodes (k GPUs per node): the bytes each node must send over the network for
the collective, divided by time and by `nics_per_node` — node-level ring volume, the lower bound a
hierarchical algorithm reaches (formulas.md §4.4): all_reduce 2(N−1)/N·S, all_gather and
reduce_scatter (N−1)/N·S, alltoall k·S·(n−k)/n, sendrecv S (one boundary pair per NIC).
"""
from __future__ import annotations

import functools
import math
import re
from pathlib import Path

import numpy as np

from ..errors import InputError

__all__ = [
    "COLLECTIVES",
    "busbw_factor",
    "parse_nccl_tests",
    "read_nccl_tests",
    "efficiency_points",
    "network_bytes_per_node",
    "latency_s",
]

# nccl-tests binary stem -> collective name used in parasim
COLLECTIVES = {
    "all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
    "alltoall": "alltoall", "sendrecv": "sendrecv", "broadcast": "broadcast", "reduce": "reduce",
    "gather": "gather", "scatter": "scatter", "hypercube": "hypercube",
}

_RANK_RE = re.compile(r"#\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*)$")
_NTHREAD_RE = re.compile(r"#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)\s+minBytes\s+(\d+)\s+maxBytes\s+(\d+)(.*)$")
_PERF_RE = re.compile(r"\b(all_reduce|all_gather|reduce_scatter|alltoall|sendrecv|broadcast|reduce|gather|scatter|hypercube)_perf\b")
_NCCL_VERSION_RE = re.compile(r"NCCL version\s+([0-9][0-9.]*[^\s]*)")
_ITERS_RE = re.compile(r"warmup iters:\s*(\d+)\s+iters:\s*(\d+)")


def busbw_factor(collective: str, nranks):
    """busbw / algbw of nccl-tests (doc/PERFORMANCE.md): all_reduce 2(n−1)/n; all_gather, reduce_scatter,
    alltoall (n−1)/n; sendrecv, broadcast, reduce 1."""
    n = np.asarray(nranks, dtype=float)
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "alltoall", "gather", "scatter"):
        return (n - 1) / n
    if collective in ("sendrecv", "broadcast", "reduce", "hypercube"):
        return np.ones_like(n)
    raise InputError(f"unknown collective {collective!r}; expected one of {', '.join(COLLECTIVES)}")


MAX_TIME_S = 1e6  # an nccl-tests row over 11.6 days per collective is not a measurement


def _num(tok: str, *, source: str = "", line: str = "") -> float:
    """A number of an nccl-tests result row ('N/A' and '-' are NaN); InputError naming the file, the row and the
    token otherwise."""
    if tok in ("N/A", "-"):
        return float("nan")
    try:
        return float(tok)
    except ValueError:
        raise InputError(f"{source}: {tok!r} is not a number in the result row {line.strip()!r}") from None


def _parse_block(lines: list[str], *, collective: str | None, source: str) -> list[dict]:
    ranks, hosts, devices = [], [], []
    header_cols = None
    rows = []
    meta = {"nthread": None, "ngpus_per_proc": None, "warmup_iters": None, "iters": None}
    nccl_version = ""
    for raw in lines:
        line = raw.strip()
        m = _NTHREAD_RE.match(line)
        if m:
            meta["nthread"], meta["ngpus_per_proc"] = int(m.group(1)), int(m.group(2))
            it = _ITERS_RE.search(m.group(5))
            if it:
                meta["warmup_iters"], meta["iters"] = int(it.group(1)), int(it.group(2))
            continue
        m = _RANK_RE.match(line)
        if m:
            ranks.append(int(m.group(1)))
            hosts.append(m.group(4))
            devices.append(m.group(7).strip())
            continue
        m = _NCCL_VERSION_RE.search(line)
        if m:
            nccl_version = m.group(1)
            continue
        if line.startswith("#") and " size " in f" {line[1:]} " and "count" in line and "time" in line:
            header_cols = line[1:].split()
            continue
        if header_cols and line[:1].isdigit():
            toks = line.split()
            if len(toks) != len(header_cols):
                continue  # a truncated or interleaved line: not a result row
            rows.append((toks, line))
    if header_cols is None or not rows:
        return []
    t0 = header_cols.index("time")
    meta_cols = header_cols[:t0]
    per = 4  # time, algbw, busbw, wrong/error
    checked = header_cols[t0 + 3].lstrip("#") == "wrong"  # '#wrong': mismatched elements; older 'error': max error
    placements = ["out-of-place", "in-place"][: (len(header_cols) - t0) // per]
    nranks = len(ranks) if ranks else None
    nodes = len(set(hosts)) if hosts else None
    if collective is None:
        raise InputError(f"{source}: cannot tell which collective this nccl-tests output measured; name the *_perf binary in the file name or pass collective=")
    out = []
    for toks, line in rows:
        base = dict(zip(meta_cols, toks[:t0]))
        num = functools.partial(_num, source=source, line=line)
        for i, placement in enumerate(placements):
            t_us, alg, bus, wrong = toks[t0 + per * i: t0 + per * (i + 1)]
            size, time_s = num(base["size"]), num(t_us) * 1e-6
            if not (math.isnan(time_s) or time_s <= MAX_TIME_S) or not math.isfinite(size):
                raise InputError(f"{source}: the result row {line.strip()!r} holds a size or time no collective "
                                 f"takes (time at most {MAX_TIME_S:g} s)")
            root, n_wrong = (num(base["root"]) if "root" in base else -1.0), num(wrong)
            if not (root.is_integer() and root >= -1):  # NaN and inf are not integers
                raise InputError(f"{source}: the root {base['root']!r} of the result row {line.strip()!r} is not a "
                                 f"rank (a whole number, -1 for none)")
            if checked and not (math.isnan(n_wrong) or (n_wrong >= 0 and n_wrong.is_integer())):
                raise InputError(f"{source}: the #wrong count {wrong!r} of the result row {line.strip()!r} is not a "
                                 f"count of elements (a whole number >= 0, or N/A)")
            out.append({
                "source": source, "collective": collective, "nranks": nranks, "nodes": nodes,
                "gpus_per_node": (nranks // nodes) if (nranks and nodes and nranks % nodes == 0) else None,
                "device": devices[0] if devices else "", "nccl_version": nccl_version,
                "size_bytes": size, "count": num(base.get("count", "nan")), "dtype": base.get("type", ""),
                "redop": base.get("redop", ""), "root": int(root),
                "placement": placement, "time_s": time_s,
                "algbw_bytes_per_s": num(alg) * 1e9, "busbw_bytes_per_s": num(bus) * 1e9,
                "wrong": n_wrong if checked else math.nan, "max_error": math.nan if checked else n_wrong,
                **meta,
            })
    return out


def parse_nccl_tests(text: str, *, collective: str | None = None, source: str = "<text>"):
    """Parse nccl-tests output into a long DataFrame (one row per size and placement).

    Columns: source, collective, nranks, nodes, gpus_per_node, device, nccl_version, size_bytes,
    count, dtype, redop, root, placement ('out-of-place' | 'in-place'), time_s,
    algbw_bytes_per_s, busbw_bytes_per_s (as printed, GB/s = 1e9 B/s), wrong (the '#wrong' column: elements the
    data check found mismatched, NaN for N/A or an older log), max_error (an older log's 'error' column), nthread,
    ngpus_per_proc, warmup_iters, iters. The collective comes from the `*_perf` name in the text
    (the command line people paste above the output), else `collective`. InputError if no result
    row is found.
    """
    import pandas as pd

    if collective is not None and collective not in COLLECTIVES:
        raise InputError(f"unknown collective {collective!r}; expected one of {', '.join(COLLECTIVES)}")
    lines = text.splitlines()
    starts = [i for i, ln in enumerate(lines) if _NTHREAD_RE.match(ln.strip())] or [0]
    rows = []
    for j, s in enumerate(starts):
        e = starts[j + 1] if j + 1 < len(starts) else len(lines)
        before = "\n".join(lines[(starts[j - 1] if j else 0): s + 1]) if s else ""
        names = _PERF_RE.findall(before) or _PERF_RE.findall("\n".join(lines[s:e]))
        coll = names[-1] if names else collective
        rows += _parse_block(lines[s:e], collective=coll, source=source)
    if not rows:
        raise InputError(f"{source}: no nccl-tests result rows found (expected the '#  size  count  type ...' table)")
    return pd.DataFrame(rows)


def read_nccl_tests(path: str | Path, *, collective: str | None = None):
    """`parse_nccl_tests` of a file; the file name (e.g. `all_gather_perf_8xh100.log`) names the
    collective when the text does not."""
    from ..spec.presets import file_problem

    p = Path(path)
    problem = file_problem(p, shown=str(path))
    if problem:
        raise InputError(problem)
    text = p.read_text(errors="replace")
    if collective is None:
        m = _PERF_RE.search(p.name)
        if m:
            collective = m.group(1)
    return parse_nccl_tests(text, collective=collective, source=p.name)


def network_bytes_per_node(collective: str, size_bytes, nranks, nodes):
    """Bytes one node must send over the scale-out network for one collective of buffer S
    (node-level ring volume, module docstring): all_reduce 2(N−1)/N·S; all_gather, reduce_scatter
    (N−1)/N·S; alltoall k·S·(n−k)/n with k = n/N; sendrecv, broadcast, reduce S."""
    S = np.asarray(size_bytes, dtype=float)
    n = np.asarray(nranks, dtype=float)
    N = np.asarray(nodes, dtype=float)
    if collective == "all_reduce":
        return 2 * (N - 1) / N * S
    if collective in ("all_gather", "reduce_scatter"):
        return (N - 1) / N * S
    if collective == "alltoall":
        k = n / N
        return k * S * (n - k) / n
    if collective in ("sendrecv", "broadcast", "reduce"):
        return S
    raise InputError(f"no network volume rule for collective {collective!r}")


def latency_s(collective: str, hardware, nranks, nodes) -> float:
    """Fixed (size-independent) time of one collective in the cost model's alpha-beta form
    (cost/collectives.py; Thakur et al. 2005; NCCL tuning.cc hop latencies), with a = nvlink_latency_s
    per NVLink hop and a_net = ib_latency_s per network hop, k = n/N ranks per node:

    one node:  all_reduce ring 2(n−1)·a; all_gather, reduce_scatter, broadcast (n−1)·a;
               alltoall (n−1)·a; sendrecv a; all_reduce NVLS `nvls_latency_s` (0 if the profile has none)
    N nodes:   all_reduce 2[(k−1)·a + (N−1)·a_net]; all_gather, reduce_scatter (k−1)·a + (N−1)·a_net;
               alltoall (k−1)·a + (n−k)·a_net; sendrecv, broadcast a_net
    """
    a, a_net = hardware.nvlink_latency_s, hardware.ib_latency_s
    n, N = float(nranks), float(nodes)
    k = n / N
    if N <= 1:
        return {"all_reduce": 2 * (n - 1) * a, "all_gather": (n - 1) * a, "reduce_scatter": (n - 1) * a,
                "broadcast": (n - 1) * a, "alltoall": (n - 1) * a, "sendrecv": a,
                "nvls": float(getattr(hardware, "nvls_latency_s", 0.0) or 0.0)}.get(collective, (n - 1) * a)
    return {"all_reduce": 2 * ((k - 1) * a + (N - 1) * a_net), "all_gather": (k - 1) * a + (N - 1) * a_net,
            "reduce_scatter": (k - 1) * a + (N - 1) * a_net, "alltoall": (k - 1) * a + (n - k) * a_net,
            "sendrecv": a_net, "broadcast": a_net}.get(collective, (k - 1) * a + (N - 1) * a_net)


# A collective cannot run much faster than the links it crosses: rings and point-to-point reach 0.65-0.91 of them in
# the logs here, NVLS all-reduce (switch-side reduction) stays below 1; above this the log is not of the fabric
MAX_LINK_EFFICIENCY = 1.5


def efficiency_points(df, hardware, *, placement: str = "out-of-place", all_reduce_algorithm: str = "ring",
                      subtract_latency: bool = True, min_bandwidth_time_fraction: float = 0.05):
    """Efficiency of every parsed row against `hardware` (module docstring table).

    Bandwidths are recomputed from size and time (the printed GB/s carry two decimals only).
    With `subtract_latency` (default) the cost model's fixed latency (`latency_s`) is taken off the
    measured time first, so that `latency + volume / (B·eta)` — the form cost/collectives.py
    evaluates — gives back the measured time: eta = volume / (B · (t − latency)). The bandwidth
    time is floored at `min_bandwidth_time_fraction`·t so latency-bound rows stay finite; such
    rows are flagged in `latency_bound`. `all_reduce_algorithm` says how single-node all_reduce
    rows ran: 'ring' (NCCL_ALGO=Ring or NCCL_NVLS_ENABLE=0; feeds nvlink_ring) or 'nvls' (feeds nvls).
    Returns the rows with columns table, x_bytes, latency_s, efficiency, group_span added.
    """
    import pandas as pd

    if placement not in ("out-of-place", "in-place"):
        raise InputError(f"placement must be out-of-place or in-place, got {placement!r}")
    if all_reduce_algorithm not in ("ring", "nvls"):
        raise InputError(f"all_reduce_algorithm must be ring or nvls, got {all_reduce_algorithm!r}")
    d = df[df["placement"] == placement].copy()
    d = d[np.isfinite(d["time_s"].astype(float)) & (d["time_s"] > 0) & (d["size_bytes"] > 0)]
    if d["nranks"].isna().any():
        raise InputError("nccl-tests output without the '# Using devices' block: the number of ranks is unknown")
    nvlink = hardware.nvlink_bytes_per_s
    table = pd.Series("", index=d.index, dtype=object)
    eff = pd.Series(np.nan, index=d.index)
    lat = pd.Series(0.0, index=d.index)
    lbound = pd.Series(False, index=d.index)
    for (coll, n, N), i in d.groupby(["collective", "nranks", "nodes"]).groups.items():
        S = d.loc[i, "size_bytes"].astype(float)
        t = d.loc[i, "time_s"].astype(float)
        if N > 1:
            tname, vol, bw, lkey = "network", network_bytes_per_node(coll, S, n, N), hardware.nics_per_node * hardware.nic_bytes_per_s, coll
        elif coll == "sendrecv":
            tname, vol, bw, lkey = "nvlink_p2p", S, nvlink, coll
        elif coll == "all_reduce" and all_reduce_algorithm == "nvls":
            tname, vol, bw, lkey = "nvls", S, nvlink, "nvls"
        else:
            tname, vol, bw, lkey = "nvlink_ring", S * busbw_factor(coll, n), nvlink, coll
        L = latency_s(lkey, hardware, n, N) if subtract_latency else 0.0
        tb = np.maximum(t - L, min_bandwidth_time_fraction * t)
        table.loc[i] = tname
        eff.loc[i] = vol / tb / bw
        lat.loc[i] = L
        lbound.loc[i] = (t - L) < min_bandwidth_time_fraction * t
    d["table"] = table
    d["efficiency"] = eff
    d["latency_s"] = lat
    d["latency_bound"] = lbound
    fast = d[(d["efficiency"] > MAX_LINK_EFFICIENCY) & ~d["latency_bound"]]
    if len(fast):
        r = fast.iloc[0]
        raise InputError(f"{r['source']}: {r['collective']} of {int(r['size_bytes'])} bytes on {int(r['nranks'])} "
                         f"ranks ran at {r['efficiency']:.2f}x the --base profile's {r['table']} bandwidth, faster "
                         f"than its links: the log is of another fabric, or its sizes or times are wrong")
    d["x_bytes"] = d["size_bytes"].astype(float)
    d["group_span"] = np.where(d["nodes"] > 1, "inter-node", "intra-node")
    return d[d["efficiency"] > 0]
