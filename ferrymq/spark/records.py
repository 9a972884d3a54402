"""Stored records (as Data.Fetch returns them) straight into Arrow columns.

One Fetch answer becomes one ``pyarrow.RecordBatch`` in the source's schema: a single pass
over the records that fills plain lists (no per-message objects), then one Arrow array per
column. The body CRC is checked on the way (the record was validated when written; this is
the paired check after it crossed the network).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from crc32c import crc32c

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

SCHEMA_DDL = (
    "topic string, queue_id int, queue_offset long, message_id string, keys array<string>, "
    "tag string, body binary, properties map<string,string>, born_timestamp timestamp, "
    "store_timestamp timestamp, broker_group string"
)
COLUMNS = (
    "topic",
    "queue_id",
    "queue_offset",
    "message_id",
    "keys",
    "tag",
    "body",
    "properties",
    "born_timestamp",
    "store_timestamp",
    "broker_group",
)

ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("queue_id", pa.int32()),
        pa.field("queue_offset", pa.int64()),
        pa.field("message_id", pa.string()),
        pa.field("keys", pa.list_(pa.field("element", pa.string()))),
        pa.field("tag", pa.string()),
        pa.field("body", pa.binary()),
        pa.field(
            "properties",
            pa.map_(pa.field("key", pa.string(), nullable=False), pa.field("value", pa.string())),
        ),
        pa.field("born_timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("store_timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("broker_group", pa.string()),
    ]
)

_TYPES = {field.name: field.type for field in ARROW_SCHEMA}


class CorruptRecord(RuntimeError):
    pass


def decode_batch(
    records: bytes, topic: str, queue_id: int, end_offset: int, broker_group: str
) -> tuple[pa.RecordBatch, int]:
    """The records of ``records`` with queue offsets below ``end_offset``, as one batch,
    and the offset after the last one taken.

    The Python loop only walks the records (header, body, raw properties); properties are
    split into names and values by Arrow kernels for the whole batch at once, which costs
    about 2 µs per 1 KiB message instead of 3 with a per-message split."""
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
