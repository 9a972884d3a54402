"""RocketMQ 5's ``apache.rocketmq.v2.Message`` and the node's messages: what the gRPC door
reads from a sent message (``outgoing``) and writes for a consumer (``to_wire_message``).

System properties travel in the record's properties under RocketMQ's names (TAGS, KEYS,
UNIQ_KEY, __SHARDINGKEY, ...), so a record written from the gRPC protocol reads the same
as one written by any other door; a sent message's user properties therefore must not use
those names (the wire has a field for each).
"""

from __future__ import annotations

import hashlib

from google.protobuf import timestamp_pb2

from ferrymq.codec.commitlog_record import StoredMessage
from ferrymq.codec.compression import plain_body
from ferrymq.codec.properties import (
    NOT_USER_PROPERTY_NAMES,
    PROPERTY_DELIVERY_TIME_MS,
    PROPERTY_KEYS,
    PROPERTY_LITE_TOPIC,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_MESSAGE_TYPE,
    PROPERTY_PRIORITY,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    SYSTEM_PROPERTY_NAMES,
)
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.message_rules import KEY_PATTERN, born_host_bytes
from node.rpc_status import InvalidRequest
from node.services.send import OutgoingMessage


def millis_of(timestamp: timestamp_pb2.Timestamp) -> int:
    return timestamp.seconds * 1000 + timestamp.nanos // 1_000_000


# Clients send delivery times in seconds (the official example) or in milliseconds (its
# tests); no delivery time in seconds is above this, and every one in ms since 1973 is.
SECONDS_LIMIT = 100_000_000_000


def delivery_ms(timestamp: timestamp_pb2.Timestamp) -> int:
    """A client's delivery timestamp in ms, read as seconds unless it can only be ms."""
    if timestamp.seconds >= SECONDS_LIMIT:
        return timestamp.seconds
    return millis_of(timestamp)


def timestamp_of(millis: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=millis // 1000, nanos=(millis % 1000) * 1_000_000)


def outgoing(message: pb.Message, pinned: bool) -> OutgoingMessage:
    """A sent message as the send service reads it; ``InvalidRequest`` for what only this
    wire can get wrong (no message id, a user property with a system name, a key with
    spaces). ``pinned``: the caller names each message's queue on purpose. On the send path
    of every message: fields are read once each."""
    system = message.system_properties
    message_id = system.message_id
    if not message_id:
        raise InvalidRequest(pb.ILLEGAL_MESSAGE_ID, "message_id is required")
    user = message.user_properties
    properties: dict[str, str] = dict(user) if user else {}
    if properties and (SYSTEM_PROPERTY_NAMES.intersection(properties) or "" in properties):
        bad = next(n for n in properties if n in SYSTEM_PROPERTY_NAMES or not n)
        detail = f"user property {bad!r} is a reserved name" if bad else "property name is empty"
        raise InvalidRequest(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, detail)
    if system.HasField("tag"):
        properties[PROPERTY_TAGS] = system.tag
    keys = system.keys
    if keys:
        for key in keys:
            if not KEY_PATTERN.fullmatch(key):
                raise InvalidRequest(pb.ILLEGAL_MESSAGE_KEY, f"key {key!r} is empty or has spaces")
        properties[PROPERTY_KEYS] = " ".join(keys)
    properties[PROPERTY_UNIQ_KEY] = message_id
    group = None
    if system.HasField("message_group"):
        group = system.message_group
        properties[PROPERTY_MESSAGE_GROUP] = group
    priority = None
    if system.HasField("priority"):
        priority = system.priority
        properties[PROPERTY_PRIORITY] = str(priority)
    lite_topic = None
    if system.HasField("lite_topic"):
        lite_topic = system.lite_topic
        properties[PROPERTY_LITE_TOPIC] = lite_topic
    born = system.born_timestamp
    return OutgoingMessage(
        message.body,
        properties,
        system.message_type,
        message_group=group,
        pinned_queue=system.queue_id if pinned else None,
        delivery_ms=delivery_ms(system.delivery_timestamp)
        if system.HasField("delivery_timestamp")
        else None,
        born_ms=born.seconds * 1000 + born.nanos // 1_000_000,
        born_host=born_host_bytes(system.born_host),
        priority=priority,
        lite_topic=lite_topic,
        stamp_type=True,
    )


def host_string(raw: bytes) -> str:
    return ".".join(str(b) for b in raw[:4]) + f":{int.from_bytes(raw[4:8], 'big')}"


def body_digest(body: bytes) -> pb.Digest:
    """MD5 in upper-case hex, as Apache RocketMQ's proxy sends: every official client
    computes that one alike. Their CRC32s differ (Java and Go write no leading zeros,
    Python pads to eight digits, Node.js writes decimal), and a push consumer discards a
    message whose digest it cannot match, so a CRC32 lost messages for some client."""
    return pb.Digest(
        type=pb.MD5, checksum=hashlib.md5(body, usedforsecurity=False).hexdigest().upper()
    )


def _untyped_kind(properties: dict[str, str]) -> int:
    """The type of a record stored without ``__MSG_TYPE`` (a 4.x door's)."""
    if PROPERTY_PRIORITY in properties:
        return pb.PRIORITY
    return pb.LITE if PROPERTY_LITE_TOPIC in properties else pb.NORMAL


def to_wire_message(
    stored: StoredMessage,
    *,
    receipt_handle: str | None = None,
    delivery_attempt: int | None = None,
) -> pb.Message:
    """The message as a consumer receives it, with a body digest the official clients
    verify (``body_digest``)."""
    properties = stored.properties
    body = plain_body(stored.body, stored.sys_flag)  # a 4.x producer's may be compressed
    system = pb.SystemProperties(
        message_id=properties.get(PROPERTY_UNIQ_KEY) or stored.offset_message_id,
        body_digest=body_digest(body),
        body_encoding=pb.IDENTITY,
        message_type=int(properties.get(PROPERTY_MESSAGE_TYPE, _untyped_kind(properties))),
        born_timestamp=timestamp_of(stored.born_timestamp_ms),
        born_host=host_string(stored.born_host),
        store_timestamp=timestamp_of(stored.store_timestamp_ms),
        store_host=host_string(stored.store_host),
        queue_id=stored.queue_id,
        queue_offset=stored.queue_offset,
    )
    if PROPERTY_TAGS in properties:
        system.tag = properties[PROPERTY_TAGS]
    priority = properties.get(PROPERTY_PRIORITY, "")
    if priority.isdigit():
        system.priority = int(priority)
    if PROPERTY_LITE_TOPIC in properties:
        system.lite_topic = properties[PROPERTY_LITE_TOPIC]
    if stored.keys:
        system.keys.extend(stored.keys)
    if PROPERTY_MESSAGE_GROUP in properties:
        system.message_group = properties[PROPERTY_MESSAGE_GROUP]
    if PROPERTY_DELIVERY_TIME_MS in properties:
        system.delivery_timestamp.CopyFrom(timestamp_of(int(properties[PROPERTY_DELIVERY_TIME_MS])))
    if receipt_handle is not None:
        system.receipt_handle = receipt_handle
    if delivery_attempt is not None:
        system.delivery_attempt = delivery_attempt
    return pb.Message(
        topic=pb.Resource(name=stored.topic),
        user_properties={k: v for k, v in properties.items() if k not in NOT_USER_PROPERTY_NAMES},
        system_properties=system,
        body=body,
    )
