"""Configs in and out (simulator/frameworks/, `parasim import`, `parasim emit`, `sweep --emit`): real example
configs (tests/data/configs/, written from the projects' docs) read into scenarios, the fields not understood,
round trips (import -> estimate; scenario -> emit -> import gives the same layout) and one-line errors."""
import json
from pathlib import Path

import pytest

from simulator.cli import main
from simulator.errors import InputError
from simulator.frameworks.emit_megatron import rank_totals
from simulator.frameworks.fields import Fields
from simulator.frameworks.megatron_args import read_command_line, read_nemo_yaml
from simulator.frameworks.megatron_model import layer_pattern
from simulator.frameworks.torchtitan_flavors import FLAVORS, flavor_of
from simulator.spec.placement import torchtitan_split
from simulator.spec.load import load_model
from simulator.spec.scenario import load_scenario

DATA = Path(__file__).parent / "data" / "configs"
MEGATRON = str(DATA / "megatron_llama3_70b.sh")
NEMO = str(DATA / "nemo_llama3_8b.yaml")
TITAN = str(DATA / "torchtitan_llama3_8b.toml")
DS, HF = str(DATA / "ds_zero3.json"), str(DATA / "llama3_8b_config.json")
LAYOUT_FIELDS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size", "zero", "recompute", "sequence_parallel",
                 "schedule", "layers_per_stage", "shard_group_size")


def run(args, capsys):
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def imported(args, capsys, tmp_path, name="s.toml"):
    """Run `parasim import ...` into tmp_path/name; (the loaded scenario, the printed report)."""
    out = tmp_path / name
    code, text, err = run(["import", *args, "--out", out], capsys)
    assert code == 0, err
    return load_scenario(str(out)), text


def layout_of(sc) -> dict:
    """The layout's fields, the pipeline split as layers per rank (an interleaved split per virtual stage summed)."""
    lay = {k: getattr(sc.layout, k) for k in LAYOUT_FIELDS}
    if lay["layers_per_stage"] and len(lay["layers_per_stage"]) > sc.layout.pp:
        lay["layers_per_stage"] = rank_totals(lay["layers_per_stage"], sc.layout.pp)
    return {**lay, "num_gpus": sc.num_gpus, "global_batch_size": sc.training.global_batch_size,
            "seq_length": sc.training.seq_length}


def section(text: str, title: str) -> list[str]:
    """The '  - item' lines under the report heading `title (n):`."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(title + " (")), None)
    if start is None:
        return []
    out = []
    for line in lines[start + 1:]:
        if not line.startswith("  - "):
            break
        out.append(line[4:])
    return out


# ---- Megatron-LM / NeMo ------------------------------------------------------------------------

def test_megatron_llama3_70b_command_line_becomes_the_scenario(capsys, tmp_path):
    sc, text = imported(["megatron", MEGATRON], capsys, tmp_path)
    # torchrun --nnodes 16 --nproc_per_node 8 = 128 GPUs; dp = 128 / (tp 8 x pp 4) = 4;
    # --num-layers-per-virtual-pipeline-stage 5: 80 / 4 = 20 layers per rank / 5 = 4 virtual stages
    assert layout_of(sc) == {"tp": 8, "pp": 4, "dp": 4, "cp": 1, "ep": 1, "vpp": 4, "micro_batch_size": 1, "zero": 1,
                             "recompute": "selective", "sequence_parallel": True, "schedule": "interleaved",
                             "layers_per_stage": None, "shard_group_size": None, "num_gpus": 128,
                             "global_batch_size": 1024, "seq_length": 8192}
    m = sc.model
    assert (m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.ffn_hidden_size) == (80, 8192, 64, 8, 28672)
    assert (m.mlp, m.norm, m.tie_word_embeddings, m.qkv_bias) == ("swiglu", "rmsnorm", False, False)
    # Llama 3's 128,256 tokens padded to a multiple of 128 x tp 8 = 1024: 126 x 1024 = 129,024
    assert m.vocab_size == 129024
    assert sc.training.stack.name == "megatron" and sc.training.stack.dp_bucket_mb == 160.0  # 40M fp32 params
    assert section(text, "not understood") == ["--use-flash-attn-v7-experimental"]
    ignored = text.split("ignored, no effect on memory or step time")[1]
    for flag in ("--lr", "--data-path", "--save", "--master_port", "--rotary-base"):
        assert flag in ignored
    assert any("vocabulary padded from 128256 to 129024" in a for a in section(text, "assumptions"))


def test_nemo_yaml_fragment_becomes_the_scenario(capsys, tmp_path):
    sc, text = imported(["megatron", NEMO], capsys, tmp_path)
    # trainer.devices 8 x num_nodes 2 = 16 GPUs; dp = 16 / (tp 2 x pp 2) = 4; max_position_embeddings and
    # data.seq_length are interpolations of encoder_seq_length (8192)
    assert layout_of(sc) == {"tp": 2, "pp": 2, "dp": 4, "cp": 1, "ep": 1, "vpp": 1, "micro_batch_size": 1, "zero": 1,
                             "recompute": "full", "sequence_parallel": True, "schedule": "1f1b",
                             "layers_per_stage": None, "shard_group_size": None, "num_gpus": 16,
                             "global_batch_size": 128, "seq_length": 8192}
    assert sc.model.total_params() == load_model("llama3-8b").total_params()  # 128256 = 501 x 256: no padding
    assert sc.training.precision == "bf16" and sc.training.stack.dp_bucket_mb == 125.0
    assert sc.training.stack.attention_kernel == "flash2"  # model.use_flash_attention
    assert section(text, "not understood") == ["model.num_micro_batches_with_partial_activation_checkpoints"]
    assert "model.moe_token_dispatcher_type" in text and "trainer.max_steps" in text


def test_megatron_command_line_parsing_handles_shell_scripts():
    text = """
    TP=4  # tensor parallel
    MODEL_ARGS=(
        --num-layers 32 --hidden-size=4096
        "--num-attention-heads 32"
    )
    torchrun --nproc-per-node ${GPUS:-8} --nnodes 2 pretrain_gpt.py ${MODEL_ARGS[@]} \\
        --tensor-model-parallel-size $TP --cp-comm-type p2p a2a --bf16 --lr -1e-4 --tp 2 --tp 3
    """
    f, launcher = read_command_line(text, "job.sh")
    assert launcher == {"gpus_per_node": "8", "nnodes": "2"}
    assert f.int("num_layers") == 32 and f.int("hidden_size") == 4096 and f.int("num_attention_heads") == 32
    assert f.int("tensor_model_parallel_size") == 4
    assert f.raw("cp_comm_type") == ["p2p", "a2a"] and f.flag("bf16") and f.raw("lr") == ["-1e-4"]
    assert f.raw("tp") == ["3"]  # argparse: the last occurrence wins


def test_moe_layer_freq_patterns_follow_megatron():
    f = Fields({"a": ("--moe-layer-freq", ["([0]*3+[1]*5)"]), "b": ("--moe-layer-freq", ["2"]),
                "c": ("--moe-layer-freq", ["__import__('os')"])}, "job.sh")
    assert layer_pattern(f, "a", 8) == [0, 0, 0, 1, 1, 1, 1, 1]
    assert layer_pattern(f, "b", 4) == [1, 0, 1, 0]  # i % 2 == 0 (gpt_layer_specs.py)
    with pytest.raises(InputError, match="job.sh: --moe-layer-freq"):
        layer_pattern(f, "c", 8)


def test_nemo_reader_renames_and_switches():
    f = read_nemo_yaml("trainer: {devices: 4, num_nodes: 2, precision: 16-mixed}\n"
                       "model: {encoder_seq_length: 2048, activation: gelu, bias: true, "
                       "share_embeddings_and_output_weights: true, x: {y: '${model.encoder_seq_length}'}}", "n.yaml")
    assert f.int("world_size") == 8 and f.flag("fp16") and f.int("seq_length") == 2048
    assert f.flag("swiglu") is False and f.flag("disable_bias_linear") is False
    assert f.flag("untie_embeddings_and_output_weights") is False and f.int("model.x.y") == 2048


# ---- torchtitan --------------------------------------------------------------------------------

def test_torchtitan_llama3_8b_job_becomes_the_scenario(capsys, tmp_path):
    sc, text = imported(["torchtitan", TITAN, "--gpus", 16], capsys, tmp_path)
    # data_parallel_shard_degree = -1: 16 GPUs / tp 2 = 8, FSDP (zero 3); local batch 2 is the micro-batch
    # [activation_checkpoint] mode = "selective", selective_ac_option = "op": torchtitan's op-level SAC
    assert layout_of(sc) == {"tp": 2, "pp": 1, "dp": 8, "cp": 1, "ep": 1, "vpp": 1, "micro_batch_size": 2, "zero": 3,
                             "recompute": "op", "sequence_parallel": True, "schedule": "1f1b",
                             "layers_per_stage": None, "shard_group_size": None, "num_gpus": 16,
                             "global_batch_size": 128, "seq_length": 8192}
    assert sc.model.name == "llama3.1-8b" and sc.training.optimizer == "adamw"
    assert sc.training.stack.name == "torchtitan" and sc.training.stack.compiled is True
    assert section(text, "not understood") == ["[parallelism] enable_experimental_bucketing"]
    assert "[checkpoint] interval" in text and "[quantize.linear.float8] filter_fqns" in text


def test_torchtitan_pipeline_job_uses_torchtitans_split(capsys, tmp_path):
    job = tmp_path / "pp.toml"
    job.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 16\nseq_len = 4096\n'
                   '[parallelism]\ndata_parallel_shard_degree = 2\npipeline_parallel_degree = 4\n'
                   'pipeline_parallel_microbatch_size = 2\n[activation_checkpoint]\nmode = "full"\n')
    sc, text = imported(["torchtitan", job], capsys, tmp_path)
    # 32 layers + embedding + output = 34 over 4 stages: 9, 9, 8, 8 less the embedding and the output
    assert sc.layout.layers_per_stage == (8, 9, 8, 7) and sc.num_gpus == 8
    assert (sc.layout.micro_batch_size, sc.training.global_batch_size, sc.layout.recompute) == (2, 32, "full")
    assert torchtitan_split(32, 8) == (4, 5, 4, 4, 4, 4, 4, 3)
    assert torchtitan_split(32, 4, 0, 0) == (8, 8, 8, 8)
    # interleaved (2 stages per rank): that split of 8 virtual stages is the layout's, one entry each (34 is no
    # multiple of 8, so it is not Megatron's accounted split)
    job.write_text(job.read_text().replace("pipeline_parallel_degree = 4\n", "pipeline_parallel_degree = 4\n"
                                           'pipeline_parallel_schedule = "Interleaved1F1B"\n'))
    sc, text = imported(["torchtitan", job], capsys, tmp_path, name="i.toml")
    assert (sc.layout.schedule, sc.layout.vpp) == ("interleaved", 2)
    assert sc.layout.layers_per_stage == (4, 5, 4, 4, 4, 4, 4, 3) and "even split used" not in text


def test_torchtitan_flavors_are_the_presets_shapes():
    for (name, flavor), entry in FLAVORS.items():
        if isinstance(entry, str):
            assert flavor_of(load_model(entry)) == (name, flavor)
    # the 8B flavor: dim 4096, ffn_dim_multiplier 1.3, multiple_of 1024 -> 14336, as Llama 3 8B
    assert load_model("llama3.1-8b").ffn_hidden_size == 14336


# ---- DeepSpeed ---------------------------------------------------------------------------------

def test_deepspeed_zero3_config_becomes_the_scenario(capsys, tmp_path):
    sc, text = imported(["deepspeed", DS, "--hf-config", HF, "--seq", 4096], capsys, tmp_path)
    # train_batch_size 256 = micro 2 x accumulation 8 x 16 GPUs
    assert layout_of(sc) == {"tp": 1, "pp": 1, "dp": 16, "cp": 1, "ep": 1, "vpp": 1, "micro_batch_size": 2, "zero": 3,
                             "recompute": "none", "sequence_parallel": False, "schedule": "1f1b",
                             "layers_per_stage": None, "shard_group_size": None, "num_gpus": 16,
                             "global_batch_size": 256, "seq_length": 4096}
    st = sc.training.stack
    # reduce_bucket_size 5e8 bf16 gradients = 1000 MB; prefetch 5e8 / 218,112,000 parameters per layer = 2 layers
    assert (st.name, st.dp_bucket_mb, st.fsdp_prefetch) == ("deepspeed", 1000.0, 2)
    assert sc.training.grad_dtype == "bf16" and sc.model.total_params() == load_model("llama3-8b").total_params()
    assert section(text, "not understood") == []
    assert len(section(text, "not expressible in parasim")) == 2  # stage3_max_live_parameters, max_reuse_distance
    assert "scheduler.params.warmup_num_steps" in text


def test_deepspeed_auto_fields_need_the_command_line(capsys, tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                               "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 2,
                                                                                   "reduce_bucket_size": "auto"}}))
    code, _, err = run(["import", "deepspeed", cfg, "--hf-config", HF, "--gpus", 8], capsys)
    assert code == 2 and "--micro-batch and --global-batch" in err and len(err.strip().splitlines()) == 1
    sc, text = imported(["deepspeed", cfg, "--hf-config", HF, "--gpus", 8, "--micro-batch", 1, "--global-batch", 64],
                        capsys, tmp_path)
    assert (sc.layout.zero, sc.layout.micro_batch_size, sc.training.global_batch_size) == (2, 1, 64)
    assert sc.training.stack.dp_bucket_mb == 1e6  # overlap_comm defaults off below stage 3: one bucket
    st = sc.training.stack  # the memory model's buffer sizes (memory/framework.py): 'auto' = h², defaults
    assert (st.zero_reduce_bucket_size, st.zero_allgather_bucket_size, st.zero_contiguous_gradients,
            st.zero_overlap_comm) == (16_777_216, 500_000_000, True, False)
    assert "reduce_bucket_size = 'auto': the Hugging Face Trainer's 16,777,216" in text


# ---- round trips -------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [["megatron", MEGATRON], ["megatron", NEMO], ["torchtitan", TITAN, "--gpus", 16],
                                  ["deepspeed", DS, "--hf-config", HF]], ids=["megatron", "nemo", "torchtitan", "ds"])
def test_imported_scenarios_estimate(args, capsys, tmp_path):
    out = tmp_path / "s.toml"
    code, _, err = run(["import", *args, "--out", out], capsys)
    assert code == 0, err
    code, text, err = run(["estimate", out, "--format", "json"], capsys)
    assert code == 0, err
    est = json.loads(text)
    assert est["time"]["step_s"] > 0 and est["memory"]["peak_bytes"] > 0


def _emit_then_import(framework, scenario, capsys, tmp_path, extra=()):
    code, text, err = run(["emit", framework, scenario, "--with-model"], capsys)
    assert code == 0, err
    suffix = {"megatron": ".sh", "torchtitan": ".toml", "deepspeed": ".json"}[framework]
    emitted = tmp_path / f"emitted{suffix}"
    emitted.write_text(text)
    sc = load_scenario(scenario)
    args = {"megatron": [], "torchtitan": [] if flavor_of(sc.model) else ["--model", sc.model.name],
            "deepspeed": ["--model", sc.model.name, "--gpus", sc.num_gpus, "--seq", sc.training.seq_length,
                          "--recompute", sc.layout.recompute]}[framework]
    again, _ = imported([framework, emitted, "--hardware", sc.hardware.name, *args, *extra], capsys, tmp_path,
                        "again.toml")
    return sc, again, err


@pytest.mark.parametrize("scenario", ["llama3-70b-64xh100", "llama3-70b-512xh100", "llama3.1-405b-16k-h100",
                                      "mixtral-8x7b-64xh100", "llama3-8b-128k-cp", "gpt3-175b-1024xa100"])
def test_megatron_emit_then_import_gives_the_same_layout(scenario, capsys, tmp_path):
    sc, again, _ = _emit_then_import("megatron", scenario, capsys, tmp_path)
    assert layout_of(again) == layout_of(sc)
    assert again.model.num_layers == sc.model.num_layers and again.model.num_experts == sc.model.num_experts


def test_torchtitan_emit_then_import_gives_the_same_layout(capsys, tmp_path):
    for scenario in ("llama3-8b-8xh100", str(DATA / ".." / ".." / ".." / "scenarios" / "llama3-70b-64xh100.toml")):
        sc, again, err = _emit_then_import("torchtitan", scenario, capsys, tmp_path)
        want = layout_of(sc)
        if sc.layout.zero in (1, 2):  # torchtitan's FSDP2 has no ZeRO-1/2: written as FSDP, and said so
            assert "ZeRO-1" in err or "ZeRO-2" in err
            want["zero"] = 3
        if sc.layout.recompute == "selective":  # Megatron's attention-core recompute: torchtitan has none
            assert "torchtitan's 'selective' recomputes by op or by layer" in err
            want["recompute"] = "op"
        assert layout_of(again) == want


def test_deepspeed_emit_then_import_gives_the_same_layout(capsys, tmp_path):
    sc, again, err = _emit_then_import("deepspeed", "llama3-8b-8xh100", capsys, tmp_path)  # ZeRO-3, tp = pp = 1
    assert layout_of(again) == layout_of(sc)
    assert again.training.stack.fsdp_prefetch == sc.training.stack.fsdp_prefetch
    assert "seq_length 8192: set in the training script" in err
    code, _, err = run(["emit", "deepspeed", "llama3-70b-64xh100"], capsys)  # TP8 x PP2: set in code, and said so
    assert code == 0 and "tp 8: set in code" in err and "pp 2: set in code" in err


def test_imported_scenario_emits_back_what_was_imported(capsys, tmp_path):
    out = tmp_path / "m.toml"
    assert run(["import", "megatron", MEGATRON, "--out", out], capsys)[0] == 0
    code, text, err = run(["emit", "megatron", out], capsys)
    assert code == 0 and err == ""
    for flag in ("--tensor-model-parallel-size 8", "--pipeline-model-parallel-size 4",
                 "--num-virtual-stages-per-pipeline-rank 4", "--use-distributed-optimizer", "--sequence-parallel",
                 "--recompute-granularity selective", "--global-batch-size 1024", "--overlap-grad-reduce",
                 "torchrun --nnodes 16 --nproc-per-node 8"):
        assert flag in text


def test_sweep_emit_writes_the_winner(capsys):
    code, text, err = run(["sweep", "--model", "llama3-8b", "--hardware", "dgx-h100", "--gpus", 8, "--seq", 4096,
                           "--global-batch", 32, "--tp", "1,2", "--pp", 1, "--zero", "1", "--recompute", "selective",
                           "--micro-batch", "1", "--no-progress", "--emit", "megatron"], capsys)
    assert code == 0, err
    winner = text.split("Winner:")[1].split()[0]
    assert f"the winner, {winner}, as megatron configuration:" in text
    tp = int(winner.split("-")[0][2:])
    assert f"--tensor-model-parallel-size {tp}" in text and "--use-distributed-optimizer" in text


# ---- bad inputs: exit 2, one line naming the file and the key -------------------------------------

def _bad(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("case", [
    ("megatron", "job.sh", "torchrun --nproc-per-node 8 x.py --seq-length 4096 --tensor-model-parallel-size $TP",
     "--tensor-model-parallel-size must be a whole number, got '$TP'"),
    ("megatron", "job.sh", "torchrun --nproc-per-node 8 x.py --num-layers 32 --hidden-size 4096 --seq-length 64",
     "--num-attention-heads is missing"),
    ("megatron", "job.sh", "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096",
     "give --gpus N"),
    ("megatron", "cfg.yaml", "model: [1, 2\n", "malformed YAML in"),
    ("torchtitan", "job.toml", "[parallelism]\ntensor_parallel_degree = \"eight\"\n",
     "[parallelism] tensor_parallel_degree must be a whole number, got 'eight'"),
    ("torchtitan", "job.toml", "[model]\nname = \"llama4\"\nflavor = \"17bx16e\"\n", "has no parasim model"),
    ("torchtitan", "job.toml", "[parallelism]\npipeline_parallel_schedule = \"Bogus\"\npipeline_parallel_degree = 2\n"
                               "data_parallel_shard_degree = 4\n", "[parallelism] pipeline_parallel_schedule"),
    ("deepspeed", "ds.json", '{"train_batch_size": 100, "train_micro_batch_size_per_gpu": 2, '
                             '"gradient_accumulation_steps": 4}', "train_batch_size 100"),
    ("deepspeed", "ds.json", '{"zero_optimization": {"stage": "three"}}', "zero_optimization.stage must be a whole"),
    ("deepspeed", "ds.json", '{"bf16": {"enabled": true}', "malformed JSON in"),
])
def test_bad_inputs_are_one_line_errors_naming_file_and_key(case, capsys, tmp_path):
    framework, name, text, message = case
    p = _bad(tmp_path, name, text)
    extra = {"megatron": [], "torchtitan": ["--gpus", 8], "deepspeed": ["--hf-config", HF, "--gpus", 8]}[framework]
    code, out, err = run(["import", framework, p, *extra], capsys)
    assert code == 2, out
    assert len(err.strip().splitlines()) == 1 and message in err and str(p) in err, err


def test_missing_files_and_missing_model_are_one_line_errors(capsys, tmp_path):
    code, _, err = run(["import", "torchtitan", tmp_path / "none.toml"], capsys)
    assert code == 2 and "file not found" in err
    code, _, err = run(["import", "deepspeed", DS], capsys)
    assert code == 2 and "--hf-config" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(["import", "megatron", MEGATRON, "--out", tmp_path / "x.json"], capsys)
    assert code == 2 and "--out must end in .toml" in err


def test_a_job_parasim_cannot_run_names_the_source(capsys, tmp_path):
    p = _bad(tmp_path, "job.sh", "torchrun --nproc-per-node 8 x.py --num-layers 32 --hidden-size 4096 "
                                 "--num-attention-heads 30 --tensor-model-parallel-size 8 --seq-length 4096")
    code, _, err = run(["import", "megatron", p], capsys)
    assert code == 2 and f"{p}: the job it describes is not a valid parasim scenario" in err


def test_megatron_blockwise_fp8_and_the_fp8_swiglu_store_round_trip(capsys, tmp_path):
    # --fp8-recipe blockwise (Transformer Engine Float8BlockScaling) and --activation-func-fp8-input-store are read
    # into the stack and written back as the same flags
    text = Path(MEGATRON).read_text().replace(
        "    --bf16 \\", "    --bf16 --fp8-format hybrid --fp8-recipe blockwise --activation-func-fp8-input-store \\")
    job = tmp_path / "fp8.sh"
    job.write_text(text)
    sc, _ = imported(["megatron", job], capsys, tmp_path)
    assert sc.training.precision == "fp8"
    assert sc.training.stack.fp8_recipe == "blockwise" and sc.training.stack.activation_input_fp8
    code, out, err = run(["emit", "megatron", tmp_path / "s.toml"], capsys)
    assert code == 0 and "--fp8-recipe blockwise" in out and "--activation-func-fp8-input-store" in out
