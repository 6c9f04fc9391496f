"""Cluster topology: rank placement, which links a parallel group spans, and the explicit graph.

Placement (documented order, overridable): global rank = sum_i coord_i * stride_i with the first
dimension of `order` innermost. Default `("tp", "cp", "ep", "dp", "pp")`: TP ranks are consecutive
GPUs (same node), then CP, EP, DP, and PP outermost (Megatron-LM's default rank order is
tp-cp-ep-dp-pp as well). GPU g lives in node g // gpus_per_node, NVLink domain
g // nvlink_domain_gpus, leaf group g // (nodes_per_leaf * gpus_per_node) (rail-optimised fat tree:
NIC j of every node of a leaf group hangs off the same leaf switch).

`group_span` computes, arithmetically from the strides and vectorised over arrays of degrees, how a
group of one parallel dimension lies on that hierarchy. For a group of size d and stride s and a
block of G GPUs (node, domain, leaf group):

    members per block = min(d, max(1, G // s))     blocks spanned = ceil(d / members per block)

This is exact when s and G divide one another and, for s < G, when G/s and d divide one another —
always the case for power-of-two degrees and blocks (the flag `regular` says where it holds).
`build_graph` builds the explicit networkx graph (GPUs, NVSwitch or mesh links, NICs, leaf and spine
switches) for path/bottleneck queries; the tests check `group_span` against it on small clusters.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from ..errors import InputError
from ..spec.hardware import HardwareProfile

__all__ = ["DEFAULT_ORDER", "GroupSpan", "group_span", "rank_coords", "build_graph", "path_bottleneck_bytes_per_s",
           "gpu_location"]

DEFAULT_ORDER = ("tp", "cp", "ep", "dp", "pp")


@dataclass(frozen=True, kw_only=True)
class GroupSpan:
    """How the groups of one parallel dimension lie on the cluster (arrays broadcast over layouts).

    size: ranks per group; stride: distance in global rank between group neighbours;
    ranks_per_node / ranks_per_domain: group members sharing one node / NVLink domain;
    nodes / domains / leaves: how many of each one group touches; crosses_domain: the group needs
    the scale-out network; crosses_spine: it spans more than one leaf group (traffic goes through
    the spine, subject to oversubscription); regular: the arithmetic above is exact.
    """

    group: str
    size: np.ndarray
    stride: np.ndarray
    ranks_per_node: np.ndarray
    ranks_per_domain: np.ndarray
    nodes: np.ndarray
    domains: np.ndarray
    leaves: np.ndarray
    crosses_domain: np.ndarray
    crosses_spine: np.ndarray
    regular: np.ndarray

    def rows(self, idx) -> "GroupSpan":
        """The span of layout rows `idx` (every array field indexed)."""
        return replace(self, **{f: np.asarray(getattr(self, f))[idx] for f in self.__dataclass_fields__
                                if f != "group"})

    def column(self) -> "GroupSpan":
        """The span with a trailing axis on its array fields, to broadcast against (n, S) stage arrays."""
        return replace(self, **{f: (np.asarray(getattr(self, f))[..., None] if np.ndim(getattr(self, f))
                                    else getattr(self, f)) for f in self.__dataclass_fields__ if f != "group"})


def _deg(name, v):
    a = np.asarray(v)
    if a.dtype.kind not in "iuf" or np.any(a < 1) or np.any(a != np.floor(a)):
        raise InputError(f"{name} must be integers >= 1, got {np.asarray(v).ravel()[:4].tolist()}")
    return a.astype(np.int64)


def _per_block(d, s, G):
    per = np.minimum(d, np.maximum(1, G // s))
    blocks = -(-d // per)
    reg = np.where(s >= G, s % G == 0, (G % s == 0) & (((G // s) % d == 0) | (d % np.maximum(G // s, 1) == 0)))
    return per, blocks, reg


def group_span(profile: HardwareProfile, *, group: str, tp=1, cp=1, ep=1, dp=1, pp=1,
               order: Sequence[str] = DEFAULT_ORDER) -> GroupSpan:
    """Span of the `group` ('tp', 'cp', 'ep', 'dp' or 'pp') groups under placement `order`.

    Degrees are ints or numpy arrays (broadcast). EP here is its own dimension of the rank grid
    (world = tp*cp*ep*dp*pp); a caller that folds EP inside DP passes the matching degrees.
    """
    degs = {"tp": _deg("tp", tp), "cp": _deg("cp", cp), "ep": _deg("ep", ep), "dp": _deg("dp", dp), "pp": _deg("pp", pp)}
    order = tuple(order)
    if sorted(order) != sorted(DEFAULT_ORDER):
        raise InputError(f"order must be a permutation of {', '.join(DEFAULT_ORDER)}, got {order!r}")
    if group not in degs:
        raise InputError(f"unknown parallel group {group!r}; expected one of {', '.join(DEFAULT_ORDER)}")
    stride = np.ones(np.broadcast(*degs.values()).shape, dtype=np.int64)
    for dim in order:
        if dim == group:
            break
        stride = stride * degs[dim]
    d = np.broadcast_to(degs[group], stride.shape).astype(np.int64)
    per_node, nodes, reg_n = _per_block(d, stride, profile.gpus_per_node)
    per_dom, doms, reg_d = _per_block(d, stride, profile.nvlink_domain_gpus)
    _, leaves, reg_l = _per_block(d, stride, profile.nodes_per_leaf * profile.gpus_per_node)
    return GroupSpan(group=group, size=d, stride=stride, ranks_per_node=per_node, ranks_per_domain=per_dom,
                     nodes=nodes, domains=doms, leaves=leaves, crosses_domain=doms > 1, crosses_spine=leaves > 1,
                     regular=reg_n & reg_d & reg_l)


def rank_coords(rank, *, tp=1, cp=1, ep=1, dp=1, pp=1, order: Sequence[str] = DEFAULT_ORDER) -> dict:
    """Coordinates {dim: index} of global `rank` (int or array) under placement `order`."""
    degs = {"tp": tp, "cp": cp, "ep": ep, "dp": dp, "pp": pp}
    r = np.asarray(rank)
    out = {}
    for dim in order:
        out[dim] = r % degs[dim]
        r = r // degs[dim]
    return out


def gpu_location(profile: HardwareProfile, gpu) -> dict:
    """Node, NVLink domain, local index (rail) and leaf group of GPU `gpu` (int or array)."""
    g = np.asarray(gpu)
    node = g // profile.gpus_per_node
    return {"node": node, "domain": g // profile.nvlink_domain_gpus, "local": g % profile.gpus_per_node,
            "leaf_group": node // profile.nodes_per_leaf}


# ---- explicit graph ----------------------------------------------------------------------------
def build_graph(profile: HardwareProfile, num_gpus: int):
    """networkx.Graph of a cluster of `num_gpus` GPUs built from `profile`.

    Vertices: ("gpu", g), ("nvswitch", domain) for switch topologies, ("nic", node, j),
    ("leaf", leaf_group, rail), ("spine",). Edges carry `bytes_per_s` (per direction) and `kind`
    ('nvlink', 'pcie', 'ib', 'uplink'). GPU <-> its NIC runs over PCIe (modelled at the NIC rate),
    NIC j of a node -> leaf (its leaf group, rail j), leaf -> spine with bandwidth
    nodes_per_leaf * nic rate / leaf_oversubscription. Mesh topologies (MI300X) get one link per
    GPU pair of the domain.
    """
    import networkx as nx

    if isinstance(num_gpus, bool) or not isinstance(num_gpus, (int, np.integer)) or num_gpus < 1:
        raise InputError(f"num_gpus must be an integer >= 1, got {num_gpus!r}")
    p = profile
    G = nx.Graph()
    n_nodes = -(-num_gpus // p.gpus_per_node)
    for g in range(num_gpus):
        loc = gpu_location(p, g)
        G.add_node(("gpu", g), node=int(loc["node"]), domain=int(loc["domain"]), local=int(loc["local"]))
        if p.nvlink_topology == "switch":
            G.add_edge(("gpu", g), ("nvswitch", int(loc["domain"])), bytes_per_s=p.nvlink_bytes_per_s, kind="nvlink")
    if p.nvlink_topology == "mesh":
        for g in range(num_gpus):
            for h in range(g + 1, num_gpus):
                if g // p.nvlink_domain_gpus == h // p.nvlink_domain_gpus:
                    G.add_edge(("gpu", g), ("gpu", h), bytes_per_s=p.nvlink_link_bytes_per_s, kind="nvlink")
    uplink = p.nodes_per_leaf * p.nic_bytes_per_s / p.leaf_oversubscription
    multi_node = n_nodes > 1
    for node in range(n_nodes):
        leaf_group = node // p.nodes_per_leaf
        for j in range(p.nics_per_node):
            nic = ("nic", node, j)
            G.add_node(nic, node=node)
            # GPUs attached to NIC j: the local indices that map to it
            for local in range(p.gpus_per_node):
                g = node * p.gpus_per_node + local
                if g < num_gpus and local * p.nics_per_node // p.gpus_per_node == j:
                    G.add_edge(("gpu", g), nic, bytes_per_s=p.nic_bytes_per_s, kind="pcie")
            if multi_node:
                G.add_edge(nic, ("leaf", leaf_group, j), bytes_per_s=p.nic_bytes_per_s, kind="ib")
                G.add_edge(("leaf", leaf_group, j), ("spine",), bytes_per_s=uplink, kind="uplink")
    return G


def path_bottleneck_bytes_per_s(graph, src_gpu: int, dst_gpu: int) -> tuple[float, list]:
    """(bottleneck bandwidth, path) of the minimum-hop path between two GPUs, preferring the path
    with the widest bottleneck among the shortest ones (NVLink inside a domain, else NIC/leaf/spine)."""
    import networkx as nx

    a, b = ("gpu", src_gpu), ("gpu", dst_gpu)
    if a == b:
        return float("inf"), [a]
    best, best_path = -1.0, None
    for path in nx.all_shortest_paths(graph, a, b):
        bw = min(graph.edges[u, v]["bytes_per_s"] for u, v in zip(path, path[1:]))
        if bw > best:
            best, best_path = bw, path
    return best, best_path
