"""Offsets of RocketMQ 4.x consumers: GET_MAX_OFFSET / GET_MIN_OFFSET (a queue's bounds)
and QUERY_CONSUMER_OFFSET / UPDATE_CONSUMER_OFFSET (a group's committed offset).

Committed offsets are the gRPC doors' (``node/consumer_offsets.py``: records in the
CommitLog, so replicated and replayed), so a group's progress is the same whichever
protocol its consumers use. A group with nothing committed for a queue gets
QUERY_NOT_FOUND, which makes the client apply its ``consumeFromWhere``; except on a queue
that never had a message, where 0 is where everything will start (RocketMQ answers 0 while
a queue's first message is still in memory, for the same reason).

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ha.replicated_store import ReplicatedStore
from node.admission import check_queue, store_refusal
from node.consumer_offsets import ConsumerOffsets
from node.group_creation import GroupsOnFirstUse
from node.remoting.dispatch import Handler
from node.remoting.status_codes import refusal, response_code
from node.rpc_status import InvalidRequest
from node.topics import TopicConfig, TopicError, TopicTable
from store.results import PutStatus


class OffsetHandlers:
    def __init__(
        self,
        store: ReplicatedStore,
        topics: TopicTable,
        offsets: ConsumerOffsets,
        groups: GroupsOnFirstUse | None = None,
    ) -> None:
        self.store = store
        self.topics = topics
        self.groups = groups or GroupsOnFirstUse(topics, None, enabled=False)
        self.offsets = offsets

    def handlers(self) -> list[tuple[int, Handler]]:
        return [
            (RequestCode.GET_MAX_OFFSET, self.max_offset),
            (RequestCode.GET_MIN_OFFSET, self.min_offset),
            (RequestCode.QUERY_CONSUMER_OFFSET, self.query_consumer_offset),
            (RequestCode.UPDATE_CONSUMER_OFFSET, self.update_consumer_offset),
        ]

    def _queue(self, request: RemotingCommand) -> tuple[TopicConfig, int]:
        topic_name = request.text("topic")
        queue_id = request.int32("queueId")
        topic = self.topics.topic(topic_name)
        check_queue(topic, queue_id)
        return topic, queue_id

    async def max_offset(self, request: RemotingCommand, connection) -> RemotingCommand:
        try:
            topic, queue_id = self._queue(request)
        except (InvalidRequest, TopicError) as error:
            return request.reply(*refusal(error))
        offset = self.store.max_offset_in_queue(topic.name, queue_id)
        return request.reply(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    async def min_offset(self, request: RemotingCommand, connection) -> RemotingCommand:
        try:
            topic, queue_id = self._queue(request)
        except (InvalidRequest, TopicError) as error:
            return request.reply(*refusal(error))
        offset = self.store.min_offset_in_queue(topic.name, queue_id)
        return request.reply(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    async def query_consumer_offset(self, request: RemotingCommand, connection) -> RemotingCommand:
        group = request.text("consumerGroup")
        try:
            await self.groups.group(group)  # created on first use, as on the gRPC door
            topic, queue_id = self._queue(request)
        except (InvalidRequest, TopicError) as error:
            return request.reply(*refusal(error))
        committed = self.offsets.get(group, topic.name, queue_id)
        if committed is None:
            if self.store.max_offset_in_queue(topic.name, queue_id) != 0:
                return request.reply(
                    ResponseCode.QUERY_NOT_FOUND, "the group committed no offset for this queue"
                )
            committed = 0
        return request.reply(ResponseCode.SUCCESS, ext_fields={"offset": str(committed)})

    async def update_consumer_offset(self, request: RemotingCommand, connection) -> RemotingCommand:
        group = request.text("consumerGroup")
        offset = request.integer("commitOffset")
        try:
            await self.groups.group(group)
            topic, queue_id = self._queue(request)
            high = self.store.max_offset_in_queue(topic.name, queue_id)
            if not 0 <= offset <= high:
                raise InvalidRequest(pb.ILLEGAL_OFFSET, f"offset {offset} outside [0, {high}]")
        except (InvalidRequest, TopicError) as error:
            code, remark = refusal(error)
            if code is ResponseCode.PULL_OFFSET_MOVED:
                code = ResponseCode.SYSTEM_ERROR  # an offset the queue never had: bad input
            return request.reply(code, remark)
        if self.offsets.get(group, topic.name, queue_id) != offset:
            result = await self.offsets.commit(group, topic.name, queue_id, offset)
            if result.status is not PutStatus.OK:
                status = store_refusal(result)
                return request.reply(response_code(status.code), status.message)
        return request.reply(ResponseCode.SUCCESS)
