"""State derived from a system topic of the CommitLog (DESIGN principle 1).

Consumer offsets and POP in-flight state are not kept in side files: every change is a
record appended to a system topic (queue 0), and the state is what those records say,
applied in log order. A replica that copies the log therefore rebuilds the same state, and
a restart after SIGKILL replays it from the topic's consume queue.

Retention deletes old segments, so the state cannot live only in old deltas: whenever the
active segment changes, a snapshot record holding the whole state is written into the new
segment. The oldest retained segment therefore always holds a snapshot followed by every
later change; deltas that precede the snapshot in that segment are contained in it, so
replaying them first is harmless (each ``apply`` must tolerate a delta on an older state).

The node that writes the records changes its in-memory state when it decides a change,
synchronously, and only then appends the record: nothing else runs on the event loop in
between, and the store appends asyncio puts in submission order, so memory order is log
order and a snapshot (built from memory) covers exactly the records before it. A node that
did not write the records (a replica about to be promoted) rebuilds the state by replay.

Thread-safety: owned by the node's event loop; replay runs once, before serving.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from store.message import Message
from store.message_store import MessageStore
from store.results import PutResult, PutStatus

KIND = "kind"
KIND_SNAPSHOT = "snapshot"
REPLAY_PAGE = 256


class SystemState(ABC):
    """Base of a state machine fed by the records of one system topic."""

    topic: str

    def __init__(self, store: MessageStore) -> None:
        self._store = store
        self._snapshot_segment: int | None = None

    # ---- subclass contract ---------------------------------------------------------
    @abstractmethod
    def apply(self, properties: dict[str, str], body: bytes) -> None:
        """Apply one delta record (anything but a snapshot)."""

    @abstractmethod
    def restore(self, snapshot: bytes) -> None:
        """Replace the whole state with a snapshot's body."""

    @abstractmethod
    def snapshot(self) -> bytes | None:
        """The whole state as a snapshot body; None when there is nothing to keep."""

    # ---- replay and records --------------------------------------------------------
    def replay(self) -> None:
        """Rebuild the state from every retained record of the topic, in log order."""
        store = self._store
        offset = store.min_offset_in_queue(self.topic, 0)
        end = store.max_offset_in_queue(self.topic, 0)
        while offset < end:
            page = store.get_messages(self.topic, 0, offset, REPLAY_PAGE)
            for stored in page.messages:
                self.apply_record(stored.properties, stored.body, stored.physical_offset)
            if page.next_begin_offset <= offset:
                break
            offset = page.next_begin_offset

    def apply_record(self, properties: dict[str, str], body: bytes, physical_offset: int) -> None:
        if properties.get(KIND) == KIND_SNAPSHOT:
            self.restore(body)
            self._snapshot_segment = self._segment_of(physical_offset)
        else:
            self.apply(properties, body)

    def record(self, kind: str, body: bytes = b"", **fields: str) -> Message:
        return Message(self.topic, body, properties={KIND: kind, **fields})

    async def append(self, records: list[Message]) -> PutResult:
        """Append records as one atomic batch, then keep the snapshot invariant."""
        result = await self._store.put_messages_async(records)
        await self.snapshot_if_segment_changed()
        return result

    async def snapshot_if_segment_changed(self) -> None:
        """Write a snapshot into the active segment unless it already holds one."""
        last = self._store.commitlog.segments.last
        if last is None or last.base_offset == self._snapshot_segment:
            return
        body = self.snapshot()
        if body is None:
            return
        result = await self._store.put_messages_async([self.record(KIND_SNAPSHOT, body)])
        if result.status is PutStatus.OK:
            self._snapshot_segment = self._segment_of(result.appended[0].physical_offset)

    def _segment_of(self, physical_offset: int) -> int:
        size = self._store.config.commitlog_segment_bytes
        return physical_offset - physical_offset % size
