"""What a node's own process sets for itself when it starts (``ferrymq node``): the
garbage collector's thresholds and the C allocator's. Tests that host a node in their own
process keep theirs."""

from __future__ import annotations

import ctypes
import gc
import logging

log = logging.getLogger("ferrymq.node")

# CPython collects its youngest generation every 700 new container objects. A node makes a
# few per message and keeps almost none, so it collected every few requests: gc_collect_main
# and its visits were 6-10 % of a SYNC master's samples in perf. Every 50,000 the same
# garbage goes for less: 3 % off a master's CPU per message in bench.cluster on a quiet
# machine, 5-10 % under load, for a few MB of memory.
GC_THRESHOLDS = (50_000, 20, 100)

# glibc's ``mallopt`` parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# A node's large buffers live for one request: a fetch answer (512 records of 1 KiB is
# 512 KiB), a produce request, a replication chunk. glibc returns freed memory above its
# trim threshold to the kernel at once (``brk`` down, or ``munmap`` of a block above its
# mmap threshold; both thresholds adapt, but only up to a few hundred KiB here), so the
# next buffer took every page again through a page fault that zeroes it: in perf, 53 % of
# a master's CPU reading a backlog was page faults, 31 % of them on fresh anonymous pages,
# and a cold backlog read ran at 145-168k msgs/s where it runs at 317-504k with these
# (docs/architecture.md, "A node's process"). The node keeps up to TRIM of freed memory
# for the next request, and every block below MMAP comes from that reused heap.
MALLOC_MMAP_THRESHOLD = 32 << 20  # glibc's largest (HEAP_MAX_SIZE / 2 on 64-bit)
MALLOC_TRIM_THRESHOLD = 128 << 20


def tune_garbage_collector() -> None:
    gc.set_threshold(*GC_THRESHOLDS)


def tune_allocator() -> bool:
    """Set the thresholds above when the C library is glibc; False (and a log line) when it
    is another (musl has no ``mallopt``) or refuses them: the node runs, only slower."""
    try:
        # The process's own symbols, as store/mapped_file.py takes fallocate: no search of
        # the library path (``find_library`` runs ldconfig) on the node's start.
        mallopt = ctypes.CDLL(None, use_errno=True).mallopt
    except (OSError, AttributeError):
        log.info("the C library has no mallopt: its allocator keeps its own thresholds")
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    done = mallopt(M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD) == 1
    done = mallopt(M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD) == 1 and done
    if not done:
        log.warning("mallopt refused the node's allocator thresholds: it keeps its own")
    return done


def tune_process() -> None:
    """Both, for a node's own process."""
    tune_garbage_collector()
    tune_allocator()
