"""Recalling a delayed message (``TimerService.recall``), in-process with an injected clock:
a recalled message is never delivered, across restarts and retention; a recall is refused
once the delivery time has come; and delivery waits for a recall being stored."""

from __future__ import annotations

import asyncio

import pytest

from node.timer_service import TIMER_RECALL_TOPIC, NotRecallable, RecallNotStored
from store.message import Message
from store.results import PutResult, PutStatus
from tests.support.timers import T0, Timers


def test_a_recalled_message_is_not_delivered_and_the_others_are(timers):
    timers.park("orders", b"kept", T0 + 1000, message_id="ID-KEPT")
    timers.park("orders", b"recalled", T0 + 1000, message_id="ID-GONE")
    timers.park("orders", b"later", T0 + 2000, message_id="ID-LATER")
    timers.recall(T0 + 1000, "ID-GONE")
    timers.recall(T0 + 1000, "ID-GONE")  # again: the same answer, one marker
    assert len(timers.topic_bodies(TIMER_RECALL_TOPIC)) == 1
    timers.now = T0 + 5000
    assert timers.deliver()
    assert timers.topic_bodies("orders") == [b"kept", b"later"]
    assert timers.service.pending == 0


def test_a_recall_is_refused_once_the_delivery_time_has_come_or_nothing_waits(timers):
    timers.park("orders", b"x", T0 + 1000, message_id="ID-X")
    timers.now = T0 + 1000
    with pytest.raises(NotRecallable, match="has come"):
        timers.recall(T0 + 1000, "ID-X")
    with pytest.raises(NotRecallable, match="no delayed message is pending"):
        timers.recall(T0 + 7000, "ID-X")
    assert timers.deliver() and timers.topic_bodies("orders") == [b"x"]


def test_a_recall_survives_a_crash_and_a_promotion(timers):
    timers.park("orders", b"recalled", T0 + 1000, message_id="ID-GONE")
    timers.park("orders", b"kept", T0 + 1000, message_id="ID-KEPT")
    timers.recall(T0 + 1000, "ID-GONE")
    timers.crash_and_reopen()
    timers.service.reload()  # as a promoted slave rebuilds it
    timers.now = T0 + 1000
    assert timers.deliver()
    assert timers.topic_bodies("orders") == [b"kept"]


def test_a_recall_the_store_refused_leaves_the_message_to_be_delivered(timers, monkeypatch):
    timers.park("orders", b"x", T0 + 1000, message_id="ID-X")

    async def disk_full(messages):
        return PutResult(PutStatus.DISK_FULL, error="no space")

    monkeypatch.setattr(timers.store, "put_messages_async", disk_full)
    with pytest.raises(RecallNotStored, match="no space"):
        timers.recall(T0 + 1000, "ID-X")
    monkeypatch.undo()
    timers.now = T0 + 1000
    assert timers.deliver() and timers.topic_bodies("orders") == [b"x"]


def test_delivery_waits_for_a_recall_being_stored(timers, monkeypatch):
    """The clock passes the delivery time while the recall's marker is being appended:
    the bucket is not delivered before the marker is stored, so the recalled message is
    not delivered though the recall was asked for just in time."""
    timers.park("orders", b"recalled", T0 + 1000, message_id="ID-GONE")
    timers.park("orders", b"kept", T0 + 1000, message_id="ID-KEPT")
    real_put = timers.store.put_messages_async
    release = asyncio.Event()

    async def slow_put(messages):
        if messages[0].topic == TIMER_RECALL_TOPIC:
            await release.wait()
        return await real_put(messages)

    monkeypatch.setattr(timers.store, "put_messages_async", slow_put)

    async def scenario() -> None:
        recall = asyncio.ensure_future(timers.service.recall(T0 + 1000, "ID-GONE"))
        await asyncio.sleep(0)
        timers.now = T0 + 1000  # due now, while the marker is not stored yet
        delivering = asyncio.ensure_future(timers.service.deliver_due())
        await asyncio.sleep(0.05)
        assert not delivering.done() and timers.topic_bodies("orders") == []
        release.set()
        await recall
        assert await delivering

    timers.loop.run_until_complete(scenario())
    assert timers.topic_bodies("orders") == [b"kept"]


def test_a_recall_marker_is_rolled_forward_with_the_message_it_names(tmp_path):
    timers = Timers(tmp_path, commitlog_segment_bytes=160 * 1024, max_message_body_bytes=64 * 1024)
    try:
        day = 24 * 3600 * 1000
        timers.park("orders", b"recalled", T0 + 10 * day, message_id="ID-GONE")
        timers.park("orders", b"kept", T0 + 10 * day, message_id="ID-KEPT")
        timers.recall(T0 + 10 * day, "ID-GONE")
        filler = b"f" * 4000
        for _ in range(100):  # fill a few segments with other traffic
            assert timers.store.put_message(Message("other", filler)).ok
        timers.now = T0 + 2 * day
        rolled = timers.loop.run_until_complete(timers.service.roll_forward(T0 + day))
        assert rolled == 2
        timers.loop.run_until_complete(asyncio.sleep(0))
        assert timers.store.delete_expired(now_ms=timers.now + 10 * day) >= 1
        assert timers.store.min_offset_in_queue(TIMER_RECALL_TOPIC, 0) >= 1  # original gone
        timers.crash_and_reopen()
        timers.now = T0 + 10 * day
        timers.deliver()
        assert timers.topic_bodies("orders") == [b"kept"]
    finally:
        timers.close()
