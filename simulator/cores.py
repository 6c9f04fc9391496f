"""The CPU cores this process may use (its affinity mask on Linux; the CPU count elsewhere)."""
from __future__ import annotations

import os


def core_ids() -> list[int] | None:
    """The cores this process may run on (Linux), or None where the OS does not say."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return None


def available_cores() -> int:
    """How many cores this process may run on: the sweep starts one worker process per core, the
    replay one thread per core."""
    ids = core_ids()
    return len(ids) if ids is not None else (os.cpu_count() or 1)


def keep_freed_memory() -> bool:
    """glibc only: keep the memory this process frees for its next arrays, instead of handing it back
    to the OS and taking it again, one page fault per 4 KiB (mallopt M_MMAP_THRESHOLD 512 MiB,
    M_TRIM_THRESHOLD 1 GiB). The kernel's temporary arrays are mostly larger than glibc's default
    mmap threshold, so every one costs fresh page faults: ~30 % of a sweep's first-run faults and
    ~70 ms of CPU (measured on the 70B sweep); the peak resident memory stays the same. Set by the
    `parasim` command for its process and its sweep workers (a process-wide setting, so the library
    does not set it for a host process). Returns whether it was set (False off glibc)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
    kept = bool(mallopt(m_mmap_threshold, 512 << 20)) and bool(mallopt(m_trim_threshold, 1 << 30))
    _KEPT[0] = _KEPT[0] or kept
    return kept


def release_freed_memory() -> bool:
    """glibc only: hand the heap's free memory back to the OS (malloc_trim(0)) right before forking
    sweep workers. After a fork, every page is shared copy-on-write; free memory the sweeping process
    kept (`keep_freed_memory`) is where both processes carve their next arrays, so each of its pages
    would be copied on its first write, in each process. Handed back, those pages fault in as fresh
    zeroed memory instead, in 2 MiB pages where `huge_page_heap` marked them. Measured on the 405B
    benchmark sweep (2-core VM, three runs): each process's kernel call took ~3.7-4.2 k page faults
    instead of ~4.2-4.4 k in a first sweep, and ~4.8-5.6 k instead of ~5.4-11.4 k in a second sweep of
    the same process (its kept heap then larger); the rest are the copies of the pages holding the
    Python objects the kernel touches, which no allocator setting avoids. The call itself costs under
    1 ms. Returns whether it ran (False off glibc)."""
    import ctypes

    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim(0)
    return True


_KEPT = [False]  # whether keep_freed_memory took effect in this process (a process-wide malloc setting)
_MADV_HUGEPAGE, _HUGE = 14, 2 << 20  # linux/mman.h; x86-64 and arm64 transparent huge pages: 2 MiB


def huge_page_heap(nbytes: int = 256 << 20) -> bool:
    """Linux + glibc, once `keep_freed_memory` is set in this process: the next `nbytes` of its heap in
    transparent huge pages (2 MiB), so the arrays that land there fault in 512x fewer times. numpy asks
    for huge pages only on arrays of 4 MiB or more; most of a kernel call's arrays are smaller, and a
    sweep process's first call touched ~40-55 MB of fresh heap in ~10-14 k faults of 4 KiB at ~3 us each
    on the benchmark VM. With this, the processes of the 405B benchmark sweep took ~4.2 k faults each
    instead of ~13 k. How: malloc `nbytes` (glibc grows the heap; nothing is touched), madvise
    (MADV_HUGEPAGE) that range, free it (kept: the heap is not trimmed below 1 GiB), so later arrays
    are carved from it. Resident memory still grows only as pages are touched, in 2 MiB steps; where
    the kernel finds no free 2 MiB page (fragmented memory) it falls back to 4 KiB pages.
    The sweep calls it in each process right after forking its workers (or before evaluating in
    this process only): huge pages touched before a fork would be shared with the child.
    False (nothing done) without keep_freed_memory, without THP ('never' in
    /sys/kernel/mm/transparent_hugepage/enabled) or off glibc."""
    if not _KEPT[0]:
        return False
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            if "[never]" in f.read():
                return False
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        malloc, free, madvise = libc.malloc, libc.free, libc.madvise
    except (OSError, AttributeError):
        return False
    malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    free.argtypes = [ctypes.c_void_p]
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    p = malloc(int(nbytes))
    if not p:
        return False
    lo, hi = (p + _HUGE - 1) // _HUGE * _HUGE, (p + int(nbytes)) // _HUGE * _HUGE  # whole huge pages inside
    done = hi > lo and madvise(lo, hi - lo, _MADV_HUGEPAGE) == 0
    free(p)
    return done
