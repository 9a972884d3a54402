"""Wake long-polling readers when their queue gets new messages (or, for POP, when an
ack or dead-lettering frees a FIFO queue: ``notify``).

The store calls ``notify`` from its dispatcher (on the event loop for puts made there, on
another thread during recovery or catch-up); waiters are asyncio futures of the loop.
Bounded: waiters are removed when they wake or time out.
"""

from __future__ import annotations

import asyncio
import threading

from store.dispatch_request import DispatchRequest


class QueueWaiters:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._waiters: dict[tuple[str, int], set[asyncio.Future[None]]] = {}

    def on_dispatch(self, requests: list[DispatchRequest]) -> None:
        waiting = self._waiters
        if not waiting:
            return
        keys = {(r.topic, r.queue_id) for r in requests}.intersection(waiting)
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
