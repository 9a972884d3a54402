"""Data.Fetch answers (CommitLog records back to back) for the tests of the Spark source's
decoding: hypothesis strategies for well-formed answers with awkward properties, and the
corruptions a reader must refuse."""

from __future__ import annotations

import dataclasses
import struct

from hypothesis import strategies as st

from ferrymq.codec.commitlog_record import OFFSET_BODY_CRC, encode, record_size
from ferrymq.codec.properties import (
    PROPERTY_KEYS,
    PROPERTY_MESSAGE_TYPE,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from ferrymq.spark.fetch_columns import FetchColumns

TOPIC = "orders-é"
QUEUE_ID = 3
FIRST_OFFSET = 1000

# Names that pick a column (UNIQ_KEY, TAGS, KEYS), a system name kept out of the map, user
# names (empty and non-ASCII among them).
NAMES = [PROPERTY_UNIQ_KEY, PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_MESSAGE_TYPE, "user", "", "ключ"]
VALUE_TEXT = "ab \u3000é€\U0001f600\x01"  # a value may hold 0x01: a pair splits at its first


def record(
    queue_offset: int,
    body: bytes = b"body",
    properties: bytes = b"",
    *,
    topic: str = TOPIC,
    queue_id: int = QUEUE_ID,
) -> bytes:
    topic_bytes = topic.encode()
    return encode(
        size=record_size(len(body), len(topic_bytes), len(properties)),
        body=body,
        topic=topic_bytes,
        properties=properties,
        queue_id=queue_id,
        flag=0,
        queue_offset=queue_offset,
        physical_offset=queue_offset * 100,
        sys_flag=0,
        born_timestamp_ms=1_700_000_000_000 + queue_offset,
        born_host=b"\x7f\x00\x00\x01\x00\x00\x27\x10",
        store_timestamp_ms=1_700_000_000_500 + queue_offset,
        store_host=b"\x7f\x00\x00\x01\x00\x00\x27\x11",
        reconsume_times=0,
        prepared_transaction_offset=0,
    )


# The strategies the composites below draw from, made once: made inside them, each draw
# built and validated its strategy again, most of these tests' time.
_SIX_OR_FEWER = st.integers(0, 6)
_ONE_IN_FOUR = st.integers(0, 3)
_ONE_IN_EIGHT = st.integers(0, 7)
_NAME = st.sampled_from(NAMES)
_VALUE = st.one_of(st.sampled_from(["", " ", "a  b ", "k1 k2"]), st.text(VALUE_TEXT))
_BODY = st.binary(max_size=40)
_OFFSET_GAP = st.integers(1, 3)


@st.composite
def raw_properties(draw, name_value_separator: bool = True) -> bytes:
    """Pairs with repeated, absent and empty names and values, sometimes an empty piece or
    no final separator; with ``name_value_separator=False`` a piece may lack its 0x01."""
    pieces = []
    for _ in range(draw(_SIX_OR_FEWER)):
        name = draw(_NAME)
        value = draw(_VALUE)
        if not name_value_separator and draw(_ONE_IN_FOUR) == 0:
            pieces.append(name + value.replace("\x01", ""))
        else:
            pieces.append(f"{name}\x01{value}")
        if draw(_ONE_IN_EIGHT) == 0:
            pieces.append("")  # an empty piece: two separators in a row
    text = "".join(piece + "\x02" for piece in pieces)
    if text and draw(_ONE_IN_EIGHT) == 0:
        text = text[:-1]
    return text.encode()


_PROPERTIES = {separator: raw_properties(separator) for separator in (True, False)}


@st.composite
def fetch_answers(draw, name_value_separator: bool = True) -> tuple[bytes, int]:
    """An answer of 0-6 records of TOPIC/QUEUE_ID (offsets ascending, gaps allowed) and an
    end offset that may cut it anywhere."""
    records, offset = [], FIRST_OFFSET
    properties = _PROPERTIES[name_value_separator]
    for _ in range(draw(_SIX_OR_FEWER)):
        body = draw(_BODY)
        records.append(record(offset, body, draw(properties)))
        offset += draw(_OFFSET_GAP)
    end_offset = draw(st.integers(FIRST_OFFSET - 1, offset + 1))
    return b"".join(records), end_offset


def _put(records: bytes, at: int, packed: bytes) -> bytes:
    return records[:at] + packed + records[at + len(packed) :]


# What a reader must refuse, each applied to the first record of an answer.
CORRUPTIONS = {
    "bad magic": lambda answer: _put(answer, 4, b"\x00\x00\x00\x01"),
    "other queue": lambda answer: _put(answer, 12, struct.pack(">i", QUEUE_ID + 1)),
    "other topic": lambda answer: record(FIRST_OFFSET, topic="orders-x") + answer,
    "crc mismatch": lambda answer: _put(answer, OFFSET_BODY_CRC, b"\xde\xad\xbe\xef"),
    "truncated record": lambda answer: answer[:-1],
    "less than a header": lambda answer: answer + b"\x00" * 10,
    "invalid utf-8": lambda answer: record(FIRST_OFFSET, properties=b"a\x01\xff\x02") + answer,
    "surrogate in utf-8": lambda answer: (
        record(FIRST_OFFSET, properties=b"a\x01\xed\xa0\x80\x02") + answer
    ),
    "overlong utf-8": lambda answer: record(FIRST_OFFSET, properties=b"a\x01\xc0\xaf\x02") + answer,
    "size too small": lambda answer: _put(answer, 0, struct.pack(">i", 20)),
    "body length past size": lambda answer: _put(answer, 84, struct.pack(">i", 1 << 20)),
    "negative body length": lambda answer: _put(answer, 84, struct.pack(">i", -1)),
    "properties length off": lambda answer: (
        record(FIRST_OFFSET, properties=b"a\x01b\x02")[:-6] + b"\x00\x05a\x01b\x02" + answer
    ),
    "born timestamp out of range": lambda answer: _put(answer, 40, struct.pack(">q", 1 << 62)),
    "store timestamp out of range": lambda answer: _put(answer, 56, struct.pack(">q", -(1 << 62))),
}
# The start of CorruptRecord's message for each.
CORRUPTION_MESSAGES = {
    "bad magic": "no message record at byte 0 (magic 0x00000001)",
    "other queue": f"the record at byte 0 is of queue {QUEUE_ID + 1}",
    "other topic": "record of another topic",
    "crc mismatch": "body CRC mismatch",
    "truncated record": "bytes left",
    "less than a header": "10 bytes at byte",
    "invalid utf-8": "properties are not UTF-8 (invalid start byte)",
    "surrogate in utf-8": "properties are not UTF-8 (invalid continuation byte)",
    "overlong utf-8": "properties are not UTF-8 (invalid start byte)",
    "size too small": "record size 20 at byte 0, below the 91 of an empty record",
    "body length past size": "body length 1048576 disagrees",
    "negative body length": "body length -1 disagrees",
    "properties length off": "properties length 5 disagrees",
    "born timestamp out of range": f"born timestamp {1 << 62} ms has no int64 µs value",
    "store timestamp out of range": f"store timestamp {-(1 << 62)} ms has no int64 µs value",
}


def comparable(columns: FetchColumns | None) -> tuple | None:
    """The columns with every buffer as bytes (the C walk's bodies are an Arrow buffer)."""
    if columns is None:
        return None
    values = (getattr(columns, field.name) for field in dataclasses.fields(columns))
    return tuple(value if isinstance(value, int) else bytes(memoryview(value)) for value in values)
