"""Inference (simulator/inference.py, cost/inference.py): decode and prefill against closed forms (bytes / HBM
bandwidth, FLOPs / peak), the roofline's response to bandwidth, the largest batch against the memory model's
own verdict, TP / GQA / MLA reads, the pipeline closed forms, torch's FLOP counter on a tiny HF Llama, and
the CLI (`estimate --inference`)."""
import json
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from simulator.cli import cli, main
from simulator.cost.inference import (decode_head, decode_layer, decode_period_s, experts_touched_fraction,
                                      pipelined_forward_s, prefill_flops)
from simulator.inference import InferenceSetup, estimate_inference
from simulator.memory.breakdown import memory_breakdown
from simulator.spec.hardware import load_hardware
from simulator.spec.layout import Layout
from simulator.spec.load import load_model
from simulator.spec.model import ModelSpec
from simulator.spec.training import Training

H100 = load_hardware("dgx-h100")
LLAMA8 = load_model("llama3-8b")
TRAIN = Training(seq_length=4096, global_batch_size=64)


def run(model=LLAMA8, *, tp=1, pp=1, gpus=None, batch=8, prompt=4096, output=256, hardware=H100, mbs=1, **lay):
    layout = Layout(num_gpus=gpus or tp * pp, tp=tp, pp=pp, micro_batch_size=mbs, **lay)
    training = Training(seq_length=prompt, global_batch_size=max(batch, mbs) * layout.dp)
    return estimate_inference(model, training, layout, hardware,
                              InferenceSetup(batch=batch, prompt_tokens=prompt, output_tokens=output))


def gemm_weight_params(m: ModelSpec) -> int:
    """Weights a decode step reads for a dense GQA/SwiGLU model: every layer's QKV, output and FFN matrices
    2·h·d_h·(n_h + n_kv) + 3·h·f, and the LM head V·h (the embedding table is only indexed; norms left out)."""
    layer = 2 * m.hidden_size * m.head_dim * (m.num_heads + m.num_kv_heads) + 3 * m.hidden_size * m.ffn_hidden_size
    return m.num_layers * layer + m.vocab_size * m.hidden_size


# ---- decode: bytes over bandwidth ----------------------------------------------------------------------
@pytest.mark.parametrize("tp,batch", [(1, 1), (1, 32), (8, 1), (8, 64)])
def test_decode_reads_the_closed_form_bytes_and_is_no_faster_than_hbm_allows(tp, batch):
    e = run(tp=tp, batch=batch)
    d = e.decode
    c = 4096 + 256 / 2  # mean context over the decode steps: P + O/2
    m = LLAMA8
    # weights: 2 bytes x the GEMM weights / t (all of Llama's matrices are TP-sharded)
    assert d["weight_read_bytes"] == pytest.approx(2 * gemm_weight_params(m) / tp, rel=1e-12)
    # KV cache: 2 (K, V) x L x n_kv/t heads x d_h x c tokens x b sequences x 2 bytes (formulas.md §3.7)
    assert d["kv_read_bytes"] == pytest.approx(2 * m.num_layers * (m.num_kv_heads / tp) * m.head_dim * c * batch * 2,
                                               rel=1e-12)
    # no step is faster than reading those bytes at the datasheet bandwidth (scaling-book's minimum step time)
    assert e.decode_s_per_token >= (d["weight_read_bytes"] + d["kv_read_bytes"]) / H100.hbm_bytes_per_s
    assert d["bound"] == "memory"


def test_doubling_hbm_bandwidth_halves_a_memory_bound_decode():
    fast = replace(H100, hbm_bytes_per_s=2 * H100.hbm_bytes_per_s)
    slow, quick = run(batch=1, hardware=H100), run(batch=1, hardware=fast)
    assert slow.decode["bound"] == "memory"
    assert quick.decode_s_per_token / slow.decode_s_per_token == pytest.approx(0.5, rel=0.02)
    # the prefill is compute bound: bandwidth barely moves it
    assert quick.prefill_s / slow.prefill_s > 0.9


def test_tensor_parallelism_divides_the_weights_each_gpu_reads():
    one, eight = run(tp=1, batch=1), run(tp=8, batch=1)
    assert eight.decode["weight_read_bytes"] == pytest.approx(one.decode["weight_read_bytes"] / 8, rel=1e-12)
    assert eight.decode["kv_read_bytes"] == pytest.approx(one.decode["kv_read_bytes"] / 8, rel=1e-12)
    assert eight.decode["tp_comm_s"] > 0 and one.decode["tp_comm_s"] == 0
    assert eight.decode_s_per_token < one.decode_s_per_token  # latency falls (not 8x: the all-reduces stay)
    assert eight.decode_tokens_per_s_per_gpu < one.decode_tokens_per_s_per_gpu * 1.01  # per GPU: no gain


def test_mha_reads_the_query_to_kv_head_ratio_more_kv_than_gqa():
    mha = LLAMA8.with_(num_kv_heads=LLAMA8.num_heads)
    gqa, full = run(batch=16), run(model=mha, batch=16)
    ratio = LLAMA8.num_heads / LLAMA8.num_kv_heads  # 32 / 8
    assert full.decode["kv_read_bytes"] == pytest.approx(ratio * gqa.decode["kv_read_bytes"], rel=1e-12)
    assert full.kv_cache_bytes_per_sequence == pytest.approx(ratio * gqa.kv_cache_bytes_per_sequence, rel=1e-12)
    assert full.max_batch < gqa.max_batch / 3
    assert full.decode_s_per_token > gqa.decode_s_per_token


MLA = ModelSpec(name="tiny-mla", hidden_size=2048, num_layers=4, num_heads=16, ffn_hidden_size=4096, vocab_size=1024,
                kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)


@pytest.mark.parametrize("tp", [1, 2])
def test_mla_reads_the_latent_and_rope_key_on_every_tp_rank(tp):
    e = run(model=MLA, tp=tp, batch=4, prompt=1000, output=200)
    c, b = 1000 + 200 / 2, 4
    # DeepSeek-V2 Table 1: (d_c + d_R) elements per token per layer, the same on every TP rank
    assert e.decode["kv_read_bytes"] == pytest.approx(MLA.num_layers * (512 + 64) * 2 * c * b, rel=1e-12)
    assert e.kv_cache_bytes_per_sequence == pytest.approx(MLA.num_layers * (512 + 64) * 2 * 1200, rel=1e-12)
    # absorbed attention: per layer 2·b·(n_h/t)·c·((r_kv + d_R) + r_kv) FLOPs
    attn = decode_layer(MLA, TRAIN, H100, moe=False, tp=tp, batch=b, context=c).flops - \
        decode_layer(MLA, TRAIN, H100, moe=False, tp=tp, batch=b, context=1).flops
    assert attn == pytest.approx(2 * b * 16 / tp * (c - 1) * (576 + 512), rel=1e-12)


def test_routed_experts_are_read_only_where_tokens_go():
    # 1 - (1 - k/E)^tokens: one token reaches k of E experts; many tokens reach nearly all
    assert experts_touched_fraction(1, 2, 8) == pytest.approx(2 / 8)
    assert experts_touched_fraction(0, 2, 8) == 0.0
    assert experts_touched_fraction(1000, 2, 8) == pytest.approx(1.0)
    mix = load_model("mixtral-8x7b")
    one = decode_layer(mix, TRAIN, H100, moe=True, batch=1, context=100).weight_bytes
    many = decode_layer(mix, TRAIN, H100, moe=True, batch=256, context=100).weight_bytes
    dense_part = one - 2 / 8 * 8 * 3 * mix.hidden_size * mix.moe_ffn_hidden_size * 2
    assert many - dense_part == pytest.approx(8 * 3 * mix.hidden_size * mix.moe_ffn_hidden_size * 2, rel=1e-6)


# ---- prefill: FLOPs over peak --------------------------------------------------------------------------
@pytest.mark.parametrize("tp,pp", [(1, 1), (8, 1), (2, 2)])
def test_prefill_counts_the_closed_form_flops_and_is_no_faster_than_peak(tp, pp):
    B, P = 4, 2048
    e = run(tp=tp, pp=pp, batch=B, prompt=P)
    m = LLAMA8
    # per sequence: 2·P·(GEMM weights of the layers) + causal attention 2·P²·q per layer + LM head 2·h·V once
    layers = m.num_layers * (2 * P * (gemm_weight_params(m) - m.vocab_size * m.hidden_size) / m.num_layers
                             + 2 * P * P * m.q_size)
    closed = B * (layers + 2 * m.hidden_size * m.vocab_size)
    assert e.prefill["flops"] == pytest.approx(closed, rel=1e-12)
    assert e.prefill_s >= closed / (tp * pp * H100.peak_flops("bf16"))
    assert 0 < e.prefill["mfu"] < 1


def test_pipeline_closed_forms():
    # forward of n micro-batches over stages (1, 2, 3), p2p 0.5: Σt + (n-1)·max t + (p-1)·p2p
    assert pipelined_forward_s([1.0, 2.0, 3.0], 0.5, 4) == pytest.approx(6 + 3 * 3 + 2 * 0.5)
    assert pipelined_forward_s([2.0], 0.0, 3) == pytest.approx(6.0)
    period, latency = decode_period_s([1.0, 2.0, 3.0], 0.5, 0.1, 3)
    assert latency == pytest.approx(6 + 2 * 0.5 + 0.1) and period == pytest.approx(9.0)  # m·max t = 9 > 7.1
    period, latency = decode_period_s([1.0, 1.0], 0.5, 0.5, 1)
    assert period == latency == pytest.approx(3.0)
    assert decode_period_s([2.0], 9.0, 9.0, 1)[0] == pytest.approx(2.0)  # one stage: no hops


def test_pipeline_decode_keeps_pp_microbatches_in_flight():
    e = run(tp=1, pp=4, batch=16)
    d = e.decode
    assert d["microbatches"] == 4 and d["micro_batch_size"] == 4
    stages = np.array(d["stage_s"])
    assert e.decode_latency_s == pytest.approx(stages.sum() + 3 * d["p2p_s"] + d["return_s"], rel=1e-12)
    assert e.decode_s_per_token == pytest.approx(max(e.decode_latency_s, 4 * stages.max()), rel=1e-12)


# ---- memory: the largest batch --------------------------------------------------------------------------
@pytest.mark.parametrize("tp,pp", [(1, 1), (8, 1), (2, 4)])
def test_max_batch_fills_the_free_memory_and_one_more_does_not_fit(tp, pp):
    model = load_model("llama3-70b") if tp * pp >= 8 else LLAMA8
    e = run(model=model, tp=tp, pp=pp, batch=8, prompt=8192, output=512)
    n, kv, free = e.max_batch, e.kv_cache_bytes_per_sequence, e.kv_free_bytes
    assert n * kv <= free < (n + 1) * kv
    # KV per sequence: 2·(layers on the stage)·(n_kv/t)·d_h·(P + O)·2 bytes
    layers = model.num_layers / pp
    assert kv == pytest.approx(2 * layers * model.num_kv_heads / tp * model.head_dim * (8192 + 512) * 2, rel=1e-12)
    # the memory model's own verdict agrees at the edge
    layout = Layout(num_gpus=tp * pp, tp=tp, pp=pp)
    for batch, fits in ((n, True), (n + 1, False)):
        mem = memory_breakdown(model, Training(seq_length=8192 + 512, global_batch_size=batch), layout, H100,
                               inference=True)
        assert mem.feasible is fits, (batch, mem.reason)
    assert run(model=model, tp=tp, pp=pp, batch=n + 1, prompt=8192, output=512).feasible is False


def test_throughput_follows_from_the_times():
    e = run(tp=2, gpus=8, batch=16, output=128)
    assert e.request_s == pytest.approx(e.prefill_s + 127 * e.decode_s_per_token)
    assert e.tokens_per_s_per_gpu == pytest.approx(16 * 128 / e.request_s / 2)
    assert e.tokens_per_s == pytest.approx(16 * 128 * 4 / e.request_s)  # 4 replicas
    assert e.time_to_first_token_s == e.prefill_s


def test_eager_decode_is_never_faster_and_is_launch_bound_for_small_models():
    tiny = load_model("qwen2-0.5b")
    layout = Layout(num_gpus=1)
    tr = Training(seq_length=512, global_batch_size=1)
    graphs = estimate_inference(tiny, tr, layout, H100, InferenceSetup(batch=1, prompt_tokens=512))
    eager = estimate_inference(tiny, tr, layout, H100, InferenceSetup(batch=1, prompt_tokens=512, eager_decode=True))
    kernels, host = tr.stack.layer_kernels[0], tr.stack.decode_host_s_per_kernel  # no_grad: decode's host time
    assert 0 < host < tr.stack.host_s_per_kernel
    assert eager.decode_s_per_token >= tiny.num_layers * kernels * host
    assert eager.decode_s_per_token < tiny.num_layers * kernels * tr.stack.host_s_per_kernel  # not the training one
    assert eager.decode_s_per_token > graphs.decode_s_per_token


# ---- torch's FLOP counter on a tiny Hugging Face Llama ---------------------------------------------------
def test_prefill_and_decode_flops_match_torch_flop_counter_on_a_tiny_llama():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    h, nh, nkv, f, L, V, b, P = 64, 8, 2, 176, 2, 100, 2, 24
    cfg = transformers.LlamaConfig(hidden_size=h, num_attention_heads=nh, num_key_value_heads=nkv, intermediate_size=f,
                                   num_hidden_layers=L, vocab_size=V, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, V, (b, P))
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):  # the math backend's matmuls are what torch counts
        with FlopCounterMode(display=False) as fc:
            out = model(ids, use_cache=True, logits_to_keep=1)
        prefill = fc.get_total_flops()
        nxt = out.logits[:, -1:].argmax(-1)
        with FlopCounterMode(display=False) as fc:
            model(nxt, past_key_values=out.past_key_values, use_cache=True)
        decode = fc.get_total_flops()
    spec = ModelSpec(hidden_size=h, num_layers=L, num_heads=nh, num_kv_heads=nkv, ffn_hidden_size=f, vocab_size=V)
    tr = Training(seq_length=P, global_batch_size=b)
    # the math backend multiplies the whole P x P score matrix: the "full" attention count
    ours = prefill_flops(spec, tr, prompt_tokens=P, batch=b, attention_flops="full")
    assert ours == pytest.approx(prefill, rel=1e-12)
    ours = L * decode_layer(spec, tr, H100, moe=False, batch=b, context=P + 1).flops + \
        decode_head(spec, tr, H100, batch=b).flops
    assert ours == pytest.approx(decode, rel=1e-12)


# ---- CLI --------------------------------------------------------------------------------------------------
BASE = ["estimate", "--model", "llama3-8b", "--hardware", "dgx-h100", "--gpus", "8", "--tp", "8", "--seq", "2048",
        "--global-batch", "8"]


def test_cli_json_has_the_contract_keys_and_the_training_estimate():
    r = CliRunner().invoke(cli, BASE + ["--inference", "--format", "json", "--batch", "4"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    inf = d["inference"]
    for key in ("prefill_s", "decode_s_per_token", "tokens_per_s_per_gpu", "max_batch"):
        assert inf[key] > 0
    assert inf["batch"] == 4 and inf["prompt_tokens"] == 2048 and inf["output_tokens"] == 256
    assert "step_s" in d["time"]  # the training estimate is still there


def test_cli_table_and_csv():
    r = CliRunner().invoke(cli, BASE + ["--inference", "--prompt-tokens", "512", "--output-tokens", "64"])
    assert r.exit_code == 0, r.output
    assert "time to first token" in r.output and "max batch" in r.output and "step time" not in r.output
    r = CliRunner().invoke(cli, BASE + ["--inference", "--format", "csv"])
    assert r.exit_code == 0 and "inference_decode_s_per_token" in r.output.splitlines()[0]


@pytest.mark.parametrize("extra,message", [
    (["--inference", "--batch", "0"], "error: --batch must be > 0, got 0"),
    (["--inference", "--prompt-tokens", "-5"], "error: --prompt-tokens must be > 0, got -5"),
    (["--inference", "--output-tokens", "1.5"], "--output-tokens"),
    (["--inference", "--prompt-tokens", "16777216", "--output-tokens", "1"],
     "--prompt-tokens 16777216 + --output-tokens 1"),
    (["--batch", "4"], "error: --batch needs --inference"),
    (["--inference", "--cp", "2", "--tp", "4"], "cp = 1"),
])
def test_cli_bad_values_exit_2_with_one_line_naming_the_flag(extra, message, capsys):
    with pytest.raises(SystemExit) as ex:
        main(BASE + extra)
    assert ex.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err
