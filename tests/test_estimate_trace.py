"""`parasim estimate --trace / --plot`: the estimated step as a timeline (report/step_timeline.py), checked
against the estimate's own breakdown: every rank's busy + idle = makespan, the last event ends at step_s,
the exposed communication by group on the busiest rank's trace = exposed_comm_by_group_s, valid Chrome
trace-event JSON, a PNG, one-line errors for bad paths."""
import json
import math
import re
import time
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from simulator.cli import cli
from simulator.estimate import EstimateOptions, estimate_scenario
from simulator.report.step_timeline import step_timeline
from simulator.report.step_trace import write_step_trace
from simulator.spec.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
SC = ROOT / "scenarios"
COLLECTIVES = {"all-gather", "reduce-scatter", "all-reduce", "all-to-all", "p2p", "broadcast", "reduce"}
REL = 1e-9

# (scenario file, overrides, options): the schedules, the communication groups, ZeRO stages and overlaps
CASES = {
    "70b-interleaved-p2p": ("llama3-70b-512xh100", {}, {}),
    "70b-1f1b-tp-overlap": ("llama3-70b-512xh100", {"schedule": "1f1b", "vpp": 1}, {"tp_overlap": 0.5}),
    "70b-zb-h1": ("llama3-70b-512xh100", {"schedule": "zb-h1", "vpp": 1}, {}),
    "70b-zb-v": ("llama3-70b-512xh100", {"schedule": "zb-v", "vpp": 1}, {}),
    "70b-dualpipev": ("llama3-70b-512xh100", {"schedule": "dualpipev", "vpp": 1}, {}),
    "70b-gpipe-ddp": ("llama3-70b-512xh100", {"schedule": "gpipe", "vpp": 1, "zero": 0}, {}),
    "8b-fsdp": ("llama3-8b-8xh100", {}, {}),
    "8b-zero3-pp2-torchtitan": ("llama3-8b-8xh100", {"pp": 2, "stack": "torchtitan"}, {}),
    "8b-cp-ring": ("llama3-8b-128k-cp", {}, {}),
    "mixtral-ep-dualpipe": ("mixtral-8x7b-64xh100", {"pp": 2, "schedule": "dualpipe"}, {}),
}


def _estimate(name, **extra):
    path, over, opts = CASES[name]
    sc = load_scenario(str(SC / f"{path}.toml"), **{**over, **extra})
    return estimate_scenario(sc, options=EstimateOptions(**opts), keep_stage_times=True)


def _trace(est, tmp_path):
    st = step_timeline(est)
    out = tmp_path / "trace.json"
    write_step_trace(st, out)
    with open(out) as fh:
        return st, json.load(fh)


def _close(a, b, scale):
    return abs(a - b) <= REL * max(abs(scale), 1e-300) + 1e-15


@pytest.fixture(scope="module", params=sorted(CASES))
def traced(request, tmp_path_factory):
    est = _estimate(request.param)
    st, doc = _trace(est, tmp_path_factory.mktemp(request.param))
    return request.param, est, st, doc


def test_trace_is_valid_trace_event_json(traced):
    _, _, _, doc = traced
    events = doc["traceEvents"]
    assert events and doc["displayTimeUnit"] == "ms"
    for e in events:
        assert e["ph"] in ("X", "M") and isinstance(e["name"], str) and isinstance(e["pid"], int)
        if e["ph"] == "X":
            assert isinstance(e["tid"], int)
            assert math.isfinite(e["ts"]) and math.isfinite(e["dur"]) and e["ts"] >= 0 and e["dur"] > 0


def test_names_ops_and_collectives(traced):
    _, _, st, doc = traced
    ops = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] == 0 and e["name"] != "optimizer"]
    assert len(ops) == len(st.timeline.end_s)
    chunked = st.timeline.schedule.chunks_per_rank > 1
    for e in ops:
        assert re.fullmatch(r"[FBW]\d+" + (r" c\d+" if chunked else ""), e["name"]), e["name"]
        assert e["cat"] == e["name"][0]
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["tid"] != 0:
            assert set(e["name"].split("+")) <= COLLECTIVES, e["name"]
            group, exposure = e["cat"].split(",")
            assert group in ("tp", "cp", "ep", "zero3", "dp", "pp") and exposure in ("exposed", "hidden")


def test_busy_plus_idle_is_the_makespan(traced):
    _, est, st, doc = traced
    mk = st.makespan_s
    assert _close(mk, float(est.stage_times["makespan"][0]), mk)
    by_rank = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["tid"] == 0 and e["name"] != "optimizer":
            by_rank[e["pid"]].append((e["ts"] / 1e6, e["dur"] / 1e6))
    assert sorted(by_rank) == list(range(est.layout.pp))
    for r, ops in by_rank.items():
        ops.sort()
        busy = sum(d for _, d in ops)
        ends = [0.0] + [t + d for t, d in ops]
        gaps = [t - e for (t, _), e in zip(ops, ends)] + [mk - ends[-1]]
        assert min(gaps) >= -1e-9 * mk  # no two ops of a rank overlap
        assert _close(busy + sum(gaps), mk, mk)
        assert _close(busy, st.timeline.busy_s_per_rank[r], mk)


def test_last_event_ends_at_step_s(traced):
    _, est, st, doc = traced
    end = max((e["ts"] + e["dur"]) / 1e6 for e in doc["traceEvents"] if e["ph"] == "X")
    assert _close(end, est.step_s, est.step_s)
    assert _close(st.step_s, est.step_s, est.step_s)


def test_exposed_comm_by_group_matches_the_estimate(traced):
    """Per-op parts and p2p waits on the busiest pipeline rank, the tail's on the rank whose tail is
    longest (the kernel's breakdown reads them there)."""
    _, est, st, doc = traced
    other = doc["otherData"]
    r_star, t_star = other["busiest_rank"], other["tail_rank"]
    got = defaultdict(float)
    for e in doc["traceEvents"]:
        if e["ph"] != "X" or not e["cat"].endswith(",exposed"):
            continue
        group = e["cat"].split(",")[0]
        in_op = "op" in e["args"] or group == "pp"
        if e["pid"] == (r_star if in_op else t_star):
            got[group] += e["dur"] / 1e6
    want = est.exposed_comm_by_group_s
    assert other["exposed_comm_by_group_s"] == want
    for g, v in want.items():
        assert abs(got[g] - v) <= 1e-9 * est.step_s, (g, got[g], v)


def test_hidden_parts_lie_under_their_op(traced):
    _, _, st, doc = traced
    tl = st.timeline
    start, end = tl.start_s * 1e6, tl.end_s * 1e6
    labels = tl.labels()
    index = {lab_rank: i for i, lab_rank in enumerate(zip(labels, tl.schedule.arrays.rank.tolist()))}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["tid"] != 0 and "op" in e["args"] and e["args"]["group"] != "pp":
            i = index[e["args"]["op"], e["pid"]]
            eps = 1e-6 * end[i] + 1e-9
            assert start[i] - eps <= e["ts"] and e["ts"] + e["dur"] <= end[i] + eps, e


def test_keeping_the_stage_times_changes_no_number():
    path, over, opts = CASES["8b-zero3-pp2-torchtitan"]
    sc = load_scenario(str(SC / f"{path}.toml"), **over)
    a = estimate_scenario(sc, options=EstimateOptions(**opts))
    b = estimate_scenario(sc, options=EstimateOptions(**opts), keep_stage_times=True)
    assert a.stage_times is None and b.stage_times is not None
    for k, v in a.row.items():
        assert v == b.row[k] or (v != v and b.row[k] != b.row[k]), k


def test_large_timeline_is_fast(tmp_path):
    """70B on 512 GPUs, pp 4 (interleaved, 2 chunks), 128 micro-batches: 2,048 ops and ~4,000 slices."""
    est = _estimate("70b-interleaved-p2p", global_batch_size=2048)
    t = time.perf_counter()
    st = step_timeline(est)
    write_step_trace(st, tmp_path / "t.json")
    assert time.perf_counter() - t < 2.0
    assert len(st.timeline.end_s) == 4 * 2 * 128 * 2


def _run(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_cli_writes_trace_and_plot(tmp_path):
    tr, png = tmp_path / "t.json", tmp_path / "g.png"
    r = _run("estimate", str(SC / "llama3-70b-512xh100.toml"), "--global-batch", "64", "--trace", str(tr),
             "--plot", str(png))
    assert r.exit_code == 0, r.output
    assert f"wrote {tr}" in r.output and f"wrote {png}" in r.output
    assert json.loads(tr.read_text())["traceEvents"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = _run("estimate", str(SC / "llama3-70b-512xh100.toml"), "--global-batch", "64", "--format", "json",
             "--trace", str(tr))
    assert r.exit_code == 0
    assert json.loads(r.stdout)["time"]["step_s"] > 0  # "wrote" goes to stderr with --format json


def _main(*args, capsys):
    from simulator.cli import main

    with pytest.raises(SystemExit) as exc:
        main(list(args))
    err = capsys.readouterr().err
    return exc.value.code, err


@pytest.mark.parametrize("flag,bad", [("--trace", "FILE/t.json"), ("--trace", "t.txt"), ("--plot", "g.jpg"),
                                      ("--plot", "FILE/g.png")])
def test_cli_bad_paths_are_one_line_errors(tmp_path, capsys, flag, bad):
    (tmp_path / "FILE").write_text("a regular file")
    code, err = _main("estimate", str(SC / "llama3-8b-8xh100.toml"), flag, str(tmp_path / bad), capsys=capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ") and flag in err


@pytest.mark.parametrize("extra", [("--schedule", "pipedream", "--pp", "2", "--allow-unsupported"),
                                   ("--pipeline", "analytic")])  # (no stack preset runs pipedream)
def test_cli_refuses_what_is_not_a_replayed_step(tmp_path, capsys, extra):
    code, err = _main("estimate", str(SC / "llama3-8b-8xh100.toml"), *extra, "--trace", str(tmp_path / "t.json"),
                      capsys=capsys)
    assert code == 2 and err.count("\n") == 1 and "--trace" in err
