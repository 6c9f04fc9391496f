"""DeepEP / HybridEP dispatch by destination node (cost/ep_dispatch.py; the stack's moe_dispatcher "flex"): the
expected nodes and GPUs a token reaches against a Monte-Carlo draw of the router (uniform, and DeepSeek-V3's
group-limited routing), the limits of the traffic, and the flag through import, emit and estimate."""
import subprocess
import sys

import numpy as np
import pytest

from simulator.cost.comm import ep_comm
from simulator.cost.ep_dispatch import expected_bins_hit, flex_all_to_all_s
from simulator.cost.topology import group_span
from simulator.spec.hardware import load_hardware


def _draw(E, k, bins, groups=1, group_topk=0, n=20000, seed=0):
    """Monte-Carlo: distinct bins (contiguous blocks of E/bins experts) hit by k experts of a token, the experts
    drawn uniformly (within group_topk of `groups` contiguous groups drawn uniformly, when given)."""
    rng = np.random.default_rng(seed)
    hits = np.empty(n)
    for t in range(n):
        if groups > 1 and group_topk:
            chosen = rng.choice(groups, group_topk, replace=False)
            pool = (chosen[:, None] * (E // groups) + np.arange(E // groups)).ravel()
        else:
            pool = np.arange(E)
        experts = rng.choice(pool, k, replace=False)
        hits[t] = len(np.unique(experts // (E // bins)))
    return hits.mean(), hits.std() / np.sqrt(n)


@pytest.mark.parametrize("E,k,bins,groups,m", [
    (128, 8, 2, 1, 0),     # Qwen3-30B, EP 16 over 2 nodes
    (128, 8, 16, 1, 0),    # ... its GPUs
    (256, 8, 8, 8, 4),     # DeepSeek-V3: EP 64 over 8 nodes, one routing group per node
    (256, 8, 64, 8, 4),    # ... its GPUs, 4 per group
    (256, 8, 4, 8, 4),     # two groups per node (EP 32 over 4 nodes)
    (64, 6, 8, 1, 0),
])
def test_expected_bins_match_a_monte_carlo_draw_of_the_router(E, k, bins, groups, m):
    got = float(expected_bins_hit(E, k, np.array([float(bins)]), groups=groups, group_topk=m)[0])
    mean, se = _draw(E, k, bins, groups, m)
    assert got == pytest.approx(mean, abs=5 * se + 1e-3)


def test_limits():
    assert float(expected_bins_hit(128, 1, np.array([8.0]))[0]) == pytest.approx(1.0)  # one expert, one bin
    assert float(expected_bins_hit(128, 8, np.array([1.0]))[0]) == pytest.approx(1.0)  # one bin holds them all
    assert float(expected_bins_hit(128, 8, np.array([128.0]))[0]) == pytest.approx(8.0)  # a bin per expert


def test_by_node_never_moves_more_over_the_network_than_the_all_to_all():
    """The plain all-to-all sends a copy per expert, (n − k_l)/n of them off the node; by node, once per remote
    node. Inside one node the network carries nothing."""
    hw = load_hardware("dgx-h100")
    for ep in (8, 16, 64):
        span = group_span(hw, group="ep", tp=np.array([1]), cp=np.array([1]), ep=np.array([ep]),
                          dp=np.array([1]), pp=np.array([1]))
        t_flex, bytes_flex = flex_all_to_all_s(hw, span, tokens=4096, bytes_per_token=4096, num_experts=128,
                                               top_k=8)
        plain = ep_comm(hw, span, tokens_per_rank=4096, hidden_size=2048, top_k=8, num_moe_layers=1,
                        dispatch_bytes_per_element=2)
        assert t_flex[0] < plain.forward_s[0] / 2  # (forward: dispatch + combine of the plain one)
        if ep == 8:
            nodes = 1
        else:
            nodes = ep // 8
        remote = (nodes - 1) / nodes * float(expected_bins_hit(128, 8, np.array([float(nodes)]))[0])
        assert remote <= 8 * (ep - 8) / ep + 1e-12


def test_the_flag_through_import_emit_and_estimate(tmp_path):
    script = tmp_path / "q.sh"
    script.write_text(
        "torchrun --nproc-per-node 8 --nnodes 2 pretrain_gpt.py --num-layers 48 --hidden-size 2048 "
        "--ffn-hidden-size 6144 --num-attention-heads 32 --group-query-attention --num-query-groups 4 "
        "--kv-channels 128 "
        "--seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 1024 "
        "--expert-model-parallel-size 16 --num-experts 128 --moe-router-topk 8 --moe-ffn-hidden-size 768 "
        "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep --bf16 --swiglu "
        "--normalization RMSNorm --vocab-size 151936 --untie-embeddings-and-output-weights --disable-bias-linear "
        "--position-embedding-type rope --qk-layernorm --use-distributed-optimizer\n")
    cli = [sys.executable, "-c", "from simulator.cli import main; main()"]
    toml = tmp_path / "q.toml"
    subprocess.run(cli + ["import", "megatron", str(script), "--hardware", "dgx-h100", "--out", str(toml)],
                   capture_output=True, text=True, check=True)
    assert 'moe_dispatcher = "flex"' in toml.read_text()
    flags = subprocess.run(cli + ["emit", "megatron", str(toml)], capture_output=True, text=True, check=True).stdout
    assert "--moe-token-dispatcher-type flex" in flags
    import json

    def ep(path):
        out = subprocess.run(cli + ["estimate", str(path), "--format", "json"], capture_output=True, text=True,
                             check=True).stdout
        return json.loads(out)["time"]["exposed_comm_by_group_s"]["ep"]

    plain = tmp_path / "p.toml"
    plain.write_text(toml.read_text().replace('moe_dispatcher = "flex"', 'moe_dispatcher = "alltoall"'))
    assert 0 < ep(toml) < ep(plain)
