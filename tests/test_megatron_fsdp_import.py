"""Megatron-FSDP as Megatron-LM's own DeepSeek-V3 example runs it (examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh,
NVIDIA/Megatron-LM d98e8a6), condensed to the flags that change memory or step time: every one is understood, and
Megatron-FSDP's gradient handling follows megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py."""
from click.testing import CliRunner

from simulator.spec.scenario import load_scenario

COMMAND = (
    "torchrun --nnodes 32 --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 1 "
    "--expert-model-parallel-size 8 --expert-tensor-parallel-size 1 --context-parallel-size 1 "
    "--use-distributed-optimizer --overlap-grad-reduce --sequence-parallel --use-flash-attn --disable-bias-linear "
    "--micro-batch-size 4 --global-batch-size 2048 --recompute-granularity selective "
    "--recompute-modules mlp moe mla_up_proj layernorm --seq-length 4096 --num-layers 61 --hidden-size 7168 "
    "--ffn-hidden-size 18432 --num-attention-heads 128 --kv-channels 128 --max-position-embeddings 4096 "
    "--position-embedding-type rope --make-vocab-size-divisible-by 3232 --normalization RMSNorm --swiglu "
    "--untie-embeddings-and-output-weights --multi-latent-attention --qk-layernorm --num-experts 256 "
    "--moe-layer-freq ([0]*3+[1]*58) --moe-ffn-hidden-size 2048 --moe-shared-expert-intermediate-size 2048 "
    "--moe-router-topk 8 --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep --moe-grouped-gemm "
    "--moe-router-force-load-balancing --q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 "
    "--qk-pos-emb-head-dim 64 --v-head-dim 128 --rotary-scaling-factor 40 --mscale 1.0 --mscale-all-dim 1.0 "
    "--mtp-num-layers 1 --mtp-loss-scaling-factor 0.1 --bf16 --enable-experimental --use-megatron-fsdp "
    "--data-parallel-sharding-strategy optim_grads_params --no-gradient-accumulation-fusion "
    "--init-model-with-meta-device --fsdp-double-buffer --use-nccl-ub --megatron-fsdp-grad-comm-dtype bf16 "
    "--megatron-fsdp-main-grads-dtype bf16")


def _import(tmp_path, command=COMMAND, *extra):
    from simulator.cli import cli

    script, out = tmp_path / "mfsdp.sh", tmp_path / "mfsdp.toml"
    script.write_text(command + "\n")
    r = CliRunner().invoke(cli, ["import", "megatron", str(script), "--hardware", "dgx-b200", "--out", str(out),
                                 *extra])
    assert r.exit_code == 0, r.output
    return load_scenario(str(out)), r.output


def test_every_flag_is_understood(tmp_path):
    sc, report = _import(tmp_path)
    assert "0 not understood" in report
    st = sc.training.stack
    assert sc.layout.zero == 3 and (sc.layout.ep, sc.layout.etp) == (8, 1) and sc.model.mtp_layers == 1
    assert st.recompute_modules == ("layernorm", "mla_up_proj", "mlp", "moe")
    assert st.fsdp_reduce_dtype == "bf16" and sc.training.grad_dtype == "bf16"
    assert st.grad_accumulation == "autograd"  # --no-gradient-accumulation-fusion: main_grad += grad, a pass
    assert "user-buffer registration" in report and "flex" in report  # said, not dropped


def test_main_gradients_follow_the_model_dtype_by_default(tmp_path):
    # --megatron-fsdp-main-grads-dtype auto (DistributedDataParallelConfig: None): the compute parameters' dtype
    sc, report = _import(tmp_path, COMMAND.replace(" --megatron-fsdp-main-grads-dtype bf16", "")
                         .replace(" --megatron-fsdp-grad-comm-dtype bf16", ""))
    assert sc.training.grad_dtype == "bf16" and sc.training.stack.fsdp_reduce_dtype == "grad"


def test_megatron_fsdp_reduce_scatters_every_backward():
    """optim_grads_params reduce-scatters in every backward (grad_reduce_every_bprop): more micro-batches per step
    keep no unsharded gradients, so Llama-3-70B's peak under ZeRO-3 does not grow from 1 to 8 micro-batches."""
    from simulator.cli import cli
    import json

    peaks = []
    for gbs in ("64", "512"):
        r = CliRunner().invoke(cli, ["memory", "--hardware", "dgx-h100", "--model", "llama3-70b", "--gpus", "64",
                                     "--zero", "3", "--seq", "4096", "--global-batch", gbs, "--micro-batch", "1",
                                     "--recompute", "full", "--format", "json"])
        assert r.exit_code == 0, r.output
        peaks.append(json.loads(r.stdout)["memory"]["peak_bytes"])
    assert peaks[0] == peaks[1] and peaks[0] < 40 * 2**30


def test_emitted_flags_read_back(tmp_path):
    from simulator.cli import cli

    sc, _ = _import(tmp_path)
    emitted = CliRunner().invoke(cli, ["emit", "megatron", str(tmp_path / "mfsdp.toml")])
    assert emitted.exit_code == 0, emitted.output
    assert "--megatron-fsdp-main-grads-dtype bf16" in emitted.stdout
    assert "--no-gradient-accumulation-fusion" in emitted.stdout
    again = tmp_path / "again"
    again.mkdir()
    back, _ = _import(again, emitted.stdout.replace("\\\n", " "), "--model", "deepseek-v3")  # (emit writes no model)
    assert back.layout == sc.layout and back.training.grad_dtype == sc.training.grad_dtype
    for key in ("recompute_modules", "grad_accumulation", "fsdp_reduce"):
        assert getattr(back.training.stack, key) == getattr(sc.training.stack, key), key
    reduce_bytes = [s.training.stack.fsdp_reduce_bytes(s.training.grad_bytes) for s in (sc, back)]
    assert reduce_bytes == [2, 2]  # (bf16 as written, or 'grad' of bf16 gradients: the same bytes)


def test_a_bad_megatron_fsdp_dtype_names_the_flag(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "bad.sh"
    script.write_text(COMMAND.replace("--megatron-fsdp-main-grads-dtype bf16", "--megatron-fsdp-main-grads-dtype fp64"))
    r = subprocess.run([sys.executable, "-c", "from simulator.cli import main; main()", "import", "megatron",
                        str(script), "--hardware", "dgx-b200"], capture_output=True, text=True)
    assert r.returncode == 2, r.stdout + r.stderr
    line = r.stderr.strip()
    assert "\n" not in line and "--megatron-fsdp-main-grads-dtype" in line and "fp64" in line
