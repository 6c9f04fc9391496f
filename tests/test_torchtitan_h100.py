"""torchtitan's Llama 3.1 tables on H100s (validation/torchtitan_h100.csv, docs/performance.md at d4c86e3): the
rows map with their stack per row (torch.compile, AsyncTP, Float8), sequence parallelism with TP and the
source's GPUs (96GB HBM2e), and the speed-ups between rows, which do not depend on the unknown peak of those
500 W GPUs, follow the measured ones."""
import csv
from pathlib import Path

import pytest

from simulator.validate import predict_runs, read_runs
from simulator.validate.mapping import map_run

ROOT = Path(__file__).resolve().parent.parent
CSV = ROOT / "validation" / "torchtitan_h100.csv"


def _rows():
    return {r["run_id"]: r for r in csv.DictReader(open(CSV))}


def test_rows_map_with_their_stack_and_hardware():
    rows = _rows()
    eager, compiled, fp8 = (map_run(rows[f"torchtitan_h100_t1_8B_{i}"]) for i in range(3))
    assert not eager.training.stack.compiled and compiled.training.stack.compiled
    assert fp8.training.precision == "fp8" and eager.training.precision == "bf16"
    assert eager.layout.recompute == "op" and eager.hardware_name == "dgx-h100"
    assert dict(eager.hardware_overrides) == {"hbm_bytes": 96e9, "hbm_bytes_per_s": 2.4e12}
    plain, async_tp = map_run(rows["torchtitan_h100_t4_70B_10"]), map_run(rows["torchtitan_h100_t4_70B_11"])
    assert plain.layout.sequence_parallel and plain.layout.tp == 8 and not plain.training.stack.tp_comm_overlap
    assert async_tp.training.stack.tp_comm_overlap
    cp = map_run(rows["torchtitan_h100_t2_8B_9"])
    assert cp.layout.cp == 8 and cp.training.seq_length == 262144
    # the interleaved 405B row: 126 layers over 16 virtual stages in torchtitan's own split
    inter = map_run(rows["torchtitan_h100_t5_405B_13"])
    assert inter.layout.schedule == "interleaved" and inter.layout.layers_per_stage == (7,) + (8,) * 14 + (7,)


def test_compile_and_float8_gains_follow_the_measured_ones():
    res, _ = predict_runs(read_runs(CSV))
    t = res.set_index("run_id")

    def gain(a, b, col):
        return t[col][b] / t[col][a]

    for a, b in (("torchtitan_h100_t5_405B_12", "torchtitan_h100_t5_405B_13"),  # interleaved over 1F1B, PP 8
                 ("torchtitan_h100_t1_8B_0", "torchtitan_h100_t1_8B_1"),   # torch.compile, 8 GPUs
                 ("torchtitan_h100_t1_8B_1", "torchtitan_h100_t1_8B_2"),   # Float8 over compile
                 ("torchtitan_h100_t3_8B_3", "torchtitan_h100_t3_8B_4"),   # the same on 128 GPUs
                 ("torchtitan_h100_t3_8B_4", "torchtitan_h100_t3_8B_5")):
        measured, predicted = gain(a, b, "measured_tokens_per_s"), gain(a, b, "predicted_tokens_per_s")
        assert predicted > 1.0 and predicted / measured == pytest.approx(1.0, abs=0.1), (a, b, measured, predicted)
    # the modified hardware was used: 96 GB HBM, so the 8B rows at 77-84 GiB fit
    assert t.loc["torchtitan_h100_t2_8B_9", "feasible"]
