"""Bad inputs a third fuzzing campaign (2026-11-28, about 1,000 invocations, the new --cuda-graphs and MoE stack keys
and the nccl-tests data check among them) found taking a wrong path: a traceback, more than one stderr line, nonsense
accepted with exit 0, or an error naming the wrong place. Each now exits 2 with one stderr line naming where the value
came from, or (a log of another GPU) warns."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.cli import main
from test_fuzz_found import LLAMA, one_line_error, scenario

ROOT = Path(__file__).resolve().parent.parent
NCCL = ROOT / "tests" / "data" / "nccl" / "all_reduce_perf_8xa100.log"
QWEN = ["--model", "qwen3-30b-a3b", "--hardware", "dgx-b200", "--gpus", "8", "--ep", "8", "--seq", "4096",
        "--global-batch", "64"]


def _log(tmp_path: Path, column: int, value: str, sizes=None) -> str:
    """The A100 all-reduce log with result-row column `column` set to `value` (all rows, or those of `sizes`)."""
    lines = NCCL.read_text().splitlines()
    for k, ln in enumerate(lines):
        toks = ln.split()
        if toks and toks[0].isdigit() and (sizes is None or int(toks[0]) in sizes):
            toks[column] = value
            lines[k] = "  ".join(toks)
    p = tmp_path / "all_reduce_perf_x.log"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def _calibrate(log: str, tmp_path: Path, base: str = "dgx-a100-80g") -> list[str]:
    return ["calibrate", "nccl-tests", log, "--base", base, "--out", str(tmp_path / "o.toml")]


@pytest.mark.parametrize("key", ["host_us_per_kernel", "decode_host_us_per_kernel"])
def test_a_host_time_beyond_a_float_is_one_line_naming_the_file(key, tmp_path, capsys):
    """An integer of 400 digits was an OverflowError traceback (float(us) * 1e-6); a range error showed the value
    after the unit conversion (99998.99999999999 for 99999) and did not name the file."""
    p = scenario(tmp_path, "stack", f"{key} = 1{'0' * 400}")
    one_line_error(["estimate", p], capsys, key, p, "[0, 10000)")
    p = scenario(tmp_path, "stack", f"{key} = 99999")
    one_line_error(["estimate", p], capsys, key, p, "got 99999")


def test_a_stack_file_whose_name_is_no_text_is_one_line(tmp_path, capsys):
    text = (ROOT / "stacks" / "megatron.toml").read_text().replace('name = "megatron"', "name = 5", 1)
    p = tmp_path / "s.toml"
    p.write_text(text)
    one_line_error(["estimate", *LLAMA, "--stack", str(p)], capsys, "name", str(p), "got 5")


@pytest.mark.parametrize("column,value,needle", [(4, "N/A", "is not a rank"), (4, "inf", "is not a rank"),
                                                 (8, "-1", "is not a count"), (8, "-inf", "is not a count")])
def test_a_result_rows_root_or_wrong_count_that_is_no_count_is_one_line(column, value, needle, tmp_path, capsys):
    """A root of N/A was a ValueError traceback (int(base['root'])); a #wrong of -1 was kept in the fit."""
    one_line_error(_calibrate(_log(tmp_path, column, value), tmp_path), capsys, "all_reduce_perf_x.log", needle)


def test_a_log_marked_wrong_throughout_is_the_error_alone(tmp_path, capsys):
    """A warning line came before the error."""
    one_line_error(_calibrate(_log(tmp_path, 8, "5"), tmp_path), capsys, "every out-of-place")


@pytest.mark.parametrize("column,value", [(5, "1000"), (0, "1" + "0" * 30)])
def test_times_or_sizes_faster_than_the_links_are_refused(column, value, tmp_path, capsys):
    """Times divided by 1000, or sizes of 1e30 bytes, wrote a profile at 2.0 of the link bandwidth (the fit's clip):
    8 GiB all-reduced in 1 ms, or every size 1e30 bytes."""
    one_line_error(_calibrate(_log(tmp_path, column, value, sizes={1 << 33} if column == 5 else None), tmp_path),
                   capsys, "faster than its links")


def test_a_log_of_another_gpu_warns(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(_calibrate(str(NCCL), tmp_path, base="dgx-b200"))
    assert exc.value.code in (0, None)
    assert "warning: the logs ran on A100, --base dgx-b200 is a B200" in capsys.readouterr().err


def test_validate_with_every_row_refused_is_one_line(tmp_path, capsys):
    import csv

    rows = list(csv.reader(open(ROOT / "validation" / "korthikanti22.csv")))
    i = rows[0].index("tp")
    for r in rows[1:3]:
        r[i] = "0"
    p = tmp_path / "runs.csv"
    csv.writer(open(p, "w", newline="")).writerows(rows[:3])
    one_line_error(["validate", str(p)], capsys, "no run of", "the first:", "tp must be > 0")


@pytest.mark.parametrize("value,needle", [("", "none alone"), (",,", "none alone"), ("none,attn", "none alone"),
                                          ("mlp", "'mlp' is not one of")])
def test_cuda_graphs_that_name_nothing_or_none_with_scopes_are_one_line(value, needle, capsys):
    """'' and ',,' quietly meant no graphs (overriding a [stack] table), 'none,attn' meant attn."""
    one_line_error(["estimate", *QWEN, "--cuda-graphs", value], capsys, "--cuda-graphs", needle)


def test_a_flags_value_is_not_blamed_on_the_scenario_file(capsys):
    p = str(ROOT / "scenarios" / "mixtral-8x7b-64xh100.toml")
    err = one_line_error(["estimate", p, "--cuda-graphs", "foo"], capsys, "--cuda-graphs", "'foo'")
    assert p not in err
    err = one_line_error(["estimate", p, "--dp-bucket-mb", "-5"], capsys, "--dp-bucket-mb")
    assert p not in err


@pytest.mark.parametrize("argv,needle", [
    (["sweep", *LLAMA, "--tp", "1,,2", "--no-progress"], "--tp must be 'auto' or comma-separated"),
    (["plan", *LLAMA, "--gpu-counts", "8,,16", "--tokens", "1e9"], "--gpu-counts"),
    (["plan", *LLAMA, "--gpu-counts", "8", "--tokens", "1e9", "--hardware-presets", ""], "--hardware-presets"),
    (["plan", *LLAMA, "--gpu-counts", "8", "--tokens", "1e9", "--workers", "0"], "--workers must be an integer"),
    (["estimate", *LLAMA, "--tp", "2", "--etp", "2"], "etp(2) applies to routed experts"),
])
def test_empty_list_items_workers_and_etp_on_a_dense_model_are_one_line(argv, needle, capsys):
    """An empty item of a list flag was dropped, plan took --workers 0, and --etp equal to --tp passed on a dense
    model where any other value was refused."""
    one_line_error(argv, capsys, needle)


def test_a_qwen3_moe_config_without_experts_names_num_experts(tmp_path, capsys):
    cfg = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 32,
           "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
           "num_experts": 0, "num_experts_per_tok": 8, "vocab_size": 151936}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    one_line_error(["estimate", "--model", str(tmp_path), "--hardware", "dgx-h100", "--gpus", "8", "--seq", "4096",
                    "--global-batch", "64"], capsys, "num_experts", "must be > 0")


def test_emit_megatron_writes_the_cuda_graphs_and_import_reads_them_back(tmp_path, capsys):
    """emit megatron dropped --cuda-graphs from the command line it wrote."""
    with pytest.raises(SystemExit) as exc:
        main(["emit", "megatron", *QWEN, "--cuda-graphs", "attn,moe_router"])
    assert exc.value.code in (0, None)
    text = capsys.readouterr().out
    assert "--cuda-graph-impl transformer_engine" in text and "--cuda-graph-modules attn moe_router" in text
    script = tmp_path / "run.sh"
    script.write_text(text)
    with pytest.raises(SystemExit) as exc:
        main(["import", "megatron", str(script), "--hardware", "dgx-b200", "--model", "qwen3-30b-a3b"])
    assert exc.value.code in (0, None)
    assert 'cuda_graphs = ["attn", "moe_router"]' in capsys.readouterr().out


def test_an_moe_config_whose_experts_are_in_no_layer_is_one_line(tmp_path, capsys):
    """decoder_sparse_step 1000 over 48 layers left no MoE layer, and --ep 8 was accepted for nothing."""
    cfg = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
           "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
           "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1000, "vocab_size": 151936}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    one_line_error(["estimate", "--model", str(tmp_path), "--hardware", "dgx-h100", "--gpus", "8", "--seq", "4096",
                    "--global-batch", "64", "--ep", "8"], capsys, "num_experts(128) in no layer")
