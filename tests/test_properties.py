"""Property-based invariants (issue 24): laws the simulator must obey on every input of a small space,
checked with Hypothesis on random small models, layouts and schedules.

Each test states its invariant exactly in its docstring; each would fail on a real bug (a ZeRO stage that
adds memory, a replay that loses work, a sweep that disagrees with `estimate`, a traceback on bad CLI
input, ...); one that fails today on a real simulator bug is marked xfail(strict=True) with the bug named
and its falsifying examples pinned, next to a passing variant that still guards the rest. Everything is
derandomized (the same examples on every run, so CI is reproducible) and kept
small: the whole file runs in well under a minute on two cores. PARASIM_PROPERTY_SCALE=k (an integer)
multiplies every example count by k and turns derandomization off: a longer, random search for bugs.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
import os
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from simulator.cli import main as cli_main
from simulator.errors import InputError
from simulator.estimate import estimate
from simulator.kernel_pipeline import replayed_inflight_per_rank
from simulator.memory import Overheads, memory_breakdown
from simulator.memory.inflight import inflight_microbatches
from simulator.pipeline import replay
from simulator.schedules import SCHEDULE_NAMES, build, family
from simulator.spec.hardware import load_hardware
from simulator.spec.layout import Layout
from simulator.spec.model import ModelSpec
from simulator.spec.training import Training
from simulator.spec.validate import validate
from simulator.sweep import SweepSpace, run_sweep

H100 = load_hardware("dgx-h100")

# derandomize: the same examples every run (reproducible CI); no deadline: the first call of a shape
# compiles and caches its schedule, which is slower than the rest
SCALE = max(1, int(os.environ.get("PARASIM_PROPERTY_SCALE", "1")))
SETTINGS = dict(deadline=None, derandomize=SCALE == 1, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.filter_too_much])

# ---- small inputs -------------------------------------------------------------------------------------
DENSE = (
    ModelSpec(name="tiny-gqa", hidden_size=256, num_layers=8, num_heads=8, num_kv_heads=4, ffn_hidden_size=512,
              vocab_size=1000),
    ModelSpec(name="tiny-mha", hidden_size=128, num_layers=4, num_heads=4, ffn_hidden_size=384, vocab_size=2048,
              mlp="gelu", norm="layernorm", tie_word_embeddings=True),
)
MOE = ModelSpec(name="tiny-moe", hidden_size=256, num_layers=4, num_heads=8, num_kv_heads=8, ffn_hidden_size=512,
                vocab_size=1000, num_experts=4, experts_per_token=2, moe_ffn_hidden_size=256)
MODELS = DENSE + (MOE,)
LAYOUT_SCHEDULES = SCHEDULE_NAMES  # every family (a shape its builder refuses is filtered out by _estimate)


@st.composite
def cases(draw, models=MODELS, schedules=LAYOUT_SCHEDULES, zero=None, dp_values=(1, 2, 4), cp_values=(1, 1, 2)):
    """(model, training, layout) of a small valid job: degrees 1-4, 1-8 microbatches per replica, the global
    batch = dp x micro-batch x microbatches; invalid combinations are filtered by `validate`."""
    model = draw(st.sampled_from(models))
    tp = draw(st.sampled_from((1, 2, 4)))
    pp = draw(st.sampled_from((1, 2, 4)))
    dp = draw(st.sampled_from(dp_values))
    cp = draw(st.sampled_from(cp_values))
    ep = draw(st.sampled_from((1, 2))) if model.is_moe else 1
    mbs = draw(st.sampled_from((1, 2)))
    m = draw(st.integers(1, 8))
    seq = draw(st.sampled_from((512, 1024, 2048)))
    schedule = draw(st.sampled_from(schedules)) if pp > 1 else "1f1b"
    vpp = 2 if schedule == "interleaved" else 1
    z = draw(st.integers(0, 3)) if zero is None else zero
    recompute = draw(st.sampled_from(("none", "selective", "full")))
    sp = draw(st.booleans()) if tp > 1 else False
    training = Training(seq_length=seq, global_batch_size=dp * mbs * m,
                        optimizer=draw(st.sampled_from(("adam", "sgd-momentum"))),
                        grad_dtype=draw(st.sampled_from(("fp32", "bf16"))))
    try:
        layout = Layout(num_gpus=tp * pp * dp * cp, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp, micro_batch_size=mbs,
                        zero=z, recompute=recompute, sequence_parallel=sp, schedule=schedule)
        validate(model, training, layout)
    except InputError:
        assume(False)
    return model, training, layout


def _estimate(model, training, layout, hardware=H100):
    """estimate(), with layouts a schedule refuses (e.g. too few microbatches for its shape) filtered out."""
    try:
        return estimate(model, training, layout, hardware)
    except InputError as exc:
        if "microbatch" in str(exc) or "schedule" in str(exc):
            assume(False)
        raise


# ---- 1. memory vs the ZeRO stage ---------------------------------------------------------------------
@settings(max_examples=40 * SCALE, **SETTINGS)
@given(cases(zero=0))
def test_memory_does_not_rise_with_the_zero_stage(case):
    """For one layout and zero = 0, 1, 2, 3 (nothing else changed), on every pipeline stage:
    params_bytes, grads_bytes and optimizer_bytes are each non-increasing in the stage (hence their sum);
    activations_bytes are identical; peak_bytes is non-increasing from 0 to 1 to 2 (no transient buffers
    there); and without runtime overheads (Overheads.none()), peak_bytes - transient_bytes (ZeRO-3's
    gather buffers, the only term ZeRO-3 adds) is non-increasing from 0 to 3."""
    model, training, layout = case
    runs = [memory_breakdown(model, training, dataclasses.replace(layout, zero=z), H100) for z in range(4)]
    bare = [memory_breakdown(model, training, dataclasses.replace(layout, zero=z), H100, overheads=Overheads.none())
            for z in range(4)]
    for lo, hi, blo, bhi in zip(runs, runs[1:], bare, bare[1:]):
        for a, b, ba, bb in zip(lo.per_stage, hi.per_stage, blo.per_stage, bhi.per_stage):
            for k in ("params_bytes", "grads_bytes", "optimizer_bytes"):
                assert getattr(b, k) <= getattr(a, k) * (1 + 1e-12), (layout, k, a.stage)
            assert b.activations_bytes == a.activations_bytes
            assert bb.peak_bytes - bb.transient_bytes <= (ba.peak_bytes - ba.transient_bytes) * (1 + 1e-12)
    for lo, hi in zip(runs[:2], runs[1:3]):
        for a, b in zip(lo.per_stage, hi.per_stage):
            assert b.peak_bytes <= a.peak_bytes * (1 + 1e-12)
    # and the sharding is real where there is something to shard over (d = dp * cp > 1)
    if layout.dp * layout.cp > 1 and training.optimizer_bytes > 0:
        assert runs[1].worst.optimizer_bytes < runs[0].worst.optimizer_bytes


# ---- 2. memory vs the data-parallel degree --------------------------------------------------------------
@settings(max_examples=40 * SCALE, **SETTINGS)
@given(cases(zero=None, dp_values=(1, 2)), st.integers(1, 3))
def test_memory_does_not_rise_when_dp_doubles_with_sharded_states(case, zero):
    """Double dp (and with it num_gpus and the global batch) holding tp, pp, cp, ep, vpp, schedule,
    recompute, the micro-batch size and the microbatches per replica m = B / (dp * mbs), with ZeRO >= 1:
    on every stage params/grads/optimizer bytes do not rise (the sharded ones shrink by the DP shard
    degree, the rest are unchanged), activations are identical (same micro-batch, same m, same schedule),
    and the peak does not rise: without overheads always; with the default overheads when dp >= 2 already
    (dp 1 -> 2 adds one NCCL communicator, 128 MiB, a real cost the peak may then show)."""
    model, training, layout = case
    layout = dataclasses.replace(layout, zero=zero)
    m = layout.num_microbatches(training.global_batch_size)
    big_t = dataclasses.replace(training, global_batch_size=2 * training.global_batch_size)
    big = dataclasses.replace(layout, dp=2 * layout.dp, num_gpus=2 * layout.num_gpus)
    assert big.num_microbatches(big_t.global_batch_size) == m
    validate(model, big_t, big)
    for ov in (None, Overheads.none()):
        small_r = memory_breakdown(model, training, layout, H100, overheads=ov)
        big_r = memory_breakdown(model, big_t, big, H100, overheads=ov)
        for a, b in zip(small_r.per_stage, big_r.per_stage):
            for k in ("params_bytes", "grads_bytes", "optimizer_bytes"):
                assert getattr(b, k) <= getattr(a, k) * (1 + 1e-12), (layout, k)
            assert b.activations_bytes == a.activations_bytes
            assert b.optimizer_bytes < a.optimizer_bytes or a.optimizer_bytes == 0  # ZeRO >= 1 shards it
            if ov is not None or layout.dp >= 2:
                assert b.peak_bytes <= a.peak_bytes * (1 + 1e-12), (layout, ov)


# ---- pipeline replay -------------------------------------------------------------------------------------
durations = st.floats(0.05, 5.0, allow_nan=False, allow_infinity=False)


def _stage_times(draw, n):
    return np.array([draw(durations) for _ in range(n)])


@st.composite
def schedules(draw, names=SCHEDULE_NAMES):
    """A built schedule of any family (pp 1-6, 1-12 microbatches, vpp 2-3 for interleaved), or rejected
    when its builder refuses the shape."""
    name = draw(st.sampled_from(names))
    pp = draw(st.integers(1, 6))
    m = draw(st.integers(1, 12))
    vpp = draw(st.integers(2, 3)) if name == "interleaved" else 1
    try:
        return build(name, pp=pp, microbatches=m, vpp=vpp)
    except InputError:
        assume(False)


# ---- 3. bubble fraction vs the number of microbatches --------------------------------------------------
@settings(max_examples=60 * SCALE, **SETTINGS)
@given(st.sampled_from(("1f1b", "gpipe")), st.integers(1, 8), st.integers(1, 16), st.integers(1, 16),
       durations, durations, st.floats(0.0, 2.0), st.floats(0.0, 0.5))
def test_bubble_fraction_does_not_rise_with_microbatches(name, pp, m1, m2, f, b, w, p2p):
    """Uniform stage times (F, B, W the same on every stage): m1 <= m2 microbatches =>
    bubble_fraction(m2) <= bubble_fraction(m1), for 1F1B without p2p delay and for GPipe with a uniform p2p
    delay d >= 0; without delay both equal the closed form (p - 1) / (m + p - 1).
    (Not for 1F1B with d > 0: its steady state alternates F and B across a boundary, a cycle of F + B' + d
    per microbatch on pp = 2 (schedules/one_f_one_b.py's closed form with p2p), so the idle fraction rises
    towards d / (F + B' + d) as m grows: e.g. F = B = 1, d = 0.5, m = 6 -> 7: 0.294 -> 0.300, correctly.)"""
    m1, m2 = sorted((m1, m2))
    d = p2p if name == "gpipe" else 0.0
    t1, t2 = (replay(build(name, pp=pp, microbatches=m), forward_s=f, backward_s=b, weight_s=w, p2p_s=d)
              for m in (m1, m2))
    assert t2.bubble_fraction <= t1.bubble_fraction + 1e-12
    t0 = replay(build(name, pp=pp, microbatches=m1), forward_s=f, backward_s=b, weight_s=w)
    assert t0.bubble_fraction == pytest.approx((pp - 1) / (m1 + pp - 1), abs=1e-12)


# ---- 4. busy time is conserved ---------------------------------------------------------------------------
@settings(max_examples=80 * SCALE, **SETTINGS)
@given(st.data(), schedules())
def test_replay_conserves_busy_time(data, sch):
    """For every schedule and random positive per-stage durations F_s, B_s, W_s and p2p delays:
    Σ_ranks busy_s = microbatches x Σ_stages (F_s + B_s + W_s) (every op runs once, for its full duration,
    on exactly one rank; p2p delays are not work), and each rank's busy time is the sum of its own ops."""
    S = sch.num_stages
    f, b, w = (_stage_times(data.draw, S) for _ in range(3))
    p2p = _stage_times(data.draw, max(S - 1, 0)) * 0.1
    t = replay(sch, forward_s=f, backward_s=b, weight_s=w, p2p_s=p2p if S > 1 else 0.0)
    expect = sch.num_microbatches * float(np.sum(f + b + w))
    assert sum(t.busy_s_per_rank) == pytest.approx(expect, rel=1e-9)
    assert len(t.busy_s_per_rank) == sch.num_ranks
    for busy, idle in zip(t.busy_s_per_rank, t.idle_s_per_rank):
        assert busy > 0 and idle >= -1e-9 * t.makespan_s
    assert sum(len(r) for r in sch.ranks) == len(t.end_s)


# ---- 5. makespan lower bounds ------------------------------------------------------------------------------
@settings(max_examples=80 * SCALE, **SETTINGS)
@given(st.data(), schedules())
def test_makespan_is_at_least_every_lower_bound(data, sch):
    """For every schedule and random per-stage durations and p2p delays:
    makespan >= max over ranks of busy time (a rank runs one op at a time), and
    makespan >= Σ_s F_s + Σ_s B_s (one microbatch's dependency chain: its forward through every stage,
    then its input-gradient backward back through every stage; W may run later and is left out);
    no op starts before 0 or before the end of its rank's previous op."""
    S = sch.num_stages
    f, b, w = (_stage_times(data.draw, S) for _ in range(3))
    p2p = _stage_times(data.draw, max(S - 1, 0)) * 0.1
    t = replay(sch, forward_s=f, backward_s=b, weight_s=w, p2p_s=p2p if S > 1 else 0.0)
    tol = 1e-9 * t.makespan_s
    assert t.makespan_s >= max(t.busy_s_per_rank) - tol
    assert t.makespan_s >= float(f.sum() + b.sum()) - tol
    assert (t.start_s >= 0).all()
    assert np.allclose(t.end_s - t.start_s, t.duration_s, rtol=1e-9, atol=1e-12)
    offs = sch.arrays.rank_offsets
    for r in range(sch.num_ranks):
        s, e = t.start_s[offs[r]:offs[r + 1]], t.end_s[offs[r]:offs[r + 1]]
        assert (s[1:] >= e[:-1] - tol).all()  # ops of one rank never overlap


@settings(max_examples=60 * SCALE, **SETTINGS)
@given(st.sampled_from(("1f1b", "gpipe")), st.integers(1, 8), st.integers(1, 16), durations, durations,
       st.floats(0.0, 2.0), st.floats(0.0, 0.5))
def test_flushed_pipeline_makespan_is_at_least_the_fill_drain_bound(name, pp, m, f, b, w, p2p):
    """1F1B / GPipe, uniform stages (F, B' = B + W per stage, B not split), uniform p2p delay d:
    makespan >= (m + p - 1)(F + B') + 2 (p - 1) d. (The last rank starts no earlier than (p-1)(F + d),
    then runs m (F + B') of work; its last op is a backward, which still has to cross p - 1 stages,
    (p-1)(B' + d).) With d = 0 the schedules reach it: makespan == (m + p - 1)(F + B')."""
    t = replay(build(name, pp=pp, microbatches=m), forward_s=f, backward_s=b, weight_s=w, p2p_s=p2p)
    bound = (m + pp - 1) * (f + b + w) + 2 * (pp - 1) * p2p
    assert t.makespan_s >= bound * (1 - 1e-12)
    t0 = replay(build(name, pp=pp, microbatches=m), forward_s=f, backward_s=b, weight_s=w)
    assert t0.makespan_s == pytest.approx((m + pp - 1) * (f + b + w), rel=1e-12)


@settings(max_examples=40 * SCALE, **SETTINGS)
@given(st.data(), schedules(), st.floats(0.01, 100.0))
def test_replay_scales_linearly_with_the_durations(data, sch, k):
    """Positive homogeneity of the max-plus recurrence: multiplying every duration and p2p delay by k > 0
    multiplies every start, end and the makespan by k and leaves the bubble fractions unchanged."""
    S = sch.num_stages
    f, b, w = (_stage_times(data.draw, S) for _ in range(3))
    p2p = _stage_times(data.draw, max(S - 1, 0)) * 0.1 if S > 1 else 0.0
    t1 = replay(sch, forward_s=f, backward_s=b, weight_s=w, p2p_s=p2p)
    tk = replay(sch, forward_s=k * f, backward_s=k * b, weight_s=k * w, p2p_s=k * p2p)
    assert tk.makespan_s == pytest.approx(k * t1.makespan_s, rel=1e-9)
    assert np.allclose(tk.end_s, k * t1.end_s, rtol=1e-9, atol=1e-12)
    assert tk.bubble_fraction == pytest.approx(t1.bubble_fraction, abs=1e-9)


# ---- 6. determinism ------------------------------------------------------------------------------------------
def _canon(d) -> str:
    return json.dumps(d, sort_keys=True, default=repr)


@settings(max_examples=25 * SCALE, **SETTINGS)
@given(cases(), cases())
def test_estimate_is_deterministic_and_independent_of_what_ran_before(a, b):
    """estimate(x) twice gives identical to_dict() (compared as canonical JSON, NaN included), and so does
    estimate(x) after estimate(y) of another layout/model: no state leaks between calls (schedule caches,
    shape tables)."""
    first = _canon(_estimate(*a).to_dict())
    assert _canon(_estimate(*a).to_dict()) == first
    _estimate(*b)
    assert _canon(_estimate(*a).to_dict()) == first


# ---- 7. the sweep equals estimate, row by row -------------------------------------------------------------
@dataclass
class _Scenario:
    model: ModelSpec
    training: Training
    hardware: object
    num_gpus: int
    sweep: dict


@functools.lru_cache(maxsize=None)
def _sweep(model_i: int, gpus: int, seq: int, batch: int, schedules: tuple, mbs: tuple, small_hbm: bool):
    hw = dataclasses.replace(H100, hbm_bytes=1.2e9) if small_hbm else H100  # 1.2 GB: many rows do not fit
    sc = _Scenario(MODELS[model_i], Training(seq_length=seq, global_batch_size=batch), hw, gpus, {})
    df = run_sweep(sc, SweepSpace(micro_batch_size=list(mbs), schedule=list(schedules), max_vpp=2),
                   time_infeasible=True)
    return sc, df


@settings(max_examples=20 * SCALE, **SETTINGS)
@given(st.data(), st.integers(0, len(MODELS) - 1), st.sampled_from((4, 8)), st.sampled_from((1024, 4096)),
       st.sampled_from((16, 32)), st.sampled_from((("1f1b",), ("1f1b", "interleaved"), ("1f1b", "zb-h1", "gpipe"))),
       st.sampled_from(((1,), (1, 2))), st.booleans())
def test_sweep_rows_equal_estimate_of_the_same_layout(data, model_i, gpus, seq, batch, schedules, mbs, small_hbm):
    """Every row of run_sweep (time_infeasible=True) equals estimate() of the layout it names: feasible
    identical, and step_s, peak_bytes, tokens_per_s, mfu, bubble_s, exposed_comm_s equal to rel 1e-9.
    Three random rows of each random small sweep are checked."""
    sc, df = _sweep(model_i, gpus, seq, batch, schedules, mbs, small_hbm)
    assume(len(df) > 0)
    for i in data.draw(st.lists(st.integers(0, len(df) - 1), min_size=1, max_size=3, unique=True)):
        r = df.iloc[i]
        split = tuple(int(x) for x in r.layers_per_stage.split(",")) if r.layers_per_stage else None
        lay = Layout(num_gpus=gpus, tp=int(r.tp), pp=int(r.pp), dp=int(r.dp), cp=int(r.cp), ep=int(r.ep),
                     etp=int(r.etp), vpp=int(r.vpp), micro_batch_size=int(r.micro_batch_size), zero=int(r.zero),
                     recompute=r.recompute, sequence_parallel=bool(r.sequence_parallel), schedule=r.schedule,
                     layers_per_stage=split)
        e = estimate(sc.model, sc.training, lay, sc.hardware)
        assert e.feasible == bool(r.feasible), r.label
        for attr in ("step_s", "peak_bytes", "tokens_per_s", "mfu", "bubble_s", "exposed_comm_s"):
            assert getattr(e, attr) == pytest.approx(float(r[attr]), rel=1e-9, abs=1e-15), (r.label, attr)


# ---- 8. the step's breakdown adds up ------------------------------------------------------------------------
@settings(max_examples=40 * SCALE, **SETTINGS)
@given(cases())
def test_step_breakdown_adds_up_and_no_part_is_negative(case):
    """step_s = compute_s + exposed_comm_s + bubble_s (rel 1e-9); compute_s > 0; exposed_comm_s >= 0 and
    equal to the sum of its per-group parts, each >= 0; bubble_s >= 0 (to rounding); 0 <= bubble_fraction
    < 1; with pp = 1 there is no bubble."""
    e = _estimate(*case)
    assert e.step_s == pytest.approx(e.compute_s + e.exposed_comm_s + e.bubble_s, rel=1e-9)
    assert e.compute_s > 0 and e.step_s > 0
    assert e.exposed_comm_s >= 0
    groups = e.exposed_comm_by_group_s
    assert all(v >= 0 for v in groups.values()), groups
    assert sum(groups.values()) == pytest.approx(e.exposed_comm_s, rel=1e-9, abs=1e-15)
    assert e.bubble_s >= -1e-12 * e.step_s
    assert 0 <= e.bubble_fraction < 1
    if case[2].pp == 1:
        assert e.bubble_s == pytest.approx(0.0, abs=1e-12 * e.step_s)


@settings(max_examples=30 * SCALE, **SETTINGS)
@given(cases())
def test_estimate_memory_equals_memory_breakdown(case):
    """The estimate's memory (the kernel's per-stage arrays) equals memory_breakdown() of the same layout
    with the replayed schedule's in-flight microbatches (what `parasim memory` passes) on every stage and
    consumer, rel 1e-9; peak_bytes is the worst stage's peak, and feasible is peak <= HBM."""
    model, training, layout = case
    e = _estimate(*case)
    mem = memory_breakdown(model, training, layout, H100,
                           inflight_per_stage=replayed_inflight_per_rank(layout, training.global_batch_size))
    assert len(e.memory.per_stage) == len(mem.per_stage) == layout.pp
    for a, b in zip(e.memory.per_stage, mem.per_stage):
        for k in ("params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "other_bytes", "peak_bytes"):
            assert getattr(a, k) == pytest.approx(getattr(b, k), rel=1e-9, abs=1e-6), (layout, a.stage, k)
    assert e.peak_bytes == pytest.approx(max(s.peak_bytes for s in mem.per_stage), rel=1e-9)
    assert e.feasible == mem.feasible == (mem.peak_bytes <= H100.hbm_bytes)


@settings(max_examples=80 * SCALE, **SETTINGS)
@given(st.sampled_from([n for n in SCHEDULE_NAMES if family(n).synchronous]), st.integers(1, 6), st.integers(1, 24),
       st.integers(2, 3))
def test_closed_form_inflight_equals_the_replayed_peak_where_documented_exact(name, pp, m, v):
    """memory/inflight.py's closed forms (the memory model's default in-flight microbatches per rank) equal
    the replayed order's peak (Timeline.peak_inflight_microbatches_per_rank / chunks per rank) wherever the
    module documents them exact: m >= p; interleaved: m a multiple of p; zb-v, dualpipe, dualpipev: m >= 2p."""
    fam = family(name)
    vpp = v if fam.takes_vpp else 1
    assume(m >= pp and (m % pp == 0 if name == "interleaved" else True))
    assume(m >= 2 * pp if name in ("zb-v", "dualpipe", "dualpipev") else True)
    try:
        sch = build(name, pp=pp, microbatches=m, vpp=vpp)
    except InputError:
        assume(False)
    peaks = np.asarray(replay(sch, forward_s=1.0, backward_s=1.0, weight_s=1.0).peak_inflight_microbatches_per_rank)
    closed = inflight_microbatches(name, pp=pp, num_microbatches=m, vpp=vpp)
    assert closed == pytest.approx(peaks / fam.chunks_per_rank(vpp), abs=1e-9), (name, pp, m, vpp)


# ---- 9. bad CLI values never produce a traceback --------------------------------------------------------------
GARBAGE = st.one_of(
    st.sampled_from(["-1", "0", "-0", "2", "3", "7", "64", str(2**20), str(2**20 + 1), str(2**24 + 1), str(2**31 + 1),
                     str(2**63), str(2**63 - 1), str(-(2**63)), str(10**100), "1e30", "1.5", "nan", "inf", "-inf",
                     "", " ", "abc", "0x10", "1_000", "٣", "8 ", "--tp", "None", "true"]),
    st.integers(-10**6, 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=6),
)
BASE = {"--gpus": "8", "--seq": "1024", "--global-batch": "32", "--micro-batch": "1", "--tp": "2", "--pp": "2"}


@settings(max_examples=60 * SCALE, **SETTINGS)
@given(st.sampled_from(("estimate", "memory")), st.dictionaries(st.sampled_from(tuple(BASE)), GARBAGE, min_size=1))
def test_garbage_cli_values_exit_0_or_2_never_a_traceback(command, bad):
    """`parasim estimate|memory` with any of --gpus, --seq, --global-batch, --micro-batch, --tp, --pp
    replaced by garbage (negative, zero, 2**63, 10**100, 1e30, nan, inf, text, unicode digits) ends with
    SystemExit(0) or SystemExit(2) (a one-line error on stderr); any other exception, exit code or a
    'Traceback' in the output fails."""
    argv = [command, "--model", "gpt2-124m", "--hardware", "dgx-h100"]
    for flag, value in {**BASE, **bad}.items():
        argv.append(f"{flag}={value}")  # '=' keeps values like '-1' or '--tp' from parsing as flags
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli_main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code
    assert code in (0, 2, None), (argv, code, err.getvalue())
    assert "Traceback" not in err.getvalue() + out.getvalue(), argv
    if code == 2:
        lines = err.getvalue().strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (argv, err.getvalue())


# ---- 10. throughput and MFU follow from the step ------------------------------------------------------------
@settings(max_examples=40 * SCALE, **SETTINGS)
@given(cases())
def test_tokens_per_second_times_step_is_the_tokens_of_a_step_and_mfu_is_a_fraction(case):
    """tokens_per_s x step_s = global_batch_size x seq_length (rel 1e-9), and for a layout that fits:
    0 < mfu <= hfu <= 1 (model FLOPs <= hardware FLOPs, which recomputation only adds to; no GPU beats
    its peak)."""
    model, training, layout = case
    e = _estimate(*case)
    assert e.tokens_per_s * e.step_s == pytest.approx(training.global_batch_size * training.seq_length, rel=1e-9)
    if e.feasible:
        assert 0 < e.mfu <= 1
        assert e.mfu <= e.hfu * (1 + 1e-12) and e.hfu <= 1


# ---- 11. faster hardware is never slower -----------------------------------------------------------------------
def _faster(flops_x, hbm_x, net_x):
    """dgx-h100 with every dense peak x flops_x, HBM bandwidth x hbm_x and NVLink/NIC bandwidths x net_x
    (its efficiency tables unchanged: they are fractions of these peaks)."""
    return dataclasses.replace(
        H100, name=f"dgx-h100-x{flops_x}-{hbm_x}-{net_x}",
        peak_flops_per_s={k: v * flops_x for k, v in H100.peak_flops_per_s.items()},
        hbm_bytes_per_s=H100.hbm_bytes_per_s * hbm_x, nvlink_bytes_per_s=H100.nvlink_bytes_per_s * net_x,
        nvlink_link_bytes_per_s=H100.nvlink_link_bytes_per_s * net_x, nic_bytes_per_s=H100.nic_bytes_per_s * net_x)


def _check_not_slower(case, flops_x, hbm_x, net_x):
    base = _estimate(*case)
    fast = _estimate(*case, hardware=_faster(flops_x, hbm_x, net_x))
    assert fast.step_s <= base.step_s * (1 + 1e-9), (case[2], base.to_dict()["time"], fast.to_dict()["time"])
    assert fast.compute_s <= base.compute_s * (1 + 1e-9)


FASTER = (st.floats(1.0, 4.0), st.floats(1.0, 4.0), st.floats(1.0, 4.0))
_TINY = DENSE[0]


@settings(max_examples=30 * SCALE, **SETTINGS)
@given(cases(), *FASTER)
@example((_TINY, Training(seq_length=512, global_batch_size=1), Layout(num_gpus=2, pp=2, schedule="zb-h1")),
         2.0, 1.0, 1.0)
@example((_TINY, Training(seq_length=1024, global_batch_size=1, optimizer="sgd-momentum"), Layout(num_gpus=2, cp=2)),
         1.0, 2.0, 1.0)
def test_faster_hardware_never_makes_the_step_slower(case, flops_x, hbm_x, net_x):
    """Scaling the dense peak FLOP/s (every dtype) by a >= 1, the HBM bandwidth by b >= 1 and the NVLink and
    NIC bandwidths by c >= 1 (efficiency tables unchanged: they are fractions of these peaks) never increases
    step_s or compute_s (rel 1e-9). The two pinned examples are the cases Hypothesis found when the launch
    bound charged the whole backward's host slack to B (a faster W lengthened B under zb-h1) and ring-CP p2p
    then surfaced: they pass since B and W are bounded by their own kernels (cost/compute.py launch_bound)."""
    _check_not_slower(case, flops_x, hbm_x, net_x)


@settings(max_examples=30 * SCALE, **SETTINGS)
@given(cases(), *FASTER)
@example((_TINY, Training(seq_length=512, global_batch_size=1), Layout(num_gpus=2, pp=2, schedule="zb-h1")),
         2.0, 1.0, 1.0)
@example((_TINY, Training(seq_length=1024, global_batch_size=1, optimizer="sgd-momentum"), Layout(num_gpus=2, cp=2)),
         1.0, 2.0, 1.0)
def test_faster_hardware_never_makes_the_step_slower_without_host_launch_cost(case, flops_x, hbm_x, net_x):
    """The invariant above where it must hold today: the same model, training and layout with a software
    stack whose host launch cost is 0 (no launch bound): faster peak, HBM, NVLink and NIC never increase
    step_s or compute_s — every schedule, CP included, and the two examples the full test fails on."""
    model, training, layout = case
    training = dataclasses.replace(training, stack=dataclasses.replace(training.stack, host_s_per_kernel=0.0))
    _check_not_slower((model, training, layout), flops_x, hbm_x, net_x)
