"""Run planning (simulator/run_plan.py, spec/run.py, `estimate --tokens`): closed forms on hand-worked cases,
the checkpoint and failure allowance, the defaults against the paper they come from, the CLI's JSON keys
(DESIGN.md: run.steps, run.days, run.gpu_hours, run.usd, run.energy_mwh) and bad inputs."""
import json
import math

import pytest

from simulator.cli import main
from simulator.errors import InputError
from simulator.run_plan import (checkpoint_bytes, checkpoint_write_s, energy_mwh, plan_run, steps_for_tokens,
                                wall_clock, young_interval_s)
from simulator.spec.hardware import hardware_from_dict, load_hardware
from simulator.spec.presets import read_toml, resolve
from simulator.spec.run import CHECKPOINT_WRITE_GB_PER_S, MTBF_GPU_H, RunSpec

SMALL = ["estimate", "--model", "llama3-8b", "--hardware", "dgx-h100", "--gpus", "8", "--tp", "8", "--seq", "4096",
         "--global-batch", "64"]  # 64 x 4096 = 262,144 tokens per step


def run(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


# ---- closed forms ------------------------------------------------------------------------------------
@pytest.mark.parametrize("tokens,per_step,steps", [
    (1000.0, 100, 10),  # exactly 10 batches
    (1001.0, 100, 11),  # one token more: one more whole batch
    (15e12, 8192 * 512, 3_576_279),  # 15e12 / 4,194,304 = 3,576,278.69 -> 3,576,279
    (1e18, 3, 333_333_333_333_333_334),  # exact in integers at the limit (ceil of the float quotient: ...312)
])
def test_steps_are_the_ceiling_of_tokens_over_tokens_per_step(tokens, per_step, steps):
    assert steps_for_tokens(tokens, per_step) == steps


def test_checkpoint_holds_weights_and_optimizer_state_once():
    # 70e9 params x (2 bytes bf16 weights + 12 bytes fp32 master + Adam m, v) = 980e9 bytes
    assert checkpoint_bytes(70e9, 2, 12) == 980e9


@pytest.mark.parametrize("gpus,nodes", [(64, 8), (9, 2), (1, 1)])
def test_checkpoint_write_is_shared_by_the_nodes(gpus, nodes):
    # 980e9 bytes at 1e9 B/s per node over ceil(gpus / 8) nodes
    assert checkpoint_write_s(980e9, gpus, 8, 1e9) == pytest.approx(980.0 / nodes)


def test_young_interval():
    # sqrt(2 x 50 s x 10,000 s) = 1,000 s
    assert young_interval_s(50.0, 10_000.0) == pytest.approx(1000.0)


def test_wall_clock_against_hand_computed_allowance():
    # T = 10,000 s, tau = 1,000 s, delta = 50 s, R = 600 s, M = 100,000 s:
    # 10 checkpoints -> T0 = 10,500 s; loss per interruption c = 600 + (1,000 + 50) / 2 = 1,125 s;
    # T_wall = 10,500 / (1 - 1,125 / 100,000) = 10,500 / 0.98875 = 10,619.469 s; interruptions = T_wall / M
    got = wall_clock(10_000.0, 1_000.0, 50.0, 600.0, 100_000.0)
    assert got["checkpoints"] == 10 and got["checkpoint_s"] == 500.0
    assert got["wall_s"] == pytest.approx(10_619.4690265, rel=1e-9)
    assert got["interruptions"] == pytest.approx(0.106194690265, rel=1e-9)
    assert got["failure_s"] == pytest.approx(119.4690265, rel=1e-8)


def test_a_run_shorter_than_the_interval_loses_at_most_half_of_itself():
    # T = 100 s < tau: no checkpoint; c = 10 + (100 + 5) / 2 = 62.5 s; T_wall = 100 / (1 - 62.5 / 1e4)
    got = wall_clock(100.0, 1_000.0, 5.0, 10.0, 1e4)
    assert got["checkpoints"] == 0
    assert got["wall_s"] == pytest.approx(100.0 / (1 - 62.5 / 1e4))


def test_a_run_that_loses_more_than_it_gains_is_refused():
    with pytest.raises(InputError, match="never finishes"):
        wall_clock(1e6, 3600.0, 60.0, 600.0, 1800.0)  # c = 600 + 1830 s > M = 1,800 s


def test_energy_in_mwh():
    # 512 GPUs x 700 W x 86,400 s = 3.0966e10 J = 8.6016 MWh
    assert energy_mwh(512, 700.0, 86_400.0) == pytest.approx(8.6016)


def test_plan_without_failures_or_checkpoints_is_steps_times_step_time():
    # 8.64e9 tokens / 1e6 per step = 8,640 steps x 10 s = 86,400 s = 1 day on 8 GPUs: 192 GPU-hours,
    # $384 at $2; 8 x 700 W x 1 day = 0.1344 MWh. MTBF 1e12 GPU-h and a 1e6 h interval: no allowance to speak of.
    spec = RunSpec(tokens=8.64e9, usd_per_gpu_hour=2.0, mtbf_gpu_h=1e12, checkpoint_interval_h=1e6,
                   board_power_w=700.0)
    d = plan_run(spec, step_s=10.0, tokens_per_step=1_000_000, num_gpus=8, gpus_per_node=8,
                 ckpt_bytes=1e9).to_dict()
    assert d["steps"] == 8640 and d["checkpoints"] == 0
    assert d["days"] == pytest.approx(1.0, rel=1e-6)
    assert d["gpu_hours"] == pytest.approx(192.0, rel=1e-6)
    assert d["usd"] == pytest.approx(384.0, rel=1e-6)
    assert d["energy_mwh"] == pytest.approx(0.1344, rel=1e-6)
    assert d["notes"] == {} and d["assumptions"]["price_source"] == "given"


def test_plan_composes_checkpoints_and_failures():
    # 1,000 steps x 10 s = 10,000 s; 16 GPUs = 2 nodes; checkpoint 100e9 B at 1 GB/s per node = 50 s;
    # interval 1,000 s / 3600 h; MTBF 16 x 100,000 s / 3600 -> job MTBF 100,000 s; restart 10 min:
    # the hand-worked case of test_wall_clock_against_hand_computed_allowance
    spec = RunSpec(tokens=1e9, checkpoint_interval_h=1000 / 3600, mtbf_gpu_h=16 * 100_000 / 3600, restart_min=10,
                   checkpoint_write_gb_per_s=1.0)
    p = plan_run(spec, step_s=10.0, tokens_per_step=1_000_000, num_gpus=16, gpus_per_node=8, ckpt_bytes=100e9)
    assert p.checkpoint_write_s == pytest.approx(50.0)
    assert p.wall_s == pytest.approx(10_619.4690265, rel=1e-9)
    assert p.gpu_hours == pytest.approx(16 * 10_619.4690265 / 3600, rel=1e-9)
    assert p.usd is None and p.energy_mwh is None  # no price, no hardware profile
    assert set(p.to_dict()["notes"]) == {"usd", "energy_mwh"}


# ---- defaults and their sources ----------------------------------------------------------------------
def test_default_mtbf_gives_llama3s_failure_every_three_hours():
    # 16,384 x 54 x 24 / 419 = 50,677 GPU-hours; at 16,384 GPUs one interruption per 3.09 h (the paper: "3 h")
    assert MTBF_GPU_H == pytest.approx(50_677.0, abs=0.5)
    assert MTBF_GPU_H / 16_384 == pytest.approx(54 * 24 / 419)


def test_default_write_bandwidth_is_llama3s_storage_over_its_nodes():
    assert CHECKPOINT_WRITE_GB_PER_S == pytest.approx(2000 / 2048)  # 2 TB/s over 16,384 / 8 nodes


@pytest.mark.parametrize("preset,watts", [("dgx-a100-40g", 400), ("dgx-a100-80g", 400), ("dgx-h100", 700),
                                          ("dgx-h100-datasheet", 700), ("dgx-h800", 700), ("dgx-h200", 700),
                                          ("dgx-b200", 1000), ("gb200-nvl72", 1200), ("mi300x", 750),
                                          ("aws-p6-b200", 1000), ("gcp-a3-mega", 700)])
def test_presets_carry_datasheet_board_power_with_a_source(preset, watts):
    hw = load_hardware(preset)
    assert hw.board_power_w == watts and hw.sources["board_power_w"]
    assert hw.usd_per_gpu_hour is None  # no preset price (docs/planning.md)


def _h100_table(**gpu) -> dict:
    d = read_toml(resolve("hardware_profiles", "dgx-h100"))
    d["gpu"] = {**d["gpu"], **gpu}
    return {k: v for k, v in d.items() if k != "provenance"}


def test_a_profile_price_is_used_with_its_source():
    hw = hardware_from_dict(_h100_table(usd_per_gpu_hour=3.0, price_source="my contract"), where="t.toml")
    p = plan_run(RunSpec(tokens=1e9), step_s=1.0, tokens_per_step=10**6, num_gpus=8, gpus_per_node=8,
                 ckpt_bytes=1e9, hardware=hw)
    assert p.usd == pytest.approx(3.0 * p.gpu_hours)
    assert "my contract" in p.assumptions["price_source"]


@pytest.mark.parametrize("gpu,needle", [
    ({"board_power_source": None, "board_power_w": 700}, "board_power_source"),  # a value without its source
    ({"usd_per_gpu_hour": 0, "price_source": "x"}, "usd_per_gpu_hour"),
    ({"board_power_w": -700}, "board_power_w"),
    ({"price_source": "x"}, "usd_per_gpu_hour"),  # a source without its value
])
def test_bad_profile_run_keys_are_refused(gpu, needle):
    table = _h100_table(**{k: v for k, v in gpu.items() if v is not None})
    if gpu.get("board_power_source", "") is None:
        table["gpu"].pop("board_power_source")
    with pytest.raises(InputError, match=needle):
        hardware_from_dict(table, where="t.toml")


# ---- the command line --------------------------------------------------------------------------------
def test_estimate_json_has_the_contract_keys_and_they_add_up(capsys):
    code, out, err = run(SMALL + ["--tokens", "1e9", "--usd-per-gpu-hour", "2", "--format", "json"], capsys)
    assert (code, err) == (0, "")
    r = json.loads(out)["run"]
    assert r["steps"] == math.ceil(1e9 / 262_144) == 3815
    assert r["gpu_hours"] == pytest.approx(8 * r["days"] * 24)
    assert r["usd"] == pytest.approx(2 * r["gpu_hours"])
    assert r["energy_mwh"] == pytest.approx(8 * 700 * r["days"] * 86_400 / 3.6e9)  # dgx-h100: 700 W
    assert r["days"] >= r["train_days"] and r["assumptions"]["mtbf_gpu_h"] == pytest.approx(MTBF_GPU_H)


def test_no_price_gives_null_usd_with_a_note(capsys):
    code, out, _ = run(SMALL + ["--tokens", "1e9", "--format", "json"], capsys)
    r = json.loads(out)["run"]
    assert code == 0 and r["usd"] is None and "--usd-per-gpu-hour" in r["notes"]["usd"]


def test_table_prints_the_run_with_its_assumptions(capsys):
    code, out, _ = run(SMALL + ["--tokens", "1e9", "--usd-per-gpu-hour", "2"], capsys)
    assert code == 0
    for needle in ("run ", "wall clock", "GPU-hours", "cost", "energy", "Llama 3", "Young 1974"):
        assert needle in out, needle


def test_scenario_run_table_and_flags_on_top(tmp_path, capsys):
    p = tmp_path / "s.toml"
    p.write_text('[model]\npreset = "llama3-8b"\n[hardware]\npreset = "dgx-h100"\nnum_gpus = 8\n'
                 '[training]\nseq_length = 4096\nglobal_batch_size = 64\n[layout]\ntp = 8\n'
                 '[run]\ntokens = 1e9\nusd_per_gpu_hour = 2.0\n')
    code, out, _ = run(["estimate", str(p), "--format", "json"], capsys)
    assert code == 0 and json.loads(out)["run"]["usd"] == pytest.approx(2 * json.loads(out)["run"]["gpu_hours"])
    code, out, _ = run(["estimate", str(p), "--format", "json", "--usd-per-gpu-hour", "3"], capsys)
    r = json.loads(out)["run"]
    assert code == 0 and r["usd"] == pytest.approx(3 * r["gpu_hours"])


@pytest.mark.parametrize("flag", ["--tokens", "--usd-per-gpu-hour", "--checkpoint-interval-h", "--mtbf-gpu-h",
                                  "--restart-min", "--checkpoint-write-gb-per-s", "--board-power-w"])
@pytest.mark.parametrize("value", ["-1", "0", "nan", "1e400", "inf", "fast"])
def test_bad_flag_values_exit_2_naming_flag_and_value(flag, value, capsys):
    extra = [] if flag == "--tokens" else ["--tokens", "1e9"]
    code, out, err = run(SMALL + extra + [flag, value], capsys)
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert flag in lines[0] and value in lines[0], lines[0]


def test_too_many_tokens_is_refused(capsys):
    code, _, err = run(SMALL + ["--tokens", "2e18"], capsys)
    assert code == 2 and "--tokens" in err and "2e18" in err


def test_run_flags_without_tokens_are_refused(capsys):
    code, _, err = run(SMALL + ["--usd-per-gpu-hour", "2"], capsys)
    assert code == 2 and "--usd-per-gpu-hour" in err and "--tokens" in err


@pytest.mark.parametrize("body,needles", [
    ("tokens = -1", ["tokens", "-1"]),
    ("tokens = nan", ["tokens", "nan"]),
    ("tokens = 1e400", ["tokens", "inf"]),  # TOML reads 1e400 as inf
    ("tokens = 1e9\nmtbf_gpu_h = 0", ["mtbf_gpu_h", "0"]),
    ('tokens = "lots"', ["tokens", "lots"]),
    ("tokens = 1e9\nusd_per_gpu_hr = 2", ["usd_per_gpu_hr", "usd_per_gpu_hour"]),  # a typo: the closest key
    ("usd_per_gpu_hour = 2", ["tokens"]),  # [run] without tokens
])
def test_bad_run_table_exits_2_naming_the_key(tmp_path, capsys, body, needles):
    p = tmp_path / "s.toml"
    p.write_text('[model]\npreset = "llama3-8b"\n[hardware]\npreset = "dgx-h100"\nnum_gpus = 8\n'
                 f'[training]\nseq_length = 4096\nglobal_batch_size = 64\n[layout]\ntp = 8\n[run]\n{body}\n')
    code, _, err = run(["estimate", str(p)], capsys)
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1 and "[run]" in lines[0], err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_a_layout_that_does_not_fit_is_planned_and_says_so(capsys):
    # llama3-8b on one 80 GB GPU: 8e9 x 18 bytes of model state alone exceed the HBM
    args = ["estimate", "--model", "llama3-8b", "--hardware", "dgx-h100", "--gpus", "1", "--seq", "4096",
            "--global-batch", "8", "--tokens", "1e9"]
    code, out, _ = run(args + ["--format", "json"], capsys)
    d = json.loads(out)
    assert code == 0 and d["feasible"] is False and "does NOT fit" in d["run"]["notes"]["layout"]
    code, out, _ = run(args, capsys)
    assert "NOTE" in out and "cannot run" in out
