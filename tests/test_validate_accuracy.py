"""docs/accuracy.md and docs/validation-h100.md generation (validation/make_accuracy.py, h100_report.py), with
the validated-error data file they write, and the real-run harness on the CPU."""
import importlib.util
import types
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load(name):
    spec = importlib.util.spec_from_file_location(f"validation_{name}", ROOT / "validation" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    import sys

    sys.modules[f"validation_{name}"] = mod  # dataclasses look their module up in sys.modules
    spec.loader.exec_module(mod)
    return mod


def _stand_in(model, training, layout, hardware):
    step = 1.0 * model.num_layers
    worst = types.SimpleNamespace(peak_bytes=4.0 * 2**30 * model.num_layers, overhead_bytes=0.5 * 2**30,
                                  params_bytes=1.0, grads_bytes=2.0, optimizer_bytes=3.0, activations_bytes=4.0)
    return types.SimpleNamespace(step_s=step, tokens_per_s=training.tokens_per_step / step, feasible=True, reason="",
                                 row={"compute_s": step, "optimizer_s": 0.25 * step},
                                 memory=types.SimpleNamespace(peak_bytes=4.0 * 2**30 * model.num_layers, worst=worst))


def _check_validated_error(script, groups):
    # the generator's groups of the committed simulator/data/validated_error.json are what it writes now,
    # and the file is in its canonical form (the other generator's groups kept as they are)
    from simulator.validate import validated_error as ve

    assert ve.DATA.read_text() == ve.merged_text(script, groups)
    assert groups and all(g["generator"] == script for g in groups)


def test_accuracy_doc_regenerates_identically():
    # every published row through map_run + estimate (~20 s on 2 cores): the committed doc and its
    # validated-error groups must be what the generator writes now (the numbers of the current simulator)
    mk = _load("make_accuracy")
    text, groups = mk.build()
    assert (ROOT / "docs" / "accuracy.md").read_text() == text
    assert (ROOT / "README.md").read_text() == mk.readme_text(text)  # its copy of the step-time table
    _check_validated_error("validation/make_accuracy.py", groups)
    # one group per (hardware, stack, source): LLMFOUNDRY ran FSDP on both A100 sizes
    assert {(g["hardware"], g["stack"]) for g in groups if g["source"] == "LLMFOUNDRY"} == \
        {("dgx-a100-40g", "fsdp"), ("dgx-a100-80g", "fsdp")}
    # every compared row is in a group, but those of sources whose GPUs the preset only approximates
    from simulator.validate.sources import SOURCE_RULES

    modified = [s for s, r in SOURCE_RULES.items() if r.hardware_overrides]
    left_out = sum(int(text.split(f"| {s} | ")[1].split(" |")[0]) for s in modified if f"| {s} | " in text)
    assert sum(g["step"]["runs"] for g in groups) == int(text.split("| **all** | ")[1].split(" |")[0]) - left_out
    for section in ("### Step time", "### Peak memory per GPU", "## What the errors say", "## Assumptions by source",
                    "## Measured quantities and FLOP conventions", "## Runs that went out of memory",
                    "## GEMMs off the tensor cores' alignment"):
        assert section in text
    # the BLOOM pair that differs only in 64 vs 128 heads (head dim 216 vs 108): measured 147.4 / 103.5 s
    assert "| bloom_prequel_L828_63 | attn_scores k=108; attn_context n=108 | bloom_prequel_L828_61 | 1.424 |" in text
    # every row maps (tests/test_validate.py), torchtitan's interleaved 405B run too (126 layers over 16 stages in
    # torchtitan's own uneven split) and NVIDIA's DeepSeek-V3 recipe (its multi-token-prediction module modelled)
    assert "## Rows not compared" not in text


def test_accuracy_tables_show_per_row_and_summary_errors():
    from simulator.validate import predict_runs, read_runs

    mk = _load("make_accuracy")
    df = read_runs(ROOT / "tests" / "data" / "validate" / "runs_fixture.csv")
    res, skipped = predict_runs(df, estimate_fn=_stand_in)
    text = mk.render(res, skipped, {"FIXTURE": "hand-made"}, df=df)
    assert text == mk.render(res, skipped, {"FIXTURE": "hand-made"}, df=df)  # deterministic
    # step: median |error| 20 %, max 25 %, mean (-20 + 25 + 0)/3 = +1.7 %, Spearman 0.5 (test_validate.py)
    assert "| FIXTURE | 3 | 20.0 % | 25.0 % | +1.7 % | 0.500 |" in text
    # memory: |-20 %|, |+25 %| -> median 22.5 %, max 25 %, mean +2.5 %; predicted 32 < 80 GiB and
    # measured 40 < 64 GiB rank alike -> Spearman 1
    assert "| FIXTURE | 2 | 22.5 % | 25.0 % | +2.5 % | 1.000 |" in text
    # the fixture's derived row is labelled as such in the conventions table
    assert "derived (not measured): FLOPs / (TFLOP/s x GPUs)" in text
    assert "| fx_derived | GPT-like c | TP1-CP1-PP1-DP8 | dgx-a100-80g | 20.000 † | 20.000 | +0.0 % |" in text
    assert "| fx_skip_gpu | FIXTURE | no hardware preset for gpu_type 'V100-SXM2-32GB' |" in text


def test_h100_validation_doc_regenerates_identically():
    # the lent H100's measured training steps (validation/h100/) through compare_train_steps: the committed
    # doc must be what the generator writes now, so its error tables are those of the current simulator
    rep = _load("h100_report")
    text, groups = rep.build()
    assert (ROOT / "docs" / "validation-h100.md").read_text() == text
    assert (ROOT / "README.md").read_text() == rep.readme_text(text)  # its copy of the shipped preset's rows
    _check_validated_error("validation/h100_report.py", groups)
    # the shipped presets, the primary and held-out grids pooled (24 + 16 runs), the harness's stack
    assert [(g["hardware"], g["stack"], g["step"]["runs"], g["memory"]["runs"]) for g in groups] == \
        [("dgx-h100", "torchtitan", 40, 40), ("dgx-h100-datasheet", "torchtitan", 40, 40)]
    assert "| grid, fused AdamW, persistent grads | calibrated (lent.toml) | 24 |" in text
    assert "| held-out grid, fused AdamW, persistent grads | calibrated (lent.toml) | 16 |" in text


def test_train_step_harness_runs_one_tiny_config_and_matches_parasim_param_count(tmp_path):
    pytest.importorskip("torch")
    ts = _load("train_step")
    cmp = _load("compare_train_steps")
    cfg = ts.StepConfig(layers=2, hidden=64, heads=4, kv_heads=2, ffn=160, vocab=256, seq=32, micro_batch=2,
                        dtype="fp32", recompute="selective")
    out = tmp_path / "runs.csv"
    assert ts.main(["--layers", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "160", "--vocab", "256",
                    "--seq", "32", "--micro-batch", "2", "--recompute", "selective", "--device", "cpu", "--warmup", "1",
                    "--steps", "2", "--out", str(out)]) == 0
    df = pd.read_csv(out)
    r = df.iloc[0]
    assert r.status == "ok" and r.run_id == cfg.run_id and r.step_time_s > 0
    model, training, layout = cmp.specs_for_row(r)
    assert r.params == model.total_params()  # torch numel == parasim's closed-form count
    # CPU memory: parameters + grads + AdamW (2 states) = 4 x params x 4 B, plus saved activations
    assert r.peak_mem_bytes > 4 * 4 * r.params
    res = cmp.compare(df, hardware=None, estimate_fn=_stand_in)
    assert res.loc[0, "params_match"] and res.loc[0, "predicted_step_s"] == 2.0
    # memory on the allocator's basis: the device peak less the runtime overheads torch never allocates
    assert res.loc[0, "predicted_device_bytes"] == 8.0 * 2**30 and res.loc[0, "predicted_mem_bytes"] == 7.5 * 2**30
    # phases: forward + backward against compute less the optimizer step; the measured columns are the row's
    assert res.loc[0, "predicted_fwd_bwd_s"] == 1.5 and res.loc[0, "predicted_opt_s"] == 0.5
    assert res.loc[0, "measured_fwd_bwd_s"] == r.fwd_time_s + r.bwd_time_s and res.loc[0, "predicted_state_bytes"] == 6.0
    # fp32 parameters, gradients and two AdamW moments (16 B each), plus one 4-byte step count per parameter
    # tensor: embedding, final norm, head and 6 per layer (2 norms, qkv, o, gate_up, down) = 15
    assert res.loc[0, "measured_state_bytes"] == r.state_bytes == 16 * r.params + 4 * 15


def test_full_recompute_saves_less_than_none_on_cpu():
    pytest.importorskip("torch")
    ts = _load("train_step")
    kw = dict(layers=4, hidden=64, heads=4, kv_heads=4, ffn=160, vocab=128, seq=64, micro_batch=2, dtype="fp32")
    none = ts.run_config(ts.StepConfig(**kw), warmup=0, steps=1)
    full = ts.run_config(ts.StepConfig(**kw, recompute="full"), warmup=0, steps=1)
    assert full["params"] == none["params"] and full["peak_mem_bytes"] < none["peak_mem_bytes"]


def test_train_step_refuses_unknown_optimizer_and_gradient_modes():
    pytest.importorskip("torch")
    ts = _load("train_step")
    cfg = ts.CPU_GRID[0]
    with pytest.raises(ValueError, match="optimizer_impl must be one of fused, foreach, got 'apex'"):
        ts.run_config(cfg, optimizer_impl="apex")
    with pytest.raises(ValueError, match="grad_buffer must be one of persistent, set-to-none, got 'zero'"):
        ts.run_config(cfg, grad_buffer="zero")
