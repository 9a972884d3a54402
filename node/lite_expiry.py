"""Expiry of idle lite topics (RocketMQ 5.5's topic attribute ``lite.topic.expiration``).

A LITE topic with an expiration of N minutes (N > 0) deletes each of its lite topics whose
newest message was stored more than N minutes ago, and more than ``min_expiry_s`` ago (a
floor, RocketMQ's ``minLiteTTl``, 15 minutes). Only sends count: a lite topic whose
consumers lag still expires, as in RocketMQ. The master of the broker group checks every
``expiry_check_interval_s`` (RocketMQ's ``liteTtlCheckInterval``, 120 s), and not before
it has been master for ``min_expiry_s`` (RocketMQ: not in the broker's first
``minLiteTTl``): a node that just took over has not seen the clients' subscriptions yet.

Deleting a lite topic is one atomic batch (``node/lite_index.py``'s marker, then a POP
``expire`` record per group with a cursor of it, ``node/pop_state.py``): every node drops
the lite topic's offsets at or below the marker's ``upto`` when the marker is dispatched,
and after kill -9, restart or failover the marker and the records are replayed, so an
expired lite topic stays expired. The groups' deliveries of it in flight end (their acks
answer INVALID_RECEIPT_HANDLE): RocketMQ deletes a lite topic's consumer offsets whatever
the consumers were doing. Once stored, its subscriptions are removed from every client,
which is not told (RocketMQ's rule); a client that names it again subscribes again, and a
message sent to it later starts it afresh. A message that raced the expiry (stored after
the newest one the marker names) is kept, and so are the lite topic's subscriptions.

Finding the idle ones reads no message of a lite topic that is not: store times do not
decrease along the log, so every record from the first of a LITE topic's messages stored
at or after the cutoff time on is recent (a binary search of each of its queues finds
that offset), and a lite topic whose newest offset is there or later is active. Only the
others have their newest message read, for its store time (a clock that stepped back can
only keep a lite topic longer).

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from ha.replicated_store import ReplicatedStore
from node.lite_index import LiteIndex, expiry_marker
from node.lite_names import parent_topic
from node.lite_subscriptions import LiteSubscriptions
from node.pop_state import CursorKey, PopCursor, PopState
from node.topics import MessageType, TopicTable
from store.message import Message

log = logging.getLogger("ferrymq.lite_expiry")

CHECK_INTERVAL_S = 120  # RocketMQ's liteTtlCheckInterval
MIN_EXPIRY_S = 900  # RocketMQ's minLiteTTl: no lite topic expires younger
ROLE_POLL_S = 1.0  # how often the job looks whether this node is master
BATCH = 64  # lite topics deleted per append
SCAN_SLICE = 4096  # lite topics looked at between two pauses of the loop
PAUSE_S = 0.001  # a real sleep: other requests (and gRPC's threads) run meanwhile


def wall_ms() -> int:
    """The clock store times are compared with (a test's node may move it)."""
    return time.time_ns() // 1_000_000


class LiteExpiry:
    def __init__(
        self,
        store: ReplicatedStore,
        index: LiteIndex,
        topics: TopicTable,
        pop_state: PopState,
        subscriptions: LiteSubscriptions,
        is_master: Callable[[], bool],
        interval_s: float = CHECK_INTERVAL_S,
        min_expiry_s: float = MIN_EXPIRY_S,
        clock_ms: Callable[[], int] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.index = index
        self.topics = topics
        self.pop_state = pop_state
        self.subscriptions = subscriptions
        self.is_master = is_master
        self.interval_s = interval_s
        self.min_expiry_s = min_expiry_s
        self.clock_ms = clock_ms or wall_ms
        self.monotonic = monotonic
        self._master_since: float | None = None
        self.expired = 0  # lite topics this node deleted

    async def run(self) -> None:
        """Check every ``interval_s`` until cancelled."""
        next_check = self.monotonic() + self.interval_s
        while True:
            await asyncio.sleep(min(ROLE_POLL_S, self.interval_s))
            self._observe_role()
            if self.monotonic() < next_check:
                continue
            next_check = self.monotonic() + self.interval_s
            try:
                await self.check()
            except Exception:  # one failed round must not end expiry for good
                log.exception("lite topic expiry round failed")

    def _observe_role(self) -> bool:
        """Whether this node is master; remembers since when."""
        if not self.is_master():
            self._master_since = None
            return False
        if self._master_since is None:
            self._master_since = self.monotonic()
        return True

    async def check(self) -> int:
        """One round on the master: delete the lite topics due; how many were."""
        if not self._observe_role():
            return 0
        if self.monotonic() - self._master_since < self.min_expiry_s:
            return 0
        due = await self.due(self.clock_ms())
        return await self._expire(due) if due else 0

    async def due(self, now_ms: int) -> list[tuple[str, int]]:
        """(lmq name, CommitLog offset of its newest message) of each lite topic idle past
        its topic's expiration and ``min_expiry_s`` at ``now_ms``."""
        floor_ms = int(self.min_expiry_s * 1000)
        cutoffs = {
            config.name: now_ms - max(config.lite_expiration_minutes * 60_000, floor_ms)
            for config in self.topics.topics.values()
            if config.message_type is MessageType.LITE and config.lite_expiration_minutes > 0
        }
        if not cutoffs:
            return []
        bounds = {topic: self._active_from(topic, cutoff) for topic, cutoff in cutoffs.items()}
        found = []
        for scanned, (lmq, newest) in enumerate(self.index.newest(), 1):
            if scanned % SCAN_SLICE == 0:
                await asyncio.sleep(PAUSE_S)
            topic = parent_topic(lmq)
            bound = bounds.get(topic)
            if bound is None or newest >= bound:
                continue
            stored = self.index.message_at(lmq, newest)
            if stored is not None and stored.store_timestamp_ms < cutoffs[topic]:
                found.append((lmq, newest))
        return found

    def _active_from(self, topic: str, cutoff_ms: int) -> int:
        """A CommitLog offset from which every record was stored at ``cutoff_ms`` or later
        (store times do not decrease along the log): the lowest, over ``topic``'s queues, of
        each one's first message stored then or later; the log's end when none was."""
        store = self.store
        bound = store.write_offset
        for queue_id in store.queue_ids(topic):
            queue_offset = store.offset_by_time(topic, queue_id, cutoff_ms)
            if queue_offset >= store.max_offset_in_queue(topic, queue_id):
                continue
            queue = store.consume_queue(topic, queue_id)
            entry = queue.entry_at(queue_offset) if queue is not None else None
            if entry is not None:
                bound = min(bound, entry[0])
        return bound

    async def _expire(self, due: list[tuple[str, int]]) -> int:
        """Delete ``due`` lite topics a batch at a time; stops at a refused append (the
        rest is due again at the next round)."""
        groups = self._cursor_groups({lmq for lmq, _ in due})
        expired = 0
        for start in range(0, len(due), BATCH):
            # One whose newest message changed since it was found is not idle.
            batch = due[start : start + BATCH]
            chunk = [(lmq, upto) for lmq, upto in batch if self.index.end(lmq) == upto + 1]
            if chunk and not await self._expire_batch(chunk, groups):
                break
            expired += len(chunk)
            await asyncio.sleep(PAUSE_S)
        if expired:
            log.info("expired %d idle lite topics", expired)
        self.expired += expired
        return expired

    async def _expire_batch(
        self, chunk: list[tuple[str, int]], groups: dict[str, list[str]]
    ) -> bool:
        """One atomic batch of markers and POP ``expire`` records; False if refused."""
        records: list[Message] = []
        undo: list[tuple[CursorKey, PopCursor | None]] = []
        for lmq, upto in chunk:
            self.index.hide(lmq, upto)  # no receive delivers them while the batch is stored
            records.append(expiry_marker(lmq, upto))
            for group in groups.get(lmq, ()):
                key = (group, lmq, 0)
                record, before = self.pop_state.expire(key, upto)
                records.append(record)
                undo.append((key, before))
        result = None
        try:
            result = await self.pop_state.append(records)
        finally:
            for lmq, _ in chunk:
                self.index.unhide(lmq)
            if result is None or not result.appended:  # the log never had them
                for key, before in undo:
                    self.pop_state.restore_expired(key, before)
        if not result.appended:
            log.warning("lite topic expiry not stored: %s", result.error or result.status)
            return False
        for lmq, _ in chunk:
            if not self.index.exists(lmq):  # else a message raced the expiry: it stays
                self.subscriptions.drop_lite_topic(lmq)
        return True

    def _cursor_groups(self, lmqs: set[str]) -> dict[str, list[str]]:
        """The groups with a POP cursor of each of ``lmqs``."""
        groups: dict[str, list[str]] = {}
        for group, topic, _ in list(self.pop_state.cursors):
            if topic in lmqs:
                groups.setdefault(topic, []).append(group)
        return groups
