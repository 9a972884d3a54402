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
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
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
SEP, END = NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
TYPE_TEXT = {value: str(value) for value in pb.MessageType.values()}


class RecordError(ValueError):
    """A message that cannot be encoded as a produce record (the node would refuse it)."""


def encode_record(message: Message, message_type: int, born_ms: int) -> bytes:
    """The produce record of ``message`` (``message_type``: apache.rocketmq.v2.MessageType)."""
    parts = [PROPERTY_UNIQ_KEY, SEP, message.message_id, END, PROPERTY_MESSAGE_TYPE, SEP]
    parts += (TYPE_TEXT.get(message_type) or str(message_type), END)
    if message.tag is not None:
        parts += (PROPERTY_TAGS, SEP, message.tag, END)
    if message.keys:
        for key in message.keys:
            if not KEY.fullmatch(key):
                raise RecordError(f"key {key!r} is empty or has spaces")
        parts += (PROPERTY_KEYS, SEP, " ".join(message.keys), END)
    if message.message_group is not None:
        parts += (PROPERTY_MESSAGE_GROUP, SEP, message.message_group, END)
    if message.properties:
        for name, value in message.properties.items():
            if name in SYSTEM_PROPERTY_NAMES:
                raise RecordError(f"user property {name!r} is a reserved name")
            parts += (name, SEP, value, END)
    try:
        properties = "".join(parts).encode()
    except UnicodeEncodeError as error:  # a lone surrogate in a tag, key or property
        raise RecordError(
            f"{error.object[error.start : error.end]!r} in the tag, keys or properties is "
            f"not valid Unicode ({error.reason})"
        ) from None
    if len(properties) > 0xFFFF:
        raise RecordError(f"properties are {len(properties)} bytes")
    body = message.body
    return b"".join((RECORD_HEAD.pack(len(body), len(properties), born_ms), body, properties))
