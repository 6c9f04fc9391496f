"""Replay of pipeline schedules against independent truths: closed-form bubbles, the longest path of
the op DAG (networkx), busy-time conservation, the vectorised fast path."""
import networkx as nx
import numpy as np
import pytest

from simulator.errors import InputError
from simulator.pipeline import compile_schedule, replay
from simulator.schedules import SCHEDULE_NAMES, build


def _vpp(name):
    return 2 if name == "interleaved" else 1


def _ok_m(name, p):
    return max(2 * p, 8) if name in ("dualpipe", "dualpipev") else 8


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", [(2, 1), (4, 8), (8, 32), (5, 3)])
def test_gpipe_and_1f1b_bubble_is_p_minus_1_over_m_plus_p_minus_1(name, p, m):
    t = replay(build(name, pp=p, microbatches=m), forward_s=1.0, backward_s=2.0)
    assert t.bubble_fraction == pytest.approx((p - 1) / (m + p - 1), abs=1e-15)
    assert t.makespan_s == (m + p - 1) * 3.0  # (m+p-1)(F+B), Narayanan et al. 2021 §2.2.1


@pytest.mark.parametrize("p,m,v", [(4, 8, 2), (4, 16, 3), (8, 16, 2), (2, 4, 4)])
def test_interleaved_bubble_is_p_minus_1_over_vm_plus_p_minus_1(p, m, v):
    t = replay(build("interleaved", pp=p, microbatches=m, vpp=v), forward_s=1.0 / v, backward_s=2.0 / v)
    assert t.bubble_fraction == pytest.approx((p - 1) / (v * m + p - 1), abs=1e-12)


@pytest.mark.parametrize("F,B,W", [(1.0, 1.0, 1.0), (1.0, 1.0, 0.5), (2.0, 1.5, 1.0), (1.0, 1.0, 0.25)])
@pytest.mark.parametrize("p,m", [(4, 8), (8, 24)])
def test_zb_h1_idle_per_rank_is_p_minus_1_times_F_plus_B_minus_W(F, B, W, p, m):
    t = replay(build("zb-h1", pp=p, microbatches=m), forward_s=F, backward_s=B, weight_s=W)
    for idle in t.idle_s_per_rank:  # Qi et al. 2024 §2.1 (holds for W <= B)
        assert idle == pytest.approx((p - 1) * (F + B - W), abs=1e-9)


@pytest.mark.parametrize("T", [1.0, 0.5])
@pytest.mark.parametrize("pp,m", [(4, 8), (8, 20), (16, 64)])
def test_dualpipe_bubble_matches_deepseek_v3_table_2_for_equal_costs(T, pp, m):
    # Table 2: (PP/2 - 1)(F&B + B - 3W), B = full backward = 2T, F&B = F + B = 3T (no overlap gain)
    expect = (pp / 2 - 1) * (3 * T + 2 * T - 3 * T)
    t = replay(build("dualpipe", pp=pp, microbatches=m), forward_s=T, backward_s=T, weight_s=T)
    assert t.idle_s_per_rank == pytest.approx([expect] * pp, abs=1e-9)
    # DualPipeV: the same bubble on PP/2 devices (DualPipe README)
    tv = replay(build("dualpipev", pp=pp // 2, microbatches=m), forward_s=T, backward_s=T, weight_s=T)
    assert tv.idle_s_per_rank == pytest.approx([expect] * (pp // 2), abs=1e-9)


def test_peak_inflight_matches_the_residency_table():
    # formulas.md §3.5: 1F1B min(m, p-r); GPipe m; ZB-H1 p; ZB-H2 2p-1 on rank 0; DualPipe PP+1;
    # interleaved rank 0: (v+1)p - 1 chunk activations (Megatron warm-up 2(p-1)+(v-1)p, +1)
    p, m = 4, 12
    assert build_peak("1f1b", p, m) == tuple(min(m, p - r) for r in range(p))
    assert build_peak("gpipe", p, m) == (m,) * p
    assert build_peak("zb-h1", p, m) == (p,) * p
    assert build_peak("zb-h2", p, m)[0] == 2 * p - 1
    assert max(build_peak("dualpipe", p, m)) == p + 1
    assert build_peak("interleaved", p, m, v=2)[0] == 3 * p - 1
    assert build_peak("zb-v", p, m) == (2 * p,) * p  # 2p chunk activations = p full stages (1F1B's)


def build_peak(name, p, m, v=1):
    return replay(build(name, pp=p, microbatches=m, vpp=v), forward_s=1, backward_s=1, weight_s=1).peak_inflight_microbatches_per_rank


def _dag_longest_path(schedule, f, b, w, p2p):
    """Independent truth: the op DAG in networkx, node weight moved onto outgoing edges."""
    g = nx.DiGraph()
    ops = {(o.kind, o.stage, o.microbatch): o for r in schedule.ranks for o in r}
    S = schedule.num_stages

    def dur(o):
        if o.kind == "F":
            return f[o.stage]
        if o.kind == "W":
            return w[o.stage]
        return b[o.stage] + (w[o.stage] if o.includes_weight else 0.0)

    for o in ops.values():
        g.add_edge("src", o, weight=0.0)
        g.add_edge(o, "sink", weight=dur(o))
    for r in schedule.ranks:
        for x, y in zip(r, r[1:]):
            g.add_edge(x, y, weight=dur(x))
    incoming = {}
    for o in ops.values():
        if o.kind == "F" and o.stage > 0:
            src, bnd = ops[("F", o.stage - 1, o.microbatch)], o.stage - 1
        elif o.kind == "B" and o.stage < S - 1:
            src, bnd = ops[("B", o.stage + 1, o.microbatch)], o.stage
        elif o.kind == "B":
            src, bnd = ops[("F", o.stage, o.microbatch)], None
        elif o.kind == "W":
            src, bnd = ops[("B", o.stage, o.microbatch)], None
        else:
            continue
        lat = p2p[bnd] if (bnd is not None and src.rank != o.rank) else 0.0
        incoming[o] = (src, dur(src) + lat)
        g.add_edge(src, o, weight=dur(src) + lat)
    # a paired (DualPipe F&B) op also waits for its partner's input
    for r in schedule.ranks:
        for x, y in zip(r, r[1:]):
            if x.paired and y in incoming:
                src, wgt = incoming[y]
                g.add_edge(src, x, weight=wgt)
    return nx.dag_longest_path_length(g, weight="weight")


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
def test_makespan_equals_networkx_longest_path_with_uneven_stages_and_p2p(name):
    rng = np.random.default_rng(7)
    p = 4
    sch = build(name, pp=p, microbatches=_ok_m(name, p), vpp=_vpp(name))
    S = sch.num_stages
    f, b, w = rng.uniform(0.5, 2.0, S), rng.uniform(0.5, 2.0, S), rng.uniform(0.1, 1.0, S)
    f[0] += 0.7  # embedding on the first stage
    f[-1] += 1.3  # LM head + loss on the last
    p2p = rng.uniform(0.0, 0.3, max(S - 1, 1))
    t = replay(sch, forward_s=f, backward_s=b, weight_s=w, p2p_s=p2p[: S - 1])
    assert t.makespan_s == pytest.approx(_dag_longest_path(sch, f, b, w, p2p), rel=1e-12)
    # the critical path spans the makespan
    cp = t.critical_path
    assert t.start_s[cp[0]] == 0.0 and t.end_s[cp[-1]] == t.makespan_s


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
def test_busy_time_is_conserved_and_ops_never_overlap_on_a_rank(name):
    sch = build(name, pp=4, microbatches=_ok_m(name, 4), vpp=_vpp(name))
    rng = np.random.default_rng(1)
    S = sch.num_stages
    f, b, w = rng.uniform(0.2, 1, S), rng.uniform(0.2, 1, S), rng.uniform(0.2, 1, S)
    t = replay(sch, forward_s=f, backward_s=b, weight_s=w, p2p_s=0.05)
    ops = t.ops
    expected_total = sum(f[o.stage] if o.kind == "F" else w[o.stage] if o.kind == "W"
                         else b[o.stage] + (w[o.stage] if o.includes_weight else 0) for o in ops)
    for r in range(sch.num_ranks):
        iv = sorted((t.start_s[i], t.end_s[i]) for i, o in enumerate(ops) if o.rank == r)
        assert all(e0 <= s1 + 1e-12 for (_, e0), (s1, _) in zip(iv, iv[1:]))
        assert sum(e - s for s, e in iv) == pytest.approx(t.busy_s_per_rank[r], rel=1e-12)
    assert sum(t.busy_s_per_rank) == pytest.approx(expected_total, rel=1e-12)


def test_pipedream_steady_state_is_the_slowest_stage_and_stashes_p_minus_r_versions():
    p, m = 4, 64
    f = np.array([1.0, 1.5, 1.2, 0.8])
    b = np.array([2.0, 2.6, 2.1, 1.9])
    t = replay(build("pipedream", pp=p, microbatches=m), forward_s=f, backward_s=b)
    assert t.steady_state_time_per_microbatch_s == pytest.approx((f + b).max(), rel=1e-12)  # PipeDream §3.1
    assert t.stashed_weight_versions_per_rank == tuple(p - r for r in range(p))  # §3.3


def test_activation_bytes_per_rank_follow_the_inflight_counts():
    sch = build("1f1b", pp=4, microbatches=8)
    t = replay(sch, forward_s=1, backward_s=2, activation_bytes=[10.0, 20.0, 30.0, 40.0])
    assert t.peak_activation_bytes_per_rank == (40.0, 60.0, 60.0, 40.0)  # (p-r) x bytes_r


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), [1.0, 2.0]])
def test_bad_durations_raise_input_error(bad):
    with pytest.raises(InputError):
        replay(build("1f1b", pp=4, microbatches=8), forward_s=bad, backward_s=1.0)


@pytest.mark.parametrize("N", [11, 200, 6000])
def test_multi_shape_replay_equals_the_levelled_replay_of_each_layout(N):
    # makespan_multi replays layouts of nine schedule shapes (every schedule) in one compiled pass, with and without the
    # p2p delay; each layout's makespans must equal replay() of its own schedule bit for bit, its busy
    # time per rank (from op counts, not summed op by op) to rounding. The C loop runs the rows of a
    # shape four at a time (11 layouts: shapes with fewer rows than that, or none). 6000 layouts (~1 M
    # ops) run in threads, one per core, each on its own block of rows: rows spread over all of them
    # are checked.
    from simulator.pipeline import makespan_multi

    rng = np.random.default_rng(0)
    cs = [compile_schedule(build(s, pp=p, microbatches=m, vpp=v)) for s, p, m, v in
          [("1f1b", 4, 8, 1), ("interleaved", 4, 8, 2), ("zb-h1", 4, 8, 1), ("dualpipe", 4, 8, 1), ("zb-v", 4, 8, 1),
           ("dualpipev", 4, 8, 1), ("gpipe", 1, 3, 1), ("zb-h2", 8, 16, 1), ("pipedream", 4, 12, 1)]]
    assert {c.schedule.name for c in cs} >= set(SCHEDULE_NAMES)
    S = max(c.schedule.num_stages for c in cs)
    sid = rng.integers(0, len(cs), N)
    F, B, W = (rng.random((N, S)) for _ in range(3))
    p = rng.random(N) * 0.1
    mk, mk0, busy = makespan_multi(cs, sid, F, B, W, p)
    for i in range(N) if N <= 200 else np.linspace(0, N - 1, 150).astype(int):
        c = cs[sid[i]]
        Si, R = c.schedule.num_stages, c.schedule.num_ranks
        kw = dict(forward_s=F[i, :Si], backward_s=B[i, :Si], weight_s=W[i, :Si])
        t, t0 = replay(c, p2p_s=p[i], **kw), replay(c, p2p_s=0.0, **kw)
        assert mk[i] == t.makespan_s and mk0[i] == t0.makespan_s, i
        assert np.allclose(busy[i, :R], t.busy_s_per_rank, rtol=1e-13, atol=0) and not busy[i, R:].any()


def test_multi_shape_replay_of_uniform_gpipe_and_1f1b_is_the_closed_form():
    # (m + p - 1)(F + B) for uniform stages without p2p (Narayanan et al. 2021 §2.2.1), each rank busy
    # m (F + B); times in eighths of a second, so every sum is exact
    from simulator.pipeline import makespan_multi

    shapes = [(s, p, m) for s in ("gpipe", "1f1b") for p, m in [(1, 3), (2, 1), (4, 8), (5, 3), (8, 32)]]
    cs = [compile_schedule(build(s, pp=p, microbatches=m)) for s, p, m in shapes]
    rng = np.random.default_rng(2)
    N = 300
    sid = rng.integers(0, len(cs), N)
    f, b = rng.integers(1, 64, N) / 8, rng.integers(1, 64, N) / 8
    F, B = np.repeat(f[:, None], 8, axis=1), np.repeat(b[:, None], 8, axis=1)
    mk, mk0, busy = makespan_multi(cs, sid, F, B, np.zeros((N, 8)), np.zeros(N))
    p, m = (np.array([x[k] for x in shapes])[sid] for k in (1, 2))
    assert np.array_equal(mk, (m + p - 1) * (f + b)) and np.array_equal(mk0, mk)
    ranks = np.arange(8) < p[:, None]
    assert np.array_equal(busy, np.where(ranks, (m * (f + b))[:, None], 0.0))


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
def test_shape_tables_in_one_c_pass_equal_the_numpy_derivation(name):
    # shape_tables(schedule) derives dependencies, levels, packed op tables, op counts and in-flight
    # peaks from the builder's columns in C; from the CompiledSchedule they come from Schedule.arrays,
    # compile_schedule, _packed, _busy_table and inflight_profile (numpy). Equal, array for array.
    from simulator import native
    from simulator.pipeline import shape_tables

    if native.LIB is None:
        pytest.skip("the compiled loops are not built")
    for pp, m, v in [(4, 8, 2), (8, 16, 3), (2, 4, 1), (6, 12, 1), (1, 3, 1), (4, 32, 4)]:
        try:
            sch = build(name, pp=pp, microbatches=m, vpp=v if name == "interleaved" else 1)
        except InputError:
            continue
        if sch.columns is None:
            continue
        fast, ref = shape_tables(sch), shape_tables(compile_schedule(sch))
        assert fast.compiled is None and ref.compiled is not None  # the C pass ran
        assert (fast.num_ops, fast.num_stages, fast.num_ranks) == (ref.num_ops, ref.num_stages, ref.num_ranks)
        for a, b in zip(fast.packed + fast.busy, ref.packed + ref.busy):
            assert a.dtype == b.dtype and np.array_equal(a, b)
        assert np.array_equal(fast.inflight, ref.inflight)


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "zb-h1", "zb-h2"])
def test_flushed_schedule_tables_from_their_description_equal_the_numpy_derivation(name):
    # the sweep makes these shapes' tables in one C call from the FlushSpec, never building op lists:
    # equal, array for array, to the numpy derivation from the built schedule
    from simulator import native
    from simulator.pipeline import flush_shape_tables, shape_tables
    from simulator.schedules import FLUSH_SPECS

    if native.LIB is None:
        pytest.skip("the compiled loops are not built")
    for pp, m in [(1, 1), (1, 5), (2, 1), (3, 2), (4, 8), (5, 13), (8, 3), (16, 64)]:
        fast = flush_shape_tables(FLUSH_SPECS[name](pp=pp, microbatches=m))
        ref = shape_tables(compile_schedule(build(name, pp=pp, microbatches=m)))
        assert (fast.num_ops, fast.num_stages, fast.num_ranks) == (ref.num_ops, ref.num_stages, ref.num_ranks)
        for x, y in zip(fast.packed + fast.busy + (fast.inflight,), ref.packed + ref.busy + (ref.inflight,)):
            assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)
        assert not fast.inflight.flags.writeable


def test_shape_tables_of_a_broken_order_raise_the_numpy_messages():
    # 1F1B, p = 2, m = 2 as op columns (rank 0 then rank 1): F0 F1 B0 B1 | F0 B0 F1 B1
    from simulator.pipeline import DeadlockError, shape_tables
    from simulator.schedules import make_schedule

    def sched(kind0, mb0):
        kind = np.array(kind0 + [0, 1, 0, 1])
        cols = (kind, np.array([0] * 4 + [1] * 4), np.array(mb0 + [0, 0, 1, 1]), kind == 1, np.zeros(8, bool),
                np.array([4, 4]))
        return make_schedule("bad", columns=cols, num_stages=2, num_microbatches=2, chunks_per_rank=1)

    assert shape_tables(sched([0, 0, 1, 1], [0, 1, 0, 1])).num_ops == 8  # the good order
    with pytest.raises(InputError, match="0F0 appears more than once"):
        shape_tables(sched([0, 0, 1, 1], [0, 0, 0, 1]))
    with pytest.raises(DeadlockError, match="0B0 waits for 1B0"):  # rank 0 starts with B0
        shape_tables(sched([1, 0, 0, 1], [0, 0, 1, 1]))


def test_the_compiled_replay_is_built():
    # the C loops are optional at install (no compiler: numpy fallback); the test suite must run them
    import os

    from simulator import native

    if os.environ.get("PARASIM_NO_NATIVE", "") not in ("", "0"):
        pytest.skip("PARASIM_NO_NATIVE set")
    assert native.LIB is not None, "simulator/native/_native.c is not built: run `make setup` (needs a C compiler)"


def test_numpy_fallback_equals_the_compiled_loops(monkeypatch):
    # without the C library the numpy references run: the same levels, makespans and busy times, and
    # one RuntimeWarning saying the replay is slower
    from simulator import native
    from simulator.pipeline import makespan_multi

    if native.LIB is None:
        pytest.skip("the compiled loops are not built")
    shapes = [("1f1b", 4, 8, 1), ("interleaved", 4, 8, 2), ("zb-h2", 4, 8, 1), ("dualpipev", 4, 8, 1), ("gpipe", 2, 3, 1)]
    rng = np.random.default_rng(5)
    N, S = 300, 8
    sid = rng.integers(0, len(shapes), N)
    F, B, W = (rng.random((N, S)) for _ in range(3))
    p = rng.random(N) * 0.1

    def run():
        cs = [compile_schedule(build(s, pp=pp, microbatches=m, vpp=v)) for s, pp, m, v in shapes]
        return cs, makespan_multi(cs, sid, F, B, W, p)

    cs, (mk, mk0, busy) = run()
    monkeypatch.setattr(native, "LIB", None)
    monkeypatch.setattr(native, "_warned", False)
    with pytest.warns(RuntimeWarning, match="not built"):
        cs2, (mk2, mk02, busy2) = run()
    for a, b in zip(cs, cs2):
        assert np.array_equal(a.level_ops, b.level_ops) and np.array_equal(a.level_offsets, b.level_offsets)
    assert np.array_equal(mk, mk2) and np.array_equal(mk0, mk02)
    assert np.allclose(busy, busy2, rtol=1e-13, atol=0)  # op counts x durations vs op by op


def test_padded_rank_sums_equal_the_stage_rank_matrix():
    # structure.pipeline_table pads shapes; rank_sum must equal x @ stage_rank_matrix for each shape
    from simulator.schedules import family
    from simulator.spec.model import ModelSpec
    from simulator.structure import pipeline_table

    model = ModelSpec(name="t", hidden_size=64, num_layers=24, num_heads=4, vocab_size=100, ffn_hidden_size=128)
    shapes = [("1f1b", 4, 1), ("interleaved", 4, 3), ("zb-v", 2, 1), ("dualpipe", 6, 1), ("dualpipev", 4, 1),
              ("gpipe", 1, 1), ("pipedream", 8, 1)]
    sched, pp, ch = (np.array(x, dtype=object if i == 0 else np.int64) for i, x in enumerate(zip(*shapes)))
    pt = pipeline_table(model, schedule=sched, pp=pp, chunks=ch)
    rng = np.random.default_rng(1)
    x = rng.random(pt.stage_valid.shape)
    got = pt.rank_sum(x)
    for i, (s, p, v) in enumerate(shapes):
        M = family(s).rank_matrix(p, v)
        want = x[i, :M.shape[0]] @ M
        assert np.allclose(got[i, :p], want, rtol=1e-14) and not got[i, p:].any()
        assert pt.layers[i].sum() == 24  # every virtual stage once
        assert pt.placement.layers[i].sum() == (48 if s == "dualpipe" else 24)  # dualpipe ranks hold two copies
    # the C loop (native.rank_sum) makes the numpy bincounts' additions in their order: the same bits,
    # with and without dualpipe's mirrored copies in the table, on rows of the shapes in random order
    from simulator import native

    if native.LIB is not None:
        plain = np.flatnonzero(sched != "dualpipe")
        no_mirror = pipeline_table(model, schedule=sched[plain], pp=pp[plain], chunks=ch[plain])
        for table in (pt, no_mirror):
            rows = rng.integers(0, len(table.shape_index), 200)
            sub = table.take(rows)
            xs = rng.random((200, sub.stage_valid.shape[1])) * 10.0 ** rng.integers(-6, 3, (200, 1))
            got = sub.rank_sum(xs)
            lib, native.LIB = native.LIB, None
            try:
                want = sub.rank_sum(xs)
            finally:
                native.LIB = lib
            assert np.array_equal(got, want)


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
def test_compiled_levelisation_equals_the_numpy_rounds(name):
    # compile_schedule runs the rounds in C (native.py); the numpy rounds are the reference (same op order)
    from simulator.pipeline.compiled import _levels_numpy

    for pp, m, v in [(4, 8, 2), (8, 16, 3), (2, 4, 1), (6, 12, 1)]:
        try:
            sch = build(name, pp=pp, microbatches=m, vpp=v if name == "interleaved" else 1)
        except InputError:
            continue
        c, a = compile_schedule(sch), sch.arrays
        n = len(a.kind)
        lo, off = _levels_numpy(sch, a, a.rank_offsets[:-1].copy(), a.rank_offsets[1:], np.where(a.dep >= 0, a.dep, n),
                                np.where(a.dep2 >= 0, a.dep2, n), n)
        assert np.array_equal(lo, c.level_ops) and np.array_equal(off, c.level_offsets)


def test_row_sums_add_left_to_right_so_padding_changes_no_bit(monkeypatch):
    # the kernel sums padded (rows x stages/ranks) arrays with native.row_sums: each row left to right,
    # as np.cumsum does (the numpy fallback), so a row padded with zeros to any width sums to the same
    # bits; numpy's pairwise sum does not (rows of 8 or more values are regrouped)
    from simulator import native

    rng = np.random.default_rng(3)
    x = rng.random((500, 13)) * 10.0 ** rng.integers(-6, 3, (500, 13))
    want = np.cumsum(x, axis=1)[:, -1]
    for width in (13, 16, 40, 128):
        padded = np.zeros((500, width))
        padded[:, :13] = x
        assert np.array_equal(native.row_sums(padded), want), width
    assert not np.array_equal(np.pad(x, ((0, 0), (0, 27))).sum(axis=1), want)  # what it replaces
    monkeypatch.setattr(native, "LIB", None)
    assert np.array_equal(native.row_sums(np.pad(x, ((0, 0), (0, 3)))), want)
