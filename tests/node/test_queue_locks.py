"""Queue locks of 4.x orderly consumers, on a clock of the test's: one holder per (group,
queue), renewed by its holder, lapsing 60 s after the last renewal as in RocketMQ."""

from __future__ import annotations

from node.queue_locks import LOCK_LIFETIME_MS, LockedQueue, QueueLocks

Q0, Q1 = LockedQueue("t", "b", 0), LockedQueue("t", "b", 1)


def test_a_lock_lapses_unless_its_holder_renews_it():
    now = [0]
    locks = QueueLocks(lambda: now[0])
    assert locks.lock("g", "a", [Q0, Q1]) == [Q0, Q1]
    now[0] = LOCK_LIFETIME_MS  # still a's
    assert locks.lock("g", "b", [Q0]) == [] and locks.lock("g", "a", [Q1]) == [Q1]
    now[0] = LOCK_LIFETIME_MS + 1  # Q0 lapsed, Q1 was renewed
    assert locks.holder("g", Q0) is None and locks.holder("g", Q1) == "a"
    assert locks.lock("g", "b", [Q0, Q1]) == [Q0]
    assert locks.holder("g", Q0) == "b"


def test_groups_lock_independently_and_unlock_only_their_own():
    locks = QueueLocks(lambda: 0)
    assert locks.lock("g", "a", [Q0]) == [Q0] and locks.lock("h", "b", [Q0]) == [Q0]
    locks.unlock("g", "b", [Q0])
    assert locks.holder("g", Q0) == "a"
    locks.unlock("g", "a", [Q0])
    assert locks.holder("g", Q0) is None and locks.holder("h", Q0) == "b"
