"""One Fetch answer's records as Arrow-ready column buffers: the per-record loop of the
Spark source.

``fetch_columns_in_python`` is the specification; ``fetch_columns`` runs the same walk in C
(``fetch_columns`` in ferrymq/codec/_speedups.c) and falls back to the twin only where the
C declines, so every refusal is raised here, with its precise message
(tests/codec/test_speedups.py compares the two on generated answers).

The walk, record by record from byte 0 (the layout is ferrymq/codec/commitlog_record.py):

- a record must be a message record (MESSAGE_MAGIC) of the queue asked for; one whose
  queue offset is ``end_offset`` or more ends the walk (it is not taken, nothing after it
  is read);
- its lengths must fit each other and the answer, its topic must be the topic asked for,
  its body must match BODYCRC, its raw properties must be UTF-8, and its born and store
  timestamps (ms) must have a value in int64 microseconds;
- properties are the non-empty pieces between 0x02 separators (a last piece without one
  counts), each split at its first 0x01 into name and value; a piece without 0x01 is a
  name with the empty value, as ``decode_properties`` reads it for every other reader;
- UNIQ_KEY, TAGS and KEYS fill the message_id, tag and keys columns: null (keys: an empty
  list) where absent, the last value where a name repeats; keys are KEYS split at
  KEY_SEPARATOR, empty pieces dropped;
- every pair whose name is not in SYSTEM_PROPERTY_NAMES goes to the properties map, in
  record order, repeats included (nothing the record holds is dropped).

Anything else is ``CorruptRecord``, which names the topic, queue and byte (or offset): the
records were checked when written, so this is the paired check after the network.
"""

from __future__ import annotations

import struct
from array import array
from dataclasses import dataclass, fields

import pyarrow as pa
from crc32c import crc32c

from ferrymq.codec import _speedups as speedups
from ferrymq.codec.commitlog_record import HEADER, HEADER_SIZE, MESSAGE_MAGIC, MIN_RECORD_SIZE
from ferrymq.codec.properties import (
    KEY_SEPARATOR,
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    SYSTEM_PROPERTY_NAMES,
)

# Arrow's string and binary columns address their data with int32 offsets.
ANSWER_MAX_BYTES = (1 << 31) - 1
# Timestamps become Arrow's int64 microseconds: a millisecond value past these cannot.
TIMESTAMP_MS_MAX = ((1 << 63) - 1) // 1000
TIMESTAMP_MS_MIN = -TIMESTAMP_MS_MAX
_PROPERTIES_LENGTH = struct.Struct(">H")


class CorruptRecord(RuntimeError):
    """A Fetch answer that is not what the node sends: the source's task fails with it."""


@dataclass(frozen=True, slots=True)
class FetchColumns:
    """The columns of ``count`` rows as raw buffers in Arrow's layouts (native byte order):
    int64 values, int32 offsets (``count + 1`` of them, or one more than the children),
    validity bitmaps with bit ``i % 8`` of byte ``i // 8`` set where row ``i`` has a value.
    Each is ``bytes``, but for the C walk's ``body_data`` (a ``pyarrow.Buffer``).
    ``next_offset`` is the queue offset after the last row taken (-1 with no row)."""

    count: int
    next_offset: int
    queue_offsets: bytes
    born_us: bytes
    store_us: bytes
    body_offsets: bytes
    body_data: bytes | pa.Buffer
    message_id_validity: bytes
    message_id_offsets: bytes
    message_id_data: bytes
    tag_validity: bytes
    tag_offsets: bytes
    tag_data: bytes
    keys_offsets: bytes  # per row, into the keys
    key_offsets: bytes  # per key, into key_data
    key_data: bytes
    property_offsets: bytes  # per row, into the pairs
    property_name_offsets: bytes
    property_name_data: bytes
    property_value_offsets: bytes
    property_value_data: bytes


class _Strings:
    """An Arrow string column being built: int32 offsets and data."""

    def __init__(self) -> None:
        self.offsets = array("i", [0])
        self.data = bytearray()

    def append(self, value: bytes) -> None:
        self.data += value
        self.offsets.append(len(self.data))


def _bitmap(present: list[bool]) -> bytes:
    bitmap = bytearray((len(present) + 7) // 8)
    for row, has_value in enumerate(present):
        if has_value:
            bitmap[row // 8] |= 1 << (row % 8)
    return bytes(bitmap)


_SEPARATOR = PROPERTY_SEPARATOR.encode()
_NAME_VALUE = NAME_VALUE_SEPARATOR.encode()
_KEY_SEPARATOR = KEY_SEPARATOR.encode()
_UNIQ_KEY = PROPERTY_UNIQ_KEY.encode()
_TAGS = PROPERTY_TAGS.encode()
_KEYS = PROPERTY_KEYS.encode()
_SYSTEM_NAMES = tuple(sorted(name.encode() for name in SYSTEM_PROPERTY_NAMES))


def _record_properties(where: str, raw: bytes) -> list[tuple[bytes, bytes]]:
    try:
        raw.decode()
    except UnicodeDecodeError as error:
        raise CorruptRecord(f"{where}: properties are not UTF-8 ({error.reason})") from None
    pairs = []
    for piece in raw.split(_SEPARATOR):
        if piece:
            name, _, value = piece.partition(_NAME_VALUE)
            pairs.append((name, value))
    return pairs


def fetch_columns_in_python(
    records: bytes, topic: str, queue_id: int, end_offset: int
) -> FetchColumns:
    """The rows of ``records`` (a Fetch answer of ``topic``/``queue_id``) below
    ``end_offset``, by the rules of this module's docstring."""
    if len(records) > ANSWER_MAX_BYTES:
        raise CorruptRecord(
            f"{topic}/{queue_id}: an answer of {len(records)} bytes, over the "
            f"{ANSWER_MAX_BYTES} Arrow's int32 offsets address"
        )
    topic_bytes = topic.encode()
    queue_offsets, born_us, store_us = array("q"), array("q"), array("q")
    bodies, message_ids, tags = _Strings(), _Strings(), _Strings()
    message_id_present: list[bool] = []
    tag_present: list[bool] = []
    keys_offsets, keys = array("i", [0]), _Strings()
    property_offsets, names, values = array("i", [0]), _Strings(), _Strings()
    position, end = 0, len(records)
    next_offset = -1
    while position < end:
        if end - position < HEADER_SIZE:
            raise CorruptRecord(
                f"{topic}/{queue_id}: {end - position} bytes at byte {position}, "
                f"less than a record header ({HEADER_SIZE})"
            )
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
        ) = HEADER.unpack_from(records, position)
        if magic != MESSAGE_MAGIC:
            raise CorruptRecord(
                f"{topic}/{queue_id}: no message record at byte {position} (magic 0x{magic:08X})"
            )
        if record_queue != queue_id:
            raise CorruptRecord(
                f"{topic}/{queue_id}: the record at byte {position} is of queue {record_queue}"
            )
        if queue_offset >= end_offset:
            break
        where = f"{topic}/{queue_id}@{queue_offset}"
        record_end = position + size
        if size < MIN_RECORD_SIZE:
            raise CorruptRecord(
                f"{where}: record size {size} at byte {position}, below the "
                f"{MIN_RECORD_SIZE} of an empty record"
            )
        if record_end > end:
            raise CorruptRecord(
                f"{where}: record size {size} at byte {position} does not fit the "
                f"{end - position} bytes left"
            )
        body_at = position + HEADER_SIZE
        topic_at = body_at + body_length
        if body_length < 0 or topic_at + 3 > record_end:
            raise CorruptRecord(f"{where}: body length {body_length} disagrees with size {size}")
        properties_at = topic_at + 1 + records[topic_at]
        if properties_at + 2 > record_end:
            raise CorruptRecord(f"{where}: its topic runs past its size {size}")
        (properties_length,) = _PROPERTIES_LENGTH.unpack_from(records, properties_at)
        if properties_at + 2 + properties_length != record_end:
            raise CorruptRecord(
                f"{where}: properties length {properties_length} disagrees with size {size}"
            )
        if records[topic_at + 1 : properties_at] != topic_bytes:
            raise CorruptRecord(f"{where}: record of another topic")
        body = records[body_at:topic_at]
        if crc32c(body) != body_crc:
            raise CorruptRecord(f"{where}: body CRC mismatch")
        for what, ms in (("born", born_ms), ("store", store_ms)):
            if not TIMESTAMP_MS_MIN <= ms <= TIMESTAMP_MS_MAX:
                raise CorruptRecord(f"{where}: {what} timestamp {ms} ms has no int64 µs value")
        message_id = tag = key_text = None
        for name, value in _record_properties(where, records[properties_at + 2 : record_end]):
            if name == _UNIQ_KEY:
                message_id = value
            elif name == _TAGS:
                tag = value
            elif name == _KEYS:
                key_text = value
            if name not in _SYSTEM_NAMES:
                names.append(name)
                values.append(value)
        property_offsets.append(len(names.offsets) - 1)
        message_id_present.append(message_id is not None)
        message_ids.append(message_id or b"")
        tag_present.append(tag is not None)
        tags.append(tag or b"")
        for key in (key_text or b"").split(_KEY_SEPARATOR):
            if key:
                keys.append(key)
        keys_offsets.append(len(keys.offsets) - 1)
        bodies.append(body)
        queue_offsets.append(queue_offset)
        born_us.append(born_ms * 1000)
        store_us.append(store_ms * 1000)
        next_offset = queue_offset + 1
        position = record_end
    return FetchColumns(
        count=len(queue_offsets),
        next_offset=next_offset,
        queue_offsets=queue_offsets.tobytes(),
        born_us=born_us.tobytes(),
        store_us=store_us.tobytes(),
        body_offsets=bodies.offsets.tobytes(),
        body_data=bytes(bodies.data),
        message_id_validity=_bitmap(message_id_present),
        message_id_offsets=message_ids.offsets.tobytes(),
        message_id_data=bytes(message_ids.data),
        tag_validity=_bitmap(tag_present),
        tag_offsets=tags.offsets.tobytes(),
        tag_data=bytes(tags.data),
        keys_offsets=keys_offsets.tobytes(),
        key_offsets=keys.offsets.tobytes(),
        key_data=bytes(keys.data),
        property_offsets=property_offsets.tobytes(),
        property_name_offsets=names.offsets.tobytes(),
        property_name_data=bytes(names.data),
        property_value_offsets=values.offsets.tobytes(),
        property_value_data=bytes(values.data),
    )


_BODY_DATA = [field.name for field in fields(FetchColumns)].index("body_data")


def fetch_columns_in_c(
    records: bytes, topic: str, queue_id: int, end_offset: int
) -> FetchColumns | None:
    """The C walk's answer, or None where it declines (the twin then raises). Its
    ``body_data`` is a ``pyarrow.Buffer`` from Arrow's memory pool, which keeps its pages
    from one answer to the next: fresh memory for every answer's bodies (about 1 MiB)
    cost more in page faults than the whole walk."""
    bodies = pa.allocate_buffer(len(records))
    buffers = speedups.fetch_columns(
        records,
        topic.encode(),
        queue_id,
        end_offset,
        _UNIQ_KEY,
        _TAGS,
        _KEYS,
        _KEY_SEPARATOR,
        _SYSTEM_NAMES,
        bodies,
    )
    if buffers is None:
        return None
    columns = list(buffers)
    columns[_BODY_DATA] = bodies.slice(0, buffers[_BODY_DATA])
    return FetchColumns(*columns)


def fetch_columns(
    records: bytes | memoryview, topic: str, queue_id: int, end_offset: int
) -> FetchColumns:
    """``fetch_columns_in_python``'s answer, computed in C where the C accepts."""
    columns = fetch_columns_in_c(records, topic, queue_id, end_offset)
    if columns is None:
        columns = fetch_columns_in_python(bytes(records), topic, queue_id, end_offset)
    return columns
