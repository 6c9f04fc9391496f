"""Bad inputs a fourth fuzzing campaign (2026-11-28, about 1,100 invocations: scenario, config.json, hardware and stack
files, every command's flags) found taking a wrong path: a traceback, nonsense accepted with exit 0, a list with an
empty item, a count of 0 taken as 'not given', or an error naming no file. Each now exits 2 with one stderr line
naming where the value came from; two valid inputs that were refused now run."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.cli import main
from test_fuzz_found import LLAMA, SCENARIO, one_line_error, scenario

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "configs"
H100 = (ROOT / "hardware_profiles" / "dgx-h100.toml").read_text()


@pytest.mark.parametrize("value", ['"fsdp"', "5", "[1]", "true"])
@pytest.mark.parametrize("cmd", ["estimate", "memory"])
def test_a_stack_that_is_no_table_is_one_line(cmd, value, tmp_path, capsys):
    """stack = "fsdp" at the top of a scenario was a ValueError traceback (dict() of a text)."""
    p = tmp_path / "s.toml"
    p.write_text(SCENARIO.replace("[model]", f"stack = {value}\n[model]", 1))
    one_line_error([cmd, str(p)], capsys, "stack in", str(p), "must be a table")


def test_an_integer_too_long_to_read_is_one_line_in_toml_and_json(tmp_path, capsys):
    """An integer literal of 5,000 digits was a ValueError traceback from Python's int conversion limit."""
    p = tmp_path / "s.toml"
    p.write_text(SCENARIO.replace("seq_length = 8192", "seq_length = " + "9" * 5000))
    one_line_error(["estimate", str(p)], capsys, str(p), "too long to read")
    c = tmp_path / "config.json"
    c.write_text('{"model_type": "llama", "hidden_size": ' + "9" * 5000 + "}")
    one_line_error(["estimate", "--model", str(c), *LLAMA[2:]], capsys, str(c), "too long to read")
    ds = tmp_path / "ds.json"
    ds.write_text('{"train_batch_size": ' + "9" * 5000 + "}")
    one_line_error(["import", "deepspeed", str(ds), "--model", "llama3-8b", "--gpus", "8"], capsys, str(ds),
                   "too long to read")


def test_import_counts_given_as_zero_are_errors_not_defaults(capsys):
    """--gpus 0 was a ZeroDivisionError traceback (torchtitan) or 'not given' (megatron); --seq 0 and --vocab-size 0
    were taken as not given and silently replaced by defaults."""
    one_line_error(["import", "torchtitan", str(CONFIGS / "torchtitan_llama3_8b.toml"), "--gpus", "0"], capsys,
                   "--gpus must be > 0, got 0")
    one_line_error(["import", "megatron", "--gpus", "8", "--vocab-size", "0", "--", "--num-layers", "2"], capsys,
                   "--vocab-size must be > 0, got 0")
    one_line_error(["import", "deepspeed", str(CONFIGS / "ds_zero3.json"), "--hf-config",
                    str(CONFIGS / "llama3_8b_config.json"), "--gpus", "16", "--seq", "0"], capsys,
                   "--seq must be > 0, got 0")


@pytest.mark.parametrize("argv, needle", [
    (["plot", "bubble", "--pp", "4", "--microbatches", "4,,8"], "--microbatches must be comma-separated"),
    (["plot", "bubble", "--pp", "4", "--schedules", "1f1b,,gpipe"], "--schedules must be comma-separated"),
    (["estimate", *LLAMA, "--recompute", "selective", "--recompute-modules", "core_attn,,mlp"], "--recompute-modules"),
    (["estimate", *LLAMA, "--layers-per-stage", "16,,16", "--pp", "2"], "--layers-per-stage must be comma-separated"),
])
def test_a_list_with_an_empty_item_is_one_line(argv, needle, tmp_path, capsys):
    """The empty item was dropped and the rest run (round 3 fixed --tp, --gpu-counts and --hardware-presets); every
    list flag now reads through one parser (cli/lists.py)."""
    if argv[0] == "plot":
        argv = argv + ["--out", str(tmp_path / "b.png")]
    one_line_error(argv, capsys, needle)


def test_torch_model_pipeline_without_stages_and_too_many_gpus_are_one_line(tmp_path, capsys):
    """--pp 0 was a ZeroDivisionError traceback; --gpus 99999999 ran where every other command stops at 2**20."""
    pytest.importorskip("torch")
    m = tmp_path / "m.py"
    m.write_text("import torch\ndef build():\n    return torch.nn.Sequential(torch.nn.Linear(16, 4))\n")
    base = ["torch-model", f"{m}:build", "--input", "16", "--batch", "8", "--hardware", "dgx-h100"]
    one_line_error(base + ["--mode", "pipeline", "--pp", "0", "--microbatches", "4"], capsys, "--pp must be >= 1")
    one_line_error(base + ["--gpus", "99999999"], capsys, "--gpus", "<= 1048576")
    one_line_error(base + ["--gpus", "8,,16"], capsys, "--gpus", "'8,,16'")


@pytest.mark.parametrize("old, new, key", [
    ("blas_workspace_mib = 32", "blas_workspace_mib = 1e300", "gpu.blas_workspace_mib"),
    ("hbm_gb_per_s = 3350", "hbm_gb_per_s = 1e-300", "gpu.hbm_gb_per_s"),
    ("bf16 = 989.4", "bf16 = 1e-300", "gpu.peak_tflops.bf16"),
    ("leaf_oversubscription = 1.0", "leaf_oversubscription = 1e300", "network.leaf_oversubscription"),
])
def test_hardware_numbers_out_of_any_real_range_are_one_line(old, new, key, tmp_path, capsys):
    """A peak of 1e-300 TFLOP/s printed a 305-digit step time with overflow warnings; a BLAS workspace of 1e300 MiB a
    negative GiB (an int64 overflow): both exited 0 (spec/rules.py HARDWARE_RANGES)."""
    assert old in H100
    p = tmp_path / "hw.toml"
    p.write_text(H100.replace(old, new, 1))
    one_line_error(["memory", *LLAMA[:2], "--hardware", str(p), *LLAMA[4:]], capsys, key, "must be in [")


def test_every_shipped_hardware_profile_is_within_the_ranges():
    from simulator.spec.hardware import load_hardware
    from simulator.spec.presets import preset_names

    for name in preset_names("hardware_profiles"):
        load_hardware(name)
    for p in sorted((ROOT / "validation").glob("h*/*.toml")):
        if "[gpu]" in p.read_text():
            load_hardware(str(p))


def test_calibrate_checks_its_base_before_it_measures(tmp_path, capsys):
    """A mistyped --base was found after the measurements ('measuring gemm ...' first: minutes lost on a GPU)."""
    one_line_error(["calibrate", "gemm", "--base", "dgx-h10", "--out", str(tmp_path / "g.toml")], capsys,
                   "unknown hardware preset 'dgx-h10'")


@pytest.mark.parametrize("extra, needle", [
    (["--recompute", "full", "--recompute-layers", "100"], "--recompute-layers 100 is more than the model's 32"),
    (["--recompute", "full", "--recompute-group", "33"], "--recompute-group 33 is more than the model's 32"),
    (["--cuda-graphs", "moe_router"], "applies to routed experts"),
    (["--moe-dispatcher", "flex"], "applies to routed experts"),
    (["--moe-shared-expert-overlap"], "applies to routed experts"),
    (["--tokens", "0.5"], "--tokens must be >= 1"),
])
def test_settings_that_cannot_apply_are_one_line(extra, needle, capsys):
    one_line_error(["estimate", *LLAMA, *extra], capsys, needle)


def test_a_sequence_beyond_a_learned_position_table_is_one_line(capsys):
    """GPT-2 has 1,024 learned positions: 16k tokens have no embedding (RoPE models are not refused)."""
    args = ["--model", "gpt2-124m", *LLAMA[2:6], "--global-batch", "16"]
    one_line_error(["estimate", *args, "--seq", "16384"], capsys, "learned position table (1024 positions")
    one_line_error(["sweep", *args, "--seq", "16384", "--no-progress"], capsys, "learned position table")
    with pytest.raises(SystemExit) as exc:
        main(["estimate", *args, "--seq", "1024"])
    assert exc.value.code in (0, None)


@pytest.mark.parametrize("cmd", [["schedule", "--schedule", "1f1b"], ["plot", "timeline", "--schedule", "1f1b"]])
def test_stage_times_that_are_all_zero_are_one_line(cmd, tmp_path, capsys):
    """A replay of no work printed makespan 0 and a bubble of 0/0 as 0 (and a matplotlib warning)."""
    argv = cmd + ["--pp", "4", "--microbatches", "8", "--forward", "0", "--backward", "0"]
    if cmd[0] == "plot":
        argv += ["--out", str(tmp_path / "t.png")]
    one_line_error(argv, capsys, "all 0")


def test_two_micro_batch_sizes_in_a_scenario_are_one_line(tmp_path, capsys):
    p = scenario(tmp_path, "layout", "micro_batch_size = 2")
    text = Path(p).read_text()
    assert "micro_batch_size = 1" in text  # ([training] has its own)
    one_line_error(["estimate", p], capsys, "micro_batch_size", p, "give it once")


@pytest.mark.parametrize("old, new, key", [
    ('name = "llama3-8b-8xh100"', "name = 5", "name in"),
    ('description = "Llama-3-8B on one DGX H100 node with FSDP (ZeRO-3) over 8 GPUs, 8k context."', "description = [1]",
     "description in"),
    ('[model]\npreset = "llama3-8b"', "[model]\nname = 5\nhidden_size = 4096\nnum_hidden_layers = 2\n"
     "num_attention_heads = 32\nnum_key_value_heads = 8\nintermediate_size = 14336\nvocab_size = 128256", "name in"),
])
def test_a_name_or_description_that_is_no_text_is_one_line(old, new, key, tmp_path, capsys):
    """name = 5 was printed as the scenario's or model's name (a hardware profile's as '8 x 5')."""
    assert old in SCENARIO
    p = tmp_path / "s.toml"
    p.write_text(SCENARIO.replace(old, new, 1))
    one_line_error(["estimate", str(p)], capsys, key, "text", "got")


def test_a_hardware_profile_whose_name_is_no_text_is_one_line(tmp_path, capsys):
    p = tmp_path / "hw.toml"
    p.write_text(H100.replace('name = "dgx-h100"', "name = 5", 1))
    one_line_error(["memory", *LLAMA[:2], "--hardware", str(p), *LLAMA[4:]], capsys, "name", "got 5")


def test_a_config_json_breaking_the_models_rules_names_the_file(tmp_path, capsys):
    c = tmp_path / "config.json"
    c.write_text('{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 7, '
                 '"num_hidden_layers": 2, "intermediate_size": 11008, "vocab_size": 32000}')
    one_line_error(["estimate", "--model", str(c), *LLAMA[2:]], capsys, str(c), "num_key_value_heads(7)")


def test_plan_takes_its_hardware_from_the_presets_list(capsys):
    """--hardware-presets without --hardware was refused ('no hardware: give --hardware')."""
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--model", "llama3-8b", "--hardware-presets", "dgx-h100,dgx-h200", "--seq", "8192",
              "--global-batch", "512", "--tokens", "1e12", "--gpu-counts", "64,128"])
    out = capsys.readouterr()
    assert exc.value.code in (0, None), out.err
    assert "dgx-h200" in out.out and "dgx-h100" in out.out


def test_a_torchtitan_job_with_a_number_as_text_or_a_section_as_a_value_is_one_line(tmp_path, capsys):
    """tensor_parallel_degree = "2" was imported as tp 2 and [compile] enable = "yes" as compiled; model = "x" fell
    back to the defaults with exit 0 (a typed TOML's text is a slip, not a number)."""
    job = (CONFIGS / "torchtitan_llama3_8b.toml").read_text()
    assert "tensor_parallel_degree = 2" in job and "[compile]\nenable = true" in job
    for old, new, needle in (("tensor_parallel_degree = 2", 'tensor_parallel_degree = "2"', "must be a whole number, got '2'"),
                             ("[compile]\nenable = true", '[compile]\nenable = "yes"', "must be true or false")):
        p = tmp_path / "job.toml"
        p.write_text(job.replace(old, new, 1))
        one_line_error(["import", "torchtitan", str(p), "--gpus", "8"], capsys, str(p), needle)
    p = tmp_path / "job.toml"
    p.write_text('model = "x"\n' + job.replace("[model]", "[model_unused]", 1))
    one_line_error(["import", "torchtitan", str(p), "--gpus", "8"], capsys, "model must be a table")


def test_calibrate_refuses_an_empty_profile_name(tmp_path, capsys):
    log = ROOT / "tests" / "data" / "nccl" / "all_reduce_perf_8xa100.log"
    one_line_error(["calibrate", "nccl-tests", str(log), "--base", "dgx-a100-80g", "--name", " ", "--out",
                    str(tmp_path / "o.toml")], capsys, "--name must be a non-empty text")


def test_a_validate_row_with_a_negative_count_names_its_column(tmp_path, capsys):
    """seq_len = -1024 was reported as 'model learned_position_embeddings must be >= 0' (an internal field)."""
    lines = (ROOT / "validation" / "published_runs.csv").read_text().splitlines()
    row = next(ln for ln in lines if ln.startswith("zb_t4_1.5B_ZB-2p_m24,"))
    assert ",1024," in row
    p = tmp_path / "runs.csv"
    p.write_text(lines[0] + "\n" + row.replace(",1024,", ",-1024,", 1) + "\n")
    one_line_error(["validate", str(p)], capsys, "seq_len must be > 0, got -1024")


def test_an_inference_batch_beyond_the_bound_names_the_flag(capsys):
    """--batch 2**31 was reported as 'global_batch_size ... got 17179869184', the replicas' total."""
    one_line_error(["estimate", *LLAMA, "--inference", "--batch", str(2 ** 31)], capsys, "--batch 2147483648 x dp 8")


def test_a_stack_framework_that_is_no_text_names_the_scenario(tmp_path, capsys):
    p = scenario(tmp_path, "stack", "framework = 3")
    one_line_error(["estimate", p], capsys, "framework must be a non-empty text", p)


def test_a_deepseek_config_without_a_latent_rank_and_a_deepspeed_section_as_a_list_are_one_line(tmp_path, capsys):
    """kv_lora_rank 0 was accepted (MLA with no latent); zero_optimization = [1] was 'not understood', exit 0."""
    cfg = {"model_type": "deepseek_v3", "hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8,
           "intermediate_size": 2048, "vocab_size": 1000, "q_lora_rank": 256, "kv_lora_rank": 0,
           "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64}
    c = tmp_path / "config.json"
    c.write_text(json.dumps(cfg))
    one_line_error(["estimate", "--model", str(c), *LLAMA[2:]], capsys, "kv_lora_rank", str(c))
    ds = tmp_path / "ds.json"
    ds.write_text('{"train_batch_size": 16, "zero_optimization": [1]}')
    one_line_error(["import", "deepspeed", str(ds), "--model", "llama3-8b", "--gpus", "8"], capsys,
                   "zero_optimization must be a JSON object", str(ds))


def test_nccl_tests_rows_without_a_time_are_left_out_with_a_warning(tmp_path, capsys):
    """A result row whose time is N/A was dropped from the fit without a word."""
    from test_fuzz_found_3 import _calibrate, _log

    with pytest.raises(SystemExit) as exc:
        main(_calibrate(_log(tmp_path, 5, "N/A", sizes={1048576}), tmp_path))
    err = capsys.readouterr().err
    assert exc.value.code in (0, None), err
    assert "warning: 1 result row(s) without a time" in err and "size 1048576" in err
