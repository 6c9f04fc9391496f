"""The serving sweep (sweep/serving.py, `parasim serve-sweep`): every row is the one inference estimate of
its layout and batch, batches stay within what the KV cache allows, limits and ranking hold."""
import json

import pytest
from click.testing import CliRunner

from simulator.cli import cli, main
from simulator.inference import InferenceSetup, estimate_inference
from simulator.spec.hardware import load_hardware
from simulator.spec.layout import Layout
from simulator.spec.load import load_model
from simulator.spec.training import Training
from simulator.sweep.serving import run_serving_sweep, serving_layouts

H100 = load_hardware("dgx-h100")
M = load_model("llama3-8b")
T = Training(seq_length=2048, global_batch_size=1)


@pytest.fixture(scope="module")
def table():
    return run_serving_sweep(M, T, H100, 8, prompt_tokens=2048, output_tokens=128)


def test_layouts_cover_every_replica_shape_within_a_node():
    shapes = {(lay.tp, lay.pp, lay.dp) for lay in serving_layouts(M, 8, 8)}
    assert shapes == {(1, 1, 8), (1, 2, 4), (1, 4, 2), (1, 8, 1), (2, 1, 4), (2, 2, 2), (2, 4, 1), (4, 1, 2),
                      (4, 2, 1), (8, 1, 1)}
    assert all(lay.tp <= 8 for lay in serving_layouts(M, 16, 8))


def test_rows_are_the_inference_estimate_of_their_layout_and_batch(table):
    for r in table[table.feasible].head(5).itertuples():
        est = estimate_inference(M, T, Layout(num_gpus=8, tp=r.tp, pp=r.pp, dp=r.replicas), H100,
                                 InferenceSetup(batch=r.batch, prompt_tokens=2048, output_tokens=128))
        assert r.tokens_per_s_per_gpu == pytest.approx(est.tokens_per_s_per_gpu, rel=1e-12)
        assert r.batch <= est.max_batch


def test_ranking_puts_feasible_rows_first_by_throughput(table):
    feas = table[table.feasible]
    assert list(table.feasible[:len(feas)]) == [True] * len(feas)
    assert feas.tokens_per_s_per_gpu.is_monotonic_decreasing
    assert list(table["rank"]) == list(range(1, len(table) + 1))


def test_latency_limits_drop_rows_with_the_reason():
    df = run_serving_sweep(M, T, H100, 8, prompt_tokens=2048, output_tokens=128, max_tpot_s=0.006)
    assert (df[df.feasible].time_per_output_token_s <= 0.006).all()
    missed = df[~df.feasible & df.reason.str.startswith("time per output token")]
    assert len(missed) and (missed.time_per_output_token_s > 0.006).all()


def test_cli_json_and_bad_limits(capsys):
    r = CliRunner().invoke(cli, ["serve-sweep", "--model", "llama3-8b", "--hardware", "dgx-h100", "--gpus", "8",
                                 "--seq", "2048", "--global-batch", "1", "--output-tokens", "64", "--top", "3",
                                 "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert len(rows) == 3 and rows[0]["rank"] == 1 and "tokens_per_s_per_gpu" in rows[0]
    with pytest.raises(SystemExit) as e:
        main(["serve-sweep", "--model", "llama3-8b", "--hardware", "dgx-h100", "--gpus", "8", "--seq", "2048",
              "--global-batch", "1", "--max-ttft-ms", "nan"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "--max-ttft-ms" in err[0]
