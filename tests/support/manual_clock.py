"""A clock the test moves by hand: ``now`` and a ``call_later`` whose timers fire inside
``advance``, each with ``now`` at its own due time (so code reading the clock in a
callback sees when it fired), in due order, timers armed by a callback included."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable


class ManualClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now
        self._due: list[tuple[float, int, ManualTimer]] = []
        self._seq = itertools.count()
        self.after_each: Callable[[], None] = lambda: None  # run after every timer fired

    def call_later(self, delay_s: float, callback: Callable, *args: object) -> ManualTimer:
        timer = ManualTimer(lambda: callback(*args))
        heapq.heappush(self._due, (self.now + delay_s, next(self._seq), timer))
        return timer

    @property
    def armed(self) -> int:
        """Timers neither fired nor cancelled."""
        return sum(not timer.cancelled for _, _, timer in self._due)

    def advance(self, seconds: float) -> None:
        end = self.now + seconds
        while self._due and self._due[0][0] <= end:
            due, _, timer = heapq.heappop(self._due)
            self.now = max(self.now, due)
            if not timer.cancelled:
                timer.cancelled = True  # fired: not armed any more
                timer.callback()
                self.after_each()
        self.now = end


class ManualTimer:
    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
