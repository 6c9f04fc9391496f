"""Test-session settings and the shared-data lookup.

- The schedule-shape cache (simulator/pipeline/cache.py) goes to a folder of this session, so tests
  neither read a cache left by other runs nor fill the user's.
- `shared_data` (a fixture): the path of a measured-data file in the project's shared/data folder
  beside the checkout (published_runs.csv, collectives.csv, ...), else the repository's snapshot of it
  (validation/published_runs.csv, validation/data/), so the checks against measurements run on any clean
  clone. A file in neither skips the tests that need it; in CI (PARASIM_REQUIRE_SHARED=1, set by .ci/run)
  it fails them instead, so that checks against measurements cannot silently stop running."""
import os
import tempfile
from pathlib import Path

import pytest

os.environ["PARASIM_CACHE_DIR"] = tempfile.mkdtemp(prefix="parasim-test-cache-")
os.environ.pop("PARASIM_NO_CACHE", None)

REQUIRE_SHARED_ENV = "PARASIM_REQUIRE_SHARED"


REPO = Path(__file__).resolve().parent.parent
SNAPSHOTS = (REPO / "validation", REPO / "validation" / "data")  # the repository's copies (validation/data/README.md)


def find_shared(name: str, start: Path = Path(__file__).resolve().parent, snapshots=SNAPSHOTS) -> Path | None:
    """The first `<folder>/shared/data/<name>` that is a file, for `start` and each folder above it
    (the checkout sits beside shared/), else the repository's snapshot of it in `snapshots`, or None."""
    for base in (start, *start.parents):
        p = base / "shared" / "data" / name
        if p.is_file():
            return p
    for folder in snapshots:
        if (folder / name).is_file():
            return folder / name
    return None


def require_shared(name: str, start: Path = Path(__file__).resolve().parent) -> Path:
    """The path `find_shared` gives; when there is none, the calling test skips, or fails when the
    environment variable PARASIM_REQUIRE_SHARED is 1 (CI: the data must be there)."""
    p = find_shared(name, start)
    if p is not None:
        return p
    why = f"shared/data/{name} not found beside the checkout (searched from {start})"
    if os.environ.get(REQUIRE_SHARED_ENV) == "1":
        pytest.fail(f"{why}; {REQUIRE_SHARED_ENV}=1 requires it", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def shared_data():
    """`require_shared` (name[, start]) -> Path: a shared/data file, or skip/fail as it documents."""
    return require_shared


@pytest.fixture
def free_port():
    """A function returning a TCP port no other process holds now (for one-rank process groups in
    subprocesses; a fixed port clashed with a concurrent run)."""
    import socket

    def port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    return port
