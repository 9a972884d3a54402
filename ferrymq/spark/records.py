"""Stored records (DESIGN §3.1, as Data.Fetch returns them) straight into Arrow columns.

One Fetch answer becomes one ``pyarrow.RecordBatch`` in the source's schema: a single pass
over the records that fills plain lists (no per-message objects), then one Arrow array per
column. The body CRC is checked on the way (the record was validated when written; this is
the paired check after it crossed the network).
"""

from __future__ import annotations

import pyarrow as pa
from crc32c import crc32c

from store.commitlog_record import HEADER, HEADER_SIZE, MESSAGE_MAGIC
from store.message import (
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
    and the offset after the last one taken."""
    unpack = HEADER.unpack_from
    system = SYSTEM_PROPERTY_NAMES
    topic_bytes = topic.encode()
    offsets: list[int] = []
    ids: list[str | None] = []
    key_lists: list[int] = [0]
    keys_flat: list[str] = []
    tags: list[str | None] = []
    bodies: list[bytes] = []
    property_offsets: list[int] = [0]
    property_names: list[str] = []
    property_values: list[str] = []
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
        properties_length = (records[properties_at] << 8) | records[properties_at + 1]
        text = records[properties_at + 2 : properties_at + 2 + properties_length].decode()
        message_id = tag = None
        for pair in text.split(PROPERTY_SEPARATOR):
            if not pair:
                continue
            name, _, value = pair.partition(NAME_VALUE_SEPARATOR)
            if name in system:
                if name == PROPERTY_UNIQ_KEY:
                    message_id = value
                elif name == PROPERTY_TAGS:
                    tag = value
                elif name == PROPERTY_KEYS:
                    keys_flat.extend(k for k in value.split(KEY_SEPARATOR) if k)
            else:
                property_names.append(name)
                property_values.append(value)
        key_lists.append(len(keys_flat))
        property_offsets.append(len(property_names))
        offsets.append(queue_offset)
        ids.append(message_id)
        tags.append(tag)
        bodies.append(body)
        born.append(born_ms * 1000)
        stored.append(store_ms * 1000)
        next_offset = queue_offset + 1
        position += size
    count = len(offsets)
    columns = [
        pa.array([topic] * count, _TYPES["topic"]),
        pa.array([queue_id] * count, _TYPES["queue_id"]),
        pa.array(offsets, _TYPES["queue_offset"]),
        pa.array(ids, _TYPES["message_id"]),
        pa.ListArray.from_arrays(
            pa.array(key_lists, pa.int32()), pa.array(keys_flat, pa.string()), _TYPES["keys"]
        ),
        pa.array(tags, _TYPES["tag"]),
        pa.array(bodies, _TYPES["body"]),
        pa.MapArray.from_arrays(
            pa.array(property_offsets, pa.int32()),
            pa.array(property_names, pa.string()),
            pa.array(property_values, pa.string()),
            _TYPES["properties"],
        ),
        pa.array(born, _TYPES["born_timestamp"]),
        pa.array(stored, _TYPES["store_timestamp"]),
        pa.array([broker_group] * count, _TYPES["broker_group"]),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA), next_offset
