"""``ha.silence.SilenceWatch``: a link's silence under one timer. It calls ``on_silent``
once, when a read has waited ``limit_s`` with nothing read meanwhile, never for time spent
between reads, and arms one timer at a time."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ha.silence import SilenceWatch
from tests.support.manual_clock import ManualClock

LIMIT_S = 5.0


def watch(clock: ManualClock, fired: list[float]) -> SilenceWatch:
    return SilenceWatch(
        LIMIT_S, lambda: fired.append(clock.now), lambda: clock.now, clock.call_later
    )


def test_a_read_that_waits_the_limit_ends_the_link_once():
    clock, fired = ManualClock(), []
    silence = watch(clock, fired)
    clock.advance(2.0)
    silence.waiting()
    clock.advance(LIMIT_S - 0.001)
    assert fired == [] and not silence.expired
    clock.advance(0.001)
    assert fired == [102.0 + LIMIT_S] and silence.expired
    clock.advance(60.0)
    assert len(fired) == 1 and clock.armed == 0


def test_time_between_reads_never_counts():
    """The slave's flush or the master's work between two reads may take longer than the
    limit: the peer was not silent, this end was busy."""
    clock, fired = ManualClock(), []
    silence = watch(clock, fired)
    silence.waiting()
    clock.advance(1.0)
    silence.heard()
    clock.advance(LIMIT_S * 3)
    assert fired == [] and clock.armed == 1
    silence.waiting()  # a fresh wait counts from here
    clock.advance(LIMIT_S - 0.5)
    assert fired == []
    silence.close()
    clock.advance(LIMIT_S)
    assert fired == [] and clock.armed == 0


STEPS = st.lists(
    st.one_of(
        st.just(("waiting",)),
        st.just(("heard",)),
        st.tuples(st.just("advance"), st.integers(1, 4000).map(lambda ms: ms / 1000)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(STEPS)
def test_it_fires_exactly_when_a_wait_reaches_the_limit(steps):
    """Against a model: the first moment a read has been waiting ``LIMIT_S``."""
    clock, fired = ManualClock(), []
    silence = watch(clock, fired)
    waiting_since: float | None = None
    expected: float | None = None
    for step in steps:
        if expected is not None:
            break
        if step[0] == "waiting":
            silence.waiting()
            waiting_since = clock.now
        elif step[0] == "heard":
            silence.heard()
            waiting_since = None
        else:
            if waiting_since is not None and clock.now + step[1] >= waiting_since + LIMIT_S:
                expected = waiting_since + LIMIT_S
            clock.advance(step[1])
        assert clock.armed <= 1
    if expected is None:
        assert fired == [] and not silence.expired
    else:
        assert len(fired) == 1 and abs(fired[0] - expected) < 1e-6 and silence.expired
