"""The liveness loop: a second asyncio event loop, on its own thread, for the node's side
of its routing channel (``node/routing_proxy.py``): the samples that prove this process
runs go out, routing's changes come in and are applied to the node's copy of the state.

Why a loop of its own: on the node's event loop a sample would wait behind every message
request queued before it, and the routing host (``node/routing_host.py``) withholds the
heartbeats of a node whose samples stop. Here nothing but the channel is scheduled, so a
sample waits only for the GIL (handed over every 5 ms switch interval) and the CPU.

What runs here touches the rest of the node only through thread-safe paths: the copy of
the routing state (its own lock), plain attribute reads of the store's offsets, and the
listeners' ``call_soon_threadsafe`` onto the node's loop.

Thread-safety: ``start``, ``call_soon`` and ``stop`` may be called from any thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger("ferrymq.liveness")
STOP_TIMEOUT_S = 5.0


class LivenessLoop:
    def __init__(self, name: str = "ferrymq-liveness") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, *jobs: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run each job (a coroutine function that loops until cancelled) on this loop."""

        def begin() -> None:
            for job in jobs:
                task = self.loop.create_task(job())
                task.add_done_callback(_log_end)
                self._tasks.append(task)

        self.loop.call_soon_threadsafe(begin)
        if not self._thread.is_alive():
            self._thread.start()

    def call_soon(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on this loop, from any thread."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(callback)

    def stop(self) -> None:
        """Cancel the jobs, wait for them to end, and close the loop (blocks the caller
        up to ``STOP_TIMEOUT_S``)."""
        if not self._thread.is_alive():
            return

        async def cancel_all() -> None:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self.loop.stop()

        self.loop.call_soon_threadsafe(lambda: self.loop.create_task(cancel_all()))
        self._thread.join(STOP_TIMEOUT_S)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()


def _log_end(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("liveness job %s ended", task.get_coro(), exc_info=task.exception())
