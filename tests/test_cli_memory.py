"""`parasim memory`: outputs (table, json, csv, plot, inference) and bad input (one line, exit 2)."""
import json

import pytest

from simulator.cli import main

FLAGS = ["--model", "llama3-70b", "--hardware", "dgx-h100", "--gpus", "64", "--tp", "8", "--pp", "2",
         "--zero", "1", "--micro-batch", "1", "--seq", "8192", "--global-batch", "64", "--sequence-parallel"]

SCENARIO = """
[model]
preset = "llama3-8b"
[hardware]
preset = "dgx-h100"
num_gpus = 16
[training]
seq_length = 4096
global_batch_size = 32
[layout]
tp = 4
pp = 2
zero = 1
recompute = "selective"
sequence_parallel = true
"""


def run(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_table_has_one_row_per_stage_and_the_hbm_capacity(capsys):
    code, out, err = run(["memory", *FLAGS], capsys)
    assert code == 0, err
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["stage", "layers"])
    rows = [line for line in lines[header + 1:] if line.split() and line.split()[0].isdigit()]
    assert [r.split()[0] for r in rows] == ["0", "1"]
    assert "GiB" in lines[header] and any(line.startswith("HBM capacity") for line in lines)


def test_json_follows_the_contract(capsys):
    code, out, _ = run(["memory", *FLAGS, "--format", "json"], capsys)
    assert code == 0
    d = json.loads(out)
    assert d["model"]["name"] == "llama3-70b" and d["model"]["params"] > 7e10
    assert d["layout"]["tp"] == 8 and d["layout"]["pp"] == 2 and d["layout"]["dp"] == 4
    assert len(d["memory"]["per_stage"]) == 2
    assert d["memory"]["peak_bytes"] == max(s["peak_bytes"] for s in d["memory"]["per_stage"])
    assert isinstance(d["feasible"], bool)


def test_csv_has_a_row_per_stage(capsys):
    code, out, _ = run(["memory", *FLAGS, "--format", "csv"], capsys)
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0].startswith("stage,") and "peak_bytes" in lines[0] and len(lines) == 3


def test_scenario_file_and_plot(tmp_path, capsys):
    sc = tmp_path / "s.toml"
    sc.write_text(SCENARIO)
    png = tmp_path / "m.png"
    code, out, err = run(["memory", str(sc), "--plot", str(png)], capsys)
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = tmp_path / "m.svg"
    code, _, _ = run(["memory", str(sc), "--plot", str(svg), "--format", "json"], capsys)
    assert code == 0 and svg.read_text().lstrip().startswith("<?xml")


def test_inference_reports_a_kv_cache(capsys):
    code, out, _ = run(["memory", *FLAGS, "--inference", "--format", "json"], capsys)
    assert code == 0
    d = json.loads(out)
    assert d["memory"]["kv_cache_bytes"] > 0 and d["memory"]["optimizer_bytes"] == 0 and d["inference"]


def _bad(tmp_path, text, name="bad.toml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


BAD = {
    "unknown model preset": (lambda t: ["memory", *FLAGS[:1], "llama3-70", *FLAGS[2:]], "did you mean"),
    "unknown hardware preset": (lambda t: ["memory", "--model", "llama3-8b", "--hardware", "dgx-h10", "--gpus", "8",
                                           "--seq", "1024", "--global-batch", "8"], "did you mean"),
    "missing scenario file": (lambda t: ["memory", str(t / "nope.toml")], "file not found"),
    "malformed TOML": (lambda t: ["memory", _bad(t, "[model]\npreset = \"llama3-8b\n")], "line"),
    "malformed JSON config": (lambda t: ["memory", "--model", _bad(t, "{\"hidden_size\": 4096,\n oops}", "config.json"),
                                         "--hardware", "dgx-h100", "--gpus", "8", "--seq", "1024",
                                         "--global-batch", "8"], "line 2"),
    "unknown key": (lambda t: ["memory", _bad(t, SCENARIO.replace("tp = 4", "tpp = 4"))], "'tpp'"),
    "missing key": (lambda t: ["memory", _bad(t, SCENARIO.replace("seq_length = 4096", ""))], "seq_length"),
    "wrong type": (lambda t: ["memory", _bad(t, SCENARIO.replace("seq_length = 4096", "seq_length = \"long\""))],
                   "seq_length"),
    "NaN value": (lambda t: ["memory", _bad(t, SCENARIO.replace("seq_length = 4096", "seq_length = nan"))],
                  "seq_length"),
    "zero degree": (lambda t: ["memory", *FLAGS, "--tp", "0"], "tp"),
    "negative GPUs": (lambda t: ["memory", *FLAGS, "--gpus", "-64"], "--gpus must be > 0, got -64"),
    "non-divisible heads": (lambda t: ["memory", "--model", "llama3-70b", "--hardware", "dgx-h100", "--gpus", "48",
                                       "--tp", "3", "--seq", "1024", "--global-batch", "16"], "tp(3)"),
    "non-divisible GPUs": (lambda t: ["memory", *FLAGS, "--gpus", "60"], "num_gpus"),
    "uneven layers": (lambda t: ["memory", *FLAGS, "--pp", "6", "--gpus", "48"], "pp(6)"),  # 80 = 14·6 − 4: no split
    "bad plot suffix": (lambda t: ["memory", *FLAGS, "--plot", str(t / "m.txt")], "--plot"),
    "bad format": (lambda t: ["memory", *FLAGS, "--format", "xml"], "xml"),
    "bad cross-entropy flag": (lambda t: ["memory", *FLAGS, "--cross-entropy", "torch-fp16"], "'torch-fp16'"),
    "bad cross_entropy key": (lambda t: ["memory", _bad(t, SCENARIO.replace("seq_length = 4096",
                                                                            "seq_length = 4096\ncross_entropy = \"hf\""))],
                              "cross_entropy must be one of"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_on_stderr_with_exit_2(case, tmp_path, capsys):
    argv, expect = BAD[case]
    code, out, err = run(argv(tmp_path), capsys)
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and out == ""
    assert expect in err
