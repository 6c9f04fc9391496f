"""Attention dropout inside a fused attention kernel: the measured factors (cost/attention.py DROPOUT_FACTORS, fitted
by validation/attention_dropout.py on validation/h200/attention_dropout.csv) and where the estimate applies them."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from unittest import mock

import pytest

from simulator.cost.attention import DROPOUT_FACTORS, flash_dropout_note, in_kernel_dropout_factor
from simulator.cost.compute import layer_op_times
from simulator.spec.hardware import load_hardware
from simulator.spec.layout import Layout
from simulator.spec.load import load_model
from simulator.spec.training import Training

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "validation"))
import attention_dropout as AD  # noqa: E402


@pytest.fixture(scope="module")
def ratios():
    return AD.ratios()


def _training(kernel: str, dropout: bool) -> Training:
    """The default stack with attention kernel `kernel` ("unfused": materialised attention, its dropout an op)."""
    stack = replace(Training(seq_length=4096, global_batch_size=16).stack, attention_kernel=kernel)
    return Training(seq_length=4096, global_batch_size=16, dropout=dropout, stack=stack)


def test_shipped_factors_are_the_fit_of_the_h200_measurements(ratios):
    fitted = AD.fit(ratios)
    for kernel, (backend, fwd, bwd) in DROPOUT_FACTORS.items():
        assert fitted[backend] == pytest.approx((fwd, bwd), abs=0.001), kernel


def test_factors_reproduce_the_held_out_shapes(ratios):
    # fitted on 4x24x2048 and 1x32x8192; 1x32x4096 and 1x24x2048 were not used
    err = AD.held_out(ratios, AD.fit(ratios)).set_index(["backend", "batch", "heads", "seq"])
    mid = err.xs((1, 32, 4096), level=["batch", "heads", "seq"])
    assert mid[["fwd_err", "bwd_err"]].abs().max().max() < 0.02  # measured 0.0-1.7 %
    small = err.xs((1, 24, 2048), level=["batch", "heads", "seq"])
    assert small["fwd_err"].abs().max() < 0.08  # measured 1.3-7.5 %
    # the flash backward there is the one point off: its dropout-0 baseline (the file's first measurement) ran
    # slower than the same call with dropout (ratio 0.888); the other two backends' backward within 8 %
    assert small.loc[["efficient", "cudnn"], "bwd_err"].abs().max() < 0.08
    assert small.loc["flash", "bwd"] < 1.0


def test_factor_is_flat_across_shapes_where_it_is_fitted(ratios):
    # the Philox draws scale as the kernel's own work: each backend's ratio moves little with the shape (the flash
    # backward's suspect point left out)
    ok = ratios[~((ratios["backend"] == "flash") & (ratios["seq"] == 2048) & (ratios["batch"] == 1))]
    for (backend, ps), (lo, hi) in {(b, p): (ok[ok["backend"] == b][p].min(), ok[ok["backend"] == b][p].max())
                                    for b in AD.BACKENDS for p in AD.PASSES}.items():
        assert hi / lo < 1.13, (backend, ps, lo, hi)  # cudnn forward 1.898-2.138 is the widest: 1.126


def test_no_factor_without_dropout_or_for_unmeasured_or_unfused_kernels():
    for kernel in ("flash2", "cudnn", "xformers", "flash3", "unfused"):
        assert in_kernel_dropout_factor(kernel, False) == (1.0, 1.0)
    for kernel in ("flash3", "flash1", "triton", "triton-pre-mlir", "unfused"):
        assert in_kernel_dropout_factor(kernel, True) == (1.0, 1.0)
    assert in_kernel_dropout_factor("flash2", True) == (1.213, 1.115)


@pytest.mark.parametrize("kernel", sorted(DROPOUT_FACTORS))
def test_fused_attention_with_dropout_is_slower_by_the_factor(kernel):
    m, hw = load_model("llama3-8b"), load_hardware("dgx-h100")
    on, off = (next(o for o in layer_op_times(m, _training(kernel, d), hw) if o.kind == "attention")
               for d in (True, False))
    _, fwd, bwd = DROPOUT_FACTORS[kernel]
    assert float(on.forward_s) == pytest.approx(fwd * float(off.forward_s), rel=1e-12)
    assert float(on.backward_s) == pytest.approx(bwd * float(off.backward_s), rel=1e-12)
    assert float(on.forward_flops) == float(off.forward_flops)  # the draws add time, not FLOPs


def test_unmeasured_and_unfused_attention_times_do_not_move_with_dropout():
    m, hw = load_model("llama3-8b"), load_hardware("dgx-h100")
    for kernel in ("flash3", "unfused"):
        on, off = ({o.name: o for o in layer_op_times(m, _training(kernel, d), hw) if o.kind == "attention"}
                   for d in (True, False))  # unfused: attn_scores and attn_context (QKᵀ, A·V)
        assert on and set(on) == set(off) and _training(kernel, True).flash_attention == (kernel != "unfused")
        for name in on:
            assert float(on[name].forward_s) == float(off[name].forward_s), (kernel, name)
            assert float(on[name].backward_s) == float(off[name].backward_s), (kernel, name)


def test_estimate_step_grows_by_the_factor_on_the_attention_share():
    # llama3-8b on 8 H100, DP 8, micro-batch 1, 16 sequences: 2 micro-batches per rank, no pipeline, no recompute,
    # so the compute time moves by layers x micro-batches x ((f_fwd - 1) t_fwd + (f_bwd - 1) t_bwd) of the cuDNN
    # attention kernel
    from simulator.estimate import estimate

    m, hw, lay = load_model("llama3-8b"), load_hardware("dgx-h100"), Layout(num_gpus=8, zero=1)
    tr = _training("cudnn", True)
    with_ = estimate(m, tr, lay, hw).to_dict()["time"]
    with mock.patch("simulator.cost.compute.in_kernel_dropout_factor", lambda kernel, dropout: (1.0, 1.0)):
        without = estimate(m, tr, lay, hw).to_dict()["time"]
    att = next(o for o in layer_op_times(m, tr, hw) if o.kind == "attention")  # with the factor
    _, fwd, bwd = DROPOUT_FACTORS["cudnn"]
    added = m.num_layers * 2 * ((1 - 1 / fwd) * float(att.forward_s) + (1 - 1 / bwd) * float(att.backward_s))
    assert with_["compute_s"] - without["compute_s"] == pytest.approx(added, rel=1e-9)
    assert with_["step_s"] > without["step_s"]


def test_note_only_for_fused_kernels_without_a_measured_factor():
    assert flash_dropout_note(_training("flash3", True)).startswith("attention dropout inside the flash3 attention")
    assert "flash2, cudnn, xformers" in flash_dropout_note(_training("triton", True))
    for kernel in DROPOUT_FACTORS:
        assert flash_dropout_note(_training(kernel, True)) == ""
    assert flash_dropout_note(_training("flash3", False)) == ""
    assert flash_dropout_note(_training("unfused", True)) == ""


def test_estimate_names_in_kernel_dropout_only_where_it_is_not_timed():
    # the estimate's not_modelled line: flash3 with dropout (no factor) has it; the default stack's cuDNN kernel
    # (measured), the same job without dropout and materialised attention (dropout an op of the list) do not
    from simulator.estimate import estimate

    m, hw, lay = load_model("llama3-8b"), load_hardware("dgx-h100"), Layout(num_gpus=8)
    notes = {(k, d): [t for t in estimate(m, _training(k, d), lay, hw).to_dict()["not_modelled"]
                      if t.startswith("attention dropout")]
             for k, d in (("flash3", True), ("cudnn", True), ("flash3", False), ("unfused", True))}
    assert len(notes[("flash3", True)]) == 1
    assert notes[("cudnn", True)] == notes[("flash3", False)] == notes[("unfused", True)] == []
