"""Issue 24: the CLI paths are as fast as their core, refuse sizes and paths they cannot handle in one
line, validate's input and accounting, and what the commands print (no -0.0, integer bytes, one name
per memory part, "wrote" lines, why a sweep space is empty).

Cases that hung or ran out of memory before run the CLI in a child process with a time limit, so
that they fail instead of hanging.
"""
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pandas as pd
import pytest

import simulator
from simulator.cli import main

ROOT = Path(simulator.__file__).resolve().parent.parent
FIXTURE = Path(__file__).parent / "data" / "validate" / "runs_fixture.csv"


def run(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def one_line_error(argv, capsys, *needles):
    code, out, err = run(argv, capsys)
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def child(args, tmp_path, timeout=60):
    """`parasim ARGS` in a child process of this source tree; a run over `timeout` s fails the test."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), MPLBACKEND="Agg")
    return subprocess.run([sys.executable, "-c", "from simulator.cli import main; main()", *args], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=timeout)


# -- 1. linear output paths ------------------------------------------------------------------------
def _big_timeline(name="1f1b", pp=8, m=4096):
    from simulator.report.bubble import replay_rank_share

    return replay_rank_share(name, pp=pp, microbatches=m, forward_s=1.0, backward_s=2.0, weight_s=0.5)[1]


@pytest.fixture
def no_op_records(monkeypatch):
    """Building the per-op record list (`Timeline.ops`, once per critical-path op in `to_dict`: the
    quadratic loop) fails the test."""
    from simulator.pipeline.replay import Timeline

    def refuse(self):
        raise AssertionError("an output path built the per-op Op records")

    monkeypatch.setattr(Timeline, "ops", property(refuse))


@pytest.mark.parametrize("name", ["1f1b", "zb-h1", "interleaved", "dualpipe"])
def test_output_paths_read_the_op_arrays_not_per_op_records(name, no_op_records, tmp_path):
    from simulator.report.gantt import gantt_figure
    from simulator.report.trace import trace_events, write_trace

    tl = _big_timeline(name, pp=4, m=64)
    d = tl.to_dict()
    assert len(d["critical_path"]) == len(tl.critical_path) > 0
    write_trace(tl, tmp_path / "t.json")
    ev = json.loads((tmp_path / "t.json").read_text())
    assert ev == trace_events(tl) and sum(e["ph"] == "X" for e in ev["traceEvents"]) == len(tl.end_s)
    gantt_figure(tl)


@pytest.mark.parametrize("name", ["1f1b", "zb-h1", "zb-v", "dualpipev"])
def test_labels_from_arrays_equal_the_op_labels(name):
    tl = _big_timeline(name, pp=4, m=8)
    ops = [op for r in tl.schedule.ranks for op in r]
    assert tl.labels() == [op.label for op in ops]
    assert tl.to_dict()["critical_path"] == [ops[i].label for i in tl.critical_path]


@pytest.mark.parametrize("extra", [["--format", "json"], [], ["--trace", "t.json"], ["--plot", "g.png"]])
def test_a_262k_pair_replay_prints_in_seconds_on_every_path(extra, tmp_path):
    # pp 8 x 32768 microbatches: 524,288 ops; to_dict alone took hours before (O(ops x critical path))
    p = child(["schedule", "--schedule", "1f1b", "--pp", "8", "--microbatches", "32768", *extra], tmp_path,
              timeout=120)
    assert p.returncode == 0, p.stderr
    if extra[:1] == ["--format"]:
        assert json.loads(p.stdout)["num_ops"] == 524288


# -- 2. size bounds --------------------------------------------------------------------------------
@pytest.mark.parametrize("args,needle", [
    (["schedule", "--schedule", "1f1b", "--pp", "1000000", "--microbatches", "8"], "pp 1000000"),
    (["schedule", "--schedule", "1f1b", "--pp", "8", "--microbatches", "10000000"], "microbatches 10000000"),
    (["schedule", "--schedule", "interleaved", "--pp", "8", "--vpp", "1000000000", "--microbatches", "8"],
     "vpp 1000000000"),
    (["schedule", "--schedule", "zb-v", "--pp", "1024", "--microbatches", "1024"], "1,048,576"),
    (["plot", "bubble", "--pp", "8", "--microbatches", "4,10000000", "--out", "b.png"], "microbatches 10000000"),
    (["plot", "timeline", "--schedule", "1f1b", "--pp", "1000000", "--microbatches", "8", "--out", "g.png"],
     "--pp 1000000"),
    (["schedule", "--schedule", "1f1b", "--pp", "300", "--microbatches", "8", "--plot", "g.png"], "--pp 300"),
])
def test_sizes_beyond_the_bounds_are_one_line_errors_not_hangs(args, needle, tmp_path):
    p = child(args, tmp_path)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), p.stderr[-2000:]
    assert needle in lines[0]


def test_the_bounds_admit_the_largest_documented_replay():
    from simulator.report.bubble import MAX_STAGE_MICROBATCHES, check_replay_size

    check_replay_size("1f1b", pp=8, microbatches=MAX_STAGE_MICROBATCHES // 8)
    check_replay_size("1f1b", pp=4096, microbatches=256)
    with pytest.raises(simulator.errors.InputError):
        check_replay_size("1f1b", pp=8, microbatches=MAX_STAGE_MICROBATCHES // 8 + 1)


# -- 3. output paths and devices -------------------------------------------------------------------
@pytest.fixture
def afile(tmp_path):
    f = tmp_path / "somefile.txt"
    f.write_text("x")
    return f


SCHED = ["schedule", "--schedule", "1f1b", "--pp", "2", "--microbatches", "4"]
MEMORY = ["memory", "--model", "llama3-8b", "--hardware", "dgx-h100", "--gpus", "8", "--tp", "8", "--seq", "4096",
          "--global-batch", "16"]
PATH_CASES = {
    "schedule plot suffix": (lambda t, f: SCHED + ["--plot", str(t / "x.txt")], (".png", ".svg", ".pdf", "--plot")),
    "schedule trace suffix": (lambda t, f: SCHED + ["--trace", str(t / "x.txt")], ("--trace", ".json")),
    "schedule plot under a file": (lambda t, f: SCHED + ["--plot", str(f / "g.png")], ("--plot", "is a file")),
    "schedule trace under a file": (lambda t, f: SCHED + ["--trace", str(f / "t.json")], ("--trace", "is a file")),
    "memory plot under a file": (lambda t, f: MEMORY + ["--plot", str(f / "m.png")], ("--plot", "is a file")),
    "plot timeline out under a file": (lambda t, f: ["plot", "timeline", "--schedule", "1f1b", "--pp", "2",
                                                     "--microbatches", "4", "--out", str(f / "g.png")],
                                       ("--out", "is a file")),
    "validate out under a file": (lambda t, f: ["validate", str(FIXTURE), "--out", str(f / "r.csv")],
                                  ("--out", "is a file")),
    "validate plot suffix": (lambda t, f: ["validate", str(FIXTURE), "--plot", str(t / "s.txt")], ("--plot", ".png")),
    "calibrate device": (lambda t, f: ["calibrate", "gemm", "--device", "tpu"], ("--device", "'tpu'")),
    "calibrate out under a file": (lambda t, f: ["calibrate", "gemm", "--device", "cpu", "--out",
                                                 str(f / "p.toml")], ("--out", "is a file")),
    "sweep out under a file": (lambda t, f: ["sweep", "--model", "llama3-8b", "--hardware", "dgx-h100", "--gpus", "8",
                                             "--seq", "4096", "--global-batch", "16", "--tp", "8", "--pp", "1",
                                             "--out", str(f / "r.csv")], ("somefile.txt",)),
}


@pytest.mark.parametrize("case", sorted(PATH_CASES))
def test_paths_that_cannot_be_written_are_one_line_errors(case, tmp_path, afile, capsys):
    argv, needles = PATH_CASES[case]
    one_line_error(argv(tmp_path, afile), capsys, *needles)


# -- 4. validate -----------------------------------------------------------------------------------
@pytest.fixture
def stand_in(monkeypatch):
    """The estimate of tests/test_validate.py: 1 s and 4 GiB per layer (no kernel needed)."""
    def estimate(model, training, layout, hardware):
        step = 1.0 * model.num_layers
        return types.SimpleNamespace(step_s=step, tokens_per_s=training.tokens_per_step / step, feasible=True,
                                     reason="", memory=types.SimpleNamespace(peak_bytes=4.0 * 2**30 * model.num_layers))

    monkeypatch.setitem(sys.modules, "simulator.estimate", types.SimpleNamespace(estimate=estimate))


def _csv(tmp_path, edit=None, rows=None, text=None):
    df = pd.read_csv(FIXTURE, dtype=str, keep_default_na=False)
    if rows is not None:
        df = df[df["run_id"].isin(rows)]
    if edit:
        for (rid, col), val in edit.items():
            df.loc[df["run_id"] == rid, col] = val
    p = tmp_path / "runs.csv"
    p.write_text(text if text is not None else df.to_csv(index=False))
    return p


HEADER = FIXTURE.read_text().splitlines()[0]
FIRST = FIXTURE.read_text().splitlines()[1]
VALIDATE_BAD = {
    "empty file": (dict(text=""), (), ("is empty",)),
    "header only": (dict(text=HEADER + "\n"), (), ("no rows",)),
    "extra field": (dict(text=f"{HEADER}\n{FIRST},surplus\n"), (), ("line 2", "fields")),
    "missing field": (dict(text=f"{HEADER}\n{FIRST.rsplit(',', 1)[0]}\n"), (), ("line 2", "fields")),
    "non-numeric step": (dict(edit={("fx_measured_step", "step_time_s"): "fast"}), (), ("step_time_s", "'fast'")),
    "zero step time": (dict(edit={("fx_measured_step", "step_time_s"): "0"}), (), ("step_time_s", "'0'")),
    "zero tokens/s": (dict(edit={("fx_from_tokens", "tokens_per_s"): "0"}), (), ("tokens_per_s", "'0'")),
    "negative memory": (dict(edit={("fx_derived", "mem_gb_per_gpu"): "-4"}), (), ("mem_gb_per_gpu", "'-4'")),
    "inf step time": (dict(edit={("fx_measured_step", "step_time_s"): "inf"}), (), ("step_time_s", "'inf'")),
    "max-error nan": (dict(), ("--max-error", "nan"), ("--max-error", "nan")),
    "max-error negative": (dict(), ("--max-error", "-0.1"), ("--max-error", "-0.1")),
    "max-median-error inf": (dict(), ("--max-median-error", "inf"), ("--max-median-error", "inf")),
}


@pytest.mark.parametrize("case", sorted(VALIDATE_BAD))
def test_validate_bad_input_is_one_line(case, tmp_path, stand_in, capsys):
    csv_kw, flags, needles = VALIDATE_BAD[case]
    one_line_error(["validate", str(_csv(tmp_path, **csv_kw)), *flags], capsys, *needles)


@pytest.mark.parametrize("fmt", ["table", "csv"])
def test_validate_with_no_run_compared_does_not_exit_0(fmt, tmp_path, stand_in, capsys):
    path = _csv(tmp_path, rows=["fx_skip_recompute", "fx_skip_gpu"])
    code, out, err = run(["validate", str(path), "--format", fmt], capsys)
    assert code == 2
    lines = err.strip().splitlines()  # one line (the contract), the first row's reason in it
    assert len(lines) == 1 and lines[0].startswith("error: no run of") and "2 skipped" in lines[0]
    assert "the first: fx_skip_recompute:" in lines[0]


def test_validate_accounts_for_every_row_exactly(tmp_path, stand_in, capsys):
    df = pd.read_csv(FIXTURE, dtype=str, keep_default_na=False)
    base = df[df["run_id"] == "fx_measured_step"].iloc[0]
    mem_only = base.copy()
    mem_only["run_id"], mem_only["step_time_s"] = "fx_mem_only", ""
    oom = base.copy()
    oom["run_id"], oom["step_time_s"], oom["mem_gb_per_gpu"], oom["notes"] = "fx_oom", "", "", "run went OOM"
    nothing = oom.copy()
    nothing["run_id"], nothing["notes"] = "fx_nothing", "-"
    path = tmp_path / "runs.csv"
    pd.concat([df, pd.DataFrame([mem_only, oom, nothing])]).to_csv(path, index=False)
    code, out, err = run(["validate", str(path)], capsys)
    assert code == 0, err
    assert ("8 rows: 3 compared on step time, 1 on memory only, 1 measured out of memory (0 predicted not to fit), "
            "1 with no measured figure to compare, 2 skipped (reasons below)") in out
    assert "unaccounted" not in out


def test_validate_table_cuts_text_at_word_boundaries(tmp_path, stand_in, capsys):
    how = "FLOPs / (TFLOP/s x GPUs) from the reported model TFLOP/s per GPU"
    path = _csv(tmp_path, edit={("fx_derived", "derived_how"): how})
    code, out, err = run(["validate", str(path)], capsys)
    assert code == 0, err
    full = f"derived (not measured): {how}"
    row = next(line for line in out.splitlines() if line.lstrip().startswith("fx_derived"))
    cell = row[row.index("derived (not"):].split("…")[0]
    assert "…" in row and full.startswith(cell) and full[len(cell.rstrip())] == " "


def test_validate_prints_no_negative_zero_percent():
    from simulator.cli.validate import _pct

    assert _pct(-0.0001) == "+0.0%" and _pct(-0.0) == "+0.0%" and _pct(-0.02) == "-2.0%"


# -- 5. what the commands print --------------------------------------------------------------------
@pytest.mark.parametrize("x,scale,want", [(-8.9e-16, 1.0, "0.0"), (-0.0, 1.0, "0.0"), (-1e-7, 1000.0, "0.0"),
                                          (-0.5, 1.0, "-0.5"), (2.5, 1.0, "2.5")])
def test_tiny_negative_residues_print_as_zero(x, scale, want):
    from simulator.report.tables import nonnegative

    assert repr(nonnegative(x, scale)) == want


def test_a_results_table_tidies_to_integer_bytes_and_no_negative_residues():
    from simulator.report.tables import tidy_frame

    df = pd.DataFrame({"step_s": [10.0, 2.0, 1.0], "bubble_s": [-1.1e-13, -0.0, -0.5],
                       "bubble_fraction": [-2e-16, 0.25, 0.0], "peak_bytes": [81445511249.92, 1.5, 2.0],
                       "memory_headroom_bytes": [-7180185.6, 3.0, float("nan")], "label": ["a", "b", "c"]})
    t = tidy_frame(df)
    assert [repr(x) for x in t["bubble_s"].tolist()] == ["0.0", "0.0", "-0.5"]  # -0.5 s is no residue: left to be seen
    assert repr(t["bubble_fraction"].tolist()[0]) == "0.0"
    assert t["peak_bytes"].tolist() == [81445511250, 2, 2] and t["peak_bytes"].dtype.kind == "i"
    assert t["memory_headroom_bytes"].dtype.kind == "f"  # a missing value is not a number of bytes
    assert df["bubble_s"][0] == -1.1e-13  # the input is left alone


def test_memory_prints_integer_bytes_and_says_parameters(tmp_path, capsys):
    code, out, err = run(MEMORY + ["--format", "json"], capsys)
    assert code == 0, err
    mem = json.loads(out)["memory"]
    assert all(isinstance(v, int) for k, v in mem.items() if k.endswith("_bytes"))
    assert all(isinstance(v, int) for s in mem["per_stage"] for k, v in s.items() if k.endswith("_bytes") or k == "params")
    code, out, err = run(MEMORY + ["--format", "csv"], capsys)
    header, first = out.splitlines()[:2]
    cells = dict(zip(header.split(","), first.split(",")))
    assert all(cells[k].isdigit() for k in cells if k.endswith("_bytes") or k == "params"), cells
    code, out, err = run(MEMORY, capsys)
    assert "parameters GiB" in out and "weights" not in out
    from simulator.report.memory_plot import PARTS

    assert PARTS[0][1] == "parameters"


@pytest.mark.parametrize("argv,fmt", [
    (SCHED + ["--plot", "g.png"], "table"), (SCHED + ["--trace", "t.json"], "table"),
    (SCHED + ["--trace", "t.json", "--format", "json"], "json"),
    (MEMORY + ["--plot", "m.png"], "table"), (MEMORY + ["--plot", "m.svg", "--format", "json"], "json"),
])
def test_written_files_are_announced(argv, fmt, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(argv, capsys)
    assert code == 0, err
    path = argv[argv.index("--plot" if "--plot" in argv else "--trace") + 1]
    assert f"wrote {path}" in (out if fmt == "table" else err)
    if fmt == "json":
        json.loads(out)  # stdout stays one JSON document
    assert (tmp_path / path).stat().st_size > 0


# -- 6. why a sweep space is empty -----------------------------------------------------------------
EMPTY = {
    "batch": (dict(num_gpus=5128, global_batch_size=2520), {}, ("global_batch_size 2520", "5128 GPUs")),
    "tp list": (dict(num_gpus=64, global_batch_size=512), dict(tp=(3,)), ("tp × cp × pp", "64 GPUs")),
    "tp cap": (dict(num_gpus=64, global_batch_size=512), dict(tp=(16,), max_tp=8), ("tp in {16}", "max_tp 8")),
    "dp list": (dict(num_gpus=64, global_batch_size=512), dict(tp=(8,), pp=(8,), cp=(1,), dp=(2,)), ("dp in {2}",)),
    "micro-batch": (dict(num_gpus=64, global_batch_size=512), dict(micro_batch_size=(16,)), ("micro_batch_size",)),
    "heads": (dict(num_gpus=7, global_batch_size=512), dict(tp=(7,)), ("num_attention_heads 64",)),
    "layers": (dict(num_gpus=48, global_batch_size=512), dict(pp=(3,), uneven_layers=False),
               ("num_hidden_layers(80)",)),
    "even pp": (dict(num_gpus=48, global_batch_size=512), dict(pp=(3,), schedule=("dualpipe",)), ("even pp",)),
}


@pytest.mark.parametrize("case", sorted(EMPTY))
def test_an_empty_sweep_space_names_the_constraint(case):
    from simulator.report.winner import explain_winner
    from simulator.spec.scenario import load_scenario
    from simulator.sweep import SweepSpace, enumerate_layouts
    from simulator.sweep.empty_reason import empty_space_reason

    over, space, needles = EMPTY[case]
    sc = load_scenario(None, require_layout=False, model="llama3-70b", hardware="dgx-h100", seq_length=4096, **over)
    space = SweepSpace(**space)
    assert len(enumerate_layouts(sc.model, sc.training, sc.num_gpus, space, hardware=sc.hardware)) == 0
    why = empty_space_reason(sc.model, sc.training, sc.num_gpus, space, hardware=sc.hardware)
    assert "\n" not in why and all(n in why for n in needles), why
    empty = enumerate_layouts(sc.model, sc.training, sc.num_gpus, space, hardware=sc.hardware)
    assert explain_winner(empty, empty_reason=why) == f"No layout in the space: {why}."


def test_a_space_with_layouts_has_no_empty_reason():
    from simulator.spec.scenario import load_scenario
    from simulator.sweep.empty_reason import empty_space_reason

    sc = load_scenario(None, require_layout=False, model="llama3-70b", hardware="dgx-h100", seq_length=4096,
                       num_gpus=64, global_batch_size=512)
    assert empty_space_reason(sc.model, sc.training, sc.num_gpus, hardware=sc.hardware) == ""
