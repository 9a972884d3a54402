"""The rules of a message's properties that every door shares, and the reading of
Data.Produce records (the SDK's sends, whose properties come already encoded).

A property only the node sets (``NODE_PROPERTIES``: a delayed message's due time, a
transaction's id) is refused on every door; tags and keys have one syntax on every door;
BORNHOST is the peer's IPv4 address. The produce records are read in one C pass
(``scan_produce_records``) whose Python twin, ``read_produce_record``, raises the precise
error of a record the C pass leaves.
"""

from __future__ import annotations

import functools
import ipaddress
import re

from ferrymq.codec._speedups import ProduceScanner
from ferrymq.codec.commitlog_record import encode_host
from ferrymq.codec.errors import InvalidMessageError
from ferrymq.codec.produce_records import (
    PRODUCE_HEAD_SIZE,
    PRODUCE_SPAN,
    MalformedRecords,
    produce_record_at,
)
from ferrymq.codec.properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTIES_MAX_BYTES,
    PROPERTY_DELIVERY_TIME_MS,
    PROPERTY_KEYS,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_MESSAGE_TYPE,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_UNIQ_KEY,
    check_encoded_properties,
)
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.admission import check_body_size, check_type_text
from node.rpc_status import InvalidRequest

TAG_FORBIDDEN = ("|", "\x01", "\x02")
MESSAGE_TYPE_TEXT = {value: str(value) for value in pb.MessageType.values()}
KEY_PATTERN = re.compile(r"\S+")  # keys are space-separated in KEYS: no whitespace inside


@functools.lru_cache(maxsize=4096)
def tag_is_valid(tag: str) -> bool:
    """Tags repeat endlessly: each distinct one is checked once."""
    return bool(tag.strip()) and not any(c in tag for c in TAG_FORBIDDEN)


# Properties only the node sets, on its own paths (a delayed message's due time, a
# transaction half's id): a message that arrives with one is refused, whichever door.
NODE_PROPERTIES = frozenset({PROPERTY_DELIVERY_TIME_MS, PROPERTY_TRANSACTION_ID})
KEYS_TEXT = re.compile(r"\S+(?: \S+)*")  # KEYS: keys without whitespace, one space apart


@functools.lru_cache(maxsize=4096)
def born_host_bytes(text: str) -> bytes:
    """BORNHOST from the client's string: IPv4 with an optional port, else zeros."""
    host, _, port = text.rpartition(":") if text.count(":") == 1 else (text, "", "0")
    try:
        address = ipaddress.IPv4Address(host)
        return encode_host(str(address), int(port) if port.isdigit() else 0)
    except (ValueError, OverflowError):
        return b"\x00" * 8


# ---- Data.Produce records (ferrymq/codec/produce_records.py has the layout) ----------


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


def check_properties(properties: dict[str, str], reserved: frozenset[str]) -> None:
    """The rules of a message's properties on every door: none of ``reserved`` (the
    node's own), a tag without ``|``, keys without whitespace, a message group that is
    not empty; ``InvalidRequest`` with the code of the first broken."""
    if reserved.intersection(properties):
        bad = next(name for name in properties if name in reserved)
        raise InvalidRequest(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property {bad!r} is the node's own")
    tag = properties.get(PROPERTY_TAGS)
    if tag is not None and not tag_is_valid(tag):
        raise InvalidRequest(pb.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} is empty or contains '|'")
    keys = properties.get(PROPERTY_KEYS)
    if keys is not None and not KEYS_TEXT.fullmatch(keys):
        raise InvalidRequest(pb.ILLEGAL_MESSAGE_KEY, f"keys {keys!r}: empty or with whitespace")
    if properties.get(PROPERTY_MESSAGE_GROUP) == "":
        raise InvalidRequest(pb.ILLEGAL_MESSAGE_GROUP, "message_group is empty")


def check_produce_properties(properties: dict[str, str], message_type_text: str) -> None:
    """A produce record's properties: its message id and type (the record's contract,
    already encoded), and ``check_properties``."""
    if not properties.get(PROPERTY_UNIQ_KEY):
        raise InvalidRequest(pb.ILLEGAL_MESSAGE_ID, "UNIQ_KEY (the message id) is required")
    check_type_text(properties.get(PROPERTY_MESSAGE_TYPE), message_type_text)
    check_properties(properties, NODE_PROPERTIES)


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


# The produce records' reader in C: ``produce_spans``, ``scan_produce_records`` and the
# produce lane's ``node.remoting.ferry_data.produce_run``.
PRODUCE_SCANNER = ProduceScanner(
    uniq_key=PROPERTY_UNIQ_KEY,
    message_type=PROPERTY_MESSAGE_TYPE,
    tags=PROPERTY_TAGS,
    keys=PROPERTY_KEYS,
    message_group=PROPERTY_MESSAGE_GROUP,
    forbidden=tuple(sorted(NODE_PROPERTIES)),
)


def scan_produce_records(
    records: bytes, count: int, body_limit: int, message_type_text: str
) -> list[tuple[int, bytes, bytes, int, dict[str, str]] | int]:
    """``read_produce_record`` of ``count`` records in one C pass (ferrymq/codec/_speedups.c): item
    i is what it returns for record i, or record i's position where it would raise; the
    list ends after a record whose lengths do not fit. Refusals are left to
    ``read_produce_record`` so that each error is written once, in Python."""
    return PRODUCE_SCANNER.scan(records, count, body_limit, message_type_text)


def produce_spans(
    records: bytes | memoryview, count: int, body_limit: int, message_type_text: str
) -> bytes | None:
    """Where each of ``count`` records lies (``PRODUCE_SPAN`` per record) when all of them
    pass every check Produce makes of one record and fill ``records`` exactly, in one C
    pass that builds no object per record; None when any does not (the caller then reads
    them one by one, ``scan_produce_records``, for each record's own answer). The twin is
    ``produce_spans_in_python``."""
    return PRODUCE_SCANNER.spans(
        records, count, body_limit, message_type_text, PROPERTIES_MAX_BYTES
    )


def produce_spans_in_python(
    records: bytes | memoryview, count: int, body_limit: int, message_type_text: str
) -> bytes | None:
    """What ``produce_spans`` returns: ``read_produce_record`` and the store's check of the
    encoded properties (``check_encoded_properties``) passed by every record, in turn."""
    records = bytes(records)  # a view of a request's frame reads as its bytes
    spans = bytearray()
    position = 0
    try:
        for _ in range(count):
            end, body, raw, born_ms, properties = read_produce_record(
                records, position, body_limit, message_type_text
            )
            check_encoded_properties(raw, properties)
            spans += PRODUCE_SPAN.pack(position + PRODUCE_HEAD_SIZE, len(body), len(raw), born_ms)
            position = end
    except (InvalidRequest, InvalidMessageError, MalformedRecords):
        return None
    return bytes(spans) if position == len(records) else None
