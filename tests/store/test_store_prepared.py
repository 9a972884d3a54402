"""The store's batch fast paths: ``prepare`` with encoded properties, ``put_prepared_async``
(of prepared messages and of runs of produce records, which must store what the messages
would) and ``IndexFile.put_all`` (which must leave exactly the bytes ``put`` leaves)."""

from __future__ import annotations

import asyncio
import random

import pytest

from ferrymq.codec.errors import InvalidMessageError
from ferrymq.codec.produce_records import PRODUCE_HEAD
from ferrymq.codec.properties import encode_properties
from node.message_rules import produce_spans
from store.config import FlushMode, StoreConfig
from store.index_file import INDEX_KEY, IndexFile
from store.message import TIMER_TOPIC, Message
from store.message_store import MessageStore
from store.results import PutStatus


@pytest.fixture
def store(tmp_path):
    opened = MessageStore.open(
        StoreConfig(
            str(tmp_path / "store"),
            commitlog_segment_bytes=8 << 20,
            consume_queue_entries_per_file=1000,
            index_slot_count=101,
            index_entry_count=400,
        )
    )
    yield opened
    opened.shutdown()


def message(i: int, **properties) -> Message:
    return Message.build(
        "T", b"body-%d" % i, tags="t", keys=[f"k{i}"], unique_key=f"U{i}", properties=properties
    )


def test_prepare_with_encoded_properties_equals_prepare_without(store):
    plain = store.prepare(message(1, extra="v"))
    encoded = store.prepare(
        message(1, extra="v"), encode_properties(message(1, extra="v").properties)
    )
    assert (plain.tail, plain.size, plain.tag_code) == (
        encoded.tail,
        encoded.size,
        encoded.tag_code,
    )


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"TAGS\x01t\x02", "PROPERTY_INVALID"),  # fewer pairs than the dict
        (b"TAGS\x01t\x01\x02KEYS\x01k1\x02UNIQ_KEY\x01U1", "PROPERTY_INVALID"),
        (b"x\x01" + b"v" * 40000 + b"\x02", "PROPERTIES_TOO_LARGE"),
    ],
)
def test_prepare_refuses_encoded_properties_that_do_not_fit(store, raw, reason):
    with pytest.raises(InvalidMessageError) as refused:
        store.prepare(message(1), raw)
    assert refused.value.reason == reason


def test_prepare_keeps_every_store_check(store):
    for bad, reason in (
        (Message("bad topic", b"x"), "TOPIC_INVALID"),
        (Message("T", b"x" * (store.config.max_message_body_bytes + 1)), "BODY_TOO_LARGE"),
        (Message("T", b"x", queue_id=-1), "QUEUE_ID_INVALID"),
        (Message("T", b"x", born_host=b"short"), "FIELD_OUT_OF_RANGE"),
    ):
        with pytest.raises(InvalidMessageError) as refused:
            store.prepare(bad, b"")
        assert refused.value.reason == reason


def test_put_prepared_async_appends_one_batch_and_checks_its_size(store):
    async def scenario():
        batch = [store.prepare(message(i)) for i in range(5)]
        stored = await store.put_prepared_async(batch)
        huge = [store.prepare(Message("T", b"x" * 600_000)) for _ in range(15)]
        refused = await store.put_prepared_async(huge)
        return stored, refused

    stored, refused = asyncio.run(scenario())
    assert stored.ok and [a.queue_offset for a in stored.appended] == [0, 1, 2, 3, 4]
    assert refused.status is PutStatus.MESSAGE_ILLEGAL and "BATCH_TOO_LARGE" in refused.error
    assert [m.body for m in store.get_messages("T", 0, 0, 10).messages] == [
        b"body-%d" % i for i in range(5)
    ]
    assert store.query_by_key("T", "k3")[0].body == b"body-3"


def test_put_all_writes_the_bytes_put_writes(tmp_path):
    rng = random.Random(3)
    entries = [
        (rng.getrandbits(32), 1000 + 37 * i, 1_700_000_000_000 + 400 * i) for i in range(300)
    ]
    one, many = (IndexFile.create(str(tmp_path / name), 17, 400) for name in ("one", "many"))
    for key_hash, physical, stored_ms in entries:
        assert one.put(key_hash, physical, stored_ms)
    rows = [INDEX_KEY.pack(physical, 37, ms, key_hash) for key_hash, physical, ms in entries]
    for start in range(0, 300, 64):  # batches that share slots with earlier ones
        many.put_all(b"".join(rows[start : start + 64]))
    one.write_header(99)
    many.write_header(99)
    assert one.map[:] == many.map[:]
    assert many.lookup(entries[5][0], 0, 1 << 62, 10) == one.lookup(entries[5][0], 0, 1 << 62, 10)


def produce_records(messages: list[Message]) -> bytes:
    return b"".join(
        PRODUCE_HEAD.pack(len(m.body), len(raw), m.born_timestamp_ms) + m.body + raw
        for m in messages
        for raw in [encode_properties(m.properties)]
    )


def test_a_run_stores_what_its_messages_would(store, tmp_path):
    """The records a run appends from a Produce request's bytes are the records a put of
    the same messages appends: the log, the queues and the index alike."""
    host = b"\x0a\x00\x00\x07\x00\x00\x30\x39"
    messages = [message(i, extra="v" * i) for i in range(6)]
    for i, m in enumerate(messages):
        m.queue_id, m.born_timestamp_ms, m.born_host = 1, 1_700_000_000_000 + i, host
    records = produce_records(messages)
    spans = produce_spans(records, len(messages), store.config.max_message_body_bytes, "")
    assert spans is None  # the node's checks want a message type: these records have none
    for m in messages:
        m.properties["__MSG_TYPE"] = "1"
    records = produce_records(messages)
    spans = produce_spans(records, len(messages), store.config.max_message_body_bytes, "1")
    assert spans is not None
    run = store.prepare_run("T", 1, host, records, spans)
    other = MessageStore.open(StoreConfig(str(tmp_path / "other")))

    async def scenario():
        return await store.put_prepared_async([run]), await other.put_messages_async(messages)

    try:
        by_run, by_messages = asyncio.run(scenario())
        assert by_run.ok and by_messages.ok
        assert [(a.queue_offset, a.size) for a in by_run.appended] == [
            (a.queue_offset, a.size) for a in by_messages.appended
        ]
        ours = store.get_messages("T", 1, 0, 10).messages
        theirs = other.get_messages("T", 1, 0, 10).messages
        assert [m.store_timestamp_ms for m in ours]  # both stamped, at their own times
        for m in ours + theirs:
            m.store_timestamp_ms = 0
        assert ours == theirs
        assert store.query_by_key("T", "k4")[0].body == b"body-4"
    finally:
        other.shutdown()


def test_a_run_keeps_the_stores_own_checks(store):
    records = produce_records([message(1)])
    spans = b"\x00" * 18
    for topic, queue_id, host, reason in (
        ("bad topic", 0, b"\x00" * 8, "TOPIC_INVALID"),
        (TIMER_TOPIC, 0, b"\x00" * 8, "TOPIC_INVALID"),
        ("T", -1, b"\x00" * 8, "QUEUE_ID_INVALID"),
        ("T", 0, b"short", "FIELD_OUT_OF_RANGE"),
    ):
        with pytest.raises(InvalidMessageError) as refused:
            store.prepare_run(topic, queue_id, host, records, spans)
        assert refused.value.reason == reason


def test_runs_put_together_each_get_their_own_records(store):
    """Puts of one loop turn are appended as one batch: each run's answer holds its own
    records' places, however many records it has."""
    host = b"\x00" * 8

    def run(first: int, count: int):
        messages = [message(i, __MSG_TYPE="1") for i in range(first, first + count)]
        records = produce_records(messages)
        spans = produce_spans(records, count, store.config.max_message_body_bytes, "1")
        return store.prepare_run("T", 0, host, records, spans)

    async def scenario():
        return await asyncio.gather(
            store.put_prepared_async([run(0, 3)]),
            store.put_prepared_async([store.prepare(message(3)), run(4, 2)]),
            store.put_prepared_async([run(6, 1)]),
        )

    answers = asyncio.run(scenario())
    assert [[a.queue_offset for a in answer.appended] for answer in answers] == [
        [0, 1, 2],
        [3, 4, 5],
        [6],
    ]
    assert [m.body for m in store.get_messages("T", 0, 0, 10).messages] == [
        b"body-%d" % i for i in range(7)
    ]


def test_append_now_takes_a_turns_first_put_and_leaves_the_rest_to_the_combiner(store):
    """``append_now`` (the produce lane's put): appended at once as the turn's first put,
    and the puts after it in the same turn are combined as before; declined, with
    nothing written, when a put of the turn came first or waits, or the batch is over the
    limit."""

    async def scenario():
        assert store.appends_now()
        first = store.append_now([store.prepare(message(0))])
        assert not store.appends_now()
        after = store.append_now([store.prepare(message(1))])  # same turn: declined
        combined = await asyncio.gather(
            store.put_prepared_async([store.prepare(message(1))]),
            store.put_prepared_async([store.prepare(message(2))]),
        )
        await asyncio.sleep(0)  # the next turn
        put_first = asyncio.ensure_future(store.put_prepared_async([store.prepare(message(3))]))
        await asyncio.sleep(0)  # it appends as its turn's first put; this wakes in that turn
        behind_a_put = store.append_now([store.prepare(message(9))])
        await put_first
        await asyncio.sleep(0)
        huge = [store.prepare(Message("T", b"x" * 600_000)) for _ in range(15)]
        too_large = store.append_now(huge)
        await asyncio.sleep(0)
        assert store.appends_now()
        next_turn = store.append_now([store.prepare(message(4))])
        return first, after, combined, behind_a_put, too_large, next_turn

    first, after, combined, behind_a_put, too_large, next_turn = asyncio.run(scenario())
    assert first.ok and [a.queue_offset for a in first.appended] == [0]
    assert after is None and behind_a_put is None and too_large is None
    assert [answer.appended[0].queue_offset for answer in combined] == [1, 2]
    assert next_turn.ok and [a.queue_offset for a in next_turn.appended] == [4]
    assert [m.body for m in store.get_messages("T", 0, 0, 10).messages] == [
        b"body-%d" % i for i in range(5)
    ]


def test_append_now_declines_where_the_disk_must_be_waited_for(tmp_path):
    opened = MessageStore.open(
        StoreConfig(
            str(tmp_path / "store"),
            commitlog_segment_bytes=8 << 20,
            flush_mode=FlushMode.SYNC_FLUSH,
        )
    )
    try:

        async def scenario():
            assert not opened.appends_now()
            declined = opened.append_now([opened.prepare(message(0))])
            stored = await opened.put_prepared_async([opened.prepare(message(0))])
            return declined, stored

        declined, stored = asyncio.run(scenario())
        assert declined is None and stored.ok
        assert [a.queue_offset for a in stored.appended] == [0]
    finally:
        opened.shutdown()
