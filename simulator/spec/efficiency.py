"""Efficiency tables of a hardware profile: a measured or published curve, piecewise linear in log10(x)
(`EfficiencyCurve`), and the one statement of a table's rules (`curve_problem`). Split from hardware.py."""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from ..errors import InputError


def is_finite_number(v) -> bool:
    """True for a number whose float is finite (not nan, inf, or an int beyond the float range)."""
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


COMPUTE_TABLES = ("gemm", "attention")  # tables whose efficiency is a share of a dense peak FLOP/s: at most 1
# The smallest efficiency a table may hold: a calibration's smallest points are latency-bound (a one-byte collective
# across nodes, ~20 us against a NIC's 50 GB/s, is 1e-6 of its rate; a one-byte memory-bound kernel 1e-7 of HBM's),
# and below 1e-9 nothing real lands, yet a time divided by it stays a readable number (round-5 fuzzing: 1e-300
# printed a 300-digit step time).
EFFICIENCY_FLOOR = 1e-9


def efficiency_ceiling(name: str) -> float:
    """The largest efficiency table `name` may hold: 1 for a compute table (`gemm*`, `attention*`: a kernel cannot
    beat the dense peak it is a share of, and an MFU above 100 % would follow), 2 for the others (bytes over a
    peak bandwidth: a memory-bound kernel calibrated on tensors the L2 holds can measure above HBM's peak)."""
    return 1.0 if name.startswith(COMPUTE_TABLES) else 2.0


def curve_problem(x, efficiency, ceiling: float = 2.0) -> str:
    """What is wrong with an efficiency table's `x` and `efficiency` lists as written ('' if nothing): the
    one statement of its rules (equally long, non-empty; x finite, > 0, strictly increasing; efficiency in
    [EFFICIENCY_FLOOR, ceiling], `efficiency_ceiling`), naming the first bad element."""
    for key, vals in (("x", x), ("efficiency", efficiency)):
        if not isinstance(vals, (list, tuple)):
            return f"{key} must be a list of numbers, got {vals!r}"
        if not vals:
            return f"{key} must not be empty, got {vals!r}"
    if len(x) != len(efficiency):
        return f"x and efficiency must be equally long, got {len(x)} and {len(efficiency)} values"
    for i, v in enumerate(x):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not (is_finite_number(v) and v > 0):
            return f"x[{i}] must be a finite number > 0, got {v!r}"
        if i and v <= x[i - 1]:
            return f"x values must increase strictly, got x[{i}] = {v!r} after x[{i - 1}] = {x[i - 1]!r}"
    for i, v in enumerate(efficiency):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not EFFICIENCY_FLOOR <= v <= ceiling:
            return f"efficiency[{i}] must lie in [{EFFICIENCY_FLOOR:g}, {ceiling:g}], got {v!r}"
    return ""


@dataclass(frozen=True, kw_only=True)
class EfficiencyCurve:
    """A measured/published efficiency table: piecewise linear in log10(x), clamped at the ends."""

    x: tuple[float, ...]
    efficiency: tuple[float, ...]
    x_unit: str
    source: str

    def __post_init__(self):
        problem = curve_problem(self.x, self.efficiency)
        if problem:
            raise InputError(f"efficiency curve: {problem}")

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(x, efficiency) as float arrays."""
        return np.asarray(self.x, dtype=float), np.asarray(self.efficiency, dtype=float)

    def __call__(self, x) -> np.ndarray:
        """Efficiency at `x` (array-like, > 0): `np.interp(log10 x, log10 xs, effs)`, clamped."""
        xs, es = self.arrays()
        xa = np.asarray(x, dtype=float)
        return np.interp(np.log10(np.maximum(xa, 1e-300)), np.log10(xs), es)


TABLE_KEYS = ("x", "efficiency", "x_unit", "source")  # the keys of a profile's [efficiency.<name>] table


def curve_from_dict(d: dict, *, where: str, name: str = "") -> EfficiencyCurve:
    """The EfficiencyCurve of a profile's [efficiency.<name>] table `d`; InputError naming `where` for a missing or
    unknown key or a value `curve_problem` refuses (at most `efficiency_ceiling(name)`)."""
    from .presets import check_keys
    from .rules import check_text

    check_keys(d, where=where, required=TABLE_KEYS)
    problem = curve_problem(d["x"], d["efficiency"], efficiency_ceiling(name))
    if problem:
        raise InputError(f"{where}: {problem}")
    return EfficiencyCurve(x=tuple(float(v) for v in d["x"]), efficiency=tuple(float(v) for v in d["efficiency"]),
                           x_unit=check_text(d["x_unit"], f"{where} x_unit"),
                           source=check_text(d["source"], f"{where} source"))
