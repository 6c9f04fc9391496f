"""Full recompute with a checkpoint every N layers (Megatron --recompute-method uniform --recompute-num-layers N;
Layout.recompute_group): a group of N layers keeps only its input, and its backward re-creates all N at once.
Checked against torch.utils.checkpoint on CPU (what autograd saves, counted with saved-tensor hooks), the memory
model's per-stage bytes, and the Megatron import / emit."""
import subprocess
import sys

import numpy as np
import pytest

from simulator.errors import InputError
from simulator.memory.breakdown import stage_memory_arrays
from simulator.spec.layout import Layout
from simulator.spec.load import load_model
from simulator.spec.training import Training

torch = pytest.importorskip("torch")


def _saved(L: int, N: int, width: int = 64, tokens: int = 32):
    """(bytes autograd keeps after the forward of L layers checkpointed in groups of N, bytes one group's
    recompute saves again in backward): counted with saved-tensor hooks on CPU."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    layers = [torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                  torch.nn.Linear(4 * width, width)) for _ in range(L)]
    params = {p.untyped_storage().data_ptr() for m in layers for p in m.parameters()}

    def group(i):
        def run(x):
            for m in layers[i:i + N]:
                x = m(x)
            return x
        return run

    phase = {"now": "forward"}
    per_phase = {"forward": {}, "backward": {}}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            per_phase[phase["now"]][ptr] = t.untyped_storage().nbytes()
        return t

    x = torch.randn(tokens, width, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = x
        for i in range(0, L, N):
            y = checkpoint(group(i), y, use_reentrant=False)
        phase["now"] = "backward"
        y.sum().backward()
    return sum(per_phase["forward"].values()), sum(per_phase["backward"].values())


def test_torch_keeps_one_input_per_group_and_recreates_the_groups():
    """With groups of N, the forward keeps L/N group inputs, not L; the backward re-creates every layer once
    (the same bytes whatever N), N of them alive together per group."""
    one_in = 32 * 64 * 4  # one layer input, fp32
    for N in (1, 2, 4):
        kept, recreated = _saved(8, N)
        assert kept == 8 // N * one_in
        assert recreated == _saved(8, 1)[1]


def _activations(group: int):
    m = load_model("llama3-70b")
    tr = Training(seq_length=8192, global_batch_size=8)
    out = stage_memory_arrays(m, tr, tp=8, pp=1, dp=1, micro_batch_size=1, num_microbatches=1, recompute="full",
                              recompute_group=group, layers_per_stage=None)
    return float(np.asarray(out["activations_bytes"]).ravel()[0])


def test_the_memory_model_keeps_one_input_per_group_and_one_group_in_backward():
    """Llama-3-70B, TP 8 without SP, one micro-batch: full recompute keeps each layer's input, s·h·2 bytes
    (replicated over TP), and re-creates one layer in backward. With groups of N, L/N inputs are kept and N layers
    are re-created: activations(N) − activations(1) = (L/N − L)·s·h·2 + (N − 1)·(one layer's whole bytes)."""
    from simulator.memory.activations import layer_activation_bytes

    m = load_model("llama3-70b")
    tr = Training(seq_length=8192, global_batch_size=8)
    inp = 8192 * 8192 * 2
    whole = float(layer_activation_bytes(m, tr, tp=8, cp=1, micro_batch_size=1, sequence_parallel=False,
                                         recompute="none"))
    L = m.num_layers
    for N in (2, 4, 8):
        got = _activations(N) - _activations(1)
        assert got == pytest.approx((L // N - L) * inp + (N - 1) * whole, rel=1e-6)


def test_settings_that_do_not_go_together_are_refused():
    with pytest.raises(InputError, match="recompute_group"):
        Layout(num_gpus=8, tp=8, recompute="selective", recompute_group=2)
    with pytest.raises(InputError, match="recompute_layers 2"):
        Layout(num_gpus=8, tp=8, recompute="full", recompute_layers=2, recompute_group=2)
    assert Layout(num_gpus=8, tp=8, recompute="full", recompute_group=2).to_dict(8)["recompute_group"] == 2


def test_megatron_uniform_round_trip(tmp_path):
    from helpers.megatron_roundtrip import round_trip

    text, flags, _ = round_trip(
        tmp_path, "--num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64 "
                  "--group-query-attention --num-query-groups 8 --seq-length 8192 --max-position-embeddings 8192 "
                  "--micro-batch-size 1 --global-batch-size 64 --tensor-model-parallel-size 8 "
                  "--pipeline-model-parallel-size 4 --recompute-granularity full --recompute-method uniform "
                  "--recompute-num-layers 2 --swiglu --normalization RMSNorm --vocab-size 128256 --bf16 "
                  "--untie-embeddings-and-output-weights --disable-bias-linear --position-embedding-type rope",
        nodes=8)
    assert "recompute_group = 2" in text
    i = flags.index("--recompute-method")
    assert flags[i + 1:i + 4] == ["uniform", "--recompute-num-layers", "2"]
    out = subprocess.run([sys.executable, "-c", "from simulator.cli import main; main()", "memory", "--model",
                          "llama3-70b", "--gpus", "8", "--tp", "8", "--recompute", "selective", "--recompute-group",
                          "2"], capture_output=True, text=True)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
