"""Messages as producers hand them to the store, and the store's rules for them: topic
names, header fields, transaction bits. A record read back is
``ferrymq.codec.commitlog_record.StoredMessage``; properties are ``ferrymq.codec.properties``.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

from ferrymq.codec.commitlog_record import NO_HOST
from ferrymq.codec.errors import InvalidMessageError
from ferrymq.codec.properties import KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY

# Delayed messages wait in this topic; its consume-queue tag slot holds the delivery time
# in ms instead of a tag hash (docs/architecture.md, "Files on disk"), so the timer is
# rebuilt from 20-byte queue entries without reading a single record.
TIMER_TOPIC = "%SYS%TIMER"

TOPIC_MAX_BYTES = 255
# Matched with ``fullmatch``: with ``match``, ``$`` also matches before a trailing newline,
# which let "orders\n" through (and into a consume-queue directory name).
TOPIC_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]+")

# SYSFLAG bits (RocketMQ's MessageSysFlag).
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_NOT_TYPE = 0x0
SYSFLAG_TRANSACTION_PREPARED = 0x4
SYSFLAG_TRANSACTION_COMMIT = 0x8
SYSFLAG_TRANSACTION_ROLLBACK = 0xC
SYSFLAG_TRANSACTION_MASK = 0xC


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


# The record header fields a producer sets, in their on-disk widths (docs/architecture.md,
# "The CommitLog record").
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
