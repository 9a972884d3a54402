"""Committed consumer offsets, kept as records of ``%SYS%CONSUMER_OFFSETS``.

Each commit changes the table and appends its record (see ``node.system_state`` for why
memory order equals log order); a commit whose record fails to append is undone.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import json

from node.system_state import SystemState
from store.results import PutResult

OFFSETS_TOPIC = "%SYS%CONSUMER_OFFSETS"
KIND_COMMIT = "commit"

OffsetKey = tuple[str, str, int]  # (group, topic, queue id)


class ConsumerOffsets(SystemState):
    topic = OFFSETS_TOPIC

    def __init__(self, store) -> None:
        super().__init__(store)
        self._offsets: dict[OffsetKey, int] = {}

    def load(self) -> None:
        """Rebuild the table from the log."""
        self.replay()

    def clear(self) -> None:
        self._offsets.clear()

    def get(self, group: str, topic: str, queue_id: int) -> int | None:
        return self._offsets.get((group, topic, queue_id))

    def topics_of(self, group: str) -> list[str]:
        """The topics ``group`` committed offsets of, sorted."""
        return sorted({topic for g, topic, _ in self._offsets if g == group})

    def groups_of(self, topic: str) -> list[str]:
        """The groups that committed offsets of ``topic``, sorted."""
        return sorted({g for g, t, _ in self._offsets if t == topic})

    async def commit(self, group: str, topic: str, queue_id: int, offset: int) -> PutResult:
        """Commit ``offset``: the table changes now, the record makes it durable."""
        key = (group, topic, queue_id)
        previous = self._offsets.get(key)
        record = self.record(
            KIND_COMMIT, group=group, topic=topic, queue=str(queue_id), offset=str(offset)
        )
        self._offsets[key] = offset
        result = await self.append([record])
        if not result.ok and self._offsets.get(key) == offset:
            # Not in the log, so not committed; a later commit of the key stays.
            if previous is None:
                del self._offsets[key]
            else:
                self._offsets[key] = previous
        return result

    # ---- SystemState ---------------------------------------------------------------
    def apply(self, properties: dict[str, str], body: bytes) -> None:
        if properties.get("kind") == KIND_COMMIT:
            key = (properties["group"], properties["topic"], int(properties["queue"]))
            self._offsets[key] = int(properties["offset"])

    def restore(self, snapshot: bytes) -> None:
        self._offsets = {(g, t, int(q)): int(o) for g, t, q, o in json.loads(snapshot)}

    def snapshot(self) -> bytes | None:
        if not self._offsets:
            return None
        return json.dumps([[g, t, q, o] for (g, t, q), o in sorted(self._offsets.items())]).encode()
