"""Store configuration: the defaults of docs/architecture.md's "Files on disk", all
overridable (tests use small files)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class FlushMode(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"  # acknowledge once in the page cache; flush in background
    SYNC_FLUSH = "SYNC_FLUSH"  # acknowledge once fsynced; writers share fsyncs


GIB = 1 << 30
MIB = 1 << 20


@dataclass(frozen=True)
class StoreConfig:
    data_dir: str
    commitlog_segment_bytes: int = GIB
    consume_queue_entries_per_file: int = 300_000
    index_slot_count: int = 5_000_000
    index_entry_count: int = 20_000_000
    flush_mode: FlushMode = FlushMode.ASYNC_FLUSH
    flush_interval_ms: int = 500
    flush_min_pages: int = 4
    flush_full_interval_ms: int = 10_000
    derived_flush_interval_ms: int = 1_000
    sync_flush_timeout_ms: int = 5_000
    max_message_body_bytes: int = 4 * MIB
    max_batch_bytes: int = 32 * MIB
    retention_ms: int = 72 * 3600 * 1000
    disk_high_water_ratio: float = 0.85
    retention_check_interval_ms: int = 10_000
    max_segments_deleted_per_run: int = 10
    store_host: str = "127.0.0.1"
    store_port: int = 10911
    preallocate_segments: bool = True
    # Flushed CommitLog bytes kept in the page cache behind the flush point; older ones are
    # dropped from it (mapped_file_queue, _drop_cached_behind). 0, the default: the kernel
    # decides, and a backlog written is read back from memory. A window bounds the memory
    # a node's log takes, so writes reuse pages rather than take new ones: for hosts where
    # new memory is dear (a VM returning free pages to its host), at the cost of reading
    # backlogs deeper than the window from disk (docs/architecture.md, the deviations).
    commitlog_cache_bytes: int = 0

    def __post_init__(self) -> None:
        # The largest record, plus room for a blank filler, must fit a segment.
        largest = self.max_message_body_bytes + 88 + 1 + 255 + 2 + 32767 + 8
        if self.commitlog_segment_bytes < largest:
            raise ValueError(
                f"commitlog_segment_bytes ({self.commitlog_segment_bytes}) must hold the "
                f"largest record ({largest} bytes): lower max_message_body_bytes or raise it"
            )
        if self.max_batch_bytes > self.commitlog_segment_bytes - 8:
            object.__setattr__(self, "max_batch_bytes", self.commitlog_segment_bytes - 8)
        if self.commitlog_cache_bytes < 0:
            raise ValueError("commitlog_cache_bytes must be 0 (the kernel decides) or more")
        if not 0 < self.disk_high_water_ratio <= 1:
            raise ValueError("disk_high_water_ratio must be in (0, 1]")
