"""dgx-h100's table for row-reduction kernels (validation/h100_reduction_table.py): fitted to the first lease's
queued RMSNorm kernels, checked on the second lease's and on the norm and softmax kernels of a profiled training step
that the fit never saw; and the loss's split into its streaming casts and its softmax reductions."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))

import h100_reduction_table as R  # noqa: E402


def test_the_presets_carry_the_fitted_table():
    assert R.check() == []


def test_the_fit_holds_on_what_it_never_saw():
    t0, b = R.fit()
    assert 1.8e12 < b < 2.6e12  # below the streaming kernels' 2.85 TB/s (validation/h100_memory_table.py)
    c = R.checks()
    second = c[c["what"].str.startswith("second lease")]
    assert len(second) >= 5 and second["error"].abs().max() < 0.12  # the other machine's RMSNorm: -8 .. +11 %
    trace = c[c["what"].str.startswith("trace")]
    calls = {k: n for k, (n, _) in R.trace_kernels().items()}

    def per_step(col):
        return sum(calls[w.removeprefix("trace: ")] * s for w, s in zip(trace["what"], trace[col]))
    # the five norm and softmax kernel families of the step, summed: within 5 % (each within 30 %), where the pooled
    # streaming table gives them 24 % too little time
    assert per_step("fit_s") == pytest.approx(per_step("measured_s"), rel=0.05)
    assert trace["error"].abs().max() < 0.30


@pytest.mark.parametrize("ce,fwd,bwd", [("torch-fp32", 14.0, 22.0), ("vocab-parallel", 14.0, 6.0),
                                        ("fused", 2.0, 4.0), ("torch", 4.0, 8.0)])
def test_the_loss_bytes_are_the_closed_forms_split_by_kernel_class(ce, fwd, bwd):
    # (e + 12)·X forward in the eager losses, (20 + e)·X / (4 + e)·X backward, e·X / 2e·X fused (memory_ops.py);
    # the softmax passes are the reduction part: 8·X forward, 12·X backward in torch-fp32
    from simulator.cost.memory_ops import _head_memory_ops
    from simulator.spec.model import ModelSpec
    from simulator.spec.stack import load_stack
    from simulator.spec.training import Training

    m = ModelSpec(name="m", hidden_size=256, num_layers=2, num_heads=4, ffn_hidden_size=512, vocab_size=1000)
    tr = Training(seq_length=64, global_batch_size=1, cross_entropy=ce, stack=load_stack("torchtitan"))
    ops = {o.name: o for o in _head_memory_ops(m, tr, tp=1, cp=1, micro_batch_size=1, sequence_parallel=False)}
    X = 64 * 1000
    loss = [o for n, o in ops.items() if n.startswith("loss")]
    assert sum(float(o.forward_bytes) for o in loss) == fwd * X
    assert sum(float(o.backward_bytes) for o in loss) == bwd * X
    red = ops["loss (reduction)"]
    assert red.table == "memory_reduction"
    if ce not in ("fused", "torch"):
        assert float(red.forward_bytes) == 8.0 * X and ops["loss"].table == "memory"
