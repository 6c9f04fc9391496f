"""Model states per GPU: ZeRO paper, Megatron's bytes/param table, FSDP docs, real torch optimizers,
transformers' own parameter counts, Megatron's most-loaded-shard formula."""
import numpy as np
import pytest

from simulator.errors import InputError
from simulator.spec.placement import stage_placement
from simulator.memory.states import (model_state_bytes, params_per_rank, shard_degrees, stage_param_split,
                                     zero_state_bytes_per_param)
from simulator.spec.load import load_model
from simulator.spec.model import ModelSpec
from simulator.spec.training import Training

ZERO_PAPER = Training(seq_length=1024, global_batch_size=64, precision="fp16", grad_dtype="fp16")


@pytest.mark.parametrize("zero, published_gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_figure_1_example(zero, published_gb):
    # Rajbhandari et al. 2020, Fig. 1: Ψ = 7.5 B, N_d = 64, K = 12 -> 120 / 31.4 / 16.6 / 1.9 GB
    psi = 7.5e9
    tr = ZERO_PAPER
    b = zero_state_bytes_per_param(zero=zero, shard_degree=64, param_bytes=tr.param_bytes,
                                   grad_bytes=tr.grad_bytes, optimizer_bytes=tr.optimizer_bytes)
    total_gb = psi * float(b["params"] + b["grads"] + b["optimizer"]) / 1e9
    assert total_gb == pytest.approx(published_gb, abs=0.05)


@pytest.mark.parametrize("precision, grad_dtype, plain, distributed", [
    ("bf16", "fp32", 18, lambda d: 6 + 12 / d),  # Megatron default for bf16
    ("fp32", "fp32", 16, lambda d: 8 + 8 / d),
])
def test_megatron_distributed_optimizer_bytes_per_param(precision, grad_dtype, plain, distributed):
    # Megatron-LM README "Distributed Optimizer" table (bytes per parameter)
    tr = Training(seq_length=1024, global_batch_size=64, precision=precision, grad_dtype=grad_dtype)
    for zero, expect in ((0, plain), (1, distributed(32))):
        b = zero_state_bytes_per_param(zero=zero, shard_degree=32, param_bytes=tr.param_bytes,
                                       grad_bytes=tr.grad_bytes, optimizer_bytes=tr.optimizer_bytes)
        assert float(b["params"] + b["grads"] + b["optimizer"]) == pytest.approx(expect)


def test_hybrid_shard_divides_by_the_shard_group_not_the_dp_degree():
    # FSDP HYBRID_SHARD: (P+G+O)·Ψ/F with F the shard-group size (torch.distributed.fsdp docs)
    d, d_e = shard_degrees(dp=64, cp=1, ep=1, shard_group_size=8)
    assert float(d) == 8 and float(d_e) == 8
    d, d_e = shard_degrees(dp=16, cp=2, ep=8)  # expert data parallel = dp·cp/ep
    assert float(d) == 32 and float(d_e) == 4


def test_zero_offload_keeps_16_bytes_per_param_on_the_host():
    # Ren et al. 2021 (ZeRO-Offload) §4.1: fp32 params, gradients, momentum and variance on the CPU (16M bytes)
    tr = Training(seq_length=1024, global_batch_size=64, offload_optimizer=True)
    b = zero_state_bytes_per_param(zero=2, shard_degree=8, param_bytes=2, grad_bytes=2,
                                   optimizer_bytes=tr.optimizer_bytes, offload_optimizer=True)
    assert float(b["host"]) == pytest.approx(16 / 8)
    assert float(b["optimizer"]) == 0.0


def _torch_state_bytes(opt_name):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.GELU(), torch.nn.Linear(96, 32))
    n = sum(p.numel() for p in net.parameters())
    opt = {"adamw": lambda p: torch.optim.AdamW(p, lr=1e-3),
           "sgd-momentum": lambda p: torch.optim.SGD(p, lr=1e-3, momentum=0.9),
           "sgd": lambda p: torch.optim.SGD(p, lr=1e-3)}[opt_name](net.parameters())
    net(torch.randn(8, 64)).square().mean().backward()
    opt.step()
    per_param = 0
    for st in opt.state.values():
        for v in st.values():
            if torch.is_tensor(v) and v.numel() > 1:  # skip AdamW's scalar 'step' counter
                per_param += v.numel() * v.element_size()
    return per_param / n


@pytest.mark.parametrize("opt_name", ["adamw", "sgd-momentum", "sgd"])
def test_optimizer_state_bytes_equal_torch_after_one_step(opt_name):
    # fp32 training: no master copy; AdamW keeps exp_avg and exp_avg_sq (8 B), SGD momentum 4 B, SGD 0
    measured = _torch_state_bytes(opt_name)
    tr = Training(seq_length=128, global_batch_size=8, precision="fp32", optimizer=opt_name)
    assert tr.optimizer_bytes == pytest.approx(measured)


def test_stage_params_add_up_to_the_model_with_a_tied_copy_on_the_last_stage():
    m = load_model("gpt3-175b")  # tied embeddings
    pl = stage_placement(m, pp=8)
    split = stage_param_split(m, pl)
    total = sum(int(split[k].sum()) for k in ("tp", "rep", "exp"))
    assert total == m.total_params() + m.vocab_size * m.hidden_size  # Megatron's copy on the last stage
    pl1 = stage_placement(m, pp=1)
    split1 = stage_param_split(m, pl1)
    assert sum(int(split1[k].sum()) for k in ("tp", "rep", "exp")) == m.total_params()


def test_first_stage_is_megatrons_most_loaded_shard():
    # Megatron theoretical_memory_usage.py: N_rank = (N_block/p + V·h)/t on the first stage (untied,
    # norms are replicated there but negligible)
    m = load_model("llama3-70b")
    p, t = 4, 8
    pl = stage_placement(m, pp=p)
    dense, expert = params_per_rank(stage_param_split(m, pl), tp=t, ep=1)
    n_block = int(m.layer_params().sum())
    expect = (n_block / p + m.vocab_size * m.hidden_size) / t
    assert float(dense[0] + expert[0]) == pytest.approx(expect, rel=1e-3)


def test_uneven_split_and_moe_pattern_follow_the_layers():
    m = load_model("deepseek-v3")  # 3 dense layers first, 58 MoE layers
    pl = stage_placement(m, pp=4, layers_per_stage=(13, 16, 16, 16))
    assert pl.layers.tolist() == [13, 16, 16, 16]
    assert pl.moe_layers.tolist() == [10, 16, 16, 16]
    assert pl.embedding.tolist() == [1, 0, 0, 0] and pl.head.tolist() == [0, 0, 0, 1]


def test_expert_parallel_split_equals_transformers_expert_tensors():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
               intermediate_size=200, vocab_size=500, num_local_experts=4, num_experts_per_tok=2)
    hf = transformers.AutoConfig.for_model("mixtral", **cfg)
    with torch.device("meta"):
        net = transformers.AutoModelForCausalLM.from_config(hf)
    experts = sum(p.numel() for n, p in net.named_parameters() if ".experts" in n)
    total = sum(p.numel() for p in net.parameters())
    m = ModelSpec(hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, ffn_hidden_size=200,
                  vocab_size=500, num_experts=4, experts_per_token=2, moe_ffn_hidden_size=200)
    dense, expert = params_per_rank(stage_param_split(m, stage_placement(m, pp=1)), tp=1, ep=4)
    assert float(expert[0]) * 4 == experts
    assert float(dense[0]) == total - experts


def test_dualpipe_holds_two_copies_of_the_parameters():
    # DeepSeek-V3 report Table 2: DualPipe needs 2× parameters
    m = load_model("llama3-8b")
    one = stage_param_split(m, stage_placement(m, pp=8, schedule="1f1b"))
    two = stage_param_split(m, stage_placement(m, pp=8, schedule="dualpipe"))
    assert int(two["tp"].sum() + two["rep"].sum()) == 2 * int(one["tp"].sum() + one["rep"].sum())
    with pytest.raises(InputError, match="even pp"):
        stage_placement(m, pp=3, schedule="dualpipe")


def test_zbv_puts_embedding_and_head_on_rank_zero():
    m = load_model("llama3-8b")
    pl = stage_placement(m, pp=4, schedule="zb-v")
    assert pl.embedding.tolist() == [1, 0, 0, 0] and pl.head.tolist() == [1, 0, 0, 0]
    assert pl.layers.tolist() == [8, 8, 8, 8]


def test_expert_optimizer_bytes_do_not_depend_on_ep_at_fixed_dp():
    # Ψ_exp/ep experts per rank, sharded over dp·cp/ep: K·Ψ_exp/(dp·cp) whatever ep is
    m = load_model("mixtral-8x7b")
    tr = Training(seq_length=4096, global_batch_size=64)
    pl = stage_placement(m, pp=1)
    opt = [float(model_state_bytes(m, tr, pl, tp=1, dp=8, cp=1, ep=ep, zero=1)["optimizer"][0]) for ep in (1, 2, 8)]
    grads = [float(model_state_bytes(m, tr, pl, tp=1, dp=8, cp=1, ep=ep, zero=1)["grads"][0]) for ep in (1, 2, 8)]
    assert opt[0] == pytest.approx(opt[1]) == pytest.approx(opt[2])
    assert grads[0] > grads[1] > grads[2]  # unsharded grads shrink with the experts per rank


def test_vectorised_states_have_a_trailing_stage_axis():
    m = load_model("llama3-70b")
    tr = Training(seq_length=4096, global_batch_size=64)
    pl = stage_placement(m, pp=4)
    tp = np.array([1, 2, 4, 8])
    out = model_state_bytes(m, tr, pl, tp=tp, dp=np.array([16, 8, 4, 2]), cp=1, ep=1, zero=1)
    assert out["params"].shape == (4, 4)
    single = model_state_bytes(m, tr, pl, tp=4, dp=4, cp=1, ep=1, zero=1)
    np.testing.assert_allclose(out["optimizer"][2], single["optimizer"])


def test_parameter_offload_needs_zero3():
    m = load_model("llama3-8b")
    tr = Training(seq_length=4096, global_batch_size=64, offload_params=True)
    with pytest.raises(InputError, match="zero = 3"):
        model_state_bytes(m, tr, stage_placement(m, pp=1), tp=1, dp=8, cp=1, ep=1, zero=2)


def test_dualpipe_uneven_split_gives_each_rank_two_mirrored_chunks():
    m = load_model("deepseek-v3")
    lps = (3,) + (4,) * 14 + (2,)
    pl = stage_placement(m, pp=16, schedule="dualpipe", layers_per_stage=lps)
    assert pl.layers.tolist() == [lps[r] + lps[15 - r] for r in range(16)]
    assert int(pl.layers.sum()) == 2 * m.num_layers
    assert pl.embedding.tolist() == pl.head.tolist() == [1] + [0] * 14 + [1]


def test_accumulated_unsharded_grads_are_what_fsdp2_keeps_with_sync_off(free_port):
    """torch itself: FSDP2 with gradient sync off (as pipelining runs every micro-batch of a stage) keeps each
    parameter's unsharded gradient in the reduce dtype; the model counts R·Ψ for the torchtitan stack."""
    pytest.importorskip("torch")
    import json
    import subprocess
    import sys
    from pathlib import Path

    from simulator.memory.states import accumulated_grad_bytes
    from simulator.spec.stack import load_stack

    helper = Path(__file__).parent / "helpers" / "fsdp2_accumulated_grads.py"
    r = subprocess.run([sys.executable, str(helper), str(free_port())], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    kept = json.loads(r.stdout.strip().splitlines()[-1])
    for dtype in ("fp32", "bf16"):
        stack = load_stack("torchtitan", fsdp_reduce_dtype=dtype)
        got = accumulated_grad_bytes(kept["params"], stack, grad_bytes=4, pp=2, num_microbatches=1)
        assert float(got) == kept[dtype]
    tt = load_stack("torchtitan")
    # not pipelined: torchtitan reduce-scatters every micro-batch and keeps nothing across them
    assert float(accumulated_grad_bytes(1e9, tt, grad_bytes=4, pp=1, num_microbatches=8)) == 0.0
    once = load_stack("fsdp", fsdp_reduce="once")  # no_sync: kept only when a later micro-batch follows
    assert float(accumulated_grad_bytes(1e9, once, grad_bytes=2, pp=1, num_microbatches=1)) == 0.0
    assert float(accumulated_grad_bytes(1e9, once, grad_bytes=2, pp=1, num_microbatches=4)) == 2e9


def test_pipelined_fsdp2_stage_holds_its_accumulated_grads_at_the_peak():
    """Llama-3-8B on 2 stages with torchtitan (FSDP2 + PP): the stage's unsharded fp32 gradients (~4e9
    parameters × 4 bytes) are in the peak; a stack that reduce-scatters every micro-batch has none of them."""
    from simulator.kernel import evaluate_layouts
    from simulator.spec.hardware import load_hardware
    from simulator.spec.stack import load_stack

    m, h = load_model("llama3-8b"), load_hardware("dgx-h100")
    kw = dict(num_gpus=64, dp=32, pp=2, zero=3)
    tr = lambda **s: Training(seq_length=4096, global_batch_size=64, stack=load_stack("torchtitan", **s))  # noqa: E731
    once = evaluate_layouts(m, tr(), h, **kw).iloc[0]
    every = evaluate_layouts(m, tr(fsdp_reduce="every-microbatch"), h, **kw).iloc[0]
    assert 14e9 < once.peak_bytes - every.peak_bytes < 18e9


def test_logits_follow_the_stacks_loss_sharding_under_tp():
    """Under TP a vocab-parallel loss (megatron, torchtitan's loss_parallel) splits the logits over the TP ranks;
    Hugging Face's tp_plan gathers them (lm_head colwise_rep), so each rank holds and backpropagates as many as
    without TP, with plain F.cross_entropy's working set (tests/test_activations_torch.py measures both losses)."""
    from simulator.memory.head_activations import logits_bytes, loss_backward_bytes
    from simulator.spec.stack import load_stack

    m = load_model("llama3-8b")
    kw = dict(cp=1, micro_batch_size=1)
    tr = {name: Training(seq_length=4096, global_batch_size=8, stack=load_stack(name)) for name in ("torchtitan", "hf")}
    for fn in (logits_bytes, loss_backward_bytes):
        assert float(fn(m, tr["hf"], tp=4, **kw)) == float(fn(m, tr["hf"], tp=1, **kw))  # replicated
    tt = tr["torchtitan"]
    assert float(logits_bytes(m, tt, tp=4, **kw)) == float(logits_bytes(m, tt, tp=1, **kw)) / 4
    # loss_parallel's backward writes 12 bytes per local element where F.cross_entropy writes 8
    assert float(loss_backward_bytes(m, tr["torchtitan"], tp=4, **kw)) == 1.5 * float(
        loss_backward_bytes(m, tr["torchtitan"], tp=1, **kw)) / 4
    with pytest.raises(InputError, match="loss_parallel"):
        load_stack("hf", loss_parallel="no")


def test_gathered_logits_cost_one_all_gather_of_the_logits_per_micro_batch():
    """hf with TP: the head's column shards are all-gathered (e·T·V bytes out) every micro-batch before the
    loss, which then runs on the whole logits on every rank; exposed TP time grows by that all-gather."""
    from simulator.cost import collectives as C
    from simulator.cost.topology import group_span
    from simulator.kernel import evaluate_layouts
    from simulator.spec.hardware import load_hardware
    from simulator.spec.stack import load_stack

    m, h = load_model("llama3-8b"), load_hardware("dgx-h100")
    T = 4096
    rows = {lp: evaluate_layouts(m, Training(seq_length=T, global_batch_size=16,
                                             stack=load_stack("hf", loss_parallel=lp)), h,
                                 num_gpus=8, tp=2, dp=4, zero=3, micro_batch_size=1).iloc[0] for lp in (True, False)}
    mb = rows[False].num_microbatches
    span = group_span(h, group="tp", tp=np.array([2]), cp=np.array([1]), ep=1, dp=np.array([4]), pp=np.array([1]))
    gather = float(C.all_gather_s(h, 2.0 * T * m.vocab_size, span)[0])
    assert rows[False].exposed_tp_s - rows[True].exposed_tp_s == pytest.approx(mb * gather, rel=1e-9)
    assert rows[False].compute_s > rows[True].compute_s  # the loss's bytes on the whole logits
