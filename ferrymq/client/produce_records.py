"""The SDK's messages as produce records (the layout is ``ferrymq.codec.produce_records``):
the properties a message carries, in the store's encoding, refused here when the node would
refuse them for a reason the SDK can see first."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ferrymq.client.messages import Message
from ferrymq.codec import bytes_field
from ferrymq.codec._speedups import RecordEncoder
from ferrymq.codec.produce_records import PRODUCE_HEAD, PRODUCE_PROPERTIES_MAX_BYTES
from ferrymq.codec.properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_MESSAGE_TYPE,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    SYSTEM_PROPERTY_NAMES,
)
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.ferrymq import data_pb2 as data

KEY = re.compile(r"\S+")
SEP, END = NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
TYPE_TEXT = {value: str(value) for value in pb.MessageType.values()}


@dataclass(slots=True)
class ProduceCall:
    """A Data.Produce request to send. On the remoting door its records are appended to the
    other fields' encoding (``ferrymq.codec.bytes_field``): protobuf copied them into the
    message and again into its encoding, ~110 µs for 128 KiB here against ~6. On gRPC it
    is the protobuf message. Read-only by convention, not ``frozen``: one is made per send,
    and a frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``."""

    topic: str
    queue_id: int
    atomic: bool
    count: int
    records: bytes

    def body(self) -> bytes:
        """The FERRY_PRODUCE body: the same bytes as the message's encoding."""
        head = _produce_head(self.topic, self.queue_id, self.atomic, self.count)
        return bytes_field.encode(head, [self.records], bytes_field.PRODUCE_RECORDS_FIELD)

    def message(self) -> data.ProduceRequest:
        return data.ProduceRequest(
            topic=self.topic,
            queue_id=self.queue_id,
            atomic=self.atomic,
            count=self.count,
            records=self.records,
        )


@functools.lru_cache(maxsize=4096)
def _produce_head(topic: str, queue_id: int, atomic: bool, count: int) -> bytes:
    """The encoding of a ProduceRequest's fields but its records (proto3 writes no empty
    field), kept: a producer sends to a few queues with a few batch sizes, and building the
    protobuf message was most of the SDK's own time in a single send."""
    return data.ProduceRequest(
        topic=topic, queue_id=queue_id, atomic=atomic, count=count
    ).SerializeToString()


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
    if len(properties) > PRODUCE_PROPERTIES_MAX_BYTES:
        raise RecordError(f"properties are {len(properties)} bytes")
    body = message.body
    return b"".join((PRODUCE_HEAD.pack(len(body), len(properties), born_ms), body, properties))


def encode_records(messages: Sequence[Message], message_type: int, born_ms: int) -> bytes:
    """The produce records of ``messages``, back to back, in one C pass
    (``RecordEncoder.encode``, ferrymq/codec/_speedups.c); ``RecordError`` as
    ``encode_record`` raises it, from the twin, ``encode_records_in_python``, which encodes
    any messages the C declines."""
    type_text = TYPE_TEXT.get(message_type) or str(message_type)
    batch = messages if type(messages) is list else list(messages)
    encoded = _RECORD_ENCODER.encode(batch, type_text, born_ms)
    if encoded is None:
        return encode_records_in_python(batch, message_type, born_ms)
    return encoded


def encode_records_in_python(messages: Sequence[Message], message_type: int, born_ms: int) -> bytes:
    """What ``encode_records`` returns, a message at a time: the specification of its C."""
    return b"".join([encode_record(message, message_type, born_ms) for message in messages])


_RECORD_ENCODER = RecordEncoder(
    uniq_key=PROPERTY_UNIQ_KEY,
    message_type=PROPERTY_MESSAGE_TYPE,
    tags=PROPERTY_TAGS,
    keys=PROPERTY_KEYS,
    message_group=PROPERTY_MESSAGE_GROUP,
    reserved=SYSTEM_PROPERTY_NAMES,
)
