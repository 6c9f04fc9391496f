"""Megatron-Core's --pipeline-model-parallel-layout against the strings Megatron-LM's own docs and functional tests
use (NVIDIA/Megatron-LM d98e8a6), its checks, and a round trip through `parasim import` / `parasim emit`."""
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import InputError
from simulator.frameworks.megatron_layout import layout_text, parse_layout


def test_the_deepseek_v3_example_of_megatrons_docs():
    """docs/user-guide/features/pipeline_parallel_layout.md: 61 decoder layers and one MTP layer, PP 16, VPP 2."""
    p = parse_layout("Et*3|(tt|)*29,m|L", pp=16, num_layers=61, mtp_layers=1)
    assert len(p.stages) == 32 and p.layers_per_stage == (3,) + (2,) * 29 + (0, 0)
    assert "virtual stage 30" in p.problem()  # MTP apart from the loss: parasim runs it with the loss


@pytest.mark.parametrize("text, pp, layers, split", [
    ("Et*2|(tt|)*5t|tmL", 4, 14, (2, 2, 2, 2, 2, 2, 1, 1)),  # deepseekv3_proxy_flex_tp1pp4emp16etp1cp1_release
    ("Et*7|t*7mL", 2, 14, (7, 7)),  # deepseekv3_proxy_flex_tp2pp2emp16etp1cp1_gb_200_release
])
def test_megatrons_functional_test_layouts(text, pp, layers, split):
    p = parse_layout(text, pp=pp, num_layers=layers, mtp_layers=1)
    assert p.layers_per_stage == split and p.problem() == ""


@pytest.mark.parametrize("text, says", [
    ("Et*3|t*2|t*2L", "not a multiple of pp"),
    ("Et*4|t*3L|", "not a multiple of pp"),
    ("Et*3|t*4", "begin with the embedding E and end with the loss L"),
    ("t*3|Et*4L", "begin with the embedding E"),
    ("Et*3|t*3mL", "holds 6 decoder layers"),
    ("Et*3|mt*4L", "decoder layer after an MTP layer"),
    ("Et*3|x*4L", "holds 'x'"),
    ("", "layout text"),
])
def test_megatrons_checks(text, says):
    with pytest.raises(InputError, match=says):
        parse_layout(text, pp=2, num_layers=7, mtp_layers=1 if "m" in text else 0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=24), st.integers(0, 2))
def test_written_layouts_read_back(split, mtp):
    text = layout_text(split, mtp_layers=mtp)
    p = parse_layout(text, pp=len(split), num_layers=sum(split), mtp_layers=mtp)
    assert p.layers_per_stage == tuple(split) and p.problem() == ""


def test_import_and_emit_round_trip(tmp_path):
    from simulator.cli import cli
    from simulator.spec.scenario import load_scenario

    cmd = ("torchrun --nnodes 128 --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 2 "
           "--pipeline-model-parallel-size 16 --expert-model-parallel-size 64 --expert-tensor-parallel-size 1 "
           "--sequence-parallel --micro-batch-size 1 --global-batch-size 8192 --seq-length 4096 --mtp-num-layers 1 "
           "--pipeline-model-parallel-layout 'Et*3|(tt|)*29,m|L' --bf16")
    runner = CliRunner()
    for name, text in (("a", cmd), ("b", None)):
        script, out = tmp_path / f"{name}.sh", tmp_path / f"{name}.toml"
        if text is None:
            emitted = runner.invoke(cli, ["emit", "megatron", str(tmp_path / "a.toml")])
            assert emitted.exit_code == 0, emitted.output
            assert "--pipeline-model-parallel-layout \"Ettt|(tt|)*29|mL\"" in emitted.stdout
            assert "--num-virtual-stages-per-pipeline-rank" not in emitted.stdout  # (Megatron: one or the other)
            text = emitted.stdout
        script.write_text(text)
        r = runner.invoke(cli, ["import", "megatron", str(script), "--model", "deepseek-v3", "--hardware", "dgx-h100",
                                "--out", str(out)])
        assert r.exit_code == 0, r.output
    a, b = (load_scenario(str(tmp_path / f"{n}.toml")) for n in "ab")
    assert a.layout == b.layout and a.layout.vpp == 2 and a.layout.schedule == "interleaved"
    assert a.layout.layers_per_stage == (3,) + (2,) * 29 + (0, 0)


def test_the_layout_excludes_the_other_split_flags(tmp_path):
    from simulator.cli import cli

    script = tmp_path / "x.sh"
    script.write_text("pretrain_gpt.py --num-layers 8 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 "
                      "--max-position-embeddings 1024 --micro-batch-size 1 --pipeline-model-parallel-size 2 "
                      "--num-virtual-stages-per-pipeline-rank 2 --pipeline-model-parallel-layout 'Et*2|t*2|t*2|t*2L'")
    r = CliRunner().invoke(cli, ["import", "megatron", str(script), "--gpus", "2", "--hardware", "dgx-h100"])
    assert r.exit_code != 0 and "cannot be given with --num-virtual-stages-per-pipeline-rank" in str(r.exception)
