"""Software-stack profiles (spec/stack.py, stacks/*.toml) and the physics they switch."""
import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from simulator.cost import attention as A
from simulator.cost import compute as C
from simulator.cost import optimizer as O
from simulator.errors import InputError
from simulator.spec.model import ModelSpec
from simulator.spec.stack import ATTENTION_KERNELS, Stack, list_stacks, load_stack, stack_names
from simulator.spec.training import Training
from tests.test_compute import LLAMA, flat_profile

ROOT = Path(__file__).resolve().parent.parent
REQUIRED_STACKS = {"megatron", "torchtitan", "fsdp", "deepspeed", "hf"}


def test_the_presets_exist_and_every_value_names_its_source():
    assert REQUIRED_STACKS <= set(stack_names())
    for name in stack_names():
        st = load_stack(name)
        sourced = dict(st.source)
        for key in ("attention_kernel", "attention_padding", "cp_ring_merge", "cross_entropy", "optimizer_impl", "kernels_per_layer",
                    "compiled_kernels_per_layer", "host_us_per_kernel", "decode_host_us_per_kernel", "fp8_params",
                    "master_weights"):
            assert sourced.get(key, "").strip(), (name, key)
    assert list(list_stacks()["name"]) == stack_names()


def test_training_takes_the_stacks_defaults_unless_given():
    hf = load_stack("hf")
    t = Training(seq_length=128, global_batch_size=1, stack=hf)
    assert (t.cross_entropy, t.flash_attention) == ("torch-fp32", True)
    t = Training(seq_length=128, global_batch_size=1, stack=hf, cross_entropy="fused", flash_attention=False)
    assert (t.cross_entropy, t.flash_attention) == ("fused", False)
    t = Training(seq_length=128, global_batch_size=1, stack=load_stack("hf", attention_kernel="unfused"))
    assert t.flash_attention is False
    assert Training(seq_length=128, global_batch_size=1).cross_entropy == "vocab-parallel"  # megatron default


@pytest.mark.parametrize("over, msg", [
    ({"attention_kernel": "flash9"}, "attention_kernel must be one of"),
    ({"attention_padding": "gather"}, "attention_padding must be one of"),
    ({"cp_ring_merge": "nccl"}, "cp_ring_merge must be one of"),
    ({"optimizer_impl": "loop"}, "optimizer_impl must be one of"),
    ({"grad_buffer": "none"}, "grad_buffer must be one of"),
    ({"ddp_bucket_view": "yes"}, "ddp_bucket_view must be true or false"),
    ({"ddp_one_rank": 1}, "ddp_one_rank must be true or false"),
    ({"fsdp_copies": 1}, "fsdp_copies must be true or false"),
    ({"optimizer_impl": "for_loop"}, "optimizer_impl must be one of"),
    ({"kernels_per_layer": (1,)}, "kernels_per_layer must be [forward, backward]"),
    ({"kernels_per_layer": (-1, 2)}, "kernels_per_layer must be [forward, backward]"),
    ({"host_s_per_kernel": -1e-6}, "host_us_per_kernel must be in"),
    ({"decode_host_s_per_kernel": 1.0}, "decode_host_us_per_kernel must be in"),
    ({"compiled": "yes"}, "compiled must be true or false"),
    ({"master_weights": "bf16"}, "master_weights must be one of fp32, remainders"),
    ({"fp8_params": "yes"}, "fp8_params must be true or false"),
    ({"nonsense": 1}, "unknown stack key 'nonsense'"),
])
def test_bad_stack_values_are_one_line_errors(over, msg):
    with pytest.raises(InputError, match=msg.replace("[", r"\[")):
        load_stack("megatron", **over)
    with pytest.raises(InputError, match="unknown stack preset"):
        load_stack("megatorn")


def _attention(training, hw, **kw):
    return {o.name: o for o in C.layer_op_times(LLAMA, training, hw, **kw)}["attention"]


def test_the_stacks_attention_kernel_picks_its_tables_and_falls_back_to_the_generic_ones():
    hw = flat_profile(attention=0.5, attention_bwd=0.4)
    eff = dict(hw.efficiency)
    from simulator.spec.hardware import EfficiencyCurve
    eff["attention_flash2"] = EfficiencyCurve(x=(1.0,), efficiency=(0.25,), x_unit="any", source="test")
    eff["attention_bwd_flash2"] = EfficiencyCurve(x=(1.0,), efficiency=(0.2,), x_unit="any", source="test")
    eff["attention_cudnn"] = EfficiencyCurve(x=(1.0,), efficiency=(0.3,), x_unit="any", source="test")
    from dataclasses import replace
    hw = replace(hw, efficiency=eff)
    fwd = 2 * 2 * 32 * 4096 * 4096 * 128 / 2  # causal QKᵀ + A·V FLOPs, one sequence
    for kernel, (ef, eb) in {"flash2": (0.25, 0.2), "cudnn": (0.3, 0.4), "flash3": (0.5, 0.4)}.items():
        tr = Training(seq_length=4096, global_batch_size=1, stack=load_stack("megatron", attention_kernel=kernel,
                                                                             host_s_per_kernel=0.0))
        att = _attention(tr, hw)
        assert att.forward_s == pytest.approx(fwd / (1000e12 * ef), rel=1e-12), kernel
        assert att.backward_s == pytest.approx(2.5 * fwd / (1000e12 * eb), rel=1e-12), kernel


def test_shipped_h100_attention_tables_are_causal_and_per_kernel():
    from simulator.spec.hardware import load_hardware

    hw = load_hardware("dgx-h100")
    for k in ("flash3", "flash2", "cudnn", "triton"):
        assert hw.has_efficiency(f"attention_{k}")
        assert "causal" in hw.efficiency[f"attention_{k}"].x_unit
    # causal FlashAttention-3 at 512 tokens runs 292 TFLOP/s, not the non-causal 467 (kernel_benchmarks.csv)
    assert float(hw.interp_efficiency("attention", 512)) == pytest.approx(292 / 989.4, abs=5e-4)
    named = {re.sub(r"_hd\d+$", "", k.removeprefix("attention_bwd_").removeprefix("attention_")) for k in hw.efficiency
             if k.startswith("attention_") and k != "attention_bwd"}
    assert named <= set(ATTENTION_KERNELS)


def test_launch_bound_sets_a_floor_per_layer_pass_and_leaves_gpu_bound_layers_alone():
    tiny = ModelSpec(name="tiny", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=4, ffn_hidden_size=128,
                     vocab_size=100)
    hw = flat_profile()
    free = load_stack("hf", host_s_per_kernel=0.0)
    slow = load_stack("hf", host_s_per_kernel=20e-6)
    kf, kb = slow.kernels_per_layer
    base = C.layer_basis_times_by_mode(tiny, Training(seq_length=16, global_batch_size=1, stack=free), hw,
                                       modes=("none",))["none"]
    bound = C.layer_basis_times_by_mode(tiny, Training(seq_length=16, global_batch_size=1, stack=slow), hw,
                                        modes=("none",))["none"]
    f, b, w = (C.BASIS_KEYS.index(k) for k in ("forward_s", "backward_s", "weight_s"))
    dense = C.BASIS.index("dense_layer")
    assert base[f, dense] < kf * 20e-6  # this tiny layer is host-bound
    assert bound[f, dense] == pytest.approx(kf * 20e-6)
    assert bound[b, dense] + bound[w, dense] == pytest.approx(kb * 20e-6)
    head = C.BASIS.index("head")
    assert bound[f, head] == base[f, head]  # one-off kernels are not bounded
    big = C.layer_basis_times_by_mode(LLAMA, Training(seq_length=8192, global_batch_size=1, stack=slow), hw,
                                      micro_batch_size=4, modes=("none",))["none"]
    big0 = C.layer_basis_times_by_mode(LLAMA, Training(seq_length=8192, global_batch_size=1, stack=free), hw,
                                       micro_batch_size=4, modes=("none",))["none"]
    np.testing.assert_array_equal(big, big0)  # GPU-bound: unchanged


def test_an_estimate_reports_what_the_host_adds_to_its_step():
    # a tiny one-GPU model whose layer passes are all host-bound: the step's host-bound part is, in closed form,
    # layers x ((kf + kb) x h - the layer's GPU time) (the embedding, head and optimizer keep their GPU time);
    # a GPU-bound model has none, and neither has a stack that issues kernels at no host cost
    from simulator.cli.estimate import _table
    from simulator.estimate import estimate
    from simulator.spec.layout import Layout

    tiny = ModelSpec(name="tiny", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=4, ffn_hidden_size=128,
                     vocab_size=100)
    hw, lay = flat_profile(), Layout(num_gpus=1, micro_batch_size=1)
    slow = Training(seq_length=16, global_batch_size=1, stack=load_stack("hf", host_s_per_kernel=20e-6))
    free = Training(seq_length=16, global_batch_size=1, stack=load_stack("hf", host_s_per_kernel=0.0))
    kf, kb = slow.stack.kernels_per_layer
    base = C.layer_basis_times_by_mode(tiny, free, hw, modes=("none",))["none"]
    layer_gpu_s = sum(base[C.BASIS_KEYS.index(k), C.BASIS.index("dense_layer")]
                      for k in ("forward_s", "backward_s", "weight_s"))
    e = estimate(tiny, slow, lay, hw)
    assert e.host_bound_s == pytest.approx(2 * ((kf + kb) * 20e-6 - layer_gpu_s), rel=1e-6)
    assert e.to_dict()["time"]["host_bound_s"] == e.host_bound_s
    assert "host-bound" in _table(e.to_dict())
    assert estimate(tiny, free, lay, hw).host_bound_s == 0.0
    assert "host-bound" not in _table(estimate(tiny, free, lay, hw).to_dict())
    big = Training(seq_length=8192, global_batch_size=4, stack=load_stack("hf", host_s_per_kernel=20e-6))
    assert estimate(LLAMA, big, Layout(num_gpus=1, micro_batch_size=4), hw).host_bound_s == 0.0


def test_foreach_adamw_op_list_is_torchs():
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    ps = [torch.nn.Parameter(torch.randn(16, 16)) for _ in range(3)]
    for p in ps:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.1, foreach=True)
    opt.step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        opt.step()
    top = [e.name.removeprefix("aten::") for e in prof.events() if e.name.startswith("aten::_foreach")
           and not (e.cpu_parent and e.cpu_parent.name.startswith("aten::_foreach"))]
    assert top[0] == "_foreach_add_"  # the step counters (scalars)
    assert top[1:] == [op.split("(")[0] for op, _, _ in O.FOREACH_ADAMW_OPS]


def test_foreach_adamw_moves_three_times_the_fused_bytes_in_pure_bf16():
    pure = dict(seq_length=8, global_batch_size=1, master_weights=False, grad_dtype="bf16", optimizer_dtype="bf16")
    t = Training(**pure)
    assert O.optimizer_bytes_per_param(t) == 14  # g + 2 (m, v read + write) + p read + write, 2 bytes each
    assert O.foreach_adam_bytes_per_param(t) == 42  # 4 p + 14 state + 3 g passes, 2 bytes each
    hw = flat_profile(memory=0.8)
    fused = O.optimizer_params_step_s(Training(**pure), hw, non_expert=1e9, expert=0.0)
    foreach = O.optimizer_params_step_s(Training(**pure, stack=load_stack("hf")), hw, non_expert=1e9, expert=0.0)
    assert float(foreach) == pytest.approx(3 * float(fused))  # flat memory table: time follows bytes


def test_eager_kernel_counts_match_a_cpu_profiler_count_of_the_same_layers():
    """The presets' eager kernels per layer are the counts of validation/count_layer_kernels.py; recounted
    here live when torch and transformers are installed (the count on CPU: leaf aten ops that do work)."""
    rows = {r["layer"]: r for r in csv.DictReader(open(ROOT / "validation" / "cpu" / "layer_kernels.csv"))}
    assert load_stack("hf").kernels_per_layer == (int(rows["hf-sdpa"]["forward_kernels"]),
                                                  int(rows["hf-sdpa"]["backward_kernels"]))
    assert load_stack("torchtitan").kernels_per_layer == (int(rows["plain-torch-sdpa"]["forward_kernels"]),
                                                          int(rows["plain-torch-sdpa"]["backward_kernels"]))
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import sys
    sys.path.insert(0, str(ROOT / "validation"))
    import count_layer_kernels as ck

    torch.manual_seed(0)
    for name, _, run in ck.layers(torch, 256, 8, 2, 704, 64):
        f, b = ck.count(torch, run, 256, 64)
        assert (len(f), len(b)) == (int(rows[name]["forward_kernels"]), int(rows[name]["backward_kernels"])), name


def _cli(args, capsys):
    from helpers.cli_run import run

    return run(args, capsys)


def test_cli_stack_flag_scenario_section_and_compile(tmp_path, capsys):
    import json

    base = ["estimate", "--model", "llama3-8b", "--hardware", "dgx-h100", "--gpus", "8", "--seq", "4096",
            "--global-batch", "64", "--tp", "1", "--pp", "1", "--micro-batch", "1", "--zero", "1", "--format", "json"]
    code, out, err = _cli(base, capsys)
    assert code == 0, err
    d = json.loads(out)
    assert d["stack"]["name"] == "megatron" and d["stack"]["cross_entropy"] == "vocab-parallel"
    assert {"gemm", "attention", "attention_bwd", "memory"} <= set(d["efficiency_sources"])
    assert d["stack"]["elementwise"] == "fused" and "memory_strided" not in d["efficiency_sources"]  # no such ops
    code, out, err = _cli(base + ["--stack", "torchtitan", "--zero", "3"], capsys)
    titan = json.loads(out)  # RoPE's product with the broadcast table: dgx-h100's strided table times it
    assert titan["stack"]["elementwise"] == "eager" and "memory_strided" in titan["efficiency_sources"]
    code, out, err = _cli(base + ["--stack", "hf"], capsys)
    hf = json.loads(out)
    assert (hf["stack"]["name"], hf["stack"]["optimizer_impl"], hf["stack"]["compiled"]) == ("hf", "foreach", False)
    assert hf["efficiency_sources"]["optimizer"]["table"] == "memory"  # foreach runs at η_memory
    assert hf["time"]["optimizer_s"] > d["time"]["optimizer_s"]  # 86 bytes/param against 30
    code, out, err = _cli(base + ["--stack", "hf", "--compile"], capsys)
    assert json.loads(out)["stack"]["compiled"] is True
    sc = tmp_path / "s.toml"
    sc.write_text('[model]\npreset = "llama3-8b"\n[hardware]\npreset = "dgx-h100"\nnum_gpus = 8\n'
                  '[training]\nseq_length = 4096\nglobal_batch_size = 64\n[layout]\ntp = 1\nzero = 3\n'
                  '[stack]\npreset = "torchtitan"\noptimizer_impl = "foreach"\nhost_us_per_kernel = 20\n'
                  'decode_host_us_per_kernel = 7.5\n')
    code, out, err = _cli(["estimate", str(sc), "--format", "json"], capsys)
    assert code == 0, err
    st = json.loads(out)["stack"]
    assert (st["name"], st["optimizer_impl"], st["host_us_per_kernel"]) == ("torchtitan", "foreach", pytest.approx(20))
    assert st["decode_host_us_per_kernel"] == pytest.approx(7.5)
    sc.write_text(sc.read_text().replace('optimizer_impl = "foreach"', 'optimiser = "foreach"'))
    code, out, err = _cli(["estimate", str(sc)], capsys)
    assert code == 2 and err.strip().count("\n") == 0 and "optimiser" in err and "[stack]" in err
    code, out, err = _cli(base + ["--stack", "megatorn"], capsys)
    assert code == 2 and "unknown stack preset 'megatorn'" in err and "megatron" in err
    sc.write_text(sc.read_text().replace('optimiser = "foreach"', 'grad_buffer = "sometimes"'))
    code, out, err = _cli(["estimate", str(sc)], capsys)
    assert code == 2 and err.strip().count("\n") == 0 and "grad_buffer" in err and "sometimes" in err
    sc.write_text(sc.read_text().replace('grad_buffer = "sometimes"', 'elementwise = "pakced"'))
    code, out, err = _cli(["estimate", str(sc)], capsys)
    assert code == 2 and err.strip().count("\n") == 0 and "elementwise" in err and "pakced" in err
    sc.write_text(sc.read_text().replace('elementwise = "pakced"', 'grad_buffer = "sometimes"'))
    for bad, needle in (('decode_host_us_per_kernel = "fast"', "'fast'"), ("decode_host_us_per_kernel = -3", "-3")):
        text = re.sub(r"decode_host_us_per_kernel = [^\n]*", bad, sc.read_text())
        sc.write_text(text.replace("sometimes", "persistent"))
        code, out, err = _cli(["estimate", str(sc)], capsys)
        assert code == 2 and err.strip().count("\n") == 0 and "decode_host_us_per_kernel" in err and needle in err


def test_cli_grad_buffer_flag_moves_the_peak_and_says_which_moment_it_is(capsys):
    # one micro-batch per GPU, ZeRO-1: gradients set to None are not allocated yet at the activation peak
    base = ["memory", "--model", "llama3-8b", "--hardware", "dgx-h100", "--gpus", "8", "--zero", "1", "--seq", "8192",
            "--global-batch", "8", "--stack", "hf"]
    code, kept, err = _cli(base + ["--grad-buffer", "persistent", "--format", "json"], capsys)
    assert code == 0, err
    code, freed, err = _cli(base + ["--format", "json"], capsys)  # the hf stack's own: set-to-none
    k, f = json.loads(kept)["memory"], json.loads(freed)["memory"]
    assert f["grads_bytes"] == 0.0 and f["peak_bytes"] < k["peak_bytes"] and k["grads_bytes"] > 0
    code, out, err = _cli(base + ["--seq", "128"], capsys)  # tiny activations: the step's phase is the peak
    assert code == 0 and "peak at the optimizer step" in out and "foreach" in out
    code, out, err = _cli(base, capsys)
    assert code == 0 and "gradients not yet allocated" in out
    code, out, err = _cli(base + ["--grad-buffer", "later"], capsys)
    assert code == 2 and "--grad-buffer" in err


def test_cli_lists_the_stacks(capsys):
    code, out, err = _cli(["stacks"], capsys)
    assert code == 0, err
    for name in REQUIRED_STACKS:
        assert name in out


@pytest.mark.parametrize("recipe, extra", [("delayed", 0.0), ("current", 2.0), ("mxfp8", 2.0 / 32.0)])
def test_fp8_casts_of_one_linear_by_recipe(recipe, extra):
    from simulator.cost import flops as F
    from simulator.cost.memory_ops import fp8_cast_op

    tr = Training(seq_length=4096, global_batch_size=1, precision="fp8", stack=load_stack("megatron", fp8_recipe=recipe))
    qkv = next(o for o in F.projection_ops(LLAMA, seq_length=4096) if o.name == "qkv_proj")
    op = fp8_cast_op(qkv, tr)
    # input 4096 tokens x 4096, output 4096 x (4096 + 2·1024): read bf16 (2), write fp8 + its transpose (1 + 1)
    assert op.forward_bytes == pytest.approx(4096 * 4096 * (4 + extra))
    assert op.backward_bytes == pytest.approx(4096 * 6144 * (4 + extra))


def test_fp8_cast_bytes_per_element_are_torchs_float8_tensor_sizes():
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("no float8 dtype in this torch")
    x = torch.randn(64, 48, dtype=torch.bfloat16)
    x8 = x.to(torch.float8_e4m3fn)
    moved = x.nbytes + x8.nbytes + x8.t().contiguous().nbytes  # read bf16, write fp8 and its transpose
    assert moved / x.numel() == Training(seq_length=8, global_batch_size=1).activation_bytes + 2


def test_fp8_training_adds_casts_only_to_fp8_gemms():
    hw = flat_profile()
    ops = {o.name for o in C.layer_op_times(LLAMA, Training(seq_length=1024, global_batch_size=1, precision="fp8"), hw)}
    assert {"fp8_cast_qkv_proj", "fp8_cast_out_proj"} <= ops
    assert not any(n.startswith("fp8_cast_lm_head") for n in ops)  # the LM head stays bf16
    bf = {o.name for o in C.layer_op_times(LLAMA, Training(seq_length=1024, global_batch_size=1), hw)}
    assert not any(n.startswith("fp8_cast") for n in bf)


def test_attention_occupancy_is_wave_quantization_against_the_benchmarks_grid():
    # H100: 132 SMs; the benchmarks' 2048 blocks run in 16 waves (0.970 busy)
    ref = 2048 / (132 * 16)
    assert float(A.attention_occupancy(2048, 132)) == pytest.approx(1.0)
    assert float(A.attention_occupancy(132 * 40, 132)) == pytest.approx(1.0)  # full waves: capped at 1
    assert float(A.attention_occupancy(33, 132)) == pytest.approx((33 / 132) / ref)  # a quarter-full single wave
    assert float(A.attention_occupancy(133, 132)) == pytest.approx((133 / 264) / ref)
    assert float(A.attention_occupancy(33, 0)) == 1.0  # no SM count: not modelled


def test_a_small_per_gpu_attention_runs_at_its_occupancy():
    """tp 8 x ring cp 8 on a 32-head model at 4096 tokens: 4 heads x 4 query tiles = 16 blocks on 132 SMs."""
    from dataclasses import replace

    hw = replace(flat_profile(attention=0.5, attention_bwd=0.5), sm_count=132)
    tr = Training(seq_length=4096, global_batch_size=1, stack=load_stack("megatron", host_s_per_kernel=0.0))
    small = _attention(tr, hw, tp=8, cp=8)
    free = _attention(tr, replace(hw, sm_count=0), tp=8, cp=8)
    occ = (16 / 132) / (2048 / (132 * 16))
    assert small.forward_s == pytest.approx(free.forward_s / occ)
    big = _attention(tr, hw, micro_batch_size=8)  # 8 x 32 heads x 32 tiles = 8192 blocks: full waves
    assert big.forward_s == pytest.approx(_attention(tr, replace(hw, sm_count=0), micro_batch_size=8).forward_s)


def test_causal_occupancy_is_one_at_the_benchmarks_grid_and_falls_with_few_long_rows():
    """cost/attention.py causal_occupancy: the benchmarks' grid (16k tokens x 2048 / d heads) is the reference at
    every length and head dim; fewer rows than it leave SMs idle behind the last rows' long tiles; larger grids
    are capped at 1; the closed form beyond 32768 blocks joins the simulation (the measured check against the
    H100's SDPA kernels is tests/test_gpu_attention_report.py)."""
    from simulator.cost.attention import _list_occupancy, causal_occupancy

    for T in (4, 16, 128):
        assert float(causal_occupancy(2048 // T, T, 132)) == pytest.approx(1.0)
        assert float(causal_occupancy(4096 // T, T, 132, 64)) == pytest.approx(1.0)
        assert float(causal_occupancy(8 * 2048 // T, T, 132)) == 1.0
    few = causal_occupancy(np.array([4, 8, 16, 32, 64, 128]), 16, 132)
    assert np.all(np.diff(few) > 0) and few[0] < 0.3 and few[-1] == pytest.approx(1.0)
    assert float(causal_occupancy(32, 16, 0)) == 1.0  # no SM count: not modelled
    sim, closed = _list_occupancy(256, 128, 132), (lambda w: w / (w + 64.0))(256 * 128 * 129 / 2 / 132)
    assert sim == pytest.approx(closed, abs=0.005)


@pytest.mark.parametrize("value, needle", [("8,8,x", "--layers-per-stage must be comma-separated whole numbers"),
                                           ("16,16", "--layers-per-stage has 2 entries")])
def test_cli_layers_per_stage_bad_values_are_one_line(value, needle, capsys):
    code, out, err = _cli(["estimate", "--model", "llama3-8b", "--hardware", "dgx-h100", "--gpus", "8", "--pp", "4",
                           "--seq", "4096", "--global-batch", "64", "--layers-per-stage", value], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error:") and needle in err


def test_master_weight_remainders_and_fp8_weights_set_the_state_bytes():
    """The state bytes per parameter under the two keys (ZeRO §3.1's P and K): remainders keep 2 bytes of master
    copy beside bf16 weights (not for fp16, whose bits are not fp32's high half, nor for fp32 weights); FP8 weights
    are 1 byte with a 4-byte fp32 master whatever master_weights says. The optimizer step reads the bf16 weight it
    joins to its remainder."""
    from simulator.cost.optimizer import optimizer_bytes_per_param

    def tr(precision, **stack):
        return Training(seq_length=8, global_batch_size=1, precision=precision, stack=load_stack("megatron", **stack))

    plain, rem = tr("bf16"), tr("bf16", master_weights="remainders")
    assert (plain.param_bytes, plain.master_bytes, plain.optimizer_bytes) == (2, 4, 12)
    assert (rem.param_bytes, rem.master_bytes, rem.optimizer_bytes) == (2, 2, 10)
    assert tr("fp16", master_weights="remainders").master_bytes == 4
    assert tr("fp32", master_weights="remainders").master_bytes == 0
    f8 = tr("fp8", fp8_params=True, master_weights="remainders")
    assert (f8.param_dtype, f8.param_bytes, f8.master_bytes) == ("fp8", 1, 4)
    assert f8.math_dtype == "bf16"  # attention and the non-FP8 GEMMs still run in bf16 with FP8 weights
    assert (tr("fp8").param_dtype, tr("bf16", fp8_params=True).param_dtype) == ("bf16", "bf16")  # FP8 training only
    # fp32 gradient 4 + remainder read/write 2·2 + moments 16 + bf16 weight read and write 2·2 (fp32 master: 30)
    assert (optimizer_bytes_per_param(plain), optimizer_bytes_per_param(rem)) == (30.0, 28.0)


def test_a_bf16_weight_and_its_16_bit_remainder_hold_the_fp32_master_exactly():
    """Why 2 bytes suffice (Apex DistributedFusedAdam store_param_remainders): a float32 is its bfloat16 high half
    (sign, exponent, 7 mantissa bits) and 16 low mantissa bits; the bf16 weight the model computes with plus the
    int16 low bits rebuild the fp32 master bit for bit (shown here with truncation; Apex rounds the weight to
    nearest and stores the signed remainder that undoes it)."""
    torch = pytest.importorskip("torch")
    master = torch.randn(4096, dtype=torch.float32) * torch.logspace(-6, 6, 4096)
    bits = master.view(torch.int32)
    high = (bits >> 16).to(torch.int16)  # the bf16 weight's bits
    low = (bits & 0xFFFF).to(torch.int32)  # the 2-byte remainder, stored as int16
    weight = high.view(torch.bfloat16)
    assert weight.element_size() == 2 and low.to(torch.int16).element_size() == 2
    rebuilt = ((weight.view(torch.int16).to(torch.int32) << 16) | low).view(torch.float32)
    assert torch.equal(rebuilt, master)
    assert torch.allclose(weight.float(), master, rtol=2 ** -7)  # the working weight is the master to bf16 precision
