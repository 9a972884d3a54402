"""Messages as producers hand them to the store, and as the store hands them back.

Properties travel as ``name\\x01value\\x02`` pairs (DESIGN §3.1); the well-known names below
are RocketMQ's, so records stay readable by anyone who knows that format.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

from store import _speedups as speedups
from store.errors import InvalidMessageError

PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_MESSAGE_GROUP = "__SHARDINGKEY"
PROPERTY_DELIVERY_TIME_MS = "TIMER_DELIVER_MS"
PROPERTY_TRANSACTION_ID = "__transactionId__"
# Delayed messages wait in this topic; its consume-queue tag slot holds the delivery time
# in ms instead of a tag hash (DESIGN §3.2, seed 004), so the timer is rebuilt from 20-byte
# queue entries without reading a single record.
TIMER_TOPIC = "%SYS%TIMER"
PROPERTY_MESSAGE_TYPE = "__MSG_TYPE"  # apache.rocketmq.v2.MessageType as sent
# Properties the store and node set; everything else in a record is the user's.
SYSTEM_PROPERTY_NAMES = frozenset(
    {
        PROPERTY_TAGS,
        PROPERTY_KEYS,
        PROPERTY_UNIQ_KEY,
        PROPERTY_MESSAGE_GROUP,
        PROPERTY_DELIVERY_TIME_MS,
        PROPERTY_TRANSACTION_ID,
        PROPERTY_MESSAGE_TYPE,
    }
)
KEY_SEPARATOR = " "

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

TOPIC_MAX_BYTES = 255
PROPERTIES_MAX_BYTES = 32767
# Matched with ``fullmatch``: with ``match``, ``$`` also matches before a trailing newline,
# which let "orders\n" through (and into a consume-queue directory name).
TOPIC_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]+")
OFFSET_MESSAGE_ID_PATTERN = re.compile(r"[0-9A-Fa-f]{32}")

# SYSFLAG bits (RocketMQ's MessageSysFlag).
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_NOT_TYPE = 0x0
SYSFLAG_TRANSACTION_PREPARED = 0x4
SYSFLAG_TRANSACTION_COMMIT = 0x8
SYSFLAG_TRANSACTION_ROLLBACK = 0xC
SYSFLAG_TRANSACTION_MASK = 0xC

NO_HOST = b"\x00" * 8


def validate_topic(topic: str) -> bytes:
    """The topic's UTF-8 bytes, or ``InvalidMessageError`` naming the broken rule."""
    if not topic:
        raise InvalidMessageError("TOPIC_INVALID", "topic is empty")
    encoded = topic.encode()
    if len(encoded) > TOPIC_MAX_BYTES:
        raise InvalidMessageError(
            "TOPIC_INVALID", f"topic is {len(encoded)} bytes, the limit is {TOPIC_MAX_BYTES}"
        )
    if not TOPIC_PATTERN.fullmatch(topic):
        raise InvalidMessageError(
            "TOPIC_INVALID",
            f"topic {topic!r} has characters outside [%|a-zA-Z0-9_-]",
        )
    return encoded


# The record header fields a producer sets, in their on-disk widths (DESIGN §3.1).
CALLER_HEADER_FIELDS = (
    "flag",
    "sys_flag",
    "born_timestamp_ms",
    "reconsume_times",
    "prepared_transaction_offset",
)
CALLER_HEADER = struct.Struct(">iiqiq")


def validate_header_fields(message: Message) -> None:
    """Refuse a header field outside its on-disk range as bad input. Unchecked, it raised
    ``struct.error`` inside ``CommitLog.append`` after the batch had taken its queue
    offsets: the put crashed and the queue kept a gap. One ``pack`` on the good path."""
    try:
        CALLER_HEADER.pack(
            message.flag,
            message.sys_flag,
            message.born_timestamp_ms,
            message.reconsume_times,
            message.prepared_transaction_offset,
        )
        if len(message.born_host) == len(NO_HOST):
            return
        bad = "born_host"
    except struct.error:
        bad = next(
            name
            for name, code in zip(CALLER_HEADER_FIELDS, CALLER_HEADER.format[1:], strict=True)
            if not _fits(code, getattr(message, name))
        )
    raise InvalidMessageError(
        "FIELD_OUT_OF_RANGE", f"{bad} {getattr(message, bad)!r} does not fit its record field"
    )


def _fits(code: str, value: object) -> bool:
    try:
        struct.pack(">" + code, value)
    except struct.error:
        return False
    return True


def _is_utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def encode_properties(properties: dict[str, str]) -> bytes:
    if not properties:
        return b""
    text = "\x02".join(map("\x01".join, properties.items())) + "\x02"
    # Each pair adds exactly one of each separator; any more means a name or value has one.
    if text.count(NAME_VALUE_SEPARATOR) != len(properties) or text.count(PROPERTY_SEPARATOR) != len(
        properties
    ):
        bad = next(
            name
            for name, value in properties.items()
            if any(
                sep in name or sep in value for sep in (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)
            )
        )
        raise InvalidMessageError(
            "PROPERTY_INVALID", f"property {bad!r} contains a reserved separator byte"
        )
    try:
        encoded = text.encode()
    except UnicodeEncodeError as error:  # a lone surrogate: no UTF-8 form exists
        bad = next(name for name, value in properties.items() if not _is_utf8(name + value))
        raise InvalidMessageError(
            "PROPERTY_INVALID", f"property {bad!r} is not valid Unicode ({error.reason})"
        ) from None
    if len(encoded) > PROPERTIES_MAX_BYTES:
        raise InvalidMessageError(
            "PROPERTIES_TOO_LARGE",
            f"properties are {len(encoded)} bytes, the limit is {PROPERTIES_MAX_BYTES}",
        )
    return encoded


def check_encoded_properties(raw: bytes, properties: dict[str, str]) -> None:
    """Refuse ``raw`` unless it can be the encoding of ``properties`` (a caller that
    already holds the encoded form, the node's Produce path, skips ``encode_properties``):
    the same size limit, and exactly one of each separator per pair, as that checks."""
    if len(raw) > PROPERTIES_MAX_BYTES:
        raise InvalidMessageError(
            "PROPERTIES_TOO_LARGE",
            f"properties are {len(raw)} bytes, the limit is {PROPERTIES_MAX_BYTES}",
        )
    count = len(properties)
    if (
        raw.count(b"\x01") != count
        or raw.count(b"\x02") != count
        or (count and raw[-1] != 0x02)
        or (raw and not count)
    ):
        raise InvalidMessageError("PROPERTY_INVALID", "encoded properties do not match their pairs")


def decode_properties_in_python(raw: bytes) -> dict[str, str]:
    """What ``decode_properties`` (C, store/_speedups.c) does: pairs split at their first
    0x01, empty pairs skipped, a later name replacing an earlier one."""
    if not raw:
        return {}
    result = {}
    for pair in raw.decode().split(PROPERTY_SEPARATOR):
        if pair:
            name, _, value = pair.partition(NAME_VALUE_SEPARATOR)
            result[name] = value
    return result


decode_properties = speedups.decode_properties


def encode_host(ip: str, port: int) -> bytes:
    """IPv4 (4 bytes) + port (4 bytes), as the record stores BORNHOST and STOREHOST."""
    octets = bytes(int(part) for part in ip.split("."))
    assert len(octets) == 4, ip
    return octets + port.to_bytes(4, "big")


@dataclass(slots=True)
class Message:
    """A message to store. ``tags`` and ``keys`` are kept in ``properties``."""

    topic: str
    body: bytes
    queue_id: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp_ms: int = 0
    born_host: bytes = NO_HOST
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @classmethod
    def build(
        cls,
        topic: str,
        body: bytes,
        *,
        queue_id: int = 0,
        tags: str | None = None,
        keys: list[str] | tuple[str, ...] = (),
        unique_key: str | None = None,
        properties: dict[str, str] | None = None,
        born_timestamp_ms: int = 0,
    ) -> Message:
        props = dict(properties or {})
        if tags:
            props[PROPERTY_TAGS] = tags
        if keys:
            props[PROPERTY_KEYS] = KEY_SEPARATOR.join(keys)
        if unique_key:
            props[PROPERTY_UNIQ_KEY] = unique_key
        return cls(topic, body, queue_id, props, born_timestamp_ms=born_timestamp_ms)

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)


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


def offset_message_id(store_host: bytes, physical_offset: int) -> str:
    """STOREHOST (8 bytes) + PHYSICALOFFSET (8 bytes) as 32 upper-case hex characters."""
    return (store_host + physical_offset.to_bytes(8, "big")).hex().upper()


def parse_offset_message_id(message_id: str) -> tuple[bytes, int]:
    """Inverse of :func:`offset_message_id`; ``ValueError`` on anything malformed."""
    # Exactly 32 hex digits: ``bytes.fromhex`` alone skips whitespace, so "…  " with 30
    # digits would parse as a 15-byte id pointing at some other record.
    if not OFFSET_MESSAGE_ID_PATTERN.fullmatch(message_id):
        raise ValueError(f"an offset message id is 32 hex digits, got {message_id!r}")
    raw = bytes.fromhex(message_id)
    return raw[:8], int.from_bytes(raw[8:], "big")
