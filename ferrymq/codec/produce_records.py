"""Produce records: how a client hands messages to ``Data.Produce`` (proto/ferrymq/data.proto).

One record is ``body_length int32 | properties_length uint16 | born_timestamp_ms int64 |
body | properties``, big-endian, with the properties already in the store's encoding
(``name 0x01 value 0x02``, ``ferrymq.codec.properties``): the node checks them and writes
them as they are, so a message costs it a few slices instead of a protobuf message and a
re-encoding. The C scanner of ``ferrymq/codec/_speedups.c`` reads the same layout.
"""

from __future__ import annotations

import struct

PRODUCE_HEAD = struct.Struct(">iHq")  # body length, properties length, born timestamp ms
PRODUCE_HEAD_SIZE = PRODUCE_HEAD.size
# Where one checked record lies in its request (``ProduceScanner.spans``): body at, body
# length, properties length, born timestamp ms. The store appends a request's records from
# these spans (``store.commitlog.PreparedRun``) without a Python object per record.
PRODUCE_SPAN = struct.Struct("<IIHq")
PRODUCE_PROPERTIES_MAX_BYTES = 0xFFFF  # what properties_length can say
MAX_PRODUCE_RECORDS = 4096  # per request, as the node accepts


class MalformedRecords(ValueError):
    """The records cannot be split from this one on: it and every later one are refused."""


def produce_record_at(records: bytes, position: int) -> tuple[int, bytes, bytes, int]:
    """The produce record at ``position``: (next position, body, encoded properties, born
    timestamp). ``MalformedRecords`` when its lengths do not fit the buffer."""
    if position + PRODUCE_HEAD_SIZE > len(records):
        raise MalformedRecords(f"record at byte {position} is cut short")
    body_length, properties_length, born_ms = PRODUCE_HEAD.unpack_from(records, position)
    body_at = position + PRODUCE_HEAD_SIZE
    properties_at = body_at + body_length
    end = properties_at + properties_length
    if body_length < 0 or end > len(records):
        raise MalformedRecords(f"record at byte {position} has lengths beyond the request")
    return end, records[body_at:properties_at], records[properties_at:end], born_ms
