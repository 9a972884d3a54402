"""Long polling: a read that finds nothing waits, up to a bound, for its queue to get new
messages (or, for POP, for an ack or dead-lettering to free a FIFO queue: ``notify``).

``long_poll`` is the one wait loop of PullMessage, ReceiveMessage and Data.Fetch, and
``poll_budget_s`` the one rule of how long they wait. The store calls ``notify`` from its
dispatcher (on the event loop for puts made there, on another thread during recovery or
catch-up); waiters are asyncio futures of the loop, or listeners (``QueueWaiters.listen``:
a read waiting with no task, the fetch lane's).
Bounded: waiters are removed when they wake or time out, listeners when they are called
or their read ends.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Generic, Protocol, TypeVar

from store.dispatch_request import DispatchBatch

# What a consumer waits when it names no time (ReceiveMessage; the settings answer tells
# subscribers so), and the most any read waits.
LONG_POLLING_DEFAULT_S = 20.0
LONG_POLLING_MAX_S = 60.0
# Answer this long before the call's deadline: an answer after it is lost.
DEADLINE_MARGIN_S = 0.5

log = logging.getLogger(__name__)

Answer = TypeVar("Answer")
Key = TypeVar("Key")


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


class HeldUntilReadable(Generic[Key]):
    """Which keys (queues, lite topics) got records readers may read now, under a read
    cap (the SYNC master's confirmed offset, a SYNC_FLUSH fsync).

    Without a cap, records are readable once dispatched. Under one, a key that got records
    beyond it is held with the log end its last dispatch reached, and is readable at each
    move of the cap until the cap passes that end (its records may become readable
    piecemeal). Why not readable at dispatch: the read it wakes finds nothing it may return
    and waits again, on every send, while the slaves' acknowledgements are on their way.
    Why not every key at each move of the cap: only keys that got records can have more.
    Loop-only state."""

    def __init__(self, read_cap: Callable[[], int | None]) -> None:
        self._read_cap = read_cap
        self._held: dict[Key, int] = {}

    def dispatched(self, keys: Iterable[Key], end: int) -> list[Key]:
        """``keys`` got records ending at ``end``: the keys readers may read more of now."""
        cap = self._read_cap()
        readable = self._release(cap) if self._held else []
        if cap is None or end <= cap:
            readable.extend(keys)
            return readable
        held = self._held
        for key in keys:
            if held.get(key, -1) < end:
                held[key] = end
        return readable

    def cap_moved(self) -> list[Key]:
        """The read cap moved (or was lifted): the held keys it may have passed."""
        return self._release(self._read_cap()) if self._held else []

    def _release(self, cap: int | None) -> list[Key]:
        held = self._held
        readable = list(held)
        for key, end in list(held.items()):
            if cap is None or end <= cap:
                del held[key]
        return readable


class QueueWaiters:
    """The long polls of every queue, and when to wake them: when records a queue got
    become readable (``HeldUntilReadable``), at once on dispatch without a read cap, else
    when the cap passes them (``readable_moved``)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        read_cap: Callable[[], int | None] = lambda: None,
    ) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._readable: HeldUntilReadable[tuple[str, int]] = HeldUntilReadable(read_cap)
        self._waiters: dict[tuple[str, int], set[asyncio.Future[None]]] = {}
        self._listeners: dict[tuple[str, int], set[Callable[[], None]]] = {}

    def on_dispatch(self, batch: DispatchBatch) -> None:
        if threading.get_ident() == self._loop_thread:
            self._dispatched(batch.queues, batch.end)
        else:
            self._loop.call_soon_threadsafe(self._dispatched, batch.queues, batch.end)

    def _dispatched(self, queues: list[tuple[str, int]], end: int) -> None:
        readable = self._readable.dispatched(queues, end)
        if self._waiters or self._listeners:
            for key in (self._waiters.keys() | self._listeners.keys()) & set(readable):
                self._wake(key)

    def readable_moved(self) -> None:
        """The read cap moved (or was lifted): wake the queues holding records it may
        have passed."""
        for key in self._readable.cap_moved():
            self._wake(key)

    def _wake(self, key: tuple[str, int]) -> None:
        for waiter in self._waiters.pop(key, ()):
            if not waiter.done():
                waiter.set_result(None)
        for listener in self._listeners.pop(key, ()):
            try:
                listener()
            except Exception:  # one read's failure must not keep the others waiting
                log.exception("a read waiting on %s:%d failed as it woke", *key)

    def listen(self, topic: str, queue_id: int, listener: Callable[[], None]) -> None:
        """``listener()`` once, on the loop, when the queue may have new messages (when a
        waiter would wake), unless ``unlisten`` comes first; call on the loop."""
        self._listeners.setdefault((topic, queue_id), set()).add(listener)

    def unlisten(self, topic: str, queue_id: int, listener: Callable[[], None]) -> None:
        """Forget ``listener``; nothing if it was called or is gone."""
        listeners = self._listeners.get((topic, queue_id))
        if listeners is not None:
            listeners.discard(listener)
            if not listeners:
                del self._listeners[(topic, queue_id)]

    def notify(self, topic: str, queue_id: int) -> None:
        """Wake the waiters of one queue; call on the loop."""
        self._wake((topic, queue_id))

    async def wait(self, topic: str, queue_id: int, timeout_s: float) -> None:
        """Return when the queue may have new messages, or after ``timeout_s``."""
        await self.wait_any(topic, (queue_id,), timeout_s)

    async def wait_any(self, topic: str, queue_ids, timeout_s: float) -> None:
        """Return when any of the queues may have new messages, or after ``timeout_s``.
        The timeout is a timer that answers the waiter, not ``wait_for``: a wake-up then
        resumes the read in the next turn of the loop, not two turns later."""
        waiter: asyncio.Future[None] = self._loop.create_future()
        registered = []
        for queue_id in queue_ids:
            waiters = self._waiters.setdefault((topic, queue_id), set())
            waiters.add(waiter)
            registered.append(((topic, queue_id), waiters))
        timer = self._loop.call_later(timeout_s, _answer, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            for key, waiters in registered:
                waiters.discard(waiter)
                # Only drop the set if it is still the registered one: a wake-up may have
                # replaced it with a new set that other waiters are in.
                if not waiters and self._waiters.get(key) is waiters:
                    del self._waiters[key]


def _answer(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
