"""The CommitLog record layout, byte for byte (big-endian).

| TOTALSIZE 4 | MAGICCODE 4 | BODYCRC 4 | QUEUEID 4 | FLAG 4 | QUEUEOFFSET 8 |
| PHYSICALOFFSET 8 | SYSFLAG 4 | BORNTIMESTAMP 8 | BORNHOST 8 | STORETIMESTAMP 8 |
| STOREHOSTADDRESS 8 | RECONSUMETIMES 4 | PREPARED TRANSACTION OFFSET 8 |
| BODYLENGTH 4 + BODY | TOPICLENGTH 1 + TOPIC | PROPERTIESLENGTH 2 + PROPERTIES |

A blank record (TOTALSIZE, BLANK magic) fills the end of a segment that cannot take the
next record. Every record is validated on write (``encode`` asserts its size) and again on
read (``check_at`` verifies magic, lengths and CRC) — TigerBeetle's paired assertions.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c

from ferrymq.codec import _speedups as speedups
from ferrymq.codec.errors import CorruptRecordError
from ferrymq.codec.message_id import offset_message_id
from ferrymq.codec.properties import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    decode_properties,
    encode_properties,
)

MESSAGE_MAGIC = 0xDAA320A7
BLANK_MAGIC = 0xCBD43194

HEADER = struct.Struct(">iIIiiqqiq8sq8siqi")
HEADER_SIZE = HEADER.size  # 88: everything up to and including BODYLENGTH
assert HEADER_SIZE == 88
MIN_RECORD_SIZE = HEADER_SIZE + 3  # an empty body, topic and properties
BLANK = struct.Struct(">iI")
BLANK_MIN_SIZE = BLANK.size  # a segment always keeps room for a blank record
SIZE_AND_MAGIC = struct.Struct(">iI")
CRC_AT = struct.Struct(">I")
INT_AT = struct.Struct(">i")
PROPERTIES_LENGTH = struct.Struct(">H")

OFFSET_BODY_CRC = 8
OFFSET_QUEUE_ID = 12
OFFSET_QUEUE_OFFSET = 20
OFFSET_PHYSICAL_OFFSET = 28
OFFSET_SYS_FLAG = 36
OFFSET_STORE_TIMESTAMP = 56
OFFSET_BODY_LENGTH = 84

NO_HOST = b"\x00" * 8  # BORNHOST / STOREHOST when there is no IPv4 address to give


def encode_host(ip: str, port: int) -> bytes:
    """IPv4 (4 bytes) + port (4 bytes), as the record stores BORNHOST and STOREHOST."""
    octets = bytes(int(part) for part in ip.split("."))
    assert len(octets) == 4, ip
    return octets + port.to_bytes(4, "big")


@dataclass(slots=True)
class StoredMessage:
    """A record read back from the CommitLog."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    body: bytes
    properties: dict[str, str]
    body_crc: int
    flag: int
    sys_flag: int
    born_timestamp_ms: int
    born_host: bytes
    store_timestamp_ms: int
    store_host: bytes
    reconsume_times: int
    prepared_transaction_offset: int

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(PROPERTY_KEYS)
        return [k for k in raw.split(KEY_SEPARATOR) if k] if raw else []

    @property
    def unique_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)

    @property
    def offset_message_id(self) -> str:
        return offset_message_id(self.store_host, self.physical_offset)


def record_size(body_length: int, topic_length: int, properties_length: int) -> int:
    return HEADER_SIZE + body_length + 1 + topic_length + 2 + properties_length


def encode(
    *,
    size: int,
    body: bytes,
    topic: bytes,
    properties: bytes,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp_ms: int,
    born_host: bytes,
    store_timestamp_ms: int,
    store_host: bytes,
    reconsume_times: int,
    prepared_transaction_offset: int,
) -> bytes:
    header = HEADER.pack(
        size,
        MESSAGE_MAGIC,
        crc32c(body),
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp_ms,
        born_host,
        store_timestamp_ms,
        store_host,
        reconsume_times,
        prepared_transaction_offset,
        len(body),
    )
    record = b"".join(
        (
            header,
            body,
            len(topic).to_bytes(1, "big"),
            topic,
            len(properties).to_bytes(2, "big"),
            properties,
        )
    )
    assert len(record) == size, (len(record), size)
    return record


def encode_stored(stored: StoredMessage) -> bytes:
    """The record of ``stored`` as the CommitLog holds it, for the answers that carry
    records one by one (a record read back encodes to the same bytes)."""
    topic = stored.topic.encode()
    properties = encode_properties(stored.properties)
    return encode(
        size=record_size(len(stored.body), len(topic), len(properties)),
        body=stored.body,
        topic=topic,
        properties=properties,
        queue_id=stored.queue_id,
        flag=stored.flag,
        queue_offset=stored.queue_offset,
        physical_offset=stored.physical_offset,
        sys_flag=stored.sys_flag,
        born_timestamp_ms=stored.born_timestamp_ms,
        born_host=stored.born_host,
        store_timestamp_ms=stored.store_timestamp_ms,
        store_host=stored.store_host,
        reconsume_times=stored.reconsume_times,
        prepared_transaction_offset=stored.prepared_transaction_offset,
    )


def encode_blank(size: int) -> bytes:
    assert size >= BLANK_MIN_SIZE
    return BLANK.pack(size, BLANK_MAGIC) + bytes(size - BLANK_MIN_SIZE)


@dataclass(frozen=True, slots=True)
class RecordCheck:
    """What ``check_at`` found at one position.

    ``size`` > 0: a valid message record; ``blank``: a filler record to the segment end;
    ``size == 0 and not blank``: the end of the data (zeros) or, with ``reason``, a
    corrupt record that ends the valid log.
    """

    size: int
    blank: bool = False
    reason: str | None = None


END_OF_DATA = RecordCheck(0)


def check_at(buf, position: int, limit: int) -> RecordCheck:
    """Validate the record at ``position`` of ``buf`` (a map), which must end by ``limit``."""
    if limit - position < SIZE_AND_MAGIC.size:
        return END_OF_DATA
    size, magic = SIZE_AND_MAGIC.unpack_from(buf, position)
    if magic == BLANK_MAGIC:
        if size != limit - position:
            return RecordCheck(0, reason=f"blank record of {size} bytes does not end the segment")
        return RecordCheck(size, blank=True)
    if magic != MESSAGE_MAGIC:
        if size == 0 and magic == 0:
            return END_OF_DATA
        return RecordCheck(0, reason=f"bad magic code 0x{magic:08X}")
    if size < MIN_RECORD_SIZE or position + size > limit:
        return RecordCheck(0, reason=f"record size {size} out of bounds")
    (body_length,) = INT_AT.unpack_from(buf, position + OFFSET_BODY_LENGTH)
    topic_at = position + HEADER_SIZE + body_length
    if body_length < 0 or topic_at + 3 > position + size:
        return RecordCheck(0, reason=f"body length {body_length} inconsistent with size {size}")
    topic_length = buf[topic_at]
    properties_at = topic_at + 1 + topic_length
    if properties_at + 2 > position + size:
        return RecordCheck(0, reason="topic length inconsistent with record size")
    (properties_length,) = PROPERTIES_LENGTH.unpack_from(buf, properties_at)
    if properties_at + 2 + properties_length != position + size:
        return RecordCheck(0, reason="properties length inconsistent with record size")
    # BODYCRC covers only the body, so a record whose last bytes never reached the file
    # (zeros where a crash tore the tail) passed every check above with damaged
    # properties. Properties always end with the pair separator and a topic has no zero
    # byte (both are enforced on write), so such a tail is still caught here.
    if properties_length and buf[position + size - 1] != 0x02:
        return RecordCheck(0, reason="properties do not end with a separator (torn tail)")
    if 0 in buf[topic_at + 1 : properties_at]:
        return RecordCheck(0, reason="zero byte in the topic (torn tail)")
    (body_crc,) = CRC_AT.unpack_from(buf, position + OFFSET_BODY_CRC)
    body_at = position + HEADER_SIZE
    with memoryview(buf) as view:
        actual_crc = crc32c(view[body_at : body_at + body_length])
    if actual_crc != body_crc:
        return RecordCheck(0, reason=f"body CRC mismatch (stored 0x{body_crc:08X})")
    return RecordCheck(size)


def chunk_problem(data: bytes | memoryview) -> str | None:
    """Why ``data`` is not a run of whole records (None when it is): each starts with a
    plausible size and a magic code, a blank record only last, and the sizes add up to
    exactly ``len(data)``. What a slave checks before appending a master's bytes, so that
    bytes cut elsewhere than at one of its own record boundaries are refused, not stored.
    The walk over the records is C (``chunk_is_whole``); a chunk it refuses is walked
    again by the twin, which says why."""
    if speedups.chunk_is_whole(data):
        return None
    return chunk_problem_in_python(data)


def chunk_problem_in_python(data: bytes | memoryview) -> str | None:
    """What ``chunk_is_whole`` (C, ferrymq/codec/_speedups.c) decides, with the reason."""
    position, length = 0, len(data)
    unpack = SIZE_AND_MAGIC.unpack_from
    while position < length:
        if length - position < SIZE_AND_MAGIC.size:
            return f"{length - position} stray bytes at {position}"
        size, magic = unpack(data, position)
        if magic == BLANK_MAGIC:
            if position + size != length:
                return f"a blank record at {position} does not end the chunk"
        elif magic != MESSAGE_MAGIC:
            return f"bad magic code 0x{magic:08X} at {position}"
        elif size < MIN_RECORD_SIZE:
            return f"record size {size} at {position} is too small"
        if position + size > length:
            return f"the record at {position} runs past the chunk"
        position += size
    return None


def decode(buf, position: int) -> StoredMessage:
    """Decode the message record at ``position`` of ``buf``. Its framing (magic code,
    lengths, UTF-8 topic and properties) is checked here, with ``CorruptRecordError``
    saying what is wrong: an ``assert`` would vanish under ``python -O`` and garbage would
    decode. Its body CRC is not: reads that follow consume-queue entries skip it, and a
    lookup at a position someone chose runs ``check_at`` first."""
    try:
        (
            size,
            magic,
            body_crc,
            queue_id,
            flag,
            queue_offset,
            physical_offset,
            sys_flag,
            born_timestamp_ms,
            born_host,
            store_timestamp_ms,
            store_host,
            reconsume_times,
            prepared_transaction_offset,
            body_length,
        ) = HEADER.unpack_from(buf, position)
    except struct.error:
        raise CorruptRecordError(f"no whole record header at {position}") from None
    if magic != MESSAGE_MAGIC or position < 0:
        raise CorruptRecordError(f"no message record at {position} (magic 0x{magic:08X})")
    end = position + size
    body_at = position + HEADER_SIZE
    topic_at = body_at + body_length
    if body_length < 0 or topic_at + 3 > end or end > len(buf):
        raise CorruptRecordError(
            f"record at {position}: size {size} and body length {body_length} disagree "
            f"(with each other, or with the {len(buf) - position} bytes there)"
        )
    properties_at = topic_at + 1 + buf[topic_at]
    if properties_at + 2 > end:
        raise CorruptRecordError(f"record at {position}: its topic runs past its size {size}")
    properties_length = (buf[properties_at] << 8) | buf[properties_at + 1]
    if properties_at + 2 + properties_length != end:
        raise CorruptRecordError(
            f"record at {position}: properties length {properties_length} disagrees "
            f"with size {size}"
        )
    try:
        topic = buf[topic_at + 1 : properties_at].decode()
        properties = decode_properties(buf[properties_at + 2 : end])
    except UnicodeDecodeError as error:
        raise CorruptRecordError(
            f"record at {position}: topic or properties are not UTF-8 ({error.reason})"
        ) from None
    return StoredMessage(
        topic=topic,
        queue_id=queue_id,
        queue_offset=queue_offset,
        physical_offset=physical_offset,
        size=size,
        body=buf[body_at:topic_at],
        properties=properties,
        body_crc=body_crc,
        flag=flag,
        sys_flag=sys_flag,
        born_timestamp_ms=born_timestamp_ms,
        born_host=born_host,
        store_timestamp_ms=store_timestamp_ms,
        store_host=store_host,
        reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset,
    )
