"""The checkpoint file: how far each part of the store is known to be on disk.

Offsets are CommitLog offsets: ``commitlog_flushed_offset`` (bytes fsynced),
``consume_queue_flushed_offset`` and ``index_flushed_offset`` (every derived entry of a
record below this offset is fsynced). Timestamps are kept beside them for operators, as
RocketMQ's checkpoint has them. Written to a temporary file, fsynced and renamed, so a
reader sees the old or the new checkpoint, never a torn one; a CRC guards the content.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from crc32c import crc32c

LAYOUT = struct.Struct(">qqqqqq")
CRC = struct.Struct(">I")


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
        body = LAYOUT.pack(
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
        """The stored checkpoint, or None when it is missing or damaged."""
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        if len(raw) != LAYOUT.size + CRC.size:
            return None
        body, (crc,) = raw[: LAYOUT.size], CRC.unpack(raw[LAYOUT.size :])
        if crc32c(body) != crc:
            return None
        return cls(*LAYOUT.unpack(body))
