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
    # signed means: step (-0.20 + 0.25 + 0.00) / 3 = 0.01666..., memory (-0.20 + 0.25) / 2 = 0.025
    assert s.mean_step_error == pytest.approx(0.05 / 3) and s.mean_mem_error == pytest.approx(0.025)


def test_unmappable_rows_are_reported_with_their_reason_not_dropped():
    res, skipped = _predict()
    assert len(res) + len(skipped) == 5
    why = skipped.set_index("run_id")["reason"]
    assert "unknown recompute" in why["fx_skip_recompute"]
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
    # every row maps (torchtitan's 'selective (per layer)' rows as recompute 'op', an approximation they state)
    assert not reasons, reasons


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
    assert mpt.training.flash_attention and not mpt.training.dropout and mpt.model.tie_word_embeddings


# ---- per-source rules: checked against numbers the sources published --------------------------------
def _mapped(source_id):
    df = pd.read_csv(SHARED)
    out = []
    for _, row in df[df.source_id == source_id].iterrows():
        m = map_run(row.to_dict())
        if not m.skip_reason:
            out.append((row, m))
    return out


def test_mpt_rows_reproduce_llm_foundry_numparams_exactly():
    # params_b of the LLMFOUNDRY rows is the README's NumParams / 1e9 rounded to 3 decimals (e.g. MPT-7b at
    # seq 2048: 6,658,859,008). It grows with seq_len by h per position (learned table) and needs biases and
    # LayerNorm biases (9h + 4h per layer): 12·32·4096² + 13·4096·32 + 2·4096 + (50368 + 2048)·4096 = 6,658,859,008.
    rows = _mapped("LLMFOUNDRY")
    assert len(rows) == 139
    for row, m in rows:
        assert abs(m.model.total_params() / 1e9 - row.params_b) <= 0.0005 + 1e-12, row.run_id
    mpt7 = next(m for row, m in rows if row.run_id == "foundry_a100_80_7b_s2048_g8_96")
    assert mpt7.model.total_params() == 6_658_859_008


def test_megatron_and_llama_rows_match_their_published_model_sizes():
    # Narayanan Table 1 sizes (1.7 ... 1008 B), torchtitan Llama sizes (8.0, 70.6, 13.0, 69.0 B), Zero Bubble
    # Table 3 (1.5, 6.2, 14.6, 28.3 B): all rounded to 0.1 B
    for src in ("NARAYANAN21", "TORCHTITAN_A100", "ZB24"):
        for row, m in _mapped(src):
            assert abs(m.model.total_params() / 1e9 - row.params_b) <= 0.05 + 1e-9, (src, row.run_id)


def test_zero_bubble_sizes_rule_out_gpt2_vocab_and_untied_head():
    # the ZB24 rule (tied, 32000-token vocabulary) is the one that reproduces Table 3; GPT-2's padded
    # 50304 gives 6.25 B for the "6.2B" model and an untied head 6.31 B
    row, m = next((r, m) for r, m in _mapped("ZB24") if r.model == "GPT-like 6.2B")
    assert round(m.model.total_params() / 1e9, 1) == 6.2
    assert round(m.model.with_(vocab_size=50304).total_params() / 1e9, 1) == 6.3
    assert round(m.model.with_(tie_word_embeddings=False).total_params() / 1e9, 1) == 6.3


def test_bloom_final_shape_matches_the_released_parameter_count():
    # BLOOM-176B model card: 176,247,271,424 parameters (h 14336, 70 layers, 112 heads, vocab 250880 with TP=4
    # padding), the embedding LayerNorm (2h = 28,672 parameters) included
    row, m = next((r, m) for r, m in _mapped("BLOOM_PREQUEL") if r.run_id == "bloom_prequel_L944_103")
    assert m.model.vocab_size == 250880 and m.model.learned_position_embeddings == 0
    assert m.model.total_params() == 176_247_271_424 and m.model.embedding_norm
    # its 02-28 notes: the embedding takes a PP slot, so 70 layers + 2 over 12 stages -> 5, 6 x 10, 5
    assert m.layout.layers_per_stage == (5,) + (6,) * 10 + (5,)
    # rows whose notes give the chronicles' size column (e.g. '181B') match it to the nearest billion
    for r, mm in _mapped("BLOOM_PREQUEL"):
        if "Size column" in str(r.notes):
            assert abs(mm.model.total_params() / 1e9 - r.params_b) <= 0.5 + 1e-9, r.run_id


def test_source_rules_set_attention_dropout_and_gradient_dtypes_per_row():
    df = pd.read_csv(SHARED).set_index("run_id")

    def m(run_id):
        return map_run({**df.loc[run_id].to_dict(), "run_id": run_id, "source_id": df.loc[run_id, "source_id"]})

    zb = m("zb_t4_6.2B_ZB-2p_m24")
    assert not zb.training.flash_attention and zb.training.dropout
    assert zb.training.precision == "fp16" and zb.training.grad_dtype == "fp16" and zb.model.vocab_size == 32000
    bl16 = m("bloom_prequel_L605_1")
    assert (bl16.training.precision, bl16.training.grad_dtype) == ("fp16", "fp16")
    assert not bl16.training.dropout and not bl16.training.flash_attention
    assert bl16.layout.zero == 1 and bl16.layout.recompute == "full"
    bl_bf = m("bloom_prequel_L904_87")
    assert (bl_bf.training.precision, bl_bf.training.grad_dtype) == ("bf16", "fp32")
    pure = m("foundry_a100_40_350m_s2048_g8_203")  # 'bf16 (MP mode PURE)': bf16 gradient reduction
    default = m("foundry_a100_80_7b_s2048_g8_96")  # 'amp_bf16 (MP mode DEFAULT)': fp32
    assert pure.training.grad_dtype == "bf16" and default.training.grad_dtype == "fp32"
    tt = m("torchtitan_a100_Llama-3-70B_2")
    assert tt.model.mlp == "swiglu" and not tt.model.tie_word_embeddings and tt.layout.zero == 3
    assert tt.model.num_kv_heads == 8 and tt.training.flash_attention
    n21 = m("megatron21_t1_145B")
    assert not n21.training.flash_attention and n21.training.dropout and n21.training.grad_dtype == "fp16"
    assert any(a.startswith("NARAYANAN21: no FlashAttention") for a in n21.assumptions)


def test_memory_is_compared_on_the_stages_the_basis_names():
    from simulator.validate import memory_stages, predicted_memory

    assert memory_stages("max nvidia-smi memory on first/last PP stage GPUs (which hold the embedding)", 12) == (0, 11)
    assert memory_stages("peak memory per GPU (GB) as reported", 8) is None
    st = [types.SimpleNamespace(stage=i, peak_bytes=b) for i, b in enumerate((5.0, 9.0, 7.0))]
    mem = types.SimpleNamespace(per_stage=st, peak_bytes=9.0)
    assert predicted_memory(mem, "first/last nodes", 3) == (7.0, 2)  # stage 1 (9.0) is not measured
    assert predicted_memory(mem, "peak memory per GPU", 3) == (9.0, 1)


def test_rows_reported_out_of_memory_are_flagged():
    from simulator.validate import measured_oom

    df = pd.read_csv(SHARED)
    flagged = sorted(r.run_id for _, r in df.iterrows() if measured_oom(r.to_dict()))
    assert flagged == ["bloom_prequel_L786_47", "bloom_prequel_L798_55", "bloom_prequel_L915_91"]


def test_the_fit_verdict_of_every_published_run_matches_what_happened():
    """A run that trained fitted in its GPU's memory; a run reported out of memory did not. parasim's verdict
    must say so for every published row. Before llm-foundry's loss was read as flash-attn's xentropy kernel
    (bf16 logits, no fp32 copies), 52 of its 139 rows were predicted not to fit; before torchtitan's
    op-level selective AC was modelled (recompute 'op'), its Llama-2-70B row was."""
    res, _ = predict_runs(read_runs(SHARED))
    wrong = sorted(r.run_id for r in res.itertuples() if bool(r.feasible) == bool(r.measured_oom))
    assert wrong == [], wrong
    assert len(res) == len(pd.read_csv(SHARED))


def test_llm_foundry_rows_use_flash_attn_cross_entropy():
    row = pd.read_csv(SHARED).query("source_id == 'LLMFOUNDRY'").iloc[0].to_dict()
    training = map_run(row).training
    assert training.cross_entropy == "xentropy"
    from simulator.memory.head_activations import logits_bytes, loss_backward_bytes

    T = int(row["micro_batch"]) * int(row["seq_len"])
    e = training.activation_bytes
    v = map_run(row).model.vocab_size
    assert float(logits_bytes(map_run(row).model, training, tp=1, cp=1, micro_batch_size=int(row["micro_batch"]))) \
        == e * T * v
    assert float(loss_backward_bytes(map_run(row).model, training, tp=1, cp=1,
                                     micro_batch_size=int(row["micro_batch"]))) == e * T * v


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
    assert "max |step error| 25.0% > 20.0%" in capsys.readouterr().err
