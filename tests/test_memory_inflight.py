"""In-flight micro-batches per stage: closed forms against published closed forms and against the
pipeline engine's replay of the actual op orders (simulator.pipeline.replay.inflight_profile)."""
import numpy as np
import pytest

from simulator.errors import InputError
from simulator.memory.inflight import inflight_microbatches, loss_inflight_microbatches


def test_1f1b_first_stage_holds_p_and_stage_i_p_minus_i():
    # Megatron schedules.py: p − i − 1 warm-up forwards + 1 (Korthikanti §4.2.3: p on the first stage)
    assert inflight_microbatches("1f1b", pp=4, num_microbatches=8).tolist() == [4, 3, 2, 1]
    assert inflight_microbatches("1f1b", pp=4, num_microbatches=2).tolist() == [2, 2, 2, 1]


def test_gpipe_holds_all_m():
    assert inflight_microbatches("gpipe", pp=4, num_microbatches=16).tolist() == [16] * 4


def test_interleaved_first_stage_is_megatron_factor():
    # Megatron theoretical_memory_usage.py: p · (1 + (p − 1)/(p·v)) on the first stage
    for p, v in ((4, 2), (8, 4), (16, 3)):
        got = float(inflight_microbatches("interleaved", pp=p, num_microbatches=4 * p, vpp=v)[0])
        assert got == pytest.approx(p * (1 + (p - 1) / (p * v)))


def test_zero_bubble_h2_and_dualpipe_closed_forms():
    assert float(inflight_microbatches("zb-h2", pp=8, num_microbatches=32)[0]) == 2 * 8 - 1  # ZB §2.2
    # DeepSeek-V3 Table 2: PP + 1 chunk micro-batches; a DualPipe rank holds two chunks
    assert float(inflight_microbatches("dualpipe", pp=8, num_microbatches=32)[0]) * 2 == 8 + 1


def test_vectorised_microbatch_counts_add_a_leading_axis():
    m = np.array([1, 2, 8, 64])
    got = inflight_microbatches("1f1b", pp=4, num_microbatches=m)
    assert got.shape == (4, 4)
    assert got[1].tolist() == [2, 2, 2, 1]
    assert loss_inflight_microbatches("gpipe", num_microbatches=m).tolist() == [1, 2, 8, 64]
    assert loss_inflight_microbatches("1f1b", num_microbatches=m).tolist() == [1, 1, 1, 1]


def test_unknown_schedule_is_bad_input():
    with pytest.raises(InputError, match="schedule"):
        inflight_microbatches("zigzag", pp=4, num_microbatches=8)


CASES = [("gpipe", 4, 8, 1), ("1f1b", 4, 8, 1), ("1f1b", 8, 16, 1), ("1f1b", 4, 3, 1), ("pipedream", 4, 8, 1),
         ("zb-h1", 4, 8, 1), ("zb-h1", 8, 4, 1), ("zb-h2", 4, 8, 1), ("zb-h2", 4, 6, 1), ("zb-h2", 6, 12, 1),
         ("interleaved", 4, 8, 2), ("interleaved", 8, 16, 2), ("interleaved", 4, 12, 3),
         ("zb-v", 4, 8, 1), ("zb-v", 8, 16, 1), ("dualpipe", 4, 8, 1), ("dualpipe", 8, 16, 1),
         ("dualpipev", 4, 8, 1), ("dualpipev", 6, 12, 1)]


@pytest.mark.parametrize("name, p, m, v", CASES)
def test_closed_forms_equal_the_replayed_schedule(name, p, m, v):
    schedules = pytest.importorskip("simulator.schedules")
    replay = pytest.importorskip("simulator.pipeline.replay")
    sch = schedules.build(name, pp=p, microbatches=m, vpp=v)
    chunks_per_rank = sch.num_stages / sch.num_ranks if name != "dualpipe" else 2
    replayed = replay.inflight_profile(sch) / chunks_per_rank  # chunk micro-batches -> rank units
    np.testing.assert_allclose(inflight_microbatches(name, pp=p, num_microbatches=m, vpp=v), replayed)
