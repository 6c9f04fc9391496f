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


def _marked_wrong(tmp_path, sizes):
    """The A100 all-reduce log with nccl-tests' data check marking the out-of-place result of `sizes` wrong."""
    lines = (DATA / "all_reduce_perf_8xa100.log").read_text().splitlines()
    for k, ln in enumerate(lines):
        toks = ln.split()
        if toks and toks[0].isdigit() and (sizes is None or int(toks[0]) in sizes):
            toks[8] = "7"  # out-of-place #wrong
            lines[k] = "  ".join(toks)
    p = tmp_path / "all_reduce_perf_marked.log"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_rows_nccl_tests_marked_wrong_are_left_out_of_the_fit_with_a_warning(tmp_path):
    from simulator.calibrate.nccl_tests import read_nccl_tests

    p = _marked_wrong(tmp_path, {65536})
    df = read_nccl_tests(p)
    assert df.loc[(df.size_bytes == 65536) & (df.placement == "out-of-place"), "wrong"].tolist() == [7]
    r = CliRunner().invoke(cli, ["calibrate", "nccl-tests", str(p), "--base", "dgx-a100-80g", "--out",
                                 str(tmp_path / "o.toml"), "--residuals", str(tmp_path / "res.csv")])
    assert r.exit_code == 0, r.output
    assert "1 result row(s) nccl-tests marked wrong" in r.output and "size 65536" in r.output
    import pandas as pd

    clean = tmp_path / "clean.csv"
    CliRunner().invoke(cli, ["calibrate", "nccl-tests", str(DATA / "all_reduce_perf_8xa100.log"), "--base",
                             "dgx-a100-80g", "--out", str(tmp_path / "c.toml"), "--residuals", str(clean)])
    assert len(pd.read_csv(tmp_path / "res.csv")) == len(pd.read_csv(clean)) - 1  # the marked row, not fitted


def test_a_log_whose_every_row_is_marked_wrong_is_a_one_line_error(tmp_path):
    from simulator.cli import main

    p = _marked_wrong(tmp_path, None)
    with pytest.raises(SystemExit) as e:
        main(["calibrate", "nccl-tests", str(p), "--base", "dgx-a100-80g", "--out", str(tmp_path / "o.toml"),
              "--placement", "out-of-place"])
    assert e.value.code == 2


def test_an_older_logs_error_column_is_its_max_error_not_a_count():
    from simulator.calibrate.nccl_tests import parse_nccl_tests

    text = ("# nThread 1 nGpus 8\n# all_gather_perf\n"
            "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n"
            "     1048576        262144   float     sum    30.00   34.95   30.58  2e-07    29.00   36.16   31.64  2e-07\n")
    df = parse_nccl_tests(text, collective="all_gather")
    assert df["wrong"].isna().all() and (df["max_error"] == 2e-07).all()
