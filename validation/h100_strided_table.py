"""The H100's table for elementwise kernels on strided or broadcast operands, from one training step's kernels.

    python validation/h100_strided_table.py           # the families, the fit, its residuals and the TOML section
    python validation/h100_strided_table.py --check   # exit 1 if a preset's [efficiency.memory_strided] differs

torch runs an elementwise op with its vectorised kernel (`vectorized_elementwise_kernel<8, ...>`) only when every
operand is contiguous with one layout (TensorIterator `is_contiguous`, aten/src/ATen/native/cuda/CUDALoops.cuh
`gpu_kernel_impl`); with a strided view or a broadcast operand it runs the generic loop
`elementwise_kernel<128, 4, ...>`, which computes every element's offsets. The lent H100's profiled harness step
(validation/h100_owed2/kernel_sum_s4096.kernels.csv: every kernel of 3 steps of
L8-h4096-a32-kv8-f14336-s4096-b1-none-bf16-sdpa, read from the profiler's trace, with the aten ops and shapes that
launched it) has six such families: silu and its backward on the gate half of the gate/up output, the products
(SwiGLU's with the up half, RoPE's with the broadcast cos / sin), RoPE's sums and negation, and the copies of
rotate_half's backward and of the QKV gradient's layout. Each family's calls and bytes per call follow from the
run's shapes (`families`; e = 2 bytes, T = 4096 tokens, 32 query and 8 KV heads of 128, f = 14336, 8 layers). With
the memory table's per-kernel cost t0 (validation/h100_memory_table.py: 2.50 µs), each family gives a stream rate

    B_family = Σ bytes / (measured time − calls · t0),

and the table takes their median B:  t(x) = t0 + x / B,  efficiency(x) = x / (t(x) · HBM bytes/s), at the memory
table's knots. The families' residuals against the fit are printed; the check on data the fit did not see is the
other 39 profiled runs' non-GEMM kernel time (docs/validation-h100.md, finding 10).
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation"))
KERNELS = ROOT / "validation" / "h100_owed2" / "kernel_sum_s4096.kernels.csv"
PRESETS = ("dgx-h100", "gcp-a3-mega")  # the H100 SXM presets that carry the lent H100's measured tables
GENERIC = "elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast"


def families() -> dict:
    """{family: (substring of the kernel name, [(calls per step, bytes per call)])} of the profiled run."""
    e, T, L = 2.0, 4096, 8
    nq, nk, nf, table = T * 32 * 128, T * 8 * 128, T * 14336, T * 128  # elements: Q, K, one FFN half, cos or sin
    return {
        "silu (gate half)": ("silu_kernel", [(L, 2 * e * nf)]),
        "silu_backward (gate half)": ("silu_backward_kernel", [(L, 3 * e * nf)]),
        "neg (a half of Q, K)": ("neg_kernel", [(2 * L, e * nq), (2 * L, e * nk)]),
        "add (RoPE, forward and backward)": ("CUDAFunctor_add", [(3 * L, 3 * e * nq), (3 * L, 3 * e * nk)]),
        "copy (rotate_half backward, QKV gradient layout)": (
            "direct_copy_kernel", [(2 * L, e * nq), (2 * L, e * nk), (L, 2 * e * (nq + 2 * nk))]),
        "mul (SwiGLU with the up half; RoPE with cos, sin)": (
            "MulFunctor", [(2 * L, 3 * e * nf), (4 * L, e * (2 * nq + table)), (4 * L, e * (2 * nk + table))]),
    }


def points():
    """DataFrame per family: calls, bytes, measured_s (per step), rate B_family (bytes/s)."""
    import pandas as pd

    from h100_memory_table import fit as memory_fit

    t0, _ = memory_fit()
    k = pd.read_csv(KERNELS)
    k = k[(k["activities"] == "cpu+cuda") & k["kernel"].str.contains(GENERIC, regex=False)]
    rows = []
    for fam, (key, calls) in families().items():
        hit = k[k["kernel"].str.contains(key, regex=False)]
        if fam.startswith("silu ("):
            hit = hit[~hit["kernel"].str.contains("silu_backward", regex=False)]
        n, by = sum(c for c, _ in calls), sum(c * b for c, b in calls)
        if abs(hit["calls_per_step"].sum() - n) > 1e-6:
            raise SystemExit(f"h100_strided_table.py: {fam}: {hit['calls_per_step'].sum()} calls measured, "
                             f"{n} expected")
        t = float(hit["trace_s"].sum())
        rows.append(dict(family=fam, calls=n, bytes=by, measured_s=t, rate=by / (t - n * t0)))
    return pd.DataFrame(rows)


def fit() -> tuple[float, float]:
    """(t0 seconds, B bytes/s): the memory table's t0 and the families' median stream rate."""
    from h100_memory_table import fit as memory_fit

    t0, _ = memory_fit()
    return t0, float(statistics.median(points()["rate"]))


def carried_fit(gpu: str) -> tuple[float, float]:
    """(t0, B) of another lent GPU's table (h100_memory_table.LEASES): the H100's carried by the streaming rates."""
    from h100_memory_table import carried

    return fit() if gpu == "H100" else carried(gpu, fit()[1])


def table(gpu: str = "H100") -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(knots, efficiencies) of `gpu`'s [efficiency.memory_strided]."""
    from h100_memory_table import LEASES, efficiencies

    return efficiencies(*carried_fit(gpu), LEASES[gpu].hbm_bytes_per_s)


def residuals():
    """The families with the fit's time and relative error."""
    t0, b = fit()
    p = points()
    fit_s = [sum(c * (t0 + by / b) for c, by in calls) for _, calls in families().values()]
    return p.assign(fit_s=fit_s, error=[f / m - 1.0 for f, m in zip(fit_s, p["measured_s"])])


def source(gpu: str = "H100") -> str:
    if gpu != "H100":
        from h100_memory_table import carried_source

        return carried_source(gpu, "the H100 strided table's (torch's generic elementwise kernel on strided or "
                              "broadcast operands, validation/h100_owed2/kernel_sum_s4096.kernels.csv)", fit()[1],
                              "h100_strided_table.py")
    t0, b = fit()
    r = residuals()
    per_call = [by for _, calls in families().values() for _, by in calls]
    lo, hi = min(per_call), max(per_call)
    return (f"measured: the lent H100 80GB HBM3 SXM (2026-11-27, second lease; validation/h100_owed2/"
            f"kernel_sum_s4096.kernels.csv, README there): torch's generic elementwise kernel (elementwise_kernel<128, "
            f"4>, run when an operand is a strided view or broadcast) in 3 profiled harness steps of "
            f"L8-h4096-a32-kv8-f14336-s4096, six families (silu, silu_backward, neg, add, copy, mul; "
            f"{int(r['calls'].sum())} calls per step, {lo / 1e6:.0f}-{hi / 1e6:.0f} MB each), each family's rate "
            f"with the memory table's t0 = {t0 * 1e6:.2f} us per "
            f"kernel, their median B = {b / 1e12:.2f} TB/s (families {r['rate'].min() / 1e12:.2f}-"
            f"{r['rate'].max() / 1e12:.2f}); efficiency = bytes / ((t0 + bytes/B) x 3.35 TB/s) at two knots per "
            f"decade; validation/h100_strided_table.py")


def toml_section(gpu: str = "H100") -> str:
    from h100_memory_table import table_toml

    return table_toml("memory_strided", *table(gpu), "bytes moved by one elementwise kernel on strided or broadcast "
                      "operands", source(gpu))


def check() -> list[str]:
    """Presets whose [efficiency.memory_strided] is not their GPU's table (the H200's carried from the H100's)."""
    from h100_memory_table import LEASES, presets_differing

    return [p for gpu, lease in LEASES.items()
            for p in presets_differing("memory_strided", *table(gpu), source(gpu), presets=lease.presets)]


def _report() -> None:
    r = residuals()
    r = r.assign(rate_tb_s=r["rate"] / 1e12, measured_ms=r["measured_s"] * 1e3, fit_ms=r["fit_s"] * 1e3)
    print(r[["family", "calls", "bytes", "measured_ms", "rate_tb_s", "fit_ms", "error"]].to_string(index=False))
    print(f"median |error| {r['error'].abs().median():.3f}, max {r['error'].abs().max():.3f}\n")
    print(toml_section())
    from h100_memory_table import LEASES

    for gpu in list(LEASES)[1:]:
        print(f"\n# {gpu}, carried\n" + toml_section(gpu))


def main(argv=None) -> int:
    from h100_memory_table import table_main

    return table_main(argv, __doc__, "memory_strided", "h100_strided_table.py", check, _report, toml_section)


if __name__ == "__main__":
    sys.exit(main())
