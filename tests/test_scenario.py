"""Scenario loading: every shipped scenario loads; bad files give one-line errors naming file and key."""
import re

import pytest

from simulator.errors import InputError
from simulator.spec.presets import preset_names
from simulator.spec.scenario import load_scenario

GOOD = """
[model]
preset = "llama3-8b"
[hardware]
preset = "dgx-h100"
num_gpus = 16
[training]
seq_length = 4096
global_batch_size = 64
micro_batch_size = 1
[layout]
tp = 2
pp = 2
"""


def write(tmp_path, text, name="s.toml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize("name", preset_names("scenarios"))
def test_every_shipped_scenario_loads_and_validates(name):
    s = load_scenario(name)
    assert s.layout is not None
    assert s.layout.tp * s.layout.cp * s.layout.pp * s.layout.dp == s.num_gpus


def test_dp_is_derived_and_flags_override_file(tmp_path):
    s = load_scenario(write(tmp_path, GOOD))
    assert (s.layout.dp, s.num_microbatches) == (4, 16)  # 16 / (2·2); 64 / (4·1)
    s2 = load_scenario(write(tmp_path, GOOD), tp=4, pp=1, micro_batch_size=2)
    assert (s2.layout.tp, s2.layout.dp, s2.num_microbatches) == (4, 4, 8)


def test_inline_model_uses_hf_keys(tmp_path):
    text = GOOD.replace('preset = "llama3-8b"', """hidden_size = 2048
num_hidden_layers = 8
num_attention_heads = 16
num_key_value_heads = 4
intermediate_size = 5632
vocab_size = 32000
mlp = "swiglu"
norm = "rmsnorm"
tie_word_embeddings = false""")
    s = load_scenario(write(tmp_path, text))
    # 8 × (attn 2·2048·128·(16+4) + SwiGLU 3·2048·5632 + 2 norms 2·2048) + 2·32000·2048 + 2048
    assert s.model.total_params() == 8 * (2 * 2048 * 128 * 20 + 3 * 2048 * 5632 + 2 * 2048) + 2 * 32000 * 2048 + 2048


def test_hf_config_json_path_relative_to_scenario(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "mistral", "hidden_size": 256, "num_hidden_layers": 4,'
                                          ' "num_attention_heads": 8, "num_key_value_heads": 2,'
                                          ' "intermediate_size": 512, "vocab_size": 1000, "rope_theta": 1e6}')
    s = load_scenario(write(tmp_path, GOOD.replace('preset = "llama3-8b"', 'hf_config = "config.json"')))
    assert s.model.num_kv_heads == 2 and s.model.num_layers == 4


@pytest.mark.parametrize("edit,msg", [
    (lambda t: t.replace("tp = 2", "tp = 3").replace("num_gpus = 16", "num_gpus = 24"),
     "num_attention_heads(32) is not divisible by tp(3)"),
    (lambda t: t.replace("tp = 2", "tpp = 2"), "unknown key 'tpp' in [layout]"),
    (lambda t: t.replace("seq_length = 4096", "seq_lenght = 4096"), "unknown key 'seq_lenght'"),
    (lambda t: t.replace("seq_length = 4096\n", ""), "missing key 'seq_length'"),
    (lambda t: t.replace("num_gpus = 16", "num_gpus = 0"), "num_gpus must be > 0, got 0"),
    (lambda t: t.replace("num_gpus = 16", "num_gpus = -16"), "num_gpus must be > 0, got -16"),
    (lambda t: t.replace("seq_length = 4096", "seq_length = nan"), "seq_length must be finite, got nan"),
    (lambda t: t.replace("seq_length = 4096", 'seq_length = "4k"'), "seq_length must be a number, got '4k'"),
    (lambda t: t.replace('"llama3-8b"', '"llama3-8bb"'), "unknown model preset 'llama3-8bb'; did you mean llama3-8b"),
    (lambda t: t.replace('"dgx-h100"', '"dgx-h10"'), "unknown hardware preset 'dgx-h10'"),
    (lambda t: t.replace("[layout]", "[layuot]"), "unknown section [layuot]"),
    (lambda t: t.replace("tp = 2", "tp = [2"), "malformed TOML in"),
    (lambda t: t.replace("num_gpus = 16", "num_gpus = 10"), "num_gpus(10) is not divisible by tp(2) * cp(1) * pp(2) = 4"),
    (lambda t: t.replace("num_gpus = 16", "num_gpus = 12"), "global_batch_size(64) is not divisible by dp(3)"),
])
def test_bad_scenarios_raise_one_line_errors(tmp_path, edit, msg):
    with pytest.raises(InputError, match=re.escape(msg)) as exc:
        load_scenario(write(tmp_path, edit(GOOD)))
    assert "\n" not in str(exc.value)


def test_malformed_toml_names_file_and_line(tmp_path):
    path = write(tmp_path, GOOD.replace("pp = 2", "pp = = 2"))
    with pytest.raises(InputError, match=r"s\.toml.*line 13"):
        load_scenario(path)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        load_scenario(str(tmp_path / "nope.toml"))


def test_estimate_takes_the_sweeps_uneven_split_when_pp_does_not_divide_the_layers():
    """126 layers on pp 16 (Llama 3.1 405B): estimate and memory run the sweep's split, first and last stage
    one layer fewer, and say so; a pp with no such split names the split to pass."""
    from simulator.estimate import estimate
    from simulator.sweep import uneven_split

    kw = dict(model="llama3.1-405b", hardware="dgx-h100", num_gpus=2048, tp=8, pp=16, seq_length=8192,
              global_batch_size=2048, micro_batch_size=1)
    sc = load_scenario(None, **kw)
    assert sc.layout.layers_per_stage == uneven_split(126, 16) == (7,) + (8,) * 14 + (7,)
    d = estimate(sc.model, sc.training, sc.layout, sc.hardware).to_dict()
    assert d["layout"]["layers_per_stage"] == [7] + [8] * 14 + [7]
    assert [s["layers"] for s in d["memory"]["per_stage"]] == [7] + [8] * 14 + [7]
    with pytest.raises(InputError, match=r"not divisible by pp\(20\).*--layers-per-stage 7,7,...,6 \(20 numbers\)"):
        load_scenario(None, **{**kw, "pp": 20, "num_gpus": 8 * 20 * 16})
    given = load_scenario(None, **{**kw, "layers_per_stage": (8,) * 14 + (7, 7)})
    assert given.layout.layers_per_stage == (8,) * 14 + (7, 7)
