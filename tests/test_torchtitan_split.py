"""torchtitan's default pipeline split (spec/placement.py torchtitan_split) on the published runs'
126-layer Llama 3.1 405B, and uneven per-virtual-stage splits of interleaved layouts: the 2024 release's
generate_split_points (9dec370, the runs' torchtitan) run step by step as the truth, and the layers each rank then
holds."""
import pandas as pd
import pytest

from simulator.errors import InputError
from simulator.spec.layout import Layout
from simulator.spec.load import load_model
from simulator.spec.placement import stage_placement, torchtitan_split


def _generate_split_points(num_layers, total_stages):
    """torchtitan/parallelisms/pipelining_utils.py generate_split_points at 9dec370, transcribed: the split points
    ("layers.N"), from which the stages' layer counts follow."""
    base_interval, extra_layers = num_layers // total_stages, num_layers % total_stages
    splits, current_layer = [], 0
    for i in range(total_stages - 1):
        if i == 0:
            current_layer += base_interval
        elif extra_layers > 0:
            current_layer += base_interval + 1
            extra_layers -= 1
        else:
            current_layer += base_interval
        splits.append(current_layer)
    bounds = [0] + splits + [num_layers]
    return tuple(b - a for a, b in zip(bounds, bounds[1:]))


@pytest.mark.parametrize("S", [4, 8, 16])
def test_the_split_of_126_layers_is_the_2024_releases(S):
    # the current rule (generate_llm_fqn_per_model_part: L + 2 effective layers, the first and last stage one
    # fewer) and the runs' 2024 rule agree on 126 layers over 4, 8 and 16 stages
    assert torchtitan_split(126, S) == _generate_split_points(126, S)
    assert torchtitan_split(126, 16) == (7,) + (8,) * 14 + (7,)
    with pytest.raises(InputError, match="cannot split"):
        torchtitan_split(2, 5)  # 4 effective layers over 5 stages


def test_an_interleaved_layout_takes_one_entry_per_virtual_stage():
    split = torchtitan_split(126, 16)
    lay = Layout(num_gpus=512, tp=8, pp=8, vpp=2, schedule="interleaved", layers_per_stage=split)
    assert lay.layers_per_stage == split
    # rank r holds virtual stages r and r + 8: ranks 0 and 7 hold 7 + 8 layers, the others 8 + 8
    pl = stage_placement(load_model("llama3.1-405b"), pp=8, vpp=2, schedule="interleaved", layers_per_stage=split)
    assert pl.layers.tolist() == [15, 16, 16, 16, 16, 16, 16, 15]
    assert pl.embedding.tolist() == [1] + [0] * 7 and pl.head.tolist() == [0] * 7 + [1]
    with pytest.raises(InputError, match="expected pp"):
        Layout(num_gpus=512, tp=8, pp=8, vpp=2, schedule="interleaved", layers_per_stage=split[:-1])


def test_torchtitan_rows_map_with_the_frameworks_split():
    from simulator.validate.mapping import map_run

    df = pd.read_csv("validation/torchtitan_h100.csv").set_index("run_id")
    mr = map_run({"run_id": "torchtitan_h100_t5_405B_13", **df.loc["torchtitan_h100_t5_405B_13"].to_dict()})
    assert not mr.skip_reason
    assert mr.layout.layers_per_stage == (7,) + (8,) * 14 + (7,) and mr.layout.vpp == 2
    mr = map_run({"run_id": "torchtitan_h100_t5_405B_12", **df.loc["torchtitan_h100_t5_405B_12"].to_dict()})
    assert mr.layout.layers_per_stage == (15,) + (16,) * 6 + (15,)


def test_default_split_by_framework_rule():
    from simulator.spec.placement import default_split, uneven_split

    # first-last (the default): one stage per rank only, 1-2 layers short, as uneven_split
    assert default_split(126, 8) == uneven_split(126, 8) == (15,) + (16,) * 6 + (15,)
    assert default_split(126, 8, 2) is None and default_split(128, 8) is None and default_split(120, 8) is None
    # torchtitan: any schedule's stages, any deficit; nothing where they divide or a stage would hold no layer
    assert default_split(126, 8, 2, "torchtitan") == (7,) + (8,) * 14 + (7,)
    # 117 over 8 (3 short of 120: too many for first-last): 119 = 8 x 14 + 7 -> 15 x 7, 14, then -1 at the ends
    assert default_split(117, 8) is None
    assert default_split(117, 8, 1, "torchtitan") == (14,) + (15,) * 6 + (13,)
    assert default_split(128, 8, 2, "torchtitan") is None
    assert default_split(9, 8, 1, "torchtitan") is None  # 11 over 8: 2, 1, ..., 1, 0 for the last stage


def test_the_pipeline_split_rule_is_a_runs_key_with_its_check():
    from simulator.spec.stack import load_stack

    assert load_stack("torchtitan").runs.pipeline_split == "torchtitan"
    assert load_stack("megatron").runs.pipeline_split == "first-last"
    from simulator.spec.framework import summary  # (parasim stacks' line)

    assert "torchtitan layer split" in summary(load_stack("torchtitan").runs)
    assert "layer split" not in summary(load_stack("megatron").runs)
    with pytest.raises(InputError, match="pipeline_split in \\[runs\\] of .* must be one of first-last, torchtitan"):
        load_stack("torchtitan", runs={**load_stack("torchtitan").runs.table, "pipeline_split": "even"})


def test_estimate_and_sweep_split_as_the_stacks_framework_does():
    import io
    import json

    from click.testing import CliRunner

    from simulator.cli import cli

    args = ["--model", "llama3.1-405b", "--hardware", "dgx-h100", "--gpus", "512", "--seq", "8192",
            "--global-batch", "256"]
    lay = ["--tp", "8", "--pp", "8", "--vpp", "2", "--schedule", "interleaved", "--micro-batch", "4", "--zero", "3",
           "--recompute", "full"]
    r = CliRunner().invoke(cli, ["estimate", "--stack", "torchtitan", *args, *lay, "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["layout"]["layers_per_stage"] == [7] + [8] * 14 + [7]
    # Megatron-LM runs an interleaved pipeline only over stages that divide the layers: it says which split to give
    r = CliRunner().invoke(cli, ["estimate", "--stack", "megatron", *args, *lay[:-4]])
    assert isinstance(r.exception, InputError) and "give an uneven split" in str(r.exception)
    sweep = ["sweep", *args, "--format", "csv", "--top", "100000", "--pp", "8", "--tp", "8"]
    tt = pd.read_csv(io.StringIO(CliRunner().invoke(cli, [*sweep, "--stack", "torchtitan"]).stdout))
    inter = tt[(tt.schedule == "interleaved") & (tt.vpp == 2)]
    assert len(inter) and set(inter.layers_per_stage) == {",".join(map(str, [7] + [8] * 14 + [7]))}
    mg = pd.read_csv(io.StringIO(CliRunner().invoke(cli, [*sweep, "--stack", "megatron"]).stdout))
    assert not (mg.schedule == "interleaved").any()  # 126 over 8 x vpp: no vpp divides
    assert set(mg[mg.pp == 8].layers_per_stage) == {"15,16,16,16,16,16,16,15"}  # 1F1B: first and last one fewer


def test_a_bad_pipeline_split_in_a_scenario_exits_2_with_one_line(tmp_path):
    import subprocess
    import sys

    sc = tmp_path / "s.toml"
    sc.write_text('[model]\npreset = "llama3-8b"\n[hardware]\npreset = "dgx-h100"\nnum_gpus = 8\n'
                  '[training]\nseq_length = 4096\nglobal_batch_size = 64\n[layout]\npp = 4\n'
                  '[stack]\npreset = "megatron"\n[stack.runs]\npipeline_split = 5\n')
    r = subprocess.run([sys.executable, "-c", "from simulator.cli import main; main()", "estimate", str(sc)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "pipeline_split in [runs]" in r.stderr and "got 5" in r.stderr and "s.toml" in r.stderr
