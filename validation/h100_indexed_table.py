"""The H100's table for index_put_, the indexed-write kernel of flash-attn's pad_input, from queued microbenchmarks.

    python validation/h100_indexed_table.py           # the points, the fit, its check and the TOML section
    python validation/h100_indexed_table.py --check   # exit 1 if a preset's [efficiency.memory_indexed] differs

torch runs `tensor.index_put_((rows,), values)` (no accumulation) as `index_elementwise_kernel`, which computes
each element's destination from the index tensor. On the lent H100 (validation/h100_cp_unpad/
indexing_queued.csv: a [rows, 2048] bf16 tensor of 1 MiB to 1 GiB, 20 calls queued, rows in order and in a random
permutation) it moved 0.83-0.87 TB/s (read + write) from 64 MiB, a third of the vectorised copy's rate and half
of the generic elementwise loop's (validation/h100_strided_table.py). With the memory table's per-kernel cost t0
(validation/h100_memory_table.py) the points from 16 MiB give the stream rate

    B = median over the points of  bytes / (queued time − t0),

and the table  t(x) = t0 + x / B,  efficiency(x) = x / (t(x) · HBM bytes/s)  at the memory table's knots. The
check on data the fit did not see: the index_put_ kernels of the profiled MPT blocks (unpad_kernels.csv, 201 and
235 MB per call, timed inside a training step). The same measurement gives the other row-indexing kernels, which
this table does not cover: gather / index / index_select run at the copy's 2.8-2.9 TB/s (timed with the memory
table), scatter_ at 1.3-1.4 and scatter_add_ at 1.5 TB/s (timed as strided: 1.64 TB/s), index_add_ at 0.70 TB/s
(in no op list yet).
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation"))
QUEUED = ROOT / "validation" / "h100_cp_unpad" / "indexing_queued.csv"
PROFILED = ROOT / "validation" / "h100_cp_unpad" / "unpad_kernels.csv"
MIN_BYTES = 16 * 2**20  # points from 16 MiB per tensor (below, the first calls of each size carry warm-up)


def points():
    """The queued index_put_ points: size_bytes, bytes_moved, queued_s, rate (bytes/s beyond t0)."""
    import pandas as pd

    from h100_memory_table import fit as memory_fit

    t0, _ = memory_fit()
    d = pd.read_csv(QUEUED)
    d = d[d["kernel"].str.startswith("index_put_-") & (d["size_bytes"] >= MIN_BYTES)].copy()
    d["rate"] = d["bytes_moved"] / (d["queued_s"] - t0)
    return d


def fit() -> tuple[float, float]:
    """(t0 seconds, B bytes/s): the memory table's t0 and the points' median stream rate."""
    from h100_memory_table import fit as memory_fit

    t0, _ = memory_fit()
    return t0, float(statistics.median(points()["rate"]))


def carried_fit(gpu: str) -> tuple[float, float]:
    """(t0, B) of another lent GPU's table (h100_memory_table.LEASES): the H100's carried by the streaming rates."""
    from h100_memory_table import carried

    return fit() if gpu == "H100" else carried(gpu, fit()[1])


def table(gpu: str = "H100") -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(knots, efficiencies) of `gpu`'s [efficiency.memory_indexed]."""
    from h100_memory_table import LEASES, efficiencies

    return efficiencies(*carried_fit(gpu), LEASES[gpu].hbm_bytes_per_s)


def held_out():
    """The profiled MPT blocks' index_put_ kernels: bytes per call (read + write of the padded output), measured
    and fitted time per call."""
    import pandas as pd

    t0, b = fit()
    k = pd.read_csv(PROFILED)
    k = k[(k["variant"] == "unpad") & k["kernel"].str.contains("index_put_kernel_impl", regex=False)]
    tokens = k["seq"] * k["micro_batch"]
    by = 2.0 * 2 * tokens * k["d_model"]  # bf16 rows read, padded output written
    per_call = k["device_s"] / k["calls"]
    return k.assign(bytes=by, measured_s=per_call, fit_s=t0 + by / b, error=(t0 + by / b) / per_call - 1.0)


def source(gpu: str = "H100") -> str:
    if gpu != "H100":
        from h100_memory_table import carried_source

        return carried_source(gpu, "the H100 indexed-write table's (index_put_, validation/h100_cp_unpad/"
                              "indexing_queued.csv)", fit()[1], "h100_indexed_table.py")
    t0, b = fit()
    p = points()
    return (f"measured: the lent H100 80GB HBM3 SXM (2026-11-27, session 15; validation/h100_cp_unpad/"
            f"indexing_queued.csv, README there): torch's index_put_ (index_elementwise_kernel) on [rows, 2048] bf16, "
            f"{p['size_bytes'].min() / 2**20:.0f} MiB to {p['size_bytes'].max() / 2**20:.0f} MiB, 20 calls queued, "
            f"rows in order and permuted, {len(p)} points; with the memory table's t0 = {t0 * 1e6:.2f} us per kernel, "
            f"their median B = {b / 1e12:.2f} TB/s ({p['rate'].min() / 1e12:.2f}-{p['rate'].max() / 1e12:.2f}); "
            f"efficiency = bytes / ((t0 + bytes/B) x 3.35 TB/s) at two knots per decade; "
            f"validation/h100_indexed_table.py")


def toml_section(gpu: str = "H100") -> str:
    from h100_memory_table import table_toml

    return table_toml("memory_indexed", *table(gpu), "bytes moved by one index_put_ kernel (indexed writes)",
                      source(gpu))


def check() -> list[str]:
    """Presets whose [efficiency.memory_indexed] is not their GPU's table (the H200's carried from the H100's)."""
    from h100_memory_table import LEASES, presets_differing

    return [p for gpu, lease in LEASES.items()
            for p in presets_differing("memory_indexed", *table(gpu), source(gpu), presets=lease.presets)]


def _report() -> None:
    p = points()
    print(p[["kernel", "size_bytes", "bytes_moved", "queued_s", "rate"]].to_string(index=False))
    h = held_out()
    print(h[["model", "bytes", "measured_s", "fit_s", "error"]].to_string(index=False), "\n")
    print(toml_section())
    from h100_memory_table import LEASES

    for gpu in list(LEASES)[1:]:
        print(f"\n# {gpu}, carried\n" + toml_section(gpu))


def main(argv=None) -> int:
    from h100_memory_table import table_main

    return table_main(argv, __doc__, "memory_indexed", "h100_indexed_table.py", check, _report, toml_section)


if __name__ == "__main__":
    sys.exit(main())
