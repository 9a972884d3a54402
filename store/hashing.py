"""Hash functions whose values are part of on-disk formats."""

from __future__ import annotations

from functools import lru_cache

from crc32c import crc32c


@lru_cache(maxsize=4096)
def tag_hash_code(tag: str) -> int:
    """Java's ``String.hashCode`` of ``tag`` (signed 32-bit over UTF-16 code units).

    The ConsumeQueue stores this value so that the tag filter agrees with RocketMQ
    clients; tags repeat endlessly, so the cache makes it free on the hot path.
    """
    h = 0
    for unit in _utf16_units(tag):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _utf16_units(text: str) -> list[int]:
    raw = text.encode("utf-16-be")
    return [int.from_bytes(raw[i : i + 2], "big") for i in range(0, len(raw), 2)]


def index_key_hash(key: bytes) -> int:
    """The 4-byte hash of an index key (``topic#key``). Any stable hash would do because a
    lookup re-checks the real topic and key of each hit; CRC32C runs in C."""
    return crc32c(key)
