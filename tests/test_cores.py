"""Process-level helpers (simulator/cores.py), checked against the kernel's own counters."""
import os
import subprocess
import sys

import pytest

_PROBE = r"""
import resource, sys
import numpy as np
if sys.argv[1] == "keep":
    from simulator.cores import keep_freed_memory
    assert keep_freed_memory()
def touch():  # arrays of 1, 2, 3 MiB written and freed, as a kernel call's temporaries
    for mib in (1, 2, 3):
        a = np.empty(mib << 17)
        a[:] = 1.0
        del a
touch()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    touch()  # the same sizes again: reused memory, or fresh pages from the OS
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode):
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def _glibc():
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (AttributeError, ValueError, OSError):
        return False


@pytest.mark.skipif(not _glibc(), reason="glibc only")
def test_keep_freed_memory_reuses_freed_arrays_instead_of_faulting_them_in_again():
    # 3 x 6 MiB = 4,608 pages of 4 KiB: by default glibc hands (some of) the freed arrays back to the
    # OS and the next ones fault their pages in again (measured 750-1,800 faults); kept, it reuses them.
    assert _faults("default") > 300
    assert _faults("keep") < 30


def test_a_sweep_gives_the_calling_thread_its_cores_back():
    from test_sweep import fake_evaluate_layouts, scenario
    from simulator.cores import core_ids
    from simulator.sweep import run_sweep

    if core_ids() is None or len(core_ids()) < 2:
        pytest.skip("needs an affinity mask of two cores or more")
    before = core_ids()
    run_sweep(scenario(), evaluator=fake_evaluate_layouts, chunk_size=97, workers=2)  # pins this thread meanwhile
    assert core_ids() == before


_HUGE_PROBE = r"""
import resource, sys
import numpy as np
from simulator.cores import huge_page_heap, keep_freed_memory
print(huge_page_heap())  # False: keep_freed_memory not set yet
assert keep_freed_memory()
print(huge_page_heap() if sys.argv[1] == "huge" else False)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
kept = [np.ones(1 << 16) for _ in range(64)]  # 64 arrays of 512 KiB: 8,192 pages of 4 KiB, 16 of 2 MiB
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _thp_enabled():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return "[never]" not in f.read()
    except OSError:
        return False


@pytest.mark.skipif(not (_glibc() and _thp_enabled()), reason="glibc with transparent huge pages")
def test_huge_page_heap_faults_a_fresh_array_in_by_2_mib_pages():
    def run(mode):
        out = subprocess.run([sys.executable, "-c", _HUGE_PROBE, mode], capture_output=True, text=True, check=True)
        return out.stdout.split()

    off_unset, off_set, faults_4k = run("default")
    on_unset, on_set, faults_huge = run("huge")
    assert (off_unset, on_unset, on_set) == ("False", "False", "True")
    # (arrays under 4 MiB: numpy asks for huge pages only on bigger ones, and a kernel call's are mostly smaller)
    assert int(faults_4k) > 4000  # ~8,192 on 4 KiB pages
    assert int(faults_huge) < int(faults_4k) / 8  # ~16 on 2 MiB pages
