"""Bad inputs a fifth fuzzing campaign (about 1,200 invocations) found taken in silence or named badly, outside the
hardware profiles: MoE load factors beyond what routing can produce, a count of 0 read as 'not given', a step time
of 1e308, framework values an importer did not know or coerced, settings larger than the model, a documented
inference example that failed, output paths checked after the work, and presets or stack settings whose error named
no flag or file. Each now exits 2 with one stderr line naming the flag or the file and key, and the value; the valid
neighbours still run."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.cli import main
from test_fuzz_found import LLAMA, MIXTRAL, SCENARIO, one_line_error, scenario
from test_fuzz_found_5 import SMALL_SWEEP, _runs

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "configs"


# ---- 6: MoE load factors within what the routing can produce --------------------------------------------------
@pytest.mark.parametrize("extra, needles", [
    (["--moe-imbalance", "4.5"], ["--moe-imbalance 4.5 is more than num_experts / top-k = 8/2 = 4"]),
    (["--moe-imbalance", "100"], ["--moe-imbalance 100 is more than num_experts / top-k = 8/2 = 4"]),
    (["--moe-capacity-factor", "1000"], ["--moe-capacity-factor 1000 is more than num_experts / top-k = 8/2 = 4"]),
    (["--moe-capacity-factor", "1e-9"], ["--moe-capacity-factor 1e-09 leaves each expert", "at least 1 is needed"]),
])
@pytest.mark.parametrize("cmd", ["estimate", "memory"])
def test_an_moe_load_factor_beyond_the_routing_is_one_line(cmd, extra, needles, capsys):
    """Mixtral (8 experts, top-2) on ep 8: --moe-imbalance 100 printed a step of 213 s and 1,381 GiB per GPU,
    --moe-capacity-factor 1e6 a step of 2e6 s, 1e-9 experts of no token (spec/model_fit.py: the busiest rank
    receives at most every routed token copy destined to it, min(ep, E/k) x the mean)."""
    one_line_error([cmd, *MIXTRAL, *extra], capsys, *needles)


@pytest.mark.parametrize("extra", [["--moe-imbalance", "4"], ["--moe-capacity-factor", "4"],
                                   ["--moe-capacity-factor", "0.5"]])
def test_an_moe_load_factor_at_its_bound_runs(extra, capsys):
    out = _runs(["memory", *MIXTRAL, *extra, "--format", "json"], capsys)
    assert json.loads(out)["memory"]["peak_bytes"] > 0


def test_the_imbalance_bound_follows_ep(capsys):
    """ep 2 holds 4 experts a rank: a token can send it both its copies, at most min(2, 4) = 2 x the mean."""
    argv = [a if a != "8" or i != MIXTRAL.index("--ep") + 1 else "2" for i, a in enumerate(MIXTRAL)]
    one_line_error(["estimate", *argv, "--moe-imbalance", "2.5"], capsys, "ep(2) allows", "min(2, 8/2) = 2")
    _runs(["estimate", *argv, "--moe-imbalance", "2", "--format", "json"], capsys)


def test_an_moe_load_factor_beyond_the_routing_in_a_scenario_names_the_file(tmp_path, capsys):
    p = tmp_path / "s.toml"
    p.write_text((ROOT / "scenarios" / "mixtral-8x7b-64xh100.toml").read_text().replace(
        "[training]\n", "[training]\nmoe_imbalance = 50.0\n", 1))
    one_line_error(["estimate", str(p)], capsys, "moe_imbalance 50 is more than", f"(in [training] of {p})")


def test_a_sweep_tries_the_ep_an_imbalance_can_occur_on(capsys):
    """An imbalance of 3 needs ep >= 3: the ep 1 and 2 rows are no candidates; one beyond E/k is refused."""
    base = ["sweep", *MIXTRAL[:10], *SMALL_SWEEP, "--tp", "1", "--zero", "1"]
    rows = json.loads(_runs([*base, "--moe-imbalance", "3", "--format", "json"], capsys))
    assert rows and {r["ep"] for r in rows} <= {4, 8}
    rows = json.loads(_runs([*base, "--format", "json"], capsys))
    assert {1, 2} <= {r["ep"] for r in rows}
    one_line_error([*base, "--moe-imbalance", "5"], capsys, "--moe-imbalance 5 is more than num_experts / top-k")
    out = _runs([*base, "--moe-imbalance", "3", "--ep", "1,2"], capsys)
    assert "No layout in the space: moe_imbalance 3 is more than ep(1) allows" in out


# ---- 7: --recompute-layers 0 ------------------------------------------------------------------------------------
@pytest.mark.parametrize("cmd", ["estimate", "memory", "sweep"])
def test_recompute_layers_zero_is_refused_like_minus_one(cmd, capsys):
    """--recompute-layers 0 was read as not given (every layer recomputed), -1 refused."""
    extra = ["--no-progress"] if cmd == "sweep" else []
    for v in ("0", "-1"):
        one_line_error([cmd, *LLAMA, "--recompute", "full", "--recompute-layers", v, *extra], capsys,
                       f"--recompute-layers must be > 0, got {v}")


def test_recompute_layers_zero_in_a_scenario_names_the_file(tmp_path, capsys):
    p = scenario(tmp_path, "layout", 'recompute_layers = 0')
    Path(p).write_text(Path(p).read_text().replace('recompute = "none"', 'recompute = "full"'))
    one_line_error(["estimate", p], capsys, "recompute_layers must be > 0, got 0", p)


# ---- 8: validate's measured values -----------------------------------------------------------------------------
@pytest.mark.parametrize("column, value", [("step_time_s", "1e308"), ("tokens_per_s", "1e300")])
def test_a_measured_value_beyond_any_run_is_one_line(column, value, tmp_path, capsys):
    """step_time_s = 1e308 printed an overflow warning and a 300-digit step time with exit 0."""
    lines = (ROOT / "tests" / "data" / "validate" / "runs_fixture.csv").read_text().splitlines()
    header = lines[0].split(",")
    row = lines[1].split(",")
    row[header.index(column)] = value
    p = tmp_path / "runs.csv"
    p.write_text(lines[0] + "\n" + ",".join(row) + "\n")
    one_line_error(["validate", str(p)], capsys, f"{p} line 2 (run fx_measured_step): {column} must be a number > 0 "
                                                 f"and at most", f"got '{value}'")


# ---- 10: ep_dispatch_fp8 on a dense model ----------------------------------------------------------------------
def test_ep_dispatch_fp8_on_a_dense_model_is_refused(tmp_path, capsys):
    p = scenario(tmp_path, "stack", "ep_dispatch_fp8 = true")
    one_line_error(["estimate", p], capsys, "ep_dispatch_fp8 applies to routed experts", f"(in [stack] of {p})")


# ---- 11, 12: importers ---------------------------------------------------------------------------------------
def test_import_reports_a_value_it_does_not_know_as_not_understood(tmp_path, capsys):
    """converters = ["int4"] and --attention-backend magic appeared nowhere in the report or the scenario."""
    job = (CONFIGS / "torchtitan_llama3_8b.toml").read_text()
    p = tmp_path / "job.toml"
    p.write_text(job.replace("[model]\n", '[model]\nconverters = ["int4"]\n', 1))
    out = _runs(["import", "torchtitan", str(p), "--gpus", "64"], capsys)
    assert "[model] converters 'int4': not one of float8, mx" in out
    script = (CONFIGS / "megatron_llama3_70b.sh").read_text()
    assert "--attention-backend fused" in script
    s = tmp_path / "job.sh"
    s.write_text(script.replace("--attention-backend fused", "--attention-backend magic"))
    out = _runs(["import", "megatron", str(s)], capsys)
    assert "--attention-backend 'magic': not one of flash, fused, unfused, local, auto" in out


@pytest.mark.parametrize("change, needle", [
    (lambda d: d.update(train_batch_size="256"), "train_batch_size must be a whole number, got '256'"),
    (lambda d: d["zero_optimization"].update(stage="3"), "zero_optimization.stage must be a whole number, got '3'"),
    (lambda d: d.update(bf16={"enabled": "yes"}), "bf16.enabled must be true or false, got 'yes'"),
])
def test_a_deepspeed_number_or_switch_written_as_text_is_one_line(change, needle, tmp_path, capsys):
    """DeepSpeed asserts train_batch_size == micro x accumulation x GPUs, which a text fails; JSON writes numbers and
    switches as such ("auto" stays the Hugging Face Trainer's placeholder)."""
    doc = json.loads((CONFIGS / "ds_zero3.json").read_text())
    change(doc)
    p = tmp_path / "ds.json"
    p.write_text(json.dumps(doc))
    one_line_error(["import", "deepspeed", str(p), "--hf-config", str(CONFIGS / "llama3_8b_config.json"),
                    "--gpus", "16", "--seq", "4096"], capsys, str(p), needle)


def test_the_shipped_deepspeed_config_with_its_5e8_buckets_still_imports(capsys):
    out = _runs(["import", "deepspeed", str(CONFIGS / "ds_zero3.json"), "--hf-config",
                 str(CONFIGS / "llama3_8b_config.json"), "--gpus", "16", "--seq", "4096"], capsys)
    assert "zero = 3" in out


def test_an_integer_written_as_a_float_or_in_e_notation_is_one_line(tmp_path, capsys):
    """tensor_parallel_degree = 2.0 was imported as tp 2; --num-layers 1e3 as 1,000 layers (Megatron's argparse
    type=int refuses it); a config.json's num_key_value_heads 8.0 as 8 (transformers' config refuses it)."""
    job = (CONFIGS / "torchtitan_llama3_8b.toml").read_text()
    assert "tensor_parallel_degree = 2" in job
    p = tmp_path / "job.toml"
    p.write_text(job.replace("tensor_parallel_degree = 2", "tensor_parallel_degree = 2.0", 1))
    one_line_error(["import", "torchtitan", str(p), "--gpus", "64"], capsys, str(p), "tensor_parallel_degree",
                   "written without a decimal point, got 2.0")
    s = tmp_path / "job.sh"
    s.write_text((CONFIGS / "megatron_llama3_70b.sh").read_text().replace("--num-layers 80", "--num-layers 1e3"))
    one_line_error(["import", "megatron", str(s)], capsys, str(s), "--num-layers must be a whole number, got '1e3'")
    cfg = json.loads((CONFIGS / "llama3_8b_config.json").read_text())
    c = tmp_path / "config.json"
    c.write_text(json.dumps({**cfg, "num_key_value_heads": 8.0}))
    one_line_error(["estimate", "--model", str(c), *LLAMA[2:]], capsys, f"num_key_value_heads in {c}",
                   "written without a decimal point, got 8.0")


# ---- 13: values with no effect --------------------------------------------------------------------------------
@pytest.mark.parametrize("cmd", ["estimate", "sweep"])
def test_an_fsdp_unit_larger_than_the_model_is_one_line(cmd, capsys):
    """--fsdp-unit-layers 33 and 1000 on a 32-layer model gave the result of 32."""
    extra = ["--no-progress"] if cmd == "sweep" else ["--zero", "3"]
    one_line_error([cmd, *LLAMA, "--fsdp-unit-layers", "33", *extra], capsys,
                   "--fsdp-unit-layers 33 is more than the model's 32 layers")


def test_an_fsdp_unit_larger_than_the_model_in_a_stack_table_names_the_file(tmp_path, capsys):
    p = scenario(tmp_path, "stack", "fsdp_unit_layers = 64")
    one_line_error(["estimate", p], capsys, "fsdp_unit_layers 64 is more than", f"(in [stack] of {p})")


@pytest.mark.parametrize("key, value, needle", [
    ("hidden_act", 5, "hidden_act in {c} must be an activation's name, got 5"),
    ("rope_theta", -1, "rope_theta in {c} must be a finite number > 0, got -1"),
    ("rope_theta", "x", "rope_theta in {c} must be a finite number > 0, got 'x'"),
    ("rope_scaling", {"rope_type": "linear", "factor": 0}, "rope_scaling factor in {c} must be a finite number > 0"),
    ("rope_scaling", {"rope_type": "linear", "factor": "big"}, "rope_scaling factor in {c}"),
    ("rope_scaling", "big", "rope_scaling in {c} must be a JSON object or null, got 'big'"),
])
def test_a_config_value_transformers_would_reject_is_one_line(key, value, needle, tmp_path, capsys):
    """hidden_act 5, rope_theta -1 or "x", a rope factor of 0, -4, inf or "big" were accepted without a word
    (spec/hf_values.py; an activation name parasim does not know is left to transformers, whose list grows)."""
    cfg = json.loads((CONFIGS / "llama3_8b_config.json").read_text())
    c = tmp_path / "config.json"
    c.write_text(json.dumps({**cfg, key: value}))
    one_line_error(["estimate", "--model", str(c), *LLAMA[2:]], capsys, needle.format(c=c))


# ---- 14: the documented inference example ----------------------------------------------------------------------
def test_the_documented_inference_example_runs_and_batch_gives_the_global_batch(capsys):
    """--inference --batch 64 without --global-batch was 'missing key global_batch_size in [training] of flags'."""
    base = ["estimate", "--model", "llama3-8b", "--hardware", "dgx-h100", "--seq", "4096", "--tp", "8", "--inference"]
    out = _runs([*base, "--gpus", "8", "--batch", "64"], capsys)
    assert "time to first token" in out
    d = json.loads(_runs([*base, "--gpus", "16", "--batch", "4", "--format", "json"], capsys))
    assert d["inference"]["batch"] == 4 and d["layout"]["global_batch_size"] == 8  # 4 per replica x dp 2
    one_line_error(base[:7] + ["--gpus", "8"], capsys, "missing --global-batch (or global_batch_size in a scenario "
                                                       "file's [training])")


# ---- 15: output paths -----------------------------------------------------------------------------------------
@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs Linux /proc (a folder no file can be made in)")
@pytest.mark.parametrize("argv, flag", [
    (["validate", str(ROOT / "tests" / "data" / "validate" / "runs_fixture.csv"), "--out", "/proc/x.csv"], "--out"),
    (["sweep", *LLAMA, "--no-progress", "--out", "/proc/r.csv"], "--out"),
    (["sweep", *LLAMA, "--no-progress", "--plot", "/proc/p.png"], "--plot"),
    (["estimate", *LLAMA, "--plot", "/proc/p.png"], "--plot"),
])
def test_an_output_path_that_cannot_be_written_names_the_flag(argv, flag, capsys):
    """'file not found: /proc/r.csv.parts' named a path the user never gave and no flag."""
    line = one_line_error(argv, capsys, f"{flag} '/proc/", "cannot write there")
    assert ".parts" not in line


def test_a_sweep_plot_into_a_missing_folder_is_refused_before_the_sweep(tmp_path, capsys):
    """The sweep ran and printed its table, then 'file not found: .../p.png'."""
    with pytest.raises(SystemExit) as exc:
        main(["sweep", *LLAMA, *SMALL_SWEEP, "--plot", str(tmp_path / "nodir" / "p.png")])
    out = capsys.readouterr()
    assert exc.value.code == 2 and out.out == ""
    assert out.err.strip() == f"error: --plot '{tmp_path / 'nodir' / 'p.png'}': directory '{tmp_path / 'nodir'}' " \
                              f"does not exist"


# ---- 16: presets ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, needles", [
    (["estimate", str(ROOT / "scenarios" / "llama3-8b-8xh100.toml"), "--stack", "Megatron"],
     ["--stack: unknown stack preset 'Megatron'; did you mean megatron?"]),
    (["estimate", str(ROOT / "scenarios" / "llama3-8b-8xh100.toml"), "--stack", "/nonexistent.toml"],
     ["--stack: file not found: /nonexistent.toml"]),
    (["estimate", "--model", "llama3-8b", "--hardware", "dgx-h1OO", *LLAMA[4:]],
     ["--hardware: unknown hardware preset 'dgx-h1OO'"]),
    (["plan", *LLAMA[:2], "--seq", "4096", "--global-batch", "64", "--tokens", "1e10", "--gpu-counts", "8",
      "--hardware-presets", "dgx-h100,foo"], ["--hardware-presets: unknown hardware preset 'foo'"]),
])
def test_an_unknown_preset_names_the_flag(argv, needles, capsys):
    one_line_error(argv, capsys, *needles)


@pytest.mark.parametrize("section, old, new, needle", [
    ("stack", None, 'preset = "megatrom"', "preset in [stack] of {p}: unknown stack preset 'megatrom'"),
    ("stack", None, 'preset = "nonexistent.toml"', "preset in [stack] of {p}: file not found: nonexistent.toml"),
    ("hardware", 'preset = "dgx-h100"', 'preset = "dgx-h10"', "preset in [hardware] of {p}: unknown hardware "
                                                              "preset 'dgx-h10'"),
])
def test_an_unknown_preset_in_a_scenario_names_the_file_and_key(section, old, new, needle, tmp_path, capsys):
    if old is None:
        p = scenario(tmp_path, section, new)
    else:
        assert old in SCENARIO
        p = str(tmp_path / "s.toml")
        Path(p).write_text(SCENARIO.replace(old, new, 1))
    one_line_error(["estimate", p], capsys, needle.format(p=p))


# ---- 17: [stack] settings against the model -------------------------------------------------------------------
@pytest.mark.parametrize("text, needle", [
    ('recompute_modules = ["mla_up_proj"]', "recompute_modules mla_up_proj needs multi-latent attention"),
    ('recompute_modules = ["moe_act"]', "recompute_modules moe_act needs routed experts"),
    ("moe_a2a_overlap = true", "moe_a2a_overlap applies to routed experts"),
    ("moe_shared_expert_overlap = true", "moe_shared_expert_overlap applies to routed experts"),
    ('moe_dispatcher = "flex"', "moe_dispatcher flex applies to routed experts"),
])
def test_a_stack_setting_the_model_cannot_take_names_the_file(text, needle, tmp_path, capsys):
    """The stack's own checks said '(in [stack] of FILE)'; those against the model named no file."""
    p = scenario(tmp_path, "stack", text)
    if "recompute_modules" in text:
        Path(p).write_text(Path(p).read_text().replace('recompute = "none"', 'recompute = "selective"'))
    one_line_error(["estimate", p], capsys, needle, f"(in [stack] of {p})")


def test_a_stack_flag_the_model_cannot_take_names_the_flag_not_the_file(tmp_path, capsys):
    p = scenario(tmp_path, "stack", "compiled = true")
    line = one_line_error(["estimate", p, "--moe-a2a-overlap"], capsys, "moe_a2a_overlap applies to routed experts")
    assert p not in line
