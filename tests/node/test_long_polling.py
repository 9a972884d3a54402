"""The one long-poll loop (``node.long_polling.long_poll``) and its wait budget."""

from __future__ import annotations

import asyncio
import contextlib
from types import SimpleNamespace

from node.long_polling import (
    DEADLINE_MARGIN_S,
    LONG_POLLING_MAX_S,
    long_poll,
    poll_budget_s,
)


def deadline_in(seconds: float | None) -> SimpleNamespace:
    return SimpleNamespace(time_remaining=lambda: seconds)


def test_the_budget_is_the_request_bounded_by_the_maximum_and_the_deadline():
    assert poll_budget_s(5.0, None) == 5.0
    assert poll_budget_s(-1.0, None) == 0.0
    assert poll_budget_s(LONG_POLLING_MAX_S + 1, None) == LONG_POLLING_MAX_S
    assert poll_budget_s(5.0, deadline_in(None)) == 5.0
    assert poll_budget_s(5.0, deadline_in(2.0)) == 2.0 - DEADLINE_MARGIN_S
    assert poll_budget_s(5.0, deadline_in(0.1)) == 0.0


def test_an_answer_ends_the_poll_and_every_wake_up_tries_again():
    attempts, waits = [], []

    async def attempt():
        attempts.append(1)
        return "found" if len(attempts) == 3 else None

    async def wait(remaining_s: float) -> None:
        waits.append(remaining_s)  # woken at once, as by a new message

    assert asyncio.run(long_poll(attempt, wait, 30.0)) == "found"
    assert len(attempts) == 3 and len(waits) == 2
    assert all(0 < w <= 30.0 for w in waits)


def test_no_budget_tries_once_and_answers_none():
    attempts = []

    async def attempt():
        attempts.append(1)

    async def wait(remaining_s: float) -> None:
        raise AssertionError("must not wait without a budget")

    assert asyncio.run(long_poll(attempt, wait, 0.0)) is None
    assert attempts == [1]


def test_the_waits_shrink_to_the_deadline():
    waits = []

    async def attempt():
        return None

    async def wait(remaining_s: float) -> None:
        waits.append(remaining_s)
        with contextlib.suppress(TimeoutError):  # nothing arrives: the wait times out
            await asyncio.wait_for(asyncio.Event().wait(), remaining_s)

    assert asyncio.run(long_poll(attempt, wait, 0.05)) is None
    assert waits and waits[0] <= 0.05
