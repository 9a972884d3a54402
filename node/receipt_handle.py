"""Receipt handles of POP deliveries.

A handle names one delivery of one message: the queue, the queue offset and the delivery
id, a random 64-bit number minted when the message was delivered (or its invisibility
changed). Only the delivery that is current for that offset may ack, change or forward the
message, so a handle of an earlier delivery (the message was redelivered since) is stale.
The text carries a CRC32 so that a mangled handle is told apart from a stale one.

Format: ``<queue id>.<queue offset>.<delivery id hex>.<crc32 hex>``, opaque to clients.
"""

from __future__ import annotations

import secrets
import zlib
from dataclasses import dataclass


class MalformedReceiptHandle(ValueError):
    """The text is not a handle this node issued."""


@dataclass(frozen=True)
class ReceiptHandle:
    queue_id: int
    queue_offset: int
    delivery: str  # 16 hex digits

    def encode(self) -> str:
        text = f"{self.queue_id}.{self.queue_offset}.{self.delivery}"
        return f"{text}.{zlib.crc32(text.encode()):08x}"

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        parts = text.split(".")
        if len(parts) != 4:
            raise MalformedReceiptHandle(f"receipt handle {text[:80]!r} is not one of ours")
        body, checksum = text.rpartition(".")[0], parts[3]
        if f"{zlib.crc32(body.encode()):08x}" != checksum:
            raise MalformedReceiptHandle(f"receipt handle {text[:80]!r} fails its checksum")
        queue_id, queue_offset, delivery = parts[0], parts[1], parts[2]
        if not (queue_id.isdigit() and queue_offset.isdigit() and len(delivery) == 16):
            raise MalformedReceiptHandle(f"receipt handle {text[:80]!r} is malformed")
        return cls(int(queue_id), int(queue_offset), delivery)


def new_delivery_id() -> str:
    return secrets.token_hex(8)
