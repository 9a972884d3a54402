"""Long polling: a read that finds nothing waits, up to a bound, for its queue to get new
messages (or, for POP, for an ack or dead-lettering to free a FIFO queue: ``notify``).

``long_poll`` is the one wait loop of PullMessage, ReceiveMessage and Data.Fetch, and
``poll_budget_s`` the one rule of how long they wait. The store calls ``notify`` from its
dispatcher (on the event loop for puts made there, on another thread during recovery or
catch-up); waiters are asyncio futures of the loop.
Bounded: waiters are removed when they wake or time out.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from store.dispatch_request import DispatchBatch

# What a consumer waits when it names no time (ReceiveMessage; the settings answer tells
# subscribers so), and the most any read waits.
LONG_POLLING_DEFAULT_S = 20.0
LONG_POLLING_MAX_S = 60.0
# Answer this long before the call's deadline: an answer after it is lost.
DEADLINE_MARGIN_S = 0.5

Answer = TypeVar("Answer")


class CallDeadline(Protocol):
    def time_remaining(self) -> float | None: ...


def poll_budget_s(requested_s: float, context: CallDeadline | None) -> float:
    """How long a read may wait: what it asks, at most ``LONG_POLLING_MAX_S``, and ending
    ``DEADLINE_MARGIN_S`` before the call's deadline when it has one."""
    wait_s = min(max(requested_s, 0.0), LONG_POLLING_MAX_S)
    remaining = context.time_remaining() if context is not None else None
    if remaining is not None:
        wait_s = max(0.0, min(wait_s, remaining - DEADLINE_MARGIN_S))
    return wait_s


async def long_poll(
    attempt: Callable[[], Awaitable[Answer | None]],
    wait: Callable[[float], Awaitable[None]],
    budget_s: float,
) -> Answer | None:
    """``attempt`` until it answers (anything but None), waiting with ``wait(seconds)``
    between attempts; None once ``budget_s`` has passed with no answer. ``attempt`` runs
    at least once, and once more after every wake-up, so a read never misses what woke it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget_s
    while True:
        answer = await attempt()
        if answer is not None:
            return answer
        remaining_s = deadline - loop.time()
        if remaining_s <= 0:
            return None
        await wait(remaining_s)


class QueueWaiters:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._waiters: dict[tuple[str, int], set[asyncio.Future[None]]] = {}

    def on_dispatch(self, batch: DispatchBatch) -> None:
        waiting = self._waiters
        if not waiting:
            return
        keys = waiting.keys() & batch.queues
        on_loop = threading.get_ident() == self._loop_thread
        for key in keys:
            if on_loop:
                self._wake(key)
            else:
                self._loop.call_soon_threadsafe(self._wake, key)

    def _wake(self, key: tuple[str, int]) -> None:
        for waiter in self._waiters.pop(key, ()):
            if not waiter.done():
                waiter.set_result(None)

    def wake_all(self) -> None:
        """Wake every waiter (more became visible: the confirmed offset advanced)."""
        for key in list(self._waiters):
            self._wake(key)

    def notify(self, topic: str, queue_id: int) -> None:
        """Wake the waiters of one queue; call on the loop."""
        self._wake((topic, queue_id))

    async def wait(self, topic: str, queue_id: int, timeout_s: float) -> None:
        """Return when the queue may have new messages, or after ``timeout_s``."""
        await self.wait_any(topic, (queue_id,), timeout_s)

    async def wait_any(self, topic: str, queue_ids, timeout_s: float) -> None:
        """Return when any of the queues may have new messages, or after ``timeout_s``."""
        waiter: asyncio.Future[None] = self._loop.create_future()
        registered = []
        for queue_id in queue_ids:
            waiters = self._waiters.setdefault((topic, queue_id), set())
            waiters.add(waiter)
            registered.append(((topic, queue_id), waiters))
        try:
            await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            pass
        finally:
            for key, waiters in registered:
                waiters.discard(waiter)
                # Only drop the set if it is still the registered one: a wake-up may have
                # replaced it with a new set that other waiters are in.
                if not waiters and self._waiters.get(key) is waiters:
                    del self._waiters[key]
