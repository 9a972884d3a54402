"""Offsets of RocketMQ 4.x consumers: GET_MAX_OFFSET / GET_MIN_OFFSET (a queue's bounds)
and QUERY_CONSUMER_OFFSET / UPDATE_CONSUMER_OFFSET (a group's committed offset), on the
offset service (``node/services/offsets.py``: the gRPC doors' committed offsets, so a
group's progress is the same whichever protocol its consumers use, and the same ACL and
group rules).

A group with nothing committed for a queue gets 0 while the queue's first message is still
in memory, RocketMQ's rule (``OffsetService.start_of_new_group``): a consumer started right
after the first sends reads them (answered QUERY_NOT_FOUND, the client would start at the
queue's end and skip them). Past that, QUERY_NOT_FOUND makes the client apply its
``consumeFromWhere``.

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.remoting.authentication import DoorHandler
from node.remoting.status_codes import refusal, response_code
from node.rpc_status import InvalidRequest
from node.services.caller import Caller
from node.services.registry import Services
from node.topics import TopicError


class OffsetHandlers:
    def __init__(self, services: Services) -> None:
        self.offsets = services.offsets

    def handlers(self) -> list[tuple[int, DoorHandler]]:
        return [
            (RequestCode.GET_MAX_OFFSET, self.max_offset),
            (RequestCode.GET_MIN_OFFSET, self.min_offset),
            (RequestCode.QUERY_CONSUMER_OFFSET, self.query_consumer_offset),
            (RequestCode.UPDATE_CONSUMER_OFFSET, self.update_consumer_offset),
        ]

    async def max_offset(self, request: RemotingCommand, connection, caller: Caller):
        topic, queue_id = request.text("topic"), request.int32("queueId")
        try:
            offset = await self.offsets.max_offset(caller, topic, queue_id)
        except (InvalidRequest, TopicError) as error:
            return request.reply(*refusal(error))
        return request.reply(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    async def min_offset(self, request: RemotingCommand, connection, caller: Caller):
        topic, queue_id = request.text("topic"), request.int32("queueId")
        try:
            offset = await self.offsets.min_offset(caller, topic, queue_id)
        except (InvalidRequest, TopicError) as error:
            return request.reply(*refusal(error))
        return request.reply(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    async def query_consumer_offset(self, request: RemotingCommand, connection, caller: Caller):
        group, topic = request.text("consumerGroup"), request.text("topic")
        queue_id = request.int32("queueId")
        try:
            committed, _ = await self.offsets.committed(caller, group, topic, queue_id)
        except (InvalidRequest, TopicError) as error:
            return request.reply(*refusal(error))
        if committed is None:
            committed = self.offsets.start_of_new_group(topic, queue_id)
        if committed is None:
            return request.reply(
                ResponseCode.QUERY_NOT_FOUND,
                "the group committed no offset for this queue, whose first message is no "
                "longer in memory",
            )
        return request.reply(ResponseCode.SUCCESS, ext_fields={"offset": str(committed)})

    async def update_consumer_offset(self, request: RemotingCommand, connection, caller: Caller):
        group, topic = request.text("consumerGroup"), request.text("topic")
        queue_id = request.int32("queueId")
        offset = request.integer("commitOffset")
        try:
            status = await self.offsets.commit(caller, group, topic, queue_id, offset)
        except (InvalidRequest, TopicError) as error:
            code, remark = refusal(error)
            if code is ResponseCode.PULL_OFFSET_MOVED:
                code = ResponseCode.SYSTEM_ERROR  # an offset the queue never had: bad input
            return request.reply(code, remark)
        if status.code != pb.OK:
            return request.reply(response_code(status.code), status.message)
        return request.reply(ResponseCode.SUCCESS)
