"""llm-foundry's H100 tables (validation/llmfoundry_h100.csv, written by validation/llmfoundry_h100.py from the
README at 49521837): the transcription rule on the README's own lines, and how the rows map (sharding
strategy, attention kernel per row, FP8)."""
import csv
import sys
from pathlib import Path

from simulator.validate.mapping import map_run

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))
import llmfoundry_h100  # noqa: E402

README = """## H100 80GB BF16 (Large Scale, >= 128 GPUs)
|  Model | SeqLen (T) | # GPUs | GPU | MFU | HFU | Model TFLOP | MicroBatchSize | GradAccum | GlobalBatchSize | Throughput (S/s) | Throughput (T/s) | Throughput (T/s/GPU) | GlobalBatchSize (T) | Precision | MP Mode | Sharding Strategy | Activation Checkpointing | Activation CPUOffload | NumParams |
|  70b | 2048 | 512 | h100_80gb | 41.25 | 55.0 | 408 | 8 | 1 | 4096 | 251 | 515636 | 1007 | 8388608 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 64862437376 |
## H100 80GB FP8
|  3b | 2048 | 8 | h100_80gb | 27.7 | 27.7 | 548 | 10 | 6 | 480 | 119 | 244692 | 30586 | 983040 | amp_fp8 | DEFAULT | FULL_SHARD | False | False | 2651837440 |
## A100 80GB with 1600 Gbps node-node interconnect (RoCE)
|  7b | 2048 | 8 | a100_80gb | 64.23 | 64.23 | 200 | 6 | 2 | 96 | 18 | 37130 | 4641 | 196608 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 6658859008 |
"""


def test_the_readme_lines_become_rows():
    rows = [llmfoundry_h100.row(name, kind, c, i) for name, kind, cs in llmfoundry_h100.tables(README)
            for i, c in enumerate(cs)]
    assert len(rows) == 2  # the A100 table is not an H100 table
    big, fp8 = rows
    assert (big["model"], big["n_gpus"], big["micro_batch"], big["global_batch_seqs"]) == ("MPT-70b", 512, 8, 4096)
    assert big["derived_step_time_s"] == round(8388608 / 515636, 3) and "attn_impl=flash" in big["notes"]
    assert big["recompute"].startswith("full") and big["hidden"] == 8192 and big["ffn_hidden"] == 4 * 8192
    assert fp8["precision"] == "amp_fp8 (MP mode DEFAULT)" and "attn_impl=triton" in fp8["notes"]


def test_the_rows_map_with_their_sharding_kernel_and_precision():
    rows = {r["run_id"]: r for r in csv.DictReader(open(ROOT / "validation" / "llmfoundry_h100.csv"))}
    assert len(rows) == 77
    by = {k.rsplit("_", 1)[0]: v for k, v in rows.items()}
    m3 = map_run(by["foundry_h100_large_3b_s2048_g512"])  # SHARD_GRAD_OP
    assert m3.layout.zero == 2 and m3.hardware_name == "dgx-h100"
    assert m3.training.stack.attention_kernel == "flash2"
    m13 = map_run(by["foundry_h100_large_13b_s2048_g512"])
    assert m13.layout.zero == 3 and m13.training.stack.attention_kernel == "triton-pre-mlir" and m13.layout.recompute == "full"
    m8 = map_run(by["foundry_h100_fp8_3b_s2048_g8"])
    assert m8.training.precision == "fp8" and m8.training.grad_dtype == "fp32"
    # the parameter counts the README prints (learned positions of seq_len rows, biases, tied embeddings)
    for key in ("foundry_h100_large_70b_s2048_g512", "foundry_h100_bf16_7b_s65536_g8"):
        r = by[key]
        assert abs(map_run(r).model.total_params() / 1e9 - float(r["params_b"])) < 1e-3


def test_the_gap_table_in_docs_is_current():
    import foundry_gap

    assert foundry_gap.summary() in (ROOT / "docs" / "compute.md").read_text()
