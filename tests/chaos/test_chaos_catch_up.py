"""The wait for the consumers after heal (``chaos.workload.wait_until_drained``) on a fake
clock: a group that is slow but moving is waited for; one that stopped moving, or one that
goes round in circles, ends the wait as not caught up."""

from __future__ import annotations

from chaos.report import catch_up_line
from chaos.runner import catch_up_limit_s
from chaos.workload import Backlog, wait_until_drained


class FakeTime:
    """A clock that advances only when the wait sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def replay(*steps: dict[str, Backlog]):
    """Each poll answers the next step; the last one is repeated forever."""
    steps_left = list(steps)

    def read() -> dict[str, Backlog]:
        return steps_left.pop(0) if len(steps_left) > 1 else steps_left[0]

    return read


def draining(group: str, start: int, per_poll: int):
    """A group consuming ``per_poll`` messages per poll from ``start`` down to 0."""
    state = {"left": start}

    def read() -> dict[str, Backlog]:
        backlog = Backlog(state["left"], start - state["left"])
        state["left"] = max(0, state["left"] - per_poll)
        return {group: backlog}

    return read


def test_a_group_that_is_slow_but_moving_is_waited_for_past_the_stall_window():
    time = FakeTime()
    # 60,000 messages at 100 per 0.2 s poll: 120 s of steady progress, six stall windows.
    caught = wait_until_drained(draining("pop", 60_000, 100), 20.0, 300.0, time.clock, time.sleep)
    assert caught.caught_up and caught.behind == {}
    assert 119.0 < caught.waited_s < 121.0


def test_a_group_that_stops_moving_ends_the_wait_one_stall_window_later():
    time = FakeTime()
    stuck = {"pop": Backlog(5, 95), "pull": Backlog(0, 100)}
    read = replay({"pop": Backlog(10, 90), "pull": Backlog(0, 100)}, stuck)
    caught = wait_until_drained(read, 20.0, 300.0, time.clock, time.sleep)
    assert not caught.caught_up
    assert caught.behind == {"pop": "5 left (lag and in flight)"}
    assert 19.9 < caught.waited_s < 20.5
    assert caught_up_line_says_stuck(caught)


def test_a_group_going_round_in_circles_is_not_progress():
    """In flight up, lag down, back again, the committed offset never moving: the backlog
    never gets below its lowest, so the wait ends as for a stuck group."""
    time = FakeTime()
    circling = [{"fifo": Backlog(3 + (i % 2), 7)} for i in range(10_000)]
    caught = wait_until_drained(replay(*circling), 20.0, 300.0, time.clock, time.sleep)
    assert not caught.caught_up and 19.9 < caught.waited_s < 20.5


def test_the_wait_is_bounded_even_while_groups_move():
    time = FakeTime()
    caught = wait_until_drained(draining("pop", 10**9, 1), 20.0, 300.0, time.clock, time.sleep)
    assert not caught.caught_up and 300.0 <= caught.waited_s < 300.5
    assert "not caught up within 300.0 s" in catch_up_line(caught.__dict__)


def test_no_master_answering_is_neither_progress_nor_caught_up():
    time = FakeTime()
    caught = wait_until_drained(replay({"pop": Backlog(None)}), 20.0, 300.0, time.clock, time.sleep)
    assert not caught.caught_up and caught.behind == {"pop": "no master answered"}
    assert 19.9 < caught.waited_s < 20.5


def caught_up_line_says_stuck(caught) -> bool:
    return catch_up_line(caught.__dict__).startswith("consumers stuck, no progress for 20.0 s")


def test_a_long_run_waits_longer_for_a_group_still_moving():
    """A group that needs 500 s to drain, moving all along (a 30-minute async-sync-flush
    run of 2026-11-30 had 947 messages left, still moving, when a fixed 300 s ran out):
    a 30-minute run waits for it; a short run's limit stays 300 s."""
    assert catch_up_limit_s(240.0) == 300.0
    assert catch_up_limit_s(1800.0) == 900.0
    for duration_s, caught_up in ((240.0, False), (1800.0, True)):
        time = FakeTime()
        slow = draining("chaos-dlq", 2_500, 1)  # one message per 0.2 s poll: 500 s
        caught = wait_until_drained(
            slow, 20.0, catch_up_limit_s(duration_s), time.clock, time.sleep
        )
        assert caught.caught_up is caught_up, (duration_s, caught)
