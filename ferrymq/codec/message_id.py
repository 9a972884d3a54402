"""Offset message ids: where a record is, as an id a client can hand back (RocketMQ's
format: STOREHOST 8 bytes + PHYSICALOFFSET 8 bytes, upper-case hex)."""

from __future__ import annotations

import re

OFFSET_MESSAGE_ID_PATTERN = re.compile(r"[0-9A-Fa-f]{32}")


def offset_message_id(store_host: bytes, physical_offset: int) -> str:
    """STOREHOST (8 bytes) + PHYSICALOFFSET (8 bytes) as 32 upper-case hex characters."""
    return (store_host + physical_offset.to_bytes(8, "big")).hex().upper()


def parse_offset_message_id(message_id: str) -> tuple[bytes, int]:
    """Inverse of :func:`offset_message_id`; ``ValueError`` on anything malformed."""
    # Exactly 32 hex digits: ``bytes.fromhex`` alone skips whitespace, so "…  " with 30
    # digits would parse as a 15-byte id pointing at some other record.
    if not OFFSET_MESSAGE_ID_PATTERN.fullmatch(message_id):
        raise ValueError(f"an offset message id is 32 hex digits, got {message_id!r}")
    raw = bytes.fromhex(message_id)
    return raw[:8], int.from_bytes(raw[8:], "big")
