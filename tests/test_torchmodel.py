"""simulator/torchmodel: traces of any torch model against closed forms and published figures, its DDP / FSDP /
pipeline step against the transformer path's closed forms, ResNet-50 scaling, the `torch-model` command."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the torch-model path needs parasim[torch]")

from simulator.cost.fsdp import backward_pass, forward_pass, reduce_behind_compute_exposed_s  # noqa: E402
from simulator.errors import InputError  # noqa: E402
from simulator.spec.hardware import load_hardware  # noqa: E402
from simulator.torchmodel import (Tracer, TorchTraining, balanced_split, ddp_step, layer_times,  # noqa: E402
                                  pipeline_step, scaling_rows, step, trace_module)
from simulator.torchmodel.examples import mlp, resnet50, small_convnet  # noqa: E402
from simulator.torchmodel.parallel import (ddp_bucket_exposed_s, ddp_buckets, fsdp_backward_makespan,  # noqa: E402
                                           fsdp_forward_makespan)

ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20


@pytest.fixture(scope="module")
def a100():
    return load_hardware("dgx-a100-80g")


@pytest.fixture(scope="module")
def r50():
    return Tracer(resnet50(), (3, 224, 224), name="resnet50")


# ---- traces against closed forms ---------------------------------------------------------------------
def test_mlp_flops_are_2mnk_forward_and_backward():
    b, (a, h, c) = 16, (64, 128, 32)
    tr = trace_module(mlp((a, h, c)), (a,), b)
    # children: Linear(a,h), ReLU, Linear(h,c), ReLU; a Linear of an (m x k) input to n outputs: 2·m·k·n
    assert [l.forward_flops for l in tr.layers] == [2 * b * a * h, 0, 2 * b * h * c, 0]
    # backward: the first Linear computes only its weight gradient (its input needs none), the second both
    assert [l.backward_flops for l in tr.layers] == [2 * b * a * h, 0, 2 * 2 * b * h * c, 0]
    assert tr.forward_flops + tr.backward_flops == tr.flop_counter_total  # per-op records = FlopCounterMode
    assert tr.params == a * h + h * c


def test_conv_flops_are_2_cin_cout_k2_hout_wout_per_image():
    b, hw, k = 4, 16, 3
    tr = trace_module(small_convnet((3, 8, 16), kernel=k), (3, hw, hw), b)
    conv1 = 2 * 3 * 8 * k * k * hw * hw * b  # padding k//2, stride 1: H_out = W_out = 16
    conv2 = 2 * 8 * 16 * k * k * hw * hw * b
    head = 2 * b * 16 * 10
    assert [l.forward_flops for l in tr.layers if l.forward_flops] == [conv1, conv2, head]
    assert tr.forward_flops == tr.flop_counter_forward
    # conv2's backward: input and weight gradients (2x forward); conv1's: the weight gradient only
    assert tr.layers[2].backward_flops == 2 * conv2 and tr.layers[0].backward_flops == conv1


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_saved_activations_of_a_linear_relu_stack_by_hand(device):
    b, (a, h, c) = 8, (32, 64, 16)
    tr = trace_module(mlp((a, h, c)), (a,), b, device=device)
    # Linear 1 saves its input (b·a; the weight is a parameter, not counted), ReLU 1 its output (b·h),
    # Linear 2's input is that same storage (counted once), ReLU 2 its output (b·c)
    assert [l.saved_float_elements for l in tr.layers] == [b * a, b * h, 0, b * c]
    assert [l.output_float_elements for l in tr.layers] == [b * h, b * h, b * c, b * c]
    tt = TorchTraining()  # bf16 activations; autocast also keeps bf16 copies of the fp32 weights
    from simulator.torchmodel.cost import activation_bytes

    assert activation_bytes(tr, tt) == 2 * (b * a + b * h + b * c) + 2 * tr.params


def test_resnet50_matches_the_paper(r50):
    tr = r50(1)
    assert tr.params == 25_557_032  # torchvision resnet50 num_params (the same architecture)
    macs = tr.forward_flops / 2
    assert abs(macs / 3.8e9 - 1) < 0.02  # He et al. 2016 Table 1: 3.8e9 FLOPs (multiply-adds), 50-layer
    v15 = trace_module(resnet50(stride_in_1x1=False), (3, 224, 224), 1)
    assert abs(v15.forward_flops / 2 / 4.09e9 - 1) < 0.01  # torchvision model card: 4.09 GFLOPS (v1.5)
    assert [l.name for l in tr.layers] == ["stem", "layer1", "layer2", "layer3", "layer4", "avgpool", "fc"]


def test_user_layers_and_bad_inputs():
    names = ["stem", "layer1.0", "layer1.1", "layer1.2", "layer2", "layer3", "layer4", "avgpool", "fc"]
    tr = trace_module(resnet50(), (3, 64, 64), 2, layers=names)
    assert tr.layer_names == tuple(names) and tr.params == 25_557_032
    with pytest.raises(InputError, match="not a submodule"):
        trace_module(resnet50(), (3, 64, 64), 2, layers=["layer9"])
    with pytest.raises(InputError, match="disjoint"):
        trace_module(resnet50(), (3, 64, 64), 2, layers=["layer1", "layer1.0"])
    with pytest.raises(InputError, match="model failed"):
        trace_module(mlp((8, 4)), (5,), 2)  # a Linear(8, 4) fed 5 features


# ---- DDP, FSDP and pipeline rules against the transformer path's closed forms --------------------------
@pytest.mark.parametrize("c,r,n", [(1.0, 0.5, 4), (1.0, 2.0, 4), (0.3, 0.3, 1), (2.0, 3.0, 7)])
def test_bucket_replay_is_the_closed_form_for_even_buckets(c, r, n):
    ready = [c * (i + 1) for i in range(n)]  # bucket i full after i+1 buckets' worth of backward
    got = ddp_bucket_exposed_s(ready, [r] * n, c * n)
    assert got == pytest.approx(float(reduce_behind_compute_exposed_s(c, r, n)))


@pytest.mark.parametrize("prefetch", [0, 1, 2])
@pytest.mark.parametrize("c,g,r", [(1.0, 0.4, 0.3), (1.0, 1.7, 0.9), (0.5, 0.5, 0.5)])
def test_fsdp_replays_match_cost_fsdp_on_equal_units(prefetch, c, g, r):
    units = 5
    f_exposed, _ = forward_pass(c, g, units, prefetch)
    assert fsdp_forward_makespan([c] * units, [g] * units, prefetch) - units * c == pytest.approx(float(f_exposed))
    b_exposed, _ = backward_pass(c, g, r, units, prefetch)
    got = fsdp_backward_makespan([c] * units, [g] * units, [r] * units, prefetch) - units * c
    assert got == pytest.approx(float(b_exposed))


def test_ddp_buckets_follow_torch_caps():
    from simulator.torchmodel.trace import GradReady

    ready = [GradReady(numel=n, layer=0, op_index=i) for i, n in enumerate([100_000, 300_000, 4_000_000, 4_000_000])]
    # 4-byte gradients: 0.4 MB (< 1 MiB) + 1.2 MB closes the first bucket; then 16 MB + 16 MB >= 25 MiB
    got = ddp_buckets(ready, 4, first_cap_bytes=1 * MIB, cap_bytes=25 * MIB)
    assert got == [(1_600_000.0, 1), (32_000_000.0, 3)]


def test_balanced_split_is_optimal_on_small_cases():
    import itertools

    cost = [3, 1, 4, 1, 5, 9, 2, 6]
    for p in (1, 2, 3, 4):
        starts = balanced_split(cost, p)
        best = min(max(sum(cost[a:b]) for a, b in zip((0, *cuts), (*cuts, len(cost))))
                   for cuts in itertools.combinations(range(1, len(cost)), p - 1))
        got = max(sum(cost[a:b]) for a, b in zip(starts, (*starts[1:], len(cost))))
        assert got == best and starts[0] == 0
    with pytest.raises(InputError):
        balanced_split([1, 2], 3)


def test_pipeline_makespan_against_1f1b_closed_forms(a100):
    tr = trace_module(mlp((256, 256, 256, 256)), (256,), 8)
    t = layer_times(tr, a100, TorchTraining())
    res = pipeline_step(tr, a100, TorchTraining(), pp=1, microbatches=4)
    assert res.makespan_s == pytest.approx(4 * (t.total_forward_s + t.total_backward_s))
    three = pipeline_step(tr, a100, TorchTraining(), pp=3, microbatches=4)
    assert three.stages == (("0", "1"), ("2", "3"), ("4", "5"))  # Linear + ReLU per stage
    f, b = np.array(three.stage_forward_s), np.array(three.stage_backward_s)
    assert f.sum() + b.sum() == pytest.approx(t.total_forward_s + t.total_backward_s)
    # 1F1B: the busiest stage runs m (F + B) and waits for the first micro-batch's trip through the others,
    # sum_i (F_i + B_i) + (m - 1) max_i (F_i + B_i) (= (m + p - 1)(F + B) for equal stages, no p2p)
    bound = (f + b).sum() + 3 * (f + b).max()
    assert bound < three.makespan_s <= bound + 2 * 2 * 4 * max(three.p2p_s)


# ---- ResNet-50 data parallel ----------------------------------------------------------------------------
def test_ddp_step_falls_with_gpus_at_a_fixed_global_batch(r50, a100):
    rows = scaling_rows(r50, a100, TorchTraining(), [1, 2, 4, 8, 16, 32, 64], global_batch=1024)
    steps = [r.result.step_s for r in rows]
    assert all(a > b for a, b in zip(steps, steps[1:])), steps


def test_exposed_allreduce_is_at_least_the_last_bucket(r50, a100):
    tt = TorchTraining()
    for gpus in (2, 8, 16, 64):
        r = ddp_step(r50(64), a100, tt, gpus)
        assert r.buckets >= 4 and r.last_bucket_s > 0
        assert r.exposed_comm_s >= r.last_bucket_s * (1 - 1e-12)
        assert r.exposed_comm_s < r.comm_s  # the earlier buckets hide under the backward


def test_scaling_efficiency_falls_across_nodes(r50, a100):
    rows = scaling_rows(r50, a100, TorchTraining(), [16, 32, 64], batch_per_gpu=32)
    eff = [r.scaling_efficiency for r in rows]
    assert eff[0] > eff[1] > eff[2] and eff[0] < 1.0


def test_ddp_memory_counts_states_buckets_and_activations(r50, a100):
    tr = r50(32)
    r = step(tr, a100, TorchTraining(), 8)
    p = tr.params
    m = r.memory
    # fp32 parameters, fp32 gradients, SGD momentum (4 bytes), DDP's bucket copy of the gradients
    assert (m.params_bytes, m.grads_bytes, m.optimizer_bytes, m.comm_buffer_bytes) == (4 * p, 4 * p, 4 * p, 4 * p)
    assert m.activations_bytes > 0 and m.feasible
    f = step(tr, a100, TorchTraining(), 8, mode="fsdp")
    assert f.memory.optimizer_bytes == pytest.approx(4 * p / 8) and f.memory.comm_buffer_bytes == 0


def test_resnet50_scaling_doc_regenerates_identically():
    spec = importlib.util.spec_from_file_location("resnet50_scaling", ROOT / "validation" / "resnet50_scaling.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = mod.generate()
    assert "| 64 | 8 |" in text
    assert (ROOT / "docs" / "torch-models.md").read_text() == text


# ---- the command ------------------------------------------------------------------------------------------
def _run(args):
    from click.testing import CliRunner

    from simulator.cli import cli

    return CliRunner().invoke(cli, args, standalone_mode=True)


def test_cli_json_rows(tmp_path):
    model = tmp_path / "tiny.py"
    model.write_text("from simulator.torchmodel.examples import small_convnet\n"
                     "def build():\n    return small_convnet((3, 8, 16))\n")
    res = _run(["torch-model", f"{model}:build", "--input", "3,32,32", "--batch", "16", "--hardware",
                "dgx-h100", "--gpus", "1,8,16", "--format", "json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert [r["gpus"] for r in out["rows"]] == [1, 8, 16] and out["rows"][0]["scaling_efficiency"] == 1.0
    assert out["model"]["params"] == 3 * 8 * 9 + 8 * 16 * 9 + 16 * 10 + 10
    assert {"step_s", "samples_per_s", "exposed_comm_s", "memory"} <= set(out["rows"][1])


@pytest.mark.parametrize("args,msg", [
    (["nocolon", "--input", "3", "--batch", "2"], "MODULE:FACTORY"),
    (["missing_file.py:build", "--input", "3", "--batch", "2"], "does not exist"),
    (["simulator.torchmodel.examples:nope", "--input", "3", "--batch", "2"], "has no 'nope'"),
    (["simulator.torchmodel.examples:mlp", "--input", "3,x", "--batch", "2"], "--input"),
    (["simulator.torchmodel.examples:mlp", "--input", "1024", "--gpus", "0", "--batch", "2"], "--gpus"),
    (["simulator.torchmodel.examples:mlp", "--input", "1024"], "--batch"),
    (["simulator.torchmodel.examples:mlp", "--input", "7", "--batch", "2"], "model failed"),
])
def test_cli_bad_input_is_one_line_and_exit_2(args, msg, capsys, monkeypatch):
    from simulator.cli import main

    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as exit_:
        main(["torch-model", *args, "--hardware", "dgx-h100"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert len(err.strip().splitlines()) == 1 and msg in err, err


def test_without_torch_one_line_and_no_core_import():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import simulator.estimate, simulator.torchmodel, simulator.cli\n"
            "from simulator.cli import main\n"
            "main(['torch-model', 'simulator.torchmodel.examples:resnet50', '--input', '3,224,224',"
            " '--batch', '8', '--hardware', 'dgx-h100'])\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: torch is not installed: pip install 'parasim[torch]'"
