"""Whether a GPU can run the precision asked for, and the hardware-profile values a fifth fuzzing round found taken
in silence (validate.precision_problem; spec/efficiency.py EFFICIENCY_FLOOR; rules.HARDWARE_RANGES; the efficiency
table names of spec/hardware.py): each exits 2 with one line naming the flag or the file and key, and the value."""
from __future__ import annotations

from pathlib import Path

import pytest

from simulator.cli import main
from simulator.spec.hardware import load_hardware
from simulator.spec.stack import load_stack
from simulator.spec.training import Training
from simulator.spec.validate import precision_problem
from test_fuzz_found import LLAMA, SCENARIO, one_line_error

ROOT = Path(__file__).resolve().parent.parent
A100 = ["--model", "llama3-8b", "--hardware", "dgx-a100-80g", "--gpus", "8", "--seq", "4096", "--global-batch", "8",
        "--precision", "fp8"]


def _fp8(recipe: str) -> Training:
    from dataclasses import replace

    return Training(seq_length=4096, global_batch_size=8, precision="fp8",
                    stack=replace(load_stack("megatron"), fp8_recipe=recipe))


def test_the_rule():
    assert precision_problem(_fp8("delayed"), load_hardware("dgx-a100-80g")).startswith("precision 'fp8' needs")
    assert precision_problem(_fp8("mxfp8"), load_hardware("dgx-h100")).startswith("fp8_recipe 'mxfp8' needs")
    assert precision_problem(_fp8("mxfp8"), load_hardware("mi300x")).startswith("fp8_recipe 'mxfp8' needs")
    assert precision_problem(_fp8("mxfp8"), load_hardware("dgx-b200")) == ""
    assert precision_problem(_fp8("current"), load_hardware("dgx-h100")) == ""
    bf16 = Training(seq_length=4096, global_batch_size=8, precision="bf16")
    assert precision_problem(bf16, load_hardware("dgx-a100-80g")) == ""


@pytest.mark.parametrize("cmd, extra", [("estimate", []), ("memory", []), ("sweep", ["--no-progress"]),
                                         ("sweep", ["--no-progress", "--format", "json"]),
                                         ("sweep", ["--no-progress", "--out", "x.csv"])])
def test_fp8_on_an_a100_is_one_line_naming_the_flag(cmd, extra, capsys, tmp_path, monkeypatch):
    # the sweep's table form was a KeyError traceback, its json form and memory exited 0 with FP8 numbers or reasons
    monkeypatch.chdir(tmp_path)
    one_line_error([cmd, *A100, *extra], capsys, "--precision 'fp8'", "dgx-a100-80g", "no fp8 peak")


def _fp8_scenario(tmp_path: Path, stack: str = "") -> str:
    """The llama3-8b-8xh100 scenario in fp8, with `stack` as its [stack] table's lines."""
    p = tmp_path / "scen.toml"
    text = SCENARIO.replace('precision = "bf16"', 'precision = "fp8"')
    p.write_text(text + (f"\n[stack]\n{stack}\n" if stack else ""))
    return str(p)


def test_fp8_on_an_a100_from_a_scenario_names_the_file(tmp_path, capsys):
    path = _fp8_scenario(tmp_path)
    one_line_error(["estimate", path, "--hardware", "dgx-a100-80g"], capsys, "precision 'fp8'", "[training] of",
                   "scen.toml")


@pytest.mark.parametrize("preset", ["dgx-h100", "dgx-h200", "h200-nvl", "mi300x", "mi325x"])
def test_mxfp8_on_a_gpu_without_block_scaled_fp8_names_the_stack_key(preset, tmp_path, capsys):
    path = _fp8_scenario(tmp_path, 'fp8_recipe = "mxfp8"')
    one_line_error(["estimate", path, "--hardware", preset], capsys, "fp8_recipe 'mxfp8'", preset, "[stack] of",
                   "scen.toml")


def test_mxfp8_on_blackwell_runs(tmp_path, capsys):
    path = _fp8_scenario(tmp_path, 'fp8_recipe = "mxfp8"')
    with pytest.raises(SystemExit) as exc:
        main(["estimate", path, "--hardware", "dgx-b200"])
    assert exc.value.code in (0, None) and "step time" in capsys.readouterr().out


def _profile(tmp_path: Path, old: str, new: str) -> str:
    text = (ROOT / "hardware_profiles" / "mi300x.toml").read_text()
    assert old in text
    p = tmp_path / "hw.toml"
    p.write_text(text.replace(old, new, 1))
    return str(p)


@pytest.mark.parametrize("old, new, needles", [
    ("efficiency = [0.0633, 0.3796, 0.5694, 0.601]", "efficiency = [1e-12, 1e-12, 1e-12, 1e-12]",
     ("hw.toml [efficiency.gemm]", "efficiency[0]", "1e-12")),
    ("efficiency = [0.30, 0.60, 0.75, 0.90]", "efficiency = [1e-300, 1e-300, 1e-300, 1e-300]",
     ("hw.toml [efficiency.memory]", "efficiency[0]", "1e-300")),
    ("leaf_oversubscription = 1.0", "leaf_oversubscription = 0.5", ("hw.toml network.leaf_oversubscription", "0.5")),
    ('model = "', 'model = 5\nmodel_was = "', ("hw.toml", "model")),
])
def test_profile_values_outside_any_real_gpu_are_refused(old, new, needles, tmp_path, capsys):
    one_line_error([*_hw(LLAMA, _profile(tmp_path, old, new))], capsys, *needles)


def _hw(argv, path):
    out = list(argv)
    out[out.index("--hardware") + 1] = path
    return ["estimate", *out]


@pytest.mark.parametrize("table", ["attention_bwd_flash9", "attention_flash3_hd0", "attention_cudnn-9-x"])
def test_an_attention_table_no_kernel_reads_is_refused(table, tmp_path, capsys):
    text = (ROOT / "hardware_profiles" / "mi300x.toml").read_text()
    p = tmp_path / "hw.toml"
    p.write_text(text + f'\n[efficiency.{table}]\nx = [512, 1024]\nefficiency = [0.3, 0.4]\n'
                        'x_unit = "f"\nsource = "s"\n')
    one_line_error(_hw(LLAMA, str(p)), capsys, f"[efficiency.{table}]", "hw.toml")


def test_every_shipped_profile_still_loads():
    for p in sorted((ROOT / "hardware_profiles").glob("*.toml")):
        load_hardware(str(p))


def test_plan_marks_a_gpu_that_cannot_run_the_precision_with_its_reason(tmp_path, capsys):
    # plan --hardware-presets ranked dgx-h100 with the mxfp8 recipe as feasible (the base hardware, b300, can run it)
    path = _fp8_scenario(tmp_path, 'fp8_recipe = "mxfp8"')
    with pytest.raises(SystemExit) as exc:
        main(["plan", path, "--hardware", "b300", "--tokens", "1e10", "--gpu-counts", "8",
              "--hardware-presets", "dgx-h100,b300"])
    out = capsys.readouterr().out
    assert exc.value.code in (0, None)
    h100 = next(line for line in out.splitlines() if "dgx-h100" in line)
    b300 = next(line for line in out.splitlines() if " b300 " in line)
    assert "no: fp8_recipe 'mxfp8' needs block-scaled FP8" in h100 and b300.rstrip().endswith("yes")


def test_the_sweep_table_shows_a_frame_no_row_of_which_was_timed():
    # round 5: a sweep whose every row failed before it was timed crashed the table with KeyError 'step_s'
    import pandas as pd

    from simulator.cli.sweep import _fmt_table

    df = pd.DataFrame([{"rank": 1, "label": "TP1-CP1-PP1-DP8", "pp": 1, "tp": 1, "cp": 1, "dp": 8, "vpp": 1,
                        "layers_per_stage": "", "peak_bytes": 2**30, "feasible": False, "reason": "why",
                        "recompute": "none", "sequence_parallel": False, "zero": 0, "schedule": "1f1b",
                        "micro_batch_size": 1}])
    row = _fmt_table(df, 5, 32).splitlines()[1]
    assert row.rstrip().endswith("no: why") and " - " in row
