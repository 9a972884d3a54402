"""Refusals logged without a flood: at most one line per ``LOG_EVERY_S`` for each key,
the next line counting what was left out, in bounded memory.

A key must not be the caller's free choice (a claimed access key is; a verified one, or
"bad credentials", is not), or a caller could make every refusal a new key.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

LOG_EVERY_S = 10.0
LOG_KEYS_MAX = 10_000
LOG_REASON_CHARS = 200  # a reason may quote a name the caller sent


@dataclass
class _Window:
    logged_at: float
    left_out: int = 0  # refusals not logged since


class RefusalLog:
    def __init__(self, logger: logging.Logger, clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.clock = clock
        self._windows: dict[tuple[str, str], _Window] = {}

    def refused(self, where: str, key: str, access_key: str, reason: str) -> None:
        """Log that ``where`` (a door's call) refused ``access_key`` for ``reason``,
        unless a refusal of the same (``where``, ``key``) was logged in the window."""
        now = self.clock()
        window = self._windows.get((where, key))
        if window is not None and now - window.logged_at < LOG_EVERY_S:
            window.left_out += 1
            return
        if window is None and len(self._windows) >= LOG_KEYS_MAX:
            self._windows.clear()  # calls x users: only a cluster with very many users
        self._windows[(where, key)] = _Window(now)
        left_out = window.left_out if window is not None else 0
        self.logger.warning(
            "refused %s from access key %r: %s%s",
            where,
            access_key[:64],
            reason[:LOG_REASON_CHARS],
            f" ({left_out} more like it in the last {LOG_EVERY_S:.0f} s not logged)"
            if left_out
            else "",
        )
