"""Calibration microbenchmarks on the CPU with tiny shapes (torch-backed; skipped without torch)."""
import sys
import time

import numpy as np
import pytest

from simulator.calibrate import microbench as mb
from simulator.calibrate.run import GRIDS, Grid


def test_gemm_shapes_follow_the_megatron_tp_split():
    s = mb.transformer_gemm_shapes(hidden_sizes=[1024], tokens=[2048], tp_degrees=[4], ffn_multiplier=4, glu=False)
    shapes = {(x.m, x.n, x.k) for x in s}
    assert len(shapes) == len(s)  # duplicates removed
    assert (2048, 3 * 1024 // 4, 1024) in shapes  # QKV fwd, column parallel: output split
    assert (2048, 1024, 1024 // 4) in shapes  # attention out fwd, row parallel: input split
    assert (2048, 4096 // 4, 1024) in shapes  # MLP up fwd
    assert (2048, 1024, 4096 // 4) in shapes  # MLP down fwd (same shape as MLP up dgrad)
    assert (1024, 768, 2048) in shapes  # QKV wgrad dW = x^T dy
    # 4 linears x 3 products = 12; with f/p = h = 1024 the MLP down products repeat MLP up's (3) and
    # MLP up fwd = its dgrad (1): 8 distinct shapes
    assert len(shapes) == 8


def test_time_callable_reports_the_median_of_timed_calls():
    calls = []

    def f():
        calls.append(1)
        time.sleep(0.002)

    t = mb.time_callable(f, warmup=2, iters=5)
    assert len(calls) == 7 and t.samples == 5 and t.timer == "perf_counter"
    assert 0.002 <= t.median_s < 0.02 and t.min_s <= t.median_s <= t.max_s


def test_flop_counts_agree_with_torch_flop_counter():
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    a, b = torch.randn(32, 48), torch.randn(48, 40)
    with FlopCounterMode(display=False) as fc:
        torch.matmul(a, b)
    assert fc.get_total_flops() == mb.gemm_flops(32, 40, 48)
    q = torch.randn(2, 3, 64, 16, requires_grad=True)
    with FlopCounterMode(display=False) as fc:  # attention written out as matmuls: torch counts the bmm's
        o = torch.softmax(q @ q.transpose(-1, -2), dim=-1) @ q
    assert fc.get_total_flops() == mb.attention_forward_flops(2, 3, 64, 16, causal=False)
    with FlopCounterMode(display=False) as fc:
        o.sum().backward()
    assert fc.get_total_flops() == mb.attention_backward_flops(2, 3, 64, 16, causal=False)


TINY = Grid(hidden_sizes=(32, 64), tokens=(16,), tp_degrees=(1, 2), kv_fraction=1.0, seq_lengths=(32, 64),
            head_dims=(16,), attention_heads=2, memory_sizes_bytes=(2**14, 2**16), collective_sizes_bytes=(2**10,),
            warmup=1, iters=3)


def test_cpu_calibration_writes_a_loadable_profile_with_provenance(tmp_path):
    pytest.importorskip("torch")
    from simulator.calibrate.profile_writer import write_profile
    from simulator.calibrate.run import run_calibration
    from simulator.spec.hardware import load_hardware

    res = run_calibration(["gemm", "attention", "memory"], device="cpu", name="cpu-test", grid=TINY)
    g = res.measurements["gemm"]
    # efficiency = achieved / measured peak on a CPU base: the best GEMM is exactly 1
    peak = g["flops_per_s"].max()
    assert res.profile["gpu"]["peak_tflops"]["fp32"] == pytest.approx(peak / 1e12)
    assert np.all(g["flops"] == 2 * g["m"] * g["n"] * g["k"])
    p = write_profile(tmp_path / "cpu-test.toml", res.profile)
    hw = load_hardware(str(p))
    for t in ("gemm", "attention", "attention_bwd", "memory"):
        assert t in hw.efficiency and "fitted to" in hw.efficiency[t].source
    assert "not measured" in hw.efficiency["nvlink_ring"].source  # no collectives run: marked, not invented
    prov = hw.provenance
    assert prov["device"].startswith("CPU") and "torch" in prov["versions"] and "median" in prov["protocol"]
    a = res.measurements["attention"]
    assert set(a["pass"]) == {"fwd", "bwd"} and (a["time_s"] > 0).all()


def test_warm_up_keeps_the_device_busy_for_the_time_asked():
    pytest.importorskip("torch")
    t0 = time.perf_counter()
    n = mb.warm_up(device="cpu", seconds=0.05, size=64, dtype="fp32")
    assert time.perf_counter() - t0 >= 0.05 and n >= 8 and n % 8 == 0


def test_optimizer_benchmark_times_torch_fused_adamw_and_fits_its_table():
    torch = pytest.importorskip("torch")
    from simulator.calibrate.run import run_calibration

    d = mb.bench_optimizer(param_counts=(2**12, 2**14), dtype="fp32", device="cpu", warmup=1, iters=2, tensors=4)
    # fp32, no master copy: read the gradient 4, read + write the parameter 8 and both moments 16 = 28 B
    assert list(d["params"]) == [2**12, 2**14] and (d["bytes_moved"] == 28 * d["params"]).all()
    assert (d["time_s"] > 0).all() and set(d["kernel"]) == {"fused_adamw"}
    # the step it times is AdamW's: two moments of the parameters' size
    p = torch.zeros(64, requires_grad=True)
    p.grad = torch.ones(64)
    opt = torch.optim.AdamW([p], fused=True)
    opt.step()
    assert sorted(k for k, v in opt.state[p].items() if v.numel() == 64) == ["exp_avg", "exp_avg_sq"]
    res = run_calibration(["optimizer"], device="cpu", name="cpu-opt", grid=TINY)
    assert "optimizer" in res.fits and res.fits["optimizer"].n_points == len(TINY.optimizer_params)
    assert "fused=True" in res.profile["efficiency"]["optimizer"]["source"]


def test_all_on_a_one_rank_machine_skips_collectives_with_a_note_and_alone_refuses():
    pytest.importorskip("torch")
    from simulator.calibrate.run import run_calibration
    from simulator.errors import InputError

    res = run_calibration(["gemm", "memory", "collectives"], device="cpu", name="one-rank", grid=TINY, world_size=1)
    assert "collectives" not in res.measurements
    assert any("collectives not measured: 1 rank" in n for n in res.notes)
    assert "collectives" not in res.profile["provenance"]["source"]
    with pytest.raises(InputError, match="world_size >= 2, got 1"):
        run_calibration(["collectives"], device="cpu", name="one-rank", grid=TINY, world_size=1)


def test_cpu_collectives_through_gloo_feed_the_ring_table():
    pytest.importorskip("torch")
    from simulator.calibrate.collectives import bench_collectives

    d = bench_collectives(world_size=2, sizes_bytes=(2**12, 2**16), collectives=("all_reduce", "sendrecv"), iters=3)
    ok = d[d["error"].isna()]
    assert set(ok["collective"]) == {"all_reduce", "sendrecv"} and (ok["time_s"] > 0).all()
    ar = ok[ok.collective == "all_reduce"]
    np.testing.assert_allclose(ar["busbw_bytes_per_s"], ar["size_bytes"] / ar["time_s"] * 1.0)  # 2(n-1)/n = 1 at n=2


def test_calibrate_without_torch_is_a_one_line_error_exit_2(monkeypatch, capsys, tmp_path):
    from simulator.cli import main

    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ModuleNotFoundError
    with pytest.raises(SystemExit) as e:
        main(["calibrate", "gemm", "--device", "cpu", "--out", str(tmp_path / "x.toml")])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip() == "error: calibrate needs torch: pip install torch"


def test_grids_cover_the_documented_ranges():
    g = GRIDS["gpu"]
    assert min(g.hidden_sizes) == 1024 and max(g.hidden_sizes) == 8192 and max(g.tp_degrees) == 8
    assert max(g.seq_lengths) == 32768


def test_attention_backward_round_trip_calibrated_time_comes_back():
    """One convention for the attention backward: a backward time measured by `bench_attention`, turned
    into an efficiency table by the calibration, must come back as the cost model's backward time for
    the same kernel (with the 2 × forward convention on one side and 2.5 × on the other it came back 25 %
    slow)."""
    import pandas as pd

    from simulator.calibrate.run import attention_points
    from simulator.cost import compute as C
    from simulator.spec.model import ModelSpec
    from simulator.spec.training import Training
    from tests.test_compute import flat_profile

    b, h, s, d, t_fwd, t_bwd, peak = 2, 32, 4096, 128, 1.0e-3, 2.0e-3, 1000e12
    rows = [{"pass": "fwd", "seq": s, "flops": mb.attention_forward_flops(b, h, s, d), "time_s": t_fwd},
            {"pass": "bwd", "seq": s, "flops": mb.attention_backward_executed_flops(b, h, s, d), "time_s": t_bwd}]
    df = pd.DataFrame(rows)
    df["flops_per_s"] = df["flops"] / df["time_s"]
    (_, e_f), (_, e_b) = (attention_points(df, peak, p) for p in ("fwd", "bwd"))
    hw = flat_profile(attention=float(e_f[0]), attention_bwd=float(e_b[0]), peaks={"bf16": 1000, "fp8": 2000,
                                                                                     "fp32": 60})
    model = ModelSpec(name="attn", hidden_size=h * d, num_layers=1, num_heads=h, num_kv_heads=h,
                      ffn_hidden_size=4 * h * d, vocab_size=1000)
    att = {o.name: o for o in C.layer_op_times(model, Training(seq_length=s, global_batch_size=b), hw,
                                               micro_batch_size=b)}["attention"]
    assert att.forward_s == pytest.approx(t_fwd, rel=1e-9)
    assert att.backward_s == pytest.approx(t_bwd, rel=1e-9)


def test_gemm_fp8_needs_a_gpu_and_fits_against_the_fp8_peak():
    import pandas as pd

    from simulator.calibrate.fp8 import bench_gemm_fp8
    from simulator.calibrate.run import fit_compute_tables
    from simulator.errors import InputError

    pytest.importorskip("torch")
    shapes = mb.transformer_gemm_shapes(hidden_sizes=(64,), tokens=(16,), tp_degrees=(1,), kv_fraction=1.0)
    with pytest.raises(InputError, match="gemm_fp8 needs a CUDA GPU"):
        bench_gemm_fp8(shapes, device="cpu")
    # the fit reads FP8 GEMM rates against the FP8 peak, not the bf16 one
    df = pd.DataFrame({"flops": [1e9, 1e11], "flops_per_s": [500e12, 1500e12]})
    fits = fit_compute_tables({"gemm_fp8": df}, peak_flops_per_s=989e12, peak_bytes_per_s=3e12, label="t",
                              peak_fp8_flops_per_s=1979e12)
    e = fits["gemm_fp8"].efficiency
    assert max(e) <= 1500 / 1979 + 1e-6 and min(e) >= 500 / 1979 - 1e-6
    with pytest.raises(InputError, match="no fp8 peak"):
        fit_compute_tables({"gemm_fp8": df}, peak_flops_per_s=989e12, peak_bytes_per_s=3e12, label="t")


def test_attention_is_fitted_per_head_dim_and_replaces_the_bases_per_kernel_tables():
    """With head dim 128 measured, the calibration writes `attention` at 128 and `attention_hd<d>` for the
    other head dims (the model reads its own: cost/attention.py), and the measured profile drops the base's
    `attention_<kernel>` tables, which a stack would otherwise read in place of the measurement."""
    import pandas as pd

    from simulator.calibrate.profile_writer import measured_profile_dict
    from simulator.calibrate.run import fit_compute_tables
    from simulator.spec.hardware import hardware_from_dict, load_hardware
    from simulator.spec.presets import read_toml, resolve

    peak = 1000e12
    rows = []
    for d, eff in ((64, 0.3), (128, 0.5)):
        for s in (1024, 4096, 16384):
            for pas, k in (("fwd", 1.0), ("bwd", 0.8)):
                rows.append({"pass": pas, "seq": s, "head_dim": d, "flops_per_s": k * eff * peak})
    fits = fit_compute_tables({"attention": pd.DataFrame(rows)}, peak_flops_per_s=peak, peak_bytes_per_s=3e12,
                              label="test")
    assert set(fits) == {"attention", "attention_bwd", "attention_hd64", "attention_bwd_hd64"}
    base = read_toml(resolve("hardware_profiles", "dgx-h100"))
    assert "attention_cudnn" in base["efficiency"]
    prof = measured_profile_dict(base, fits, name="m", provenance={"device": "test"})
    hw = hardware_from_dict(prof, where="m")
    assert not any(k.startswith(("attention_cudnn", "attention_flash", "attention_bwd_")) for k in hw.efficiency
                   if k not in ("attention_bwd", "attention_bwd_hd64"))
    from simulator.cost.attention import attention_efficiency

    for d, eff in ((64, 0.3), (128, 0.5)):
        f, b = attention_efficiency(hw, "cudnn", d, 4096.0)
        assert (float(f), float(b)) == pytest.approx((eff, 0.8 * eff), rel=1e-6)
    assert "attention_cudnn" in load_hardware("dgx-h100").efficiency  # the preset itself is untouched


def test_attention_benchmark_runs_a_batch_of_tokens_per_call():
    pytest.importorskip("torch")
    d = mb.bench_attention(seq_lengths=(16, 64), head_dims=(8,), heads=2, device="cpu", dtype="fp32", warmup=1,
                           iters=1, tokens=128)
    assert dict(zip(d["seq"], d["batch"])) == {16: 8, 64: 2}
    assert (d[d["pass"] == "fwd"]["flops"] == [mb.attention_forward_flops(b, 2, s, 8)
                                              for b, s in zip(d[d["pass"] == "fwd"]["batch"],
                                                              d[d["pass"] == "fwd"]["seq"])]).all()
