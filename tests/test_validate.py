"""validate: row mapping, statistics on a fixture CSV with hand-computed errors, CLI and plot.

The estimate is a stand-in (step = 1 s per layer, tokens/s = tokens per step / step, peak memory
= 4 GiB per layer) so the expected errors below follow by hand from the fixture's measurements.
"""
import math
import types
from pathlib import Path

import pandas as pd
import pytest

from simulator.validate import (error_summary, hardware_for_gpu, map_run, measured_step, predict_runs, read_runs,
                                spearman)

FIXTURE = Path(__file__).parent / "data" / "validate" / "runs_fixture.csv"
SHARED = Path(__file__).parent.parent / "validation" / "published_runs.csv"
GIB = 2**30


def stand_in_estimate(model, training, layout, hardware):
    step = 1.0 * model.num_layers
    return types.SimpleNamespace(step_s=step, tokens_per_s=training.tokens_per_step / step, feasible=True, reason="",
                                 memory=types.SimpleNamespace(peak_bytes=4.0 * GIB * model.num_layers))


def _predict(**kw):
    return predict_runs(read_runs(FIXTURE), estimate_fn=stand_in_estimate, **kw)


def test_fixture_errors_match_hand_computed_values():
    res, skipped = _predict()
    r = res.set_index("run_id")
    # fx_measured_step: predicted 8 s vs measured step_time_s 10 s -> 8/10 - 1 = -20 %
    assert r.loc["fx_measured_step", "step_error"] == pytest.approx(-0.20)
    assert r.loc["fx_measured_step", "step_basis"] == "measured step time"
    # fx_from_tokens: 64 seq x 2048 tok / 16384 tok/s = 8 s measured; predicted 10 s -> +25 %
    assert r.loc["fx_from_tokens", "measured_step_s"] == pytest.approx(8.0)
    assert r.loc["fx_from_tokens", "step_error"] == pytest.approx(0.25)
    assert r.loc["fx_from_tokens", "tokens_per_s_error"] == pytest.approx(8 / 10 - 1)
    assert r.loc["fx_from_tokens", "step_basis"] == "from measured tokens/s"
    # fx_derived: derived 20 s (labelled, not a measurement) vs predicted 20 s -> 0 %
    assert r.loc["fx_derived", "step_error"] == pytest.approx(0.0)
    assert r.loc["fx_derived", "step_basis"].startswith("derived (not measured)")
    # memory: 32 GiB predicted vs 40 GiB -> -20 %; 80 GiB vs 64 GiB -> +25 %; blank -> no error
    assert r.loc["fx_measured_step", "mem_error"] == pytest.approx(-0.20)
    assert r.loc["fx_derived", "mem_error"] == pytest.approx(0.25)
    assert math.isnan(r.loc["fx_from_tokens", "mem_error"])
    s = error_summary(res).iloc[0]
    assert s.step_runs == 3
    assert s.median_abs_step_error == pytest.approx(0.20)  # |errors| 0.20, 0.25, 0.00
    assert s.max_abs_step_error == pytest.approx(0.25)
    # ranks predicted (8, 10, 20) -> 1 2 3; measured (10, 8, 20) -> 2 1 3; rho = 1 - 6*2/(3*8) = 0.5
    assert s.step_spearman == pytest.approx(0.5)
    assert s.median_abs_mem_error == pytest.approx(0.225) and s.max_abs_mem_error == pytest.approx(0.25)


def test_unmappable_rows_are_reported_with_their_reason_not_dropped():
    res, skipped = _predict()
    assert len(res) + len(skipped) == 5
    why = skipped.set_index("run_id")["reason"]
    assert "per layer" in why["fx_skip_recompute"]
    assert "V100" in why["fx_skip_gpu"]


def test_spearman_handles_ties_with_average_ranks():
    # a = 1,2,2,3 -> ranks 1, 2.5, 2.5, 4; b = 1,2,3,4; Pearson of the ranks = 0.9486832980505138
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486832980505138)
    assert spearman([3, 2, 1], [1, 2, 3]) == pytest.approx(-1.0)


def test_gpu_types_map_to_hardware_presets():
    assert hardware_for_gpu("A100-SXM4-80GB") == "dgx-a100-80g"
    assert hardware_for_gpu("A100-SXM4-40GB") == "dgx-a100-40g"
    assert hardware_for_gpu("NVIDIA H100 80GB HBM3") == "dgx-h100"
    assert hardware_for_gpu("H200 SXM") == "dgx-h200"


def test_every_published_row_maps_or_names_why_not():
    df = pd.read_csv(SHARED)
    reasons = {}
    for _, row in df.iterrows():
        m = map_run(row.to_dict())
        if m.skip_reason:
            reasons[m.run_id] = m.skip_reason
        else:
            assert m.layout.num_gpus == row.n_gpus and m.model.num_layers == row.layers
            assert m.training.tokens_per_step == row.global_batch_seqs * row.seq_len
    # only the torchtitan 'selective (per layer)' rows have no parasim equivalent
    assert reasons and all("per layer" in r for r in reasons.values())


def test_published_layout_text_maps_to_layout_fields():
    df = pd.read_csv(SHARED).set_index("run_id")
    zbv = map_run({**df.loc["zb_t6_14.6B_ZB-V_m72"].to_dict(), "run_id": "x"})
    assert zbv.layout.schedule == "zb-v" and sum(zbv.layout.layers_per_stage) == 46
    assert zbv.layout.layers_per_stage[0] == 1 and zbv.layout.layers_per_stage[1] == 2
    m21 = map_run({**df.loc["megatron21_t1_76B"].to_dict(), "run_id": "y"})
    assert m21.layout.recompute == "full" and m21.layout.zero == 0 and m21.layout.micro_batch_size == 1
    assert "micro_batch not stated: 1" in m21.assumptions
    assert measured_step(df.loc["megatron21_t1_76B"].to_dict())[1].startswith("derived (not measured)")
    mpt = map_run({**df.loc["foundry_a100_40_13b_s2048_g32_147"].to_dict(), "run_id": "z"})
    assert mpt.layout.zero == 3 and mpt.layout.recompute == "full" and mpt.hardware_name == "dgx-a100-40g"
    assert mpt.model.learned_position_embeddings == 2048 and mpt.model.mlp == "gelu"


def test_cli_prints_rows_and_statistics_and_fails_on_max_error(monkeypatch, capsys, tmp_path):
    from simulator.cli import main

    monkeypatch.setitem(__import__("sys").modules, "simulator.estimate",
                        types.SimpleNamespace(estimate=stand_in_estimate))
    plot = tmp_path / "scatter.png"
    with pytest.raises(SystemExit) as e:
        main(["validate", str(FIXTURE), "--plot", str(plot), "--max-error", "0.3"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "fx_from_tokens" in out and "+25.0%" in out and "Spearman 0.500" in out
    assert "skipped fx_skip_gpu" in out
    assert plot.stat().st_size > 1000
    with pytest.raises(SystemExit) as e:
        main(["validate", str(FIXTURE), "--max-error", "0.2"])
    assert e.value.code == 1
    assert "max |step error| +25.0% > 20.0%" in capsys.readouterr().err
