"""The lent H100's and H200's tables for row-reduction kernels (norms, softmax), from their queued RMSNorm kernels.

    python validation/h100_reduction_table.py           # the fits, the H100's checks and the TOML sections
    python validation/h100_reduction_table.py --check   # exit 1 if a preset's [efficiency.memory_reduction] differs

A norm or a softmax reads a row, reduces it, and writes it back: a kernel with a reduction inside, which on the lent
H100 moves its bytes slower than a streaming copy. dgx-h100's pooled memory table
(validation/h100_memory_table.py) under-predicts the time of the calibration's own RMSNorm by 28 % on both leases
while it over-predicts copy, add and SiLU by 3-7 %. This fits the RMSNorm kernels alone: the first lease's queued
calls that are slower than the host issues them (validation/h100_owed/memory_queued.csv, the memory table's
selection), with the memory table's per-kernel cost t0 kept (a property of launching any kernel on the device) and
the stream rate B fitted by least squares on relative error:

    t(x) = t0 + x / B,    efficiency(x) = x / (t(x) · HBM bytes/s)   at the memory table's knots.

Checked on what the fit never saw (`checks`): the second lease's queued RMSNorm calls
(validation/h100_owed2/memory_queued.csv), and the norm and softmax kernels of a profiled harness step read from the
trace (validation/h100_owed2/kernel_sum_s4096.kernels.csv: torch's fused RMSNorm forward, its grad-input and
weight-gradient kernels, the loss's log-softmax forward and backward over fp32 logits).

The H200 SXM's table is the same fit to its lease's queued RMSNorm calls (validation/h200/memory_queued.csv, with
the H200 memory table's t0; h100_memory_table.LEASES); the held-out checks above are the H100's.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation"))
TRACE = ROOT / "validation" / "h100_owed2" / "kernel_sum_s4096.kernels.csv"


def rms_points(lease="h100_owed"):
    """The GPU-bound queued RMSNorm calls of a lease (h100_memory_table's selection; `lease` its folder, a Path or
    a name under validation/): bytes_moved, queued_s."""
    from h100_memory_table import gpu_bound_points

    g = gpu_bound_points(ROOT / "validation" / lease)
    return g[g["kernel"] == "rmsnorm"].reset_index(drop=True)


def fit(gpu: str = "H100") -> tuple[float, float]:
    """(t0 seconds, B bytes/s): `gpu`'s memory table's t0 and B fitted to its lease's RMSNorm calls (the H100's
    first lease)."""
    from h100_memory_table import LEASES, fit as memory_fit, rate_with_t0

    t0, _ = memory_fit(gpu)
    p = rms_points(LEASES[gpu].data)
    return t0, rate_with_t0(p["bytes_moved"].to_numpy(float), p["queued_s"].to_numpy(float), t0)


def table(gpu: str = "H100") -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(knots, efficiencies) of `gpu`'s [efficiency.memory_reduction]."""
    from h100_memory_table import LEASES, efficiencies

    return efficiencies(*fit(gpu), LEASES[gpu].hbm_bytes_per_s)


def trace_kernels() -> dict:
    """{kernel family: (calls per step, bytes per call)} of the profiled run's reductions (e = 2, T = 4096 tokens,
    h = 4096, 8 layers of two norms plus the final one, vocabulary 32000 in fp32 for the loss)."""
    e, T, h, V, norms = 2.0, 4096, 4096, 32000, 17
    return {"vectorized_layer_norm_kernel": (norms, 2 * e * T * h),  # read x, write y
            "layer_norm_grad_input_kernel": (norms, 3 * e * T * h),  # read dy, x, write dx
            "GammaBetaBackward": (norms, 2 * e * T * h),  # read dy, x (the weight gradient is small)
            "cunn_SoftMaxForward": (1, 2 * 4.0 * T * V),  # read the fp32 logits, write the log-probabilities
            "cunn_SoftMaxBackward": (1, 3 * 4.0 * T * V)}  # read the gradient and the output, write


def checks():
    """DataFrame of the held-out checks: what, bytes per call, measured and fitted seconds, error."""
    import pandas as pd

    t0, b = fit()
    first, second = rms_points(), rms_points("h100_owed2")
    second = second[second["bytes_moved"] >= first["bytes_moved"].min()]  # the sizes the fit took (smaller: host)
    rows = [dict(what=f"second lease, queued RMSNorm, {x / 1e6:.0f} MB", bytes=x, measured_s=t, fit_s=t0 + x / b)
            for x, t in zip(second["bytes_moved"], second["queued_s"])]
    k = pd.read_csv(TRACE)
    k = k[k["activities"] == "cpu+cuda"]
    for key, (calls, by) in trace_kernels().items():
        hit = k[k["kernel"].str.contains(key, regex=False)]
        if abs(hit["calls_per_step"].sum() - calls) > 1e-6:
            raise SystemExit(f"h100_reduction_table.py: {key}: {hit['calls_per_step'].sum()} calls, {calls} expected")
        rows.append(dict(what=f"trace: {key}", bytes=by, measured_s=float(hit["trace_s"].sum()) / calls,
                         fit_s=t0 + by / b))
    d = pd.DataFrame(rows)
    return d.assign(error=d["fit_s"] / d["measured_s"] - 1.0)


def source(gpu: str = "H100") -> str:
    from h100_memory_table import LEASES

    t0, b = fit(gpu)
    lease = LEASES[gpu]
    n = len(rms_points(lease.data))
    held_out = (", checked on the second lease's calls and on the norm and softmax kernels of a profiled training "
                "step" if gpu == "H100" else "")
    return (f"measured: {lease.what}: "
            f"torch's RMSNorm (F.rms_norm, bf16), the {n} calls queued back to back that are slower than the host "
            f"issues them, fitted as t = t0 + bytes/B with the memory table's t0 = {t0 * 1e6:.2f} us: B = "
            f"{b / 1e12:.2f} TB/s; efficiency = bytes / (t x {lease.hbm_bytes_per_s / 1e12:.3g} TB/s) at two knots per "
            f"decade; validation/h100_reduction_table.py{held_out}")


def toml_section(gpu: str = "H100") -> str:
    from h100_memory_table import table_toml

    return table_toml("memory_reduction", *table(gpu), "bytes moved by one row-reduction kernel (norm, softmax)",
                      source(gpu))


def check() -> list[str]:
    """Presets whose [efficiency.memory_reduction] is not their GPU's table."""
    from h100_memory_table import LEASES, presets_differing

    return [p for gpu, lease in LEASES.items()
            for p in presets_differing("memory_reduction", *table(gpu), source(gpu), presets=lease.presets)]


def _report() -> None:
    t0, b = fit()
    p = rms_points()
    print(p.assign(fit_s=t0 + p["bytes_moved"] / b, error=(t0 + p["bytes_moved"] / b) / p["queued_s"] - 1)
          .to_string(index=False))
    print(f"\nB = {b / 1e12:.3f} TB/s; held-out checks:")
    print(checks().to_string(index=False))
    print()
    print(toml_section())
    from h100_memory_table import LEASES

    for gpu in list(LEASES)[1:]:
        t0, b = fit(gpu)
        p = rms_points(LEASES[gpu].data)
        print(f"\n# {gpu}")
        print(p.assign(fit_s=t0 + p["bytes_moved"] / b, error=(t0 + p["bytes_moved"] / b) / p["queued_s"] - 1)
              .to_string(index=False))
        print(f"\nB = {b / 1e12:.3f} TB/s\n")
        print(toml_section(gpu))


def main(argv=None) -> int:
    from h100_memory_table import table_main

    return table_main(argv, __doc__, "memory_reduction", "h100_reduction_table.py", check, _report, toml_section)


if __name__ == "__main__":
    sys.exit(main())
