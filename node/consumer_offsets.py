"""Committed consumer offsets, kept as system records in the CommitLog (DESIGN principle 1).

Each commit appends a record to the system topic ``%SYS%CONSUMER_OFFSETS``; the table is
what those records say, applied in log order by a dispatcher listener, so a replica that
copies the log gets the same table. At start the table is rebuilt by reading the topic's
consume queue.

Retention deletes old segments, so the state cannot live only in old deltas: whenever the
active segment changes, a snapshot record holding the whole table is written into the new
segment. The oldest retained segment therefore always holds a snapshot followed by every
later change (a delta written before that snapshot in the same segment is contained in it).

Thread-safety: the listener runs under the store's put lock; reads and commits happen on the
node's event loop. Updates are single dict assignments, atomic under the GIL.
"""

from __future__ import annotations

import json

from store.dispatch_request import DispatchRequest
from store.message import Message
from store.message_store import MessageStore
from store.results import PutResult, PutStatus

OFFSETS_TOPIC = "%SYS%CONSUMER_OFFSETS"
KIND = "kind"
KIND_COMMIT = "commit"
KIND_SNAPSHOT = "snapshot"

OffsetKey = tuple[str, str, int]  # (group, topic, queue id)


class ConsumerOffsets:
    def __init__(self, store: MessageStore) -> None:
        self._store = store
        self._offsets: dict[OffsetKey, int] = {}
        self._snapshot_segment: int | None = None

    def load(self) -> None:
        """Rebuild the table from the log, then follow new records."""
        store = self._store
        offset = store.min_offset_in_queue(OFFSETS_TOPIC, 0)
        end = store.max_offset_in_queue(OFFSETS_TOPIC, 0)
        while offset < end:
            page = store.get_messages(OFFSETS_TOPIC, 0, offset, 256)
            for stored in page.messages:
                self._apply(stored.properties, stored.body, stored.physical_offset)
            if page.next_begin_offset <= offset:
                break
            offset = page.next_begin_offset
        store.dispatcher.listeners.append(self._on_dispatch)

    def get(self, group: str, topic: str, queue_id: int) -> int | None:
        return self._offsets.get((group, topic, queue_id))

    def of_group(self, group: str) -> dict[tuple[str, int], int]:
        return {(t, q): o for (g, t, q), o in self._offsets.items() if g == group}

    async def commit(self, group: str, topic: str, queue_id: int, offset: int) -> PutResult:
        """Append a commit record; the table changes when the record is dispatched."""
        record = Message(
            OFFSETS_TOPIC,
            b"",
            properties={
                KIND: KIND_COMMIT,
                "group": group,
                "topic": topic,
                "queue": str(queue_id),
                "offset": str(offset),
            },
        )
        result = await self._store.put_messages_async([record])
        await self.snapshot_if_segment_changed()
        return result

    async def snapshot_if_segment_changed(self) -> None:
        """Write a snapshot into the active segment unless it already holds one."""
        last = self._store.commitlog.segments.last
        if last is None or last.base_offset == self._snapshot_segment or not self._offsets:
            return
        entries = [[g, t, q, o] for (g, t, q), o in sorted(self._offsets.items())]
        snapshot = Message(
            OFFSETS_TOPIC, json.dumps(entries).encode(), properties={KIND: KIND_SNAPSHOT}
        )
        result = await self._store.put_messages_async([snapshot])
        if result.status is PutStatus.OK:
            self._snapshot_segment = self._segment_of(result.appended[0].physical_offset)

    def _segment_of(self, physical_offset: int) -> int:
        size = self._store.config.commitlog_segment_bytes
        return physical_offset - physical_offset % size

    def _on_dispatch(self, request: DispatchRequest) -> None:
        if request.topic != OFFSETS_TOPIC:
            return
        body = b""
        if request.properties.get(KIND) == KIND_SNAPSHOT:
            stored = self._store.commitlog.read(request.physical_offset)
            assert stored is not None, "a dispatched record must be readable"
            body = stored.body
        self._apply(request.properties, body, request.physical_offset)

    def _apply(self, properties: dict[str, str], body: bytes, physical_offset: int) -> None:
        kind = properties.get(KIND)
        if kind == KIND_COMMIT:
            key = (properties["group"], properties["topic"], int(properties["queue"]))
            self._offsets[key] = int(properties["offset"])
        elif kind == KIND_SNAPSHOT:
            self._offsets = {(g, t, int(q)): int(o) for g, t, q, o in json.loads(body)}
            self._snapshot_segment = self._segment_of(physical_offset)
