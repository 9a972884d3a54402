"""State derived from a system topic of the CommitLog, a node's one source of truth
(docs/architecture.md, "Node").

Consumer offsets and POP in-flight state are not kept in side files: every change is a
record appended to a system topic (queue 0), and the state is what those records say,
applied in log order. A replica that copies the log therefore rebuilds the same state, and
a restart after SIGKILL replays it from the topic's consume queue.

Retention deletes old segments, so the state cannot live only in old deltas: whenever the
active segment changes, a snapshot record holding the whole state is written into the new
segment. The oldest retained segment therefore always holds a snapshot followed by every
later change; deltas that precede the snapshot in that segment are contained in it, so
replaying them first is harmless (each ``apply`` must tolerate a delta on an older state).

A snapshot is also written after every ``SNAPSHOT_EVERY_RECORDS`` deltas, tagged so that
its consume-queue entry names it: replay starts at the newest snapshot, found by the tag
code without reading the CommitLog, so promoting a replica costs the deltas since the last
snapshot, not every retained record (promotions once took seconds in long chaos runs).

The node that writes the records changes its in-memory state when it decides a change,
synchronously, and only then appends the record: nothing else runs on the event loop in
between, and the store appends asyncio puts in submission order, so memory order is log
order and a snapshot (built from memory) covers exactly the records before it. A node that
did not write the records (a replica about to be promoted) rebuilds the state by replay.

Thread-safety: owned by the node's event loop; replay runs once, before serving.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from ferrymq.codec.properties import PROPERTY_TAGS
from ha.replicated_store import ReplicatedStore
from store.hashing import tag_hash_code
from store.message import Message
from store.results import PutResult, PutStatus

KIND = "kind"
KIND_SNAPSHOT = "snapshot"
SNAPSHOT_TAG = "snapshot"
SNAPSHOT_EVERY_RECORDS = 10_000
REPLAY_PAGE = 256
SCAN_PAGE = 4096  # consume-queue entries read at a time looking for the newest snapshot


class SystemState(ABC):
    """Base of a state machine fed by the records of one system topic."""

    topic: str

    def __init__(self, store: ReplicatedStore) -> None:
        self._store = store
        self._snapshot_segment: int | None = None
        self._since_snapshot = 0  # deltas appended or replayed after the newest snapshot
        self._snapshotting = False  # one snapshot at a time, not one per concurrent append

    # ---- subclass contract ---------------------------------------------------------
    @abstractmethod
    def apply(self, properties: dict[str, str], body: bytes) -> None:
        """Apply one delta record (anything but a snapshot)."""

    @abstractmethod
    def clear(self) -> None:
        """Forget the whole state (before a replay rebuilds it)."""

    @abstractmethod
    def restore(self, snapshot: bytes) -> None:
        """Replace the whole state with a snapshot's body."""

    @abstractmethod
    def snapshot(self) -> bytes | None:
        """The whole state as a snapshot body; None when there is nothing to keep."""

    # ---- replay and records --------------------------------------------------------
    def reload(self) -> None:
        """Forget and rebuild from the log (a promoted slave)."""
        self.clear()
        self._snapshot_segment = None
        self._since_snapshot = 0
        self.replay()

    def replay(self) -> None:
        """Rebuild the state from the topic's newest snapshot on (from its first retained
        record when it holds no tagged snapshot), in log order."""
        start = self._newest_snapshot_offset()
        for stored in self._store.walk_queue(self.topic, 0, start, REPLAY_PAGE):
            self.apply_record(stored.properties, stored.body, stored.physical_offset)

    def _newest_snapshot_offset(self) -> int:
        """Queue offset of the topic's newest tagged snapshot, scanning its consume queue
        backwards by tag code; the first retained offset when there is none."""
        queue = self._store.consume_queue(self.topic, 0)
        if queue is None:
            return 0
        code = tag_hash_code(SNAPSHOT_TAG)
        low, end = queue.min_offset, queue.max_offset
        while end > low:
            start = max(low, end - SCAN_PAGE)
            found = [o for o, (_, _, tag) in queue.entries(start, end - start) if tag == code]
            if found:
                return found[-1]
            end = start
        return low

    def apply_record(self, properties: dict[str, str], body: bytes, physical_offset: int) -> None:
        if properties.get(KIND) == KIND_SNAPSHOT:
            self.restore(body)
            self._snapshot_segment = self._segment_of(physical_offset)
            self._since_snapshot = 0
        else:
            self.apply(properties, body)
            self._since_snapshot += 1

    def record(self, kind: str, body: bytes = b"", **fields: str) -> Message:
        return Message(self.topic, body, properties={KIND: kind, **fields})

    async def append(self, records: list[Message]) -> PutResult:
        """Append records as one atomic batch, then keep the snapshot invariants."""
        result = await self._store.put_messages_async(records)
        if result.appended:
            self._since_snapshot += len(records)
        await self.snapshot_if_due()
        return result

    async def snapshot_if_due(self) -> None:
        """Write a snapshot when the active segment holds none yet, or after
        ``SNAPSHOT_EVERY_RECORDS`` deltas."""
        active_segment = self._store.active_segment_base()
        if active_segment is None or self._snapshotting:
            return
        new_segment = active_segment != self._snapshot_segment
        if not new_segment and self._since_snapshot < SNAPSHOT_EVERY_RECORDS:
            return
        body = self.snapshot()
        if body is None:
            return
        snapshot = Message(
            self.topic, body, properties={KIND: KIND_SNAPSHOT, PROPERTY_TAGS: SNAPSHOT_TAG}
        )
        self._snapshotting = True
        try:
            result = await self._store.put_messages_async([snapshot])
        finally:
            self._snapshotting = False
        if result.status is PutStatus.OK:
            self._snapshot_segment = self._segment_of(result.appended[0].physical_offset)
            self._since_snapshot = 0

    def _segment_of(self, physical_offset: int) -> int:
        size = self._store.config.commitlog_segment_bytes
        return physical_offset - physical_offset % size
