"""A Megatron-LM command line through `parasim import megatron` and `parasim emit megatron` in fresh processes:
(the imported scenario's TOML text, the emitted flags, the command that estimates the scenario)."""
import subprocess
import sys

CLI = [sys.executable, "-c", "from simulator.cli import main; main()"]
# DeepSeek-V3's shapes as Megatron-LM flags, without parallelism or the features a test adds
DSV3 = ("--num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432 --num-attention-heads 128 --seq-length 4096 "
        "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 8192 --num-experts 256 "
        "--moe-router-topk 8 --moe-ffn-hidden-size 2048 --moe-shared-expert-intermediate-size 2048 --bf16 "
        "--multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 "
        "--v-head-dim 128 --moe-layer-freq '([0]*3+[1]*58)' --swiglu --normalization RMSNorm --vocab-size 129280 "
        "--untie-embeddings-and-output-weights --disable-bias-linear --position-embedding-type rope "
        "--use-distributed-optimizer")


def round_trip(tmp_path, args: str, nodes: int = 128):
    script, toml = tmp_path / "job.sh", tmp_path / "job.toml"
    script.write_text(f"torchrun --nproc-per-node 8 --nnodes {nodes} pretrain_gpt.py {args}\n")
    subprocess.run(CLI + ["import", "megatron", str(script), "--hardware", "dgx-h100", "--out", str(toml)],
                   capture_output=True, text=True, check=True)
    flags = subprocess.run(CLI + ["emit", "megatron", str(toml)], capture_output=True, text=True, check=True).stdout
    return toml.read_text(), [t for t in flags.split() if t != "\\"], CLI + ["estimate", str(toml), "--format", "json"]
