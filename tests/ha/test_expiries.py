"""``ha.expiries.Expiries``: every SYNC write's wait for its slaves under one timer. A wait
ends ``False`` at its own deadline, never earlier and never at a later one's; at most one
timer is armed, for the earliest deadline still waiting; waits done before their deadline
leave without being answered again."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ha.expiries import MIN_REARM_S, Expiries
from tests.support.manual_clock import ManualClock


@pytest.fixture
def loop():
    created = asyncio.new_event_loop()
    yield created
    created.close()


def test_each_wait_ends_false_at_its_own_deadline_under_one_timer(loop):
    timers = ManualClock()
    expiries = Expiries(lambda: timers.now, timers.call_later)
    late, early, acknowledged = (loop.create_future() for _ in range(3))
    expiries.add(late, 3.0)
    expiries.add(acknowledged, 2.0)
    expiries.add(early, 1.0)  # earlier than the armed timer's deadline: the timer moves
    assert timers.armed == 1
    acknowledged.set_result(True)

    timers.advance(0.999)
    assert not early.done() and not late.done()
    timers.advance(0.001)
    assert early.result() is False and not late.done()
    timers.advance(1.5)  # past the acknowledged wait's deadline: answered once, as it was
    assert acknowledged.result() is True and not late.done()
    timers.advance(0.5)
    assert late.result() is False
    assert timers.armed == 0 and len(expiries) == 0


def test_waits_done_before_their_deadline_leave_the_heap_as_new_ones_come(loop):
    timers = ManualClock()
    expiries = Expiries(lambda: timers.now, timers.call_later)
    for _ in range(1_000):
        future = loop.create_future()
        expiries.add(future, 3.0)
        future.set_result(True)  # acknowledged within the turn, as most SYNC writes are
    assert len(expiries) == 1  # only the newest: the rest left from the top
    assert timers.armed == 1
    timers.advance(3.0)
    assert len(expiries) == 0 and timers.armed == 0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.0, 5.0),  # when it is added, after the previous one
            st.floats(0.001, 5.0),  # its timeout
            st.one_of(st.none(), st.floats(0.0, 6.0)),  # acknowledged this long after
        ),
        max_size=30,
    )
)
def test_every_wait_ends_as_its_own_timer_would_have_ended_it(waits):
    """The specification: a timer per wait (``call_later(timeout, expire)``, cancelled
    when acknowledged). The shared timer answers each wait the same, at the same time
    (or ``MIN_REARM_S`` later, when the timer fired an instant before its deadline)."""
    loop = asyncio.new_event_loop()
    try:
        timers = ManualClock()
        expiries = Expiries(lambda: timers.now, timers.call_later)
        events: list[tuple[float, int, str, object]] = []  # (time, order, what, argument)
        expected: dict[int, tuple[bool, float]] = {}
        futures = []
        at = timers.now
        for index, (gap, timeout, acked_after) in enumerate(waits):
            at += gap
            futures.append(loop.create_future())
            events.append((at, 3 * index, "add", (index, timeout)))
            expires_at = at + timeout
            if acked_after is not None and at + acked_after < expires_at:
                events.append((at + acked_after, 3 * index + 1, "ack", index))
                expected[index] = (True, at + acked_after)
            else:
                expected[index] = (False, expires_at)
        ended: dict[int, float] = {}
        timers.after_each = lambda: note_ended(futures, ended, timers.now)
        for when, _, what, argument in sorted(events, key=lambda e: (e[0], e[1])):
            timers.advance(when - timers.now)
            note_ended(futures, ended, timers.now)
            if what == "add":
                index, timeout = argument
                expiries.add(futures[index], timeout)
            elif not futures[argument].done():
                futures[argument].set_result(True)
                ended[argument] = timers.now
        horizon = max((at + timeout for at, _, _, (_, timeout) in adds(events)), default=0.0)
        timers.advance(max(horizon + 1.0 - timers.now, 0.0))
        note_ended(futures, ended, timers.now)
        for index, (result, when) in expected.items():
            assert futures[index].result() is result, index
            if not result:  # at its deadline (a timer fired just before it is armed again)
                assert when - 1e-9 <= ended[index] <= when + MIN_REARM_S + 1e-9, index
        assert timers.armed == 0
    finally:
        loop.close()


def note_ended(futures: list, ended: dict[int, float], now: float) -> None:
    for index, future in enumerate(futures):
        if future.done() and index not in ended:
            ended[index] = now


def adds(events: list) -> list:
    return [event for event in events if event[2] == "add"]
