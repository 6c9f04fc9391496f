"""Schedules as data: golden op orders, completeness, bad input, deadlock naming."""
import numpy as np
import pytest

from simulator.errors import InputError
from simulator.pipeline import DeadlockError, compile_schedule
from simulator.schedules import SCHEDULE_NAMES, Op, build, make_schedule


def test_1f1b_golden_rows():
    s = build("1f1b", pp=4, microbatches=6)
    # Megatron: warm-up p-r-1 forwards, then 1F1B, then drain
    assert s.notation(0) == "0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0B3 0B4 0B5"
    assert s.notation(3) == "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5"


def test_zb_h1_golden_rows():
    s = build("zb-h1", pp=3, microbatches=4)
    assert s.notation_rows() == [
        "0F0 0F1 0F2 0I0 0W0 0F3 0I1 0W1 0I2 0W2 0I3 0W3",
        "1F0 1F1 1I0 1F2 1I1 1W0 1F3 1I2 1W1 1I3 1W2 1W3",
        "2F0 2I0 2F1 2I1 2F2 2I2 2W0 2F3 2I3 2W1 2W2 2W3",
    ]


def test_interleaved_rank0_begins_as_documented():
    # torch-pipelining.md: p=4, v=2, m=8, rank 0 begins 0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 0F4 0F5
    s = build("interleaved", pp=4, microbatches=8, vpp=2)
    assert s.notation(0).startswith("0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 0F4 0F5")


def test_gpipe_and_zb_h2_golden_rows():
    assert build("gpipe", pp=2, microbatches=3).notation_rows() == ["0F0 0F1 0F2 0B0 0B1 0B2",
                                                                  "1F0 1F1 1F2 1B0 1B1 1B2"]
    # ZB-H2 (Qi et al. 2024 §2.2): rank r warms up with min(m, 2(p-r)-1) forwards, then B_j, W_(j-r), F
    assert build("zb-h2", pp=2, microbatches=4).notation_rows() == [
        "0F0 0F1 0F2 0I0 0W0 0F3 0I1 0W1 0I2 0W2 0I3 0W3",
        "1F0 1I0 1F1 1I1 1W0 1F2 1I2 1W1 1F3 1I3 1W2 1W3",
    ]


def test_compiled_flush_columns_equal_numpy_on_random_shapes():
    # the C loop that lays out flushed schedules (GPipe, 1F1B, ZB-H1/H2) against the numpy layout,
    # on random warm-ups (some past m), slot offsets (some past ±m) and tails
    from simulator import native
    from simulator.schedules.op import _flush_columns_numpy

    if native.LIB is None:
        pytest.skip("simulator/native/_native.c is not built")
    rng = np.random.default_rng(0)
    for _ in range(300):
        R, m, ns = int(rng.integers(1, 9)), int(rng.integers(1, 20)), int(rng.integers(0, 4))
        warm, tail = rng.integers(-2, m + 3, R), rng.integers(-2, m + 3, R)
        kinds, offsets = rng.integers(0, 3, ns), rng.integers(-m - 2, m + 3, (ns, R))
        fast = native.flush_columns(warm, kinds, offsets, tail, m)
        ref = _flush_columns_numpy(warm, kinds, offsets, tail, m)
        for a, b in zip(fast, ref):
            assert a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (6, 24)])
def test_every_schedule_is_complete_and_runs(name, p, m):
    vpp = 2 if name == "interleaved" else 1
    s = build(name, pp=p, microbatches=m, vpp=vpp)
    s.arrays  # completeness check: every (stage, microbatch) has F, B and W when split
    comp = compile_schedule(s)
    assert comp.num_ops == s.num_ops
    per = 3 if s.split_backward else 2
    assert s.num_ops >= s.num_stages * m * 2 and s.num_ops <= s.num_stages * m * per


@pytest.mark.parametrize("kw,msg", [
    (dict(name="dualpipe", pp=3, microbatches=8), "pp must be even"),
    (dict(name="dualpipe", pp=4, microbatches=6), "microbatches must be even and >= 2\\*pp"),
    (dict(name="dualpipev", pp=4, microbatches=7), ">= 2\\*pp"),
    (dict(name="1f1b", pp=0, microbatches=8), "pp must be >= 1"),
    (dict(name="gpipe", pp=4, microbatches=2.5), "microbatches must be an integer"),
    (dict(name="interleaved", pp=2, microbatches=7, vpp=2), "multiple of"),
    (dict(name="nope", pp=4, microbatches=8), "unknown schedule"),
])
def test_bad_shapes_raise_input_error_naming_the_value(kw, msg):
    with pytest.raises(InputError, match=msg):
        build(kw.pop("name"), **kw)


def test_deadlocked_order_names_the_stuck_ops():
    # rank 0 wants 0B0 before 0F1; rank 1 runs 1F1 first, which needs 0F1: a cycle
    r0 = [Op(kind="F", stage=0, microbatch=0, rank=0), Op(kind="B", stage=0, microbatch=0, rank=0, includes_weight=True),
          Op(kind="F", stage=0, microbatch=1, rank=0), Op(kind="B", stage=0, microbatch=1, rank=0, includes_weight=True)]
    r1 = [Op(kind="F", stage=1, microbatch=1, rank=1), Op(kind="F", stage=1, microbatch=0, rank=1),
          Op(kind="B", stage=1, microbatch=0, rank=1, includes_weight=True),
          Op(kind="B", stage=1, microbatch=1, rank=1, includes_weight=True)]
    s = make_schedule("bad", [r0, r1], num_stages=2, num_microbatches=2, chunks_per_rank=1)
    with pytest.raises(DeadlockError, match="0B0 waits for 1B0.*1F1 waits for 0F1"):
        compile_schedule(s)


def test_missing_op_is_rejected():
    r0 = [Op(kind="F", stage=0, microbatch=0, rank=0)]
    s = make_schedule("bad", [r0], num_stages=1, num_microbatches=1, chunks_per_rank=1)
    with pytest.raises(InputError, match="missing op 0B0"):
        s.arrays


def test_running_count_numbers_each_key_in_order():
    # the step-program microbatch counters, against a plain dictionary counter
    from simulator.schedules.op import running_count

    key = np.random.default_rng(3).integers(-2, 5, 500)
    seen, want = {}, []
    for k in key.tolist():
        want.append(seen.get(k, 0))
        seen[k] = want[-1] + 1
    assert running_count(key).tolist() == want
