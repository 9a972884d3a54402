"""Messages as the SDK's users write and read them."""

from __future__ import annotations

import itertools
import os
import struct
import time
from dataclasses import dataclass, field

from google.protobuf import timestamp_pb2

from ferrymq.client.errors import MALFORMED_ANSWER, FerryError
from ferrymq.codec._speedups import RecordReader
from ferrymq.codec.commitlog_record import MIN_RECORD_SIZE, StoredMessage, decode
from ferrymq.codec.compression import plain_body
from ferrymq.codec.errors import CorruptRecordError
from ferrymq.codec.message_id import offset_message_id
from ferrymq.codec.properties import (
    KEY_SEPARATOR,
    NOT_USER_PROPERTY_NAMES,
    PROPERTY_KEYS,
    PROPERTY_LITE_TOPIC,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_PRIORITY,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb

RECORD_SIZE = struct.Struct(">i")

_sequence = itertools.count()
_PREFIX = f"FE{os.getpid() & 0xFFFF:04X}{time.time_ns() & 0xFFFFFFFFFFFF:012X}"
_BYTE_HEX = tuple(f"{value:02X}" for value in range(256))
# The id's text up to its last byte, and the sequence >> 8 it was made for: formatting
# an int per message cost more than the rest of a Message. One tuple, read and replaced
# whole, so a thread that finds another's never mixes two.
_head: tuple[int, str] = (-1, "")


def new_message_id() -> str:
    """34 uppercase hex characters like the official clients' ids, unique per process:
    a marker, the pid, the client's start time, and a sequence."""
    global _head
    number = next(_sequence) & 0xFFFFFFFFFFFFFFFF
    head = _head
    if head[0] != number >> 8:
        head = _head = (number >> 8, f"{_PREFIX}{number >> 8:014X}")
    return head[1] + _BYTE_HEX[number & 0xFF]


def message_id_in_python(number: int) -> str:
    """The id ``new_message_id`` makes of sequence number ``number``: its specification."""
    return f"{_PREFIX}{number & 0xFFFFFFFFFFFFFFFF:016X}"


@dataclass
class Message:
    topic: str
    body: bytes
    tag: str | None = None
    keys: list[str] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    message_group: str | None = None  # FIFO topics: the order key
    delivery_time_ms: int | None = None  # DELAY topics
    message_id: str = field(default_factory=new_message_id)
    lite_topic: str | None = None  # LITE topics: the lite topic it belongs to
    priority: int | None = None  # PRIORITY topics: higher is consumed first

    def to_wire(self, message_type: int | None = None) -> pb.Message:
        if message_type is None:
            message_type = pb.NORMAL
            if self.message_group:
                message_type = pb.FIFO
            elif self.delivery_time_ms is not None:
                message_type = pb.DELAY
        system = pb.SystemProperties(
            message_id=self.message_id,
            message_type=message_type,
            body_encoding=pb.IDENTITY,
            born_timestamp=_timestamp(time.time_ns() // 1_000_000),
            keys=self.keys,
        )
        if self.tag:
            system.tag = self.tag
        if self.message_group:
            system.message_group = self.message_group
        if self.delivery_time_ms is not None:
            system.delivery_timestamp.CopyFrom(_timestamp(self.delivery_time_ms))
        if self.lite_topic is not None:
            system.lite_topic = self.lite_topic
        if self.priority is not None:
            system.priority = self.priority
        return pb.Message(
            topic=pb.Resource(name=self.topic),
            user_properties=self.properties,
            system_properties=system,
            body=self.body,
        )


@dataclass(slots=True, unsafe_hash=True)
class SendReceipt:
    """What a send's answer says of one message: a value, compared and hashed by its
    fields, read-only by convention. Not ``frozen``: a batch send makes one per message,
    and a frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``
    (2.2 µs against 0.55 with slots here); the SDK's CPU per message in bench.cluster's
    batch fell from 5.4 to 3.9 µs without it (bench/RESULTS.md)."""

    message_id: str
    queue_offset: int
    transaction_id: str = ""


# The queue a resent dead letter is delivered from (``Admin.resend_dead_letters``): its
# queue offset is its offset in the group's dead-letter queue, not one of the topic's.
RESENT_QUEUE_ID = 2**31 - 1


@dataclass(slots=True)
class ReceivedMessage:
    """A message as a consumer receives it. Its fields are slots: the SDK's C reader
    (``received_messages``) writes a Fetch answer's messages straight into them, without a
    call of ``__init__`` or an instance dict per message."""

    topic: str
    queue_id: int
    queue_offset: int
    message_id: str
    body: bytes
    tag: str | None
    keys: list[str]
    properties: dict[str, str]
    message_group: str | None
    born_timestamp_ms: int
    store_timestamp_ms: int
    delivery_attempt: int = 0
    receipt_handle: str = ""
    broker_group: str = ""  # where it is stored (acks and commits go to its master)
    lite_topic: str | None = None
    priority: int | None = None

    @property
    def resent_dead_letter(self) -> bool:
        """Whether this is a dead letter an operator gave back to the group (its queue
        offset is then the dead-letter queue's)."""
        return self.queue_id == RESENT_QUEUE_ID

    @classmethod
    def from_record(cls, stored: StoredMessage, broker_group: str = "") -> ReceivedMessage:
        """From a CommitLog record as the Data service returns it."""
        properties = stored.properties
        return cls(
            topic=stored.topic,
            queue_id=stored.queue_id,
            queue_offset=stored.queue_offset,
            message_id=properties.get(PROPERTY_UNIQ_KEY) or stored.offset_message_id,
            body=plain_body(stored.body, stored.sys_flag),
            tag=properties.get(PROPERTY_TAGS),
            keys=stored.keys,
            properties={k: v for k, v in properties.items() if k not in NOT_USER_PROPERTY_NAMES},
            message_group=properties.get(PROPERTY_MESSAGE_GROUP),
            born_timestamp_ms=stored.born_timestamp_ms,
            store_timestamp_ms=stored.store_timestamp_ms,
            broker_group=broker_group,
            lite_topic=properties.get(PROPERTY_LITE_TOPIC),
            priority=_priority(properties.get(PROPERTY_PRIORITY, "")),
        )

    @classmethod
    def from_wire(cls, message: pb.Message, broker_group: str = "") -> ReceivedMessage:
        system = message.system_properties
        return cls(
            topic=message.topic.name,
            queue_id=system.queue_id,
            queue_offset=system.queue_offset,
            message_id=system.message_id,
            body=message.body,
            tag=system.tag if system.HasField("tag") else None,
            keys=list(system.keys),
            properties=dict(message.user_properties),
            message_group=system.message_group if system.HasField("message_group") else None,
            born_timestamp_ms=_millis(system.born_timestamp),
            store_timestamp_ms=_millis(system.store_timestamp),
            delivery_attempt=system.delivery_attempt,
            receipt_handle=system.receipt_handle,
            broker_group=broker_group,
            lite_topic=system.lite_topic if system.HasField("lite_topic") else None,
            priority=system.priority if system.HasField("priority") else None,
        )


def _priority(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def decode_records(records: bytes) -> list[StoredMessage]:
    """Split a Fetch answer into records (each starts with its total size).
    Bytes that are not whole message records raise ``FerryError`` (MALFORMED_ANSWER)."""
    found = []
    position, end = 0, len(records)
    try:
        while position < end:
            (size,) = RECORD_SIZE.unpack_from(records, position)
            if not MIN_RECORD_SIZE <= size <= end - position:
                raise ValueError(f"a record of {size} bytes")
            found.append(decode(records, position))
            position += size
    except (CorruptRecordError, ValueError, struct.error) as error:
        raise FerryError(
            MALFORMED_ANSWER,
            "MALFORMED_ANSWER",
            f"byte {position} of {end} of a Fetch answer is no message record ({error})",
        ) from None
    return found


def received_messages(records: bytes | memoryview, broker_group: str = "") -> list[ReceivedMessage]:
    """The messages of a Fetch answer as the SDK's readers hand them out, in one C pass
    (``RecordReader.received``, ferrymq/codec/_speedups.c) that makes no ``StoredMessage``
    on the way; ``FerryError`` (MALFORMED_ANSWER) when its bytes are not whole message
    records, raised by the twin, ``received_in_python``, which reads any answer the C
    declines."""
    found = _RECORD_READER.received(records, broker_group)
    return found if found is not None else received_in_python(bytes(records), broker_group)


def received_in_python(records: bytes, broker_group: str = "") -> list[ReceivedMessage]:
    """What ``received_messages`` returns, record by record: the specification of its C."""
    return [ReceivedMessage.from_record(r, broker_group) for r in decode_records(records)]


def new_record_reader(received_type: type = ReceivedMessage) -> RecordReader:
    """A C reader of Fetch answers into ``received_type`` (whose only slots must be
    ReceivedMessage's fields). It keeps the property names it has met, so the SDK keeps
    one (``_RECORD_READER``) for every answer."""
    return RecordReader(**record_reader_arguments(received_type))


def record_reader_arguments(received_type: type = ReceivedMessage) -> dict:
    """``RecordReader``'s arguments: the class it makes, the property names it reads and
    the Python helpers it calls for what is rare."""
    return {
        "received_type": received_type,
        "not_user": NOT_USER_PROPERTY_NAMES,
        "uniq_key": PROPERTY_UNIQ_KEY,
        "tags": PROPERTY_TAGS,
        "keys": PROPERTY_KEYS,
        "message_group": PROPERTY_MESSAGE_GROUP,
        "lite_topic": PROPERTY_LITE_TOPIC,
        "priority": PROPERTY_PRIORITY,
        "key_separator": KEY_SEPARATOR,
        "offset_message_id": offset_message_id,
        "plain_body": plain_body,
        "priority_of": _priority,
    }


_RECORD_READER = new_record_reader()


def _timestamp(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def _millis(timestamp: timestamp_pb2.Timestamp) -> int:
    return timestamp.seconds * 1000 + timestamp.nanos // 1_000_000
