"""Expert-parallel token dispatch by destination node: DeepEP and HybridEP (Megatron-Core's `flex` dispatcher; the
stack's `moe_dispatcher = "flex"`), against the plain all-to-all of cost/comm.py `ep_comm`.

DeepSeek-V3 §3.2.2 and DeepEP's normal kernels send each token over the scale-out network once per destination
node (to the GPU of the same in-node index there), then forward it over NVLink to the GPUs that hold its experts;
NVIDIA's HybridEP does the same inside and across NVLink domains. A token routed to several experts of one node
crosses the network once, not once per expert. How many nodes and GPUs a token reaches follows from the routing:
uniform over the experts when the router is force-balanced (Megatron `moe_router_force_load_balancing`, the
benchmarks' setting; parasim's uniform routing), within the `router_group_topk` groups of group-limited routing.
"""
from __future__ import annotations

import numpy as np

from . import collectives as C


def _miss(pool, bin_experts, k):
    """C(pool − c, k) / C(pool, k): the chance k experts drawn without replacement from `pool` miss a bin of c."""
    pool, c = np.asarray(pool, dtype=float), np.asarray(bin_experts, dtype=float)
    p = np.ones(np.broadcast(pool, c).shape)
    for i in range(int(k)):
        p = p * np.clip((pool - c - i) / (pool - i), 0.0, 1.0)
    return p


def expected_bins_hit(num_experts: int, top_k: int, bins, *, groups: int = 1, group_topk: int = 0):
    """Expected number of the `bins` equal, contiguous blocks of experts (nodes, or GPUs) that one token's `top_k`
    experts fall in, (N,) from (N,) bins: E[hit] = B·(1 − P(a bin is missed)). The k experts are a uniform draw
    without replacement: from all E experts, P(miss) = C(E − c, k)/C(E, k) with c = E/B; with group-limited routing
    (`group_topk` M of `groups` G contiguous groups of g = E/G experts, drawn uniformly, then k of their M·g
    experts), a bin inside one group is missed when its group is not drawn or the draw misses it,
    P(miss) = 1 − M/G + (M/G)·C(Mg − c, k)/C(Mg, k), and a bin of j whole groups is missed with
    Σ_i H(i)·C(Mg − i·g, k)/C(Mg, k), H the hypergeometric chance that i of its j groups are drawn. Bins that
    neither nest in nor hold whole groups are counted as without the limit (an upper bound of the nodes hit)."""
    B = np.asarray(bins, dtype=float)
    E, k, G, M = float(num_experts), int(top_k), int(groups), int(group_topk)
    c = E / B
    if G <= 1 or M in (0, G):
        return B * (1.0 - _miss(E, c, k))
    g, pool = E / G, M * E / G
    inside = (c <= g) & (np.mod(g, c) == 0)
    whole = (c > g) & (np.mod(c, g) == 0)
    miss = _miss(E, c, k)  # (the limit not modelled)
    miss = np.where(inside, 1.0 - M / G + M / G * _miss(pool, c, k), miss)
    if whole.any():
        from math import comb

        j = np.round(c / g)
        held = np.zeros_like(B)
        for jj in np.unique(j[whole]).astype(int):
            h = sum(comb(jj, i) * comb(G - jj, M - i) / comb(G, M) * float(_miss(pool, i * g, k))
                    for i in range(0, min(jj, M) + 1))
            held = np.where(j == jj, h, held)
        miss = np.where(whole, held, miss)
    return B * (1.0 - miss)


def flex_all_to_all_s(profile, span, *, tokens, bytes_per_token, num_experts: int, top_k: int, groups: int = 1,
                      group_topk: int = 0):
    """Seconds of one dispatch (or combine) of `tokens` tokens per rank by node over the EP group `span` (n ranks,
    k_l per NVLink domain, N = n/k_l domains), and the bytes each rank moves, (seconds, bytes):
        network bytes  = tokens · bytes_per_token · r,   r = (N − 1)/N · E[domains hit]   (remote domains)
        NVLink bytes   = tokens · bytes_per_token · d · (k_l − 1)/k_l,   d = E[GPUs hit]
        T = max(network / B_inter, NVLink / B_intra) + (k_l − 1)·α_nvlink + (N − 1)·α_network
    (the two legs pipelined in chunks, as DeepEP's kernels run them; the bandwidths and latencies are the
    plain all-to-all's, collectives.all_to_all_s). `bytes_per_token`: h × bytes per element × the load factor."""
    n, kl = np.asarray(span.size, dtype=float), np.minimum(np.asarray(span.ranks_per_domain, dtype=float), span.size)
    N = np.ceil(n / kl - 1e-9)
    per = np.asarray(tokens, dtype=float) * np.asarray(bytes_per_token, dtype=float)
    remote = (N - 1.0) / N * expected_bins_hit(num_experts, top_k, N, groups=groups, group_topk=group_topk)
    gpus = expected_bins_hit(num_experts, top_k, n, groups=groups, group_topk=group_topk)
    net, nvl = per * remote, per * gpus * (kl - 1.0) / kl
    t = np.maximum(nvl / C.intra_bandwidth_bytes_per_s(profile, kl, nvl),
                   net / C.inter_bandwidth_bytes_per_s(profile, net, span.crosses_spine))
    t = t + (kl - 1.0) * profile.nvlink_latency_s + (N - 1.0) * profile.ib_latency_s
    return np.where(n > 1, t, 0.0), np.where(n > 1, net + nvl, 0.0)
