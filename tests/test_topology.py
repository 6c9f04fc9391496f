"""Rank placement and group spans: arithmetic spans checked against explicit enumeration on the graph."""
import itertools

import numpy as np
import pytest

from simulator.cost.topology import DEFAULT_ORDER, build_graph, group_span, path_bottleneck_bytes_per_s, rank_coords
from simulator.errors import InputError
from simulator.spec.hardware import load_hardware


def _enumerate(profile, graph, degs, group, order):
    """Independent truth: list every group by brute force, locate each GPU through the graph."""
    world = int(np.prod(list(degs.values())))
    strides, s = {}, 1
    for dim in order:
        strides[dim] = s
        s *= degs[dim]
    others = [d for d in order if d != group]
    worst = dict(per_node=None, nodes=0, domains=0, leaves=0)
    per_node_all = set()
    for coords in itertools.product(*[range(degs[d]) for d in others]):
        base = sum(c * strides[d] for c, d in zip(coords, others))
        ranks = [base + j * strides[group] for j in range(degs[group])]
        assert max(ranks) < world
        nodes = [graph.nodes[("gpu", r)]["node"] for r in ranks]
        domains = [graph.nodes[("gpu", r)]["domain"] for r in ranks]
        leaves = [n // profile.nodes_per_leaf for n in nodes]
        per_node_all.add(max(nodes.count(n) for n in set(nodes)))
        worst["nodes"] = max(worst["nodes"], len(set(nodes)))
        worst["domains"] = max(worst["domains"], len(set(domains)))
        worst["leaves"] = max(worst["leaves"], len(set(leaves)))
    worst["per_node"] = per_node_all
    return worst


CASES = [dict(tp=8, cp=1, ep=1, dp=4, pp=2), dict(tp=2, cp=2, ep=1, dp=4, pp=2), dict(tp=4, cp=1, ep=2, dp=2, pp=4),
         dict(tp=1, cp=1, ep=8, dp=2, pp=2), dict(tp=16, cp=1, ep=1, dp=2, pp=1)]


@pytest.mark.parametrize("degs", CASES)
@pytest.mark.parametrize("group", DEFAULT_ORDER)
def test_arithmetic_span_matches_graph_enumeration(degs, group):
    import dataclasses
    p = dataclasses.replace(load_hardware("dgx-h100"), nodes_per_leaf=2)    # small leaf groups to exercise the spine
    world = int(np.prod(list(degs.values())))
    g = build_graph(p, world)
    truth = _enumerate(p, g, degs, group, DEFAULT_ORDER)
    span = group_span(p, group=group, **degs)
    assert bool(span.regular)
    assert truth["per_node"] == {int(span.ranks_per_node)}
    assert truth["nodes"] == int(span.nodes)
    assert truth["domains"] == int(span.domains)
    assert truth["leaves"] == int(span.leaves)


def test_custom_order_moves_dp_innermost():
    p = load_hardware("dgx-h100")
    span = group_span(p, group="dp", tp=8, dp=8, order=("dp", "tp", "cp", "ep", "pp"))
    assert int(span.ranks_per_node) == 8 and int(span.nodes) == 1
    span_tp = group_span(p, group="tp", tp=8, dp=8, order=("dp", "tp", "cp", "ep", "pp"))
    assert int(span_tp.ranks_per_node) == 1 and int(span_tp.nodes) == 8


def test_vectorised_over_a_million_layouts():
    p = load_hardware("dgx-h100")
    rng = np.random.default_rng(0)
    tp = 2 ** rng.integers(0, 4, 1_000_000)
    dp = 2 ** rng.integers(0, 8, 1_000_000)
    span = group_span(p, group="dp", tp=tp, dp=dp, pp=4)
    # DP stride = tp: a DP group keeps 8/tp members per node while tp < 8
    np.testing.assert_array_equal(span.ranks_per_node, np.minimum(dp, np.maximum(1, 8 // tp)))


def test_gb200_nvl72_domain_is_larger_than_a_node():
    p = load_hardware("gb200-nvl72")
    span = group_span(p, group="tp", tp=16)
    assert int(span.nodes) == 4 and int(span.domains) == 1 and not bool(span.crosses_domain)


def test_rank_coords_round_trip():
    degs = dict(tp=2, cp=2, ep=1, dp=3, pp=2)
    r = np.arange(24)
    c = rank_coords(r, **degs)
    back = c["tp"] + 2 * (c["cp"] + 2 * (c["ep"] + 1 * (c["dp"] + 3 * c["pp"])))
    np.testing.assert_array_equal(back, r)


def test_bottleneck_is_nvlink_inside_and_nic_across_nodes():
    p = load_hardware("dgx-h100")
    g = build_graph(p, 16)
    bw_in, _ = path_bottleneck_bytes_per_s(g, 0, 7)
    bw_out, path = path_bottleneck_bytes_per_s(g, 0, 8)
    assert bw_in == 450e9 and bw_out == 50e9
    assert any(v[0] == "leaf" for v in path)


def test_mesh_graph_links_every_pair():
    g = build_graph(load_hardware("mi300x"), 8)
    bw, path = path_bottleneck_bytes_per_s(g, 0, 5)
    assert len(path) == 2 and bw == 64e9


def test_bad_degrees_and_group_raise():
    p = load_hardware("dgx-h100")
    with pytest.raises(InputError):
        group_span(p, group="tp", tp=0)
    with pytest.raises(InputError):
        group_span(p, group="zz", tp=2)
