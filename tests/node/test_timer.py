"""Delayed messages in-process, with an injected clock: due order, never early, exactly once
across abrupt stops, roll-forward ahead of retention, and a large same-time backlog that
leaves the event loop free."""

from __future__ import annotations

import asyncio

from ferrymq.codec.properties import PROPERTY_DELIVERY_TIME_MS
from node.timer_service import DELIVERY_CHUNK, TimerService
from store.message import TIMER_TOPIC, Message
from tests.support.timers import T0, Timers


def test_due_messages_arrive_in_due_order_and_never_early(timers):
    timers.park("orders", b"third", T0 + 3000)
    timers.park("orders", b"first", T0 + 1000)
    timers.park("orders", b"second", T0 + 2000)
    timers.park("orders", b"also-first", T0 + 1000)
    assert timers.deliver() and timers.topic_bodies("orders") == []
    timers.now = T0 + 999
    timers.deliver()
    assert timers.topic_bodies("orders") == []
    timers.now = T0 + 2000
    timers.deliver()
    assert timers.topic_bodies("orders") == [b"first", b"also-first", b"second"]
    timers.now = T0 + 10_000
    timers.deliver()
    assert timers.topic_bodies("orders") == [b"first", b"also-first", b"second", b"third"]
    assert timers.service.pending == 0


def test_the_delivered_copy_keeps_tags_queue_and_delivery_time(timers):
    timers.park("orders", b"x", T0 + 1000, queue_id=3)
    timers.now = T0 + 1000
    timers.deliver()
    (copy,) = timers.store.get_messages("orders", 3, 0, 1).messages
    assert copy.tags == "T" and copy.properties[PROPERTY_DELIVERY_TIME_MS] == str(T0 + 1000)
    assert "REAL_TOPIC" not in copy.properties


def test_a_message_for_a_deleted_topic_is_dropped_not_retried(timers):
    timers.park("deleted", b"x", T0)
    assert timers.deliver()
    assert timers.topic_bodies("deleted") == [] and timers.service.pending == 0


def test_restart_neither_loses_nor_duplicates(timers):
    for i in range(10):
        timers.park("orders", b"%d" % i, T0 + 1000 * (i % 2 + 1))
    timers.now = T0 + 1000  # the even ones are due
    timers.deliver()
    timers.crash_and_reopen()
    assert timers.service.pending == 5
    timers.deliver()
    assert timers.topic_bodies("orders") == [b"0", b"2", b"4", b"6", b"8"]
    timers.now = T0 + 2000
    timers.deliver()
    timers.crash_and_reopen()
    timers.deliver()
    assert sorted(timers.topic_bodies("orders")) == sorted(b"%d" % i for i in range(10))
    assert timers.service.pending == 0


def test_a_failed_append_leaves_the_messages_pending(timers, monkeypatch):
    from store.results import PutResult, PutStatus

    timers.park("orders", b"x", T0)

    async def disk_full(messages):
        return PutResult(PutStatus.DISK_FULL, error="no space")

    monkeypatch.setattr(timers.store, "put_messages_async", disk_full)
    assert not timers.deliver()
    assert timers.service.pending == 1
    monkeypatch.undo()
    assert timers.deliver() and timers.topic_bodies("orders") == [b"x"]


def test_roll_forward_keeps_waiting_messages_through_retention(tmp_path):
    timers = Timers(tmp_path, commitlog_segment_bytes=160 * 1024, max_message_body_bytes=64 * 1024)
    try:
        day = 24 * 3600 * 1000
        timers.park("orders", b"in-ten-days", T0 + 10 * day)
        timers.park("orders", b"soon", T0 + 1000)
        filler = b"f" * 4000
        for _ in range(100):  # fill a few segments with other traffic
            assert timers.store.put_message(Message("other", filler)).ok
        timers.now = T0 + 2 * day
        timers.deliver()
        rolled = timers.loop.run_until_complete(timers.service.roll_forward(T0 + day))
        assert rolled == 1  # only the one still waiting
        timers.loop.run_until_complete(asyncio.sleep(0))
        assert timers.store.delete_expired(now_ms=timers.now + 10 * day) >= 1
        assert timers.store.min_offset_in_queue(TIMER_TOPIC, 0) >= 2  # originals gone
        timers.crash_and_reopen()
        assert timers.service.pending == 1
        timers.now = T0 + 10 * day
        timers.deliver()
        assert timers.topic_bodies("orders") == [b"soon", b"in-ten-days"]
    finally:
        timers.close()


def test_a_large_same_time_backlog_leaves_the_loop_free(timers):
    count = DELIVERY_CHUNK * 20
    batch = [TimerService.park(Message("orders", b"%d" % i), T0 + 1000) for i in range(count)]
    for start in range(0, count, 500):
        assert timers.store.put_messages(batch[start : start + 500]).ok
    timers.loop.run_until_complete(asyncio.sleep(0))
    assert timers.service.pending == count
    timers.now = T0 + 1000
    ticks = 0

    async def other_traffic():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    async def both():
        ticker = asyncio.ensure_future(other_traffic())
        delivered = await timers.service.deliver_due()
        ticker.cancel()
        return delivered

    assert timers.loop.run_until_complete(both())
    assert len(timers.topic_bodies("orders")) == count
    assert ticks >= 10  # the loop ran other work between chunks
