"""The on-disk cache of schedule shapes' replay tables (simulator/pipeline/cache.py): what comes back
equals what the builder and the C pass make, bad files are rebuilt, other code's tables are never read,
and a sweep reading the cache equals one building every shape."""
import numpy as np
import pandas as pd
import pytest

from simulator import native
from simulator.errors import InputError
from simulator.pipeline import cache, shape_tables
from simulator.schedules import build

pytestmark = pytest.mark.skipif(native.LIB is None, reason="the compiled loops are not built (nothing is cached)")

SHAPES = [("1f1b", 4, 8, 1), ("gpipe", 3, 5, 1), ("interleaved", 4, 8, 2), ("zb-h1", 4, 8, 1), ("zb-h2", 4, 8, 1),
          ("zb-v", 4, 8, 1), ("dualpipe", 4, 8, 1), ("dualpipev", 4, 8, 1)]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    from simulator import kernel_pipeline

    monkeypatch.setenv("PARASIM_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PARASIM_NO_CACHE", raising=False)
    kernel_pipeline.schedule_shape_tables.cache_clear()  # the in-process memo would hide the disk
    yield tmp_path
    kernel_pipeline.schedule_shape_tables.cache_clear()


def _fresh(s, p, m, c):
    return shape_tables(build(s, pp=p, microbatches=m, vpp=c if s == "interleaved" else 1))


def _assert_equal(a, b):
    assert (a.num_ops, a.num_stages, a.num_ranks) == (b.num_ops, b.num_stages, b.num_ranks)
    for x, y in zip(a.packed + a.busy + (a.inflight,), b.packed + b.busy + (b.inflight,)):
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s[0])
def test_stored_tables_come_back_equal_and_read_only(folder, shape):
    t = _fresh(*shape)
    assert cache.load(*shape) is None
    cache.store(*shape, t)
    back = cache.load(*shape)
    _assert_equal(back, t)
    assert back.compiled is None and not any(a.flags.writeable for a in back.packed + back.busy)


def test_the_kernel_reads_what_it_wrote_and_rebuilds_a_damaged_file(folder):
    from simulator import kernel_pipeline

    s, p, m, c = SHAPES[2]
    built = kernel_pipeline.schedule_shape_tables(s, p, m, c)
    (f,) = list(folder.glob("shapes-*/*.bin"))
    kernel_pipeline.schedule_shape_tables.cache_clear()
    _assert_equal(kernel_pipeline.schedule_shape_tables(s, p, m, c), built)
    for damage in (lambda b: b[:-3], lambda b: b + b"x", lambda b: b"junk" + b[4:], lambda b: b""):
        f.write_bytes(damage(cache._encode(built)))
        assert cache.load(s, p, m, c) is None  # not read: the size or the header do not fit
        kernel_pipeline.schedule_shape_tables.cache_clear()
        _assert_equal(kernel_pipeline.schedule_shape_tables(s, p, m, c), built)  # built again, and the file written whole
        _assert_equal(cache.load(s, p, m, c), built)


@pytest.mark.parametrize("shape", [s for s in SHAPES if s[0] in ("gpipe", "1f1b", "zb-h1", "zb-h2")], ids=lambda s: s[0])
def test_flushed_schedules_are_made_in_c_and_not_kept(folder, shape):
    _assert_equal(cache.tables(*shape), _fresh(*shape))
    assert not list(folder.glob("shapes-*/*.bin"))
    with pytest.raises(InputError, match="microbatches must be >= 1"):
        cache.tables(shape[0], 4, 0, 1)  # refused as the builder refuses it


def test_refused_shapes_still_raise_and_write_nothing(folder):
    from simulator import kernel_pipeline

    with pytest.raises(InputError):
        kernel_pipeline.schedule_shape_tables("dualpipe", 4, 3, 1)  # dualpipe needs an even m >= 2 pp
    assert not list(folder.glob("shapes-*/*.bin"))


def test_no_cache_writes_nothing(folder, monkeypatch):
    monkeypatch.setenv("PARASIM_NO_CACHE", "1")
    assert cache.cache_dir() is None
    cache.store(*SHAPES[0], _fresh(*SHAPES[0]))
    assert cache.load(*SHAPES[0]) is None and not list(folder.iterdir())


def test_other_code_gets_its_own_folder_and_old_folders_go(folder, tmp_path_factory, monkeypatch):
    code = tmp_path_factory.mktemp("code") / "builder.py"
    code.write_text("v1")
    monkeypatch.setattr(cache, "_code_files", lambda: [code])

    def code_changed():
        cache.code_key.cache_clear()
        cache._folder.cache_clear()

    code_changed()
    try:
        cache.store(*SHAPES[0], _fresh(*SHAPES[0]))
        first = cache.cache_dir()
        assert cache.load(*SHAPES[0]) is not None
        code.write_text("v2")  # the builder changed: its tables may differ
        code_changed()
        assert cache.cache_dir() != first and cache.load(*SHAPES[0]) is None
        cache.store(*SHAPES[0], _fresh(*SHAPES[0]))
        assert not first.exists() and [p.name for p in folder.iterdir()] == [cache.cache_dir().name]
    finally:
        monkeypatch.undo()
        code_changed()


def test_an_unwritable_cache_folder_only_costs_time(folder, monkeypatch):
    blocker = folder / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("PARASIM_CACHE_DIR", str(blocker))
    cache.store(*SHAPES[0], _fresh(*SHAPES[0]))  # no error
    assert cache.load(*SHAPES[0]) is None


def test_a_sweep_reading_the_cache_equals_one_building_every_shape(folder, monkeypatch):
    from simulator import kernel_pipeline
    from simulator.spec.scenario import load_scenario
    from simulator.sweep import SweepSpace, run_sweep

    sc = load_scenario(model="llama3-8b", hardware="dgx-h100", num_gpus=16, seq_length=4096, global_batch_size=64,
                       require_layout=False)
    space = SweepSpace(micro_batch_size=[1, 2], zero=[1], recompute=["selective"], max_vpp=2)
    monkeypatch.setenv("PARASIM_NO_CACHE", "1")
    built = run_sweep(sc, space, workers=1)
    monkeypatch.delenv("PARASIM_NO_CACHE")
    kernel_pipeline.schedule_shape_tables.cache_clear()
    run_sweep(sc, space, workers=1)  # fills the cache
    assert len(list(folder.glob("shapes-*/*.bin"))) >= 10
    kernel_pipeline.schedule_shape_tables.cache_clear()
    import simulator.schedules as schedules

    calls, real = [], schedules.build

    def recording(*a, **kw):  # the builder runs only for shapes it refuses (refusals are not cached)
        try:
            got = real(*a, **kw)
        except InputError:
            calls.append("refused")
            raise
        calls.append("built")
        return got

    monkeypatch.setattr(schedules, "build", recording)
    pd.testing.assert_frame_equal(run_sweep(sc, space, workers=1), built)  # every shape read back
    assert "built" not in calls
