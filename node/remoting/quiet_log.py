"""Log lines a remote peer can cause at will, without a flood.

``QuietLog``: a refused, dropped or timed-out connection, at most one line per kind per
interval across all connections. ``FailureLog``: handler exceptions, the first of each
(code, type) with its traceback, then a count once a minute.

Why: each such line is one connection's doing, and a client reconnecting in a loop could
otherwise write the node's log as fast as it connects. The first line of a kind is logged
at once (what an operator needs to see); then nothing of that kind for ``interval_s``;
the next line after that says how many were left out meanwhile. Kinds are few and fixed
by the code (never from the peer), so the table stays small.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

QUIET_INTERVAL_S = 10.0  # as the Raft transport's dropped-connection line
# A handler failure's traceback is logged once per (code, exception type); after that one
# line per interval says how many more there were.
FAILURE_LOG_INTERVAL_S = 60.0


class QuietLog:
    def __init__(
        self,
        logger: logging.Logger,
        interval_s: float = QUIET_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._clock = clock
        # kind -> (when its last line was logged, lines left out since)
        self._kinds: dict[str, tuple[float, int]] = {}

    def log(self, kind: str, level: int, message: str, *args: object) -> bool:
        """Log ``message % args`` unless a line of ``kind`` was logged in the last
        interval; whether it was logged."""
        now = self._clock()
        last = self._kinds.get(kind)
        if last is not None and now - last[0] < self._interval_s:
            self._kinds[kind] = (last[0], last[1] + 1)
            return False
        self._kinds[kind] = (now, 0)
        if last is not None and last[1]:
            message += " (%d more like it in the last %.0f s not logged)"
            args = (*args, last[1], now - last[0])
        self._logger.log(level, message, *args)
        return True


class FailureLog:
    """Handler exceptions, logged without a flood: the first of each (code, type) with its
    traceback, then a count once per ``FAILURE_LOG_INTERVAL_S``."""

    def __init__(
        self,
        logger: logging.Logger | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger or logging.getLogger("ferrymq.remoting")
        self._clock = clock
        self._seen: dict[tuple[int, type], tuple[float, int]] = {}

    def report(self, code: int, error: BaseException) -> None:
        key = (code, type(error))
        now = self._clock()
        seen = self._seen.get(key)
        if seen is None:
            self._seen[key] = (now, 0)
            self._logger.error("remoting request code %d failed", code, exc_info=error)
            return
        logged_at, unlogged = seen
        if now - logged_at >= FAILURE_LOG_INTERVAL_S:
            self._seen[key] = (now, 0)
            self._logger.error(
                "remoting request code %d failed again (%d more since): %s: %s",
                code,
                unlogged + 1,
                type(error).__name__,
                error,
            )
        else:
            self._seen[key] = (logged_at, unlogged + 1)
