"""The slowest of n GPUs (cost/variability.py): the order statistic against its closed forms, and the step's
compute at the slowest GPU's pace, exactly and nowhere else."""
import math
from dataclasses import replace
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest

from simulator.cost.variability import expected_max_standard_normal, slowest_gpu_factor
from simulator.errors import InputError
from simulator.estimate import estimate, estimate_scenario
from simulator.kernel import evaluate_layouts
from simulator.options import EstimateOptions
from simulator.spec.hardware import load_hardware
from simulator.spec.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent


def test_expected_maximum_against_exact_order_statistics():
    # E[max of 2] = 1/sqrt(pi), E[max of 3] = 3/(2 sqrt(pi)), E[max of 4] = 3/(2 sqrt(pi)) (1 + 2/pi·asin(1/3)),
    # E[max of 1] = 0 (David & Nagaraja, Order Statistics, §3.2); Blom's approximation within 0.02 beyond
    e = expected_max_standard_normal(np.array([1, 2, 3, 4]))
    assert e[0] == 0.0
    assert e[1] == pytest.approx(1 / math.sqrt(math.pi), abs=1e-7)
    assert e[2] == pytest.approx(1.5 / math.sqrt(math.pi), abs=1e-7)
    assert e[3] == pytest.approx(1.5 / math.sqrt(math.pi) * (1 + 2 / math.pi * math.asin(1 / 3)), abs=1e-7)
    big = np.array([16, 128, 1024, 16384])
    blom = [NormalDist().inv_cdf((n - 0.375) / (n + 0.25)) for n in big]
    assert np.all(np.abs(expected_max_standard_normal(big) - blom) < 0.02)
    assert np.all(np.diff(expected_max_standard_normal(np.arange(1, 600))) > 0)  # the slowest of more is slower


def test_factor_is_one_without_a_spread_or_with_one_gpu():
    assert np.all(slowest_gpu_factor(0.0, np.array([1, 8, 4096])) == 1.0)
    assert slowest_gpu_factor(0.05, 1) == 1.0
    assert slowest_gpu_factor(0.02, 8) == pytest.approx(1 + 0.02 * 1.42360031, rel=1e-7)


@pytest.mark.parametrize("name, stack", [("llama3-8b-8xh100.toml", None), ("llama3-70b-512xh100.toml", None),
                                         ("llama3-8b-8xh100.toml", "torchtitan")])  # (FSDP2's copies: compute)
def test_compute_runs_at_the_slowest_gpus_pace_and_nothing_else_moves(name, stack):
    # compute_s − contention_s = the busiest rank's F + B + W + optimizer: all GPU compute, scaled by exactly
    # 1 + σ·E[max of n]; no communication grows, and the memory does not change
    sc = load_scenario(ROOT / "scenarios" / name, stack=stack)
    assert stack is None or sc.training.stack.fsdp_copies
    a = estimate_scenario(sc).to_dict()
    b = estimate_scenario(sc, options=EstimateOptions(gpu_speed_cv=0.03)).to_dict()
    n = sc.layout.num_gpus
    f = 1 + 0.03 * float(expected_max_standard_normal(n))
    ta, tb = a["time"], b["time"]
    assert tb["slowest_gpu_factor"] == pytest.approx(f, rel=1e-12) and ta["slowest_gpu_factor"] == 1.0
    assert (tb["compute_s"] - tb["contention_s"]) == pytest.approx(f * (ta["compute_s"] - ta["contention_s"]),
                                                                   rel=1e-9)
    assert tb["optimizer_s"] == pytest.approx(f * ta["optimizer_s"], rel=1e-12)
    for g, hid in ta["hidden_comm_by_group_s"].items():  # the same collectives; longer compute hides more of them
        assert tb["hidden_comm_by_group_s"][g] >= hid * (1 - 1e-12)
        assert tb["exposed_comm_by_group_s"][g] <= ta["exposed_comm_by_group_s"][g] * (1 + 1e-12)
    assert tb["step_s"] > ta["step_s"] and b["memory"] == a["memory"]
    assert tb["step_s"] == pytest.approx(tb["compute_s"] + tb["exposed_comm_s"] + tb["bubble_s"], rel=1e-12)


def test_the_default_is_the_profiles_and_zero():
    sc = load_scenario(ROOT / "scenarios" / "llama3-8b-8xh100.toml")
    assert sc.hardware.gpu_speed_cv == 0.0
    assert estimate_scenario(sc).to_dict()["time"] == \
        estimate_scenario(sc, options=EstimateOptions(gpu_speed_cv=0.0)).to_dict()["time"]


def test_a_profiles_speed_cv_reaches_sweep_rows_and_estimate_alike(tmp_path):
    src = (ROOT / "hardware_profiles" / "dgx-h100.toml").read_text()
    assert "[gpu]" in src and "speed_cv" not in src
    p = tmp_path / "spread.toml"
    p.write_text(src.replace("[gpu]\n", "[gpu]\nspeed_cv = 0.04\n", 1))
    hw = load_hardware(str(p))
    assert hw.gpu_speed_cv == 0.04
    sc = load_scenario(ROOT / "scenarios" / "llama3-70b-64xh100.toml")
    lay = sc.layout
    rows = evaluate_layouts(sc.model, sc.training, hw, num_gpus=lay.num_gpus, tp=np.array([lay.tp, 8]),
                            pp=np.array([lay.pp, lay.pp]), dp=np.array([lay.dp, lay.num_gpus // (8 * lay.pp)]),
                            micro_batch_size=lay.micro_batch_size, zero=lay.zero, recompute=lay.recompute,
                            schedule=lay.schedule, vpp=lay.vpp, sequence_parallel=lay.sequence_parallel)
    one = estimate(sc.model, sc.training, lay, hw)
    assert rows["step_s"].iloc[0] == pytest.approx(one.step_s, rel=1e-12)
    base = estimate(sc.model, sc.training, lay, replace(hw, gpu_speed_cv=0.0))
    assert one.step_s > base.step_s


@pytest.mark.parametrize("key, value", [("compute_slowdown_under_comm", 1.5), ("compute_slowdown_under_comm", -0.1),
                                        ("compute_slowdown_under_comm", "0.2")])
def test_a_bad_contention_fraction_is_one_line(tmp_path, key, value):
    # the profile's other fraction, under the same rule (spec/rules.py check_fraction); 1.0 is allowed there
    src = (ROOT / "hardware_profiles" / "dgx-h100.toml").read_text()
    p = tmp_path / "bad.toml"
    p.write_text(src.replace("[gpu]\n", f"[gpu]\n{key} = {value!r}\n".replace("'", '"'), 1))
    with pytest.raises(InputError) as e:
        load_hardware(str(p))
    assert f"gpu.{key} must be in [0, 1]" in str(e.value) and "\n" not in str(e.value)
    p.write_text(src.replace("[gpu]\n", f"[gpu]\n{key} = 1.0\n", 1))
    assert load_hardware(str(p)).compute_slowdown_under_comm == 1.0


@pytest.mark.parametrize("value", [-0.1, 1.0, 2, "0.02", True])
def test_bad_speed_cv_is_one_line(tmp_path, value):
    src = (ROOT / "hardware_profiles" / "dgx-h100.toml").read_text()
    p = tmp_path / "bad.toml"
    p.write_text(src.replace("[gpu]\n", f"[gpu]\nspeed_cv = {value!r}\n".replace("'", '"').replace("True", "true"),
                             1))
    with pytest.raises(InputError) as e:
        load_hardware(str(p))
    assert "gpu.speed_cv" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(InputError):
        EstimateOptions(gpu_speed_cv=value)


def test_the_estimate_flag_sets_it():
    import json

    from click.testing import CliRunner

    from simulator.cli import cli as main

    scen = str(ROOT / "scenarios" / "llama3-8b-8xh100.toml")
    r = CliRunner().invoke(main, ["estimate", scen, "--gpu-speed-cv", "0.02", "--format", "json"])
    assert r.exit_code == 0, r.output
    t = json.loads(r.output)["time"]
    assert t["gpu_speed_cv"] == 0.02 and t["slowest_gpu_factor"] == pytest.approx(1 + 0.02 * 1.42360031, rel=1e-7)
    table = CliRunner().invoke(main, ["estimate", scen, "--gpu-speed-cv", "0.02"]).output
    assert "at the slowest of 8 GPUs: x1.0285" in table
    assert "slowest" not in CliRunner().invoke(main, ["estimate", scen]).output
    # (bad values: tests/test_flags_bad_values.py)


def test_sweep_and_plan_take_the_flag_and_agree_with_estimate(capsys):
    # the sweep's winner with --gpu-speed-cv times as `estimate --gpu-speed-cv` times the same layout; a plan's
    # days grow with it
    import json

    from simulator.cli import main

    def run(args):
        with pytest.raises(SystemExit) as e:
            main(args)
        assert e.value.code == 0
        return capsys.readouterr().out

    scen = str(ROOT / "scenarios" / "llama3-8b-8xh100.toml")
    top = json.loads(run(["sweep", scen, "--top", "1", "--no-progress", "--format", "json", "--gpu-speed-cv",
                          "0.03"]))[0]
    lay = ["--tp", str(top["tp"]), "--pp", str(top["pp"]), "--cp", str(top["cp"]), "--zero", str(top["zero"]),
           "--micro-batch", str(top["micro_batch_size"]), "--recompute", top["recompute"]]
    est = json.loads(run(["estimate", scen, *lay, "--gpu-speed-cv", "0.03", "--format", "json"]))["time"]
    assert est["step_s"] == pytest.approx(top["step_s"], rel=1e-9)
    plain = json.loads(run(["estimate", scen, *lay, "--format", "json"]))["time"]
    assert est["step_s"] > plain["step_s"]
    plan = ["plan", scen, "--tokens", "1e12", "--gpu-counts", "64", "--format", "json"]
    days = [json.loads(run([*plan, *cv]))[0]["days"] for cv in ([], ["--gpu-speed-cv", "0.03"])]
    assert days[1] > days[0]
