"""The CPU time other processes have used, for the benchmarks' CPU a message."""

from __future__ import annotations

import time

CPUCLOCK_SCHED = 2  # the kernel's process CPU clock that counts every run of its threads


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used so far, all its threads, ended ones
    included, to the nanosecond: its CPU-time clock (``clock_getcpuclockid``'s id for a
    process). ``/proc/<pid>/stat`` counts in clock ticks (10 ms here), so a short measure
    of a process doing a few ms of work read 0 or a tick. ``OSError`` once it is gone."""
    return time.clock_gettime((~pid << 3) | CPUCLOCK_SCHED)
