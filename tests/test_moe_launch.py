"""An MoE layer's launches (cost/launch.py layer_kernels), its CUDA-graph scopes, and the all-to-all dispatcher's
chunk sorts (cost/elementwise_ops.py sort_chunks) against what torch runs for Megatron-Core's algorithm on CPU."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simulator.cost import compute as C
from simulator.cost.memory_ops import memory_ops
from simulator.errors import InputError
from simulator.spec.model import ModelSpec
from simulator.spec.stack import load_stack
from simulator.spec.training import Training
from tests.test_compute import flat_profile

# a small MoE whose layer passes are host-bound at a host time per launch of 1 ms on the flat profile
MOE = ModelSpec(name="tiny-moe", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=4, ffn_hidden_size=128,
                vocab_size=100, num_experts=16, experts_per_token=2, moe_ffn_hidden_size=32)
H = 1e-3
F, B, W = (C.BASIS_KEYS.index(k) for k in ("forward_s", "backward_s", "weight_s"))
MOE_COL = C.BASIS.index("moe_layer")


def _basis(stack, ep=1, model=MOE):
    tr = Training(seq_length=16, global_batch_size=1, stack=stack)
    return C.layer_basis_times_by_mode(model, tr, flat_profile(), ep=ep, modes=("none",))["none"]


def test_an_moe_layer_launches_the_stacks_moe_block_and_a_gemm_loop_per_local_expert():
    """Its own launches at the stack's MoE host time, its experts' GEMM loop at the plain one (launch.layer_host_s)."""
    hm = 3 * H
    st = load_stack("megatron", host_s_per_kernel=H, moe_host_s_per_kernel=hm)
    (m_f, m_b), (p_f, p_b) = st.moe_kernels_per_layer, st.moe_kernels_per_expert
    for ep in (1, 2, 4, 16):
        t = _basis(st, ep=ep)
        g = MOE.num_experts / ep  # local experts
        assert t[F, MOE_COL] == pytest.approx(m_f * hm + g * p_f * H)
        assert t[B, MOE_COL] + t[W, MOE_COL] == pytest.approx(m_b * hm + g * p_b * H)
    arrays = C.layer_basis_times_by_mode(MOE, Training(seq_length=16, global_batch_size=1, stack=st), flat_profile(),
                                         ep=np.array([1, 4, 16]), modes=("none",))["none"]
    np.testing.assert_allclose(arrays[F, :, MOE_COL], [_basis(st, ep=e)[F, MOE_COL] for e in (1, 4, 16)])
    plain = _basis(load_stack("megatron", host_s_per_kernel=H, moe_host_s_per_kernel=0.0), ep=4)
    assert plain[F, MOE_COL] == pytest.approx((m_f + 4 * p_f) * H)  # no MoE host time: every launch at h
    dense = _basis(st, model=replace(MOE, num_experts=0, experts_per_token=0, moe_ffn_hidden_size=None))
    assert dense[F, C.BASIS.index("dense_layer")] == pytest.approx(st.kernels_per_layer[0] * H)  # dense: at h


def test_a_stack_without_moe_counts_launches_its_dense_layers_count_for_moe_layers():
    st = load_stack("megatron", host_s_per_kernel=H, moe_kernels_per_layer=(0, 0))  # (its MoE host time: unused)
    kf, kb = st.kernels_per_layer
    t = _basis(st, ep=1)
    assert t[F, MOE_COL] == pytest.approx(kf * H)
    assert t[B, MOE_COL] + t[W, MOE_COL] == pytest.approx(kb * H)


@pytest.mark.parametrize("graphs", ["layer", "attn", "moe_router", "moe_router,moe_preprocess",
                                    "attn,moe_router,moe_preprocess"])
def test_cuda_graphs_replace_the_launches_they_capture(graphs):
    eager = _basis(load_stack("megatron", host_s_per_kernel=H, moe_host_s_per_kernel=H), ep=1)
    graphed = _basis(load_stack("megatron", host_s_per_kernel=H, moe_host_s_per_kernel=H, cuda_graphs=graphs), ep=1)
    assert graphed[F, MOE_COL] < eager[F, MOE_COL]
    assert graphed[B, MOE_COL] + graphed[W, MOE_COL] < eager[B, MOE_COL] + eager[W, MOE_COL]
    if graphs == "layer":  # one graph each way: the layer runs at its GPU time
        free = _basis(load_stack("megatron", host_s_per_kernel=0.0, moe_host_s_per_kernel=0.0), ep=1)
        assert graphed[F, MOE_COL] == pytest.approx(max(free[F, MOE_COL], H))
    if graphs == "moe_router,moe_preprocess":  # one graph for both parts: fewer launches than the router's alone
        router = _basis(load_stack("megatron", host_s_per_kernel=H, moe_host_s_per_kernel=H, cuda_graphs="moe_router"),
                        ep=1)
        assert graphed[F, MOE_COL] < router[F, MOE_COL]


@pytest.mark.parametrize("value, needle", [
    ("moe_preprocess", "moe_preprocess needs moe_router"),
    ("layer,attn", "'layer' captures the whole layer"),
    ("mlp", "'mlp' is not one of"),
    (3, "cuda_graphs must be a list of scopes"),
])
def test_bad_cuda_graphs_are_one_line_errors(value, needle):
    with pytest.raises(InputError, match=needle):
        load_stack("megatron", cuda_graphs=value)


@pytest.mark.parametrize("line,needle", [('cuda_graphs = ["moe_preprocess"]', "cuda_graphs moe_preprocess needs moe_router"),
                                         ('cudnn_version = "v9"', "cudnn_version must be a release")])
def test_bad_cuda_graphs_or_cudnn_version_in_a_scenario_exit_2_naming_the_file(line, needle, tmp_path, capsys):
    from tests.test_fuzz_found import one_line_error, scenario

    p = scenario(tmp_path, "stack", line)
    one_line_error(["estimate", p], capsys, needle, p)


def test_megatron_bridge_rows_take_their_cuda_graphs_from_the_notes():
    from simulator.validate.mapping import map_run
    from simulator.validate.predict import read_runs

    df = read_runs("validation/mbridge_blackwell.csv")
    got = {}
    for _, r in df.iterrows():
        st = map_run(r.to_dict()).training.stack
        got[r.run_id] = st.cuda_graphs
    assert got["mbridge_b200_26_04_01_qwen3_30b_a3b_mxfp8"] == ("attn", "moe_router", "moe_preprocess")
    assert got["mbridge_b200_26_02_qwen3_30b_a3b_mxfp8"] == ("moe_router", "moe_preprocess")
    assert got["mbridge_b200_25_09_qwen3_30b_a3b_fp8-cs"] == ("layer",)
    assert got["mbridge_b200_26_04_01_qwen3_235b_a22b_mxfp8"] == ()


# ---- the dispatcher's chunk sorts against torch ----------------------------------------------------------------
def _sort_rows(model, ep, dispatcher="alltoall", mbs=2, seq=32):
    tr = Training(seq_length=seq, global_batch_size=mbs, stack=load_stack("megatron", moe_dispatcher=dispatcher))
    return [o for o in memory_ops(model, tr, moe=True, ep=ep, micro_batch_size=mbs) if "sort" in o.name]


def test_the_chunk_sorts_move_every_routed_copy_as_megatrons_algorithm_does_in_torch():
    """Megatron-Core's sort_chunks_by_idxs without the fused kernel (moe_utils.py): split the received tokens into
    chunks by (source rank, local expert), concatenate them in local-expert order. Run in torch on CPU under the
    recording dispatch mode, forward and backward: every routed copy is read and written once per sort."""
    torch = pytest.importorskip("torch")
    from tests.test_elementwise_ops import Recorder, totals

    ep, mbs, seq = 4, 2, 32
    g = MOE.num_experts // ep
    routed = MOE.experts_per_token * mbs * seq  # copies on the rank (force-balanced routing: the same number back)
    sizes = [routed // (ep * g)] * (ep * g)  # chunk per (source rank, local expert)
    order = [r * g + e for e in range(g) for r in range(ep)]  # by local expert, then source rank
    x = torch.randn(routed, MOE.hidden_size, dtype=torch.bfloat16, requires_grad=True)
    with Recorder() as fwd:
        chunks = torch.split(x, sizes)
        y = torch.cat([chunks[i] for i in order])
    dy = torch.ones_like(y)
    with Recorder() as bwd:
        y.backward(dy)
    measured_f, _ = totals(fwd.ops)
    measured_b, _ = totals(bwd.ops)
    rows = _sort_rows(MOE, ep, mbs=mbs, seq=seq)
    assert len(rows) == 1
    # two sorts each way (after the dispatch, before the combine)
    assert rows[0].forward_bytes == pytest.approx(2 * measured_f, rel=0.01)
    assert rows[0].backward_bytes == pytest.approx(2 * measured_b, rel=0.01)


def test_no_chunk_sort_with_one_local_expert_or_the_flex_dispatcher():
    assert sum(o.forward_bytes for o in _sort_rows(MOE, ep=MOE.num_experts)) == 0.0
    assert _sort_rows(MOE, ep=4, dispatcher="flex") == []


def test_the_cuda_graphs_flag_sets_the_stacks_scopes_and_names_itself_in_errors(capsys):
    import json

    from tests.test_stack import _cli

    base = ["estimate", "--model", "qwen3-30b-a3b", "--hardware", "dgx-b200", "--gpus", "8", "--ep", "8", "--seq",
            "4096", "--global-batch", "512", "--format", "json"]
    code, out, err = _cli(base, capsys)
    eager = json.loads(out)
    code, out, err = _cli(base + ["--cuda-graphs", "attn,moe_router,moe_preprocess"], capsys)
    assert code == 0, err
    graphed = json.loads(out)
    assert graphed["stack"]["cuda_graphs"] == ["attn", "moe_router", "moe_preprocess"]
    assert sum(graphed["stack"]["moe_layer_kernels"]) < sum(eager["stack"]["moe_layer_kernels"])
    code, out, err = _cli(base + ["--cuda-graphs", "bogus"], capsys)
    assert code == 2 and err.count("\n") == 1 and "--cuda-graphs 'bogus' is not one of" in err


def test_the_hf_stacks_moe_layer_counts_are_transformers_layer_counted_on_cpu():
    """validation/count_moe_kernels.py: transformers' Qwen3MoeDecoderLayer under torch.profiler on CPU. The recorded
    table is what a recount gives, its grouped_mm counts grow with the experts only by the CPU fallback's mm loop, and
    the hf and fsdp stacks carry the GPU's count derived from it (88/151, no per-expert launches)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import csv
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "validation"))
    import count_moe_kernels as M

    recorded = list(csv.DictReader(open(M.OUT)))
    fresh = M.rows()
    for a, b in zip(recorded, fresh):
        assert (int(a["forward_kernels"]), int(a["backward_kernels"])) == (b["forward_kernels"], b["backward_kernels"])
    counts = M.gpu_counts(recorded)
    for name in ("hf", "fsdp"):
        st = load_stack(name)
        assert (*st.moe_kernels_per_layer, *st.moe_kernels_per_expert) == counts["grouped_mm"]
    assert counts["eager"][2:] == (10, 24)  # transformers' own loop: 10 forward, 24 backward launches per expert


def test_megatrons_moe_host_time_is_its_measured_ratio_to_a_plain_layer():
    """validation/moe_host_cpu.py (validation/cpu/moe_host.csv): Megatron-Core's MoE block, run on CPU with expert
    parallelism 2, issues a kernel in over twice a plain torch layer's host time measured in the same processes, more
    than with EP 1 (which skips the dispatcher's EP bookkeeping); a busy loop beside it slows the block and the plain
    layer alike (moe_host_busy_peer.csv), so the EP 2 rate is the code's, not the load of the second process;
    transformers' MoE layer runs near a plain layer's rate. The megatron stack carries the EP 2 ratio times its host
    time per kernel (the hf stack, none)."""
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "validation"))
    import moe_host_cpu as M

    rows = M.read()
    ep1, ep2 = M.megatron_ratio(rows, ep=1), M.megatron_ratio(rows, ep=2)
    assert len(M.groups(rows, ep=2)) == 9 and ep2 > 2.0 and ep2 > 1.3 * ep1
    busy = M.read(root / "validation" / "cpu" / "moe_host_busy_peer.csv")
    loaded = [M.fit(g)["ratio_to_plain"] for g in M.groups([r | {"peer": "idle"} for r in busy], ep=1).values()]
    assert loaded and max(abs(x / ep1 - 1.0) for x in loaded) < 0.3  # the load slows both codes alike
    for r in (r for r in rows if r["code"].startswith("transformers")):
        us = (float(r["forward_s"]) + float(r["backward_s"])) / (int(r["forward_kernels"]) + int(r["backward_kernels"]))
        assert us * 1e6 / float(r["plain_us_per_kernel"]) < 0.75 * ep2
    st = load_stack("megatron")
    assert st.moe_host_s_per_kernel * 1e6 == pytest.approx(ep2 * st.host_s_per_kernel * 1e6, abs=0.05)
    assert load_stack("hf").moe_host_s_per_kernel == 0.0


def test_the_moe_host_time_is_a_stack_key_in_microseconds_and_bad_values_are_one_line(tmp_path, capsys):
    from tests.test_fuzz_found import one_line_error, scenario

    p = scenario(tmp_path, "stack", "moe_host_us_per_kernel = -3")
    one_line_error(["estimate", p], capsys, "moe_host_us_per_kernel", p)
