"""What the dispatcher needs to know about one CommitLog record."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class DispatchRequest:
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    tag_code: int
    store_timestamp_ms: int
    sys_flag: int
    keys: tuple[str, ...]  # KEYS then UNIQ_KEY: everything the index takes
    properties: dict[str, str]
