"""Waiting for a condition: poll it with a deadline, never sleep a fixed time (tests,
benchmarks and drills all wait this way)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def until(
    condition: Callable[[], T],
    timeout_s: float = 10.0,
    what: str = "the condition",
    interval_s: float = 0.05,
) -> T:
    """Poll ``condition`` until it returns a true value, and return that value;
    ``TimeoutError`` after ``timeout_s``, naming ``what`` and the last value seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}: {value!r}")
        time.sleep(interval_s)
