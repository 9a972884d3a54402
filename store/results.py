"""Statuses and results the store hands back: precise, so callers can map them to wire codes."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ferrymq.codec.commitlog_record import StoredMessage
from ferrymq.codec.message_id import offset_message_id
from store.damaged_ranges import DamagedRange


class PutStatus(enum.Enum):
    OK = "OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"  # written, but not confirmed on disk in time
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"  # topic, body or batch breaks a limit
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    DISK_FULL = "DISK_FULL"  # nothing of the request was written
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"  # shut down, or not taking writes here
    # Replication (the node's ReplicatedStore; the store itself never answers these):
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"  # written here, not confirmed by replicas
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"  # refused, nothing written
    SYSTEM_BUSY = "SYSTEM_BUSY"  # refused, nothing written: the node is behind; retry


@dataclass(slots=True)
class AppendedMessage:
    physical_offset: int
    queue_offset: int
    size: int
    store_host: bytes

    @property
    def offset_message_id(self) -> str:
        # Formatted on demand: most callers never look at it, and the hot path stays lean.
        return offset_message_id(self.store_host, self.physical_offset)


@dataclass(slots=True)
class PutResult:
    status: PutStatus
    appended: list[AppendedMessage] = field(default_factory=list)
    error: str | None = None
    # Why a message was refused (``InvalidMessageError.reason``): callers map refusals to
    # their codes by this word, never by the text of ``error``.
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.OK


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"  # entries exist but the filter took none
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"  # unknown or empty queue
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"  # below the retained minimum
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"  # exactly at the end: nothing new yet
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"  # beyond the end
    # The reader's group had its offsets reset since (RocketMQ's OFFSET_RESET): go on from
    # ``next_begin_offset``. The node answers it (``node/pending_resets.py``), never the store.
    OFFSET_RESET = "OFFSET_RESET"


@dataclass(frozen=True)
class GetResult:
    status: GetStatus
    messages: list[StoredMessage]
    next_begin_offset: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True)
class RecoveryReport:
    """What the last open found: whether the previous run ended cleanly, where the log
    ends, the offset and reason of the record that stopped the scan if it was bad, and
    the range kept aside when that was damage rather than a torn tail."""

    clean_shutdown: bool
    scan_start_offset: int
    end_offset: int
    records_scanned: int
    redispatched: int
    corrupt_offset: int | None = None
    corruption: str | None = None
    damaged: DamagedRange | None = None


@dataclass(frozen=True)
class LogFigures:
    """The CommitLog's extent and the disk under it, as operators' tools print them."""

    min_offset: int
    write_offset: int
    flushed_offset: int
    dispatched_offset: int
    earliest_store_ms: int  # the store time of its first record (0: nothing stored)
    disk_total_bytes: int  # 0 when the disk could not be read
    disk_free_bytes: int
