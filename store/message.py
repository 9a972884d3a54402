"""Messages as producers hand them to the store, and as the store hands them back.

Properties travel as ``name\\x01value\\x02`` pairs (DESIGN §3.1); the well-known names below
are RocketMQ's, so records stay readable by anyone who knows that format.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from store.errors import InvalidMessageError

PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_MESSAGE_GROUP = "__SHARDINGKEY"
PROPERTY_DELIVERY_TIME_MS = "TIMER_DELIVER_MS"
PROPERTY_TRANSACTION_ID = "__transactionId__"
KEY_SEPARATOR = " "

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

TOPIC_MAX_BYTES = 255
PROPERTIES_MAX_BYTES = 32767
TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")

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
    if not TOPIC_PATTERN.match(topic):
        raise InvalidMessageError(
            "TOPIC_INVALID",
            f"topic {topic!r} has characters outside [%|a-zA-Z0-9_-]",
        )
    return encoded


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
    encoded = text.encode()
    if len(encoded) > PROPERTIES_MAX_BYTES:
        raise InvalidMessageError(
            "PROPERTIES_TOO_LARGE",
            f"properties are {len(encoded)} bytes, the limit is {PROPERTIES_MAX_BYTES}",
        )
    return encoded


def decode_properties(raw: bytes) -> dict[str, str]:
    if not raw:
        return {}
    result = {}
    for pair in raw.decode().split(PROPERTY_SEPARATOR):
        if pair:
            name, _, value = pair.partition(NAME_VALUE_SEPARATOR)
            result[name] = value
    return result


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
    if len(message_id) != 32:
        raise ValueError(f"an offset message id has 32 hex characters, got {len(message_id)}")
    raw = bytes.fromhex(message_id)
    return raw[:8], int.from_bytes(raw[8:], "big")
