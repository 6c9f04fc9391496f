"""The schedule families' closed-form makespans with a p2p delay per hop (`ScheduleFamily.makespan(..., d)`,
derived in each family's module docstring) against the op DAG and the replay, and `--pipeline analytic`'s
exposed p2p against the replay's (issue 23).

Three checks, from the most to the least general:
- the symbolic longest path: every path of the op DAG has a length n_F·F + n_B·B + n_W·W + n_hops·δ on
  uniform stages, so the makespan is the largest of the Pareto-maximal count vectors, computed op by op
  over the compiled levels; the closed form must equal it for every (F, B, W, δ) drawn where `p2p_exact`
  holds, and never exceed it (small shapes, every m up to 3p + 2);
- seeded replays of random (F, B, W, δ, p, m, v) on uniform stages, larger shapes;
- the kernel's analytic mode on uniform stages, and on the issue's case (slow links, uneven stages).
"""
from dataclasses import replace

import numpy as np
import pytest

from simulator.errors import InputError
from simulator.estimate import EstimateOptions, estimate
from simulator.kernel_pipeline import _analytic_pipeline
from simulator.pipeline import compile_schedule, replay
from simulator.schedules import build, family
from simulator.spec.hardware import hardware_from_dict
from simulator.spec.presets import read_toml, resolve
from simulator.spec.scenario import load_scenario

EXACT = ("gpipe", "1f1b", "zb-h1", "interleaved")  # the families with a closed form with p2p


def _pareto(vs: np.ndarray) -> np.ndarray:
    """The rows of `vs` no other row dominates (>= everywhere, > somewhere)."""
    vs = np.unique(vs, axis=0)
    keep = [i for i, v in enumerate(vs) if not (np.all(vs >= v, axis=1) & np.any(vs > v, axis=1)).any()]
    return vs[keep]


def path_forms(name, p, m, v=1) -> np.ndarray:
    """(n_F, n_B, n_W, n_hops) of every Pareto-maximal path of the schedule's op DAG (a B that includes
    the weight gradient counts in n_B and n_W): the makespan on uniform stages is max(forms @ (F, B, W, δ))."""
    sch = build(name, pp=p, microbatches=m, vpp=v)
    a = sch.arrays
    own = np.stack([a.kind == 0, a.kind == 1, (a.kind == 2) | ((a.kind == 1) & a.includes_weight),
                    np.zeros(len(a.kind), bool)], axis=1).astype(np.int64)
    forms = [None] * len(a.kind)
    for i in compile_schedule(sch).level_ops:
        parts = [forms[a.rank_prev[i]]] if a.rank_prev[i] >= 0 else []
        for dep, bnd in ((a.dep[i], a.boundary[i]), (a.dep2[i], a.boundary2[i])):
            if dep >= 0:
                parts.append(forms[dep] + np.array([0, 0, 0, int(bnd >= 0)]))
        forms[i] = (_pareto(np.concatenate(parts)) if parts else np.zeros((1, 4), np.int64)) + own[i]
    return _pareto(np.concatenate([forms[o - 1] for o in a.rank_offsets[1:]]))


def _directions(n, seed):
    """Random (F, B, W, δ) >= 0, some coordinates 0, δ from 1 % to 3x an op."""
    rng = np.random.default_rng(seed)
    x = rng.exponential(size=(n, 4)) * rng.choice([0.0, 1.0, 1.0, 1.0], size=(n, 4))
    x[:, 3] *= rng.choice([0.01, 0.1, 1.0, 3.0], size=n)
    return x


def _closed(name, p, m, v, F, B, W, d):
    """The family's closed form and `p2p_exact` for per-stage (per-chunk) F, B, W arrays and delays d."""
    fam = family(name)
    c = fam.chunks_per_rank(v)
    b, w = (B, W) if fam.split_backward else (B + W, 0 * W)
    f, b, w = F * c, b * c, w * c
    k = np.shape(F)
    args = (np.full(k, p), np.full(k, float(m)), np.full(k, v))
    return fam.makespan(*args, f + b + w, f, b, w, d), fam.p2p_exact(*args, f, b, w, d)


def _shapes(name):
    vs = (2, 3) if family(name).takes_vpp else (1,)
    for v in vs:
        for p in range(1 if v == 1 else 2, 7):
            for m in range(1, 3 * p + 3):
                if v * m * p <= 200:
                    yield p, m, v


@pytest.mark.parametrize("name", EXACT)
def test_closed_form_is_the_longest_path_of_the_op_dag(name):
    x = _directions(400, seed=23)
    F, B, W, d = x.T
    n = 0
    for p, m, v in _shapes(name):
        try:
            forms = path_forms(name, p, m, v)
        except InputError:  # interleaved: m % max(1, m // p) != 0
            continue
        longest = (x @ forms.T).max(axis=1)
        got, exact = _closed(name, p, m, v, F, B, W, d)
        where = (name, p, m, v)
        assert np.allclose(got[exact], longest[exact], rtol=1e-12, atol=1e-12), where
        assert (got <= longest * (1 + 1e-12) + 1e-12).all(), where  # outside its domain: a lower bound
        n += 1
    assert n >= 40


@pytest.mark.parametrize("name", EXACT)
def test_closed_form_equals_the_replay_on_uniform_stages(name):
    rng = np.random.default_rng(23 + EXACT.index(name))
    fam = family(name)
    checked = 0
    for _ in range(40):
        p = int(rng.integers(2, 17))
        v = int(rng.integers(2, 5)) if fam.takes_vpp else 1
        m = int(rng.integers(1, 5 * p))
        if fam.takes_vpp:  # a count the builder takes: m % max(1, m // p) == 0, sometimes m % p == 0
            m = p * int(rng.integers(1, 5)) if rng.random() < 0.5 else (m // max(1, m // p)) * max(1, m // p)
        F, B, W = rng.uniform(0.1, 2.0, 3)
        d = rng.choice([0.0, rng.uniform(0, 0.1), rng.uniform(0, 1.0), rng.uniform(0, 4.0)])
        Bk, Wk = (B, W) if fam.split_backward else (B + W, 0.0)
        ref = replay(build(name, pp=p, microbatches=m, vpp=v), forward_s=F, backward_s=Bk, weight_s=Wk,
                     p2p_s=d).makespan_s
        got, exact = _closed(name, p, m, v, np.array([F]), np.array([B]), np.array([W]), np.array([d]))
        if exact[0]:
            assert got[0] == pytest.approx(ref, rel=1e-9), (p, m, v, F, B, W, d)
            checked += 1
        else:
            assert got[0] <= ref * (1 + 1e-9)
    assert checked >= 25


@pytest.mark.parametrize("schedule,vpp,m", [("1f1b", 1, 32), ("gpipe", 1, 16), ("zb-h1", 1, 24),
                                            ("interleaved", 2, 16), ("1f1b", 1, 3)])
def test_analytic_exposed_p2p_equals_the_replay_for_uniform_stages(schedule, vpp, m):
    # exposed p2p = makespan(δ) − makespan(0), both modes, uniform stages: the analytic mode now carries
    # the steady state's hops (before: 2(p − 1)·δ, e.g. 6δ against 1F1B's 52δ at p = 4, m = 32)
    p = 4
    S = p * vpp
    fam = family(schedule)
    F, B, W = np.full((1, S), 1.0 / vpp), np.full((1, S), 1.2 / vpp), np.full((1, S), 0.7 / vpp)
    Bk, Wk = (B, W) if fam.split_backward else (B + W, 0 * W)
    M = fam.rank_matrix(p, vpp)
    sch = compile_schedule(build(schedule, pp=p, microbatches=m, vpp=vpp))
    for d in (0.05, 0.4, 1.5):
        rep = [replay(sch, forward_s=F[0], backward_s=Bk[0], weight_s=Wk[0], p2p_s=x).makespan_s for x in (d, 0.0)]
        mk, mk0, _ = _analytic_pipeline(schedule, np.array([p]), np.array([vpp]), np.array([m]), (F + Bk + Wk) @ M,
                                        F @ M, Bk @ M, Wk @ M, np.array([d]))
        assert mk0[0] == pytest.approx(rep[1], rel=1e-12)
        assert mk[0] - mk0[0] == pytest.approx(rep[0] - rep[1], rel=1e-9), d


def _slow_links_case(schedule, pp, vpp=1):
    """The issue's case: llama3-70b-64xh100 on a copy of dgx-h100 whose NICs run at 10 Gb/s, PP across
    nodes (TP 8 fills a node), both pipeline modes."""
    d = read_toml(resolve("hardware_profiles", "dgx-h100"))
    d["network"].update(nic_gbit_per_s=10)
    hw = hardware_from_dict(d, where="dgx-h100 with 10 Gb/s NICs")
    sc = load_scenario("llama3-70b-64xh100")
    layout = replace(sc.layout, pp=pp, dp=64 // (8 * pp), schedule=schedule, vpp=vpp)
    return [estimate(sc.model, sc.training, layout, hw, options=EstimateOptions(pipeline=mode)).row
            for mode in ("replay", "analytic")]


def test_issue_23_slow_links_exposed_p2p_agrees_between_the_modes():
    # 1F1B, pp = 2, m = 32, uneven stages (the head and loss on the last rank): the replay exposes 0.715 s
    # of p2p; the analytic mode used to add 2(p − 1)·δ = 0.053 s (13x less). Now the closed form carries
    # the steady-state loops, minus the slack of the faster rank: within 1 %.
    rep, ana = _slow_links_case("1f1b", 2)
    assert rep["exposed_pp_s"] > 0.5
    assert ana["exposed_pp_s"] == pytest.approx(rep["exposed_pp_s"], rel=0.01)
    assert ana["step_s"] == pytest.approx(rep["step_s"], rel=0.01)


@pytest.mark.parametrize("schedule,vpp,tol", [("1f1b", 1, 0.01), ("gpipe", 1, 0.01), ("zb-h1", 1, 0.05),
                                              ("interleaved", 2, 0.05)])
def test_slow_links_exposed_p2p_agrees_between_the_modes_at_pp4(schedule, vpp, tol):
    # the same profile, pp = 4 (m = 64): 1F1B's replay exposes 2.22 s, the old analytic term 0.16 s
    rep, ana = _slow_links_case(schedule, 4, vpp)
    assert ana["exposed_pp_s"] == pytest.approx(rep["exposed_pp_s"], rel=tol)


def test_zb_h2_closed_form_is_the_flushed_replay_once_every_rank_reaches_its_steady_cycle():
    from simulator.pipeline import replay
    from simulator.schedules import build, family

    rng = np.random.default_rng(7)
    for _ in range(150):
        p = int(rng.integers(2, 7))
        m = int(rng.integers(2 * p - 1, 4 * p + 3))
        f, b, w = rng.uniform(0.2, 2.0, 3)
        got = replay(build("zb-h2", pp=p, microbatches=m), forward_s=f, backward_s=b, weight_s=w, p2p_s=0.0)
        closed = family("zb-h2").makespan(np.array([p]), np.array([float(m)]), 1, f + b + w, f, b, w)
        assert float(np.ravel(closed)[0]) == pytest.approx(got.makespan_s, rel=1e-9)
