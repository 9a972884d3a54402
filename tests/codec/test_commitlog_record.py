"""The CommitLog record (docs/architecture.md, "The CommitLog record"; ferrymq/codec/):
every field encoded, checked and decoded at its documented offset, the properties'
``name\x01value\x02`` pairs, blank records, and ``check_at`` refusing torn and
inconsistent bytes. The store's layers above it are in tests/store/test_store_layers.py."""

from __future__ import annotations

import pytest
from crc32c import crc32c

from ferrymq.codec import commitlog_record as record
from ferrymq.codec.commitlog_record import encode_host
from ferrymq.codec.errors import InvalidMessageError
from ferrymq.codec.properties import decode_properties, encode_properties

T0 = 1_700_000_000_000
STORE_HOST = encode_host("127.0.0.1", 10911)

FIELDS = dict(
    queue_id=7,
    flag=0x01020304,
    queue_offset=0x0102030405,
    physical_offset=0x0A0B0C0D0E,
    sys_flag=0x8,
    born_timestamp_ms=T0 + 123,
    born_host=bytes([10, 0, 0, 9, 0, 0, 0x15, 0xB3]),
    store_timestamp_ms=T0 + 456,
    store_host=STORE_HOST,
    reconsume_times=3,
    prepared_transaction_offset=0x55AA,
)


def encode_record(body: bytes, topic: bytes, properties: bytes, **overrides) -> bytes:
    fields = {**FIELDS, **overrides}
    return record.encode(
        size=record.record_size(len(body), len(topic), len(properties)),
        body=body,
        topic=topic,
        properties=properties,
        **fields,
    )


def test_record_encode_check_decode_round_trips_every_field():
    """Invariant: decode(encode(x)) == x for every field, at any position of a buffer,
    and check_at accepts exactly the encoded size."""
    body = bytes(range(256)) * 3
    properties = encode_properties({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "U1"})
    raw = encode_record(body, b"TopicA", properties)
    buffer = bytes(100) + raw + bytes(64)
    assert record.check_at(buffer, 100, len(buffer)) == record.RecordCheck(len(raw))
    stored = record.decode(buffer, 100)
    for name, value in FIELDS.items():
        assert getattr(stored, name) == value, name
    assert stored.size == len(raw)
    assert stored.body == body
    assert stored.body_crc == crc32c(body)
    assert stored.topic == "TopicA"
    assert stored.properties == {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "U1"}
    assert (stored.tags, stored.keys, stored.unique_key) == ("TagA", ["k1", "k2"], "U1")
    # The empty body, topic of one byte and no properties: the smallest record.
    tiny = encode_record(b"", b"T", b"")
    assert len(tiny) == 88 + 0 + 1 + 1 + 2
    assert record.check_at(tiny, 0, len(tiny)).size == len(tiny)
    assert record.decode(tiny, 0).properties == {}


def test_record_layout_is_the_documented_one_byte_for_byte():
    """Invariant: every field sits at the offset docs/architecture.md gives it,
    big-endian ("The CommitLog record")."""
    assert crc32c(b"123456789") == 0xE3069283  # the CRC is CRC32C (Castagnoli)
    body = b"hello body"
    topic = b"TopicA"
    properties = b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02"
    raw = encode_record(body, topic, properties)

    def int_at(start: int, length: int) -> int:
        return int.from_bytes(raw[start : start + length], "big")

    assert len(raw) == 88 + len(body) + 1 + len(topic) + 2 + len(properties)
    assert int_at(0, 4) == len(raw)  # 1 TOTALSIZE
    assert raw[4:8] == bytes.fromhex("DAA320A7")  # 2 MAGICCODE
    assert int_at(8, 4) == crc32c(body)  # 3 BODYCRC
    assert int_at(12, 4) == 7  # 4 QUEUEID
    assert int_at(16, 4) == 0x01020304  # 5 FLAG
    assert int_at(20, 8) == 0x0102030405  # 6 QUEUEOFFSET
    assert int_at(28, 8) == 0x0A0B0C0D0E  # 7 PHYSICALOFFSET
    assert int_at(36, 4) == 0x8  # 8 SYSFLAG
    assert int_at(40, 8) == T0 + 123  # 9 BORNTIMESTAMP
    assert raw[48:56] == bytes([10, 0, 0, 9]) + (5555).to_bytes(4, "big")  # 10 BORNHOST
    assert int_at(56, 8) == T0 + 456  # 11 STORETIMESTAMP
    assert raw[64:72] == bytes([127, 0, 0, 1]) + (10911).to_bytes(4, "big")  # 12 STOREHOST
    assert int_at(72, 4) == 3  # 13 RECONSUMETIMES
    assert int_at(76, 8) == 0x55AA  # 14 PREPARED TRANSACTION OFFSET
    assert int_at(84, 4) == len(body)  # 15 BODYLENGTH
    assert raw[88 : 88 + len(body)] == body  # BODY
    at = 88 + len(body)
    assert raw[at] == len(topic) and raw[at + 1 : at + 1 + len(topic)] == topic  # 16
    at += 1 + len(topic)
    assert int_at(at, 2) == len(properties)  # 17 PROPERTIESLENGTH
    assert raw[at + 2 :] == properties
    # The module's named offsets agree with the table.
    assert (
        record.OFFSET_BODY_CRC,
        record.OFFSET_QUEUE_ID,
        record.OFFSET_QUEUE_OFFSET,
        record.OFFSET_PHYSICAL_OFFSET,
        record.OFFSET_SYS_FLAG,
        record.OFFSET_STORE_TIMESTAMP,
        record.OFFSET_BODY_LENGTH,
        record.HEADER_SIZE,
    ) == (8, 12, 20, 28, 36, 56, 84, 88)


def test_properties_are_name_soh_value_stx_pairs():
    """Invariant: properties encode as name\\x01value\\x02 and decode back; a separator
    inside a name or value is refused, never written ambiguously."""
    properties = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "标识"}
    raw = encode_properties(properties)
    assert raw == "TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01标识\x02".encode()
    assert decode_properties(raw) == properties
    assert encode_properties({}) == b"" and decode_properties(b"") == {}
    for bad in ({"K": "a\x01b"}, {"K\x02": "v"}):
        with pytest.raises(InvalidMessageError):
            encode_properties(bad)


def test_blank_record_magic_and_extent():
    """Invariant: a blank record is TOTALSIZE + magic 0xCBD43194 + zeros and must end
    exactly at the end of its segment."""
    blank = record.encode_blank(40)
    assert blank[:4] == (40).to_bytes(4, "big")
    assert blank[4:8] == bytes.fromhex("CBD43194")
    assert blank[8:] == bytes(32)
    assert record.check_at(blank, 0, 40) == record.RecordCheck(40, blank=True)
    padded = blank + bytes(8)
    assert "does not end the segment" in record.check_at(padded, 0, 48).reason
    assert record.encode_blank(record.BLANK_MIN_SIZE) == bytes.fromhex("00000008CBD43194")


def test_check_at_rejects_torn_and_inconsistent_records():
    """Invariant: check_at accepts a record only when magic, every length and the CRC
    agree; zeros are the clean end of data, not an error."""
    raw = encode_record(b"payload", b"T", b"A\x01B\x02")
    assert "out of bounds" in record.check_at(raw, 0, len(raw) - 1).reason  # torn
    lying = bytearray(raw)
    lying[84:88] = (len(b"payload") + 1).to_bytes(4, "big")  # BODYLENGTH too large
    assert record.check_at(lying, 0, len(lying)).reason
    flipped = bytearray(raw)
    flipped[88] ^= 1  # one bit of the body
    assert "CRC" in record.check_at(flipped, 0, len(flipped)).reason
    assert record.check_at(bytes(100), 0, 100) == record.END_OF_DATA
