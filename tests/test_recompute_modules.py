"""Megatron-Core's selective recompute by module (--recompute-modules; Stack.recompute_modules) against closed
forms from the models' cards and Megatron-Core's source (NVIDIA/Megatron-LM d98e8a6): what each module frees,
what it re-runs, the collectives it repeats, and the settings Megatron refuses."""
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.megatron_dsv3 import import_then_emit
from simulator.cost.flops import layer_ops, recompute_forward_flops
from simulator.errors import InputError
from simulator.memory.activations import layer_activation_bytes
from simulator.spec.load import load_model
from simulator.spec.stack import load_stack
from simulator.spec.training import Training


def _training(modules="core_attn", stack="megatron", **kw):
    return Training(seq_length=4096, global_batch_size=64, stack=load_stack(stack, recompute_modules=modules), **kw)


def _layer(model, modules, *, moe=False, tp=2, sp=True, recompute="selective"):
    return float(layer_activation_bytes(model, _training(modules), tp=tp, cp=1, micro_batch_size=1,
                                        sequence_parallel=sp, recompute=recompute, moe=moe, etp=1 if moe else None))


def test_mla_up_proj_frees_q_k_v_and_the_up_projection_inputs():
    """DeepSeek-V3's card: 128 heads, q/k head dim 128 + 64 (RoPE), v 128, q LoRA 1536, kv LoRA 512. At TP 2,
    4096 tokens, bf16: Q, K, V 2·4096·128·(192 + 192 + 128)/2 bytes, the latent norms' outputs 2·4096·(1536 + 512),
    replicated over TP (Megatron's CheckpointWithoutOutput keeps only the compressed latents and the RoPE key)."""
    m = load_model("deepseek-v3")
    freed = _layer(m, "core_attn") - _layer(m, "core_attn,mla_up_proj")
    assert freed == 2 * 4096 * 128 * (192 + 192 + 128) / 2 + 2 * 4096 * (1536 + 512) == 285_212_672
    assert _layer(m, "core_attn,mla_up_proj", moe=True) == _layer(m, "core_attn", moe=True) - freed


def test_layernorm_frees_only_the_norms_that_are_modules_of_their_own():
    """Under the TE layer spec a dense GQA layer's norms are fused into TELayerNormColumnParallelLinear
    (IdentityOp: nothing to recompute); an MoE layer's pre-MLP norm is a module: its output, e·T·h/t with SP."""
    llama, mixtral = load_model("llama3-8b"), load_model("mixtral-8x7b")
    assert _layer(llama, "core_attn,layernorm") == _layer(llama, "core_attn")
    freed = _layer(mixtral, "core_attn", moe=True) - _layer(mixtral, "core_attn,layernorm", moe=True)
    assert freed == 2 * 4096 * 4096 / 2


def test_moe_act_frees_the_down_projection_inputs_of_the_routed_tokens():
    """Mixtral: top-2 of 8 experts, expert FFN 14336; at TP 2 with ETP 1 each of the rank's routed token copies
    keeps its f_e-wide down-projection input (2 bytes each): k·T·f_e·2/t over the TP pair's tokens."""
    m = load_model("mixtral-8x7b")
    freed = _layer(m, "core_attn", moe=True) - _layer(m, "core_attn,moe_act", moe=True)
    assert freed == 2 * 4096 * 14336 * 2 / 2


def test_mlp_keeps_only_the_residual_stream_of_a_dense_layer():
    """Llama-3-8B, no TP, no SP: the MLP block (norm output h, SwiGLU's gate and up 2f, down input f) is freed,
    2·T·(h + 3f) bytes; the norm's input (the residual stream) stays as the checkpoint's input."""
    m = load_model("llama3-8b")
    freed = _layer(m, "core_attn", tp=1, sp=False) - _layer(m, "core_attn,mlp", tp=1, sp=False)
    assert freed == 2 * 4096 * (4096 + 3 * 14336)


def test_without_core_attn_the_scores_are_kept():
    """Megatron's modules without core_attn leave the core attention's tensors in place: without FlashAttention,
    the a·s² scores stay as with no recompute."""
    m = load_model("llama3-8b")
    t = Training(seq_length=2048, global_batch_size=8, flash_attention=False,
                 stack=load_stack("megatron", recompute_modules="mlp"))
    kw = dict(tp=1, cp=1, micro_batch_size=1, sequence_parallel=False)
    none = layer_activation_bytes(m, t, recompute="none", **kw)
    mlp_only = layer_activation_bytes(m, t, recompute="selective", **kw)
    assert none - mlp_only == 2 * 2048 * (4096 + 3 * 14336)


def test_mla_up_proj_re_runs_the_up_projections_not_the_core_attention():
    """The recompute forward of mla_up_proj is the q and kv up-projection GEMMs: 2·T·r_q·n_h(d_n + d_r)/t +
    2·T·r_kv·n_h(d_n + d_v)/t, DeepSeek-V3 at TP 2 and 4096 tokens."""
    m = load_model("deepseek-v3")
    t = _training("mla_up_proj")
    ops = layer_ops(m, t, moe=True, tp=2, micro_batch_size=1, sequence_parallel=True, etp=1)
    got = recompute_forward_flops(ops, "selective", m, True, modules=t.stack.recompute_modules, moe_layer=True)
    T = 4096
    assert got == pytest.approx(2 * T * 1536 * 128 * 192 / 2 + 2 * T * 512 * 128 * 256 / 2, rel=1e-12)


def _comm(modules, recompute="selective"):
    from simulator.cli import cli
    from click.testing import CliRunner
    import json

    args = ["estimate", "--model", "mixtral-8x7b", "--hardware", "dgx-h100", "--gpus", "16", "--tp", "2", "--ep", "8",
            "--sequence-parallel", "--seq", "4096", "--global-batch", "64", "--micro-batch", "1",
            "--recompute", recompute, "--format", "json"] + (["--recompute-modules", modules] if modules else [])
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    t = json.loads(r.stdout)["time"]
    return {g: t["exposed_comm_by_group_s"][g] + t["hidden_comm_by_group_s"].get(g, 0.0) for g in ("tp", "ep")}


def test_recomputing_the_moe_block_repeats_its_all_to_alls():
    """The MoE block's forward (dispatch + combine, bf16 both ways) runs again before its backward, whose two
    all-to-alls move as much: the EP time per step goes from f + f to f + 2f, 1.5x; full recompute re-runs it too.
    With SP and TP 2 (regathering in backward: 2 AG + 2 RS forward, 2 AG + 2 RS + 2 AG backward, AG = RS here), the
    MoE block's forward pair again adds 2 of the 10: 1.2x."""
    base, moe, full = _comm(""), _comm("moe"), _comm("", recompute="full")
    assert moe["ep"] / base["ep"] == pytest.approx(1.5, rel=1e-9)
    assert full["ep"] / base["ep"] == pytest.approx(1.5, rel=1e-9)
    assert moe["tp"] / base["tp"] == pytest.approx(1.2, rel=1e-6)


def test_megatron_recompute_modules_round_trip(tmp_path):
    sc, script = import_then_emit(tmp_path, "--recompute-granularity selective --recompute-modules mla_up_proj moe_act")
    assert sc.training.stack.recompute_modules == ("moe_act", "mla_up_proj")
    assert sc.layout.recompute == "selective"
    assert "--recompute-modules moe_act mla_up_proj" in script


def test_default_modules_change_nothing():
    """The default, core_attn, is the selective recompute parasim has always modelled (Korthikanti et al. §5)."""
    assert load_stack("megatron").recompute_modules == ("core_attn",)
    m = load_model("deepseek-v3")
    # FlashAttention keeps no scores: recomputing the core attention frees nothing parasim counts
    assert np.isclose(_layer(m, "core_attn", moe=True, recompute="none"), _layer(m, "core_attn", moe=True))


@pytest.mark.parametrize("args, says", [
    (["--model", "llama3-8b", "--recompute-modules", "mla_up_proj"], "needs multi-latent attention"),
    (["--model", "llama3-8b", "--recompute-modules", "moe_act"], "needs routed experts"),
    (["--model", "mixtral-8x7b", "--ep", "8", "--recompute-modules", "shared_experts"], "needs shared experts"),
    (["--model", "llama3-8b", "--recompute-modules", "mlp", "--stack", "torchtitan", "--recompute", "full"],
     "takes core_attn only"),
    (["--model", "mixtral-8x7b", "--ep", "8", "--recompute-modules", "layernorm", "--precision", "fp8"],
     "Delayed scaling does not support"),
    (["--model", "llama3-8b", "--recompute-modules", "mlp", "--recompute", "full"], "apply to recompute 'selective'"),
    (["--model", "llama3-8b", "--recompute-modules", "mlp,attention"], "'attention' is not one of"),
])
def test_refused_settings_exit_2_with_one_line(args, says):
    base = ["memory", "--hardware", "dgx-h100", "--gpus", "16", "--tp", "2", "--sequence-parallel", "--seq", "4096",
            "--global-batch", "64", "--micro-batch", "1"]
    if "--recompute" not in args:
        base += ["--recompute", "selective"]
    r = subprocess.run([sys.executable, "-c", "from simulator.cli import main; main()", *base, *args],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stdout + r.stderr
    line = r.stderr.strip()
    assert "\n" not in line and says in line and "recompute-modules" in line


def test_a_framework_without_module_lists_refuses_them():
    with pytest.raises(InputError, match="takes core_attn only"):
        load_stack("deepspeed", recompute_modules="core_attn,moe")
    with pytest.raises(InputError, match="selective_modules"):
        load_stack("megatron", runs={"selective_modules": ["core_attn", "everything"]})


_MOE_LAYOUTS = [dict(tp=2, pp=4, ep=8, etp=1, layers_per_stage=(16, 16, 16, 13)),
                dict(tp=4, pp=2, ep=4, etp=4, layers_per_stage=(31, 30)), dict(tp=1, pp=1, ep=8, etp=1)]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(_MOE_LAYOUTS), st.sets(st.sampled_from(["moe_act", "layernorm", "mla_up_proj", "moe",
                                                               "shared_experts", "core_attn"]), min_size=1),
       st.sampled_from(["moe_act", "layernorm", "mla_up_proj", "moe", "shared_experts", "core_attn"]))
def test_recomputing_more_modules_never_needs_more_memory_or_less_time(lay, modules, more):
    """A superset of modules frees at least as many bytes per layer (its working set is one layer's, the kept
    bytes every layer's of every micro-batch in flight) and re-runs at least as much: DeepSeek-V3 on 64 H100s."""
    from simulator.estimate import estimate
    from simulator.spec.hardware import load_hardware
    from simulator.spec.layout import Layout

    m, hw = load_model("deepseek-v3"), load_hardware("dgx-h100")
    layout = Layout(num_gpus=64, dp=64 // (lay["tp"] * lay["pp"]), micro_batch_size=1, recompute="selective",
                    sequence_parallel=lay["tp"] > 1, **lay)
    got = []
    for mods in (modules, modules | {more}):
        t = _training(",".join(sorted(mods)))
        d = estimate(m, t, layout, hw).to_dict()
        got.append((d["memory"]["peak_bytes"], d["time"]["step_s"]))
    assert got[1][0] <= got[0][0] * (1 + 1e-12)
    assert got[1][1] >= got[0][1] * (1 - 1e-12)
