"""The checkpoint file: how far each part of the store is known to be on disk.

Offsets are CommitLog offsets: ``commitlog_flushed_offset`` (bytes fsynced),
``consume_queue_flushed_offset`` and ``index_flushed_offset`` (every derived entry of a
record below this offset is fsynced). Timestamps are kept beside them for operators, as
RocketMQ's checkpoint has them. Written to a temporary file, fsynced and renamed, so a
reader sees the old or the new checkpoint, never a torn one; a CRC guards the content.

Versions, each read by every later release (golden files in ``tests/golden/formats/``):

- 1 (up to 0.1.0): the six offsets and timestamps (``LAYOUT``) and a CRC32C of them,
  52 bytes; its size is all that names it.
- 2: ``MAGIC`` (``FMQCKPT`` and the version digit), then version 1's layout, then a
  CRC32C of everything before it, 60 bytes. A release that does not know the version
  reads the file as missing, and recovery scans the log from its first segment: slower,
  never wrong. So a node downgraded to 0.1.0 recovers once from the first segment.
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass

from crc32c import crc32c

LAYOUT = struct.Struct(">qqqqqq")
CRC = struct.Struct(">I")
MAGIC_PREFIX = b"FMQCKPT"
VERSION = 2
MAGIC = MAGIC_PREFIX + str(VERSION).encode()
VERSION_1_BYTES = LAYOUT.size + CRC.size
VERSION_2_BYTES = len(MAGIC) + LAYOUT.size + CRC.size

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Checkpoint:
    commitlog_flushed_offset: int = 0
    consume_queue_flushed_offset: int = 0
    index_flushed_offset: int = 0
    commitlog_flushed_timestamp_ms: int = 0
    consume_queue_flushed_timestamp_ms: int = 0
    index_flushed_timestamp_ms: int = 0

    @property
    def recovery_start_offset(self) -> int:
        """Below this offset the log and everything derived from it are durable."""
        return min(
            self.commitlog_flushed_offset,
            self.consume_queue_flushed_offset,
            self.index_flushed_offset,
        )

    def write(self, path: str) -> None:
        body = MAGIC + LAYOUT.pack(
            self.commitlog_flushed_offset,
            self.consume_queue_flushed_offset,
            self.index_flushed_offset,
            self.commitlog_flushed_timestamp_ms,
            self.consume_queue_flushed_timestamp_ms,
            self.index_flushed_timestamp_ms,
        )
        temporary = path + ".tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, body + CRC.pack(crc32c(body)))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
        directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    @classmethod
    def read(cls, path: str) -> Checkpoint | None:
        """The stored checkpoint of version 1 or 2, or None when it is missing, damaged or
        of a version this code does not know (recovery then scans the whole log)."""
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        if raw.startswith(MAGIC_PREFIX) and raw[: len(MAGIC)] != MAGIC:
            log.warning(
                "checkpoint %s is of version %r, newer than %d: recovering from the log's "
                "first segment",
                path,
                raw[len(MAGIC_PREFIX) : len(MAGIC)].decode("ascii", "replace"),
                VERSION,
            )
            return None
        if len(raw) == VERSION_2_BYTES and raw.startswith(MAGIC):
            body, layout = raw[: -CRC.size], raw[len(MAGIC) : -CRC.size]
        elif len(raw) == VERSION_1_BYTES:
            body = layout = raw[: -CRC.size]
        else:
            return None
        if crc32c(body) != CRC.unpack(raw[-CRC.size :])[0]:
            return None
        return cls(*LAYOUT.unpack(layout))
