"""Bad inputs a second fuzzing campaign (2026-11-28, about 630 invocations) found taking a wrong path: a traceback,
a hang, inf or nan printed with exit 0, or an efficiency above the peak accepted. Each now exits 2 with one stderr line
naming the file or flag and the value (or, for a damaged sweep chunk, the chunk is evaluated again)."""
from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

from simulator.cli import main
from test_fuzz_found import LLAMA, one_line_error

ROOT = Path(__file__).resolve().parent.parent
NCCL = ROOT / "tests" / "data" / "nccl" / "all_reduce_perf_8xa100.log"
SWEEP = LLAMA[:2] + ["--hardware", "dgx-h100", "--gpus", "8", "--seq", "4096", "--global-batch", "64"]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sweep") / "r.csv"
    with pytest.raises(SystemExit) as exc:
        main(["sweep", *SWEEP, "--out", str(out)])
    assert exc.value.code in (0, None)
    return out


def _with(results: Path, tmp_path: Path, column: str, value: str) -> str:
    rows = list(csv.reader(open(results)))
    i = rows[0].index(column)
    for r in rows[1:6]:
        r[i] = value
    p = tmp_path / f"{column}.csv"
    csv.writer(open(p, "w", newline="")).writerows(rows[:6])
    return str(p)


@pytest.mark.parametrize("column,value,needle", [("mfu", "abc", "'abc', not a number"),
                                                 ("mfu", "inf", "inf, not a finite number"),
                                                 ("tp", "-4", "-4, not a whole number"),
                                                 ("tp", "2.5", "2.5, not a whole number")])
@pytest.mark.parametrize("kind", ["mfu", "pareto", "memory"])
def test_a_results_file_with_a_bad_value_is_one_line(kind, column, value, needle, results, tmp_path, capsys):
    """`plot` read any CSV: text in a number column was a ValueError or TypeError traceback, inf and negative or
    fractional layout degrees were drawn."""
    one_line_error(["plot", kind, _with(results, tmp_path, column, value), "--out", str(tmp_path / "a.png")],
                   capsys, column, needle)


@pytest.mark.parametrize("content,needle", [(b"", "not a readable results table"), (None, "no rows"),
                                            (b"hello", "not a readable results table")])
def test_an_empty_or_foreign_results_file_is_one_line(content, needle, results, tmp_path, capsys):
    p = tmp_path / ("x.parquet" if content == b"hello" else "x.csv")
    p.write_bytes(open(results, "rb").readline() if content is None else content)
    one_line_error(["plot", "mfu", str(p), "--out", str(tmp_path / "a.png")], capsys, str(p), needle)


@pytest.mark.parametrize("argv", [["schedule", "--schedule", "1f1b", "--pp", "8", "--microbatches", "32"],
                                  ["plot", "bubble", "--pp", "4", "--out", "b.png"],
                                  ["plot", "timeline", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8",
                                   "--out", "t.png"]])
def test_a_stage_time_past_its_bound_is_one_line_not_inf(argv, capsys, tmp_path, monkeypatch):
    """--forward 1e308 passed (finite, >= 0): the makespan overflowed to inf, the bubble to nan, exit 0 (and a
    matplotlib traceback when plotted)."""
    monkeypatch.chdir(tmp_path)
    one_line_error([*argv, "--forward", "1e308", "--backward", "1"], capsys, "--forward", "1e+308")


@pytest.mark.parametrize("flag,value", [("--usd-per-gpu-hour", "1e308"), ("--board-power-w", "1e308"),
                                        ("--checkpoint-interval-h", "1e-300"), ("--checkpoint-interval-h", "1e308")])
def test_a_run_plan_value_past_its_bound_is_one_line_not_inf(flag, value, capsys):
    """cost $inf, energy Infinity and a 300-digit checkpoint count were printed with exit 0."""
    one_line_error(["estimate", *SWEEP, "--tokens", "1e12", flag, value], capsys, flag)


def test_a_gemm_efficiency_above_the_peak_is_refused(tmp_path, capsys):
    """Efficiency tables accepted values up to 2: a profile with every entry 2.0 printed an MFU of 168.7 %."""
    text = (ROOT / "hardware_profiles" / "mi300x.toml").read_text()
    lines = [("efficiency = [" + ", ".join(["2.0"] * len(ln.split(","))) + "]") if ln.startswith("efficiency = [")
             else ln for ln in text.splitlines()]
    p = tmp_path / "hw.toml"
    p.write_text("\n".join(lines) + "\n")
    one_line_error(["estimate", "--model", "llama3-8b", "--gpus", "8", "--seq", "4096", "--global-batch", "64",
                    "--hardware", str(p)], capsys, "[efficiency.gemm]", "[1e-09, 1]", "2.0")


@pytest.mark.parametrize("flag,value,needle", [("--output-tokens", "0", "> 0"), ("--output-tokens", "-1", "> 0"),
                                               ("--prompt-tokens", "0", "> 0"), ("--max-batch", "0", "> 0"),
                                               ("--prompt-tokens", "99999999999", "<="),
                                               ("--max-batch", "999999999999", "<=")])
def test_serve_sweep_checks_its_flags_as_estimate_inference_does(flag, value, needle, capsys):
    """serve-sweep printed ten rows of 'no: output_tokens must be > 0' with exit 0, and read 0 as 'not given'."""
    one_line_error(["serve-sweep", "--model", "llama3-8b", "--hardware", "dgx-h100", "--gpus", "8", "--seq", "2048",
                    "--global-batch", "1", flag, value], capsys, flag, needle)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("argv", [["validate"], ["calibrate", "nccl-tests"]])
def test_a_fifo_is_refused_not_read_for_ever(argv, tmp_path, capsys):
    fifo = tmp_path / "in.csv"
    os.mkfifo(fifo)
    extra = ["--base", "dgx-a100-80g", "--out", str(tmp_path / "o.toml")] if argv[0] == "calibrate" else []
    one_line_error([*argv, str(fifo), *extra], capsys, "not a regular file")


@pytest.mark.parametrize("old,new,needle", [("46.80    1.40", "abc    1.40", "'abc' is not a number"),
                                            ("       65536", "       6x536", "'6x536' is not a number"),
                                            ("46.80    1.40", "1e308    1.40", "no collective takes")])
def test_a_bad_nccl_tests_row_is_one_line(old, new, needle, tmp_path, capsys):
    """A non-number in a result row was a ValueError traceback; a time of 1e308 s ended in numpy's 'SVD did not
    converge'."""
    lines = NCCL.read_text().splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("       65536 "))
    lines[i] = lines[i].replace(old, new, 1)
    p = tmp_path / "all_reduce_perf_bad.log"
    p.write_text("\n".join(lines) + "\n")
    one_line_error(["calibrate", "nccl-tests", str(p), "--base", "dgx-a100-80g", "--out", str(tmp_path / "o.toml")],
                   capsys, p.name, needle)


@pytest.mark.parametrize("damage", [b"garbage", b""])
def test_a_damaged_chunk_of_an_interrupted_sweep_is_evaluated_again(damage, tmp_path):
    """Resuming read every chunk file with pd.read_pickle: a damaged one was a ValueError traceback, an empty one an
    EOFError that click reported as a Ctrl-C (exit 130)."""
    from test_sweep import fake_evaluate_layouts, scenario

    from simulator.sweep import run_sweep

    ref = run_sweep(scenario(), evaluator=fake_evaluate_layouts, chunk_size=97)
    out = tmp_path / "r.csv"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(scenario(), evaluator=fake_evaluate_layouts, out=out, chunk_size=97, stop_after_chunks=3)
    (tmp_path / "r.csv.parts" / "chunk-000001.pkl").write_bytes(damage)
    calls = []
    res = run_sweep(scenario(), evaluator=fake_evaluate_layouts, out=out, chunk_size=97, progress=calls.append)
    assert len(calls) == -(-len(ref) // 97) - 2  # the two good chunks reused, the damaged one evaluated again
    import pandas as pd

    pd.testing.assert_frame_equal(res, ref)


@pytest.mark.parametrize("args,needle", [(["--pp", "4", "--schedules", "bogus"], "--schedules"),
                                         (["--pp", "4", "--vpp", "0", "--schedules", "interleaved"], "--vpp")])
def test_plot_bubble_refuses_what_it_cannot_draw(args, needle, tmp_path, capsys):
    """An unknown schedule or --vpp 0 drew an empty chart with exit 0 and a note."""
    one_line_error(["plot", "bubble", *args, "--out", str(tmp_path / "b.png")], capsys, needle)


def _scenario_with(tmp_path, old: str, new: str) -> str:
    from test_fuzz_found import SCENARIO

    assert old in SCENARIO
    p = tmp_path / "s.toml"
    p.write_text(SCENARIO.replace(old, new, 1))
    return str(p)


def test_a_layout_value_from_the_file_names_the_file(tmp_path, capsys):
    """tp = "eight" said 'tp must be a number' without the file or section."""
    from test_fuzz_found import SCENARIO

    line = next(ln for ln in SCENARIO.splitlines() if ln.startswith("tp = "))
    p = _scenario_with(tmp_path, line, 'tp = "eight"')
    one_line_error(["estimate", p], capsys, "tp", "'eight'", "[layout] of", p)


def test_hardware_preset_and_path_together_are_refused(tmp_path, capsys):
    """Both keys: the preset name was looked up as a path beside the scenario ('file not found')."""
    p = _scenario_with(tmp_path, 'preset = "dgx-h100"', 'preset = "dgx-h100"\npath = "other.toml"')
    one_line_error(["estimate", p], capsys, "preset or path, not both")


def test_a_stack_file_error_names_the_file(tmp_path, capsys):
    """A bad value in a --stack file was reported against the stack's name ('--stack 'megatron'')."""
    p = tmp_path / "st.toml"
    p.write_text((ROOT / "stacks" / "megatron.toml").read_text().replace('attention_kernel = "cudnn"',
                                                                       'attention_kernel = "bogus"', 1))
    one_line_error(["estimate", *SWEEP, "--stack", str(p)], capsys, str(p), "attention_kernel", "'bogus'")


def test_a_refusal_rule_dividing_by_zero_is_refused_at_load(tmp_path, capsys):
    """'% 0 != 0' loaded, then printed numpy's divide-by-zero RuntimeWarning and exit 0."""
    p = tmp_path / "st.toml"
    p.write_text((ROOT / "stacks" / "megatron.toml").read_text().replace('"% pp != 0"', '"% 0 != 0"', 1))
    one_line_error(["estimate", *SWEEP, "--stack", str(p), "--pp", "2"], capsys, "divides by 0")


def test_a_config_json_key_given_twice_is_refused(tmp_path, capsys):
    """json keeps the last of two equal keys silently; TOML refuses them."""
    p = tmp_path / "config.json"
    p.write_text('{"model_type": "llama", "hidden_size": 2048, "hidden_size": 4096, "num_hidden_layers": 2, '
                 '"num_attention_heads": 32, "intermediate_size": 8192, "vocab_size": 32000}')
    one_line_error(["memory", "--model", str(p), "--hardware", "dgx-h100", "--gpus", "8", "--seq", "2048",
                    "--global-batch", "16"], capsys, "'hidden_size' is given twice")


def test_intermediate_size_zero_is_named_as_zero_not_missing(tmp_path, capsys):
    """An inline model's intermediate_size = 0 was reported as 'missing key'."""
    from test_fuzz_found import INLINE

    keys = "\n".join(f"{k} = {0 if k == 'intermediate_size' else v}" for k, v in INLINE.items())
    p = _scenario_with(tmp_path, '[model]\npreset = "llama3-8b"', "[model]\n" + keys)
    one_line_error(["estimate", p], capsys, "intermediate_size", "> 0")
