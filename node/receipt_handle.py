"""Receipt handles of POP deliveries.

A handle names one delivery of one message: the queue, the queue offset and the delivery
id, a random 64-bit number minted when the message was delivered (or its invisibility
changed). Only the delivery that is current for that offset may ack, change or forward the
message, so a handle of an earlier delivery (the message was redelivered since) is stale.

The text carries a keyed MAC (HMAC-SHA256, its first 128 bits) over those fields and the
topic and group the delivery was for, under a key only the nodes hold (``handle_key``):
a client cannot make up a handle for a delivery it was not given, and a handle of one
group or topic is refused for another. Every node of a cluster derives the same key, so a
new master verifies the handles its predecessor issued.

Format: ``h2.<queue id>.<queue offset>.<delivery id hex>.<mac hex>``, opaque to clients.
The first format, ``<queue id>.<queue offset>.<delivery id hex>.<crc32 hex>``, had a
checksum anyone could compute; such a handle is refused with ``OLD_FORMAT`` (the message
comes back once its invisibility ends, as for any refused ack).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import zlib
from dataclasses import dataclass

VERSION = "h2"
MAC_BYTES = 16
DELIVERY_HEX_DIGITS = 16
MAX_HANDLE_CHARS = 128  # a handle this node issues is at most about 80
HANDLE_PATTERN = re.compile(
    VERSION + r"\.(?P<fields>(?P<queue>[0-9]{1,10})\.(?P<offset>[0-9]{1,19})"
    r"\.(?P<delivery>[0-9a-f]{16}))\.(?P<mac>[0-9a-f]{32})"
)
OLD_PATTERN = re.compile(r"(?P<body>[0-9]{1,10}\.[0-9]{1,19}\.[0-9a-f]{16})\.(?P<crc>[0-9a-f]{8})")
OLD_FORMAT = (
    "is an old-format receipt handle (an unkeyed checksum, issued before this cluster's "
    "upgrade): it is refused; the message is delivered again once its invisibility ends"
)
FORGED = "does not verify: it was not issued by this cluster for this topic and group"


class MalformedReceiptHandle(ValueError):
    """The text is not a handle this cluster issued for the topic and group named."""


@dataclass(frozen=True)
class ReceiptHandle:
    queue_id: int
    queue_offset: int
    delivery: str  # 16 hex digits


class ReceiptHandles:
    """Issues and verifies the text of handles under one key."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 32:
            raise ValueError("a receipt-handle key has 32 bytes or more")
        self._keyed = hmac.new(key, digestmod=hashlib.sha256)  # copied per handle

    def encode(self, handle: ReceiptHandle, topic: str, group: str) -> str:
        fields = f"{handle.queue_id}.{handle.queue_offset}.{handle.delivery}"
        return f"{VERSION}.{fields}.{self._mac(fields, topic, group)}"

    def decode(self, text: str, topic: str, group: str) -> ReceiptHandle:
        """The handle ``text`` names; ``MalformedReceiptHandle`` saying why if it is not
        one this cluster issued for ``topic`` and ``group``."""
        matched = HANDLE_PATTERN.fullmatch(text)
        if matched is None:
            raise MalformedReceiptHandle(_why_not_a_handle(text))
        fields, mac = matched.group("fields", "mac")
        if not hmac.compare_digest(mac, self._mac(fields, topic, group)):
            raise MalformedReceiptHandle(f"receipt handle {text!r} {FORGED}")
        return ReceiptHandle(
            int(matched.group("queue")), int(matched.group("offset")), matched.group("delivery")
        )

    def _mac(self, fields: str, topic: str, group: str) -> str:
        # Topic and group names cannot hold a newline (routing.metadata.NAME_PATTERN).
        keyed = self._keyed.copy()
        keyed.update(f"{topic}\n{group}\n{fields}".encode())
        return keyed.digest()[:MAC_BYTES].hex()


def _why_not_a_handle(text: str) -> str:
    shown = repr(text[:80])
    if len(text) > MAX_HANDLE_CHARS:
        return (
            f"receipt handle {shown}... is {len(text)} characters, the limit is {MAX_HANDLE_CHARS}"
        )
    old = OLD_PATTERN.fullmatch(text)
    if old is not None and f"{zlib.crc32(old.group('body').encode()):08x}" == old.group("crc"):
        return f"receipt handle {shown} {OLD_FORMAT}"
    if text.startswith(VERSION + "."):
        return f"receipt handle {shown} is malformed"
    return f"receipt handle {shown} is not one of ours"


def new_delivery_id() -> str:
    return secrets.token_hex(DELIVERY_HEX_DIGITS // 2)
