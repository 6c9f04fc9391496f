"""`parasim sweep` and `parasim plot`: flags, outputs, resume, one-line errors (exit 2)."""
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from test_sweep import fake_evaluate_layouts  # noqa: E402

import simulator.sweep.run as sweep_mod  # noqa: E402
from simulator.cli import main  # noqa: E402

FLAGS = ["--model", "llama3-8b", "--hardware", "dgx-h100", "--gpus", "16", "--seq", "4096", "--global-batch", "64"]


def run(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


@pytest.fixture
def fake_kernel(monkeypatch):
    monkeypatch.setattr(sweep_mod, "_default_evaluator", lambda: fake_evaluate_layouts)


def test_sweep_writes_contract_columns_and_prints_top_k(tmp_path, capsys, fake_kernel):
    out = tmp_path / "r.csv"
    code, text, err = run(["sweep", *FLAGS, "--out", str(out), "--top", "3", "--no-progress"], capsys)
    assert code == 0, err
    df = pd.read_csv(out)
    for c in ("label", "tp", "pp", "dp", "feasible", "reason", "step_s", "tokens_per_s", "mfu", "peak_bytes"):
        assert c in df.columns
    assert len(text.splitlines()) >= 5
    top = df.iloc[0]
    assert top["label"] in text and "Winner" in text and "Runner-up" in text
    assert not out.with_name("r.csv.parts").exists()


def test_sweep_list_flags_restrict_the_space(tmp_path, capsys, fake_kernel):
    out = tmp_path / "r.parquet"
    pytest.importorskip("pyarrow")
    # (zb-h1 is Megatron-DeepSpeed's, not Megatron-LM's: the deepspeed stack runs all of these)
    code, _, err = run(["sweep", *FLAGS, "--stack", "deepspeed", "--tp", "2,4", "--pp", "1,2",
                        "--schedule", "1f1b,zb-h1", "--zero", "1", "--recompute", "selective", "--micro-batch", "1",
                        "--out", str(out)], capsys)
    assert code == 0, err
    df = pd.read_parquet(out)
    assert set(df.tp) == {2, 4} and set(df.pp) == {1, 2} and set(df.zero) == {1}
    assert set(df.schedule) == {"1f1b", "zb-h1"} and set(df.recompute) == {"selective"}


def test_uneven_layers_flag(tmp_path, capsys, fake_kernel):
    # llama3-8b has 32 layers: on 24 GPUs pp = 3 needs the uneven split 11, 11, 10
    flags = ["--model", "llama3-8b", "--hardware", "dgx-h100", "--gpus", "24", "--seq", "4096", "--global-batch", "96",
             "--tp", "1", "--zero", "1", "--recompute", "none", "--micro-batch", "1"]
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    assert run(["sweep", *flags, "--out", str(a)], capsys)[0] == 0
    assert run(["sweep", *flags, "--no-uneven-layers", "--out", str(b)], capsys)[0] == 0
    da, db = pd.read_csv(a, keep_default_na=False), pd.read_csv(b, keep_default_na=False)
    assert set(da[da.pp == 3].layers_per_stage) == {"11,11,10"} and 3 not in set(db.pp)


def test_sweep_reads_the_scenario_sweep_table(tmp_path, capsys, fake_kernel):
    p = tmp_path / "s.toml"
    p.write_text('[model]\npreset = "llama3-8b"\n[hardware]\npreset = "dgx-h100"\nnum_gpus = 16\n'
                 '[training]\nseq_length = 4096\nglobal_batch_size = 64\n[sweep]\ntp = [4]\nmax_pp = 2\n')
    code, text, err = run(["sweep", str(p), "--format", "csv", "--top", "1000"], capsys)
    assert code == 0, err
    from io import StringIO
    df = pd.read_csv(StringIO(text))
    assert set(df.tp) == {4} and df.pp.max() <= 2


def test_sweep_json_format_gives_top_rows(capsys, fake_kernel):
    import json
    code, text, err = run(["sweep", *FLAGS, "--format", "json", "--top", "2", "--tp", "1"], capsys)
    assert code == 0, err
    rows = json.loads(text)
    assert len(rows) == 2 and rows[0]["rank"] == 1 and "tokens_per_s" in rows[0]


def test_sweep_plot_writes_three_charts(tmp_path, capsys, fake_kernel):
    png = tmp_path / "c.png"
    code, _, err = run(["sweep", *FLAGS, "--tp", "1,2", "--plot", str(png)], capsys)
    assert code == 0, err
    for name in ("c.png", "c-pareto.png", "c-memory.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("extra, msg", [
    (["--tp", "2,x"], "tp value 'x' is not an integer"),
    (["--schedule", "1f1b,zigzag"], "schedule value 'zigzag'"),
    (["--out", "r.xlsx"], ".csv or .parquet"),
    (["--plot", "c.jpg"], ".png or .svg"),
    (["--executor", "spark"], "executor"),
    (["--workers", "0"], "workers must be an integer >= 1"),
])
def test_sweep_bad_input_exits_2_with_one_line(extra, msg, capsys, fake_kernel, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["sweep", *FLAGS, *extra], capsys)
    assert code == 2 and msg in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_plot_commands_draw_from_a_results_file(tmp_path, capsys, fake_kernel):
    res = tmp_path / "r.csv"
    assert run(["sweep", *FLAGS, "--tp", "1,2", "--out", str(res)], capsys)[0] == 0
    for cmd, out in (("mfu", "m.png"), ("pareto", "p.svg"), ("memory", "mem.png")):
        code, _, err = run(["plot", cmd, str(res), "--out", str(tmp_path / out)], capsys)
        assert code == 0, err
        assert (tmp_path / out).stat().st_size > 1000


def test_plot_bubble_and_timeline(tmp_path, capsys):
    code, _, err = run(["plot", "bubble", "--pp", "4", "--microbatches", "4,8", "--schedules", "1f1b,interleaved",
                        "--out", str(tmp_path / "b.png")], capsys)
    assert code == 0, err
    code, _, err = run(["plot", "timeline", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8",
                        "--out", str(tmp_path / "t.svg")], capsys)
    assert code == 0, err
    assert (tmp_path / "t.svg").read_text().lstrip().startswith("<?xml")


def _plotted_bubble(args, tmp_path, capsys, monkeypatch):
    """{schedule label: bubble % per point} and the caption of the figure `parasim plot bubble` saves."""
    import simulator.report.sweep_plots as sp

    figs = []
    monkeypatch.setattr(sp, "save_figure", lambda fig, out: figs.append(fig))
    code, _, err = run(["plot", "bubble", *args, "--out", str(tmp_path / "b.png")], capsys)
    assert code == 0, err
    (fig,) = figs
    lines = {ln.get_label(): ln.get_ydata() for ln in fig.axes[0].lines}
    return lines, " ".join(t.get_text() for t in fig.texts)


README_BUBBLE = ["--pp", "8", "--microbatches", "8,16,32,64", "--schedules", "1f1b,interleaved,zb-h1"]


def test_plot_bubble_without_w_shows_what_zero_bubble_buys(tmp_path, capsys, monkeypatch):
    # docs/sweep.md's arguments, no --weight: backward 2 split into B = W = 1 (Qi et al. 2024), so
    # zb-h1 fills part of 1f1b's bubble: (p-1)(F+B-W) vs (p-1)(F+B+W), a third (formulas.md §5.2)
    lines, caption = _plotted_bubble(README_BUBBLE, tmp_path, capsys, monkeypatch)
    assert (lines["zb-h1"] < lines["1f1b"]).all()
    assert lines["zb-h1"][0] == pytest.approx(100 * 7 / (7 + 3 * 8), rel=1e-12)  # (p-1)F / (that + m(F+B+W))
    assert "B = 1, W = 1" in caption and "no W given" in caption and "Qi et al. 2024" in caption


def test_plot_bubble_explicit_w_wins(tmp_path, capsys, monkeypatch):
    lines, caption = _plotted_bubble([*README_BUBBLE, "--weight", "0"], tmp_path, capsys, monkeypatch)
    assert lines["zb-h1"] == pytest.approx(lines["1f1b"], rel=1e-12)  # W = 0: nothing to fill the bubble with
    assert "B = 2, W = 0" in caption and "W as given" in caption


def test_plot_missing_results_file_exits_2(tmp_path, capsys):
    code, _, err = run(["plot", "mfu", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "m.png")], capsys)
    assert code == 2 and "nope.csv" in err


def test_contract_command_with_the_real_kernel(tmp_path, capsys):
    out = tmp_path / "r.csv"
    code, text, err = run(["sweep", *FLAGS, "--out", str(out)], capsys)
    assert code == 0, err
    df = pd.read_csv(out)
    assert df["feasible"].any()
    for c in ("label", "tp", "pp", "dp", "feasible", "reason", "step_s", "tokens_per_s", "mfu", "peak_bytes"):
        assert c in df.columns
    # layouts that do not fit are not timed unless asked: empty time cells, listed closest to fitting first
    bad = df[~df["feasible"]]
    assert len(bad) and bad["step_s"].isna().all() and df.loc[df["feasible"], "step_s"].notna().all()
    assert (bad["peak_bytes"].diff().dropna() >= 0).all()
    code, text, err = run(["sweep", *FLAGS, "--time-infeasible", "--out", str(tmp_path / "all.csv"), "--top", "400"],
                          capsys)
    assert code == 0, err
    full = pd.read_csv(tmp_path / "all.csv")
    assert full["step_s"].notna().all() and len(full) == len(df)
    pd.testing.assert_frame_equal(full[full["feasible"]].reset_index(drop=True), df[df["feasible"]].reset_index(drop=True),
                                  check_dtype=False)


def test_text_commands_load_no_plotting_library(tmp_path):
    # matplotlib costs ~1 s to import: the commands that print text (sweep without --plot, estimate)
    # must not load it (a regression once cost every `parasim sweep` that second)
    import subprocess

    code = ("import sys\nfrom simulator.cli import main\n"
            f"for args in ({['sweep', *FLAGS, '--top', '2']!r}, ['estimate', 'scenarios/llama3-8b-8xh100.toml']):\n"
            "    try:\n        main(args)\n    except SystemExit as e:\n        assert not e.code, (args, e.code)\n"
            "print(sorted(m for m in ('matplotlib', 'numba') if m in sys.modules))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parents[1])
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().splitlines()[-1] == "[]"


def test_an_empty_space_says_why_and_a_bad_out_is_refused_before_the_work(capsys):
    code, text, err = run(["sweep", "--model", "llama3-8b", "--hardware", "dgx-h100", "--gpus", "5128", "--seq", "4096",
                           "--global-batch", "2520", "--tp", "1"], capsys)
    assert code == 0 and "No layout in the space: global_batch_size 2520 is not divisible" in text
    code, text, err = run(["sweep", *FLAGS, "--out", "r.txt"], capsys)
    assert code == 2 and err.strip() == "error: --out must end in .csv or .parquet, got 'r.txt'"
