"""Training metrics computed on the logits (Stack.train_metric_losses; cost/memory_ops.py `_train_metric_ops`)
against torch on CPU: the kernels torch.nn.CrossEntropyLoss runs, the autocast rules that act on them, and the
bytes those kernels move."""
import pytest

from simulator.cost.memory_ops import _head_memory_ops
from simulator.errors import InputError
from simulator.spec.model import ModelSpec
from simulator.spec.stack import load_stack
from simulator.spec.training import Training

MODEL = ModelSpec(hidden_size=64, num_layers=2, num_heads=4, ffn_hidden_size=256, vocab_size=1000)


def _metric_bytes(precision: str, n: int) -> dict:
    tr = Training(seq_length=16, global_batch_size=4, precision=precision,
                  stack=load_stack("fsdp", train_metric_losses=n))
    ops = _head_memory_ops(MODEL, tr, tp=1, cp=1, micro_batch_size=4, sequence_parallel=False)
    return {o.name: (float(o.forward_bytes), float(o.backward_bytes), o.table) for o in ops
            if o.name.startswith("train metrics")}


def _logged_ops(torch, logits, target):
    """(op name, input dtypes and sizes, output dtypes and sizes) of every aten op CrossEntropyLoss(reduction='sum')
    dispatches on `logits`, without autocast."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            outs = out if isinstance(out, (tuple, list)) else (out,)
            seen.append((func.__name__, [(a.dtype, a.numel()) for a in args if isinstance(a, torch.Tensor)],
                         [(t.dtype, t.numel()) for t in outs if isinstance(t, torch.Tensor)]))
            return out

    with torch.no_grad(), Log():
        torch.nn.CrossEntropyLoss(reduction="sum")(logits, target)
    return seen


@pytest.mark.parametrize("precision,dtype", [("bf16", "bfloat16"), ("fp16", "float16"), ("fp32", "float32")])
def test_metric_bytes_are_the_kernels_cross_entropy_runs_under_cuda_autocast(precision, dtype):
    torch = pytest.importorskip("torch")
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    # CUDA autocast leaves cross_entropy_loss to its decomposition, keeps the dtype it passes log_softmax
    # (fp32_set_opt_dtype respects an explicit dtype) and casts nll_loss's input to fp32
    assert not has("aten::cross_entropy_loss", "AutocastCUDA")
    assert has("aten::log_softmax.int", "AutocastCUDA") and has("aten::nll_loss", "AutocastCUDA")
    T, V = 4 * 16, MODEL.vocab_size
    td = getattr(torch, dtype)
    seen = _logged_ops(torch, torch.randn(T, V).to(td), torch.randint(0, V, (T,)))
    assert [name for name, _, _ in seen] == ["_log_softmax.default", "nll_loss_forward.default"]
    (_, ins, outs), (_, nll_in, _) = seen
    assert ins == [(td, T * V)] and outs == [(td, T * V)]  # log_softmax in the logits' own dtype
    assert nll_in[0] == (td, T * V)  # ...whose output autocast casts to fp32 before nll_loss (a gather of T)
    e = td.itemsize
    softmax = (ins[0][1] + outs[0][1]) * e
    cast = (e + 4) * T * V if td != torch.float32 else 0  # fp32 log-probabilities need no cast
    got = _metric_bytes(precision, 1)
    assert got["train metrics (reduction)"] == (0.0, softmax, "memory_reduction")
    assert got.get("train metrics", (0.0, 0.0, "memory"))[:2] == (0.0, cast)


def test_two_metrics_cost_twice_one_and_none_cost_nothing():
    one, two = _metric_bytes("bf16", 1), _metric_bytes("bf16", 2)
    assert _metric_bytes("bf16", 0) == {}
    assert {k: v[1] for k, v in two.items()} == {k: 2 * v[1] for k, v in one.items()}


def test_the_metrics_run_in_the_head_block_s_backward_only():
    from simulator.cost import compute as C
    from simulator.spec.hardware import load_hardware

    m = ModelSpec(hidden_size=512, num_layers=4, num_heads=8, ffn_hidden_size=2048, vocab_size=32000)

    def basis(n):
        tr = Training(seq_length=1024, global_batch_size=8, stack=load_stack("fsdp", train_metric_losses=n))
        return C.layer_basis_times_by_mode(m, tr, load_hardware("dgx-h100"), micro_batch_size=2,
                                           modes=("none",))["none"]

    none, two = basis(0), basis(2)
    head, bwd = C.BASIS.index("head"), C.BASIS_KEYS.index("backward_s")
    changed = {(k, b) for k in range(len(C.BASIS_KEYS)) for b in range(len(C.BASIS))
               if two[k][..., b] != none[k][..., b]}
    assert changed == {(bwd, head)} and two[bwd][..., head] > none[bwd][..., head]


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2", 2000])
def test_a_bad_count_is_refused_naming_the_key(bad):
    with pytest.raises(InputError, match="train_metric_losses"):
        load_stack("fsdp", train_metric_losses=bad)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_metric_memory_is_what_the_decomposition_allocates_on_cpu(dtype):
    # cross_entropy under CUDA autocast (the first test): log_softmax in the logits' dtype, its output cast to
    # fp32 for nll_loss; the peak torch allocates above the kept logits, from the profiler's allocation events
    torch = pytest.importorskip("torch")
    import gc

    from helpers.profiler_peak import peak_bytes
    from simulator.memory.head_activations import train_metric_bytes
    from torch.profiler import ProfilerActivity, profile

    T, V = 64, 4096
    td = getattr(torch, dtype)
    logits, target = torch.randn(T, V).to(td), torch.randint(0, V, (T,))
    gc.collect()
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        torch.nn.functional.nll_loss(torch.log_softmax(logits, 1, dtype=td).float(), target, reduction="sum")
    precision = {"bfloat16": "bf16", "float32": "fp32"}[dtype]
    tr = Training(seq_length=T, global_batch_size=1, precision=precision,
                  stack=load_stack("fsdp", train_metric_losses=2))
    m = ModelSpec(hidden_size=64, num_layers=2, num_heads=4, ffn_hidden_size=256, vocab_size=V)
    predicted = float(train_metric_bytes(m, tr, tp=1, cp=1, micro_batch_size=1))
    kept = T * V * td.itemsize
    assert peak_bytes(prof) == pytest.approx(predicted - kept, rel=0.01)


def test_the_metric_phase_sets_the_head_stage_peak_when_it_outweighs_the_activations():
    from simulator.memory import memory_breakdown
    from simulator.spec.layout import Layout

    m = ModelSpec(hidden_size=256, num_layers=4, num_heads=4, ffn_hidden_size=1024, vocab_size=200_000)
    lay = Layout(num_gpus=2, pp=2, micro_batch_size=4)

    def stages(n):
        # llm-foundry's loss (xentropy: bf16 logits kept, a bf16 gradient in backward)
        tr = Training(seq_length=2048, global_batch_size=8, cross_entropy="xentropy",
                      stack=load_stack("fsdp", train_metric_losses=n, cross_entropy="xentropy"))
        return memory_breakdown(m, tr, lay).per_stage

    none, two = stages(0), stages(2)
    assert two[0].peak_bytes == none[0].peak_bytes  # not on the first stage
    head = two[-1]
    T, e = 4 * 2048, 2.0
    assert head.optimizer_step_bytes == pytest.approx((2 * e + 4) * T * m.vocab_size)
    assert head.activations_bytes == 0.0  # the phase holds no activations
    assert head.peak_bytes > none[-1].peak_bytes


SCENARIO = ('[model]\npreset = "llama3-8b"\n[hardware]\npreset = "dgx-h100"\nnum_gpus = 8\n'
            '[training]\nseq_length = 2048\nglobal_batch_size = 64\n[layout]\nzero = 3\nmicro_batch_size = 4\n'
            '[stack]\npreset = "fsdp"\ntrain_metric_losses = {}\n')


def test_a_scenario_sets_the_metrics_and_a_bad_value_is_one_line(tmp_path, capsys):
    import json

    from helpers.cli_run import run as _cli

    sc = tmp_path / "s.toml"
    sc.write_text(SCENARIO.format(2))
    code, out, err = _cli(["estimate", str(sc), "--format", "json"], capsys)
    assert code in (0, None), err
    with_metrics = json.loads(out)
    assert with_metrics["stack"]["train_metric_losses"] == 2
    sc.write_text(SCENARIO.format(0))
    _, out, _ = _cli(["estimate", str(sc), "--format", "json"], capsys)
    assert with_metrics["time"]["step_s"] > json.loads(out)["time"]["step_s"]
    for bad in ("-1", "1.5", '"two"', "true"):
        sc.write_text(SCENARIO.format(bad))
        code, out, err = _cli(["estimate", str(sc)], capsys)
        assert code == 2 and err.strip().count("\n") == 0 and "train_metric_losses" in err, (bad, err)
