"""Conversion between ``apache.rocketmq.v2.Message`` and the store's records.

System properties travel in the record's properties under RocketMQ's names (TAGS, KEYS,
UNIQ_KEY, __SHARDINGKEY, ...), so a record written from the gRPC protocol reads the same
as one written by any other path; user properties keep their own names, which therefore
must not collide with the system ones.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import re

from google.protobuf import timestamp_pb2

from ferrymq.codec._speedups import ProduceScanner
from ferrymq.codec.commitlog_record import StoredMessage, encode_host
from ferrymq.codec.compression import plain_body
from ferrymq.codec.produce_records import produce_record_at
from ferrymq.codec.properties import (
    NAME_VALUE_SEPARATOR,
    NOT_USER_PROPERTY_NAMES,
    PROPERTY_DELIVERY_TIME_MS,
    PROPERTY_KEYS,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_MESSAGE_TYPE,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_UNIQ_KEY,
    SYSTEM_PROPERTY_NAMES,
)
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.admission import check_body_size, check_type_text
from node.rpc_status import InvalidRequest
from store.message import Message

TAG_FORBIDDEN = ("|", "\x01", "\x02")
MESSAGE_TYPE_TEXT = {value: str(value) for value in pb.MessageType.values()}
KEY_PATTERN = re.compile(r"\S+")  # keys are space-separated in KEYS: no whitespace inside


@functools.lru_cache(maxsize=4096)
def tag_is_valid(tag: str) -> bool:
    """Tags repeat endlessly: each distinct one is checked once."""
    return bool(tag.strip()) and not any(c in tag for c in TAG_FORBIDDEN)


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


@functools.lru_cache(maxsize=4096)
def born_host_bytes(text: str) -> bytes:
    """BORNHOST from the client's string: IPv4 with an optional port, else zeros."""
    host, _, port = text.rpartition(":") if text.count(":") == 1 else (text, "", "0")
    try:
        address = ipaddress.IPv4Address(host)
        return encode_host(str(address), int(port) if port.isdigit() else 0)
    except (ValueError, OverflowError):
        return b"\x00" * 8


def to_store_message(message: pb.Message, queue_id: int, topic: str) -> Message:
    """The record to store for one sent message of ``topic``; ``InvalidRequest`` names
    what is wrong. On the send path of every message: fields are read once each."""
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
        tag = system.tag
        if not tag_is_valid(tag):
            raise InvalidRequest(pb.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} is empty or contains '|'")
        properties[PROPERTY_TAGS] = tag
    keys = system.keys
    if keys:
        for key in keys:
            if not KEY_PATTERN.fullmatch(key):
                raise InvalidRequest(pb.ILLEGAL_MESSAGE_KEY, f"key {key!r} is empty or has spaces")
        properties[PROPERTY_KEYS] = " ".join(keys)
    properties[PROPERTY_UNIQ_KEY] = message_id
    if system.HasField("message_group"):
        group = system.message_group
        if not group:
            raise InvalidRequest(pb.ILLEGAL_MESSAGE_GROUP, "message_group is empty")
        properties[PROPERTY_MESSAGE_GROUP] = group
    message_type = system.message_type
    properties[PROPERTY_MESSAGE_TYPE] = MESSAGE_TYPE_TEXT.get(message_type) or str(message_type)
    born = system.born_timestamp
    return Message(
        topic,
        message.body,
        queue_id,
        properties,
        0,
        0,
        born.seconds * 1000 + born.nanos // 1_000_000,
        born_host_bytes(system.born_host),
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
        message_type=int(properties.get(PROPERTY_MESSAGE_TYPE, pb.NORMAL)),
        born_timestamp=timestamp_of(stored.born_timestamp_ms),
        born_host=host_string(stored.born_host),
        store_timestamp=timestamp_of(stored.store_timestamp_ms),
        store_host=host_string(stored.store_host),
        queue_id=stored.queue_id,
        queue_offset=stored.queue_offset,
    )
    if PROPERTY_TAGS in properties:
        system.tag = properties[PROPERTY_TAGS]
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


# ---- Data.Produce records (ferrymq/codec/produce_records.py has the layout) ----------
# Set by the node on its own paths (timers, transactions), never by a produce record.
PRODUCE_FORBIDDEN_NAMES = frozenset({PROPERTY_DELIVERY_TIME_MS, PROPERTY_TRANSACTION_ID})
KEYS_TEXT = re.compile(r"\S+(?: \S+)*")  # KEYS: keys without whitespace, one space apart


def produce_properties(raw: bytes) -> dict[str, str]:
    """A produce record's encoded properties as a dict; ``InvalidRequest`` unless they are
    UTF-8 ``name 0x01 value 0x02`` pairs with distinct, non-empty names."""
    try:
        pairs = raw.decode().split(PROPERTY_SEPARATOR)
        if pairs.pop():
            raise ValueError("properties do not end with a separator")
        # Exactly one NAME_VALUE_SEPARATOR per pair, or dict() refuses the pair.
        properties = dict(pair.split(NAME_VALUE_SEPARATOR) for pair in pairs)
        if len(properties) != len(pairs) or "" in properties:
            raise ValueError("a property name is empty or repeated")
    except ValueError as error:  # UnicodeDecodeError included
        raise InvalidRequest(
            pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"properties are not name/value pairs: {error}"
        ) from None
    return properties


def check_produce_properties(properties: dict[str, str], message_type_text: str) -> None:
    """What ``to_store_message`` checks, on a produce record's properties."""
    if not properties.get(PROPERTY_UNIQ_KEY):
        raise InvalidRequest(pb.ILLEGAL_MESSAGE_ID, "UNIQ_KEY (the message id) is required")
    check_type_text(properties.get(PROPERTY_MESSAGE_TYPE), message_type_text)
    tag = properties.get(PROPERTY_TAGS)
    if tag is not None and not tag_is_valid(tag):
        raise InvalidRequest(pb.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} is empty or contains '|'")
    keys = properties.get(PROPERTY_KEYS)
    if keys is not None and not KEYS_TEXT.fullmatch(keys):
        raise InvalidRequest(pb.ILLEGAL_MESSAGE_KEY, f"keys {keys!r}: empty or with whitespace")
    if PRODUCE_FORBIDDEN_NAMES.intersection(properties):
        bad = next(n for n in properties if n in PRODUCE_FORBIDDEN_NAMES)
        raise InvalidRequest(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property {bad!r} is reserved")
    if properties.get(PROPERTY_MESSAGE_GROUP) == "":
        raise InvalidRequest(pb.ILLEGAL_MESSAGE_GROUP, "message_group is empty")


def read_produce_record(
    records: bytes, position: int, body_limit: int, message_type_text: str
) -> tuple[int, bytes, bytes, int, dict[str, str]]:
    """The produce record at ``position`` with every check Produce makes of one record:
    (next position, body, encoded properties, born timestamp, properties).
    ``MalformedRecords`` when its lengths do not fit, ``InvalidRequest`` when it is refused."""
    end, body, raw, born_ms = produce_record_at(records, position)
    properties = produce_properties(raw)
    check_body_size(len(body), body_limit)
    check_produce_properties(properties, message_type_text)
    return end, body, raw, born_ms, properties


_PRODUCE_SCANNER = ProduceScanner(
    uniq_key=PROPERTY_UNIQ_KEY,
    message_type=PROPERTY_MESSAGE_TYPE,
    tags=PROPERTY_TAGS,
    keys=PROPERTY_KEYS,
    message_group=PROPERTY_MESSAGE_GROUP,
    forbidden=tuple(sorted(PRODUCE_FORBIDDEN_NAMES)),
)


def scan_produce_records(
    records: bytes, count: int, body_limit: int, message_type_text: str
) -> list[tuple[int, bytes, bytes, int, dict[str, str]] | int]:
    """``read_produce_record`` of ``count`` records in one C pass (ferrymq/codec/_speedups.c): item
    i is what it returns for record i, or record i's position where it would raise; the
    list ends after a record whose lengths do not fit. Refusals are left to
    ``read_produce_record`` so that each error is written once, in Python."""
    return _PRODUCE_SCANNER.scan(records, count, body_limit, message_type_text)
