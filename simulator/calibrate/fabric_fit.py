"""Fit one fabric's per-hop latency and size curve to measured collective times, through the cost model.

A fabric is a scale-up generation (NVLink3/4/5: `nvlink_latency_us` and `[efficiency.nvlink_ring]`) or a
scale-out network (InfiniBand, AWS EFA, GCP GPUDirect-TCPXO: `ib_latency_us` and `[efficiency.network]`).
The input is a sweep of one system: rows (collective, n ranks, k per node, message M, measured time t).
The model that is fitted is `simulator.cost.collectives` itself (algorithm `auto` unless a row forced one),
so the numbers written into a profile give back the measured times through the same code that uses them:

1. Warm-up artefacts (`warmup_artefacts`): a row slower than a larger message of the same sweep is not
   used (every algorithm's time grows with M; nccl-tests' first sizes often carry connection set-up).
2. Floor (`hockney_floor`, Hockney 1991 `t = L + M / r`): least-squares line through the smallest rows
   (two by default, as the A100 derivation in benchmarks/collectives_error.py) -> intercept L.
3. Per-hop latency (`solve_latency`): the value a of the latency key for which the model's time of a
   1-byte message equals L. Each algorithm's fixed cost is linear in a and `auto` takes their minimum,
   so the time is monotone in a: bisection.
4. Size curve (`solve_efficiency`): at each row, the constant efficiency eta for which the model's time
   equals t (the time decreases with eta: bisection on log eta, clipped to (1e-6, 2]) -> points
   (M_i, eta_i) -> the profile's table with a knot at every M_i (`fit.fit_efficiency_curve`). A row
   within 5 % of the floor (t - L < 0.05 t) is latency-bound: it says nothing about bandwidth and sets
   no knot (the same rule as nccl_tests.efficiency_points' `min_bandwidth_time_fraction`).
5. Residuals: (t_model - t) / t of every row with the fitted profile (`FabricFit.residuals`).

Pure functions on frozen records; the caller chooses which rows calibrate (never the held-out ones).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..cost import collectives as C
from ..errors import InputError
from ..spec.efficiency import EfficiencyCurve
from ..spec.hardware import HardwareProfile
from .fit import MAX_EFFICIENCY, MIN_EFFICIENCY, fit_efficiency_curve

__all__ = ["Measurement", "FabricFit", "warmup_artefacts", "hockney_floor", "model_time_s", "with_latency",
           "with_table", "solve_latency", "solve_efficiency", "fit_fabric"]

LATENCY_KEYS = {"nvlink_latency_us": "nvlink_latency_s", "ib_latency_us": "ib_latency_s"}
_COLL = {"all_reduce": C.all_reduce_s, "all_gather": C.all_gather_s, "reduce_scatter": C.reduce_scatter_s}


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """One measured collective: `time_s` for an nccl-tests-sized `message_bytes` over `n_ranks` ranks,
    `ranks_per_node` of them per NVLink domain; `algorithm` 'auto' unless the run forced one."""

    coll_id: str
    collective: str
    n_ranks: int
    ranks_per_node: int
    message_bytes: float
    time_s: float
    algorithm: str = "auto"


@dataclass(frozen=True, kw_only=True)
class FabricFit:
    """A fitted fabric: latency key and value, the floor it came from, the table, and the residuals."""

    name: str
    latency_key: str
    latency_us: float
    floor_us: float
    floor_rows: tuple[str, ...]
    floor_residuals: tuple[float, ...]  # (line - t) / t of the floor rows
    table: str
    x: tuple[float, ...]
    efficiency: tuple[float, ...]
    rows: tuple[str, ...]  # rows the table was fitted on, in x order
    dropped: tuple[str, ...]  # warm-up artefacts, not used
    latency_bound: tuple[str, ...]  # rows within 5 % of the floor: no knot
    residuals: tuple[tuple[str, float], ...]  # (coll_id, (t_model - t) / t) with the fitted profile

    @property
    def max_abs_residual(self) -> float:
        return max((abs(r) for _, r in self.residuals), default=0.0)


def warmup_artefacts(rows, tolerance: float = 0.05) -> set[str]:
    """coll_ids of rows slower, by more than `tolerance` (relative), than a larger message of the same
    sweep (collective, n, k, algorithm): t(M) does not decrease with M for any algorithm, so such a row
    measured something besides the collective (connection set-up, a first-call cost). The tolerance
    keeps timing noise: the A100 sweep has 1 MiB 0.5 % slower than 2 MiB (a100_8gpu_ar_1048576)."""
    out = set()
    for r in rows:
        if any(q is not r and (q.collective, q.n_ranks, q.ranks_per_node, q.algorithm)
               == (r.collective, r.n_ranks, r.ranks_per_node, r.algorithm)
               and q.message_bytes > r.message_bytes and r.time_s > (1.0 + tolerance) * q.time_s for q in rows):
            out.add(r.coll_id)
    return out


def hockney_floor(message_bytes, time_s, count: int = 2) -> tuple[float, float, np.ndarray]:
    """Least-squares line `t = L + M / r` through the `count` smallest messages (Hockney 1991).

    Returns (L seconds, r bytes/s, relative residuals (line - t) / t of those points). L is clipped to
    [0, min t] and r to > 0 (a falling line means the points are all latency: L = their mean).
    """
    m = np.asarray(message_bytes, dtype=float)
    t = np.asarray(time_s, dtype=float)
    if m.size < 1 or m.shape != t.shape:
        raise InputError(f"hockney_floor needs equally long, non-empty arrays, got {m.shape} and {t.shape}")
    i = np.argsort(m)[:count]
    m, t = m[i], t[i]
    if m.size < 2 or np.ptp(m) == 0:
        slope, L = 0.0, float(np.mean(t))
    else:
        slope, L = np.polyfit(m, t, 1)
        if slope <= 0:
            slope, L = 0.0, float(np.mean(t))
    L = float(np.clip(L, 0.0, t.min()))
    line = L + slope * m
    return L, (1.0 / slope if slope > 0 else np.inf), (line - t) / t


def model_time_s(profile: HardwareProfile, row: Measurement) -> float:
    """The cost model's time for the row (cost/collectives.py, the row's algorithm)."""
    try:
        f = _COLL[row.collective]
    except KeyError:
        raise InputError(f"fabric fits take {', '.join(_COLL)} rows, got {row.collective!r}") from None
    return float(f(profile, row.message_bytes, row.n_ranks, row.ranks_per_node, row.algorithm))


def with_latency(profile: HardwareProfile, latency_key: str, seconds: float) -> HardwareProfile:
    """A copy of `profile` with the per-hop latency `latency_key` (TOML name) set to `seconds`."""
    try:
        attr = LATENCY_KEYS[latency_key]
    except KeyError:
        raise InputError(f"latency key must be one of {', '.join(LATENCY_KEYS)}, got {latency_key!r}") from None
    return dataclasses.replace(profile, **{attr: float(seconds)})


def with_table(profile: HardwareProfile, table: str, x, efficiency, source: str = "fabric fit") -> HardwareProfile:
    """A copy of `profile` whose `[efficiency.<table>]` is (x, efficiency)."""
    old = profile.efficiency.get(table)
    curve = EfficiencyCurve(x=tuple(float(v) for v in x), efficiency=tuple(float(v) for v in efficiency),
                            x_unit=old.x_unit if old else "bytes (nccl-tests buffer size)", source=source)
    return dataclasses.replace(profile, efficiency={**profile.efficiency, table: curve})


def _bisect(f, lo: float, hi: float, steps: int = 80) -> float:
    """Root of an increasing f on [lo, hi] (f(lo) <= 0 <= f(hi) assumed; endpoints returned otherwise)."""
    if f(lo) >= 0:
        return lo
    if f(hi) <= 0:
        return hi
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return 0.5 * (lo + hi)


def solve_latency(profile: HardwareProfile, latency_key: str, floor_s: float, row: Measurement) -> float:
    """Per-hop latency (seconds) for which the model's time of a 1-byte `row`-shaped message is `floor_s`."""
    one_byte = dataclasses.replace(row, message_bytes=1.0)
    return _bisect(lambda a: model_time_s(with_latency(profile, latency_key, a), one_byte) - floor_s, 0.0, floor_s)


def solve_efficiency(profile: HardwareProfile, table: str, row: Measurement) -> float:
    """Constant efficiency of `table` for which the model gives the row's measured time (bisection on
    log eta; MIN_EFFICIENCY / MAX_EFFICIENCY where the time cannot be reached)."""
    def excess(log_eta):  # increasing in log eta: measured minus model
        return row.time_s - model_time_s(with_table(profile, table, [1.0], [float(np.exp(log_eta))]), row)
    return float(np.exp(_bisect(excess, np.log(MIN_EFFICIENCY), np.log(MAX_EFFICIENCY))))


def fit_fabric(profile: HardwareProfile, rows, *, name: str, latency_key: str, table: str,
               floor_count: int = 2, table_rows=None, latency_bound_fraction: float = 0.05
               ) -> tuple[FabricFit, HardwareProfile]:
    """Fit `latency_key` and `[efficiency.<table>]` of `profile` to calibration `rows` (module docstring).

    `table_rows` (coll_ids; default all usable rows) limits the rows the table is fitted on, e.g. to the
    rows below the profile's `nvls_min_bytes` for the ring table. Returns the fit and the fitted profile.
    """
    rows = list(rows)
    dropped = warmup_artefacts(rows)
    use = sorted((r for r in rows if r.coll_id not in dropped), key=lambda r: r.message_bytes)
    if len(use) < 2:
        raise InputError(f"fabric fit {name}: needs two usable rows, got {len(use)}")
    L, _, floor_res = hockney_floor([r.message_bytes for r in use], [r.time_s for r in use], floor_count)
    latency = solve_latency(profile, latency_key, L, use[0])
    prof = with_latency(profile, latency_key, latency)
    bound = {r.coll_id for r in use if r.time_s - L < latency_bound_fraction * r.time_s}
    pick = [r for r in use if (table_rows is None or r.coll_id in table_rows) and r.coll_id not in bound]
    if not pick:
        raise InputError(f"fabric fit {name}: every row is within {latency_bound_fraction:.0%} of the floor")
    pts = [(r.message_bytes, solve_efficiency(prof, table, r), r.coll_id) for r in pick]
    xs = np.array([p[0] for p in pts])
    curve = fit_efficiency_curve(xs, np.array([p[1] for p in pts]), name=table, x_unit="bytes", source=name,
                                 knots=np.unique(xs))
    eff = tuple(float(f"{e:.4g}") for e in curve.efficiency)
    latency_us = round(latency * 1e6, 2)
    prof = with_table(with_latency(prof, latency_key, latency_us * 1e-6), table, curve.x, eff, source=name)
    res = tuple((r.coll_id, model_time_s(prof, r) / r.time_s - 1.0) for r in rows)
    fit = FabricFit(name=name, latency_key=latency_key, latency_us=latency_us, floor_us=L * 1e6,
                    floor_rows=tuple(r.coll_id for r in use[:floor_count]),
                    floor_residuals=tuple(float(v) for v in floor_res), table=table, x=curve.x, efficiency=eff,
                    rows=tuple(p[2] for p in sorted(pts)), dropped=tuple(sorted(dropped)),
                    latency_bound=tuple(sorted(bound)), residuals=res)
    return fit, prof
