"""Offset resets the group's readers have not come to yet (RocketMQ 5's
``resetOffsetTable``): after a reset of a queue on its master, the group's next offset read
of the queue from another offset is answered "offset moved" to the reset offset, once, so
a consumer that keeps its own positions (ferrymq's PullConsumer, a 5.x PullConsumer, a 4.x
pull) goes on from the reset point instead of from its cached position, and the commit a
4.x pull carries with that read (its cached position too) is not stored.

Memory only, on the master that reset (as in RocketMQ): a failover, a restart or a read
served by a slave does not see it, and the reset offsets themselves are in the log either
way. Bounded: an entry lasts ``TTL_S`` (a consumer away for longer restarts from the
committed offset anyway), and at most ``MAX_ENTRIES`` are kept, the oldest dropped first.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

TTL_S = 300.0
MAX_ENTRIES = 100_000

QueueKey = tuple[str, str, int]  # (group, topic, queue id)


class PendingResets:
    def __init__(
        self,
        ttl_s: float = TTL_S,
        max_entries: int = MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.clock = clock
        self._entries: OrderedDict[QueueKey, tuple[int, float]] = OrderedDict()

    def mark(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """The group's offsets of ``topic``'s queues were reset to ``offsets`` now."""
        now = self.clock()
        for queue_id, offset in offsets.items():
            key = (group, topic, queue_id)
            self._entries.pop(key, None)
            self._entries[key] = (offset, now)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def take(self, group: str, topic: str, queue_id: int) -> int | None:
        """The offset the queue was reset to, if the group has not read it since (and
        forget it: one answer per reset); None otherwise."""
        if not self._entries:
            return None  # the common case: one dict check per read
        found = self._entries.pop((group, topic, queue_id), None)
        if found is None:
            return None
        offset, marked_at = found
        return offset if self.clock() - marked_at <= self.ttl_s else None

    def __len__(self) -> int:
        return len(self._entries)
