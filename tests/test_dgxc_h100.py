"""NVIDIA's DGX Cloud NeMo recipes on H100 (validation/dgxc_h100.csv, NVIDIA/dgxc-benchmarking 35a9aec): the rows
are internally consistent (step, tokens/s, layout, gradient accumulation as the tables' headers give it), map with
the recipe's settings (megatron stack, cuDNN attention, bf16 gradient reduction, TP overlap where the yaml turns it
on, interleaving per rank for the 405B recipe's reduced-depth runs) and are all predicted."""
import csv
import re
from pathlib import Path

import pytest

from simulator.validate import predict_runs, read_runs
from simulator.validate.mapping import map_run

ROOT = Path(__file__).resolve().parent.parent
CSV = ROOT / "validation" / "dgxc_h100.csv"
HEADER_GA = {"8b": 32, "70b": 64, "405b": 63}  # the tables' headers: GA=32 (8B), 64 (70B), 63 (405B)


def _rows():
    return {r["run_id"]: r for r in csv.DictReader(open(CSV))}


def test_rows_are_consistent_with_the_tables():
    rows = _rows()
    assert len(rows) == 34
    for rid, r in rows.items():
        n, tp, pp, cp, dp = (int(r[k]) for k in ("n_gpus", "tp", "pp", "cp", "dp"))
        assert tp * pp * cp * dp == n, rid
        gbs, step, tps = int(r["global_batch_seqs"]), float(r["step_time_s"]), float(r["tokens_per_s"])
        assert gbs * 8192 / tps == pytest.approx(step, rel=0.01), rid
        size = re.search(r"_(\d+b)_", rid).group(1)
        assert gbs // (dp * int(r["micro_batch"])) == HEADER_GA[size], rid


def test_rows_map_with_the_recipes_settings():
    rows = _rows()
    small, big = map_run(rows["dgxc_h100_llama31_8b_bf16_g8"]), map_run(rows["dgxc_h100_llama31_70b_fp8_g64"])
    for m in (small, big):
        assert m.training.stack.name == "megatron" and m.training.stack.attention_kernel == "cudnn"
        assert m.training.grad_dtype == "bf16" and m.layout.zero == 1 and m.layout.cp == 2
        assert m.layout.recompute == "none" and m.hardware_name == "dgx-h100" and not m.hardware_overrides
    assert not small.training.stack.tp_comm_overlap and small.model.vocab_size == 128256
    assert big.training.stack.tp_comm_overlap and big.training.precision == "fp8"
    assert big.layout.schedule == "interleaved" and big.layout.vpp == 5 and big.layout.sequence_parallel
    assert big.model.vocab_size == 128512  # 128256 padded to a multiple of 128·4
    # the 405B recipe's 21-layer run: PP 3 with VP 7 virtual stages per rank, one layer each (VP per rank,
    # not the total-chunk reading of the Zero Bubble rows)
    proxy = map_run(rows["dgxc_h100_llama31_405b_bf16_g96"])
    assert proxy.layout.vpp == 7 and proxy.layout.pp == 3 and proxy.model.num_layers == 21
    assert proxy.model.vocab_size == 51200 and proxy.model.num_kv_heads == 16


def test_every_row_is_predicted_and_weak_scaling_does_not_shrink_the_step():
    res, skipped = predict_runs(read_runs(CSV), keep_estimates=True)
    assert skipped.empty and len(res) == 34 and res.feasible.all()
    t = res.set_index("run_id")
    # TP 8 × CP 2 across nodes (405B): each GPU rings its own 2 KV heads, 4 MiB per step, which the attention
    # kernel hides; charging all 16 heads per GPU (the bug before) left 2.0 s of each step exposed
    e = t.estimate["dgxc_h100_llama31_405b_bf16_g576"].to_dict()["time"]
    assert e["exposed_comm_by_group_s"]["cp"] == 0.0 and e["hidden_comm_by_group_s"]["cp"] > 0.0
    for size, lo, hi in (("8b", 8, 128), ("70b", 64, 2048), ("405b", 576, 2304)):
        for dt in ("bf16", "fp8"):
            a, b = f"dgxc_h100_llama31_{size}_{dt}_g{lo}", f"dgxc_h100_llama31_{size}_{dt}_g{hi}"
            # the measured step grows with the GPUs (more data-parallel ranks, same work per GPU); the prediction
            # must not fall
            assert t.measured_step_s[b] > t.measured_step_s[a]
            assert t.predicted_step_s[b] >= t.predicted_step_s[a]
