"""Compute time per op and per stage.

Independent truths used here: hand arithmetic on flat efficiency tables (expected values carry their
arithmetic), the Zero Bubble paper's per-layer F/B/W FLOP counts (Qi et al. 2024 Table 1, formulas.md
§5.2), the profiled TF/TB/TW of the ZB paper (Table 9, A100) and torchtitan's measured throughput
(shared data published_runs.csv), with stated tolerances.
"""

import numpy as np
import pytest

from simulator.schedules import family

from simulator.cost import compute as C
from simulator.cost import flops as F
from simulator.cost import optimizer as O
from simulator.errors import InputError
from simulator.kernel import evaluate_layouts
from simulator.spec.hardware import hardware_from_dict, load_hardware
from simulator.spec.placement import stage_layer_split
from simulator.spec.layout import Layout
from simulator.spec.load import load_model
from simulator.spec.model import ModelSpec
from simulator.spec.placement import params_per_rank, stage_param_split, stage_placement
from simulator.spec.rules import shard_degrees
from simulator.spec.training import Training


def flat_profile(gemm=0.75, attention=0.5, attention_bwd=None, memory=0.8, peaks=None, gemm_fp8=None, optimizer=None):
    """An H100-like profile whose efficiency tables are constants (hand arithmetic stays simple)."""
    def curve(e):
        return dict(x=[1.0], efficiency=[e], x_unit="any", source="test constant")

    eff = {"gemm": curve(gemm), "attention": curve(attention), "memory": curve(memory),
           "nvlink_ring": curve(0.8), "network": curve(0.9)}
    if attention_bwd is not None:
        eff["attention_bwd"] = curve(attention_bwd)
    if gemm_fp8 is not None:
        eff["gemm_fp8"] = curve(gemm_fp8)
    if optimizer is not None:
        eff["optimizer"] = curve(optimizer)
    return hardware_from_dict({
        "name": "flat-h100",
        "gpu": {"model": "H100-like", "hbm_gb": 80, "hbm_gb_per_s": 3000,
                "peak_tflops": peaks or {"bf16": 1000, "fp8": 2000, "fp32": 60}, "source": "test"},
        "node": {"gpus_per_node": 8, "nvlink_gb_per_s": 450, "nvls": False, "nvlink_latency_us": 3, "source": "test"},
        "network": {"nics_per_node": 8, "nic_gbit_per_s": 400, "ib_latency_us": 10, "nodes_per_leaf": 32,
                    "leaf_oversubscription": 1.0, "source": "test"},
        "efficiency": eff}, where="test profile")


LLAMA = ModelSpec(name="llama-like", hidden_size=4096, num_layers=32, num_heads=32, num_kv_heads=8,
                  ffn_hidden_size=14336, vocab_size=128256)


def _ops(times):
    return {t.name: t for t in times}


def stage_times(model, training, hardware, *, pp=1, vpp=1, schedule="1f1b", layers_per_stage=None, recompute="none",
                tp=1, cp=1, ep=1, micro_batch_size=1, sequence_parallel=False) -> dict:
    """F, B, W, recompute times and FLOPs per microbatch per virtual stage, {BASIS_KEYS name: (S,) array},
    formed as simulator/kernel.py forms them: the per-block basis times (dense layer, MoE layer, embedding,
    head) times each stage's block counts (layers from `stage_layer_split`, the embedding on the first and
    the head on the last virtual stage)."""
    dense, moe = stage_layer_split(model, pp=pp, vpp=vpp, schedule=schedule, layers_per_stage=layers_per_stage)
    S = len(dense)
    blocks = dict(dense_layer=dense, moe_layer=moe, embedding=np.arange(S) == 0, head=np.arange(S) == S - 1)
    counts = np.stack([blocks[b] for b in C.BASIS]).astype(float)  # (4, S)
    basis = C.layer_basis_times_by_mode(model, training, hardware, tp=tp, cp=cp, ep=ep,
                                        micro_batch_size=micro_batch_size, modes=(recompute,),
                                        sequence_parallel=sequence_parallel)[recompute]
    return {k: basis[i] @ counts for i, k in enumerate(C.BASIS_KEYS)}


def optimizer_step(model, training, hardware, *, tp=1, pp=1, dp=1, cp=1, ep=1, zero=0, schedule="1f1b") -> np.ndarray:
    """Optimizer-step time per pipeline rank from the production pieces: the parameters each rank holds
    (spec/placement.py) over the ZeRO sharding degrees (spec/rules.py; 1 without ZeRO)."""
    ne, ex = params_per_rank(stage_param_split(model, stage_placement(model, pp=pp, schedule=schedule)), tp=tp, ep=ep)
    d, d_e = shard_degrees(dp=dp, cp=cp, ep=ep) if zero >= 1 else (1.0, 1.0)
    return O.optimizer_params_step_s(training, hardware, non_expert=ne, expert=ex, shard_degree=d,
                                     expert_shard_degree=d_e)


# ---- single ops by hand -----------------------------------------------------------------------------
def test_memory_bound_norm_time_is_bytes_over_hbm_bandwidth():
    tr = Training(seq_length=4096, global_batch_size=1)
    t = _ops(C.layer_op_times(LLAMA, tr, flat_profile()))["norms"]
    # 2 RMSNorms, forward read + write of 4096 tokens × 4096 × 2 bytes: 2·2·4096·4096·2 = 134,217,728 B
    # at 3000e9 B/s × 0.8: 55.924 µs; backward 3 passes each: 83.886 µs; no weight-gradient kernel
    assert t.forward_s == pytest.approx(134_217_728 / 2.4e12)
    assert t.backward_s == pytest.approx(1.5 * 134_217_728 / 2.4e12)
    assert t.weight_s == 0


def test_gemm_time_is_flops_over_peak_times_efficiency_and_fp8_uses_the_fp8_peak():
    hw = flat_profile(gemm=0.75)
    bf16 = _ops(C.layer_op_times(LLAMA, Training(seq_length=4096, global_batch_size=1), hw))
    fp8 = _ops(C.layer_op_times(LLAMA, Training(seq_length=4096, global_batch_size=1, precision="fp8"), hw))
    # mlp_down: 2·4096·14336·4096 = 4.8104e11 FLOPs; at 1000e12 × 0.75 → 641.39 µs (compute bound)
    flops = 2 * 4096 * 14336 * 4096
    assert bf16["mlp_down"].forward_s == pytest.approx(flops / 750e12)
    assert bf16["mlp_down"].backward_s == pytest.approx(flops / 750e12)  # dgrad: same GEMM size
    assert bf16["mlp_down"].weight_s == pytest.approx(flops / 750e12)  # wgrad: same GEMM size
    assert fp8["mlp_down"].forward_s == pytest.approx(flops / 1500e12)  # FP8 peak 2000e12 × 0.75
    # a profile may carry its own FP8 GEMM table
    fp8b = _ops(C.layer_op_times(LLAMA, Training(seq_length=4096, global_batch_size=1, precision="fp8"),
                                 flat_profile(gemm=0.75, gemm_fp8=0.6)))
    assert fp8b["mlp_down"].forward_s == pytest.approx(flops / 1200e12)


def test_lm_head_and_attention_stay_bf16_under_fp8():
    hw = flat_profile()
    bf16 = stage_times(LLAMA, Training(seq_length=4096, global_batch_size=1), hw, tp=1, pp=2)["forward_s"]
    fp8 = stage_times(LLAMA, Training(seq_length=4096, global_batch_size=1, precision="fp8"), hw, tp=1,
                      pp=2)["forward_s"]
    head_bf16 = bf16[1] - bf16[0]
    head_fp8 = fp8[1] - fp8[0]
    # last minus first stage = (head + loss + final norm) − embedding: unchanged by FP8
    assert head_fp8 == pytest.approx(head_bf16, rel=1e-9)
    assert fp8[0] < 0.75 * bf16[0]


def test_roofline_takes_the_max_and_no_overlap_adds():
    hw = flat_profile(gemm=0.6, memory=0.8)
    tr = Training(seq_length=16, global_batch_size=1)
    roof = _ops(C.layer_op_times(LLAMA, tr, hw, roofline=True))["mlp_down"]
    add = _ops(C.layer_op_times(LLAMA, tr, hw, roofline=False))["mlp_down"]
    # (16×14336)·(14336×4096): 2·16·14336·4096 = 1.8790e9 FLOPs → /(1000e12·0.6) = 3.1317 µs
    t_math = 2 * 16 * 14336 * 4096 / 600e12
    # bytes 2·(16·14336 + 14336·4096 + 16·4096) = 117,932,032 → /(3000e9·0.8) = 49.138 µs
    t_mem = 2 * (16 * 14336 + 14336 * 4096 + 16 * 4096) / 2.4e12
    assert roof.forward_s == pytest.approx(max(t_math, t_mem))
    assert add.forward_s == pytest.approx(t_math + t_mem)


def test_flash_attention_kernel_time_uses_attention_tables_and_causal_work():
    hw = flat_profile(attention=0.5, attention_bwd=0.4)
    tr = Training(seq_length=4096, global_batch_size=1)
    att = _ops(C.layer_op_times(LLAMA, tr, hw))["attention"]
    # causal: (QKᵀ + A·V) = 2 · 2·32·4096·4096·128 / 2 = 1.3744e11 FLOPs → /(1000e12·0.5) = 274.88 µs
    fwd = 2 * 2 * 32 * 4096 * 4096 * 128 / 2
    assert att.forward_s == pytest.approx(fwd / 500e12)
    # backward: 2× forward + QKᵀ recompute (half of the forward) = 2.5 × forward, at 0.4 efficiency
    assert att.backward_s == pytest.approx(2.5 * fwd / 400e12)
    assert att.weight_s == 0
    # without a backward table the forward table is used
    att2 = _ops(C.layer_op_times(LLAMA, tr, flat_profile(attention=0.5)))["attention"]
    assert att2.backward_s == pytest.approx(2.5 * fwd / 500e12)


def test_unfused_attention_runs_the_full_score_matrix_and_a_softmax():
    hw = flat_profile(gemm=0.75, memory=0.8)
    tr = Training(seq_length=2048, global_batch_size=1, flash_attention=False)
    ops = _ops(C.layer_op_times(LLAMA, tr, hw))
    # QKᵀ: 2·32·2048·2048·128 = 3.4360e10 FLOPs (full s², the mask does not skip work) → 45.81 µs at
    # 750e12 FLOP/s; but it reads Q, K and writes the bf16 scores: 32·2·(2048·128·2 + 2048²) = 301,989,888 B
    # → 125.83 µs at 2.4e12 B/s: memory bound, the roofline takes the larger
    t_math = 2 * 32 * 2048 * 2048 * 128 / 750e12
    t_mem = 32 * 2 * (2048 * 128 * 2 + 2048 * 2048) / 2.4e12
    assert ops["attn_scores"].forward_s == pytest.approx(max(t_math, t_mem))
    assert ops["attn_scores"].backward_s == pytest.approx(2 * ops["attn_scores"].forward_s)
    # softmax: read S + write P = 2·2 bytes × 32·2048·2048 elements = 536,870,912 B at 2.4e12 B/s
    assert ops["softmax"].forward_s == pytest.approx(536_870_912 / 2.4e12)


# ---- F / B / W FLOPs per stage against the Zero Bubble closed forms ---------------------------------
def test_stage_flops_follow_zero_bubble_per_layer_counts():
    # ZB Table 1 (MHA, f = 4h, full-count attention, no flash): per layer F = sbh(24h + 4s),
    # B = sbh(24h + 8s), W = 24·sbh² (formulas.md §5.2)
    h, s, b, L, pp = 1024, 2048, 2, 24, 4
    m = ModelSpec(hidden_size=h, num_layers=L, num_heads=16, ffn_hidden_size=4 * h, vocab_size=32000, mlp="gelu",
                  norm="layernorm")
    tr = Training(seq_length=s, global_batch_size=8, flash_attention=False)
    st = stage_times(m, tr, flat_profile(), tp=1, pp=pp, micro_batch_size=b)
    per_stage = L // pp
    mid = slice(1, pp - 1)  # no embedding / head
    assert np.allclose(st["forward_flops"][mid], per_stage * s * b * h * (24 * h + 4 * s), rtol=1e-12)
    assert np.allclose(st["backward_flops"][mid], per_stage * s * b * h * (24 * h + 8 * s), rtol=1e-12)
    assert np.allclose(st["weight_flops"][mid], per_stage * 24 * s * b * h**2, rtol=1e-12)
    # the last stage adds the LM head: 2·s·b·h·V in each of F, B, W
    assert st["forward_flops"][-1] - st["forward_flops"][1] == pytest.approx(2 * s * b * h * 32000)
    assert st["weight_flops"][-1] - st["weight_flops"][1] == pytest.approx(2 * s * b * h * 32000)


def test_stage_flops_times_ranks_and_microbatches_equal_step_hardware_flops():
    m = load_model("llama3-8b")
    tr = Training(seq_length=4096, global_batch_size=64)
    lay = Layout(num_gpus=64, tp=2, pp=4, cp=2, micro_batch_size=2, recompute="full")
    st = stage_times(m, tr, flat_profile(), tp=lay.tp, pp=lay.pp, cp=lay.cp, micro_batch_size=lay.micro_batch_size,
                     recompute=lay.recompute)
    total = (st["forward_flops"] + st["backward_flops"] + st["weight_flops"] + st["recompute_flops"]).sum()
    per_step = total * lay.tp * lay.cp * lay.dp * lay.num_microbatches(tr.global_batch_size)
    assert per_step == pytest.approx(F.step_flops(m, tr, recompute="full")[1], rel=1e-12)


# ---- stage structure ----------------------------------------------------------------------------------
def test_embedding_on_first_and_head_on_last_stage_and_middle_stages_equal():
    st = stage_times(LLAMA, Training(seq_length=4096, global_batch_size=8), flat_profile(), tp=1, pp=4)
    f, b, w = st["forward_s"], st["backward_s"], st["weight_s"]
    assert f.shape == (4,)
    assert f[1] == pytest.approx(f[2])
    assert f[0] > f[1]  # embedding lookup
    assert f[3] > f[0]  # LM head GEMM + loss outweigh a lookup
    assert w[0] > w[1]  # the embedding-table gradient is W
    assert b[0] == pytest.approx(b[1])  # ... and nothing of it is B


def test_uneven_layers_scale_stage_time():
    tr = Training(seq_length=4096, global_batch_size=8)
    st = stage_times(LLAMA, tr, flat_profile(), tp=1, pp=4, layers_per_stage=(7, 9, 10, 6))
    assert st["forward_s"][2] / st["forward_s"][1] == pytest.approx(10 / 9)
    with pytest.raises(InputError, match="layers_per_stage"):
        stage_layer_split(LLAMA, pp=4, layers_per_stage=(16, 16))


def test_moe_layer_pattern_places_dense_layers_first():
    m = load_model("deepseek-v3")  # first_k_dense_replace = 3
    dense, moe = stage_layer_split(m, pp=2, layers_per_stage=(30, 31))
    assert list(dense) == [3, 0] and list(moe) == [27, 31]
    dense, moe = stage_layer_split(load_model("qwen3-30b-a3b"), pp=4)
    assert list(dense + moe) == [12, 12, 12, 12]


def test_virtual_stages_and_their_ranks():
    assert family("interleaved").num_stages(4, 2) == 8
    assert list(family("interleaved").stage_rank(4, 2)) == [0, 1, 2, 3, 0, 1, 2, 3]
    assert list(family("zb-v").stage_rank(4)) == [0, 1, 2, 3, 3, 2, 1, 0]  # V shape: last chunk on rank 0
    M = family("dualpipe").rank_matrix(4, 1)
    assert M.sum(axis=1).tolist() == [2, 2, 2, 2] and M[0, 3] == 1  # rank 3 holds a copy of stage 0
    tr = Training(seq_length=4096, global_batch_size=8)
    st = stage_times(LLAMA, tr, flat_profile(), pp=4, vpp=2, schedule="interleaved")
    assert st["forward_s"].shape == (8,)
    plain = stage_times(LLAMA, tr, flat_profile(), pp=4)
    per_rank = st["forward_s"] @ family("interleaved").rank_matrix(4, 2)
    assert per_rank.sum() == pytest.approx(plain["forward_s"].sum())
    assert per_rank[1] == pytest.approx(plain["forward_s"][1])  # 2 chunks of 4 layers = 8 layers


def test_recompute_times_are_the_recomputed_forward_parts():
    hw = flat_profile()
    tr = Training(seq_length=4096, global_batch_size=8)
    ops = _ops(C.layer_op_times(LLAMA, tr, hw))
    none, sel, full = (stage_times(LLAMA, tr, hw, pp=4, recompute=r) for r in ("none", "selective", "full"))
    assert np.all(none["recompute_s"] == 0)
    assert np.allclose(sel["recompute_s"], 8 * ops["attention"].forward_s)  # 8 layers per stage
    layer_fwd = sum(t.forward_s for t in ops.values())
    assert np.allclose(full["recompute_s"], 8 * layer_fwd)  # never the embedding or the head
    assert np.allclose(full["forward_s"], none["forward_s"]) and np.allclose(full["weight_s"], none["weight_s"])


# ---- vectorisation ----------------------------------------------------------------------------------
def test_array_layouts_equal_a_loop_of_scalar_layouts():
    # the kernel evaluates the basis times of (N,) layout arrays at once; each row must equal its own layout
    m = load_model("mixtral-8x7b")
    tr = Training(seq_length=4096, global_batch_size=256)
    hw = flat_profile()
    rng = np.random.default_rng(0)
    N = 40
    tp, cp = rng.choice([1, 2, 4, 8], N), rng.choice([1, 2], N)
    ep, mbs = rng.choice([1, 2, 4, 8], N), rng.choice([1, 2], N)
    kw = dict(modes=("none", "selective", "full"), sequence_parallel=True)
    vec = C.layer_basis_times_by_mode(m, tr, hw, tp=tp, cp=cp, ep=ep, micro_batch_size=mbs, **kw)
    assert vec["selective"].shape == (len(C.BASIS_KEYS), N, len(C.BASIS))
    dp = rng.choice([1, 2, 4], N)
    split = stage_param_split(m, stage_placement(m, pp=4))
    ne, ex = params_per_rank(split, tp=tp, ep=ep)
    d, d_e = shard_degrees(dp=dp, cp=cp, ep=ep)
    opt = O.optimizer_params_step_s(tr, hw, non_expert=ne, expert=ex, shard_degree=d[:, None],
                                    expert_shard_degree=d_e[:, None])
    assert opt.shape == (N, 4)
    for i in range(N):
        one = C.layer_basis_times_by_mode(m, tr, hw, tp=int(tp[i]), cp=int(cp[i]), ep=int(ep[i]),
                                          micro_batch_size=int(mbs[i]), **kw)
        for mode in kw["modes"]:
            for r, name in enumerate(C.BASIS_KEYS):
                assert np.allclose(vec[mode][r, i], one[mode][r], rtol=1e-12), (mode, name)
        ne1, ex1 = params_per_rank(split, tp=int(tp[i]), ep=int(ep[i]))
        d1, de1 = shard_degrees(dp=int(dp[i]), cp=int(cp[i]), ep=int(ep[i]))
        o1 = O.optimizer_params_step_s(tr, hw, non_expert=ne1, expert=ex1, shard_degree=d1, expert_shard_degree=de1)
        assert np.allclose(opt[i], o1, rtol=1e-12)


# ---- optimizer step ---------------------------------------------------------------------------------
def test_adam_step_moves_30_bytes_per_parameter_for_bf16_mixed_precision():
    # read fp32 grad 4 + read/write fp32 master 8 + read/write m, v 16 + write bf16 weight 2 = 30
    assert O.optimizer_bytes_per_param(Training(seq_length=1, global_batch_size=1)) == 30
    assert O.optimizer_bytes_per_param(Training(seq_length=1, global_batch_size=1, grad_dtype="bf16")) == 28
    # fp32 training, no master: read grad 4, read/write moments 16, read/write weights 8
    assert O.optimizer_bytes_per_param(Training(seq_length=1, global_batch_size=1, precision="fp32")) == 28


def test_optimizer_step_time_for_llama3_8b_on_one_gpu_and_with_zero():
    m = load_model("llama3-8b")  # 8.030e9 parameters (formulas.md §1.2)
    tr = Training(seq_length=8192, global_batch_size=8)
    hw = flat_profile(memory=0.8)
    t = optimizer_step(m, tr, hw, tp=1, pp=1, dp=1)
    # 8,030,261,248 params × 30 B = 240.9 GB at 3000e9 × 0.8 B/s = 100.38 ms
    assert t[0] == pytest.approx(m.total_params() * 30 / 2.4e12)
    t8 = optimizer_step(m, tr, hw, tp=1, pp=1, dp=8, zero=1)
    assert t8[0] == pytest.approx(t[0] / 8)
    tp4 = optimizer_step(m, tr, hw, tp=4, pp=1, dp=1)
    # TP splits everything but the replicated norms (65 RMSNorm weights of 4096)
    assert tp4[0] * 4 == pytest.approx(t[0], rel=1e-4)
    off = optimizer_step(m, Training(seq_length=8192, global_batch_size=8, offload_optimizer=True), hw,
                         tp=1, pp=1, dp=1)
    # ZeRO-Offload: fp32 gradients (4 B) down and bf16 parameters (2 B) up over PCIe (the profile has no
    # [host]: PCIe 4.0 x16, 32 GB/s), CPU Adam over 30 B/param at the node's 409.6 GB/s shared by 8 GPUs
    psi = m.total_params()
    assert off[0] == pytest.approx(psi * 4 / 32e9 + psi * 30 / (409.6e9 / 8) + psi * 2 / 32e9)
    # a calibrated `optimizer` table (parasim calibrate optimizer) replaces η_memory for the step
    opt = optimizer_step(m, tr, flat_profile(memory=0.8, optimizer=0.6), tp=1, pp=1, dp=1)
    assert opt[0] == pytest.approx(m.total_params() * 30 / (3000e9 * 0.6))
    # the step time of the production path (evaluate_layouts' optimizer_s) is the same closed form plus the
    # zeroing of the kept fp32 gradients (the megatron stack's persistent grad buffer: one 4 B/param write,
    # not sharded by ZeRO-1)
    one = evaluate_layouts(m, tr, hw, num_gpus=1, tp=1, pp=1, dp=1)
    assert one.optimizer_s[0] == pytest.approx(m.total_params() * (30 + 4) / 2.4e12)
    z1 = evaluate_layouts(m, tr, hw, num_gpus=8, tp=1, pp=1, dp=8, zero=1)
    assert z1.optimizer_s[0] == pytest.approx(m.total_params() * (30 / 8 + 4) / 2.4e12)


def test_tied_head_is_a_second_copy_only_on_another_rank():
    m = load_model("gpt3-175b")  # tied embedding / LM head
    emb = m.vocab_size * m.hidden_size
    def non_expert(**kw):
        return params_per_rank(stage_param_split(m, stage_placement(m, **kw)), tp=1, ep=1)[0]

    one = non_expert(pp=1)
    assert one[0] == pytest.approx(m.total_params())  # single rank: one copy
    two = non_expert(pp=2)
    assert two.sum() == pytest.approx(m.total_params() + emb)  # Megatron keeps a copy on the last stage
    v = non_expert(pp=2, schedule="zb-v")
    assert v.sum() == pytest.approx(m.total_params())  # V shape: first and last chunk on rank 0


def test_bad_inputs_raise_input_error():
    tr = Training(seq_length=4096, global_batch_size=8)
    with pytest.raises(InputError, match="recompute"):
        C.layer_basis_times_by_mode(LLAMA, tr, flat_profile(), modes=("everything",))
    with pytest.raises(InputError, match="fp8"):
        C.layer_basis_times_by_mode(LLAMA, Training(seq_length=4096, global_batch_size=8, precision="fp8"),
                                    flat_profile(peaks={"bf16": 312}))


# ---- against measurements (shipped profiles, published data) -----------------------------------------
def _a100():
    try:
        return load_hardware("dgx-a100-80g")
    except InputError:
        pytest.skip("hardware preset dgx-a100-80g not available")


# Qi et al. 2024 (Zero Bubble) Table 9: profiled per-microbatch stage times on A100 SXM 80GB, ms
# (name, h, heads, layers, pp, micro-batch, (TF, TB, TW)); s = 1024, middle stages hold ceil(L/pp) layers.
# Checked in tests/test_unfused_attention.py (the runs' materialised attention).
ZB_TABLE_9 = [("1.5B", 2304, 24, 22, 8, 6, (18.522, 18.086, 9.337)),
              ("6.2B", 4096, 32, 30, 8, 3, (29.718, 29.444, 19.927)),
              ("14.6B", 5120, 40, 46, 16, 1, (11.347, 11.248, 8.132)),
              ("28.3B", 6144, 48, 62, 32, 1, (10.419, 10.207, 7.715))]


def test_compute_only_throughput_bounds_torchtitan_measurements(shared_data):
    pd = pytest.importorskip("pandas")
    path = shared_data("published_runs.csv")
    hw = _a100()
    runs = pd.read_csv(path)
    rows = runs[runs.source_id == "TORCHTITAN_A100"]
    assert len(rows) >= 5
    for r in rows.itertuples():
        m = ModelSpec(hidden_size=int(r.hidden), num_layers=int(r.layers), num_heads=int(r.heads),
                      num_kv_heads=int(r.kv_heads) if r.kv_heads == r.kv_heads else None,
                      ffn_hidden_size=int(r.ffn_hidden), vocab_size=int(r.vocab))
        rc = str(r.recompute)
        rc = "full" if rc.startswith("full") else "selective" if rc.startswith("selective") else "none"
        tr = Training(seq_length=int(r.seq_len), global_batch_size=int(r.global_batch_seqs))
        st = stage_times(m, tr, hw, micro_batch_size=int(r.micro_batch), recompute=rc)
        total = st["forward_s"] + st["recompute_s"] + st["backward_s"] + st["weight_s"]
        predicted = r.micro_batch * r.seq_len / total[0]  # tokens/s/GPU with zero communication
        # FSDP on 64 GPUs over 8 nodes can only be slower than compute alone (measured/compute-only is
        # 0.79–0.88 with the shipped A100 profile and torchtitan stack, docs/compute.md); compute alone
        # cannot be more than twice the measured rate when published MFU is 50–61 % of peak
        assert r.tokens_per_s_per_gpu <= predicted <= r.tokens_per_s_per_gpu / 0.5, r.run_id


def test_the_compute_only_table_is_the_scripts_and_bounds_every_measurement():
    """docs/compute.md's torchtitan table is what validation/compute_only.py writes now, and no measured rate
    exceeds the compute-only one (measured / compute-only < 1 on every run)."""
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "validation"))
    import compute_only

    assert compute_only.table() in (root / "docs" / "compute.md").read_text()
    assert all(r["measured"] < r["compute_only"] for r in compute_only.rows())


@pytest.mark.parametrize("flash", [True, False])
def test_core_attention_only_times_exactly_the_core_attention_ops_of_the_full_table(flash):
    # the sweep times core attention alone per CP setting; it must be the full table's rows, not a variant
    hw = load_hardware("dgx-h100")
    tr = Training(seq_length=8192, global_batch_size=8, flash_attention=flash)
    kw = dict(tp=np.array([[1.0], [4.0]]), cp=np.array([[2.0], [8.0]]), micro_batch_size=np.array([[1.0], [2.0]]))
    full = [o for o in C.layer_op_times(LLAMA, tr, hw, **kw) if o.core_attention]
    only = C.layer_op_times(LLAMA, tr, hw, core_attention_only=True, **kw)
    assert [o.name for o in only] == [o.name for o in full] and len(only) >= 1
    for a, b in zip(only, full):
        assert np.array_equal(a.forward_s, b.forward_s) and np.array_equal(a.backward_s, b.backward_s)
