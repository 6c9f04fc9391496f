"""Fabric fits (simulator/calibrate/fabric_fit.py, benchmarks/collectives_fabrics.py) and the held-out error
of the collective model by message-size band (issue 23): fits use calibration rows only, the profiles hold
what the fits give, and the held-out median |error| stays within the stated bound in every band >= 1 MiB."""
import copy
import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

from simulator.calibrate import fabric_fit as FF
from simulator.cost import collectives as C
from simulator.spec.hardware import hardware_from_dict, load_hardware
from simulator.spec.presets import read_toml, resolve

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


@pytest.fixture(scope="module")
def measured(shared_data):
    import collectives_error as ce
    return ce.load_rows(shared_data("collectives.csv"))  # skip or fail without the shared data: conftest


@pytest.fixture(scope="module")
def fits(measured):
    import collectives_fabrics as cf
    return cf.fit_all(measured)


# ---- the stated accuracy: held-out rows, by size band ------------------------------------------------------
# Held-out median |error| of predicted busbw (= measured time / predicted time - 1) per band, as reached
# with the fitted fabrics (docs/collectives.md): 1-64 MiB 2.9 %, 64 MiB-1 GiB 4.4 %, >= 1 GiB 1.2 %.
# The bound is the goal, 15 %, in every band from 1 MiB up.
@pytest.mark.parametrize("lo,hi,min_rows", [(2**20, 2**26, 10), (2**26, 2**30, 8), (2**30, np.inf, 30)])
def test_held_out_median_error_within_15_percent_in_every_band_from_1_mib(measured, lo, hi, min_rows):
    band = measured[(measured.split == "held-out") & (measured.message_bytes >= lo) & (measured.message_bytes < hi)]
    assert len(band) >= min_rows
    assert band.error_pct.abs().median() <= 15.0, band.sort_values("error_pct")[["coll_id", "error_pct"]]


def test_held_out_1_to_64_mib_rows_cover_every_fitted_fabric(measured):
    # the band is not carried by one system: each of B200 in one node, EFA v4 and TCPXO has held-out rows
    m = measured.message_bytes
    band = measured[(measured.split == "held-out") & (m >= 2**20) & (m < 2**26)]
    for prefix in ("b200_1node_ar_", "b200_4node_ar_", "gcp_a3mega_2node_ar_"):
        rows = band[band.coll_id.str.startswith(prefix)]
        assert len(rows) == 3 and rows.error_pct.abs().max() < 20.0, rows[["coll_id", "error_pct"]]


# ---- the fits: calibration rows only, written into the profiles ---------------------------------------------
def test_fits_use_calibration_rows_only(measured, fits):
    cal = set(measured[measured.split == "calibration"].coll_id)
    for fit, _, _ in fits:
        used = {cid for cid, _ in fit.residuals} | set(fit.rows) | set(fit.floor_rows)
        assert used <= cal, used - cal


def test_profiles_hold_exactly_what_the_fits_give(fits):
    # regression guard: `collectives_error.py --write-profiles` wrote these, nobody edited them by hand
    for fit, extra, names in fits:
        for name in names:
            p = load_hardware(name)
            attr = FF.LATENCY_KEYS[fit.latency_key]
            assert getattr(p, attr) * 1e6 == pytest.approx(fit.latency_us, abs=1e-9), (name, fit.name)
            x, e = p.efficiency_curve(fit.table)
            assert list(x) == list(fit.x) and list(e) == list(fit.efficiency), (name, fit.table)
            for key, value in extra.items():
                assert getattr(p, key) == value


def test_collectives_doc_tables_regenerate_identically(measured, fits):
    # docs/collectives.md's generated block is what `collectives_error.py --write docs/collectives.md` writes
    import collectives_error as ce
    doc = (Path(__file__).resolve().parents[1] / "docs" / "collectives.md").read_text()
    assert ce.generated_block(measured, fits) in doc, "rerun collectives_error.py DATA --write docs/collectives.md"


def test_fit_residuals_are_small_except_warmup_artefacts(fits):
    for fit, _, _ in fits:
        res = {cid: r for cid, r in fit.residuals if cid not in fit.dropped}
        assert max(abs(r) for r in res.values()) < 0.04, (fit.name, res)
        assert max(abs(r) for r in fit.floor_residuals) < 0.01  # EFA's two floor rows fall: -0.9 %


def test_fitted_latencies_are_the_fabrics_not_an_infiniband_hop(fits):
    # NVLink5 ~ NCCL's 3.4 us ring/Simple NVLink hop (tuning.cc); cloud fabrics: 4-9x NCCL's 9.6 us IB hop
    lat = {fit.name.split(":")[0]: fit.latency_us for fit, _, _ in fits}
    assert 3.0 < lat["NVLink5"] < 4.0
    assert 70 < lat["AWS EFA v4"] < 95 and 35 < lat["GCP GPUDirect-TCPXO"] < 50


def test_the_generic_fit_reproduces_the_a100_derivation(measured):
    # the NVLink3 numbers in dgx-a100-80g came from benchmarks/collectives_error.derive (2-point Hockney on
    # the two smallest rows, eta per size); fit_fabric is that procedure through the cost model itself
    import collectives_fabrics as cf
    p = load_hardware("dgx-a100-80g")
    fit, _ = FF.fit_fabric(p, cf.measurements(measured, "a100_8gpu_ar_"), name="NVLink3",
                           latency_key="nvlink_latency_us", table="nvlink_ring")
    x, e = p.efficiency_curve("nvlink_ring")
    assert fit.latency_us == p.nvlink_latency_s * 1e6 == 2.92
    assert list(fit.x) == list(x)
    np.testing.assert_allclose(fit.efficiency, e, atol=1e-4)


# ---- the pure functions ------------------------------------------------------------------------------------
def flat(alpha_us=5.0, ib_us=20.0, eta=1.0):
    d = read_toml(resolve("hardware_profiles", "dgx-h100"))
    d["node"].update(nvlink_latency_us=alpha_us, nvls=False)
    d["network"].update(ib_latency_us=ib_us)
    for k in list(d["efficiency"]):
        d["efficiency"][k].update(x=[1.0], efficiency=[eta])
    return hardware_from_dict(copy.deepcopy(d), where="flat")


def row(cid, m, t, n=8, k=8, alg="auto"):
    return FF.Measurement(coll_id=cid, collective="all_reduce", n_ranks=n, ranks_per_node=k, message_bytes=m,
                          time_s=t, algorithm=alg)


def test_hockney_floor_recovers_a_line():
    # t = 40 us + M / 10 GB/s at 32 KiB and 64 KiB: L = 40 us, r = 10 GB/s, residuals 0
    m = np.array([32768.0, 65536.0, 1e9])
    L, r, res = FF.hockney_floor(m, 40e-6 + m / 10e9)
    assert L == pytest.approx(40e-6) and r == pytest.approx(10e9) and np.allclose(res, 0, atol=1e-12)


def test_hockney_floor_of_a_falling_pair_is_their_latency():
    L, r, _ = FF.hockney_floor([1e5, 4e5], [382e-6, 378e-6])
    assert r == np.inf and L == pytest.approx(378e-6)  # mean 380 clipped to the smaller time


def test_warmup_artefacts_are_rows_slower_than_a_larger_message():
    rows = [row("a", 1e4, 5e-3), row("b", 1e5, 4.0e-4), row("c", 1e6, 3.9e-4), row("d", 1e7, 9e-4),
            row("e", 1e5, 1e-3, alg="ring")]  # another sweep: not compared with the auto rows
    assert FF.warmup_artefacts(rows) == {"a"}  # b is 2.6 % slower than c: timing noise, kept


def test_fit_recovers_the_latency_and_efficiency_it_was_generated_with():
    # rows generated by the model itself (ring, 8 ranks, a = 5 us, eta = 0.6): the fit gives them back
    truth = flat(alpha_us=5.0, eta=0.6)
    rows = [row(f"r{i}", m, float(C.all_reduce_s(truth, m, 8, 8, "ring")), alg="ring")
            for i, m in enumerate([2.0**12, 2.0**14, 2.0**20, 2.0**24, 2.0**28])]
    fit, prof = FF.fit_fabric(flat(alpha_us=1.0, eta=0.1), rows, name="synthetic", latency_key="nvlink_latency_us",
                              table="nvlink_ring")
    assert fit.latency_us == pytest.approx(5.0, abs=0.02)
    assert np.allclose(fit.efficiency, 0.6, rtol=0.01) and fit.max_abs_residual < 0.01
    assert prof.nvlink_latency_s == pytest.approx(5e-6, abs=2e-8)


def test_network_latency_fit_goes_through_the_algorithm_auto_picks():
    # 16 ranks on 2 nodes: auto's fixed cost is the tree's 2[(k-1) a_nv + ceil(log2 N) a_net] = 14 a_nv + 2 a_net
    p = flat(alpha_us=3.0, ib_us=1.0)
    a = FF.solve_latency(p, "ib_latency_us", 14 * 3e-6 + 2 * 50e-6, row("x", 1.0, 1.0, n=16, k=8))
    assert a == pytest.approx(50e-6, rel=1e-6)


# ---- NCCL's tuner: NVLS only from nvls_min_bytes -------------------------------------------------------------
def test_auto_does_not_pick_nvls_below_the_profiles_nvls_min_bytes():
    p = load_hardware("aws-p6-b200")
    assert p.nvls_min_bytes == 8 * 2**30
    assert str(C.best_algorithm(p, "all_reduce", 4 * 2**20, 8, 8)) == "ring"
    assert str(C.best_algorithm(p, "all_reduce", 16 * 2**30, 8, 8)) == "nvls"
    assert C.all_reduce_s(p, 4 * 2**20, 8, 8) == C.all_reduce_s(p, 4 * 2**20, 8, 8, "ring")
    forced = C.all_reduce_s(p, 4 * 2**20, 8, 8, "nvls")  # a forced NVLS ignores the tuner's threshold
    assert np.isfinite(forced) and forced < C.all_reduce_s(p, 4 * 2**20, 8, 8)


def test_nvls_min_bytes_defaults_to_every_size():
    p = load_hardware("dgx-h100")
    assert p.nvls_min_bytes == 0 and bool(C.nvls_eligible(p, 1.0))
    q = dataclasses.replace(p, nvls_min_bytes=2**20)
    assert list(C.nvls_eligible(q, np.array([2**19, 2**20]))) == [False, True]
