"""The store's batch fast paths: ``prepare`` with encoded properties, ``put_prepared_async``
and ``IndexFile.put_all`` (which must leave exactly the bytes ``put`` leaves)."""

from __future__ import annotations

import asyncio
import random

import pytest

from ferrymq.codec.errors import InvalidMessageError
from ferrymq.codec.properties import encode_properties
from store.config import StoreConfig
from store.index_file import IndexFile
from store.message import Message
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
    for start in range(0, 300, 64):  # batches that share slots with earlier ones
        many.put_all(entries[start : start + 64])
    one.write_header(99)
    many.write_header(99)
    assert one.map[:] == many.map[:]
    assert many.lookup(entries[5][0], 0, 1 << 62, 10) == one.lookup(entries[5][0], 0, 1 << 62, 10)
