"""The liveness loop: a second asyncio event loop, on its own thread, for what proves this
node alive to the cluster and judges the others: its heartbeats to routing (a master's
lease rides on them, ``node/heartbeat.py``) and the controller (``routing/controller.py``,
acting only on routing's leader).

Why a loop of its own: on the node's event loop a heartbeat waited behind every message
request queued before it. A node saturated by its own clients (or starved by a busy host)
let its heartbeats go seconds late: masters fenced themselves with "could not renew its
lease" and one was marked down and replaced while its process was alive (issue 38's
benchmarks). Here nothing but liveness work is scheduled, so a heartbeat waits only for
the GIL (CPython hands it over every switch interval, 5 ms) and for the CPU.

What runs here touches the rest of the node only through thread-safe paths: the routing
replica (its own lock and pysyncobj's thread), plain attribute reads of the store's
offsets, and one attribute write (``ReplicationRole.lease_renewed_at``). Calls from the
node's loop come in through ``call_soon`` (``Heartbeat.renew_now``).

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
