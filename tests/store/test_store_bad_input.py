"""Bad input gets a precise status, and nothing of it reaches the disk or the queues.

"Nothing written" is checked against a snapshot of every position the store owns: the
CommitLog write offset and its files, the dispatcher cursor, each consume queue's range,
the next queue offset of every queue, the index files and the consume-queue directories.
After each refusal a good put must still land at the very next queue offset, so a refused
message that had taken an offset (a gap) is caught too.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from store.config import MIB, StoreConfig
from store.message import Message
from store.message_store import MessageStore
from store.results import GetStatus, PutStatus

SMALL = dict(
    commitlog_segment_bytes=1 * MIB,
    max_message_body_bytes=64 * 1024,
    consume_queue_entries_per_file=1000,
    index_slot_count=1000,
    index_entry_count=4000,
)


def snapshot(store: MessageStore) -> tuple:
    root = store.config.data_dir
    queue_dirs = sorted(
        os.path.relpath(directory, root)
        for directory, _, _ in os.walk(os.path.join(root, "consumequeue"))
    )
    return (
        store.commitlog.write_offset,
        sorted(os.listdir(os.path.join(root, "commitlog"))),
        store.dispatcher.dispatched_offset,
        {key: (q.min_offset, q.max_offset) for key, q in store.consume_queues.queues.items()},
        dict(store.commitlog.queue_offsets),
        [(f.path, f.index_count, f.end_physical_offset) for f in store.index.files],
        queue_dirs,
    )


def assert_refused(
    store: MessageStore, messages: list[Message], status: PutStatus, *details: str
) -> str:
    """Put ``messages``; assert the status, that the error names each of ``details``, that
    nothing changed, and that the next good put takes the next queue offset."""
    before = snapshot(store)
    next_offset = store.max_offset_in_queue("ok", 0)
    result = store.put_messages(messages)
    assert result.status is status, result
    assert result.appended == []
    assert result.error is not None
    for detail in details:
        assert detail in result.error, (detail, result.error)
    assert snapshot(store) == before
    good = store.put_message(Message.build("ok", b"after", unique_key=f"after-{next_offset}"))
    assert good.ok and good.appended[0].queue_offset == next_offset
    return result.error


@pytest.fixture
def store(tmp_path):
    opened = MessageStore.open(StoreConfig(str(tmp_path / "store"), **SMALL))
    assert opened.put_message(Message.build("ok", b"first", unique_key="U0")).ok
    yield opened
    opened.shutdown()


# ---- topics ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("topic", "details"),
    [
        ("t" * 256, ("TOPIC_INVALID", "256 bytes", "limit is 255")),
        ("t" * 1000, ("TOPIC_INVALID", "1000 bytes", "limit is 255")),
        ("", ("TOPIC_INVALID", "empty")),
        ("has space", ("TOPIC_INVALID", "characters")),
        ("a/b", ("TOPIC_INVALID", "characters")),
        ("../escape", ("TOPIC_INVALID", "characters")),
        ("ünïcode", ("TOPIC_INVALID", "characters")),
        ("主题", ("TOPIC_INVALID", "characters")),
        ("nul\x00byte", ("TOPIC_INVALID", "characters")),
        ("tab\t", ("TOPIC_INVALID", "characters")),
        # A trailing newline must not slip past the pattern (``$`` matches before it).
        ("orders\n", ("TOPIC_INVALID", "characters")),
    ],
)
def test_invalid_topic_is_refused(store, topic, details):
    assert_refused(store, [Message(topic, b"x")], PutStatus.MESSAGE_ILLEGAL, *details)
    assert store.get_messages(topic, 0, 0, 10).status is GetStatus.NO_MESSAGE_IN_QUEUE


def test_topic_limits_are_inclusive(store):
    for topic in ("t" * 255, "%RETRY%|group_-1"):
        result = store.put_message(Message.build(topic, b"x", unique_key="edge"))
        assert result.ok, result
        assert store.get_messages(topic, 0, 0, 1).messages[0].body == b"x"


def test_unicode_topic_length_is_counted_in_bytes(store):
    # 128 characters but 256 UTF-8 bytes: refused for its characters and its length both;
    # the point is that it never reaches the 1-byte TOPICLENGTH field.
    assert_refused(store, [Message("é" * 128, b"x")], PutStatus.MESSAGE_ILLEGAL, "TOPIC_INVALID")


# ---- properties ------------------------------------------------------------------
def properties_of_encoded_size(size: int) -> dict[str, str]:
    # One pair encodes as name \x01 value \x02.
    return {"p": "v" * (size - 3)}


def test_properties_over_32767_bytes_are_refused(store):
    error = assert_refused(
        store,
        [Message("ok", b"x", properties=properties_of_encoded_size(32768))],
        PutStatus.PROPERTIES_SIZE_EXCEEDED,
        "32768",
        "32767",
    )
    assert "PROPERTIES_TOO_LARGE" in error


def test_properties_size_counts_utf8_bytes(store):
    # 11,000 characters, 33,000 bytes.
    assert_refused(
        store,
        [Message("ok", b"x", properties={"p": "€" * 11_000})],
        PutStatus.PROPERTIES_SIZE_EXCEEDED,
        "limit is 32767",
    )


def test_properties_of_exactly_32767_bytes_are_stored(store):
    properties = properties_of_encoded_size(32767)
    result = store.put_message(Message("ok", b"x", properties=properties))
    assert result.ok
    stored = store.look_message_by_offset(result.appended[0].physical_offset)
    assert stored.properties == properties


@pytest.mark.parametrize("separator", ["\x01", "\x02"])
@pytest.mark.parametrize("where", ["name", "value"])
def test_separator_bytes_in_properties_are_refused(store, separator, where):
    bad = f"a{separator}b"
    properties = {bad: "v"} if where == "name" else {"name": bad}
    assert_refused(
        store,
        [Message("ok", b"x", properties=properties)],
        PutStatus.MESSAGE_ILLEGAL,
        "PROPERTY_INVALID",
        repr(bad if where == "name" else "name"),
    )


@pytest.mark.parametrize("where", ["name", "value"])
def test_lone_surrogates_in_properties_are_refused(store, where):
    # A Python str may hold one; it has no UTF-8 form, so no record can carry it.
    properties = {"\udc80": "v"} if where == "name" else {"name": "a\ud800"}
    assert_refused(
        store,
        [Message("ok", b"x", properties=properties)],
        PutStatus.MESSAGE_ILLEGAL,
        "PROPERTY_INVALID",
        "not valid Unicode",
    )


def test_separator_bytes_in_tags_keys_and_unique_key_are_refused(store):
    for message in (
        Message.build("ok", b"x", tags="a\x02b"),
        Message.build("ok", b"x", keys=["k\x01"]),
        Message.build("ok", b"x", unique_key="\x02"),
    ):
        assert_refused(store, [message], PutStatus.MESSAGE_ILLEGAL, "PROPERTY_INVALID")


# ---- bodies ----------------------------------------------------------------------
def test_body_over_the_default_4_mib_is_refused(tmp_path):
    config = StoreConfig(
        str(tmp_path / "store"),
        commitlog_segment_bytes=8 * MIB,
        consume_queue_entries_per_file=1000,
        index_slot_count=1000,
        index_entry_count=4000,
    )
    assert config.max_message_body_bytes == 4 * MIB
    store = MessageStore.open(config)
    try:
        assert store.put_message(Message.build("ok", b"first")).ok
        assert_refused(
            store,
            [Message("ok", bytes(4 * MIB + 1))],
            PutStatus.MESSAGE_ILLEGAL,
            "BODY_TOO_LARGE",
            str(4 * MIB + 1),
            str(4 * MIB),
        )
        at_limit = store.put_message(Message("ok", b"\x07" * (4 * MIB)))
        assert at_limit.ok
        assert store.look_message_by_offset(at_limit.appended[0].physical_offset).body == (
            b"\x07" * (4 * MIB)
        )
    finally:
        store.shutdown()


def test_body_over_a_lowered_max_is_refused(tmp_path):
    config = StoreConfig(str(tmp_path / "store"), **{**SMALL, "max_message_body_bytes": 1000})
    store = MessageStore.open(config)
    try:
        assert store.put_message(Message.build("ok", b"first")).ok
        assert_refused(
            store,
            [Message("ok", bytes(1001))],
            PutStatus.MESSAGE_ILLEGAL,
            "BODY_TOO_LARGE",
            "body is 1001 bytes",
            "limit is 1000",
        )
        assert store.put_message(Message("ok", bytes(1000))).ok
    finally:
        store.shutdown()


def test_empty_body_is_stored(store):
    result = store.put_message(Message.build("ok", b"", unique_key="empty"))
    assert result.ok
    assert store.query_by_unique_key("ok", "empty").body == b""


# ---- batches ---------------------------------------------------------------------
BAD_MEMBERS = {
    "topic": (Message("bad topic", b"x"), PutStatus.MESSAGE_ILLEGAL),
    "body": (Message("ok", bytes(64 * 1024 + 1)), PutStatus.MESSAGE_ILLEGAL),
    "separator": (Message("ok", b"x", properties={"a": "\x01"}), PutStatus.MESSAGE_ILLEGAL),
    "properties": (
        Message("ok", b"x", properties=properties_of_encoded_size(40_000)),
        PutStatus.PROPERTIES_SIZE_EXCEEDED,
    ),
    "queue_id": (Message("ok", b"x", queue_id=-1), PutStatus.MESSAGE_ILLEGAL),
}


@pytest.mark.parametrize("kind", sorted(BAD_MEMBERS))
@pytest.mark.parametrize("position", [0, 2, 4])
def test_one_bad_message_refuses_the_whole_batch(store, kind, position):
    bad, status = BAD_MEMBERS[kind]
    batch = [
        Message.build("ok", f"good-{i}".encode(), queue_id=i % 2, unique_key=f"B{i}")
        for i in range(4)
    ]
    batch.insert(position, bad)
    assert_refused(store, batch, status)
    for i in range(4):
        assert store.query_by_unique_key("ok", f"B{i}") is None


def test_batch_over_the_batch_limit_is_refused(tmp_path):
    config = StoreConfig(str(tmp_path / "store"), **{**SMALL, "max_batch_bytes": 10_000})
    store = MessageStore.open(config)
    try:
        assert store.put_message(Message.build("ok", b"first")).ok
        batch = [Message("ok", bytes(3000)) for _ in range(4)]
        assert_refused(store, batch, PutStatus.MESSAGE_ILLEGAL, "BATCH_TOO_LARGE", "limit is 10000")
    finally:
        store.shutdown()


def test_bad_requests_combined_with_good_ones_refuse_only_themselves(store):
    """The asyncio path appends the requests of one loop turn as one batch; a bad request
    among them is refused alone and takes no queue offset."""

    async def submit():
        return await asyncio.gather(
            store.put_messages_async([Message.build("ok", b"a", unique_key="A")]),
            store.put_messages_async([Message("bad/topic", b"b")]),
            store.put_messages_async([Message.build("ok", b"c", unique_key="C")]),
            store.put_messages_async([Message("ok", b"d", queue_id=-5)]),
        )

    before = store.max_offset_in_queue("ok", 0)
    good_a, bad_b, good_c, bad_d = asyncio.run(submit())
    assert good_a.ok and good_c.ok
    assert bad_b.status is PutStatus.MESSAGE_ILLEGAL and bad_b.appended == []
    assert bad_d.status is PutStatus.MESSAGE_ILLEGAL and bad_d.appended == []
    assert [good_a.appended[0].queue_offset, good_c.appended[0].queue_offset] == [
        before,
        before + 1,
    ]
    assert store.max_offset_in_queue("ok", 0) == before + 2
    assert store.get_messages("bad/topic", 0, 0, 1).status is GetStatus.NO_MESSAGE_IN_QUEUE


# ---- other fields ----------------------------------------------------------------
@pytest.mark.parametrize("queue_id", [-1, -(1 << 31), 1 << 31, 1 << 40])
def test_queue_id_out_of_range_is_refused(store, queue_id):
    assert_refused(
        store, [Message("ok", b"x", queue_id=queue_id)], PutStatus.MESSAGE_ILLEGAL, "queue id"
    )


@pytest.mark.parametrize(
    "field",
    [
        {"flag": 1 << 31},
        {"flag": -(1 << 31) - 1},
        {"reconsume_times": 1 << 31},
        {"born_timestamp_ms": 1 << 63},  # e.g. a client's Timestamp of 2^62 seconds, in ms
        {"prepared_transaction_offset": -(1 << 63) - 1},
        {"born_host": b"\x7f\x00\x00\x01"},
    ],
    ids=lambda field: next(iter(field)),
)
def test_header_field_out_of_its_on_disk_range_is_refused(store, field):
    """Such a field used to raise ``struct.error`` from inside the append, after the batch
    had taken its queue offsets: the put crashed and the queue kept a gap for good."""
    message = Message.build("ok", b"x")
    for name, value in field.items():
        setattr(message, name, value)
    batch = [Message.build("ok", b"before"), message]
    assert_refused(store, batch, PutStatus.MESSAGE_ILLEGAL, next(iter(field)))


# ---- lifecycle -------------------------------------------------------------------
def test_put_after_shutdown_is_service_not_available(tmp_path):
    config = StoreConfig(str(tmp_path / "store"), **SMALL)
    store = MessageStore.open(config)
    assert store.put_message(Message.build("ok", b"x", unique_key="U0")).ok
    store.shutdown()
    end = store.commitlog.write_offset
    result = store.put_message(Message.build("ok", b"late"))
    assert result.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert result.appended == [] and "shut down" in result.error
    assert store.put_messages([Message.build("ok", b"late")] * 3).status is (
        PutStatus.SERVICE_NOT_AVAILABLE
    )
    late = asyncio.run(store.put_messages_async([Message.build("ok", b"late")]))
    assert late.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert store.commitlog.write_offset == end
    store.shutdown()  # a second shutdown is harmless

    reopened = MessageStore.open(config)
    try:
        assert reopened.recovery_report.clean_shutdown
        assert reopened.commitlog.write_offset == end
        assert reopened.max_offset_in_queue("ok", 0) == 1
    finally:
        reopened.shutdown()


# ---- lookups ---------------------------------------------------------------------
def test_malformed_message_ids_find_nothing(store):
    real = store.put_message(Message.build("ok", b"real")).appended[0]
    real_id = real.offset_message_id
    assert store.look_message_by_id(real_id).body == b"real"
    assert store.look_message_by_id(real_id.lower()).body == b"real"
    malformed = [
        "",
        "zz",
        "G" * 32,
        "0" * 31,
        "0" * 33,
        real_id[:-1],
        real_id + "0",
        real_id[:-2] + "  ",
        # 30 hex digits and two spaces: ``bytes.fromhex`` skips the spaces and would read
        # a 15-byte id whose offset is the real one's.
        real_id[:16] + " " + real_id[18:] + " ",
        real_id[:16] + "\t\n" + real_id[18:],
        "\uff10" * 32,  # full-width zeros: digits to Unicode, not hex
    ]
    for message_id in malformed:
        assert store.look_message_by_id(message_id) is None, repr(message_id)


def test_message_ids_that_point_nowhere_find_nothing(store):
    real = store.put_message(Message.build("ok", b"real")).appended[0]
    host = real.offset_message_id[:16]
    for physical in (
        real.physical_offset + 1,  # inside a record
        real.physical_offset + real.size,  # the write offset
        1 << 40,  # far beyond
        (1 << 64) - 1,
    ):
        assert store.look_message_by_id(host + f"{physical:016X}") is None, physical
    other_host = "0A000001" + host[8:]
    assert store.look_message_by_id(other_host + real.offset_message_id[16:]) is None


def test_get_messages_on_unknown_topic_or_queue(store):
    for topic, queue_id in (("nope", 0), ("ok", 7), ("ok", -1), ("bad topic", 0)):
        result = store.get_messages(topic, queue_id, 0, 10)
        assert result.status is GetStatus.NO_MESSAGE_IN_QUEUE
        assert result.messages == [] and result.max_offset == 0
    assert store.query_by_key("nope", "U0") == []
    assert store.query_by_unique_key("nope", "U0") is None


def test_get_messages_offset_statuses(tmp_path):
    """Below min, at max and beyond max, on a queue whose minimum retention moved up."""
    config = StoreConfig(str(tmp_path / "store"), **{**SMALL, "max_message_body_bytes": 16 * 1024})
    store = MessageStore.open(config)
    try:
        # Three segments of the queue, then retention drops all but the last segment.
        while store.commitlog.write_offset < 2 * config.commitlog_segment_bytes + 100_000:
            assert store.put_message(Message.build("ok", bytes(8000))).ok
        assert store.delete_expired(now_ms=1 << 60) == 2
        low = store.min_offset_in_queue("ok", 0)
        high = store.max_offset_in_queue("ok", 0)
        assert 0 < low < high

        for offset in (0, low - 1, -1):
            result = store.get_messages("ok", 0, offset, 10)
            assert result.status is GetStatus.OFFSET_TOO_SMALL, offset
            assert result.messages == [] and result.next_begin_offset == low
            assert (result.min_offset, result.max_offset) == (low, high)

        at_max = store.get_messages("ok", 0, high, 10)
        assert at_max.status is GetStatus.OFFSET_OVERFLOW_ONE
        assert at_max.messages == [] and at_max.next_begin_offset == high

        for offset in (high + 1, high + 1000, 1 << 62):
            beyond = store.get_messages("ok", 0, offset, 10)
            assert beyond.status is GetStatus.OFFSET_OVERFLOW_BADLY, offset
            assert beyond.messages == [] and beyond.next_begin_offset == high

        first = store.get_messages("ok", 0, low, 3)
        assert first.status is GetStatus.FOUND
        assert [m.queue_offset for m in first.messages] == [low, low + 1, low + 2]
        last = store.get_messages("ok", 0, high - 1, 10)
        assert [m.queue_offset for m in last.messages] == [high - 1]
        assert last.next_begin_offset == high
    finally:
        store.shutdown()


def test_segment_too_small_for_the_largest_record_is_a_config_error(tmp_path):
    with pytest.raises(ValueError, match="must hold the largest record"):
        StoreConfig(str(tmp_path), commitlog_segment_bytes=64 * 1024)
