"""Recall handles: what a send of a delayed message answers, so that its producer can cancel
it before its delivery time (RocketMQ 5.3.2's RecallMessage, ``RECALL_MESSAGE``).

Format: RocketMQ's, URL-safe base64 (with padding) of the space-separated fields ``v1
<topic> <broker group> <delivery ms> <message id>``, because the 4.x-style Java client
decodes it to find the broker (its master) it sends the recall to. ferrymq appends a sixth
field, a keyed MAC (HMAC-SHA256 under the cluster's handle key, ``node/handle_key.py``,
its first 128 bits, hex): RocketMQ's readers ignore fields past the fifth, and a client
cannot make up a handle to cancel another producer's message. The delivery time is the
exact millisecond the timer holds the message under (RocketMQ writes its timer slot).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass

VERSION = "v1"
MAC_BYTES = 16
MAX_HANDLE_CHARS = 1024  # topic and group names are at most 127 characters each
DOMAIN = b"ferrymq recall handle\0"


class InvalidRecallHandle(ValueError):
    """Not a recall handle this cluster issued (or for another topic)."""


@dataclass(frozen=True)
class RecallTarget:
    topic: str
    broker_group: str
    due_ms: int
    message_id: str


class RecallHandles:
    """Issues and verifies recall handles under one key (every node derives the same)."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 32:
            raise ValueError("a recall handle key needs 32 bytes or more")
        self._key = key

    def issue(self, target: RecallTarget) -> str:
        fields = _fields(target)
        raw = " ".join((*fields, self._mac(fields)))
        return base64.urlsafe_b64encode(raw.encode()).decode()

    def verify(self, text: str, topic: str) -> RecallTarget:
        """The target ``text`` names, if this cluster issued it for ``topic``."""
        target, mac = _decode(text)
        if not hmac.compare_digest(mac, self._mac(_fields(target))):
            raise InvalidRecallHandle("the recall handle does not verify: not issued here")
        if target.topic != topic:
            raise InvalidRecallHandle(
                f"the recall handle is for topic {target.topic!r}, not {topic!r}"
            )
        return target

    def _mac(self, fields: tuple[str, ...]) -> str:
        message = DOMAIN + "\0".join(fields).encode()
        return hmac.new(self._key, message, hashlib.sha256).digest()[:MAC_BYTES].hex()


def broker_group_named(text: str) -> str | None:
    """The broker group a handle names, unverified (where to send the recall; its master
    verifies it), or None for text that is no handle."""
    try:
        return _decode(text)[0].broker_group
    except InvalidRecallHandle:
        return None


def _fields(target: RecallTarget) -> tuple[str, ...]:
    return (VERSION, target.topic, target.broker_group, str(target.due_ms), target.message_id)


def _decode(text: str) -> tuple[RecallTarget, str]:
    if not text or len(text) > MAX_HANDLE_CHARS:
        raise InvalidRecallHandle("the recall handle is empty or too long")
    try:
        raw = base64.urlsafe_b64decode(text.encode("ascii")).decode()
    except (binascii.Error, UnicodeError, ValueError):
        raise InvalidRecallHandle("the recall handle is not URL-safe base64 text") from None
    items = raw.split(" ")
    if len(items) != 6 or items[0] != VERSION:
        raise InvalidRecallHandle("the recall handle is not one this cluster issued")
    _, topic, group, due, message_id, mac = items
    if not due.isdigit() or not topic or not group or not message_id:
        raise InvalidRecallHandle("the recall handle's fields are malformed")
    return RecallTarget(topic, group, int(due), message_id), mac
