"""The offset resets a group's readers have not come to yet (``node/pending_resets.py``):
told once, forgotten after their time, bounded."""

from __future__ import annotations

from node.pending_resets import PendingResets


class Clock:
    def __init__(self) -> None:
        self.s = 100.0

    def __call__(self) -> float:
        return self.s


def test_a_reset_is_taken_once_per_queue():
    pending = PendingResets()
    assert pending.take("G", "t", 0) is None  # nothing reset
    pending.mark("G", "t", {0: 5, 1: 7})
    assert pending.take("G", "t", 0) == 5
    assert pending.take("G", "t", 0) is None  # told once
    assert pending.take("other", "t", 1) is None  # another group's reads are not moved
    pending.mark("G", "t", {1: 2})  # reset again before anyone read: the newer one
    assert pending.take("G", "t", 1) == 2
    assert len(pending) == 0


def test_a_reset_nobody_read_in_time_is_forgotten():
    clock = Clock()
    pending = PendingResets(ttl_s=300, clock=clock)
    pending.mark("G", "t", {0: 5, 1: 6})
    clock.s += 300
    assert pending.take("G", "t", 0) == 5
    clock.s += 0.001
    assert pending.take("G", "t", 1) is None


def test_the_table_is_bounded_the_oldest_dropped_first():
    pending = PendingResets(max_entries=3)
    pending.mark("G", "t", {0: 0, 1: 1})
    pending.mark("H", "t", {0: 10, 1: 11})
    assert len(pending) == 3
    assert pending.take("G", "t", 0) is None  # the oldest
    assert [pending.take("G", "t", 1), pending.take("H", "t", 0)] == [1, 10]
