"""Where a consumer group that committed nothing starts (RocketMQ 4.x QUERY_CONSUMER_OFFSET):
0 while the queue's first message is still in memory, so a consumer started right after
the first sends reads them; "not found" past that, and the client applies its
``consumeFromWhere``. The rule itself, on a real store (``OffsetService.start_of_new_group``)."""

from __future__ import annotations

import pytest

from node.services.offsets import OffsetService
from store.config import StoreConfig
from store.message import Message
from store.message_store import MessageStore
from tests.support.stores import SMALL


@pytest.fixture
def store(tmp_path):
    config = StoreConfig(str(tmp_path / "store"), **{**SMALL, "max_message_body_bytes": 16 * 1024})
    opened = MessageStore.open(config)
    yield opened
    opened.shutdown()


def offsets(store: MessageStore, in_memory: int) -> OffsetService:
    return OffsetService(store, None, None, None, None, in_memory=in_memory)


def test_a_queue_that_never_had_a_message_starts_at_0(store):
    assert offsets(store, 0).start_of_new_group("t", 0) == 0


def test_a_queue_whose_first_message_is_among_the_newest_bytes_starts_at_0(store):
    assert store.put_message(Message.build("t", b"first")).ok
    for _ in range(20):
        assert store.put_message(Message.build("other", bytes(1000))).ok
    behind = store.write_offset - store.consume_queue("t", 0).entry_at(0)[0]
    assert offsets(store, behind).start_of_new_group("t", 0) == 0
    assert offsets(store, behind - 1).start_of_new_group("t", 0) is None


def test_a_queue_whose_first_message_is_gone_is_not_replayed(store):
    config = store.config
    while store.commitlog.write_offset < 2 * config.commitlog_segment_bytes + 100_000:
        assert store.put_message(Message.build("t", bytes(8000))).ok
    assert store.delete_expired(now_ms=1 << 60) >= 1
    assert store.min_offset_in_queue("t", 0) > 0
    assert offsets(store, 1 << 40).start_of_new_group("t", 0) is None
