"""`parasim schedule`: JSON contract, every schedule name, plot and trace files, bad input exits 2."""
import json

import pytest
from click.testing import CliRunner

from simulator.cli import cli, main
from simulator.schedules import SCHEDULE_NAMES


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
def test_every_schedule_exits_0_with_the_json_contract(name):
    args = ["schedule", "--schedule", name, "--pp", "4", "--microbatches", "8", "--format", "json"]
    if name == "interleaved":
        args += ["--vpp", "2"]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    for key in ("makespan_s", "bubble_fraction", "bubble_fraction_per_rank", "peak_inflight_microbatches_per_rank"):
        assert key in d
    assert len(d["bubble_fraction_per_rank"]) == 4


def test_1f1b_json_numbers_match_the_closed_form():
    r = CliRunner().invoke(cli, ["schedule", "--schedule", "1f1b", "--pp", "8", "--microbatches", "32",
                                 "--format", "json"])
    d = json.loads(r.output)
    assert d["makespan_s"] == (32 + 8 - 1) * 3.0  # F=1, B=2 defaults
    assert d["bubble_fraction"] == pytest.approx(7 / 39)
    assert d["peak_inflight_microbatches_per_rank"] == [8 - r for r in range(8)]


def test_plot_and_trace_are_written(tmp_path):
    png, tr = tmp_path / "g.png", tmp_path / "t.json"
    r = CliRunner().invoke(cli, ["schedule", "--schedule", "zb-h1", "--pp", "4", "--microbatches", "8",
                                 "--forward", "1", "--backward", "1", "--weight", "1",
                                 "--plot", str(png), "--trace", str(tr)])
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ev = json.loads(tr.read_text())["traceEvents"]
    x = [e for e in ev if e["ph"] == "X"]
    assert len(x) == 4 * 8 * 3 and {e["tid"] for e in x} == {0, 1, 2, 3}


@pytest.mark.parametrize("args,msg", [
    (["--schedule", "1f1b", "--pp", "0", "--microbatches", "8"], "pp must be >= 1"),
    (["--schedule", "dualpipe", "--pp", "4", "--microbatches", "6"], "dualpipe"),
    (["--schedule", "1f1b", "--pp", "4", "--microbatches", "8", "--forward", "-1"], "--forward"),
    (["--schedule", "1f1b", "--pp", "4", "--microbatches", "8", "--backward", "nan"], "--backward"),
    (["--schedule", "warp", "--pp", "4", "--microbatches", "8"], "unknown schedule"),
])
def test_bad_input_prints_one_line_and_exits_2(args, msg, capsys):
    with pytest.raises(SystemExit) as e:
        main(["schedule", *args])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and msg in err and len(err.strip().splitlines()) == 1
