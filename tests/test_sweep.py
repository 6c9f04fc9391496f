"""Layout sweeps: enumeration against a brute-force product, ranking, resume, Dask, and the
vectorised path against `estimate` row by row (with the real kernel)."""
import itertools
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from simulator import sweep
from simulator.errors import InputError
from simulator.spec.layout import Layout
from simulator.spec.model import ModelSpec
from simulator.spec.training import Training
from simulator.spec.validate import validate
from simulator.report.bubble import bubble_vs_microbatches
from simulator.report.winner import explain_winner, pareto_mask, winner_comparison
from simulator.sweep import SweepSpace, enumerate_layouts, layout_labels, rank_results, run_sweep

DENSE = ModelSpec(name="tiny-dense", hidden_size=256, num_layers=8, num_heads=8, num_kv_heads=4,
                  ffn_hidden_size=512, vocab_size=1000)
MOE = ModelSpec(name="tiny-moe", hidden_size=256, num_layers=4, num_heads=8, num_kv_heads=8,
                ffn_hidden_size=512, vocab_size=1000, num_experts=4, experts_per_token=2, moe_ffn_hidden_size=256)


@dataclass
class FakeHardware:
    """Stand-in with the attributes the sweep reads (NVLink domain, node size, HBM)."""
    name: str = "fake"
    gpus_per_node: int = 4
    nvlink_domain_gpus: int = 4
    hbm_bytes: float = 80e9


@dataclass
class FakeScenario:
    model: ModelSpec
    training: Training
    hardware: FakeHardware
    num_gpus: int
    sweep: dict


def fake_evaluate_layouts(model, training, hardware, *, num_gpus, pp, vpp, schedule, zero, recompute,
                          sequence_parallel, tp, dp, cp, ep, micro_batch_size, layers_per_stage=None, etp=None):
    """A deterministic stand-in with the kernel's signature (numbers are arbitrary, not physics)."""
    tp, dp, cp, ep, mb = (np.asarray(x, dtype=float) for x in (tp, dp, cp, ep, micro_batch_size))
    m = training.global_batch_size / (dp * mb)
    compute = 100.0 / (tp * cp * pp * dp) * (1.0 + 0.1 * (recompute == "full"))
    bubble = compute * (pp - 1) / (m * vpp)
    comm = 0.01 * tp + 0.002 * zero + 0.001 * cp
    step = compute + bubble + comm
    peak = 50e9 / (tp * pp) * (4 - zero) / 4 * mb + 1e9 * (recompute == "none")
    feasible = peak <= hardware.hbm_bytes
    n = len(tp)
    return pd.DataFrame({
        "step_s": step, "compute_s": compute, "exposed_comm_s": comm, "bubble_s": bubble,
        "bubble_fraction": bubble / step, "tokens_per_s": training.tokens_per_step / step,
        "mfu": 0.5 * compute / step, "hfu": 0.55 * compute / step, "peak_bytes": peak,
        "params_bytes": 0.2 * peak, "grads_bytes": 0.2 * peak, "optimizer_bytes": 0.3 * peak,
        "activations_bytes": 0.25 * peak, "other_bytes": 0.05 * peak,
        "exposed_tp_s": np.full(n, 0.01) * tp, "exposed_dp_s": np.full(n, 0.002 * zero),
        "feasible": feasible, "reason": np.where(feasible, "", "peak over HBM"),
    })


# ---------------------------------------------------------------------------------------------
# enumeration
# ---------------------------------------------------------------------------------------------
def brute_force(model, training, N, hw, *, max_mbs=8, schedules=("1f1b", "interleaved")):
    """Every (layout fields) tuple from a plain product, kept if Layout + validate accept it and the
    documented sweep rules hold (tp within the NVLink domain, cp keeps >= 2048 tokens per rank,
    sp only with tp > 1, zero > 0 only with dp·cp > 1, pp = 1 rows carry 1f1b, vpp only interleaved,
    and for one-chunk schedules a pp not dividing L when ceil(L/pp)·pp − L <= 2; the experts' TP degree tp, and
    also 1 with ep > 1)."""
    L = model.num_layers
    div = [d for d in range(1, N + 1) if N % d == 0]
    E = model.num_experts or 1
    out = set()
    for tp, cp, pp, ep, vpp, mbs, zero, rec, sp, sched in itertools.product(
            div, div, div, [e for e in range(1, E + 1) if E % e == 0], range(1, model.num_layers + 1),
            range(1, max_mbs + 1), range(4), ("none", "selective", "full", "op"), (False, True), schedules):
        if N % (tp * cp * pp) or tp > hw.nvlink_domain_gpus or pp > model.num_layers:
            continue
        if cp > 1 and training.seq_length // cp < 2048:
            continue
        if training.global_batch_size % mbs:
            continue
        dp = N // (tp * cp * pp)
        split = None
        if L % pp and sched not in ("interleaved", "zb-v", "dualpipev") and vpp == 1:
            base = -(-L // pp)  # ceil
            if base * pp - L > 2:
                continue
            split = [base] * pp  # any split adding up to L passes validate; the column is checked elsewhere
            for i in range(base * pp - L):
                split[-1 - i * (pp - 1)] -= 1
        for etp in sorted({tp} | ({1} if ep > 1 else set())):
            try:
                lay = Layout(num_gpus=N, tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, etp=etp, vpp=vpp, micro_batch_size=mbs,
                             zero=zero, recompute=rec, sequence_parallel=sp, schedule=sched, layers_per_stage=split)
                validate(model, training, lay)
            except InputError:
                continue
            if (sp and tp == 1) or (zero > 0 and dp * cp == 1) or (pp == 1 and sched != "1f1b"):
                continue
            if sched == "interleaved" and vpp < 2:
                continue
            out.add((tp, cp, pp, dp, ep, vpp, mbs, zero, rec, sp, sched, etp))
    return out


def as_set(df):
    cols = ["tp", "cp", "pp", "dp", "ep", "vpp", "micro_batch_size", "zero", "recompute", "sequence_parallel",
            "schedule", "etp"]
    return {tuple(r) for r in df[cols].itertuples(index=False, name=None)}


def test_dense_enumeration_equals_brute_force_product_on_16_gpus():
    tr = Training(seq_length=4096, global_batch_size=32)
    df = enumerate_layouts(DENSE, tr, 16, SweepSpace(), hardware=FakeHardware())
    expected = brute_force(DENSE, tr, 16, FakeHardware())
    assert len(df) == len(as_set(df))  # no duplicates
    assert as_set(df) == expected
    assert len(expected) > 500  # the space is not trivially small


def test_uneven_layer_splits_match_brute_force_and_spare_the_end_stages():
    # 6 layers: pp = 4 gives ceil(6/4)·4 − 6 = 2 spare layers -> 1,2,2,1; pp = 8 > 6 layers is left out
    model = DENSE.with_(num_layers=6)
    tr = Training(seq_length=4096, global_batch_size=32)
    hw = FakeHardware()
    scheds = ("1f1b", "interleaved", "zb-v")
    df = enumerate_layouts(model, tr, 16, SweepSpace(schedule=scheds), hardware=hw)
    assert as_set(df) == brute_force(model, tr, 16, hw, schedules=scheds)
    uneven = df[df.layers_per_stage != ""]
    assert set(uneven.pp) == {4} and set(uneven.layers_per_stage) == {"1,2,2,1"}
    assert set(uneven.schedule) == {"1f1b"}  # interleaved and zb-v need pp·chunks | L
    assert (df[df.pp != 4].layers_per_stage == "").all()
    # the Llama 3 405B split (Dubey et al. 2024): 126 layers on 16 stages = 7 + 14 x 8 + 7
    from simulator.sweep import uneven_split
    assert uneven_split(126, 16) == (7,) + (8,) * 14 + (7,)
    assert uneven_split(7, 4) == (2, 2, 2, 1) and uneven_split(80, 32) is None
    off = enumerate_layouts(model, tr, 16, SweepSpace(schedule=scheds, uneven_layers=False), hardware=hw)
    assert (off.layers_per_stage == "").all() and 4 not in set(off.pp)


def test_moe_enumeration_carves_ep_out_of_dp_cp_like_brute_force():
    tr = Training(seq_length=4096, global_batch_size=16)
    hw = FakeHardware()
    df = enumerate_layouts(MOE, tr, 8, SweepSpace(), hardware=hw)
    assert as_set(df) == brute_force(MOE, tr, 8, hw)
    assert set(df["ep"]) == {1, 2, 4}
    # the expert grid: etp·ep divides tp·cp·dp; experts split like the attention (etp = tp: ep divides dp·cp) or,
    # with ep > 1, whole (etp 1: ep may span the TP ranks, with sequence parallelism)
    assert ((df["tp"] * df["dp"] * df["cp"]) % (df["ep"] * df["etp"]) == 0).all()
    split = df[df.etp == df.tp]
    assert ((split["dp"] * split["cp"]) % split["ep"] == 0).all()
    whole = df[(df.etp == 1) & (df.tp > 1)]
    assert len(whole) and (whole.ep > 1).all() and whole.sequence_parallel.all()


def test_enumeration_with_listed_schedules_matches_brute_force():
    tr = Training(seq_length=4096, global_batch_size=32)
    hw = FakeHardware()
    scheds = ("gpipe", "zb-h1", "zb-v")
    df = enumerate_layouts(DENSE, tr, 8, SweepSpace(schedule=scheds), hardware=hw)
    want = brute_force(DENSE, tr, 8, hw, schedules=scheds + ("1f1b",))
    want = {t for t in want if t[10] != "1f1b" or t[2] == 1}  # 1f1b not listed: only the pp = 1 rows
    assert as_set(df) == want
    assert set(df.loc[df.pp == 1, "schedule"]) == {"1f1b"}


def test_enumeration_order_is_grouped_by_scalar_fields():
    tr = Training(seq_length=4096, global_batch_size=32)
    df = enumerate_layouts(DENSE, tr, 16, SweepSpace(), hardware=FakeHardware())
    key = df[["pp", "schedule", "vpp", "sequence_parallel", "zero", "recompute"]].astype(str).agg("|".join, axis=1)
    runs = (key != key.shift()).sum()
    assert runs == key.nunique()  # each group is one contiguous run
    chunks = np.where(df["schedule"] == "interleaved", df["vpp"],
                      np.where(df["schedule"].isin(["zb-v", "dualpipev"]), 2, 1))
    stages = pd.Series(df["pp"] * chunks)
    assert stages.is_monotonic_increasing  # rows of a chunk have similar widths (the kernel pads to the widest)


def test_constraints_restrict_the_space():
    tr = Training(seq_length=4096, global_batch_size=32)
    hw = FakeHardware(gpus_per_node=2, nvlink_domain_gpus=4)
    full = enumerate_layouts(DENSE, tr, 16, SweepSpace(), hardware=hw)
    assert full["tp"].max() == 4  # auto: the NVLink domain
    node = enumerate_layouts(DENSE, tr, 16, SweepSpace(max_tp_within_node=True), hardware=hw)
    assert node["tp"].max() == 2
    s = SweepSpace(tp=(2,), pp=[1, 2], micro_batch_size="1,2", zero=[1], recompute=["full"],
                   sequence_parallel=[True], schedule=["1f1b"])
    df = enumerate_layouts(DENSE, tr, 16, s, hardware=hw)
    assert set(df["tp"]) == {2} and set(df["pp"]) == {1, 2} and set(df["micro_batch_size"]) == {1, 2}
    assert set(df["zero"]) == {1} and set(df["recompute"]) == {"full"} and df["sequence_parallel"].all()


@pytest.mark.parametrize("table, msg", [
    ({"max_tpp": 8}, "unknown key 'max_tpp' in [sweep]; did you mean 'max_tp'?"),
    ({"schedule": ["1f1b", "zigzag"]}, "schedule value 'zigzag'"),
    ({"tp": [2, "x"]}, "tp value 'x' is not an integer"),
    ({"zero": [4]}, "zero value 4 is out of range"),
    ({"min_micro_batch_size": 4, "max_micro_batch_size": 2}, "min_micro_batch_size(4) > max_micro_batch_size(2)"),
])
def test_bad_sweep_tables_raise_one_line_errors(table, msg):
    with pytest.raises(InputError) as e:
        SweepSpace.from_table(table)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_labels_equal_layout_label():
    tr = Training(seq_length=4096, global_batch_size=16)
    df = enumerate_layouts(MOE, tr, 8, SweepSpace(), hardware=FakeHardware())
    labels = layout_labels(df)
    for i in range(0, len(df), max(1, len(df) // 40)):
        r = df.iloc[i]
        lay = Layout(num_gpus=8, tp=int(r.tp), cp=int(r.cp), pp=int(r.pp), dp=int(r.dp), ep=int(r.ep),
                     etp=int(r.etp), vpp=int(r.vpp), schedule=r.schedule)
        assert labels[i] == lay.label


# ---------------------------------------------------------------------------------------------
# running, ranking, resume, dask
# ---------------------------------------------------------------------------------------------
def scenario(N=16, B=32):
    return FakeScenario(model=DENSE, training=Training(seq_length=4096, global_batch_size=B),
                        hardware=FakeHardware(hbm_bytes=20e9), num_gpus=N, sweep={})


def test_results_are_ranked_feasible_first_by_throughput_then_label():
    df = run_sweep(scenario(), evaluator=fake_evaluate_layouts)
    feas = df["feasible"].to_numpy()
    assert feas.any() and not feas.all()
    assert not (np.diff(feas.astype(int)) > 0).any()  # no feasible row after an infeasible one
    f = df[df.feasible]
    assert (np.diff(f["tokens_per_s"].to_numpy()) <= 0).all()
    ties = f[f.duplicated("tokens_per_s", keep=False)]
    for _, g in ties.groupby("tokens_per_s"):  # equally fast: more memory headroom first, then the label
        key = list(zip(g["peak_bytes"], g["label"]))
        assert key == sorted(key)
    assert list(df["rank"]) == list(range(1, len(df) + 1))
    for col in ("label", "tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size", "zero", "recompute",
                "sequence_parallel", "schedule", "feasible", "reason", "step_s", "tokens_per_s", "mfu",
                "peak_bytes", "memory_headroom_bytes"):
        assert col in df


def test_ranking_is_stable_across_runs_and_input_order():
    a = run_sweep(scenario(), evaluator=fake_evaluate_layouts)
    b = run_sweep(scenario(), evaluator=fake_evaluate_layouts)
    pd.testing.assert_frame_equal(a, b)
    shuffled = a.sample(frac=1.0, random_state=3).drop(columns="rank")
    pd.testing.assert_frame_equal(rank_results(shuffled), a)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_resume_after_interrupt_gives_exactly_the_uninterrupted_rows(tmp_path, suffix):
    if suffix == ".parquet":
        pytest.importorskip("pyarrow")
    ref_path = tmp_path / f"ref{suffix}"
    ref = run_sweep(scenario(), evaluator=fake_evaluate_layouts, out=ref_path, chunk_size=97)
    out = tmp_path / f"r{suffix}"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(scenario(), evaluator=fake_evaluate_layouts, out=out, chunk_size=97, stop_after_chunks=5)
    parts = tmp_path / f"r{suffix}.parts"
    assert len(list(parts.glob("chunk-*.pkl"))) == 5 and not out.exists()
    (parts / "chunk-000007.pkl.tmp-12345").write_bytes(b"half-written")  # a crash mid-write leaves this
    calls = []
    res = run_sweep(scenario(), evaluator=fake_evaluate_layouts, out=out, chunk_size=97, progress=calls.append)
    n_chunks = -(-len(ref) // 97)
    assert len(calls) == n_chunks - 5  # the 5 finished chunks were not evaluated again
    pd.testing.assert_frame_equal(res, ref)
    from simulator.sweep import read_results
    pd.testing.assert_frame_equal(read_results(out), read_results(ref_path))
    assert not parts.exists()


def test_resume_refuses_chunks_of_a_different_sweep(tmp_path):
    out = tmp_path / "r.csv"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(scenario(), evaluator=fake_evaluate_layouts, out=out, chunk_size=50, stop_after_chunks=1)
    with pytest.raises(InputError, match="different sweep"):
        run_sweep(scenario(B=64), evaluator=fake_evaluate_layouts, out=out, chunk_size=50)
    df = run_sweep(scenario(B=64), evaluator=fake_evaluate_layouts, out=out, chunk_size=50, resume=False)
    assert len(df) == len(pd.read_csv(out))


def test_dask_executor_gives_the_local_results():
    distributed = pytest.importorskip("distributed")
    local = run_sweep(scenario(), evaluator=fake_evaluate_layouts, chunk_size=200)
    with distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        dask = run_sweep(scenario(), evaluator=fake_evaluate_layouts, chunk_size=200, executor="dask",
                         scheduler=client)
    pd.testing.assert_frame_equal(dask, local)


def test_workers_run_on_a_local_dask_cluster_and_give_the_in_process_results():
    pytest.importorskip("distributed")
    local = run_sweep(scenario(), evaluator=fake_evaluate_layouts, chunk_size=97, workers=1)
    pooled = run_sweep(scenario(), evaluator=fake_evaluate_layouts, chunk_size=97, workers=2)
    pd.testing.assert_frame_equal(pooled, local)


def test_bad_run_arguments_raise():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(InputError, match="workers must be an integer >= 1"):
            run_sweep(scenario(), evaluator=fake_evaluate_layouts, workers=bad)
    with pytest.raises(InputError, match="executor"):
        run_sweep(scenario(), evaluator=fake_evaluate_layouts, executor="spark")
    with pytest.raises(InputError, match=r"\.csv or \.parquet"):
        run_sweep(scenario(), evaluator=fake_evaluate_layouts, out="r.xlsx")


# ---------------------------------------------------------------------------------------------
# reading results
# ---------------------------------------------------------------------------------------------
def test_pareto_mask_equals_pairwise_dominance():
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"tokens_per_s": rng.integers(0, 20, 300).astype(float),
                       "memory_headroom_bytes": rng.integers(0, 20, 300).astype(float),
                       "feasible": rng.random(300) < 0.8})
    got = pareto_mask(df)
    x, y, f = df["memory_headroom_bytes"].to_numpy(), df["tokens_per_s"].to_numpy(), df["feasible"].to_numpy()
    want = np.zeros(len(df), bool)
    for i in np.flatnonzero(f):
        dominated = f & (x >= x[i]) & (y >= y[i]) & ((x > x[i]) | (y > y[i]))
        want[i] = not dominated.any()
    # ties (identical points) count once; compare the distinct points on the front
    assert {(x[i], y[i]) for i in np.flatnonzero(got)} == {(x[i], y[i]) for i in np.flatnonzero(want)}
    assert not (got & ~f).any()


def test_explain_winner_names_winner_runner_up_and_largest_difference():
    df = run_sweep(scenario(), evaluator=fake_evaluate_layouts)
    t = winner_comparison(df)
    w = df.iloc[0]
    r = df[df.feasible & (df.label != w.label)].iloc[0]
    assert t.attrs["winner"]["label"] == w.label and t.attrs["runner_up"]["label"] == r.label
    diffs = {c: r[c] - w[c] for c in ("compute_s", "bubble_s", "exposed_comm_s", "exposed_tp_s", "exposed_dp_s")}
    biggest = max(diffs, key=lambda c: abs(diffs[c]))
    assert t.iloc[0]["component"] == biggest
    text = explain_winner(df)
    assert w.label in text and r.label in text and biggest in text


def test_explain_winner_without_feasible_rows_gives_the_reasons():
    df = run_sweep(scenario(), evaluator=fake_evaluate_layouts)
    df["feasible"] = False
    assert "No feasible layout" in explain_winner(df) and "peak over HBM" in explain_winner(df)


def test_bubble_table_from_the_engine_matches_the_1f1b_closed_form():
    # GPipe / 1F1B bubble over the total time: (p-1)/(m+p-1) (formulas.md §5.2), uniform stages, no p2p
    t = bubble_vs_microbatches(["1f1b", "interleaved"], pp=4, microbatches=[4, 8, 16], vpp=2,
                               forward_s=1.0, backward_s=2.0)
    one = t[t.schedule == "1f1b"].set_index("microbatches")["bubble_fraction"]
    for m in (4, 8, 16):
        assert one[m] == pytest.approx(3 / (m + 3), rel=1e-12)
    inter = t[t.schedule == "interleaved"].set_index("microbatches")["bubble_fraction"]
    assert (inter < one).all()  # interleaving shrinks the bubble


# ---------------------------------------------------------------------------------------------
# the real kernel
# ---------------------------------------------------------------------------------------------
def _real_kernel():
    from simulator import estimate

    return estimate


def _real_kernel_columns():
    from simulator.kernel import evaluate_layouts

    return evaluate_layouts


# 24: pp = 3 splits 32 layers unevenly (11, 11, 10); torch-fp32: the loss's working set on the last stage
@pytest.mark.parametrize("gpus,cross_entropy", [(16, "vocab-parallel"), (24, "vocab-parallel"), (16, "torch-fp32")])
def test_vectorised_sweep_equals_estimate_row_by_row(gpus, cross_entropy):
    est = _real_kernel()
    from simulator.spec.scenario import load_scenario

    sc = load_scenario(model="llama3-8b", hardware="dgx-h100", num_gpus=gpus, seq_length=4096,
                       global_batch_size=48 * gpus // 12, require_layout=False, cross_entropy=cross_entropy)
    space = SweepSpace(micro_batch_size=[1, 2], schedule=["1f1b", "interleaved", "zb-h1"], max_vpp=4)
    df = run_sweep(sc, space, time_infeasible=True)
    assert len(df) > 300
    rows = df.iloc[np.linspace(0, len(df) - 1, 60).astype(int)]
    bad = df[~df.feasible]
    assert len(bad) > 10
    rows = pd.concat([rows, bad.iloc[:: max(1, len(bad) // 10)]])  # and layouts that do not fit
    if gpus == 24:
        uneven = df[df.layers_per_stage != ""]
        assert set(uneven.layers_per_stage) == {"11,11,10"}
        rows = pd.concat([rows, uneven.iloc[:: max(1, len(uneven) // 10)]])
    # the default sweep works out the time of the layouts that fit only: the same rows, in the same
    # order among those that fit, with the same memory everywhere and no time where it does not fit
    pruned = run_sweep(sc, space)
    fit = df[df.feasible]
    pd.testing.assert_frame_equal(pruned[pruned.feasible], fit)
    keys = ["tp", "cp", "pp", "dp", "ep", "etp", "vpp", "micro_batch_size", "zero", "recompute", "sequence_parallel",
            "schedule", "layers_per_stage"]
    a, b = (x[~x.feasible].sort_values(keys).reset_index(drop=True) for x in (pruned, df))
    pd.testing.assert_frame_equal(a[keys + ["peak_bytes", "reason"]], b[keys + ["peak_bytes", "reason"]])
    assert a[["step_s", "tokens_per_s", "mfu", "bubble_fraction"]].isna().all().all()
    peaks = pruned[~pruned.feasible].peak_bytes.dropna().to_numpy()  # untimed: the closest to fitting first
    assert len(peaks) > 10 and (np.diff(peaks) >= 0).all()
    for _, r in rows.iterrows():
        split = tuple(int(x) for x in r.layers_per_stage.split(",")) if r.layers_per_stage else None
        lay = Layout(num_gpus=sc.num_gpus, tp=int(r.tp), pp=int(r.pp), dp=int(r.dp), cp=int(r.cp), ep=int(r.ep),
                     vpp=int(r.vpp), micro_batch_size=int(r.micro_batch_size), zero=int(r.zero),
                     recompute=r.recompute, sequence_parallel=bool(r.sequence_parallel), schedule=r.schedule,
                     layers_per_stage=split)
        d = est.estimate(sc.model, sc.training, lay, sc.hardware).to_dict()
        assert bool(d["feasible"]) == bool(r.feasible), r.label
        for key, col in (("time.step_s", "step_s"), ("time.bubble_s", "bubble_s"),
                         ("time.exposed_comm_s", "exposed_comm_s"), ("throughput.tokens_per_s", "tokens_per_s"),
                         ("throughput.mfu", "mfu"), ("memory.peak_bytes", "peak_bytes")):
            sec, leaf = key.split(".")
            assert d[sec][leaf] == pytest.approx(r[col], rel=1e-9, abs=1e-12), (r.label, col)


def picky_evaluate_layouts(model, training, hardware, **kw):
    """The fake kernel, refusing (like a schedule builder would) odd microbatch counts for zb-h1."""
    m = training.global_batch_size // (np.asarray(kw["dp"]) * np.asarray(kw["micro_batch_size"]))
    bad = (np.asarray(kw["schedule"]) == "zb-h1") & (m % 2 == 1)
    if bad.any():
        raise InputError(f"zb-h1 refuses m={int(m[bad][0])}")
    return fake_evaluate_layouts(model, training, hardware, **kw)


def test_rows_a_schedule_refuses_become_infeasible_rows_with_the_reason():
    # 8 GPUs, batch 12: zb-h1 needs pp > 1, so dp in {1, 2, 4} and m = 12 / dp in {12, 6, 3}
    sc = FakeScenario(model=DENSE, training=Training(seq_length=4096, global_batch_size=12),
                      hardware=FakeHardware(hbm_bytes=1e15), num_gpus=8, sweep={})
    space = SweepSpace(schedule=("1f1b", "zb-h1"), micro_batch_size=(1,))
    # (zb-h1 is not a Megatron-LM schedule: the default stack's rules would leave those rows out)
    df = run_sweep(sc, space, evaluator=picky_evaluate_layouts, allow_unsupported=True)
    ref = run_sweep(sc, space, evaluator=fake_evaluate_layouts, allow_unsupported=True)
    assert len(df) == len(ref)
    odd = (df.schedule == "zb-h1") & (df.num_microbatches % 2 == 1)
    assert odd.any() and not df.loc[odd, "feasible"].any()
    assert df.loc[odd, "reason"].str.startswith("zb-h1 refuses m=").all()
    ok = df[~odd].drop(columns="rank").reset_index(drop=True)
    want = ref[~((ref.schedule == "zb-h1") & (ref.num_microbatches % 2 == 1))].drop(columns="rank").reset_index(drop=True)
    pd.testing.assert_frame_equal(ok, want)


KILL_SCRIPT = """
import sys, time
sys.path.insert(0, {tests!r})
import test_sweep as t
from simulator.sweep import run_sweep

def slow(*a, **k):
    time.sleep(0.02)
    return t.fake_evaluate_layouts(*a, **k)

run_sweep(t.scenario(), evaluator=slow, out={out!r}, chunk_size=40)
"""


def test_resume_after_sigkill_of_a_running_sweep(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    out = tmp_path / "r.csv"
    parts = tmp_path / "r.csv.parts"
    script = KILL_SCRIPT.format(tests=str(Path(__file__).parent), out=str(out))
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while time.time() < deadline and len(list(parts.glob("chunk-*.pkl"))) < 3:
        time.sleep(0.02)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert not out.exists(), "the sweep finished before it was killed; make it slower"
    done = len(list(parts.glob("chunk-*.pkl")))
    assert done >= 3
    calls = []
    res = run_sweep(scenario(), evaluator=fake_evaluate_layouts, out=out, chunk_size=40, progress=calls.append)
    ref = run_sweep(scenario(), evaluator=fake_evaluate_layouts, chunk_size=40)
    pd.testing.assert_frame_equal(res, ref)
    assert len(calls) == -(-len(ref) // 40) - done


def test_specs_survive_pickling_for_dask_workers():
    import pickle

    from simulator.spec.hardware import load_hardware
    from simulator.sweep.run import _portable, _rebuild

    hw = load_hardware("dgx-h100")  # holds read-only mappings, which pickle refuses
    back = _rebuild(pickle.loads(pickle.dumps(_portable(hw))))
    assert back == hw


def test_dask_with_the_real_kernel_equals_local():
    _real_kernel()
    distributed = pytest.importorskip("distributed")
    from simulator.spec.scenario import load_scenario

    sc = load_scenario(model="llama3-8b", hardware="dgx-h100", num_gpus=8, seq_length=4096, global_batch_size=32,
                       require_layout=False)
    space = SweepSpace(micro_batch_size=[1], zero=[1], recompute=["selective"], max_vpp=2)
    local = run_sweep(sc, space, chunk_size=30, workers=1)
    with distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        dask = run_sweep(sc, space, chunk_size=30, executor="dask", scheduler=client)
    pd.testing.assert_frame_equal(dask, local)


def test_schedule_shapes_the_builder_refuses_never_reach_the_kernel():
    from simulator.schedules import build

    seen = []

    def recording(model, training, hardware, **kw):
        m = training.global_batch_size // (np.asarray(kw["dp"]) * np.asarray(kw["micro_batch_size"]))
        for s, p, v, mv in set(zip(kw["schedule"], kw["pp"].tolist(), kw["vpp"].tolist(), m.tolist())):
            build(s, pp=p, microbatches=mv, vpp=v if s == "interleaved" else 1)
            seen.append((s, mv))
        return fake_evaluate_layouts(model, training, hardware, **kw)

    # 8 GPUs, batch 8: dualpipe needs an even m >= 2·pp (formulas.md §5.3), so pp = 4 with m = 2 is refused
    sc = FakeScenario(model=DENSE, training=Training(seq_length=4096, global_batch_size=8),
                      hardware=FakeHardware(hbm_bytes=1e15), num_gpus=8, sweep={})
    # (dualpipe is no stack preset's schedule: allow_unsupported keeps the rows the rules would leave out)
    df = run_sweep(sc, SweepSpace(schedule=("dualpipe",), micro_batch_size=(1,)), evaluator=recording,
                   allow_unsupported=True)
    bad = df[(df.schedule == "dualpipe") & ((df.num_microbatches < 2 * df.pp) | (df.num_microbatches % 2 == 1))]
    assert len(bad) and not bad.feasible.any()
    assert bad.reason.str.contains("dualpipe").all()
    assert any(s == "dualpipe" for s, _ in seen)  # the acceptable shapes were evaluated
    good = df[(df.schedule == "dualpipe") & ~df.index.isin(bad.index)]
    assert good.feasible.all()


def test_a_chunk_whose_every_row_the_schedule_builder_refuses_comes_back_infeasible():
    # dualpipe needs an even m >= 2·pp: with m = 2 and pp = 4 every row is refused before the kernel
    from simulator.spec.scenario import load_scenario
    from simulator.sweep import SweepSpace, run_sweep

    sc = load_scenario("llama3-8b-8xh100", require_layout=False)
    space = SweepSpace(schedule=("dualpipe",), pp=(4,), tp=(1,), cp=(1,), micro_batch_size=(8,), zero=(0,),
                       recompute=("none",), sequence_parallel=(False,))
    df = run_sweep(sc, space, allow_unsupported=True)  # (dualpipe: no stack preset runs it)
    assert len(df) and not df["feasible"].any() and df["reason"].str.contains("dualpipe").all()


def test_csv_results_read_back_exactly(tmp_path):
    _real_kernel()
    from simulator.spec.scenario import load_scenario
    from simulator.sweep import read_results

    sc = load_scenario(model="llama3-8b", hardware="dgx-h100", num_gpus=8, seq_length=4096, global_batch_size=32,
                       require_layout=False)
    df = run_sweep(sc, SweepSpace(micro_batch_size=[1, 2], max_vpp=2), out=tmp_path / "r.csv")
    back = read_results(tmp_path / "r.csv")
    assert list(back.columns) == list(df.columns) and len(back) == len(df)
    for c in df.columns:
        a, b = df[c].to_numpy(), back[c].to_numpy()
        if a.dtype.kind == "f":  # every float back bit for bit, and still a float column (all-zero ones too)
            assert b.dtype.kind == "f" and np.array_equal(a, b, equal_nan=True), c
        else:
            assert (a.astype(str) == b.astype(str)).all(), c
    assert back.dtypes.to_dict() == df.dtypes.to_dict()  # text columns as object strings, as the sweep returns
    from simulator.sweep import write_results

    write_results(df, tmp_path / "r.parquet")
    pd.testing.assert_frame_equal(read_results(tmp_path / "r.parquet"), df)


def test_the_ranked_table_is_the_same_with_and_without_chunk_files(tmp_path):
    """Without `out` the chunks stay in memory; with it they are written, read back and put together:
    same table, to the bit, with rows the schedule builder refuses among them."""
    _real_kernel()
    from simulator.spec.scenario import load_scenario

    sc = load_scenario("llama3-8b-8xh100", require_layout=False)
    space = SweepSpace(schedule=("1f1b", "dualpipe", "interleaved"), max_vpp=4)
    direct = run_sweep(sc, space, chunk_size=97, allow_unsupported=True)  # (dualpipe: no stack preset runs it)
    chunked = run_sweep(sc, space, chunk_size=97, out=tmp_path / "r.parquet", allow_unsupported=True)
    assert (~direct["feasible"]).any() and direct["reason"].str.contains("dualpipe").any()
    assert list(direct.columns) == list(chunked.columns) and direct.equals(chunked)
    assert (direct.dtypes == chunked.dtypes).all() and isinstance(direct.index, pd.RangeIndex)


def test_a_layouts_results_do_not_depend_on_the_rows_evaluated_with_it():
    """The kernel pads a call's stage and rank axes to its widest row, and a sweep cuts its rows into
    calls by process and by cost, so a row's results must not depend on its company: every row of the
    128k-context space (pp 1-32, interleaved up to 32 virtual stages) evaluated in one call, and again
    in calls of 40 rows each (narrower padding), agree bit for bit. (Sums over the padded axes run
    left to right: numpy's pairwise sum regroups rows of 8 or more values, which moved the last bit of
    bubble_fraction between one-process and two-process sweeps.)"""
    import functools

    evaluate_layouts = _real_kernel_columns()
    from simulator.spec.scenario import load_scenario
    from simulator.sweep import evaluate_candidates

    sc = load_scenario("llama3-8b-128k-cp", require_layout=False)
    space = SweepSpace.from_table(sc.sweep).replace(schedule=("1f1b", "interleaved", "zb-h1", "dualpipev"),
                                                    recompute=("selective",), zero=(0, 3))
    cands = enumerate_layouts(sc.model, sc.training, sc.num_gpus, space, hardware=sc.hardware)
    kernel = functools.partial(evaluate_layouts, time_infeasible=True)

    def _evaluate_rows(cands, a, b):
        return evaluate_candidates(sc.model, sc.training, sc.hardware, sc.num_gpus, cands.iloc[a:b], evaluator=kernel)

    whole = _evaluate_rows(cands, 0, len(cands))
    stages = cands["pp"].to_numpy() * np.where(cands["schedule"] == "interleaved", cands["vpp"], 1)
    assert len(cands) > 300 and stages.max() >= 16 and whole["feasible"].any()
    cuts = list(range(0, len(cands), 40)) + [len(cands)]
    parts = pd.concat([_evaluate_rows(cands, a, b) for a, b in zip(cuts, cuts[1:])], ignore_index=True)
    for c in whole.columns:
        assert whole[c].equals(parts[c]), c
