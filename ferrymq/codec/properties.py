"""A record's properties: ``name\\x01value\\x02`` pairs (docs/architecture.md, "The
CommitLog record"), and the names the store, the node and the clients share. The well-known
names are RocketMQ's, so records stay readable by anyone who knows that format.
"""

from __future__ import annotations

from ferrymq.codec import _speedups as speedups
from ferrymq.codec.errors import InvalidMessageError

PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_MESSAGE_GROUP = "__SHARDINGKEY"
PROPERTY_DELIVERY_TIME_MS = "TIMER_DELIVER_MS"
PROPERTY_TRANSACTION_ID = "__transactionId__"
PROPERTY_MESSAGE_TYPE = "__MSG_TYPE"  # apache.rocketmq.v2.MessageType as sent
PROPERTY_PRIORITY = "_SYS_MSG_PRIORITY_"  # a PRIORITY message's priority (RocketMQ 5.4)
PROPERTY_LITE_TOPIC = "__LITE_TOPIC"  # a LITE message's lite topic (RocketMQ 5.5)
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
        PROPERTY_PRIORITY,
        PROPERTY_LITE_TOPIC,
    }
)
# What RocketMQ 4.x clients and brokers add to a message for themselves (the broker's
# cluster, the producer's wait-for-store flag, a transaction's flag and producer group,
# tracing switches): kept in the record, as RocketMQ keeps them, but no reader of user
# properties (the gRPC doors, the SDK) is shown them, as RocketMQ's proxy shows none.
REMOTING_SYSTEM_PROPERTY_NAMES = frozenset(
    {"CLUSTER", "WAIT", "TRAN_MSG", "PGROUP", "TRACE_ON", "MSG_REGION"}
)
NOT_USER_PROPERTY_NAMES = SYSTEM_PROPERTY_NAMES | REMOTING_SYSTEM_PROPERTY_NAMES
KEY_SEPARATOR = " "

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

PROPERTIES_MAX_BYTES = 32767


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
    """What ``decode_properties`` (C, ferrymq/codec/_speedups.c) does: pairs split at
    their first 0x01, empty pairs skipped, a later name replacing an earlier one."""
    if not raw:
        return {}
    result = {}
    for pair in raw.decode().split(PROPERTY_SEPARATOR):
        if pair:
            name, _, value = pair.partition(NAME_VALUE_SEPARATOR)
            result[name] = value
    return result


decode_properties = speedups.decode_properties
