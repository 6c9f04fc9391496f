"""What `parasim sweep` and `parasim estimate` print and write (issue 24, "no silent garbage, one consistent
answer"): byte counts as integers and no rounding residues in time columns, in every output form; errors that
name the flag the user typed; the pipeline layer split in the sweep's table."""
import json
from io import StringIO

import numpy as np
import pandas as pd
import pytest

import simulator.sweep.run as sweep_mod
from simulator.cli import main
from simulator.report.tables import tidy_dict, tidy_frame

SMALL = ["--model", "llama3-8b", "--hardware", "dgx-h100", "--seq", "4096"]


def run(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def _time_columns(df):
    return [c for c in df.columns if c.endswith("_s") or c.endswith("_fraction")]


def _count_columns(df):
    return [c for c in df.columns if c.endswith("_bytes") or c == "params"]


def _assert_tidy(df):
    """No time or fraction below zero, every byte count whole (as written: digits only in a CSV)."""
    for c in _time_columns(df):
        v = df[c].to_numpy(dtype=float)
        assert not (v[np.isfinite(v)] < 0).any(), (c, v.min())
        assert not np.signbit(v[v == 0]).any(), c  # no -0.0
    for c in _count_columns(df):
        v = df[c].to_numpy(dtype=float)
        v = v[np.isfinite(v)]
        assert np.array_equal(v, np.round(v)), c


# ---- 1. the sweep: one tidy table behind --out, the printed table, JSON and CSV -----------------------
def _residue_kernel(inner):
    """The real kernel, its rows given the residues a difference of sums leaves (a bubble of −1.1e-13 s,
    a bubble fraction of −2e-16, an exposed time of −0.0) and fractional byte counts (a 5 % overhead)."""
    def evaluate(*a, **kw):
        res = inner(*a, **kw).copy()
        res["bubble_s"] = np.where(np.isfinite(res["bubble_s"]), -1.1e-13, np.nan)
        res["bubble_fraction"] = np.where(np.isfinite(res["bubble_fraction"]), -2e-16, np.nan)
        res["exposed_cp_s"] = np.where(np.isfinite(res["exposed_cp_s"]), -0.0, np.nan)
        res["peak_bytes"] = res["peak_bytes"] + 0.4
        res["other_bytes"] = res["other_bytes"] + 0.6
        return res
    return evaluate


@pytest.fixture
def residue_kernel(monkeypatch):
    from simulator.kernel import evaluate_layouts

    monkeypatch.setattr(sweep_mod, "_default_evaluator", lambda: _residue_kernel(evaluate_layouts))


SWEEP = ["sweep", *SMALL, "--gpus", "16", "--global-batch", "64", "--tp", "2,4", "--micro-batch", "1,2",
         "--no-progress"]


def test_sweep_out_csv_json_and_table_are_one_tidy_table(tmp_path, capsys, residue_kernel):
    out = tmp_path / "r.csv"
    code, text, err = run([*SWEEP, "--out", str(out), "--top", "5"], capsys)
    assert code == 0, err
    raw = out.read_text()
    written = pd.read_csv(StringIO(raw))
    assert len(written) > 20
    _assert_tidy(written)
    assert (written["bubble_s"].dropna() == 0).all() and (written["bubble_fraction"].dropna() == 0).all()
    header, first = raw.splitlines()[:2]
    cells = dict(zip(header.replace('"', "").split(","), first.split(",")))
    assert cells["peak_bytes"].isdigit() and cells["other_bytes"].isdigit(), cells  # not 8.14e+10, not .4
    table = text.split("Winner:")[0]
    assert "-0" not in table and "e-1" not in text  # the printed table: no -0.0 %; nowhere a residue

    code, text, err = run([*SWEEP, "--format", "json", "--top", "5"], capsys)
    assert code == 0, err
    rows = json.loads(text)
    assert [r["label"] for r in rows] == written["label"].head(5).tolist()  # the same ranking as the file
    for r in rows:
        assert all(isinstance(r[k], int) for k in r if k.endswith("_bytes") and r[k] is not None), r
        assert all(r[k] is None or r[k] >= 0 for k in r if k.endswith("_s") or k.endswith("_fraction")), r
        assert r["bubble_s"] == 0.0
    assert rows[0]["peak_bytes"] == written["peak_bytes"].iloc[0]

    code, text, err = run([*SWEEP, "--format", "csv", "--top", "5"], capsys)
    assert code == 0, err
    shown = pd.read_csv(StringIO(text))
    _assert_tidy(shown)
    assert shown["peak_bytes"].dtype.kind == "i"
    pd.testing.assert_frame_equal(shown, written.head(5), check_dtype=False)


def test_the_70b_sweep_writes_no_negative_times_nor_fractional_bytes(tmp_path, capsys):
    # the sweep of issue 24: 72 rows carried bubble_s down to -1.1e-13 s and 15,702 fractional peak_bytes
    out = tmp_path / "r.csv"
    code, text, err = run(["sweep", "scenarios/llama3-70b-64xh100.toml", "--out", str(out), "--no-progress"], capsys)
    assert code == 0, err
    written = pd.read_csv(out)
    _assert_tidy(written)
    assert written["peak_bytes"].dtype.kind == "i"


def test_run_sweep_applies_tidy_once_to_what_it_writes_and_returns(tmp_path):
    from simulator.spec.scenario import load_scenario
    from simulator.sweep import SweepSpace, read_results, run_sweep

    sc = load_scenario(model="llama3-8b", hardware="dgx-h100", num_gpus=8, seq_length=4096, global_batch_size=32,
                       require_layout=False)
    space = SweepSpace(tp=(1, 2), micro_batch_size=(1,))
    raw = run_sweep(sc, space)
    calls = []

    def tidy(df):
        calls.append(len(df))
        return tidy_frame(df)

    df = run_sweep(sc, space, out=tmp_path / "r.csv", tidy=tidy)
    assert calls == [len(raw)]  # once, on the whole ranked table
    assert raw["peak_bytes"].dtype.kind == "f" and df["peak_bytes"].dtype.kind == "i"  # the library: full floats
    back = read_results(tmp_path / "r.csv")
    assert np.array_equal(back["peak_bytes"].to_numpy(), df["peak_bytes"].to_numpy())
    assert (df["label"] == raw["label"]).all()  # ranked before tidying


def test_a_byte_column_with_an_empty_cell_is_rounded_and_stays_float():
    df = pd.DataFrame({"step_s": [1.0, np.nan], "peak_bytes": [10.4, np.nan], "bubble_s": [7.8e-16, np.nan]})
    t = tidy_frame(df)
    assert t["peak_bytes"].tolist()[0] == 10.0 and np.isnan(t["peak_bytes"].tolist()[1])
    assert repr(t["bubble_s"].tolist()[0]) == "0.0"  # a residue above zero is one too


# ---- 2. estimate: the same rule, relative to the step time ----------------------------------------------
def test_tidy_dict_zeroes_residues_of_times_and_rounds_bytes():
    d = {"time": {"step_s": 2.0, "bubble_s": 7.8e-16, "bubble_fraction": -2e-16, "compute_s": 1.5,
                  "exposed_comm_by_group_s": {"tp": -0.0, "dp": 0.25}, "pipeline": "replayed"},
         "memory": {"peak_bytes": 10.4, "per_stage": [{"params": 3.0, "other_bytes": 0.6, "layers": 32}]},
         "throughput": {"mfu": 1e-17}}
    t = tidy_dict(d, scale=d["time"]["step_s"])
    assert repr(t["time"]["bubble_s"]) == "0.0" and repr(t["time"]["bubble_fraction"]) == "0.0"
    assert repr(t["time"]["exposed_comm_by_group_s"]["tp"]) == "0.0" and t["time"]["exposed_comm_by_group_s"]["dp"] == 0.25
    assert t["time"]["compute_s"] == 1.5 and t["time"]["pipeline"] == "replayed"
    assert t["memory"] == {"peak_bytes": 10, "per_stage": [{"params": 3, "other_bytes": 1, "layers": 32}]}
    assert t["throughput"]["mfu"] == 1e-17  # not a time: left alone
    assert d["time"]["bubble_s"] == 7.8e-16  # the input is left alone


ESTIMATE_PP1 = ["estimate", *SMALL, "--gpus", "8", "--global-batch", "64", "--tp", "1", "--pp", "1", "--zero", "1"]


def test_estimate_without_a_pipeline_reports_a_bubble_of_exactly_zero(capsys):
    code, text, err = run([*ESTIMATE_PP1, "--format", "json"], capsys)
    assert code == 0, err
    d = json.loads(text)
    assert repr(d["time"]["bubble_s"]) == "0.0" and repr(d["time"]["bubble_fraction"]) == "0.0"
    assert isinstance(d["memory"]["peak_bytes"], int) and isinstance(d["model"]["params"], int)
    assert all(isinstance(s[k], int) for s in d["memory"]["per_stage"] for k in s if k.endswith("_bytes") or k == "params")
    t = d["time"]  # the breakdown still adds up
    assert t["compute_s"] + t["exposed_comm_s"] + t["bubble_s"] == pytest.approx(t["step_s"], rel=1e-9)

    code, text, err = run([*ESTIMATE_PP1, "--format", "csv"], capsys)
    assert code == 0, err
    row = pd.read_csv(StringIO(text)).iloc[0]
    assert row["bubble_s"] == 0.0 and row["bubble_fraction"] == 0.0
    header, first = text.splitlines()[:2]
    cells = dict(zip(header.split(","), first.split(",")))
    assert all(cells[k].isdigit() for k in cells if k.endswith("_bytes")), cells

    code, text, err = run(ESTIMATE_PP1, capsys)
    assert code == 0, err
    line = next(x for x in text.splitlines() if "pipeline bubble" in x)
    idle = next(x for x in text.splitlines() if "idle fraction" in x)
    assert "0.0000 s" in line and "0.000 " in idle and "e-" not in text


# ---- 3. errors name the flag the user typed ----------------------------------------------------------
SWEEP_BASE = ["sweep", *SMALL, "--gpus", "8", "--global-batch", "32", "--no-progress"]
ESTIMATE_BASE = ["estimate", *SMALL, "--gpus", "8", "--global-batch", "32"]


@pytest.mark.parametrize("base,extra,want,internal", [
    (SWEEP_BASE, ["--gpus", "0"], "--gpus must be > 0, got 0", "num_gpus"),
    (SWEEP_BASE, ["--gpus", "-8"], "--gpus must be > 0, got -8", "num_gpus"),
    (ESTIMATE_BASE, ["--gpus", "0"], "--gpus must be > 0, got 0", "num_gpus"),
    (ESTIMATE_BASE, ["--gpus", "-8"], "--gpus must be > 0, got -8", "num_gpus"),
    (SWEEP_BASE, ["--seq", "0"], "--seq must be > 0, got 0", "seq_length"),
    (ESTIMATE_BASE, ["--global-batch", "0"], "--global-batch must be > 0, got 0", "global_batch_size"),
    (ESTIMATE_BASE, ["--micro-batch", "0"], "--micro-batch must be > 0, got 0", "micro_batch_size"),
    (ESTIMATE_BASE, ["--tp", "0"], "--tp must be > 0, got 0", "tp must"),
    (ESTIMATE_BASE, ["--tp", str(2**16 + 1)], "--tp must be <= 65536", "tp must"),
    (ESTIMATE_BASE, ["--zero", "5"], "--zero must be 0, 1, 2 or 3, got 5", "zero must"),
    (ESTIMATE_BASE, ["--shard-group", "0"], "--shard-group must be > 0, got 0", "shard_group_size"),
    (ESTIMATE_BASE, ["--pp", "4", "--layers-per-stage", "16,16"], "--layers-per-stage has 2 entries, expected pp(4)",
     "layers_per_stage"),
    (ESTIMATE_BASE, ["--tp-overlap", "2"], "--tp-overlap must be in [0, 1], got 2.0", "tp_overlap"),
    (ESTIMATE_BASE, ["--comm-slowdown", "-0.5"], "--comm-slowdown must be in [0, 1]", "comm_slowdown"),
    (SWEEP_BASE, ["--tp", "0"], "--tp value 0 is out of range", "sweep tp"),
    (SWEEP_BASE, ["--micro-batch", "2,0"], "--micro-batch value 0 is out of range", "micro_batch_size"),
    (SWEEP_BASE, ["--zero", "4"], "--zero value 4 is out of range", "sweep zero"),
    (SWEEP_BASE, ["--schedule", "1f1b,zigzag"], "--schedule value 'zigzag' is not one of", "sweep schedule"),
    (SWEEP_BASE, ["--sequence-parallel", "maybe"], "--sequence-parallel value 'maybe' is not true or false",
     "sequence_parallel"),
    (SWEEP_BASE, ["--max-pp", "0"], "--max-pp must be an integer >= 1, got 0", "max_pp"),
    (SWEEP_BASE, ["--min-micro-batch", "4", "--max-micro-batch", "2"], "--min-micro-batch 4 > --max-micro-batch 2",
     "micro_batch_size"),
    (SWEEP_BASE, ["--min-micro-batch", "16"], "--min-micro-batch 16 > --max-micro-batch 8", "micro_batch_size"),
    (SWEEP_BASE, ["--chunk-size", "0"], "--chunk-size must be an integer >= 1, got 0", "chunk_size"),
    (SWEEP_BASE, ["--workers", "0"], "--workers must be an integer >= 1, got 0", "workers must"),
], ids=lambda x: " ".join(x) if isinstance(x, list) and len(x) < 5 else None)
def test_a_bad_flag_value_is_one_line_naming_the_flag(base, extra, want, internal, capsys):
    code, out, err = run([*base, *extra], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    assert want in err and f"error: {internal}" not in err and not err.startswith(f"error: sweep "), err


def test_a_bad_value_read_from_a_scenario_file_keeps_the_file_key(tmp_path, capsys):
    p = tmp_path / "s.toml"
    p.write_text('[model]\npreset = "llama3-8b"\n[hardware]\npreset = "dgx-h100"\nnum_gpus = 0\n'
                 '[training]\nseq_length = 4096\nglobal_batch_size = 32\n')
    for cmd in ("sweep", "estimate"):
        code, out, err = run([cmd, str(p)], capsys)
        assert code == 2 and "num_gpus must be > 0, got 0" in err and "--gpus must" not in err, err


def test_a_relation_between_values_keeps_its_names(capsys):
    code, out, err = run([*ESTIMATE_BASE, "--tp", "3"], capsys)
    assert code == 2 and "num_gpus(8) is not divisible by tp(3)" in err, err


# ---- 4. the layer split in the sweep's table -----------------------------------------------------------
def test_sweep_table_shows_the_layers_each_pipeline_rank_holds(tmp_path, capsys):
    # llama3-8b has 32 layers; on 24 GPUs with tp 8: pp 1 holds 32, pp 3 the uneven split 11, 11, 10
    out = tmp_path / "r.csv"
    code, text, err = run(["sweep", *SMALL, "--gpus", "24", "--global-batch", "48", "--tp", "8", "--zero", "0,1",
                           "--recompute", "none", "--micro-batch", "1", "--out", str(out), "--top", "50",
                           "--no-progress"], capsys)
    assert code == 0, err
    df = pd.read_csv(out, keep_default_na=False, dtype={"layers_per_stage": str})
    lines = text.splitlines()
    head = next(i for i, x in enumerate(lines) if x.lstrip().startswith("rank"))
    assert "layers/stage" in lines[head]
    start = lines[head].index("layers/stage")
    shown = {}
    for x in lines[head + 1:head + 1 + min(50, len(df))]:
        shown[int(x.split()[0])] = x[start:].split()[0]
    assert set(df.pp) == {1, 3}
    for _, r in df.head(50).iterrows():
        want = r.layers_per_stage if r.pp == 3 else "32"
        assert shown[r["rank"]] == want, (r.label, shown[r["rank"]])
    assert set(df[df.pp == 3].layers_per_stage) == {"11,11,10"}  # spec.placement.uneven_split(32, 3)
    assert "11,11,10" in shown.values() and "32" in shown.values()


@pytest.mark.parametrize("split,pp,want", [("", 4, "8"), ("", 1, "32"), ("11,11,10", 3, "11,11,10"),
                                           ("31,32,32,31", 4, "31,32,32,31"),
                                           (",".join(["3"] + ["4"] * 30 + ["3"]), 32, "3,4x30,3")])
def test_layers_text_is_the_rows_split_or_the_even_count(split, pp, want):
    from simulator.cli.sweep import layers_text

    assert layers_text({"layers_per_stage": split, "pp": pp}, 32 if not split else 126) == want
