"""The discrete-event core: exact timelines on hand-computed cases, resources, deadlock naming."""
import numpy as np
import pytest

from simulator.engine import Channel, DeadlockError, Simulation, Stream, Task
from simulator.errors import InputError


def test_in_order_stream_and_delayed_dependency_give_hand_computed_times():
    sim = Simulation([Stream(name="a"), Stream(name="b")])
    x = sim.add(Task(name="x", resource="a", duration_s=1.0))
    y = sim.add(Task(name="y", resource="a", duration_s=2.0))
    z = sim.add(Task(name="z", resource="b", duration_s=0.5, after=((x, 0.25),)))
    w = sim.add(Task(name="w", resource="b", duration_s=1.0, after=((y, 0.0),)))
    r = sim.run()
    # x 0-1; y 1-3; z starts at 1 + 0.25; w waits for y (3) -> 3-4
    assert r.start_s.tolist() == [0.0, 1.0, 1.25, 3.0]
    assert r.end_s.tolist() == [1.0, 3.0, 1.75, 4.0]
    assert r.makespan_s == 4.0
    del z, w


def test_fifo_stream_serves_ready_tasks_by_arrival():
    sim = Simulation([Stream(name="gate"), Stream(name="s", in_order=False)])
    g = sim.add(Task(name="g", resource="gate", duration_s=2.0))
    late = sim.add(Task(name="late", resource="s", duration_s=1.0, after=((g, 0.0),)))
    early = sim.add(Task(name="early", resource="s", duration_s=1.0))
    r = sim.run()
    assert r.start_s[early] == 0.0 and r.start_s[late] == 2.0


def test_fair_channel_shares_bandwidth_and_fifo_channel_serialises():
    # two 100-byte transfers at 100 B/s: fair sharing -> both finish at 2 s; fifo -> 1 s and 2 s
    for sharing, expect in (("fair", [2.0, 2.0]), ("fifo", [1.0, 2.0])):
        sim = Simulation([Channel(name="l", bandwidth_bytes_per_s=100.0, sharing=sharing)])
        a = sim.add(Task(name="a", resource="l", size_bytes=100.0))
        b = sim.add(Task(name="b", resource="l", size_bytes=100.0))
        r = sim.run()
        assert [r.end_s[a], r.end_s[b]] == expect


def test_fair_channel_with_staggered_transfers():
    # a: 100 B from t=0; b: 50 B from t=0.5 (after a 0.5 s gate). 0-0.5: a alone moves 50 B;
    # then both at 50 B/s: b's 50 B take 1 s (ends 1.5), a has 0 left at 1.5 too.
    sim = Simulation([Channel(name="l", bandwidth_bytes_per_s=100.0), Stream(name="g")])
    gate = sim.add(Task(name="gate", resource="g", duration_s=0.5))
    a = sim.add(Task(name="a", resource="l", size_bytes=100.0))
    b = sim.add(Task(name="b", resource="l", size_bytes=50.0, after=((gate, 0.0),)))
    r = sim.run()
    assert r.end_s[b] == pytest.approx(1.5) and r.end_s[a] == pytest.approx(1.5)


def test_deadlock_names_the_stuck_tasks():
    # r0 runs A then B; r1 runs C then D; A waits for D and C waits for B: nothing can start
    sim = Simulation([Stream(name="r0"), Stream(name="r1")])
    sim.add(Task(name="A", resource="r0", duration_s=1.0, after=((3, 0.0),)))
    sim.add(Task(name="B", resource="r0", duration_s=1.0))
    sim.add(Task(name="C", resource="r1", duration_s=1.0, after=((1, 0.0),)))
    sim.add(Task(name="D", resource="r1", duration_s=1.0))
    with pytest.raises(DeadlockError, match="A on r0 waits for D.*C on r1 waits for B"):
        sim.run()


def test_runs_are_deterministic_with_equal_time_ties():
    def build():
        sim = Simulation([Stream(name="s", in_order=False)])
        for i in range(20):
            sim.add(Task(name=f"t{i}", resource="s", duration_s=1.0))
        return sim.run()
    r1, r2 = build(), build()
    assert np.array_equal(r1.start_s, r2.start_s)
    assert r1.start_s.tolist() == [float(i) for i in range(20)]  # ties broken by insertion order


def test_bad_inputs_raise_input_error():
    with pytest.raises(InputError, match="bandwidth"):
        Channel(name="x", bandwidth_bytes_per_s=0.0)
    sim = Simulation([Stream(name="s")])
    with pytest.raises(InputError, match="unknown resource"):
        sim.add(Task(name="t", resource="nope"))
    with pytest.raises(InputError, match="delay"):
        sim.add(Task(name="t", resource="s", after=((0, -1.0),)))
    sim.add(Task(name="t", resource="s", after=((5, 0.0),)))
    with pytest.raises(InputError, match="unknown task id 5"):
        sim.run()
