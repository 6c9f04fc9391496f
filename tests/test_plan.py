"""Run planning over GPU counts and hardware (simulator/plan.py, `parasim plan`): each candidate is the
sweep's best layout of that hardware and GPU count, planned by run_plan; limits, objectives, Dask."""
import json

import pytest

from simulator.cli import main
from simulator.plan import plan_runs
from simulator.run_plan import DAY, checkpoint_bytes, plan_run
from simulator.spec.hardware import load_hardware
from simulator.spec.run import RunSpec
from simulator.spec.scenario import load_scenario
from simulator.sweep import run_sweep
from dataclasses import replace

SC = load_scenario(None, require_layout=False, model="llama3-8b", hardware="dgx-h100", num_gpus=8, seq_length=4096,
                   global_batch_size=64)
SPEC = RunSpec(tokens=1e11, usd_per_gpu_hour=2.0)


@pytest.fixture(scope="module")
def table():
    return plan_runs(SC, SPEC, gpu_counts=[8, 16], hardware_names=["dgx-h100", "dgx-a100-80g"])


def test_each_candidate_is_the_best_layout_of_its_sweep_planned(table):
    assert len(table) == 4
    r = table[(table.hardware == "dgx-a100-80g") & (table.gpus == 16)].iloc[0]
    sc = replace(SC, hardware=load_hardware("dgx-a100-80g"), num_gpus=16)
    best = run_sweep(sc).query("feasible").iloc[0]
    assert r.label == best.label and r.step_s == best.step_s
    tr = SC.training
    p = plan_run(SPEC, step_s=best.step_s, tokens_per_step=tr.tokens_per_step, num_gpus=16,
                 gpus_per_node=sc.hardware.gpus_per_node, hardware=sc.hardware,
                 ckpt_bytes=checkpoint_bytes(SC.model.total_params(), tr.param_bytes, tr.optimizer_bytes))
    assert r.days == pytest.approx(p.wall_s / DAY, rel=1e-12) and r.usd == pytest.approx(p.usd, rel=1e-12)


def test_ranked_by_cost_then_limits_mark_candidates_with_the_reason(table):
    assert table.attrs["ranked_by"] == "usd" and table.usd.is_monotonic_increasing
    fastest = table.days.min()
    limited = plan_runs(SC, SPEC, gpu_counts=[8, 16], hardware_names=["dgx-h100", "dgx-a100-80g"],
                        max_days=fastest * 1.0001)
    assert limited.feasible.sum() == 1 and limited.iloc[0].days == fastest
    assert limited[~limited.feasible].reason.str.startswith("days ").all()


def test_objective_days_and_no_price_ranks_by_gpu_hours():
    days = plan_runs(SC, SPEC, gpu_counts=[8, 16], hardware_names=["dgx-h100"], objective="days")
    assert days.attrs["ranked_by"] == "days" and days.days.is_monotonic_increasing
    free = plan_runs(SC, RunSpec(tokens=1e11), gpu_counts=[8, 16], hardware_names=["dgx-h100"])
    assert free.attrs["ranked_by"] == "gpu_hours" and free.usd.isna().all()


def test_dask_gives_the_same_plan(table):
    pytest.importorskip("distributed")
    d = plan_runs(SC, SPEC, gpu_counts=[8], hardware_names=["dgx-h100"], executor="dask", workers=2)
    local = table[(table.hardware == "dgx-h100") & (table.gpus == 8)]
    cols = ["label", "step_s", "days", "gpu_hours", "usd"]
    assert d[cols].to_dict("records") == local[cols].to_dict("records")


def test_cli_plan_json_and_one_line_errors(capsys):
    with pytest.raises(SystemExit) as e:
        main(["plan", "--model", "llama3-8b", "--hardware", "dgx-h100", "--seq", "4096", "--global-batch", "64",
              "--tokens", "1e11", "--gpu-counts", "8,16", "--format", "json"])
    assert e.value.code == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"rank", "hardware", "gpus", "label", "days", "gpu_hours", "usd", "energy_mwh", "feasible"} <= set(rows[0])
    for args, needle in ((["--gpu-counts", "8,x"], "--gpu-counts"), (["--gpu-counts", "8"], "--tokens")):
        with pytest.raises(SystemExit) as e:
            main(["plan", "--model", "llama3-8b", "--hardware", "dgx-h100", "--seq", "4096", "--global-batch", "64",
                  *(["--tokens", "1e11"] if needle != "--tokens" else []), *args])
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1 and needle in err[0], err
