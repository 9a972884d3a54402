"""Compressed message bodies, as RocketMQ 4.x producers send them: SYSFLAG bit 0x1 says
the body is compressed, bits 8-10 say how (0 or 3 zlib, 1 LZ4, 2 ZSTD). The Java client
compresses bodies of 4 KiB and more with zlib; the Go client and ali-ons set only 0x1
(zlib too).

The store keeps the record as sent (a remoting pull returns it as is, and the 4.x client
inflates it); readers that speak of plain bodies (the gRPC doors, the SDK) inflate it
with ``plain_body``. The node admits only bodies this can inflate (``node/admission.py``).
"""

from __future__ import annotations

import zlib

SYSFLAG_COMPRESSED = 0x1
COMPRESSION_TYPE_MASK = 0x700
COMPRESSION_TYPE_SHIFT = 8
ZLIB_TYPES = frozenset({0, 3})
TYPE_NAMES = {0: "zlib", 1: "LZ4", 2: "ZSTD", 3: "zlib"}


class CompressedBodyError(ValueError):
    """A body flagged compressed that cannot be inflated here, or inflates too far."""


def compression_type(sys_flag: int) -> int | None:
    """The compression type of a record's SYSFLAG; None for a plain body."""
    if not sys_flag & SYSFLAG_COMPRESSED:
        return None
    return (sys_flag & COMPRESSION_TYPE_MASK) >> COMPRESSION_TYPE_SHIFT


def inflate(body: bytes, sys_flag: int, limit: int) -> bytes:
    """The plain body of a record, at most ``limit`` bytes of it; ``CompressedBodyError``
    saying why when there is none."""
    kind = compression_type(sys_flag)
    if kind is None:
        return body
    if kind not in ZLIB_TYPES:
        name = TYPE_NAMES.get(kind, f"type {kind}")
        raise CompressedBodyError(f"{name} compressed bodies are not served, only zlib")
    inflater = zlib.decompressobj()
    try:
        plain = inflater.decompress(body, limit + 1)
    except zlib.error as error:
        raise CompressedBodyError(f"compressed body is not zlib data: {error}") from None
    if len(plain) > limit:
        raise CompressedBodyError(f"compressed body inflates beyond {limit} bytes")
    if not inflater.eof:
        raise CompressedBodyError("compressed body is truncated zlib data")
    return plain


def plain_body(body: bytes, sys_flag: int) -> bytes:
    """The body a reader of plain bodies gets: inflated when the record is zlib
    compressed (admission lets in no other compressed body), else as stored."""
    if compression_type(sys_flag) not in ZLIB_TYPES:
        return body
    try:
        return zlib.decompress(body)
    except zlib.error:
        return body  # not admitted by this node (a record from elsewhere): as stored
