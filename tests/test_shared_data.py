"""The shared-data lookup of conftest.py: a missing shared/data file skips a test locally and fails it
when PARASIM_REQUIRE_SHARED=1 (CI), so checks against measurements cannot silently stop running."""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_a_missing_file_fails_when_shared_data_is_required(shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("PARASIM_REQUIRE_SHARED", "1")
    with pytest.raises(pytest.fail.Exception, match="no-such-file.csv.*PARASIM_REQUIRE_SHARED=1"):
        shared_data("no-such-file.csv", tmp_path)


@pytest.mark.parametrize("value", [None, "0", ""])
def test_a_missing_file_skips_otherwise(shared_data, tmp_path, monkeypatch, value):
    if value is None:
        monkeypatch.delenv("PARASIM_REQUIRE_SHARED", raising=False)
    else:
        monkeypatch.setenv("PARASIM_REQUIRE_SHARED", value)
    with pytest.raises(pytest.skip.Exception, match="no-such-file.csv"):
        shared_data("no-such-file.csv", tmp_path)


def test_a_file_beside_a_folder_above_is_found(shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("PARASIM_REQUIRE_SHARED", "1")
    (tmp_path / "shared" / "data").mkdir(parents=True)
    (tmp_path / "shared" / "data" / "runs.csv").write_text("a\n1\n")
    start = tmp_path / "checkout" / "tests"
    start.mkdir(parents=True)
    assert shared_data("runs.csv", start) == tmp_path / "shared" / "data" / "runs.csv"


def test_ci_requires_the_shared_data():
    assert "export PARASIM_REQUIRE_SHARED=1" in (ROOT / ".ci" / "run").read_text()


def test_the_repository_snapshot_stands_in_for_a_missing_shared_folder(tmp_path, monkeypatch):
    from conftest import find_shared

    monkeypatch.setenv("PARASIM_REQUIRE_SHARED", "1")
    for name in ("published_runs.csv", "collectives.csv", "kernel_benchmarks.csv"):
        assert find_shared(name, tmp_path) in (ROOT / "validation" / name, ROOT / "validation" / "data" / name)


def test_the_snapshot_is_the_shared_file_when_both_exist(shared_data):
    import filecmp

    for name in ("collectives.csv", "kernel_benchmarks.csv"):
        shared = shared_data(name)
        if shared.parent.parent.name == "shared":  # the shared folder is present: the copy must be identical
            assert filecmp.cmp(shared, ROOT / "validation" / "data" / name, shallow=False), name
