"""Stored records (as Data.Fetch returns them) straight into Arrow columns.

One Fetch answer becomes one ``pyarrow.RecordBatch`` in the source's schema: the per-record
walk (checks, body CRC, the split of properties) runs in C and hands back every column as
raw buffers (ferrymq/spark/fetch_columns.py has the rules and their Python twin); Arrow
wraps those buffers without copying them, so no Python code runs per row.
"""

from __future__ import annotations

import pyarrow as pa

from ferrymq.spark.fetch_columns import CorruptRecord, FetchColumns, fetch_columns

__all__ = ["ARROW_SCHEMA", "COLUMNS", "SCHEMA_DDL", "CorruptRecord", "decode_batch"]

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


def decode_batch(
    records: bytes | memoryview, topic: str, queue_id: int, end_offset: int, broker_group: str
) -> tuple[pa.RecordBatch, int]:
    """The records of ``records`` with queue offsets below ``end_offset``, as one batch,
    and the offset after the last one taken (-1 with none); ``CorruptRecord`` for an
    answer that breaks the rules of ferrymq/spark/fetch_columns.py."""
    found = fetch_columns(records, topic, queue_id, end_offset)
    count = found.count
    columns = [
        pa.repeat(pa.scalar(topic, _TYPES["topic"]), count),
        pa.repeat(pa.scalar(queue_id, _TYPES["queue_id"]), count),
        _fixed(_TYPES["queue_offset"], count, found.queue_offsets),
        _strings(count, found.message_id_validity, found.message_id_offsets, found.message_id_data),
        _keys(found),
        _strings(count, found.tag_validity, found.tag_offsets, found.tag_data),
        _binary(count, found.body_offsets, found.body_data),
        _properties(found),
        _fixed(_TYPES["born_timestamp"], count, found.born_us),
        _fixed(_TYPES["store_timestamp"], count, found.store_us),
        pa.repeat(pa.scalar(broker_group, _TYPES["broker_group"]), count),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA), found.next_offset


def _fixed(type_: pa.DataType, count: int, values: bytes) -> pa.Array:
    return pa.Array.from_buffers(type_, count, [None, pa.py_buffer(values)], null_count=0)


def _binary(count: int, offsets: bytes, data: bytes | pa.Buffer) -> pa.Array:
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.binary(), count, buffers, null_count=0)


def _strings(count: int, validity: bytes | None, offsets: bytes, data: bytes) -> pa.Array:
    """A string column; null where ``validity``'s bit is clear (Arrow counts them)."""
    bitmap = None if validity is None else pa.py_buffer(validity)
    null_count = 0 if validity is None else -1
    buffers = [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.string(), count, buffers, null_count=null_count)


def _element_count(offsets: bytes) -> int:
    return len(offsets) // 4 - 1  # int32 offsets, one more than the elements


def _keys(found: FetchColumns) -> pa.Array:
    keys = _strings(_element_count(found.key_offsets), None, found.key_offsets, found.key_data)
    buffers = [None, pa.py_buffer(found.keys_offsets)]
    return pa.Array.from_buffers(
        _TYPES["keys"], found.count, buffers, null_count=0, children=[keys]
    )


def _properties(found: FetchColumns) -> pa.Array:
    pairs = _element_count(found.property_name_offsets)
    names = _strings(pairs, None, found.property_name_offsets, found.property_name_data)
    values = _strings(pairs, None, found.property_value_offsets, found.property_value_data)
    type_ = _TYPES["properties"]
    entries = pa.StructArray.from_arrays(
        [names, values], fields=[type_.key_field, type_.item_field]
    )
    buffers = [None, pa.py_buffer(found.property_offsets)]
    return pa.Array.from_buffers(type_, found.count, buffers, null_count=0, children=[entries])
