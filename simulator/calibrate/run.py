"""Calibration runs: benchmark grids, efficiency points, fitted tables, the measured profile.

    measure (microbench.py, collectives.py, or parsed nccl-tests logs)
      -> efficiency points (achieved / the base profile's peak)
      -> fit (fit.py: piecewise linear in log10 x, relative least squares; residuals kept)
      -> profile (profile_writer.py: base preset + fitted [efficiency.*] + [provenance])

Tables (x and efficiency as in spec/hardware.py):
- gemm:          x = FLOPs of one GEMM; efficiency = achieved FLOP/s / peak_flops(dtype)
- attention:     x = sequence length; forward model FLOP/s (causal-halved) / peak; one table per measured
                 head dim (`attention` at 128, `attention_hd<d>` at the others)
- attention_bwd: x = sequence length; backward executed FLOP/s (2.5× forward: FlashAttention recomputes
                 QKᵀ; the convention the cost model reads it in) / peak
- memory:        x = bytes moved by one kernel; achieved bytes/s / HBM peak bandwidth
- optimizer:     x = bytes one fused AdamW step moves (optimizer_bytes_per_param); achieved bytes/s / HBM peak
- nvlink_ring, nvls, nvlink_p2p, network: see nccl_tests.py
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..errors import InputError
from . import microbench as mb
from .fit import CurveFit, fit_efficiency_curve
from .nccl_tests import efficiency_points

__all__ = ["Grid", "GRIDS", "PROTOCOL", "CalibrationResult", "gemm_points", "attention_points", "memory_points",
           "fit_compute_tables", "fit_collective_tables", "residual_table", "run_calibration", "provenance"]

PROTOCOL = ("torch microbenchmarks: {warmup} warm-up calls, then {iters} calls timed one by one "
            "({timer}); median per shape; efficiency = achieved / peak of the base profile")


@dataclass(frozen=True, kw_only=True)
class Grid:
    """Shapes one calibration run measures."""

    hidden_sizes: tuple[int, ...]
    tokens: tuple[int, ...]  # micro-batch × sequence on one rank
    tp_degrees: tuple[int, ...]
    kv_fraction: float
    seq_lengths: tuple[int, ...]
    head_dims: tuple[int, ...]
    attention_heads: int
    memory_sizes_bytes: tuple[int, ...]
    collective_sizes_bytes: tuple[int, ...]
    warmup: int
    iters: int
    optimizer_params: tuple[int, ...] = (2**12, 2**14, 2**16)
    attention_tokens: int = 0  # > 0: batch × seq per attention call (microbench.bench_attention)


GRIDS = {
    # CPU: small shapes so CI exercises the harness in seconds
    "cpu": Grid(hidden_sizes=(64, 128, 256), tokens=(32, 128), tp_degrees=(1, 2), kv_fraction=1.0,
                seq_lengths=(64, 128, 256), head_dims=(32, 64), attention_heads=4,
                memory_sizes_bytes=(2**16, 2**18, 2**20, 2**22), collective_sizes_bytes=(2**12, 2**16, 2**20),
                warmup=2, iters=5, optimizer_params=(2**12, 2**14, 2**16, 2**18)),
    # GPU: the shapes of 1B-400B-class layers (h 1k-8k, 1k-16k tokens per micro-batch, TP 1-8, GQA 8:1)
    "gpu": Grid(hidden_sizes=(1024, 2048, 4096, 8192), tokens=(1024, 4096, 16384), tp_degrees=(1, 2, 4, 8),
                kv_fraction=0.125, seq_lengths=(512, 1024, 2048, 4096, 8192, 16384, 32768), head_dims=(64, 128),
                attention_heads=32, memory_sizes_bytes=tuple(2**e for e in range(20, 31, 2)),
                collective_sizes_bytes=tuple(2**e for e in range(16, 31, 2)), warmup=5, iters=20,
                optimizer_params=tuple(2**e for e in range(20, 31, 2)), attention_tokens=16384),
}


@dataclass(frozen=True, kw_only=True)
class CalibrationResult:
    """What one calibration run produced: raw measurements, fitted tables and the profile dict."""

    measurements: Mapping[str, object]  # kind -> DataFrame
    fits: Mapping[str, CurveFit]
    profile: dict
    notes: tuple[str, ...] = field(default_factory=tuple)


def gemm_points(df, peak_flops_per_s: float):
    """x = FLOPs per GEMM, efficiency = (FLOPs / median time) / peak."""
    return df["flops"].to_numpy(float), df["flops_per_s"].to_numpy(float) / peak_flops_per_s


def attention_points(df, peak_flops_per_s: float, pass_: str, head_dim: int | None = None):
    """x = sequence length, efficiency = FLOP/s / peak of pass `pass_` (at `head_dim`; None: all)."""
    d = df[df["pass"] == pass_]
    if head_dim is not None:
        d = d[d["head_dim"] == head_dim]
    return d["seq"].to_numpy(float), d["flops_per_s"].to_numpy(float) / peak_flops_per_s


def attention_head_dims(df) -> dict[str, int | None]:
    """{table suffix: head dim} to fit: with head dim 128 measured, the base table at 128 (the head dim a
    table without a suffix holds, cost/attention.py) and '_hd<d>' for each other measured head dim;
    without it one base table over every point pooled."""
    dims = sorted(int(d) for d in df["head_dim"].unique())
    if 128 not in dims:
        return {"": None}
    return {"": 128, **{f"_hd{d}": d for d in dims if d != 128}}


def memory_points(df, peak_bytes_per_s: float):
    """x = bytes moved per kernel (or per optimizer step), efficiency = achieved bytes/s / HBM peak."""
    return df["bytes_moved"].to_numpy(float), df["bytes_per_s"].to_numpy(float) / peak_bytes_per_s


def fit_compute_tables(measurements: Mapping[str, object], *, peak_flops_per_s: float, peak_bytes_per_s: float,
                       label: str, peak_fp8_flops_per_s: float | None = None) -> dict[str, CurveFit]:
    """Fit gemm / gemm_fp8 / attention / attention_bwd / memory / optimizer tables from the benchmark
    DataFrames present (gemm_fp8 against the FP8 dense peak)."""
    fits = {}
    if "gemm" in measurements:
        x, e = gemm_points(measurements["gemm"], peak_flops_per_s)
        fits["gemm"] = fit_efficiency_curve(x, e, name="gemm", x_unit="FLOPs per GEMM",
                                            source=f"{label}: torch.matmul over transformer-layer GEMM shapes")
    if "gemm_fp8" in measurements:
        if not peak_fp8_flops_per_s:
            raise InputError("the base profile has no fp8 peak to measure gemm_fp8 against")
        x, e = gemm_points(measurements["gemm_fp8"], peak_fp8_flops_per_s)
        fits["gemm_fp8"] = fit_efficiency_curve(
            x, e, name="gemm_fp8", x_unit="FLOPs per GEMM",
            source=f"{label}: torch._scaled_mm (e4m3, per-tensor scales, bf16 out) over transformer-layer GEMM shapes")
    if "attention" in measurements:
        att = measurements["attention"]
        for suffix, d in attention_head_dims(att).items():
            for pas, tname in (("fwd", "attention" + suffix), ("bwd", "attention_bwd" + suffix)):
                x, e = attention_points(att, peak_flops_per_s, pas, d)
                fits[tname] = fit_efficiency_curve(
                    x, e, name=tname, x_unit=f"sequence length (tokens), head dim {d or 'pooled'}",
                    source=f"{label}: scaled_dot_product_attention {pas}, causal, "
                           f"{'model FLOPs (4·b·a·s²·d/2)' if pas == 'fwd' else 'executed FLOPs (2.5 × forward)'}")
    if "memory" in measurements:
        x, e = memory_points(measurements["memory"], peak_bytes_per_s)
        kinds = ", ".join(sorted(measurements["memory"]["kernel"].unique()))
        fits["memory"] = fit_efficiency_curve(x, e, name="memory", x_unit="bytes moved per kernel",
                                              source=f"{label}: memory-bound kernels ({kinds})")
    if "optimizer" in measurements:
        x, e = memory_points(measurements["optimizer"], peak_bytes_per_s)
        fits["optimizer"] = fit_efficiency_curve(x, e, name="optimizer", x_unit="bytes moved per optimizer step",
                                                 source=f"{label}: torch AdamW(fused=True).step()")
    return fits


def fit_collective_tables(df, hardware, *, label: str, all_reduce_algorithm: str = "ring",
                          placement: str = "out-of-place") -> tuple[dict[str, CurveFit], object]:
    """Fit the profile's collective tables (nvlink_ring, nvls, nvlink_p2p, network) from parsed or
    measured collective rows, plus one table per collective and group span
    (`nccl_<collective>_<intra|inter>`) so the per-collective shape stays visible. Returns
    (fits, points DataFrame)."""
    pts = efficiency_points(df, hardware, placement=placement, all_reduce_algorithm=all_reduce_algorithm)
    if pts.empty:
        raise InputError("no collective measurement with a positive time and size to fit")
    fits = {}
    for tname, g in pts.groupby("table"):
        colls = ", ".join(sorted(g["collective"].unique()))
        fits[tname] = fit_efficiency_curve(g["x_bytes"], g["efficiency"], name=tname, x_unit="buffer bytes (nccl-tests size)",
                                           source=f"{label}: {colls}")
    for (coll, span), g in pts.groupby(["collective", "group_span"]):
        tname = f"nccl_{coll}_{'intra' if span == 'intra-node' else 'inter'}"
        fits[tname] = fit_efficiency_curve(g["x_bytes"], g["efficiency"], name=tname,
                                           x_unit="buffer bytes (nccl-tests size)",
                                           source=f"{label}: {coll}, {span}, efficiency as in table {g['table'].iloc[0]}")
    return fits, pts


def residual_table(fits: Mapping[str, CurveFit]):
    """One row per fitted table: points, knots, rms and max relative residual."""
    import pandas as pd

    return pd.DataFrame([{"table": k, "points": f.n_points, "knots": len(f.x), "x_min": f.x[0], "x_max": f.x[-1],
                          "eff_min": min(f.efficiency), "eff_max": max(f.efficiency),
                          "rms_rel_residual": f.rms_relative_error, "max_rel_residual": f.max_relative_error}
                         for k, f in fits.items()])


def provenance(*, device_info: Mapping[str, str], kinds: Sequence[str], grid: Grid | None, timer: str,
               notes: str = "") -> dict:
    """The `[provenance]` table: device, versions, date (UTC), protocol, source."""
    versions = ", ".join(f"{k} {v}" for k, v in device_info.items() if k != "device")
    proto = PROTOCOL.format(warmup=grid.warmup if grid else "-", iters=grid.iters if grid else "-", timer=timer)
    d = {"device": device_info.get("device", ""), "versions": versions,
         "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
         "protocol": proto, "source": f"parasim calibrate {' '.join(kinds)}"}
    if notes:
        d["notes"] = notes
    return d


def _host_memory_bytes() -> float:
    import os

    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8e9


def run_calibration(kinds: Sequence[str], *, device: str = "auto", dtype: str | None = None, base: str | None = None,
                    name: str = "measured", grid: str | Grid | None = None, world_size: int | None = None,
                    progress=None) -> CalibrationResult:
    """Measure `kinds` ⊆ {gemm, attention, memory, optimizer, collectives}, fit the tables, build the profile.

    Collectives need two ranks: asked for with other kinds on a one-GPU machine (`calibrate all`),
    they are skipped with a note; asked for alone, the one-rank world is an error.

    device 'auto': cuda if available else cpu. On a GPU `base` names the preset whose peaks define
    efficiency (required); on the CPU `base` may be left out and a `cpu` base is built from the
    measured peaks (cpu_base_profile_dict). `progress(msg)` is called between stages if given.
    """
    torch = mb.import_torch()

    from ..spec.hardware import hardware_from_dict
    from .profile_writer import measured_profile_dict

    _check_kinds(kinds)
    device, on_gpu = _resolve_device(torch, device)
    g = GRIDS[grid or ("gpu" if on_gpu else "cpu")] if not isinstance(grid, Grid) else grid
    dtype = dtype or ("bf16" if on_gpu else "fp32")
    say = progress or (lambda msg: None)
    info = mb.device_info(device)
    notes = []

    m = _measure_kernels(kinds, g, device=device, dtype=dtype, on_gpu=on_gpu, cpu_base=not on_gpu and base is None,
                         say=say)
    base_d = _base_profile(base, on_gpu, m, kinds, name=name, device_name=info["device"], dtype=dtype, notes=notes)
    peak_flops, peak_bw = _base_peaks(base_d, dtype)
    label = f"parasim calibrate on {info['device']} ({dtype}, {_dt.date.today().isoformat()})"
    fp8 = base_d["gpu"]["peak_tflops"].get("fp8")
    fits = fit_compute_tables(m, peak_flops_per_s=peak_flops, peak_bytes_per_s=peak_bw, label=label,
                              peak_fp8_flops_per_s=float(fp8) * 1e12 if fp8 else None)

    ws = world_size or (torch.cuda.device_count() if on_gpu else 2)
    kinds = _measure_collectives(kinds, ws, g, device=device, base_d=base_d, label=label, m=m, fits=fits,
                                 notes=notes, say=say)
    _add_placeholders(base_d, fits, notes)
    prov = provenance(device_info=info, kinds=kinds, grid=g, timer="cuda-events" if on_gpu else "perf_counter",
                      notes="; ".join(notes))
    prof = measured_profile_dict(base_d, fits, name=name, provenance=prov)
    hardware_from_dict(prof, where=f"measured profile {name}")  # the result must load
    return CalibrationResult(measurements=m, fits=fits, profile=prof, notes=tuple(notes))


def _check_kinds(kinds: Sequence[str]) -> None:
    """InputError unless `kinds` is a non-empty subset of the measurable kinds."""
    allowed = ("gemm", "gemm_fp8", "attention", "memory", "optimizer", "collectives")
    bad = [k for k in kinds if k not in allowed]
    if bad or not kinds:
        raise InputError(f"unknown calibration kind {bad[0] if bad else ''!r}; expected some of {', '.join(allowed)}")


def _resolve_device(torch, device: str) -> tuple[str, bool]:
    """(device, on_gpu): 'auto' becomes cuda when torch sees one, else cpu; a cuda device torch cannot
    see is an InputError."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    on_gpu = device.startswith("cuda")
    if on_gpu and not torch.cuda.is_available():
        raise InputError(f"device {device!r} requested but torch sees no CUDA device")
    return device, on_gpu


def _measure_kernels(kinds: Sequence[str], g: Grid, *, device: str, dtype: str, on_gpu: bool, cpu_base: bool,
                     say) -> dict[str, object]:
    """The kernel benchmarks (gemm, attention, memory, optimizer) asked for, kind -> DataFrame.

    With `cpu_base` (a CPU run without --base) gemm and memory are measured even when not asked for:
    their best rates become the CPU base profile's peaks (`_base_profile`)."""
    m: dict[str, object] = {}
    if on_gpu and any(k != "collectives" for k in kinds):
        say("warm-up (2 s)")
        mb.warm_up(device=device, dtype=dtype)
    if "gemm" in kinds or cpu_base:
        say("gemm")
        shapes = mb.transformer_gemm_shapes(hidden_sizes=g.hidden_sizes, tokens=g.tokens, tp_degrees=g.tp_degrees,
                                            kv_fraction=g.kv_fraction)
        m["gemm"] = mb.bench_gemm(shapes, dtype=dtype, device=device, warmup=g.warmup, iters=g.iters)
    if "gemm_fp8" in kinds:
        say("gemm_fp8")
        shapes = mb.transformer_gemm_shapes(hidden_sizes=g.hidden_sizes, tokens=g.tokens, tp_degrees=g.tp_degrees,
                                            kv_fraction=g.kv_fraction)
        from .fp8 import bench_gemm_fp8

        m["gemm_fp8"] = bench_gemm_fp8(shapes, device=device, warmup=g.warmup, iters=g.iters)
    if "attention" in kinds:
        say("attention")
        m["attention"] = mb.bench_attention(seq_lengths=g.seq_lengths, head_dims=g.head_dims, heads=g.attention_heads,
                                            dtype=dtype, device=device, warmup=g.warmup, iters=g.iters,
                                            tokens=g.attention_tokens)
    if "memory" in kinds or cpu_base:
        say("memory")
        m["memory"] = mb.bench_memory(sizes_bytes=g.memory_sizes_bytes, dtype=dtype, device=device,
                                      warmup=g.warmup, iters=g.iters)

    if "optimizer" in kinds:
        say("optimizer")
        m["optimizer"] = mb.bench_optimizer(param_counts=g.optimizer_params, dtype=dtype, device=device,
                                            warmup=g.warmup, iters=g.iters)
    return m


def _base_profile(base: str | None, on_gpu: bool, m: dict, kinds: Sequence[str], *, name: str, device_name: str,
                  dtype: str, notes: list[str]) -> dict:
    """The base profile dict whose peaks define efficiency: the preset `base`, or on the CPU without one
    a base built from the best measured rates (the gemm / memory runs made only for it are then
    dropped from `m`). A GPU without `base` is an InputError."""
    from .profile_writer import base_profile_dict, cpu_base_profile_dict

    if base is not None:
        return base_profile_dict(base)
    if on_gpu:
        raise InputError("calibrating a GPU needs --base PRESET (the datasheet peaks efficiency is measured against)")
    peak = float(m["gemm"]["flops_per_s"].max())
    bw = float(m["memory"]["bytes_per_s"].max())
    base_d = cpu_base_profile_dict(name=name, device=device_name, peak_flops_per_s={dtype: peak},
                                   memory_bytes=_host_memory_bytes(), memory_bytes_per_s=bw)
    notes.append("CPU base profile: peaks are the best rates measured in this run")
    if "gemm" not in kinds:
        m.pop("gemm")
    if "memory" not in kinds:
        m.pop("memory")
    return base_d


def _base_peaks(base_d: dict, dtype: str) -> tuple[float, float]:
    """(peak FLOP/s for `dtype`, HBM bytes/s) of the base profile; InputError if it has no peak for dtype."""
    peak_flops = base_d["gpu"]["peak_tflops"].get(dtype)
    if peak_flops is None:
        raise InputError(f"base profile {base_d.get('name')!r} has no peak for dtype {dtype!r}")
    return float(peak_flops) * 1e12, float(base_d["gpu"]["hbm_gb_per_s"]) * 1e9


def _measure_collectives(kinds: Sequence[str], ws: int, g: Grid, *, device: str, base_d: dict, label: str,
                         m: dict, fits: dict, notes: list[str], say) -> Sequence[str]:
    """Benchmark and fit the collectives when asked for (into `m` and `fits`); returns `kinds`, without
    collectives when fewer than 2 ranks are visible and other kinds were asked for too (`calibrate all`
    on a one-GPU machine: the base's collective tables are kept, with a note)."""
    from .collectives import bench_collectives

    if "collectives" in kinds and ws < 2 and len(kinds) > 1:
        kinds = tuple(k for k in kinds if k != "collectives")
        notes.append(f"collectives not measured: {ws} rank visible (they need 2); the base profile's tables are kept")
    if "collectives" in kinds:
        say("collectives")
        cdf = bench_collectives(world_size=ws, sizes_bytes=g.collective_sizes_bytes, device=device,
                                warmup=g.warmup, iters=g.iters)
        m["collectives"] = cdf
        errs = cdf[cdf["error"].notna()]
        for c in errs["collective"].unique():
            notes.append(f"{c}: not available on this backend ({errs[errs.collective == c]['error'].iloc[0]})")
        ok = cdf[cdf["error"].isna()].copy()
        hw_for_bw = _hardware_for_bandwidth(base_d, fits)
        cf, _ = fit_collective_tables(ok, hw_for_bw, label=f"{label}: torch.distributed on {ws} local ranks")
        fits.update(cf)
    return kinds


def _add_placeholders(base_d: dict, fits: dict, notes: list[str]) -> None:
    """Neutral 1.0 tables in `fits` for the required tables neither the base nor this run has (only the
    CPU base lacks tables): marked as not measured instead of inventing numbers."""
    eff = dict(base_d.get("efficiency", {}))
    missing = [t for t in ("gemm", "attention", "memory", "nvlink_ring", "network") if t not in eff and t not in fits]
    if missing:
        for t in missing:
            src = ("not measured in this run: neutral placeholder 1.0 so the profile loads; "
                   "re-run with this kind to measure it")
            fits[t] = CurveFit(name=t, x=(1.0,), efficiency=(1.0,), x_unit="not measured", source=src, n_points=0,
                               rms_relative_error=float("nan"), max_relative_error=float("nan"), residuals=())
        notes.append("tables not measured (placeholder 1.0): " + ", ".join(missing))


def _hardware_for_bandwidth(base_d: dict, fits):
    """A HardwareProfile view of the base (only its bandwidths are used to normalise collectives)."""
    from ..spec.hardware import hardware_from_dict
    from .profile_writer import _curve_table

    eff = dict(base_d.get("efficiency", {}))
    for t in ("gemm", "attention", "memory", "nvlink_ring", "network"):
        if t not in eff:
            eff[t] = _curve_table(fits[t]) if t in fits else {"x": [1.0], "efficiency": [1.0], "x_unit": "-", "source": "-"}
    if base_d["node"].get("nvls") and "nvls" not in eff:
        eff["nvls"] = {"x": [1.0], "efficiency": [1.0], "x_unit": "-", "source": "-"}
    return hardware_from_dict({**base_d, "efficiency": eff}, where="base profile")
