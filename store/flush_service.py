"""Flushing the CommitLog and the derived files to disk (DESIGN §3.5).

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

import threading
import time
from collections.abc import Callable

from store.mapped_file import PAGE_SIZE


class GroupCommitService:
    def __init__(self, flush: Callable[[], int], flushed_offset: int) -> None:
        self._flush = flush
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._done = threading.Condition(self._lock)
        self._requested = flushed_offset
        self._flushed = flushed_offset
        self._stopping = False
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="group-commit", daemon=True)
        self._thread.start()

    def wait_flushed(self, offset: int, timeout_s: float) -> bool:
        """Block until bytes below ``offset`` are on disk; False after ``timeout_s``."""
        with self._lock:
            if self._flushed >= offset:
                return True
            if offset > self._requested:
                self._requested = offset
                self._work.notify()
            deadline = time.monotonic() + timeout_s
            while self._flushed < offset:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stopping or self._failure is not None:
                    return False
                self._done.wait(remaining)
            return True

    def _run(self) -> None:
        while True:
            with self._lock:
                while self._requested <= self._flushed and not self._stopping:
                    self._work.wait()
                if self._stopping and self._requested <= self._flushed:
                    return
            try:
                flushed = self._flush()
            except BaseException as error:  # a failed fsync must not be reported as OK
                with self._lock:
                    self._failure = error
                    self._done.notify_all()
                return
            with self._lock:
                self._flushed = max(self._flushed, flushed)
                self._done.notify_all()

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            self._work.notify()
            self._done.notify_all()
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
            if self._flush_commitlog is not None:
                self._flush_commitlog(False)
            now = time.monotonic()
            if now - last_derived >= self._derived_interval_s:
                last_derived = now
                self._flush_derived()
                self._housekeeping()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def enough_dirty(written: int, flushed: int, min_pages: int) -> bool:
    return written - flushed >= min_pages * PAGE_SIZE
