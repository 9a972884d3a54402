"""ferrymq's SDK on the remoting port: its private codes (``FerryRequestCode``,
30000..30099) carry the Data service's own messages, so a send or a fetch costs a framed
round trip on the uvloop listener instead of a gRPC call.

- ``FERRY_PRODUCE``: the body is a ``ProduceRequest`` (the SDK's binary produce records),
  answered with the ``ProduceResponse`` that ``Data.Produce`` gives: the same admission,
  the same per-record answers, the same SYNC replication (``DataService.produce``).
- ``FERRY_FETCH``: a ``FetchRequest``, answered as ``Data.Fetch`` (long polling included).
- ``FERRY_ROUTE``: the NameServer role's answer for the SDK: a topic's message type and,
  for every broker group with a master, its queue count and its master's gRPC and
  remoting addresses (JSON), from the Raft-replicated routing state.

Every answer is SUCCESS with the answer in the body; a refusal is the
``apache.rocketmq.v2.Code`` inside it, as on gRPC, so the SDK reports the same errors on
both doors. A body that does not decode is answered SYSTEM_ERROR naming why. Sends and
deliveries count in the same metrics as the gRPC door's (``node/metrics_rpc.py``).

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

import json
from time import perf_counter

from google.protobuf.message import DecodeError

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import FerryRequestCode, ResponseCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.ferrymq import data_pb2 as api
from node.admission import accepted_types
from node.convert import born_host_bytes
from node.data_service import DataService
from node.metrics_rpc import RpcMetrics
from node.remoting.dispatch import Handler
from node.rpc_status import topic_error_status
from node.topics import TopicError
from routing.replica import RoutingReplica
from routing.state import RoutingState


def ferry_route(state: RoutingState, topic: str) -> dict:
    """The SDK's route of ``topic`` (``TopicError`` when it does not exist)."""
    route = state.topic(topic)
    queues = []
    for broker_group, count in route.queues:
        master = state.master_of(broker_group)
        if master is None:
            continue  # no master to serve it: the queues come back after the election
        queues.append([broker_group, count, master.grpc_address, master.remoting_address])
    return {"code": pb.OK, "messageType": accepted_types(route.message_type)[0], "queues": queues}


class FerryDataHandlers:
    def __init__(
        self, data: DataService, routing: RoutingReplica, metrics: RpcMetrics | None = None
    ) -> None:
        self.data = data
        self.routing = routing
        self.metrics = metrics  # sends and deliveries counted as on the gRPC door

    def handlers(self) -> list[tuple[int, Handler]]:
        return [
            (FerryRequestCode.FERRY_ROUTE, self.route),
            (FerryRequestCode.FERRY_PRODUCE, self.produce),
            (FerryRequestCode.FERRY_FETCH, self.fetch),
        ]

    async def route(self, request: RemotingCommand, connection) -> RemotingCommand:
        topic = request.text("topic")
        try:
            answer = self.routing.read(lambda state: ferry_route(state, topic))
        except TopicError as error:
            status = topic_error_status(error)
            answer = {"code": status.code, "message": status.message}
        body = json.dumps(answer, separators=(",", ":")).encode()
        return request.reply(ResponseCode.SUCCESS, body=body)

    async def produce(self, request: RemotingCommand, connection) -> RemotingCommand:
        try:
            produce = api.ProduceRequest.FromString(request.body)
        except DecodeError as error:
            return request.reply(ResponseCode.SYSTEM_ERROR, f"not a ProduceRequest: {error}")
        start = perf_counter()
        answer = await self.data.produce(produce, born_host_bytes(connection.peer_address))
        if self.metrics is not None:
            self.metrics.produced(produce, answer, perf_counter() - start)
        return request.reply(ResponseCode.SUCCESS, body=answer.SerializeToString())

    async def fetch(self, request: RemotingCommand, connection) -> RemotingCommand:
        try:
            fetch = api.FetchRequest.FromString(request.body)
        except DecodeError as error:
            return request.reply(ResponseCode.SYSTEM_ERROR, f"not a FetchRequest: {error}")
        answer = await self.data.Fetch(fetch, None)
        if self.metrics is not None and answer.code == pb.OK:
            self.metrics.delivered(fetch.topic, fetch.group, answer.count, len(answer.records))
        return request.reply(ResponseCode.SUCCESS, body=answer.SerializeToString())
