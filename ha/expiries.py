"""One timer for every SYNC write's wait for its slaves.

A write waits at most ``ack_timeout`` for the in-sync replicas (``ReplicationMaster.
wait_replicated``). A timer of its own per write cost ~3.2 µs on uvloop (``call_later``
and its ``cancel``) of a 4.x send's ~130 µs; a heap of deadlines with one timer armed for
the earliest costs a push, and a pop once the wait is over.

Invariants: a future added with ``timeout_s`` is answered ``False`` at the first timer
fire at or after its deadline unless it is done before; one timer at most is armed, for
the earliest deadline still waiting (a later ``add`` with an earlier deadline moves it).
Futures done before their deadline (acknowledged, cancelled, failed over) leave the heap
lazily, from its top, so it holds about as many entries as there are waits in flight.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable

# (delay in seconds, callback, *its arguments) -> a handle with ``cancel()``: the running
# loop's ``call_later`` by default, a test's clock in-process.
CallLater = Callable[..., asyncio.TimerHandle]
# A timer that fires a little before a deadline by the clock (uvloop's time is cached per
# turn, in milliseconds) is armed again at least this much later.
MIN_REARM_S = 0.001


class Expiries:
    def __init__(self, clock: Callable[[], float], call_later: CallLater | None = None) -> None:
        """``clock``: the deadlines' time (seconds); ``call_later``: the loop's, unless a
        test moves time itself."""
        self.clock = clock
        self._call_later = call_later
        self._heap: list[tuple[float, int, asyncio.Future[bool]]] = []
        self._seq = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, future: asyncio.Future[bool], timeout_s: float) -> None:
        """Answer ``future`` ``False`` once ``timeout_s`` have passed, unless done by then."""
        heap = self._heap
        while heap and heap[0][2].done():
            heapq.heappop(heap)
        deadline = self.clock() + timeout_s
        self._seq += 1
        heapq.heappush(heap, (deadline, self._seq, future))
        if self._timer is None or deadline < self._timer_at:
            self._arm()

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        deadline = self._heap[0][0]
        delay = max(deadline - self.clock(), MIN_REARM_S)
        call_later = self._call_later or asyncio.get_running_loop().call_later
        self._timer = call_later(delay, self._fire)
        self._timer_at = deadline

    def _fire(self) -> None:
        self._timer = None
        heap = self._heap
        now = self.clock()
        while heap and (heap[0][2].done() or heap[0][0] <= now):
            future = heapq.heappop(heap)[2]
            if not future.done():
                future.set_result(False)
        if heap:
            self._arm()
