"""What the dispatcher knows about CommitLog records: one record whole
(``DispatchRequest``), one pass over records (``DispatchPlan``) and what listeners hear of
a pass (``DispatchBatch``)."""

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


# (topic, queue id, first queue offset, consume-queue entries packed as in the queue file)
QueueRun = tuple[str, int, int, bytes]


@dataclass(slots=True)
class DispatchPlan:
    """What dispatching the records from the cursor up to ``end`` writes, read from the log
    in one pass (``CommitLog.dispatch_plans``) without a Python object per record: the
    consume-queue entries by queue, the index keys, and whole requests only for the
    records some listener asked for (by topic or by property)."""

    end: int
    count: int
    runs: list[QueueRun]
    keys: bytes  # store.index_file.INDEX_KEY rows, one per key, in log order
    wanted: list[DispatchRequest]


@dataclass(slots=True)
class DispatchBatch:
    """What a dispatch listener hears of one pass: every queue that got entries, and the
    records it asked for (``Dispatcher.add_listener``), in log order; other listeners'
    records may be among them, so a listener still checks each record's topic."""

    queues: list[tuple[str, int]]
    records: list[DispatchRequest]
    end: int  # the log offset the pass reached: every record of it ends at or below
