"""Efficiency-curve fitting (simulator/calibrate/fit.py) against known curves."""
import numpy as np
import pytest

from simulator.calibrate.fit import default_knots, efficiency_at, fit_efficiency_curve, hat_basis
from simulator.errors import InputError
from simulator.spec.hardware import EfficiencyCurve


def test_fit_recovers_a_piecewise_linear_curve_exactly_at_its_knots():
    knots = [1e6, 1e8, 1e10]
    truth = [0.2, 0.7, 0.9]
    x = np.logspace(6, 10, 41)
    e = np.interp(np.log10(x), np.log10(knots), truth)
    f = fit_efficiency_curve(x, e, name="gemm", x_unit="FLOPs", source="test", knots=knots)
    assert f.efficiency == pytest.approx(truth, abs=1e-12)
    assert f.max_relative_error < 1e-12


def test_fitted_table_evaluates_like_the_profile_loader_curve():
    x = np.logspace(3, 9, 30)
    e = 0.8 * x / (x + 1e6)  # saturating bandwidth curve
    f = fit_efficiency_curve(x, e, name="memory", x_unit="bytes", source="test", per_decade=2)
    curve = EfficiencyCurve(x=f.x, efficiency=f.efficiency, x_unit=f.x_unit, source=f.source)
    q = np.logspace(2, 10, 17)  # inside and outside the knot range
    np.testing.assert_allclose(curve(q), f(q), rtol=0, atol=1e-15)


def test_residuals_are_relative_and_the_fit_beats_a_constant():
    rng = np.random.default_rng(0)
    x = np.repeat(np.logspace(5, 9, 9), 3)
    truth = 0.1 + 0.8 * (np.log10(x) - 5) / 4
    e = truth * (1 + 0.02 * rng.standard_normal(x.size))
    f = fit_efficiency_curve(x, e, name="t", x_unit="-", source="s")
    res = (f(x) - e) / e
    np.testing.assert_allclose(f.residuals, res)
    assert f.rms_relative_error == pytest.approx(np.sqrt(np.mean(res**2)))
    assert f.rms_relative_error < 0.03  # noise is 2 %
    const = np.exp(np.mean(np.log(e)))
    assert f.rms_relative_error < np.sqrt(np.mean(((const - e) / e) ** 2)) / 5


def test_hat_basis_rows_sum_to_one_and_knots_span_the_data():
    x = np.logspace(0, 6, 13)
    k = default_knots(x, per_decade=1)
    assert k[0] == pytest.approx(1) and k[-1] == pytest.approx(1e6) and len(k) == 7
    np.testing.assert_allclose(hat_basis(x, k).sum(axis=1), 1.0)
    assert efficiency_at([1, 100], [0.2, 0.4], 10) == pytest.approx(0.3)


def test_bad_points_are_input_errors():
    with pytest.raises(InputError, match="efficiency values"):
        fit_efficiency_curve([1, 2], [0.5, 0.0], name="t", x_unit="-", source="s")
    with pytest.raises(InputError, match="x values"):
        fit_efficiency_curve([-1, 2], [0.5, 0.5], name="t", x_unit="-", source="s")


@pytest.mark.parametrize("name,ceiling", [("gemm", 1.0), ("attention_bwd", 1.0), ("memory", 2.0), ("nvls", 2.0)])
def test_fitted_knots_stay_within_what_the_profile_loader_accepts_for_the_table(name, ceiling):
    # measured points above the table's bound (a CPU calibration whose attention beats its best GEMM, the peak it is
    # measured against) are clipped to the loader's bound for that table (spec/efficiency.py efficiency_ceiling), so the
    # written profile loads: gemm and attention at most 1, memory and collective tables at most 2
    from simulator.spec.efficiency import curve_from_dict

    fit = fit_efficiency_curve([1e6, 1e7, 1e8], [1.5, 2.5, 3.0], name=name, x_unit="x", source="test")
    assert max(fit.efficiency) == ceiling
    curve_from_dict({"x": list(fit.x), "efficiency": list(fit.efficiency), "x_unit": "x", "source": "s"},
                    where="test", name=name)
