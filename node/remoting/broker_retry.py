"""CONSUMER_SEND_MSG_BACK: a 4.x consumer hands back a message it failed to consume, by the
CommitLog offset of the copy it was given, for a retry or the dead-letter topic; translated
to the retry service (``node/services/retries.py``), which copies only a real record of a
topic the caller may consume as its group.

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
from node.services.retries import SendBackRequest
from node.topics import TopicError


class RetryHandlers:
    def __init__(self, services: Services) -> None:
        self.retries = services.retries

    def handlers(self) -> list[tuple[int, DoorHandler]]:
        return [(RequestCode.CONSUMER_SEND_MSG_BACK, self.send_back)]

    async def send_back(self, request: RemotingCommand, connection, caller: Caller):
        max_reconsume_times = request.int32("maxReconsumeTimes", -1)
        sent_back = SendBackRequest(
            request.text("group"),
            request.integer("offset"),
            request.int32("delayLevel", 0),
            max_reconsume_times if max_reconsume_times >= 0 else None,
        )
        try:
            status = await self.retries.send_back(caller, sent_back)
        except (InvalidRequest, TopicError) as error:
            return request.reply(*refusal(error))
        if status.code == pb.OK:
            return request.reply(ResponseCode.SUCCESS)
        return request.reply(response_code(status.code), status.message)
