"""Predicted peak memory against published measurements (shared published_runs.csv; rows with
mem_gb_per_gpu): Zero Bubble (Qi et al. 2024, Tables 4, 6, 12) and BLOOM-176B topology runs. Rows are
mapped by simulator.validate.map_run (per-source assumptions there) and predicted by
simulator.estimate.estimate, as in `parasim validate` and docs/accuracy.md; nothing is fitted to these
rows. docs/memory.md has the full table."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "validation" / "memory_published.py"


@pytest.fixture(scope="module")
def table(shared_data):
    csv = ROOT / "validation" / "published_runs.csv"
    if not csv.is_file():  # the shared copy (skip or fail without it: conftest)
        csv = shared_data("published_runs.csv")
    assert SCRIPT.is_file(), SCRIPT  # part of this repository
    spec = importlib.util.spec_from_file_location("memory_published", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.predictions(csv)


def test_every_row_with_a_memory_figure_is_predicted(table):
    assert (table.source == "ZB24").sum() == 102 and (table.source == "BLOOM_PREQUEL").sum() == 34


def test_zero_bubble_rows_within_15_percent_and_median_6_percent(table):
    zb = table[table.source == "ZB24"]
    assert zb.error.abs().max() < 0.15
    for name, err in zb.groupby("schedule").error:
        assert err.abs().median() < 0.06, name


def test_zero_bubble_schedules_rank_by_memory_as_measured(table):
    # Table 4, 6.2B on 8 GPUs: ZB-2p (70) > 1F1B-I (48) > ZB-1p (42) > 1F1B (39)
    zb = table[table.run_id.str.startswith("zb_t4_6.2B_") & table.run_id.str.endswith("_m32")]
    order = zb.sort_values("predicted_gib").run_id.tolist()
    assert order == zb.sort_values("measured_gib").run_id.tolist()


def test_bloom_rows_with_deepspeeds_buffers_and_the_nvidia_smi_counter(table):
    # nvidia-smi peaks of Megatron-DeepSpeed runs, compared with the device total: DeepSpeed's buffers from
    # its code at its defaults (memory/framework.py) and the CUDA context the source measured (1573 MiB).
    # Median |error| 12.1 % (26.3 % before those terms), every row within 19 %; what is left is still
    # under-predicted (docs/memory.md: terms growing with the activations, not derived). Not a target.
    bl = table[table.source == "BLOOM_PREQUEL"]
    assert (bl.counter.isin(["nvidia-smi", "device"])).all() and (bl.framework_gib > 0).all()
    assert (bl.error < 0.05).all()
    assert bl.error.abs().median() < 0.15
    assert bl.error.abs().max() < 0.25


def test_zero_bubble_rows_take_no_framework_buffers(table):
    # Megatron-LM (the megatron stack): no DeepSpeed buffers, the default context; its basis names no counter
    zb = table[table.source == "ZB24"]
    assert (zb.framework_gib == 0).all() and (zb.counter == "device").all()


def test_same_prediction_as_parasim_validate(table):
    # one mapping: the memory table and `parasim validate` / docs/accuracy.md compare the same numbers
    from simulator.validate import predict_runs, read_runs

    df = read_runs(ROOT / "validation" / "published_runs.csv")
    res, _ = predict_runs(df[df.run_id.isin(["zb_t4_6.2B_1F1B_m32", "bloom_prequel_L605_3"])])
    got = table.set_index("run_id").loc[res.run_id, "predicted_gib"].to_numpy()
    assert got == pytest.approx(res.predicted_mem_bytes.to_numpy() / 2**30, rel=1e-12)
