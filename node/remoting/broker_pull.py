"""PULL_MESSAGE: a queue's stored records from an offset, as RocketMQ 4.x consumers read
them.

The body is the records back to back, exactly as the CommitLog holds them: ferrymq's
record layout is RocketMQ's (docs/architecture.md, "The CommitLog record"), so nothing is
decoded or copied per message. BODYCRC holds CRC32C where RocketMQ writes CRC32; no 4.x
client checks it (docs/architecture.md, "Remoting").

Codes and ``nextBeginOffset`` follow RocketMQ's broker: found (0); nothing new at the end
of the queue (19, after waiting up to ``suspendTimeoutMillis`` when the request may be
suspended: ``node/long_polling.py``, the one wait loop of every read); everything in the
window filtered out (20, the offset moves on); an offset outside the queue (21, with
where to go). The filter is the request's own subscription when it carries one (sysFlag
4), else the one its group registered by heartbeat (``subscriptions.py``): TAG (the store
skips other tags by their hash) or SQL92 (``node/sql_filter.py``, the evaluator the gRPC
doors use, applied to each record read). An expression that does not parse is answered as
RocketMQ answers it: SUBSCRIPTION_PARSE_FAILED for the pull's own, FILTER_DATA_NOT_EXIST
for a registered one; the remark says what is wrong and where.

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from ferrymq.codec.commitlog_record import decode as decode_record
from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ha.replicated_store import ReplicatedStore
from node.admission import check_queue
from node.consumer_offsets import ConsumerOffsets
from node.filter_expression import selection
from node.group_creation import GroupsOnFirstUse
from node.long_polling import QueueWaiters, long_poll, poll_budget_s
from node.remoting.dispatch import Handler
from node.remoting.status_codes import refusal
from node.remoting.subscriptions import Subscriptions
from node.rpc_status import InvalidRequest
from node.topics import Permission, TopicError, TopicTable
from store.results import GetResult, GetStatus

log = logging.getLogger("ferrymq.remoting")

# RocketMQ caps a pull at 32 messages; a message may be 4 MiB, so the byte cap lets the
# first one through whatever its size (``get_records``) and stops the others at 1 MiB.
PULL_MAX_MESSAGES = 32
PULL_MAX_BYTES = 1 << 20
# PullSysFlag bits.
SYSFLAG_COMMIT_OFFSET = 0x1
SYSFLAG_SUSPEND = 0x2
SYSFLAG_SUBSCRIPTION = 0x4
# RocketMQ's remark for a registered expression it could not compile, kept word for word.
FILTER_DATA_MISSING = "The broker's consumer filter data is not exist!Your expression may be wrong!"
EXPRESSION_TYPES = {"TAG": pb.TAG, "": pb.TAG, "SQL92": pb.SQL}


def pull_outcome(result: GetResult, offset: int) -> tuple[ResponseCode, int]:
    """RocketMQ's pull status and nextBeginOffset for one read of a queue."""
    status = result.status
    if result.messages:
        return ResponseCode.SUCCESS, result.next_begin_offset
    if status is GetStatus.NO_MESSAGE_IN_QUEUE:
        # A queue that never had a message: only offset 0 is where it will start.
        if offset != 0:
            return ResponseCode.PULL_OFFSET_MOVED, 0
        return ResponseCode.PULL_NOT_FOUND, 0
    if status is GetStatus.OFFSET_TOO_SMALL:
        return ResponseCode.PULL_OFFSET_MOVED, result.min_offset
    if status is GetStatus.OFFSET_OVERFLOW_BADLY:
        low, high = result.min_offset, result.max_offset
        return ResponseCode.PULL_OFFSET_MOVED, low if low == 0 else high
    if status is GetStatus.OFFSET_OVERFLOW_ONE or result.next_begin_offset <= offset:
        return ResponseCode.PULL_NOT_FOUND, offset
    return ResponseCode.PULL_RETRY_IMMEDIATELY, result.next_begin_offset  # all filtered


def filter_expression(expression: str, expression_type: str) -> pb.FilterExpression:
    """The 5.x filter a 4.x subscription is: TAG (also when absent) or SQL92."""
    kind = EXPRESSION_TYPES.get(expression_type.upper())
    if kind is None:
        raise InvalidRequest(
            pb.ILLEGAL_FILTER_EXPRESSION,
            f"expression type {expression_type!r}: TAG or SQL92",
        )
    return pb.FilterExpression(type=kind, expression=expression)


class PullHandlers:
    def __init__(
        self,
        store: ReplicatedStore,
        topics: TopicTable,
        offsets: ConsumerOffsets,
        waiters: QueueWaiters,
        subscriptions: Subscriptions,
        groups: GroupsOnFirstUse | None = None,
    ) -> None:
        self.store = store
        self.topics = topics
        self.groups = groups or GroupsOnFirstUse(topics, None, enabled=False)
        self.offsets = offsets
        self.waiters = waiters
        self.subscriptions = subscriptions
        self._commits: set[asyncio.Task] = set()

    def handlers(self) -> list[tuple[int, Handler]]:
        return [(RequestCode.PULL_MESSAGE, self.pull)]

    async def pull(self, request: RemotingCommand, connection) -> RemotingCommand:
        group = request.text("consumerGroup")
        topic_name = request.text("topic")
        queue_id = request.int32("queueId")
        offset = request.integer("queueOffset")
        wanted = min(max(request.int32("maxMsgNums", PULL_MAX_MESSAGES), 1), PULL_MAX_MESSAGES)
        sys_flag = request.int32("sysFlag", 0)
        commit_offset = request.integer("commitOffset", -1)
        suspend_ms = request.integer("suspendTimeoutMillis", 0)
        try:
            await self.groups.group(group)  # created on first use, as on the gRPC door
            topic = self.topics.topic(topic_name)
            check_queue(topic, queue_id)
            if topic.permission is Permission.WRITE:
                raise InvalidRequest(pb.FORBIDDEN, f"topic {topic.name} is write-only")
            subscription = self._subscription(request, group, topic.name, sys_flag)
            if isinstance(subscription, RemotingCommand):
                return subscription
            expression, expression_type = subscription
            try:
                chosen = selection(filter_expression(expression, expression_type))
            except InvalidRequest as error:
                return self._unparsable(request, sys_flag, str(error))
        except (InvalidRequest, TopicError) as error:
            code, remark = refusal(error)
            return request.reply(code, remark)
        if sys_flag & SYSFLAG_COMMIT_OFFSET and commit_offset >= 0:
            self._commit_soon(group, topic.name, queue_id, commit_offset)
        store, name = self.store, topic.name

        tags, sql = chosen.tags, chosen.sql

        async def read() -> RemotingCommand | None:
            result = store.get_records(name, queue_id, offset, wanted, PULL_MAX_BYTES, tags)
            if sql is not None and result.messages:
                kept = [r for r in result.messages if sql(decode_record(r, 0).properties)]
                result = dataclasses.replace(result, messages=kept)
            code, next_offset = pull_outcome(result, offset)
            if code is ResponseCode.PULL_NOT_FOUND and waiting:
                return None
            return request.reply(
                code,
                ext_fields={
                    "nextBeginOffset": str(next_offset),
                    "minOffset": str(result.min_offset),
                    "maxOffset": str(result.max_offset),
                    "suggestWhichBrokerId": "0",
                },
                body=b"".join(result.messages),
            )

        waiting = bool(sys_flag & SYSFLAG_SUSPEND) and suspend_ms > 0
        answer = await long_poll(
            read,
            lambda wait_s: self.waiters.wait(name, queue_id, wait_s),
            poll_budget_s(suspend_ms / 1000, None) if waiting else 0.0,
        )
        if answer is None:  # waited the whole time: one last look answers
            waiting = False
            answer = await read()
        assert answer is not None
        return answer

    @staticmethod
    def _unparsable(request: RemotingCommand, sys_flag: int, detail: str) -> RemotingCommand:
        if sys_flag & SYSFLAG_SUBSCRIPTION:
            return request.reply(
                ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                f"parse the consumer's subscription failed: {detail}",
            )
        return request.reply(
            ResponseCode.FILTER_DATA_NOT_EXIST,
            f"{FILTER_DATA_MISSING} {detail}",
        )

    def _subscription(
        self, request: RemotingCommand, group: str, topic: str, sys_flag: int
    ) -> tuple[str, str] | RemotingCommand:
        """(expression, type) of the pull: its own, or its group's registered one; a
        reply when the group registered none, or an older one than the client has."""
        if sys_flag & SYSFLAG_SUBSCRIPTION:
            return request.text("subscription", "*"), request.text("expressionType", "TAG")
        registered = self.subscriptions.get(group, topic)
        if registered is None:
            return request.reply(
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
                f"group {group} registered no subscription of {topic} (heartbeat first)",
            )
        if registered.version < request.integer("subVersion", 0):
            return request.reply(
                ResponseCode.SUBSCRIPTION_NOT_LATEST,
                f"group {group}'s subscription of {topic} is older than the client's",
            )
        return registered.expression, registered.expression_type

    def _commit_soon(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """The commit offset a pull carries, stored without holding up the pull (a commit
        under SYNC replication waits for the slaves). Only a master commits, only a change,
        only an offset the queue has, and at most 1,024 commits are under way."""
        if not self.store.is_master or self.offsets.get(group, topic, queue_id) == offset:
            return
        if not 0 <= offset <= self.store.max_offset_in_queue(topic, queue_id):
            return
        if len(self._commits) >= 1024:
            return  # the next pull carries the offset again
        task = asyncio.ensure_future(self.offsets.commit(group, topic, queue_id, offset))
        self._commits.add(task)
        task.add_done_callback(self._committed)

    def _committed(self, task: asyncio.Task) -> None:
        self._commits.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("commit offset of a pull failed: %s", task.exception())
