"""Is this process short of CPU? A probe of the event loop's own wakeups.

A 50 ms sleep that ends 100 ms late means the CPU was taken from the loop (other
processes, or this one's other threads holding the GIL). The node and its routing host
each run the probe; either one's late wakeup marks the host starved for a while, and a
master whose lease lapses then refuses writes as overload, with retriable back-pressure,
rather than as a master cut off from routing (``ha/role.py``).

Thread-safety: runs on the loop it probes; ``mark`` is called there.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

WAKEUP_PROBE_S = 0.05
STARVED_LATE_S = 0.1


async def watch_wakeups(mark: Callable[[float], None], hold_s: float) -> None:
    """Call ``mark(until)`` with now + ``hold_s`` whenever this loop woke up late."""
    while True:
        before = time.monotonic()
        await asyncio.sleep(WAKEUP_PROBE_S)
        woke = time.monotonic()
        if woke - before - WAKEUP_PROBE_S > STARVED_LATE_S:
            mark(woke + hold_s)
