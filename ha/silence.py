"""One timer per replication link for its peer's silence, instead of two per frame.

Each end of a link gives up on a peer that sends nothing for a while (the slave after
``IDLE_TIMEOUT_S``, the master after ``silent_slave_timeout_s``). Moving an
``asyncio.timeout`` deadline before and after every read armed and cancelled a loop timer
twice per frame: a few µs of a single SYNC send's path on each of the three nodes. Here a
read only notes when it began waiting (``waiting``) and that it ended (``heard``); one timer
checks now and then whether a read has waited too long, and re-arms for the rest.

Invariants: ``on_silent`` is called at most once, and only when a read has waited at least
``limit_s`` with nothing read meanwhile; time spent between reads (the slave's flush, the
master's work) never counts. After it, ``expired`` is true, so the link's code can say why
its read failed (``on_silent`` usually aborts the transport under the read).

Thread-safety: owned by the link's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ha.expiries import MIN_REARM_S  # a timer that fired early is armed at least this later


class SilenceWatch:
    def __init__(
        self,
        limit_s: float,
        on_silent: Callable[[], None],
        clock: Callable[[], float] | None = None,
        call_later: Callable[..., asyncio.TimerHandle] | None = None,
    ) -> None:
        """``clock`` and ``call_later``: the running loop's, unless a test moves time."""
        loop = asyncio.get_running_loop() if clock is None or call_later is None else None
        self.limit_s = limit_s
        self.expired = False
        self._on_silent = on_silent
        self._clock = clock or loop.time  # type: ignore[union-attr]
        self._call_later = call_later or loop.call_later  # type: ignore[union-attr]
        self._since = self._clock()
        self._waiting = False
        self._timer: asyncio.TimerHandle | None = self._call_later(limit_s, self._check)

    def waiting(self) -> None:
        """A read begins to wait for the peer."""
        self._since = self._clock()
        self._waiting = True

    def heard(self) -> None:
        """That read got what it waited for."""
        self._waiting = False

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        waited = self._clock() - self._since if self._waiting else 0.0
        if waited >= self.limit_s:
            self.expired = True
            self._on_silent()
            return
        self._timer = self._call_later(max(self.limit_s - waited, MIN_REARM_S), self._check)
