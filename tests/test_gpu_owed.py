"""The owed one-GPU measurement scripts (validation/gpu_owed.py, validation/idle_gaps.py): a CPU dry run of every
stage, and the idle-gap split checked on a hand-made trace whose answer is known."""
import csv
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))


def _k(ts, dur, corr, stream=7):
    return {"ph": "X", "cat": "kernel", "name": f"k{corr}", "ts": ts, "dur": dur,
            "args": {"correlation": corr, "stream": stream}}


def _rt(name, ts, dur, corr=None):
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "ts": ts, "dur": dur, "args": {"correlation": corr}}


def test_idle_split_on_a_known_trace():
    import idle_gaps

    trace = {"traceEvents": [
        _rt("cudaLaunchKernel", -5, 2, 1), _k(0, 10, 1),
        # the GPU runs dry at 10; the host sits in a stream sync until 12, then in aten::item until the launch at 15
        {"ph": "X", "cat": "cpu_op", "name": "aten::item", "ts": 8, "dur": 7},
        _rt("cudaStreamSynchronize", 9, 3),
        _rt("cudaLaunchKernel", 15, 3, 2), _k(20, 10, 2),  # starts 5 us after its launch began
        _rt("cudaLaunchKernel", 16, 2, 3), _k(25, 10, 3, stream=8),  # overlaps on another stream: busy to 35
        _rt("cudaLaunchKernel", 30, 2, 4), _k(35.5, 10, 4),  # a 0.5 us gap: idle, below the split threshold
        {"ph": "i", "cat": "kernel", "name": "instant", "ts": 50},  # not a complete event: ignored
    ]}
    r = idle_gaps.analyse(trace, min_gap_us=1.0)
    assert r["span_s"] == pytest.approx(45.5e-6)
    assert r["busy_s"] == pytest.approx(35e-6)
    assert r["idle_s"] == pytest.approx(10.5e-6)
    assert r["gaps"] == 1
    assert r["host_late_s"] == pytest.approx(5e-6)
    assert r["launch_latency_s"] == pytest.approx(5e-6)
    assert r["by_cause"] == pytest.approx({"host op: aten::item": 3e-6, "runtime: cudaStreamSynchronize": 2e-6})
    assert r["gap_histogram"] == {"<20 us": 1}


def test_idle_gap_launched_early_is_latency_only():
    import idle_gaps

    trace = [_rt("cudaLaunchKernel", 0, 1, 1), _k(2, 10, 1), _rt("cudaLaunchKernel", 3, 1, 2), _k(40, 5, 2)]
    r = idle_gaps.analyse(trace)
    assert r["host_late_s"] == 0 and r["launch_latency_s"] == pytest.approx(28e-6)
    assert r["by_cause"] == {} and r["gap_histogram"] == {"<100 us": 1}


def test_blocking_calls():
    import idle_gaps

    assert idle_gaps.blocking("cudaStreamSynchronize") and idle_gaps.blocking("cudaMalloc")
    assert idle_gaps.blocking("cudaMemcpy") and not idle_gaps.blocking("cudaMemcpyAsync")
    assert not idle_gaps.blocking("cudaLaunchKernel")


def test_dry_runs_write_every_stage(tmp_path):
    pytest.importorskip("torch")
    import gpu_owed
    import idle_gaps

    assert gpu_owed.main(["--out", str(tmp_path), "--device", "cpu", "--tiny", "--sustain-s", "0.3"]) == 0
    for stage in gpu_owed.STAGES:
        with open(tmp_path / f"{stage}.csv") as f:
            rows = list(csv.DictReader(f))
        assert rows, stage
    assert "torch" in (tmp_path / "owed_env.txt").read_text()
    assert idle_gaps.main(["--device", "cpu", "--out", str(tmp_path / "idle.csv"), "--steps", "1",
                           "--wrap", "none,fsdp2"]) == 0  # (FSDP1 needs an accelerator)
    with open(tmp_path / "idle.csv") as f:
        got = list(csv.DictReader(f))
    assert {r["kind"] for r in got} >= {"total"}
    assert any(r["run_id"].endswith("+fsdp2") for r in got) and any("+" not in r["run_id"] for r in got)


def test_memory_phase_cases_run_on_cpu(tmp_path):
    # the dry run of validation/gpu_memory_phases.py: every case (plain, DDP with and without bucket views, FSDP2;
    # foreach and fused AdamW; gradients kept and set to None) trains a step; the peaks need a GPU
    pytest.importorskip("torch")
    import gpu_memory_phases

    assert gpu_memory_phases.main(["--device", "cpu", "--out", str(tmp_path / "m.csv")]) == 0
    with open(tmp_path / "m.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["wrap"], r["optimizer_impl"], r["grad_buffer"]) for r in rows] == list(gpu_memory_phases.CASES)
    assert all(r["status"] == "ok" and int(r["grad_bytes"]) == int(r["param_bytes"]) for r in rows)  # one rank
    with pytest.raises(SystemExit) as e:
        gpu_memory_phases.main(["--device", "cpu", "--out", str(tmp_path / "x.csv"), "--config", "L1-nope"])
    assert "--config" in str(e.value) and "\n" not in str(e.value)


def test_unknown_stage_is_one_line(capsys):
    import gpu_owed

    with pytest.raises(SystemExit) as e:
        gpu_owed.main(["--out", "x", "--stages", "launch,warp"])
    assert "warp" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("args, key", [(["--wrap", "none,fsdp3"], "--wrap"), (["--config", "L1-nope"], "--config")])
def test_bad_idle_gaps_arguments_are_one_line(args, key):
    pytest.importorskip("torch")
    import idle_gaps

    with pytest.raises(SystemExit) as e:
        idle_gaps.main(["--device", "cpu", "--out", "x.csv", *args])
    assert key in str(e.value) and "\n" not in str(e.value)


def test_power_and_queued_gemm_dry_runs(tmp_path):
    # validation/gpu_power_step.py (cold / sustained / hot GEMMs and harness steps) and validation/gpu_gemm_queued.py
    # (one call vs queued, bf16; FP8 needs an sm89+ GPU) run on CPU with tiny shapes and write every phase
    pytest.importorskip("torch")
    import gpu_gemm_queued
    import gpu_power_step

    assert gpu_power_step.main(["--out", str(tmp_path / "p.csv"), "--device", "cpu", "--tiny", "--sustain-s", "1.2",
                                "--idle-s", "0"]) == 0
    with open(tmp_path / "p.csv") as f:
        got = list(csv.DictReader(f))
    phases = {(w, p) for w in ("gemm", "step") for p in ("cold", "sustained", "hot")} | {("step", "profiled")}
    assert {(r["what"], r["phase"]) for r in got} == phases
    assert all(float(r["time_s"]) > 0 for r in got)
    # the profiled steps' wall time per step is the profiled calls' own (kernel time: nan on CPU, no CUPTI)
    assert all(r["kernel_s"] == "nan" for r in got if r["phase"] == "profiled")
    # the GEMM with copies between at four GEMM shares, and the weight-gradient GEMM bf16 out vs added into fp32
    assert gpu_power_step.main(["--out", str(tmp_path / "m.csv"), "--device", "cpu", "--tiny", "--sustain-s", "1.1",
                                "--idle-s", "0", "--workloads", "mix,accumulate"]) == 0
    with open(tmp_path / "m.csv") as f:
        got = list(csv.DictReader(f))
    assert {(r["what"], r["phase"]) for r in got} == {(w, p) for w in ("mix", "wgrad_bf16_out", "wgrad_fp32_accumulate")
                                                      for p in ("cold", "sustained", "hot")}
    assert len({r["run_id"] for r in got if r["what"] == "mix"}) == 4
    assert all(float(r["time_s"]) > 0 and float(r["tflops"]) > 0 for r in got)
    assert gpu_gemm_queued.main(["--out", str(tmp_path / "q.csv"), "--device", "cpu", "--tiny", "--iters", "2",
                                 "--warmup", "1"]) == 0
    with open(tmp_path / "q.csv") as f:
        got = list(csv.DictReader(f))
    assert got and {r["dtype"] for r in got} == {"bf16"} and all(float(r["queued_s"]) > 0 for r in got)
    assert gpu_gemm_queued.main(["--out", str(tmp_path / "m.csv"), "--device", "cpu", "--tiny", "--memory", "--iters",
                                 "2", "--warmup", "1"]) == 0
    with open(tmp_path / "m.csv") as f:
        got = list(csv.DictReader(f))
    assert {r["kernel"] for r in got} == {"copy", "add", "rmsnorm", "silu"} and len(got) == 12


def test_the_allocator_history_replays_to_its_peak_and_names_the_owners():
    # validation/gpu_memory_snapshot.py on a hand-made history: 100 bytes before the step; FSDP allocates 50,
    # autograd 30 (no Python frame), a pre-step block of 20 is freed, the harness allocates 40: the peak is
    # 100 + 50 + 30 - 20 + 40 = 200 after the last alloc, with the pre-step part at 80
    import gpu_memory_snapshot as S

    fsdp = [{"filename": "/x/torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py", "line": 7, "name": "f"},
            {"filename": "/x/validation/train_step.py", "line": 3, "name": "step"}]
    events = [{"action": "alloc", "addr": 1, "size": 50, "frames": fsdp},
              {"action": "alloc", "addr": 2, "size": 30, "frames": []},
              {"action": "segment_alloc", "addr": 9, "size": 4096},
              {"action": "free_completed", "addr": 7, "size": 20},
              {"action": "alloc", "addr": 3, "size": 40, "frames": fsdp[1:]},
              {"action": "free_requested", "addr": 1, "size": 50},
              {"action": "free_completed", "addr": 1, "size": 50}]
    peak, owners = S.peak_live(events, 100)
    assert peak == 200 and sum(owners.values()) == 200
    assert owners["before the step"] == 80 and owners["(no Python frame)"] == 30
    assert owners["FSDP: _fsdp_collectives.py:7 f"] == 50 and owners["harness: train_step.py:3 step"] == 40
    assert S.peak_live([], 64) == (64, {"before the step": 64})


def test_gpu_spread_dry_run(tmp_path):
    # validation/gpu_spread.py on the CPU: one one-call row and per-second loaded rows, each with the device's
    # identity; bad arguments are one line
    pytest.importorskip("torch")
    import gpu_spread

    assert gpu_spread.main(["--out", str(tmp_path / "s.csv"), "--device", "cpu", "--tiny", "--seconds", "0.5"]) == 0
    with open(tmp_path / "s.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["phase"] for r in rows][0] == "one_call" and any(r["phase"] == "all_loaded" for r in rows)
    assert all(float(r["tflops"]) > 0 and r["uuid"] for r in rows)
    for args in (["--device", "cuda:7"], ["--seconds", "nan"]):
        with pytest.raises(SystemExit) as e:
            gpu_spread.main(["--out", str(tmp_path / "x.csv"), *args])
        assert args[0] in str(e.value) and "\n" not in str(e.value)


def test_the_power_steps_sampler_reads_the_gpu_while_the_block_runs(tmp_path, monkeypatch):
    # validation/gpu_power_step.py's nvidia-smi sampler (a child process polling every 0.2 s) against a stand-in
    # nvidia-smi on PATH: readings taken during the block, their medians per field; none without nvidia-smi
    import os
    import time

    import gpu_power_step

    fake = tmp_path / "nvidia-smi"
    fake.write_text('#!/bin/sh\necho "1755, 650.5, 60"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with gpu_power_step._Sampler() as s:
        time.sleep(0.9)
    assert len(s.lines) >= 3
    assert s.medians() == {"sm_clock_mhz": 1755.0, "power_w": 650.5, "temperature_c": 60.0}
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with gpu_power_step._Sampler() as s:
        time.sleep(0.3)
    assert s.medians() == {"sm_clock_mhz": "", "power_w": "", "temperature_c": ""}


def test_unaligned_gemm_dry_run(tmp_path):
    # validation/gpu_unaligned_gemm.py (the batched attention GEMMs in Megatron's legacy layout and the linears, one
    # misaligned beside one aligned shape each) runs on CPU with tiny shapes and writes every case
    pytest.importorskip("torch")
    import gpu_unaligned_gemm as ug

    args = ["--out", str(tmp_path / "u.csv"), "--device", "cpu", "--tiny", "--warmup", "0", "--iters", "1"]
    assert ug.main(args) == 0
    with open(tmp_path / "u.csv") as f:
        got = list(csv.DictReader(f))
    assert {(r["what"], r["pass"]) for r in got} == {("attention", "forward"), ("attention", "forward+backward"),
                                                     ("linear", "forward")}
    assert sorted({int(r["head_dim"]) for r in got if r["what"] == "attention"}) == sorted(h for h, _ in ug.ATTENTION)
    assert all(float(r["time_s"]) > 0 and float(r["tflops"]) > 0 for r in got)
    # the misaligned head dims are the ones simulator/cost/alignment.py flags for 16-bit operands
    assert {h for h, _ in ug.ATTENTION if h % 8} == {108, 150, 450}


def test_attention_dropout_dry_run(tmp_path):
    # validation/gpu_attention_dropout.py: SDPA forward and forward + backward at dropout 0 and 0.1 (math on CPU)
    pytest.importorskip("torch")
    import gpu_attention_dropout as gd

    assert gd.main(["--out", str(tmp_path / "d.csv"), "--device", "cpu", "--tiny", "--calls", "1"]) == 0
    with open(tmp_path / "d.csv") as f:
        got = list(csv.DictReader(f))
    assert [float(r["dropout_p"]) for r in got] == list(gd.DROPOUT)
    assert all(r["status"] == "ok" and float(r["fwd_s"]) > 0 and float(r["fwd_bwd_s"]) > 0 for r in got)


def test_graphed_dry_run(tmp_path):
    # validation/gpu_graphed.py: the memory-bound kernels, the one-element floor and the small GEMMs, per call inside
    # a CUDA graph and queued (both perf_counter on CPU)
    pytest.importorskip("torch")
    import gpu_graphed as gg

    assert gg.main(["--out", str(tmp_path / "g.csv"), "--device", "cpu", "--tiny", "--replays", "1"]) == 0
    with open(tmp_path / "g.csv") as f:
        got = list(csv.DictReader(f))
    assert {r["what"] for r in got} == {"floor", "memory", "gemm"}
    assert {r["kernel"] for r in got if r["what"] == "memory"} == set(gg.MOVED)
    assert all(4 <= int(r["calls"]) <= 400 and float(r["graph_s"]) > 0 and float(r["queued_s"]) > 0 for r in got)
    flops = [float(r["flops"]) for r in got if r["what"] == "gemm"]
    assert flops == sorted(flops) and max(flops) <= 2e10


def test_moe_layer_script_dry_run_writes_every_op(tmp_path):
    # validation/gpu_moe_layer.py on the CPU with tiny shapes: every op of the expert block is timed and written
    import csv

    import gpu_moe_layer

    assert gpu_moe_layer.main(["--out", str(tmp_path), "--device", "cpu", "--tiny"]) == 0
    rows = list(csv.DictReader(open(tmp_path / "moe_layer.csv")))
    assert {r["op"] for r in rows} >= {"router", "permute", "chunk_sort", "experts_loop"}
    loop = [r for r in rows if r["op"] == "experts_loop"]
    assert all(float(r["flops"]) == 2.0 * int(r["tokens"]) * 8 * 64 * 3 * 32 for r in loop)  # tiny: h 64, f_e 32
