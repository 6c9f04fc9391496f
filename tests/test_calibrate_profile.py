"""Measured-profile writing (simulator/calibrate/profile_writer.py) and the nccl-tests CLI path."""
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from simulator.calibrate.fit import fit_efficiency_curve
from simulator.calibrate.profile_writer import (base_profile_dict, dumps_toml, measured_profile_dict,
                                                write_profile)
from simulator.cli import cli
from simulator.spec.hardware import load_hardware

DATA = Path(__file__).parent / "data" / "nccl"


def test_toml_text_reads_back_as_the_same_dict():
    d = {"name": "x \"quoted\" \\ back", "n": 3, "f": 1e-7, "g": 2.0, "flag": True, "lst": [1.5, 2e9, 3.0],
         "a": {"s": "line\nbreak\ttab", "b": {"deep": [1, 2], "key with space": "v"}}, "empty": {}}
    assert tomllib.loads(dumps_toml(d)) == d


def test_every_preset_round_trips_through_the_writer():
    for name in ("dgx-a100-80g", "dgx-h100", "mi300x"):
        raw = base_profile_dict(name)
        assert tomllib.loads(dumps_toml(raw)) == raw


def test_measured_profile_replaces_fitted_tables_keeps_the_rest_and_loads(tmp_path):
    base = base_profile_dict("dgx-h100")
    fit = fit_efficiency_curve([1e8, 1e9, 1e10, 1e11], [0.3, 0.6, 0.75, 0.8], name="gemm", x_unit="FLOPs per GEMM",
                               source="unit test", knots=[1e8, 1e11])
    prov = {"device": "NVIDIA H100 80GB HBM3", "versions": "torch 2.13.0, cuda 12.8", "date": "2025-01-01T00:00:00Z",
            "protocol": "median of 20 after 5 warm-up", "source": "test"}
    prof = measured_profile_dict(base, {"gemm": fit}, name="h100-test", provenance=prov)
    p = write_profile(tmp_path / "measured" / "h100-test.toml", prof)
    hw = load_hardware(str(p))
    ref = load_hardware("dgx-h100")
    assert hw.name == "h100-test" and dict(hw.provenance) == prov
    assert hw.efficiency["gemm"].x == pytest.approx((1e8, 1e11))
    assert hw.efficiency["gemm"].efficiency == pytest.approx(fit.efficiency, abs=1e-6)
    assert hw.efficiency["nvlink_ring"] == ref.efficiency["nvlink_ring"]  # not measured: kept from the base
    assert hw.peak_flops("bf16") == ref.peak_flops("bf16") and hw.hbm_bytes == ref.hbm_bytes


def test_cli_nccl_tests_writes_a_profile_with_collective_tables(tmp_path):
    out = tmp_path / "a100-nccl.toml"
    r = CliRunner().invoke(cli, ["calibrate", "nccl-tests", str(DATA / "all_reduce_perf_8xa100.log"),
                                 str(DATA / "sendrecv_perf_8xa100.log"), "--base", "dgx-a100-80g", "--out", str(out),
                                 "--residuals", str(tmp_path / "res.csv")])
    assert r.exit_code == 0, r.output
    hw = load_hardware(str(out))
    assert "nvlink_ring" in hw.efficiency and "nvlink_p2p" in hw.efficiency and "nccl_all_reduce_intra" in hw.efficiency
    assert "nvlink_ring" in r.output and "rms_rel_residual" in r.output
    # the fitted ring curve at 16 GiB is the measured busbw/300 within the fit residual reported
    assert float(hw.interp_efficiency("nvlink_ring", 2**34)) == pytest.approx(234.89 / 300, rel=0.05)
    assert hw.provenance["device"] == "NVIDIA A100-SXM4"
    assert (tmp_path / "res.csv").read_text().startswith("source,")


def test_cli_nccl_tests_without_base_is_a_one_line_error(tmp_path):
    from simulator.cli import main

    with pytest.raises(SystemExit) as e:
        main(["calibrate", "nccl-tests", str(DATA / "sendrecv_perf_8xa100.log"), "--out", str(tmp_path / "x.toml")])
    assert e.value.code == 2
