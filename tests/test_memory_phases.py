"""The step's two memory phases and the gradients' copies against torch itself on CPU (memory/states.py
`optimizer_step_bytes`, `absent_grad_bytes`, `ddp_bucket_bytes`; memory/worst.py `peak_terms`): the bytes torch's
optimizers allocate while they step, what gradients freed by zero_grad change at the activation peak, and the
copy DDP's buckets keep, read from torch.profiler's allocation events.
"""
import numpy as np
import pytest

from simulator.memory import memory_breakdown
from simulator.memory.states import absent_grad_bytes, optimizer_step_bytes
from simulator.spec.layout import Layout
from simulator.spec.model import ModelSpec
from simulator.spec.stack import load_stack
from simulator.spec.training import Training


def _peak_above_start(torch, fn) -> int:
    """Bytes above those live when `fn()` starts, at its peak (torch.profiler's [memory] events in time order)."""
    from torch.profiler import ProfilerActivity, profile

    import gc

    from helpers.profiler_peak import peak_bytes

    gc.collect()  # earlier tests' garbage is not freed inside the profile (it would lower the peak)
    gc.disable()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the allocations and frees in one order (a full run once saw +1 layer)
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn()
    finally:
        torch.set_num_threads(threads)
        gc.enable()
    return peak_bytes(prof)


def _adamw_step_bytes(impl: str, dtype: str) -> tuple[int, int, int]:
    """(peak bytes torch's AdamW step allocates above the states, parameter count, largest parameter) on CPU."""
    torch = pytest.importorskip("torch")
    td = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(s, generator=g).to(td).requires_grad_() for s in ((384, 512), (512,), (1000, 96), (96, 384))]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g).to(td)
    kw = {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}[impl]
    opt = torch.optim.AdamW(params, lr=1e-3, **kw)
    opt.step()  # the first step allocates the moments (state initialisation): not the step's transient
    return _peak_above_start(torch, opt.step), sum(p.numel() for p in params), max(p.numel() for p in params)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("impl", ["fused", "foreach", "for-loop"])
def test_optimizer_step_buffers_are_what_torch_allocates(impl, dtype):
    # torch's foreach AdamW allocates one second-moment copy for its denominator; the fused step nothing; the
    # per-parameter loop two copies of one parameter at a time (sqrt, then the division; not counted)
    measured, n, largest = _adamw_step_bytes(impl, dtype)
    b = {"fp32": 4, "bf16": 2}[dtype]
    tr = Training(seq_length=16, global_batch_size=1, precision=dtype, grad_dtype=dtype, master_weights=False,
                  optimizer="adamw", optimizer_dtype=dtype, stack=load_stack("megatron", optimizer_impl=impl))
    predicted = float(optimizer_step_bytes(tr.optimizer_bytes * n, tr))
    if impl == "for-loop":
        assert predicted == 0.0 and 0 < measured <= 2 * b * largest * 1.01
    else:
        assert measured == pytest.approx(predicted, rel=0.01, abs=1024)
    assert (predicted > 0) == (impl == "foreach")


def _step_peak(micro_batches: int, set_to_none: bool) -> tuple[int, int, int]:
    """(peak bytes above the parameters of one training step of `micro_batches` on CPU, gradient bytes, the
    largest layer's gradient bytes): an MLP whose activations outweigh its gradients, gradients kept
    (zeroed in place) or set to None before the step."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[m for _ in range(6) for m in (torch.nn.Linear(256, 2048), torch.nn.GELU(),
                                                              torch.nn.Linear(2048, 256))])
    x = torch.randn(micro_batches, 512, 256)
    net(x[0]).square().mean().backward()  # a first step allocates the gradients

    def step():
        net.zero_grad(set_to_none=set_to_none)
        for i in range(micro_batches):
            net(x[i]).square().mean().backward()

    grads = sum(p.numel() * p.element_size() for p in net.parameters())
    largest = max(sum(p.numel() * p.element_size() for p in m.parameters()) for m in net)  # one layer's
    return _peak_above_start(torch, step) + (0 if set_to_none else grads), grads, largest


@pytest.mark.parametrize("micro_batches", [1, 2])
def test_gradients_set_to_none_are_absent_at_the_activation_peak_of_a_steps_first_backward(micro_batches):
    # one micro-batch: the peak (all activations alive, the backward about to start) holds no gradients when
    # zero_grad set them to None; with two, the second forward runs with the first backward's gradients (then
    # the kept buffer costs only the temporaries AccumulateGrad adds into it, which the first backward of
    # set-to-None gradients steals instead: one to seven layers' gradients here, by the allocator's timing, which
    # varies between runs (0.33 G and 0.58 G seen); the check is that they stay below the G absent gradients would
    # save)
    kept, grads, largest = _step_peak(micro_batches, set_to_none=False)
    freed, _, _ = _step_peak(micro_batches, set_to_none=True)
    off = float(absent_grad_bytes(grads, load_stack("hf"), inflight=1.0, num_microbatches=micro_batches, zero=0))
    assert off == (grads if micro_batches == 1 else 0.0)
    if micro_batches == 1:
        assert off <= kept - freed <= off + 2 * largest + 65536  # (+ the step's scalars: losses, their gradients)
    else:
        assert 0 <= kept - freed < 0.8 * grads  # temporaries only (at most 7 layers' seen: 0.58 G), not G


def test_sharded_gradients_stay_counted_and_persistent_buffers_never_leave():
    # ZeRO-2/3 gradients are reduce-scatter outputs on another stream (the freed activations cannot hold them);
    # a persistent buffer is there at every moment
    hf, mg = load_stack("hf"), load_stack("megatron")
    g = np.array([[8.0, 8.0]])
    assert absent_grad_bytes(g, hf, inflight=np.array([[1.0, 1.0]]), num_microbatches=np.array([1]),
                             zero=np.array([3])).tolist() == [[0.0, 0.0]]
    assert absent_grad_bytes(g, hf, inflight=np.array([[2.0, 1.0]]), num_microbatches=np.array([2]),
                             zero=np.array([1])).tolist() == [[8.0, 0.0]]  # 1F1B: the stage that holds all m
    assert not absent_grad_bytes(g, mg, inflight=1.0, num_microbatches=1, zero=0).any()


def _tiny_training(stack, **kw):
    model = ModelSpec(name="tiny", hidden_size=1024, num_layers=8, num_heads=16, ffn_hidden_size=4096, vocab_size=32000,
                      mlp="swiglu", norm="rmsnorm", tie_word_embeddings=False)
    tr = Training(seq_length=256, global_batch_size=1, precision="bf16", grad_dtype="bf16", master_weights=False,
                  optimizer="adamw", optimizer_dtype="bf16", stack=stack, **kw)
    return model, tr


def test_a_peak_in_the_optimizer_step_reports_that_phases_consumers():
    # small activations, foreach AdamW: the step phase (all states + the denominator copy) is the peak; its
    # consumers add up to it, with no activations and the step's buffer in `other`
    model, tr = _tiny_training(load_stack("hf"))
    w = memory_breakdown(model, tr, Layout(num_gpus=1, micro_batch_size=1)).worst
    states = w.params_bytes + w.grads_bytes + w.optimizer_bytes
    assert w.activations_bytes == 0.0 and w.optimizer_step_bytes == pytest.approx(w.optimizer_bytes / 2)
    assert w.peak_bytes == pytest.approx(states + w.other_bytes)
    assert w.other_bytes == pytest.approx(w.optimizer_step_bytes + w.overhead_bytes)
    assert w.allocated_bytes == pytest.approx(states + w.optimizer_step_bytes)
    fused = memory_breakdown(model, *_tiny_training(load_stack("hf", optimizer_impl="fused"))[1:],
                             Layout(num_gpus=1, micro_batch_size=1)).worst
    assert fused.optimizer_step_bytes == 0.0 and fused.peak_bytes < w.peak_bytes


def test_ddp_keeps_a_second_gradient_copy_in_its_buckets_unless_the_gradients_are_views(free_port):
    # torch's DDP allocates buckets covering every gradient; with gradient_as_bucket_view=False (its default:
    # Composer, accelerate) the gradients are copied into them, so both stay allocated (one gloo rank on CPU)
    pytest.importorskip("torch")
    import json
    import subprocess
    import sys
    from pathlib import Path

    from simulator.memory.states import ddp_bucket_bytes

    helper = Path(__file__).parent / "helpers" / "ddp_bucket_bytes.py"
    kept = {}
    for mode in ("copied", "views"):
        r = subprocess.run([sys.executable, str(helper), str(free_port()), mode], capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        out = json.loads(r.stdout.strip().splitlines()[-1])
        kept[mode], kept["grads"] = out["kept"], out["grads"]
    assert kept["copied"] == pytest.approx(2 * kept["grads"], rel=0.01)  # buckets + the gradients
    assert kept["views"] == pytest.approx(kept["grads"], rel=0.01)  # the buckets, the gradients their views
    psi = kept["grads"] / 4  # fp32 parameters
    for stack, extra in (("fsdp", kept["grads"]), ("hf", kept["grads"]), ("megatron", 0.0), ("torchtitan", 0.0)):
        tr = Training(seq_length=16, global_batch_size=8, precision="fp32", grad_dtype="fp32",
                      stack=load_stack(stack))
        assert float(ddp_bucket_bytes(psi, tr, zero=0, shard_degree=8)) == pytest.approx(extra)
        assert float(ddp_bucket_bytes(psi, tr, zero=0, shard_degree=1)) == 0.0  # the frameworks: no DDP on one rank
        # what the helper measured: DDP wrapped around a one-rank group (a script that always wraps)
        one = Training(seq_length=16, global_batch_size=8, precision="fp32", grad_dtype="fp32",
                       stack=load_stack(stack, ddp_one_rank=True))
        assert float(ddp_bucket_bytes(psi, one, zero=0, shard_degree=1)) == pytest.approx(extra)
        assert float(ddp_bucket_bytes(psi, tr, zero=2, shard_degree=8)) == 0.0  # FSDP's own buffers
        # torch's single-process DataParallel (the hf stack's other mode) and async data parallelism: no buckets
        for mode in ("dataparallel", "async"):
            assert float(ddp_bucket_bytes(psi, tr, zero=0, shard_degree=8, dp_mode=mode)) == 0.0


def test_ddp_bucket_copy_counts_with_the_gradients_and_stays_when_they_are_set_to_none():
    model, _ = _tiny_training(load_stack("hf"))
    tr = Training(seq_length=4096, global_batch_size=8, precision="bf16", grad_dtype="fp32", stack=load_stack("hf"))
    lay = Layout(num_gpus=8, micro_batch_size=1)
    copied = memory_breakdown(model, tr, lay).worst
    views = memory_breakdown(model, Training(seq_length=4096, global_batch_size=8, precision="bf16", grad_dtype="fp32",
                                             stack=load_stack("hf", ddp_bucket_view=True)), lay).worst
    g = 4.0 * model.total_params()
    # one micro-batch per rank: the .grad tensors are set to None at the activation peak, the buckets are not
    assert views.grads_bytes == 0.0 and copied.grads_bytes == pytest.approx(g)
    tensors = lambda w: w.peak_bytes - w.overhead_bytes  # noqa: E731 (the allocator's reserve grows with them)
    assert tensors(copied) - tensors(views) == pytest.approx(g, rel=1e-9)
    # the estimate (the kernel's memory path) agrees, and torch DataParallel keeps no bucket copy
    from simulator.estimate import estimate
    from simulator.spec.hardware import load_hardware

    hw = load_hardware("dgx-h100")  # (with a GPU, both count its BLAS workspaces)
    e = estimate(model, tr, lay, hw)
    assert e.memory.worst.peak_bytes == pytest.approx(memory_breakdown(model, tr, lay, hw).worst.peak_bytes, rel=1e-12)
    single = memory_breakdown(model, tr, Layout(num_gpus=8, micro_batch_size=1, dp_mode="dataparallel")).worst
    assert single.grads_bytes == 0.0 and tensors(single) == pytest.approx(tensors(views), rel=1e-12)


def test_ddp_wrapped_around_one_rank_keeps_its_bucket_copy_when_the_stack_wraps_one_rank():
    # torch's Reducer allocates its buckets with no world-size condition (reducer.cpp initialize_buckets), so a
    # one-rank DDP copies the gradients too (+G measured on an H100, validation/gpu_memory_report.py); the
    # frameworks wrap only with more than one rank (Composer), which stays the default
    model, _ = _tiny_training(load_stack("hf"))
    lay = Layout(num_gpus=1, micro_batch_size=1)

    def worst(**over):
        tr = Training(seq_length=4096, global_batch_size=1, precision="bf16", grad_dtype="bf16", master_weights=False,
                      optimizer="adamw", optimizer_dtype="bf16",
                      stack=load_stack("torchtitan", grad_buffer="persistent", **over))
        return memory_breakdown(model, tr, lay).worst

    g = 2.0 * model.total_params()
    base = worst(ddp_bucket_view=False)
    assert worst(ddp_bucket_view=False, ddp_one_rank=True).allocated_bytes - base.allocated_bytes == pytest.approx(g)
    assert worst(ddp_bucket_view=True, ddp_one_rank=True).allocated_bytes == pytest.approx(base.allocated_bytes)


def test_sharded_gradients_set_to_none_leave_the_allocated_peak_but_not_the_reserved_one():
    # ZeRO-3 gradients are allocated on the reduce-scatter stream in backward: absent from the allocated bytes at
    # the activation peak like any set-to-None gradient, while the device's (reserved) peak keeps their blocks
    model, _ = _tiny_training(load_stack("hf"))
    lay = Layout(num_gpus=8, micro_batch_size=1, zero=3)

    def worst(grads):
        tr = Training(seq_length=4096, global_batch_size=8, precision="bf16", grad_dtype="bf16", master_weights=False,
                      optimizer="adamw", optimizer_dtype="bf16",
                      stack=load_stack("torchtitan", optimizer_impl="fused", grad_buffer=grads))
        return memory_breakdown(model, tr, lay).worst

    kept, freed = worst("persistent"), worst("set-to-none")
    assert freed.activations_bytes > 0.0  # the activation phase holds both peaks
    assert freed.peak_bytes == pytest.approx(kept.peak_bytes, rel=1e-12)
    assert kept.allocated_bytes - freed.allocated_bytes == pytest.approx(kept.grads_bytes, rel=1e-9)
    off = [float(absent_grad_bytes(8.0, load_stack("hf"), inflight=1.0, num_microbatches=1, zero=3, counter=c))
           for c in ("reserved", "allocated")]
    assert off == [0.0, 8.0]
    with pytest.raises(ValueError, match="counter"):
        absent_grad_bytes(8.0, load_stack("hf"), inflight=1.0, num_microbatches=1, zero=3, counter="device")
