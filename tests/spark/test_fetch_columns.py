"""The Spark source's decoding of a Data.Fetch answer (ferrymq/spark/records.py over
ferrymq/spark/fetch_columns.py) without Spark: the batch is the one the Python-loop decoder
built before the walk moved to C (kept here as the oracle), and the rules that decoder
never defined (pieces without 0x01, invalid UTF-8, repeated names) give the rows written
out below. The C walk against its twin is tests/codec/test_speedups.py."""

from __future__ import annotations

import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from crc32c import crc32c
from hypothesis import given, settings

from ferrymq.codec.commitlog_record import HEADER, HEADER_SIZE, MESSAGE_MAGIC
from ferrymq.codec.properties import (
    KEY_SEPARATOR,
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    SYSTEM_PROPERTY_NAMES,
)
from ferrymq.spark.records import ARROW_SCHEMA, CorruptRecord, decode_batch
from tests.support.fetch_answers import FIRST_OFFSET, QUEUE_ID, TOPIC, fetch_answers, record

_TYPES = {field.name: field.type for field in ARROW_SCHEMA}
GROUP = "broker-a"


@settings(max_examples=500, deadline=None)
@given(fetch_answers())
def test_decode_batch_is_what_the_python_loop_decoder_gave(answer):
    """Same schema, same values, same next offset on answers of every shape the old decoder
    read (each piece with its 0x01): absent and repeated properties, empty keys, non-ASCII
    text, end offsets that cut the answer, no record at all."""
    records, end_offset = answer
    batch, next_offset = decode_batch(records, TOPIC, QUEUE_ID, end_offset, GROUP)
    batch.validate(full=True)
    expected, expected_next = decode_batch_before_the_c_walk(
        records, TOPIC, QUEUE_ID, end_offset, GROUP
    )
    assert batch.schema == ARROW_SCHEMA
    assert batch.to_pylist() == expected.to_pylist()
    assert next_offset == expected_next


def test_decode_batch_rows_written_out():
    """One answer, every column: a repeated TAGS (the last wins), a repeated user name (the
    map keeps both, in record order), a piece without 0x01 (a name with the empty value),
    an empty piece (skipped), KEYS with empty pieces (dropped), a record without
    properties (nulls, no keys, an empty map); the end offset leaves the third record out."""
    records = b"".join(
        [
            record(
                FIRST_OFFSET,
                b"\x00body",
                "UNIQ_KEY\x01id-1\x02TAGS\x01a\x02x\x01é\x02TAGS\x01b\x02lonely\x02\x02"
                "x\x01second\x02KEYS\x01 k1  k2 \x02__MSG_TYPE\x011\x02".encode(),
            ),
            record(FIRST_OFFSET + 2, b""),
            record(FIRST_OFFSET + 3, b"late", b"TAGS\x01c\x02"),
        ]
    )
    batch, next_offset = decode_batch(records, TOPIC, QUEUE_ID, FIRST_OFFSET + 3, GROUP)
    utc = datetime.UTC

    def at_ms(ms: int) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(ms / 1000, utc)

    assert next_offset == FIRST_OFFSET + 3
    assert batch.to_pylist() == [
        {
            "topic": TOPIC,
            "queue_id": QUEUE_ID,
            "queue_offset": FIRST_OFFSET,
            "message_id": "id-1",
            "keys": ["k1", "k2"],
            "tag": "b",
            "body": b"\x00body",
            "properties": [("x", "é"), ("lonely", ""), ("x", "second")],
            "born_timestamp": at_ms(1_700_000_000_000 + FIRST_OFFSET),
            "store_timestamp": at_ms(1_700_000_000_500 + FIRST_OFFSET),
            "broker_group": GROUP,
        },
        {
            "topic": TOPIC,
            "queue_id": QUEUE_ID,
            "queue_offset": FIRST_OFFSET + 2,
            "message_id": None,
            "keys": [],
            "tag": None,
            "body": b"",
            "properties": [],
            "born_timestamp": at_ms(1_700_000_000_002 + FIRST_OFFSET),
            "store_timestamp": at_ms(1_700_000_000_502 + FIRST_OFFSET),
            "broker_group": GROUP,
        },
    ]


def test_decode_batch_of_an_empty_answer_is_an_empty_batch():
    batch, next_offset = decode_batch(b"", TOPIC, QUEUE_ID, 1 << 62, GROUP)
    assert (batch.num_rows, batch.schema, next_offset) == (0, ARROW_SCHEMA, -1)


def test_decode_batch_refuses_properties_that_are_not_utf8_with_a_precise_error():
    """The old decoder failed with Arrow's "Invalid UTF8 payload" and no record named."""
    records = record(FIRST_OFFSET, b"b", b"ok\x01\xc3\x28\x02")
    message = f"{TOPIC}/{QUEUE_ID}@{FIRST_OFFSET}: properties are not UTF-8"
    with pytest.raises(CorruptRecord, match=message):
        decode_batch(records, TOPIC, QUEUE_ID, 1 << 62, GROUP)


def decode_batch_before_the_c_walk(
    records: bytes, topic: str, queue_id: int, end_offset: int, broker_group: str
) -> tuple[pa.RecordBatch, int]:
    """decode_batch as it was before the walk moved to C (Python loop, Arrow kernels for
    the properties): the oracle for answers it could read."""
    unpack = HEADER.unpack_from
    topic_bytes = topic.encode()
    offsets: list[int] = []
    bodies: list[bytes] = []
    raw_properties: list[bytes] = []
    born: list[int] = []
    stored: list[int] = []
    position, end = 0, len(records)
    next_offset = -1
    while position < end:
        (
            size,
            magic,
            body_crc,
            record_queue,
            _flag,
            queue_offset,
            _physical,
            _sys_flag,
            born_ms,
            _born_host,
            store_ms,
            _store_host,
            _reconsume,
            _prepared,
            body_length,
        ) = unpack(records, position)
        if magic != MESSAGE_MAGIC or record_queue != queue_id:
            raise CorruptRecord(f"{topic}/{queue_id}: no message record at byte {position}")
        if queue_offset >= end_offset:
            break
        body_at = position + HEADER_SIZE
        topic_at = body_at + body_length
        properties_at = topic_at + 1 + records[topic_at]
        if records[topic_at + 1 : properties_at] != topic_bytes:
            raise CorruptRecord(f"{topic}/{queue_id}@{queue_offset}: record of another topic")
        body = records[body_at:topic_at]
        if crc32c(body) != body_crc:
            raise CorruptRecord(f"{topic}/{queue_id}@{queue_offset}: body CRC mismatch")
        bodies.append(body)
        raw_properties.append(records[properties_at + 2 : position + size])
        offsets.append(queue_offset)
        born.append(born_ms)
        stored.append(store_ms)
        next_offset = queue_offset + 1
        position += size
    count = len(offsets)
    names, values, owners = _property_pairs(raw_properties)
    message_ids = _one_per_row(names, values, owners, PROPERTY_UNIQ_KEY, count)
    tags = _one_per_row(names, values, owners, PROPERTY_TAGS, count)
    key_text = pc.fill_null(_one_per_row(names, values, owners, PROPERTY_KEYS, count), "")
    keys = _lists_without_empty(pc.split_pattern(key_text, KEY_SEPARATOR), count)
    user = pc.invert(pc.is_in(names, _SYSTEM_NAMES))
    properties = pa.MapArray.from_arrays(
        _offsets_of(owners[_numpy(user)], count),
        names.filter(user),
        values.filter(user),
        _TYPES["properties"],
    )
    columns = [
        pa.array([topic] * count, _TYPES["topic"]),
        pa.array(np.full(count, queue_id, np.int32), _TYPES["queue_id"]),
        pa.array(offsets, _TYPES["queue_offset"]),
        message_ids,
        keys,
        tags,
        pa.array(bodies, _TYPES["body"]),
        properties,
        pa.array(np.array(born, np.int64) * 1000, _TYPES["born_timestamp"]),
        pa.array(np.array(stored, np.int64) * 1000, _TYPES["store_timestamp"]),
        pa.array([broker_group] * count, _TYPES["broker_group"]),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA), next_offset


_SYSTEM_NAMES = pa.array(sorted(SYSTEM_PROPERTY_NAMES), pa.string())


def _numpy(mask: pa.Array) -> np.ndarray:
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)


def _offsets_of(owners: np.ndarray, count: int) -> pa.Array:
    """List offsets for ``count`` rows from the (sorted) row index of every element."""
    offsets = np.zeros(count + 1, np.int32)
    np.cumsum(np.bincount(owners, minlength=count), out=offsets[1:])
    return pa.array(offsets)


def _property_pairs(raw: list[bytes]) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """Every ``name\x01value`` pair of every record: names, values, and the row each
    belongs to (ascending)."""
    text = pa.array(raw, pa.binary()).cast(pa.string())  # checks UTF-8
    pairs = pc.split_pattern(text, PROPERTY_SEPARATOR)
    flat = pairs.flatten()
    owners = np.asarray(pc.list_parent_indices(pairs))
    present = pc.not_equal(flat, "")  # the separator ends every pair: one empty tail each
    split = pc.split_pattern(flat.filter(present), NAME_VALUE_SEPARATOR, max_splits=1)
    return pc.list_element(split, 0), pc.list_element(split, 1), owners[_numpy(present)]


def _one_per_row(
    names: pa.Array, values: pa.Array, owners: np.ndarray, name: str, count: int
) -> pa.Array:
    """The value of property ``name`` for each row (null where a row has none)."""
    mask = pc.equal(names, name)
    rows = owners[_numpy(mask)]
    where = np.full(count, -1, np.int64)
    where[rows] = np.arange(len(rows))
    return pc.take(values.filter(mask), pa.array(where, mask=where < 0))


def _lists_without_empty(lists: pa.Array, count: int) -> pa.Array:
    flat = lists.flatten()
    keep = pc.not_equal(flat, "")
    owners = np.asarray(pc.list_parent_indices(lists))[_numpy(keep)]
    return pa.ListArray.from_arrays(_offsets_of(owners, count), flat.filter(keep), _TYPES["keys"])
