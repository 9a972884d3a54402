"""A protobuf message whose one large bytes field goes around protobuf: the records of a
FERRY_FETCH answer (``FetchResponse``, out of the node) and of a FERRY_PRODUCE request
(``ProduceRequest``, into it).

Such a message is mostly its records (a produce request up to 4 MiB, a fetch answer up
to 1 MiB). Through protobuf they were copied three times on the way out (joined, into the
message, into its encoding) and twice on the way in (into the message, out as ``bytes``).
Protobuf lets a field come anywhere in a message (the last of a repeated scalar wins), so
``encode`` appends the records field to the encoding of every other field, in one join,
and ``split`` takes the records out of any encoding as a view, leaving the rest for
protobuf. Every protobuf reader reads these bytes as the same message. The codec stays
free of protobuf: the node and the SDK encode and parse the other fields themselves.
"""

from __future__ import annotations

from ferrymq.codec import _speedups as speedups

# The records fields (proto/ferrymq/data.proto).
FETCH_RECORDS_FIELD = 3  # FetchResponse.records
PRODUCE_RECORDS_FIELD = 5  # ProduceRequest.records
_LENGTH_DELIMITED = 2


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode(head: bytes, records: list[bytes], field: int) -> bytes:
    """``head`` (the encoding of every other field) with ``records``, joined, as the bytes
    field numbered ``field``."""
    size = sum(map(len, records))
    if size == 0:
        return head
    return b"".join([head, _varint(field << 3 | _LENGTH_DELIMITED), _varint(size), *records])


def _read_varint(body: memoryview, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(body) or shift > 63:
            raise ValueError("truncated or overlong varint")
        byte = body[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7


def _value_span(body: memoryview, wire_type: int, at: int) -> tuple[int, int]:
    """Where the value of a field of ``wire_type`` starting at ``at`` begins and ends."""
    if wire_type == 0:
        return at, _read_varint(body, at)[1]
    if wire_type == 1:
        return at, at + 8
    if wire_type == 5:
        return at, at + 4
    if wire_type == _LENGTH_DELIMITED:
        length, start = _read_varint(body, at)
        return start, start + length
    raise ValueError(f"wire type {wire_type} in a protobuf message")


def split(body: bytes, field: int) -> tuple[bytes, memoryview]:
    """The encoding of every field but the bytes field numbered ``field``, and that field
    (the last given), a view of ``body``; ``ValueError`` when ``body`` is not a sequence of
    protobuf fields. The walk is in C (``split_field``, ferrymq/codec/_speedups.c): in
    Python it cost as much as protobuf's two copies of a produce request's records."""
    head, start, end = speedups.split_field(body, field)
    return head, memoryview(body)[start:end]


def split_in_python(body: bytes, field: int) -> tuple[bytes, memoryview]:
    """What ``split`` does: its specification."""
    view = memoryview(body)
    kept: list[memoryview] = []
    records = view[0:0]
    at = 0
    while at < len(view):
        tag, value_at = _read_varint(view, at)
        start, end = _value_span(view, tag & 7, value_at)
        if end > len(view):
            raise ValueError("a field runs past the end of the message")
        if tag >> 3 == field and tag & 7 == _LENGTH_DELIMITED:
            records = view[start:end]
        else:
            kept.append(view[at:end])
        at = end
    return b"".join(kept), records
