"""Bad inputs a fifth look at the scenario readers found taken in silence: a whole float for an integer key of a
scenario (a hardware profile already refused gpus_per_node = 8.0), optimizer offload with ZeRO stage 0 (and, in a
sweep, the offloads against the stages it tries: offload_params was a traceback), and a malformed [sweep] table that
only `sweep` read. Each now exits 2 with one stderr line naming the key as written, its value and where it came
from; the valid neighbours still run."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.cli import main
from test_fuzz_found import LLAMA, SCENARIO, one_line_error, scenario

ROOT = Path(__file__).resolve().parent.parent
SMALL_SWEEP = ["--pp", "1", "--micro-batch", "1", "--recompute", "none", "--sequence-parallel", "false",
               "--no-progress"]


def _runs(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    assert exc.value.code in (0, None), out.err[-2000:]
    return out.out


@pytest.mark.parametrize("old, new, key, shown", [
    ("tp = 1\n", "tp = 1.0\n", "tp", "1.0"),
    ("zero = 3\n", "zero = 3.0\n", "zero", "3.0"),
    ("pp = 1\n", "pp = 1\ndp = 8.0\n", "dp", "8.0"),
    ("recompute = \"none\"\n", "recompute = \"full\"\nrecompute_layers = 2.0\n", "recompute_layers", "2.0"),
    ("seq_length = 8192\n", "seq_length = 8192.0\n", "seq_length", "8192.0"),
    ("global_batch_size = 64\n", "global_batch_size = 64.0\n", "global_batch_size", "64.0"),
    ("micro_batch_size = 1\n", "micro_batch_size = 1.0\n", "micro_batch_size", "1.0"),
    ("num_gpus = 8\n", "num_gpus = 8.0\n", "num_gpus", "8.0"),
])
@pytest.mark.parametrize("cmd", ["estimate", "memory"])
def test_a_whole_float_for_an_integer_key_of_a_scenario_is_one_line(cmd, old, new, key, shown, tmp_path, capsys):
    """tp = 1.0 (and every other integer key of [layout], [training] and [hardware]) was read as 1 with exit 0, and
    zero = 3.0 was printed as 'zero=3.0'; a hardware profile's gpus_per_node = 8.0 was already refused."""
    assert old in SCENARIO
    p = tmp_path / "s.toml"
    p.write_text(SCENARIO.replace(old, new, 1))
    one_line_error([cmd, str(p)], capsys, f"{key} must be an integer, written without a decimal point, got {shown}",
                   str(p))


def test_a_split_of_whole_floats_is_one_line(tmp_path, capsys):
    p = scenario(tmp_path, "layout", "layers_per_stage = [16.0, 16.0]")
    Path(p).write_text(Path(p).read_text().replace("pp = 1\n", "pp = 2\n").replace("zero = 3\n", "zero = 1\n"))
    one_line_error(["memory", p], capsys, "layers_per_stage must be a list of integers", "[16.0, 16.0]", p)


def test_a_flag_wins_over_a_float_in_the_file_and_every_shipped_scenario_loads(tmp_path, capsys):
    """The file's value a flag replaces is not read (as for every other key); the shipped scenarios, and their
    [sweep] tables, are written with integers."""
    from simulator.spec.scenario import load_scenario
    from simulator.sweep import SweepSpace

    p = tmp_path / "s.toml"
    p.write_text(SCENARIO.replace("tp = 1\n", "tp = 1.0\n", 1))
    _runs(["memory", str(p), "--tp", "1"], capsys)
    for path in sorted((ROOT / "scenarios").glob("*.toml")):
        sc = load_scenario(str(path), require_layout=False)
        SweepSpace.from_table(sc.sweep, where=str(path))


@pytest.mark.parametrize("cmd", ["estimate", "memory"])
def test_optimizer_offload_without_zero_is_one_line_naming_the_flag(cmd, capsys):
    """--offload-optimizer with ZeRO 0 was modelled (an unsharded optimizer on the host) with exit 0: ZeRO-Offload
    moves the optimizer's shard, and DeepSpeed (stages 1-3) and Megatron-LM (--use-distributed-optimizer) run it
    only sharded (spec/validate.py offload_problem)."""
    one_line_error([cmd, *LLAMA, "--offload-optimizer", "--zero", "0"], capsys,
                   "--offload-optimizer needs zero >= 1", "got zero(0)")
    _runs([cmd, *LLAMA, "--offload-optimizer", "--zero", "1"], capsys)


def test_optimizer_offload_without_zero_in_a_scenario_names_the_file(tmp_path, capsys):
    p = tmp_path / "s.toml"
    text = SCENARIO.replace('optimizer = "adamw"\n', 'optimizer = "adamw"\noffload_optimizer = true\n')
    p.write_text(text.replace("zero = 3\n", "zero = 0\n"))
    one_line_error(["estimate", str(p)], capsys, "offload_optimizer needs zero >= 1", "got zero(0)",
                   f"(in [training] of {p})")


def test_a_sweep_with_offload_tries_only_the_stages_it_runs_with(capsys):
    """The sweep ranked ZeRO-0 rows with optimizer offload; a layout with nothing to shard (dp·cp = 1) now carries the
    lowest stage the offload runs with (ZeRO-1), as estimate accepts it."""
    from simulator.spec.hardware import load_hardware
    from simulator.spec.load import load_model
    from simulator.spec.training import Training
    from simulator.sweep import SweepSpace, enumerate_layouts

    model, hw = load_model("llama3-8b"), load_hardware("dgx-h100")
    space = SweepSpace(tp=(1, 8), pp=(1,), micro_batch_size=(1,), recompute=("none",), sequence_parallel=(False,))
    for offload, stages, alone in (("optimizer", {1, 2, 3}, {1}), ("params", {3}, {3})):
        tr = Training(seq_length=2048, global_batch_size=16, **{f"offload_{offload}": True})
        df = enumerate_layouts(model, tr, 8, space, hardware=hw)
        assert set(df["zero"]) == stages, offload
        assert set(df.loc[df["dp"] * df["cp"] == 1, "zero"]) == alone, offload
    plain = enumerate_layouts(model, Training(seq_length=2048, global_batch_size=16), 8, space, hardware=hw)
    assert set(plain["zero"]) == {0, 1, 2, 3} and set(plain.loc[plain["dp"] == 1, "zero"]) == {0}


def _offload_scenario(tmp_path: Path, key: str) -> str:
    """The llama3-8b-8xh100 scenario without its [layout] (a sweep space), 2k tokens, with `key` = true."""
    assert SCENARIO.index("[layout]") > SCENARIO.index("[training]")
    p = tmp_path / "s.toml"
    p.write_text(SCENARIO.split("[layout]")[0].replace("seq_length = 8192", "seq_length = 2048")
                 .replace('optimizer = "adamw"\n', f'optimizer = "adamw"\n{key} = true\n'))
    return str(p)


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_a_sweep_with_parameter_offload_ranks_zero3_rows(fmt, tmp_path, capsys):
    """offload_params refused every row of a sweep that tried ZeRO 0-2 (the ZeRO-3 rows too, with the reason of
    zero 0) and the table printed a KeyError traceback."""
    argv = ["sweep", _offload_scenario(tmp_path, "offload_params"), "--tp", "1,2", *SMALL_SWEEP, "--format", fmt]
    out = _runs(argv, capsys)
    if fmt == "json":
        rows = json.loads(out)
        assert rows and all(r["zero"] == 3 and r["feasible"] for r in rows)
    else:
        assert "Winner:" in out and "ZeRO-3" in out


def test_a_sweep_asked_for_zero_0_with_offload_is_one_line(tmp_path, capsys):
    p = _offload_scenario(tmp_path, "offload_optimizer")
    one_line_error(["sweep", p, "--tp", "1", *SMALL_SWEEP, "--zero", "0,1"], capsys,
                   "offload_optimizer needs zero >= 1", "got zero(0)")
    out = _runs(["sweep", p, "--tp", "1,8", *SMALL_SWEEP, "--format", "json"], capsys)
    assert {(r["tp"], r["zero"]) for r in json.loads(out)} == {(1, 1), (1, 2), (1, 3), (8, 1)}


@pytest.mark.parametrize("text, needles", [
    ("max_tpp = 8", ["unknown key 'max_tpp' in [sweep] of", "did you mean 'max_tp'"]),
    ('tp = "x"', ["sweep tp value 'x' is not an integer"]),
    ("tp = [1.0, 2.0]", ["sweep tp value 1.0 is not an integer"]),
    ('max_tp = "8"', ["sweep max_tp must be an integer >= 1, got '8'"]),
    ("sequence_parallel = [3]", ["sweep sequence_parallel value 3 is not true or false"]),
])
@pytest.mark.parametrize("cmd", ["estimate", "memory", "sweep"])
def test_a_malformed_sweep_table_is_one_line_for_every_command(cmd, text, needles, tmp_path, capsys):
    """estimate and memory ignored a [sweep] table that `sweep` refused; all read it with the sweep's one check
    (SweepSpace.from_table), whose message now names the file for a bad value too."""
    p = scenario(tmp_path, "sweep", text)
    extra = ["--no-progress"] if cmd == "sweep" else []
    one_line_error([cmd, p, *extra], capsys, *needles, f"[sweep] of {p}")


def test_a_sweep_table_that_is_no_table_is_one_line(tmp_path, capsys):
    """sweep = 3 was already refused by every command (spec/scenario.py reads the sections): pinned here."""
    p = tmp_path / "s.toml"
    p.write_text("sweep = 3\n" + SCENARIO)
    one_line_error(["estimate", str(p)], capsys, "sweep in", str(p), "must be a table")
