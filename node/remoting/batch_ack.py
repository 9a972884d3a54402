"""The body of BATCH_ACK_MESSAGE (200151), RocketMQ 5's ``BatchAckMessageRequestBody``:
``{"brokerName": ..., "acks": [BatchAck, ...]}``, each ``BatchAck`` written by fastjson2
under short names (``c`` group, ``t`` topic, ``r`` retry, ``so`` start offset, ``q``
queue, ``rq`` revive queue, ``pt`` pop time, ``it`` invisible time, ``b`` bit set) or
read under its long ones. The bit set is ``java.util.BitSet.toByteArray()`` in base64:
bit *i* (byte i // 8, bit i % 8) acks the message at ``startOffset + i``.

A body that is not one is refused whole (``MalformedBatchAck``), before anything is acked.
At most ``ACK_ENTRIES_MAX`` offsets in one request, gRPC AckMessage's bound.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from node.services.pop import ACK_ENTRIES_MAX

MAX_BITSET_BYTES = 8192  # a wider set names more offsets than the bound allows anyway


class MalformedBatchAck(ValueError):
    """A body that is not a BatchAckMessageRequestBody, or one past the bound."""


@dataclass(frozen=True)
class BatchAck:
    group: str
    topic: str
    queue_id: int
    revive_qid: int  # the delivery tag the pop answered (broker_pop.py)
    pop_time_ms: int
    invisible_ms: int
    offsets: tuple[int, ...]


def _field(entry: dict, short: str, long: str, kind: type, default: object = None):
    value = entry.get(short, entry.get(long, default))
    if type(value) is not kind:
        raise MalformedBatchAck(f"ack field {short} ({long}) is not a {kind.__name__}")
    return value


def set_bits(encoded: str) -> list[int]:
    """The indexes of the set bits of a base64 ``BitSet.toByteArray()``."""
    if len(encoded) > MAX_BITSET_BYTES * 4 // 3 + 4:
        raise MalformedBatchAck(f"bit set of more than {MAX_BITSET_BYTES} bytes")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as error:
        raise MalformedBatchAck(f"bit set is not base64: {error}") from None
    return [i * 8 + bit for i, byte in enumerate(raw) for bit in range(8) if byte >> bit & 1]


def parse_batch_ack(body: bytes) -> list[BatchAck]:
    try:
        data = json.loads(body)
    except ValueError as error:
        raise MalformedBatchAck(f"body is not JSON: {error}") from None
    if type(data) is not dict or type(data.get("acks")) is not list:
        raise MalformedBatchAck('body is not {"brokerName": ..., "acks": [...]}')
    acks, total = [], 0
    for entry in data["acks"]:
        if type(entry) is not dict:
            raise MalformedBatchAck("an acks entry is not an object")
        start = _field(entry, "so", "startOffset", int)
        offsets = tuple(start + i for i in set_bits(_field(entry, "b", "bitSet", str, "")))
        total += len(offsets)
        if total > ACK_ENTRIES_MAX:
            raise MalformedBatchAck(f"more than {ACK_ENTRIES_MAX} offsets to ack, the limit")
        acks.append(
            BatchAck(
                group=_field(entry, "c", "consumerGroup", str),
                topic=_field(entry, "t", "topic", str),
                queue_id=_field(entry, "q", "queueId", int),
                revive_qid=_field(entry, "rq", "reviveQueueId", int),
                pop_time_ms=_field(entry, "pt", "popTime", int),
                invisible_ms=_field(entry, "it", "invisibleTime", int),
                offsets=offsets,
            )
        )
    return acks
