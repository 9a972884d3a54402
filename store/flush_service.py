"""Flushing the CommitLog and the derived files to disk (docs/architecture.md, "Files on disk").

``GroupCommitService`` serves SYNC_FLUSH: writers ask for "flushed up to my end offset" and
wait; one background thread forces everything written so far, so all writers that arrived
during an fsync share the next one (group commit).

``BackgroundFlusher`` serves ASYNC_FLUSH (CommitLog every ``flush_interval_ms`` once at
least ``flush_min_pages`` are dirty, fully every ``flush_full_interval_ms``) and, in both
modes, flushes consume queues and index files and then writes the checkpoint.

Thread-safety: each service owns one thread; ``wait_flushed`` may be called from any
number of threads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from store.mapped_file import PAGE_SIZE

FlushCallback = Callable[[bool], None]

log = logging.getLogger(__name__)


class GroupCommitService:
    """Group commit for SYNC_FLUSH.

    Writers register ``(end offset, callback)``; one thread forces everything written so
    far and calls back every writer it covered — ``True`` once on disk, ``False`` if the
    flush failed or the service stopped first. ``wait_flushed`` wraps that for threads;
    the asyncio node registers callbacks that resolve futures, so no thread waits.

    To make groups large, before each fsync the flusher waits for the *cohort* it released
    last time to come back, but never longer than ``max_wait_s`` after the first waiting
    request: a lone writer pays one fsync and no wait.
    """

    def __init__(
        self, flush: Callable[[], int], flushed_offset: int, max_wait_s: float = 0.002
    ) -> None:
        self._flush = flush
        self._max_wait_s = max_wait_s
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._flushed = flushed_offset
        self._waiters: list[tuple[int, FlushCallback]] = []
        self._cohort = 1
        self._first_request_at = 0.0
        self._stopping = False
        self._failed = False
        self.flush_count = 0
        self._thread = threading.Thread(target=self._run, name="group-commit", daemon=True)
        self._thread.start()

    def request(self, offset: int, callback: FlushCallback) -> None:
        """Call ``callback`` (from the flusher thread) once bytes below ``offset`` are on
        disk. Called at once, in this thread, when they already are."""
        with self._lock:
            if self._flushed >= offset or self._failed or self._stopping:
                verdict = self._flushed >= offset
            else:
                if not self._waiters:
                    self._first_request_at = time.monotonic()
                    self._work.notify()
                self._waiters.append((offset, callback))
                if len(self._waiters) >= self._cohort:
                    self._work.notify()
                return
        callback(verdict)

    def wait_flushed(self, offset: int, timeout_s: float) -> bool:
        """Block until bytes below ``offset`` are on disk; False after ``timeout_s`` or when
        flushing failed — a write is never confirmed that is not on disk."""
        gate = threading.Lock()
        gate.acquire()
        verdicts: list[bool] = []

        def release(on_disk: bool) -> None:
            verdicts.append(on_disk)
            gate.release()

        self.request(offset, release)
        if not gate.acquire(timeout=timeout_s):
            return False
        return verdicts[0]

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._waiters and not self._stopping:
                    self._work.wait()
                if self._stopping and not self._waiters:
                    return
                deadline = self._first_request_at + self._max_wait_s
                while len(self._waiters) < self._cohort and not self._stopping:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._work.wait(remaining)
            try:
                flushed = self._flush()
                on_disk = True
            except BaseException:  # a failed fsync must never be reported as OK
                flushed, on_disk = self._flushed, False
            with self._lock:
                self.flush_count += 1
                self._flushed = max(self._flushed, flushed)
                if not on_disk:
                    self._failed = True
                    ready, self._waiters = self._waiters, []
                else:
                    ready = [w for w in self._waiters if w[0] <= self._flushed]
                    self._waiters = [w for w in self._waiters if w[0] > self._flushed]
                self._cohort = max(1, len(ready))
                if self._waiters:
                    self._first_request_at = time.monotonic()
            for _, callback in ready:
                callback(on_disk)
            if not on_disk:
                return

    def stop(self) -> None:
        """Flush what waiters asked for, release them, and end the thread."""
        with self._lock:
            self._stopping = True
            self._work.notify()
        self._thread.join()


class BackgroundFlusher:
    """Periodic flushing; ``tick`` does one round and is what tests call directly."""

    def __init__(
        self,
        *,
        flush_commitlog: Callable[[bool], None] | None,
        flush_derived: Callable[[], None],
        housekeeping: Callable[[], None],
        interval_ms: int,
        derived_interval_ms: int,
    ) -> None:
        self._flush_commitlog = flush_commitlog
        self._flush_derived = flush_derived
        self._housekeeping = housekeeping
        self._interval_s = interval_ms / 1000
        self._derived_interval_s = derived_interval_ms / 1000
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flusher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last_derived = time.monotonic()
        while not self._stop.wait(min(self._interval_s, self._derived_interval_s)):
            # A failed round (ENOSPC writing the checkpoint, say) is retried at the next
            # one. Uncaught, it ended this thread for good: no more ASYNC_FLUSH flushes,
            # checkpoints or retention — the very thing that frees a full disk.
            try:
                if self._flush_commitlog is not None:
                    self._flush_commitlog(False)
                now = time.monotonic()
                if now - last_derived >= self._derived_interval_s:
                    last_derived = now
                    self._flush_derived()
                    self._housekeeping()
            except Exception:
                log.exception("background flush failed; retrying at the next interval")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def enough_dirty(written: int, flushed: int, min_pages: int) -> bool:
    return written - flushed >= min_pages * PAGE_SIZE
