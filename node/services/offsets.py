"""Offsets, through every door: a queue's bounds and where a time falls in it (RocketMQ 5
QueryOffset, 4.x GET_MIN/MAX_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP,
GET_EARLIEST_MSG_STORETIME, Admin QueryOffsetByTime), and a group's committed offsets
(RocketMQ 5 UpdateOffset / GetOffset, 4.x UPDATE / QUERY_CONSUMER_OFFSET and the commit a
pull carries).

The order of every call: SUBSCRIBE on the topic (and on the group for a group's offsets;
``%RETRY%<group>``: the group's own), the topic and queue exist, the group exists or is
created on first use (only the group the ACL allowed), then the offset. Committed offsets
are records in the CommitLog (``node/consumer_offsets.py``), so replicated and replayed,
and the same whichever door a consumer uses.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ha.replicated_store import ReplicatedStore
from node.admission import check_queue, store_refusal
from node.consumer_offsets import ConsumerOffsets
from node.group_creation import GroupsOnFirstUse
from node.rpc_status import InvalidRequest
from node.services.caller import Caller
from node.services.permissions import Permissions, consume, read
from node.topics import TopicConfig, TopicTable
from store.results import PutStatus

log = logging.getLogger("ferrymq.offsets")
COMMITS_UNDER_WAY_MAX = 1024  # commits carried by pulls, stored in the background
# RocketMQ's ``accessMessageInMemoryMaxRatio``: the newest 40 % of physical memory's worth
# of CommitLog bytes count as "still in memory" (``start_of_new_group``).
IN_MEMORY_RATIO = 0.4


def in_memory_bytes() -> int:
    """How many of the CommitLog's newest bytes count as still in memory."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        physical = 8 << 30
    return int(physical * IN_MEMORY_RATIO)


class OffsetService:
    def __init__(
        self,
        store: ReplicatedStore,
        topics: TopicTable,
        offsets: ConsumerOffsets,
        groups: GroupsOnFirstUse,
        permissions: Permissions,
        in_memory: int | None = None,
    ) -> None:
        """``in_memory``: how many of the CommitLog's newest bytes count as still in
        memory (``in_memory_bytes()`` when None)."""
        self.store = store
        self.in_memory = in_memory_bytes() if in_memory is None else in_memory
        self.topics = topics
        self.offsets = offsets
        self.groups = groups
        self.permissions = permissions
        self._commits: set[asyncio.Task] = set()

    # ---- a queue's bounds --------------------------------------------------------------
    async def queue(self, caller: Caller, topic_name: str, queue_id: int) -> TopicConfig:
        """The topic, once ``caller`` may read ``queue_id`` of it."""
        self.permissions.require(caller, read(topic_name))
        topic = await self.topics.topic_caught_up(topic_name)
        check_queue(topic, queue_id)
        return topic

    async def min_offset(self, caller: Caller, topic: str, queue_id: int) -> int:
        name = (await self.queue(caller, topic, queue_id)).name
        return self.store.min_offset_in_queue(name, queue_id)

    async def max_offset(self, caller: Caller, topic: str, queue_id: int) -> int:
        name = (await self.queue(caller, topic, queue_id)).name
        return self.store.max_offset_in_queue(name, queue_id)

    async def offset_by_time(self, caller: Caller, topic: str, queue_id: int, time_ms: int) -> int:
        name = (await self.queue(caller, topic, queue_id)).name
        return self.store.offset_by_time(name, queue_id, time_ms)

    async def earliest_store_time_ms(self, caller: Caller, topic: str, queue_id: int) -> int:
        """The store time of the queue's first message; -1 for an empty queue."""
        name = (await self.queue(caller, topic, queue_id)).name
        store = self.store
        first = store.message_at(name, queue_id, store.min_offset_in_queue(name, queue_id))
        return first.store_timestamp_ms if first is not None else -1

    # ---- a group's committed offsets -----------------------------------------------------
    async def group_queue(
        self, caller: Caller, group: str, topic_name: str, queue_id: int
    ) -> TopicConfig:
        """The topic, once ``caller`` may consume ``queue_id`` of it as ``group`` (which
        exists, or was created now)."""
        self.permissions.require(caller, consume(topic_name, group))
        topic = await self.topics.topic_caught_up(topic_name)
        check_queue(topic, queue_id)
        await self.groups.group(group)
        return topic

    async def committed(
        self, caller: Caller, group: str, topic: str, queue_id: int
    ) -> tuple[int | None, int]:
        """The group's committed offset of the queue (None: none), and the queue's end."""
        name = (await self.group_queue(caller, group, topic, queue_id)).name
        return self.offsets.get(group, name, queue_id), self.store.max_offset_in_queue(
            name, queue_id
        )

    def start_of_new_group(self, topic: str, queue_id: int) -> int | None:
        """Where a group that committed nothing for the queue starts, RocketMQ's rule: 0
        while the queue's first message is still in memory (its queue begins at 0 and it
        lies among the CommitLog's newest ``in_memory`` bytes), so a consumer that starts
        right after the first sends reads them all; None past that (the client applies
        its ``consumeFromWhere``, usually the queue's end: a backlog too old to be in
        memory is not replayed to a new group)."""
        if self.store.min_offset_in_queue(topic, queue_id) > 0:
            return None
        queue = self.store.consume_queue(topic, queue_id)
        first = queue.entry_at(0) if queue is not None else None
        if first is None:
            return 0  # the queue never had a message: everything starts at 0
        return 0 if self.store.write_offset - first[0] <= self.in_memory else None

    async def commit(
        self, caller: Caller, group: str, topic: str, queue_id: int, offset: int
    ) -> pb.Status:
        """Commit ``offset`` (0..the queue's end) for the group: OK, or the store's
        refusal; ``InvalidRequest`` ILLEGAL_OFFSET outside the queue."""
        name = (await self.group_queue(caller, group, topic, queue_id)).name
        high = self.store.max_offset_in_queue(name, queue_id)
        if not 0 <= offset <= high:
            raise InvalidRequest(pb.ILLEGAL_OFFSET, f"offset {offset} outside [0, {high}]")
        if self.offsets.get(group, name, queue_id) == offset:
            return pb.Status(code=pb.OK, message="OK")  # nothing changes: no record
        result = await self.offsets.commit(group, name, queue_id, offset)
        if result.status is not PutStatus.OK:
            return store_refusal(result)
        return pb.Status(code=pb.OK, message="OK")

    def commit_soon(self, caller: Caller, group: str, topic: str, queue_id: int, offset: int):
        """The commit a 4.x pull carries, stored without holding up the pull (a commit
        under SYNC replication waits for the slaves). Only a master commits, only a change,
        only an offset the queue has, and at most ``COMMITS_UNDER_WAY_MAX`` at once (the
        next pull carries the offset again). The caller's pull was allowed on the same
        group and queue: the same decision is asked again here."""
        self.permissions.require(caller, consume(topic, group))
        if not self.store.is_master or self.offsets.get(group, topic, queue_id) == offset:
            return
        if not 0 <= offset <= self.store.max_offset_in_queue(topic, queue_id):
            return
        if len(self._commits) >= COMMITS_UNDER_WAY_MAX:
            return
        task = asyncio.ensure_future(self.offsets.commit(group, topic, queue_id, offset))
        self._commits.add(task)
        task.add_done_callback(self._committed)

    def _committed(self, task: asyncio.Task) -> None:
        self._commits.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("commit offset of a pull failed: %s", task.exception())
