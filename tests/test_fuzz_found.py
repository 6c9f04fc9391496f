"""Bad inputs a fuzzing campaign found taking a wrong path (a traceback, nonsense numbers, or a silent
default): each now exits 2 with one stderr line naming the key as the user wrote it and the value. Cases
already in tests/test_bad_inputs.py, test_cli_robustness.py and test_flags_bad_values.py are not repeated."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.cli import main

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = (ROOT / "scenarios" / "llama3-8b-8xh100.toml").read_text()
FLAGS = ["--hardware", "dgx-h100", "--gpus", "8", "--seq", "2048", "--global-batch", "16"]
LLAMA = ["--model", "llama3-8b", *FLAGS]
MIXTRAL = ["--model", "mixtral-8x7b", *FLAGS, "--ep", "8", "--zero", "1"]
INLINE = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
          "intermediate_size": 14336, "vocab_size": 128256}
GPT2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257}


def one_line_error(argv, capsys, *needles) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert exc.value.code == 2, (exc.value.code, err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err[-2000:]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def scenario(tmp_path: Path, section: str, text: str) -> str:
    """The llama3-8b-8xh100 scenario with `text` appended to its [section] (added when absent)."""
    doc = SCENARIO if f"[{section}]" in SCENARIO else SCENARIO + f"\n[{section}]\n"
    p = tmp_path / "scen.toml"
    p.write_text(doc.replace(f"[{section}]\n", f"[{section}]\n{text}\n", 1))
    return str(p)


@pytest.mark.parametrize("raw", ["[]", "[1]", "[0, 3]"])
@pytest.mark.parametrize("cmd", ["memory", "estimate"])
def test_a_list_as_the_zero_stage_is_one_line(cmd, raw, tmp_path, capsys):
    """zero = [] passed check_zero (every element of an empty array is a stage) and crashed in the stack's
    layout rules with a TypeError traceback."""
    p = tmp_path / "scen.toml"
    p.write_text(SCENARIO.replace("zero = 3\n", f"zero = {raw}\n"))
    one_line_error([cmd, str(p)], capsys, "zero", raw)


@pytest.mark.parametrize("flag", ["--moe-imbalance", "--moe-capacity-factor"])
@pytest.mark.parametrize("cmd", ["memory", "estimate"])
def test_an_moe_factor_past_its_bound_is_one_line_not_inf(cmd, flag, capsys):
    """1e308 passed (finite, >= 1) and overflowed the expert buffers: inf GiB printed, RuntimeWarnings,
    and with --inference an error naming an internal value (message_bytes)."""
    one_line_error([cmd, *MIXTRAL, flag, "1e308"], capsys, flag, "1e+308")


@pytest.mark.parametrize("key,raw", [("moe_imbalance", "1e300"), ("moe_capacity_factor", "1e300")])
def test_an_moe_factor_past_its_bound_in_a_scenario(key, raw, tmp_path, capsys):
    one_line_error(["estimate", scenario(tmp_path, "training", f"{key} = {raw}")], capsys, key, "1e+300")


def test_an_moe_imbalance_inside_its_bound_is_accepted(capsys):
    """(4 = min(ep, experts / top-k) on Mixtral's ep 8: spec/model_fit.py; 8 was accepted until round 6)"""
    with pytest.raises(SystemExit) as exc:
        main(["memory", *MIXTRAL, "--moe-imbalance", "4", "--format", "json"])
    out = capsys.readouterr()
    assert exc.value.code in (0, None), out.err
    assert json.loads(out.out)["memory"]["peak_bytes"] > 0


@pytest.mark.parametrize("value", ["1e-300", "5e-07"])
def test_a_data_parallel_bucket_under_one_byte_is_one_line(value, capsys):
    """--dp-bucket-mb 1e-300 passed (> 0): the bucket count overflowed, a step of 1e300 s was printed with
    RuntimeWarnings and MFU 0."""
    one_line_error(["estimate", *LLAMA, "--dp-bucket-mb", value], capsys, "--dp-bucket-mb", value)


def test_a_data_parallel_bucket_under_one_byte_in_a_scenario(tmp_path, capsys):
    one_line_error(["estimate", scenario(tmp_path, "stack", "dp_bucket_mb = 1e-300")], capsys, "dp_bucket_mb",
                   "1e-300")


@pytest.mark.parametrize("value", ["nan", "inf", "2"])
def test_comm_slowdown_is_checked_with_inference(value, capsys):
    """With --inference (table output) the estimate options were never built, so a bad --comm-slowdown
    was accepted in silence."""
    one_line_error(["estimate", *LLAMA, "--inference", "--comm-slowdown", value], capsys, "--comm-slowdown", value)


@pytest.mark.parametrize("raw,shown", [("-1", "-1"), ("0", "0"), ('"abc"', "'abc'"), ("2.5", "2.5"),
                                       ("[8192]", "[8192]"), ("nan", "nan")])
def test_max_position_embeddings_inline_is_checked(raw, shown, tmp_path, capsys):
    """A non-GPT-2 model never read max_position_embeddings: any value, a string or a list included, was
    accepted in an inline [model] table."""
    model = "".join(f"{k} = {v}\n" for k, v in INLINE.items()) + f"max_position_embeddings = {raw}\n"
    p = tmp_path / "scen.toml"
    p.write_text(SCENARIO.replace('preset = "llama3-8b"\n', model, 1))
    one_line_error(["memory", str(p)], capsys, "max_position_embeddings", shown)


@pytest.mark.parametrize("cfg,key,shown", [
    ({**INLINE, "model_type": "llama", "max_position_embeddings": -1}, "max_position_embeddings", "-1"),
    ({**GPT2, "n_positions": 0}, "n_positions", "0"),
    ({**GPT2, "max_position_embeddings": 0}, "max_position_embeddings", "0"),
])
def test_position_count_in_a_config_json_is_checked(cfg, key, shown, tmp_path, capsys):
    """GPT-2 with n_positions = 0 was a model without a position table; a llama config.json's negative
    max_position_embeddings was accepted."""
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    one_line_error(["memory", "--model", str(p), *FLAGS], capsys, key, shown, "config.json")


@pytest.mark.parametrize("value", ["", "  "])
def test_a_blank_stack_flag_is_one_line_not_the_default(value, capsys):
    """--stack '' fell back to the default stack in silence (an empty --model is an error)."""
    one_line_error(["estimate", *LLAMA, "--stack", value], capsys, "--stack", repr(value))


def test_a_blank_stack_preset_in_a_scenario_is_one_line(tmp_path, capsys):
    one_line_error(["estimate", scenario(tmp_path, "stack", 'preset = ""')], capsys, "preset", "[stack]",
                   "scen.toml", "''")


def test_no_room_for_the_kv_cache_is_said_without_a_negative_number(capsys):
    # the weights of a 70B model alone exceed one H100: the inference table said "-57.15 GiB free for it"
    from simulator.cli import main

    with pytest.raises(SystemExit) as e:
        main(["estimate", "--model", "llama3-70b", "--hardware", "dgx-h100", "--gpus", "1", "--seq", "4096",
              "--global-batch", "1", "--inference", "--batch", "1"])
    assert e.value.code == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("max batch"))
    assert "none free for it" in line and "exceed" in line and " -" not in line.replace(" - ", "")


@pytest.mark.parametrize("layers", [32, 61, 80, 126])
def test_auto_vpp_candidates_lose_no_layout(layers):
    # the automatic sweep tries only the chunk counts dividing L, L + 1 or L + 2 (a model of 2**24 layers hung on
    # trying all of 2..L): it enumerates exactly what listing every vpp from 2 to L does, with or without
    # Megatron's embedding/loss accounting
    from dataclasses import replace

    from simulator.spec.hardware import load_hardware
    from simulator.spec.scenario import load_scenario
    from simulator.sweep.enumerate import enumerate_layouts
    from simulator.sweep.space import SweepSpace

    sc = load_scenario(ROOT / "scenarios" / "llama3-70b-512xh100.toml")
    model, hw = replace(sc.model, num_layers=layers), load_hardware("dgx-h100")
    for kw in ({}, {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}):
        auto = enumerate_layouts(model, sc.training, 64, SweepSpace(**kw), hardware=hw)
        every = enumerate_layouts(model, sc.training, 64, SweepSpace(vpp=list(range(1, layers + 1)), **kw),
                                  hardware=hw)
        assert len(auto) and auto.equals(every)


def test_layers_past_two_to_the_twenty_are_one_line():
    from dataclasses import replace

    from simulator.errors import InputError
    from simulator.spec.scenario import load_scenario

    m = load_scenario(ROOT / "scenarios" / "llama3-8b-8xh100.toml").model
    assert replace(m, num_layers=2**20).num_layers == 2**20
    with pytest.raises(InputError) as e:
        replace(m, num_layers=2**24)
    assert "num_hidden_layers" in str(e.value) and "\n" not in str(e.value)
