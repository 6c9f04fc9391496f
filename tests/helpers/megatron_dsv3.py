"""NVIDIA's DeepSeek-V3 recipe on 1024 H100s (dgxc-benchmarking 6be5ea0 deepseek_v3/pretraining: TP 2, PP 16, EP 64,
ETP 1, first/last stages 3 and 2 layers) as a Megatron-LM command line, imported by `parasim import megatron` with
parasim's deepseek-v3 preset and emitted again: (the imported scenario, the emitted script)."""
from click.testing import CliRunner

COMMAND = ("torchrun --nnodes 128 --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 2 "
           "--pipeline-model-parallel-size 16 --expert-model-parallel-size 64 --expert-tensor-parallel-size 1 "
           "--sequence-parallel --micro-batch-size 1 --global-batch-size 8192 --seq-length 4096 "
           "--decoder-first-pipeline-num-layers 3 --decoder-last-pipeline-num-layers 2 --bf16")


def import_then_emit(tmp_path, extra: str = ""):
    from simulator.cli import cli
    from simulator.spec.scenario import load_scenario

    script, out = tmp_path / "dsv3.sh", tmp_path / "dsv3.toml"
    script.write_text(f"{COMMAND} {extra}\n")
    r = CliRunner().invoke(cli, ["import", "megatron", str(script), "--model", "deepseek-v3", "--hardware", "dgx-h100",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    emitted = CliRunner().invoke(cli, ["emit", "megatron", str(out)])
    assert emitted.exit_code == 0, emitted.output
    return load_scenario(str(out)), emitted.stdout
