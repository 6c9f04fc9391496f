"""Fit efficiency curves to microbenchmark points; report the residuals.

A profile's efficiency table is a piecewise-linear function of log10(x), held constant beyond its
end knots (spec/hardware.py `EfficiencyCurve`). The fit uses exactly that function class, so the
curve written into the profile is the curve that was fitted:

    eta(x) = sum_j c_j * phi_j(log10 x)

with phi_j the "hat" basis functions on the knots u_1 < ... < u_K (phi_j(u_i) = [i == j], linear in
between, flat outside), so c_j is the efficiency at knot j. The coefficients minimise the **relative**
squared error sum_i ((eta(x_i) - e_i) / e_i)^2 (weighted linear least squares), because the cost
model divides by eta: a relative efficiency error is a relative time error of the same size.

Calibration uses microbenchmarks only — never the end-to-end runs used to report accuracy
(DESIGN.md, "Calibration fits a few efficiency parameters from microbenchmarks").
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..spec.efficiency import efficiency_ceiling

__all__ = ["CurveFit", "default_knots", "hat_basis", "fit_efficiency_curve", "efficiency_at"]

MIN_EFFICIENCY = 1e-6  # the profile loader needs efficiency > 0
MAX_EFFICIENCY = 2.0  # ... and <= 2 (NVLS busbw may exceed the wire rate)


@dataclass(frozen=True, kw_only=True)
class CurveFit:
    """A fitted table and how well it fits: `x`, `efficiency` are what the profile stores."""

    name: str
    x: tuple[float, ...]
    efficiency: tuple[float, ...]
    x_unit: str
    source: str
    n_points: int
    rms_relative_error: float  # sqrt(mean(((eta_fit - e) / e)^2)) over the points
    max_relative_error: float  # max |eta_fit - e| / e
    residuals: tuple[float, ...]  # (eta_fit(x_i) - e_i) / e_i in input order

    def __call__(self, x) -> np.ndarray:
        return efficiency_at(self.x, self.efficiency, x)


def efficiency_at(knots_x, knots_eff, x) -> np.ndarray:
    """eta(x) = np.interp(log10 x, log10 knots_x, knots_eff): the profile's interpolation rule."""
    return np.interp(np.log10(np.asarray(x, dtype=float)), np.log10(np.asarray(knots_x, dtype=float)),
                     np.asarray(knots_eff, dtype=float))


def default_knots(x, *, per_decade: float = 1.0, max_knots: int = 12) -> np.ndarray:
    """Knots spread evenly in log10(x) from min(x) to max(x): about `per_decade` per decade (>= 2,
    <= `max_knots`, never more than the number of distinct x values)."""
    u = np.log10(np.unique(np.asarray(x, dtype=float)))
    if u.size == 0:
        raise InputError("cannot fit an efficiency curve to zero points")
    if u.size == 1:
        return 10 ** u
    n = int(min(max(2, math.ceil((u[-1] - u[0]) * per_decade) + 1), max_knots, u.size))
    k = 10 ** np.linspace(u[0], u[-1], n)
    k[0], k[-1] = 10 ** u[0], 10 ** u[-1]
    return np.unique(np.array([float(f"{v:.6g}") for v in k]))  # readable knots in the profile


def hat_basis(x, knots) -> np.ndarray:
    """Matrix Phi (len(x) × len(knots)) of the piecewise-linear hat functions in log10 space."""
    u = np.log10(np.asarray(x, dtype=float))
    k = np.log10(np.asarray(knots, dtype=float))
    eye = np.eye(k.size)
    return np.stack([np.interp(u, k, eye[j]) for j in range(k.size)], axis=1)


def fit_efficiency_curve(x, efficiency, *, name: str, x_unit: str, source: str, knots=None,
                         per_decade: float = 1.0) -> CurveFit:
    """Weighted least-squares fit of a piecewise-linear-in-log10(x) efficiency curve (module docstring).

    `x` > 0 and `efficiency` > 0 are the measured points (repeats allowed). Knot values are clipped
    to [1e-6, efficiency_ceiling(name)], the range the profile loader accepts (1 for gemm and attention tables,
    a share of a dense peak: a CPU run whose attention beats its best GEMM, the peak it is measured against,
    reads 1). Residuals are relative: (fit − measured)/measured.
    """
    x = np.asarray(x, dtype=float)
    e = np.asarray(efficiency, dtype=float)
    if x.shape != e.shape or x.ndim != 1 or x.size == 0:
        raise InputError(f"fit needs equally long 1-D x and efficiency arrays, got shapes {x.shape} and {e.shape}")
    if not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise InputError(f"fit {name}: x values must be finite and > 0, got {x[~(np.isfinite(x) & (x > 0))][:3].tolist()}")
    if not np.all(np.isfinite(e)) or np.any(e <= 0):
        raise InputError(f"fit {name}: efficiency values must be finite and > 0, got {e[~(np.isfinite(e) & (e > 0))][:3].tolist()}")
    kn = default_knots(x, per_decade=per_decade) if knots is None else np.unique(np.asarray(knots, dtype=float))
    if kn.size == 1:
        c = np.array([np.exp(np.mean(np.log(e)))])  # geometric mean minimises symmetric relative error
    else:
        phi = hat_basis(x, kn)
        w = 1.0 / e
        c, *_ = np.linalg.lstsq(phi * w[:, None], np.ones_like(e), rcond=None)  # (phi c - e)/e = phi c w - 1
    c = np.clip(c, MIN_EFFICIENCY, efficiency_ceiling(name))  # the loader's bound for this table (spec/efficiency.py)
    fit = efficiency_at(kn, c, x)
    res = (fit - e) / e
    return CurveFit(name=name, x=tuple(float(v) for v in kn), efficiency=tuple(float(v) for v in c), x_unit=x_unit,
                    source=source, n_points=int(x.size), rms_relative_error=float(np.sqrt(np.mean(res ** 2))),
                    max_relative_error=float(np.max(np.abs(res))), residuals=tuple(float(r) for r in res))
