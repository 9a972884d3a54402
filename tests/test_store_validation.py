"""Bad input gets a precise status and writes nothing."""

from __future__ import annotations

import pytest

from store.config import StoreConfig
from store.message import Message
from store.message_store import MessageStore
from store.results import GetStatus, PutStatus


@pytest.fixture
def store(tmp_path):
    opened = MessageStore.open(
        StoreConfig(
            str(tmp_path / "store"),
            commitlog_segment_bytes=8 << 20,
            consume_queue_entries_per_file=100,
            index_slot_count=31,
            index_entry_count=100,
        )
    )
    assert opened.put_message(Message.build("ok", b"first", unique_key="U0")).ok
    yield opened
    if opened.is_open:
        opened.shutdown()


def assert_nothing_written(store: MessageStore, before: int) -> None:
    assert store.commitlog.write_offset == before
    assert store.max_offset_in_queue("ok", 0) == 1


@pytest.mark.parametrize(
    ("topic", "reason"),
    [
        ("t" * 256, "256 bytes, the limit is 255"),
        ("has space", "characters outside"),
        ("slash/topic", "characters outside"),
        ("ünïcode", "characters outside"),
        ("dot.topic", "characters outside"),
        ("", "topic is empty"),
    ],
)
def test_invalid_topic_is_refused(store, topic, reason):
    before = store.commitlog.write_offset
    result = store.put_message(Message(topic, b"x"))
    assert result.status is PutStatus.MESSAGE_ILLEGAL
    assert "TOPIC_INVALID" in result.error and reason in result.error
    assert_nothing_written(store, before)


def test_topic_of_255_bytes_is_accepted(store):
    assert store.put_message(Message("t" * 255, b"x")).ok


def test_oversize_properties_are_refused(store):
    before = store.commitlog.write_offset
    result = store.put_message(Message("ok", b"x", properties={"big": "v" * 32_800}))
    assert result.status is PutStatus.PROPERTIES_SIZE_EXCEEDED
    assert "limit is 32767" in result.error
    assert_nothing_written(store, before)


@pytest.mark.parametrize("value", ["a\x01b", "a\x02b"])
def test_separator_bytes_in_properties_are_refused(store, value):
    before = store.commitlog.write_offset
    for properties in ({"name": value}, {value: "v"}):
        result = store.put_message(Message("ok", b"x", properties=properties))
        assert result.status is PutStatus.MESSAGE_ILLEGAL and "separator" in result.error
    assert_nothing_written(store, before)


def test_body_over_default_max_is_refused(store):
    before = store.commitlog.write_offset
    result = store.put_message(Message("ok", bytes(4 * 1024 * 1024 + 1)))
    assert result.status is PutStatus.MESSAGE_ILLEGAL
    assert "4194305 bytes, the limit is 4194304" in result.error
    assert_nothing_written(store, before)
    assert store.put_message(Message("ok", bytes(4 * 1024 * 1024))).ok  # the limit itself


def test_body_over_configured_max_is_refused(tmp_path):
    config = StoreConfig(
        str(tmp_path / "s"), commitlog_segment_bytes=1 << 20, max_message_body_bytes=1000
    )
    store = MessageStore.open(config)
    result = store.put_message(Message("ok", bytes(1001)))
    assert result.status is PutStatus.MESSAGE_ILLEGAL and "limit is 1000" in result.error
    assert store.commitlog.write_offset == 0
    store.shutdown()


def test_one_bad_message_refuses_the_whole_batch(store):
    before = store.commitlog.write_offset
    batch = [Message("ok", b"a"), Message("ok", b"b"), Message("bad topic", b"c")]
    assert store.put_messages(batch).status is PutStatus.MESSAGE_ILLEGAL
    assert_nothing_written(store, before)


def test_negative_queue_id_is_refused(store):
    before = store.commitlog.write_offset
    result = store.put_message(Message("ok", b"x", queue_id=-1))
    assert result.status is PutStatus.MESSAGE_ILLEGAL and "queue id" in result.error
    assert_nothing_written(store, before)


def test_segment_too_small_for_the_largest_record_is_a_config_error(tmp_path):
    with pytest.raises(ValueError, match="must hold the largest record"):
        StoreConfig(str(tmp_path), commitlog_segment_bytes=64 * 1024)


def test_put_after_shutdown(store):
    store.shutdown()
    assert store.put_message(Message("ok", b"x")).status is PutStatus.SERVICE_NOT_AVAILABLE


@pytest.mark.parametrize("message_id", ["", "zz", "G" * 32, "00" * 15, "0" * 33])
def test_malformed_offset_ids_find_nothing(store, message_id):
    assert store.look_message_by_id(message_id) is None


def test_offset_id_of_another_host_finds_nothing(store):
    found = store.look_message_by_id("0A000001000000500000000000000000")
    assert found is None


def test_get_statuses(store):
    for i in range(1, 5):
        assert store.put_message(Message.build("ok", b"x", unique_key=f"U{i}")).ok
    assert store.get_messages("nope", 0, 0, 10).status is GetStatus.NO_MESSAGE_IN_QUEUE
    assert store.get_messages("ok", 7, 0, 10).status is GetStatus.NO_MESSAGE_IN_QUEUE
    assert store.get_messages("ok", 0, 5, 10).status is GetStatus.OFFSET_OVERFLOW_ONE
    assert store.get_messages("ok", 0, 6, 10).status is GetStatus.OFFSET_OVERFLOW_BADLY
    found = store.get_messages("ok", 0, 2, 10)
    assert found.status is GetStatus.FOUND and found.next_begin_offset == 5
    assert [m.queue_offset for m in found.messages] == [2, 3, 4]
    assert (
        store.get_messages("ok", 0, 0, 10, tags=["nothing"]).status is GetStatus.NO_MATCHED_MESSAGE
    )
