"""NVIDIA's Megatron-Bridge DGX-H100 performance tables (validation/mbridge_h100.csv, docs/performance-summary-
archive.md at NVIDIA-NeMo/Megatron-Bridge 067f987): the parser reads both table layouts as written, the committed
rows are what it gives, every row maps with its recipe's settings (FP8 current scaling and FP8 weights, TP
overlap, EP A2A overlap, recompute modules, token drop, the recipe's pipeline split), and the source's error stays
where it was measured when the rows were added."""
import csv
import sys
from pathlib import Path

import numpy as np
import pytest

from simulator.validate import predict_runs, read_runs
from simulator.validate.mapping import map_run

ROOT = Path(__file__).resolve().parent.parent
CSV = ROOT / "validation" / "mbridge_h100.csv"
sys.path.insert(0, str(ROOT / "validation"))
import mbridge_h100  # noqa: E402

# excerpts of the archive at 067f987, as written: a by-system table (25.09) and a by-model one (26.04.01)
ARCHIVE = """## 26.04.01 NeMo Container

### Pre-Training Performance

#### Model: Qwen3_235B_a22B

| System | #-GPUs | Precision | GBS | MBS | Sequence Length | FSDP | TP | PP | CP | VP | EP | Tokens / sec / GPU | Model TFLOP / sec / GPU |
|--------|--------|-----------|-----|-----|-----------------|------|----|----|----|----|----|-----------------------|-------------------------|
| DGX-GB200 | 256 | MXFP8 | 8192 | 1 | 4096 | 0 | 1 | 8 | 1 | 3 | 32 | 5680 | 840 |
| DGX-H100 | 256 | FP8 | 8192 | 1 | 4096 | 0 | 2 | 8 | 1 | 4 | 32 | 1712 | 253 |

### SFT Performance

#### Model: LLAMA3_70B

| System | #-GPUs | Precision | GBS | MBS | Sequence Length | TP | PP | CP | VP | EP | Tokens / sec / GPU | Model TFLOP / sec / GPU |
|--------|--------|-----------|-----|-----|-----------------|----|----|----|----|----|-----------------------|-------------------------|
| DGX-H100 | 32 | FP8 | 32 | 1 | 4096 | 4 | 4 | 1 | 5 | n/a | 1638 | 710 |

## 25.09 NeMo Container

### Pre-Training Performance

#### System: DGX-H100

| Model | #-GPUs | GBS | MBS | Sequence Length | FSDP | TP | PP | CP | VP | EP | GA | Tokens / sec / GPU | Model TFLOP / sec / GPU |
|-------|--------|-----|-----|-----------------|------|----|----|----|----|----|----|-----------------------|-------------------------|
| DeepSeekV3 (dropless) | 1024 | 8192 | 1 | 4096 | 0 | 2 | 8 | 1 | 4 | 64 | 128 | 1297 | 338 (330) |
| Qwen3_30B_a3B (tokendrop) | 16 | 512 | 2 | 4096 | 0 | 1 | 2 | 1 | 24 | 8 | 32 | 10494 | 241 |
"""


def _rows():
    return {r["run_id"]: r for r in csv.DictReader(open(CSV))}


def test_the_parser_reads_both_table_layouts_as_written():
    got = {r["run_id"]: r for r in mbridge_h100.rows(ARCHIVE)}
    # the GB200 row, the SFT table and the 25.09 Qwen3-30B row (VP 24 published, 12 in its recipe) are left out
    assert set(got) == {"mbridge_h100_26_04_01_qwen3_235b_a22b", "mbridge_h100_25_09_deepseekv3"}
    d = got["mbridge_h100_25_09_deepseekv3"]
    assert (d["tp"], d["pp"], d["vpp"], d["ep"], d["etp"], d["dp"]) == (2, 8, 4, 64, 1, 64)
    assert (d["tokens_per_s_per_gpu"], d["tflops_per_gpu"]) == (1297, 338)
    assert d["derived_step_time_s"] == pytest.approx(8192 * 4096 / (1297 * 1024), abs=1e-4)
    committed = _rows()
    for rid, row in got.items():
        assert {k: str(v) for k, v in row.items()} == {k: committed[rid][k] for k in row}, rid


def test_every_row_maps_with_its_recipe():
    rows = _rows()
    assert len(rows) == len(mbridge_h100.RECIPES) == 27
    for rid, r in rows.items():
        m = map_run(r)
        assert not m.skip_reason, (rid, m.skip_reason)
        st = m.training.stack
        bf16 = "GPT-OSS" in r["model"]  # (its rows ran BF16)
        assert (m.training.precision, st.fp8_recipe, st.fp8_params) == ("bf16" if bf16 else "fp8", "current", True)
        assert m.hardware_name == "dgx-h100"
        assert st.tp_comm_overlap == ("TP communication overlap (userbuffers)" in r["notes"])
        assert st.moe_a2a_overlap == st.moe_delay_wgrad == (mbridge_h100.A2A in r["notes"])
        assert (m.training.moe_capacity_factor == 1.0) == ("token drop" in r["notes"]), rid
    ds = map_run(rows["mbridge_h100_25_09_deepseekv3"])
    assert ds.model.mtp_layers == 1 and ds.training.stack.recompute_modules == ("mla_up_proj", "mlp")
    assert ds.layout.layers_per_stage == (1,) + (2,) * 30 + (0,)  # Megatron's layout Et|(tt|)*30mL
    q = map_run(rows["mbridge_h100_26_04_qwen3_235b_a22b"])
    assert q.layout.layers_per_stage == (2,) + (3,) * 30 + (2,)  # (94 + 2) / 32, embedding and loss counted
    oss = map_run(rows["mbridge_h100_26_04_gpt_oss_120b"])
    assert oss.model.sliding_window == 128 and oss.model.sliding_layers == tuple(range(0, 36, 2))
    assert set(oss.training.stack.recompute_modules) == {"layernorm", "moe_act"} and oss.layout.ep == 8
    llama = map_run(rows["mbridge_h100_26_06_llama3_1_405b"])
    assert llama.layout.layers_per_stage == (1,) + (2,) * 62 + (1,)


def test_the_source_error_as_measured_when_the_rows_were_added():
    """Median |step error| 3.9 % over the first 23 rows, 5.7 % with the four GPT-OSS rows (-32 to -34 % when they
    were added, -22 to -24 % with their eager expert activation modelled; docs/accuracy.md); 6.3 % since the GEMM
    tables below 5e10 FLOPs hold the kernels' time without the host's issue (2026-11-28, validation/graphed.py):
    the megatron stack has no launch bound, so the small expert GEMMs of GPT-OSS and Qwen3-30B-A3B lost the host
    time the one-call table had held for them (-31 to -33 % and -27 to -28 %). A change that moves it past 7 %, or
    any row but the 26.02 Qwen3-30B outlier past 35 %, fails here and is worth a look."""
    res, skipped = predict_runs(read_runs(CSV))
    assert len(skipped) == 0 and len(res) == 27
    err = res.set_index("run_id").step_error
    assert np.median(np.abs(err)) < 0.07
    assert (err.drop("mbridge_h100_26_02_qwen3_30b_a3b").abs() < 0.35).all()
