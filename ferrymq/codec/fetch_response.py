"""A ``FetchResponse`` (FERRY_FETCH's answer) with its records as the store gathered them.

An answer is mostly its records (up to 1 MiB). Through protobuf they were copied three
times on the way out (joined, into the message, into its encoding) and twice on the way in
(into the message, out as ``bytes``). Protobuf lets a field come anywhere in a message
(the last of a repeated scalar wins), so ``encode`` writes every other field with protobuf
and appends the records field (3) itself, in one join; ``decode`` takes the records as a
view of the answer and hands the rest to protobuf. Every protobuf reader reads these bytes
as the same ``FetchResponse``, and ``decode`` reads any encoding of one, whatever the
order of its fields.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from ferrymq.protocol.ferrymq import data_pb2 as data

RECORDS_FIELD = data.FetchResponse.DESCRIPTOR.fields_by_name["records"].number
_LENGTH_DELIMITED = 2
_RECORDS_TAG = bytes([RECORDS_FIELD << 3 | _LENGTH_DELIMITED])


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode(head: data.FetchResponse, records: list[bytes]) -> bytes:
    """The encoding of ``head`` with ``records`` (joined) as its records field."""
    assert not head.records, "the records come as a list, not in the head"
    size = sum(map(len, records))
    if size == 0:
        return head.SerializeToString()
    return b"".join([head.SerializeToString(), _RECORDS_TAG, _varint(size), *records])


def _read_varint(body: memoryview, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(body) or shift > 63:
            raise DecodeError("truncated or overlong varint")
        byte = body[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7


def _field_end(body: memoryview, wire_type: int, at: int) -> tuple[int, int]:
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
    raise DecodeError(f"wire type {wire_type} in a FetchResponse")


def decode(body: bytes) -> tuple[data.FetchResponse, memoryview]:
    """The answer's fields (records left empty) and its records, a view of ``body``;
    ``DecodeError`` when ``body`` is no FetchResponse."""
    view = memoryview(body)
    kept: list[memoryview] = []  # every field but the records, as encoded
    records = view[0:0]
    at = 0
    while at < len(view):
        tag, value_at = _read_varint(view, at)
        start, end = _field_end(view, tag & 7, value_at)
        if end > len(view):
            raise DecodeError("a field runs past the end of the FetchResponse")
        if tag >> 3 == RECORDS_FIELD and tag & 7 == _LENGTH_DELIMITED:
            records = view[start:end]
        else:
            kept.append(view[at:end])
        at = end
    head = data.FetchResponse.FromString(b"".join(kept))
    return head, records
