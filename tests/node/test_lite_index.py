"""The lite index on a real store: it follows dispatched LITE messages, is rebuilt the same
after a crash, holds each offset once whichever way it came, and forgets a cut tail."""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.codec.properties import PROPERTY_LITE_TOPIC
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.lite_index import LiteIndex
from node.lite_names import lmq_name
from node.rpc_status import InvalidRequest
from store.config import StoreConfig
from store.message import Message
from store.message_store import MessageStore
from tests.support.timers import STORE


class Lite:
    def __init__(self, tmp_path, lite_topics_max: int = 100) -> None:
        self.tmp_path = tmp_path
        self.loop = asyncio.new_event_loop()
        self.lite_topics_max = lite_topics_max
        self.open()

    def open(self) -> None:
        self.store = MessageStore.open(StoreConfig(str(self.tmp_path / "data"), **STORE))
        self.index = LiteIndex(self.store, self.lite_topics_max)
        self.arrived: list[str] = []
        self.index.on_arrival = lambda lmqs, end: self.arrived.extend(lmqs)
        self.index.load(self.loop, ["T"])

    def put(self, lite_topic: str, topic: str = "T", queue_id: int = 0) -> int:
        message = Message.build(topic, b"body", queue_id=queue_id)
        message.properties[PROPERTY_LITE_TOPIC] = lite_topic
        result = self.store.put_messages([message])
        assert result.ok, result
        return result.appended[0].physical_offset

    def close(self) -> None:
        self.store.shutdown()
        self.loop.close()


@pytest.fixture
def lite(tmp_path):
    each = Lite(tmp_path)
    yield each
    each.close()


def test_each_lite_topic_lists_its_own_messages_in_order(lite):
    a1, b1, a2 = lite.put("a"), lite.put("b", queue_id=1), lite.put("a")
    lite.put("a", topic="%DLQ%G")  # a dead-lettered copy keeps the property: not indexed
    a, b = lmq_name("T", "a"), lmq_name("T", "b")
    assert lite.index.offsets_from(a, 0, 10) == [a1, a2]
    assert lite.index.offsets_from(a, a1 + 1, 10) == [a2]
    assert lite.index.offsets_from(b, 0, 10) == [b1]
    assert lite.index.end(a) == a2 + 1 and lite.index.has_after(a, a2)
    assert not lite.index.has_after(a, a2 + 1)
    assert lite.index.nth_from_end(a, 1) == a2 and lite.index.nth_from_end(a, 9) == a1
    assert lite.arrived == [a, b, a]
    assert lite.index.lite_topic_count == 2


def test_a_crash_rebuilds_the_same_index(lite):
    offsets = [lite.put("a"), lite.put("a", queue_id=2), lite.put("a")]
    lite.store.close_abruptly_for_tests()
    lite.open()
    assert lite.index.offsets_from(lmq_name("T", "a"), 0, 10) == offsets


def test_an_offset_seen_twice_is_held_once_in_order(lite):
    first, second = lite.put("a"), lite.put("a")
    lmq = lmq_name("T", "a")
    lite.index._add(lmq, second)  # the rebuild and the dispatch listener both saw them
    lite.index._add(lmq, first)
    assert lite.index.offsets_from(lmq, 0, 10) == [first, second]


def test_records_dispatched_again_after_a_cut_tail_replace_the_cut_entries(lite):
    first, second = lite.put("a"), lite.put("a")
    lmq = lmq_name("T", "a")
    lite.store.truncate_to(second)  # a slave cuts a tail its new master does not have
    again = lite.put("a")
    assert again == second
    assert lite.index.offsets_from(lmq, 0, 10) == [first, again]


@pytest.mark.parametrize("next_record", ["another-lite-topic", "a-system-record"])
def test_a_cut_tail_leaves_the_index_whatever_is_appended_there_next(lite, next_record):
    """A cut drops every lite topic's entries past it at once: the records appended there
    next may belong to anything (a 30-minute sync-async-flush chaos run served a
    ``%SYS%POP`` record to a lite consumer from an entry a cut had left behind)."""
    first, second, third = lite.put("a"), lite.put("a"), lite.put("a")
    a = lmq_name("T", "a")
    lite.store.truncate_to(second)  # a slave cuts a tail its new master does not have
    if next_record == "another-lite-topic":
        again = lite.put("b")
    else:
        result = lite.store.put_messages([Message.build("%SYS%POP", b"8133:2")])
        again = result.appended[0].physical_offset
    assert again == second
    assert lite.index.offsets_from(a, 0, 10) == [first]
    assert lite.index.end(a) == first + 1 and not lite.index.has_after(a, second)
    assert lite.index.message_at(a, first).body == b"body"
    assert lite.index.message_at(a, second) is None  # another record's offset now
    assert third > second


def test_one_lite_topic_too_many_is_refused_with_rocketmqs_code(tmp_path):
    lite = Lite(tmp_path, lite_topics_max=2)
    try:
        lite.put("a")
        lite.put("b")
        lite.index.check_quota("T", "a")  # an existing one is fine
        with pytest.raises(InvalidRequest) as refused:
            lite.index.check_quota("T", "c")
        assert refused.value.code == pb.LITE_TOPIC_QUOTA_EXCEEDED
        assert "lmq consume queue num exceeded" in str(refused.value)
    finally:
        lite.close()
