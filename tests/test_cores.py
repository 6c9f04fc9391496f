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
import sys
import numpy as np
from simulator.cores import huge_page_heap, keep_freed_memory
print(huge_page_heap())  # False: keep_freed_memory not set yet
assert keep_freed_memory()
print(huge_page_heap() if sys.argv[1] == "huge" else False)
kept = [np.ones(1 << 16) for _ in range(64)]  # 64 arrays of 512 KiB: below numpy's own huge-page size
at = [a.ctypes.data for a in kept]
advised = 0
vma = None
with open("/proc/self/smaps") as f:  # the mappings holding the arrays, and whether they carry the advice
    for line in f:
        head = line.split()
        if "-" in head[0] and len(head) >= 5:
            lo, hi = (int(x, 16) for x in head[0].split("-"))
            vma = (lo, hi)
        elif head[0] == "VmFlags:" and "hg" in head[1:]:
            advised += sum(vma[0] <= p < vma[1] for p in at)
print(advised)
"""


def _thp_enabled():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return "[never]" not in f.read()
    except OSError:
        return False


@pytest.mark.skipif(not (_glibc() and _thp_enabled()), reason="glibc with transparent huge pages")
def test_huge_page_heap_puts_the_next_arrays_in_memory_advised_for_huge_pages():
    # Whether the kernel then finds free 2 MiB pages depends on the machine's memory (measured: 8,183 faults
    # of 4 KiB for these arrays without the advice, 55 with it; one run under load got 6,652); that the
    # arrays land in advised memory does not.
    def run(mode):
        out = subprocess.run([sys.executable, "-c", _HUGE_PROBE, mode], capture_output=True, text=True, check=True)
        return out.stdout.split()

    assert run("default") == ["False", "False", "0"]
    unset, done, advised = run("huge")
    # (all but those carved from free heap below the advised range or from its first, partial 2 MiB: 62 measured)
    assert (unset, done) == ("False", "True") and 48 <= int(advised) <= 64
