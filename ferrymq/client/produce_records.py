"""Produce records: how the SDK hands messages to ``Data.Produce`` (proto/ferrymq/data.proto).

One record is ``body_length int32 | properties_length uint16 | born_timestamp_ms int64 |
body | properties``, big-endian, with the properties already in the store's encoding
(``name 0x01 value 0x02``): the node checks them and writes them as they are, so a message
costs it a few slices instead of a protobuf message and a re-encoding.
"""

from __future__ import annotations

import re
import struct

from ferrymq.client.messages import Message
from store.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_MESSAGE_TYPE,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    SYSTEM_PROPERTY_NAMES,
)

RECORD_HEAD = struct.Struct(">iHq")  # body length, properties length, born timestamp ms
MAX_RECORDS = 4096  # per request, as the node accepts
KEY = re.compile(r"\S+")


class RecordError(ValueError):
    """A message that cannot be encoded as a produce record (the node would refuse it)."""


def encode_record(message: Message, message_type: int, born_ms: int) -> bytes:
    """The produce record of ``message`` (``message_type``: apache.rocketmq.v2.MessageType)."""
    pairs = [PROPERTY_UNIQ_KEY, message.message_id, PROPERTY_MESSAGE_TYPE, str(message_type)]
    if message.tag is not None:
        pairs += (PROPERTY_TAGS, message.tag)
    if message.keys:
        for key in message.keys:
            if not KEY.fullmatch(key):
                raise RecordError(f"key {key!r} is empty or has spaces")
        pairs += (PROPERTY_KEYS, " ".join(message.keys))
    if message.message_group is not None:
        pairs += (PROPERTY_MESSAGE_GROUP, message.message_group)
    if message.properties:
        for name, value in message.properties.items():
            if name in SYSTEM_PROPERTY_NAMES:
                raise RecordError(f"user property {name!r} is a reserved name")
            pairs += (name, value)
    text = "".join(
        f"{pairs[i]}{NAME_VALUE_SEPARATOR}{pairs[i + 1]}{PROPERTY_SEPARATOR}"
        for i in range(0, len(pairs), 2)
    )
    properties = text.encode()
    body = message.body
    if len(properties) > 0xFFFF:
        raise RecordError(f"properties are {len(properties)} bytes")
    return RECORD_HEAD.pack(len(body), len(properties), born_ms) + body + properties
