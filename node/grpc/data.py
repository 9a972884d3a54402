"""ferrymq's ``Data`` door (``proto/ferrymq/data.proto``): bulk reads and writes of records,
translated to the send and read services.

One Fetch answers with up to thousands of records of one queue as they lie in the
CommitLog, concatenated, so a reader pays one gRPC message per batch instead of one per
message (PullMessage's shape). Offsets stay the caller's; long polling as PullMessage.
One Produce carries up to thousands of produce records whose properties are already in
the store's encoding (``SendService.produce``: each record its own answer). The SDK's
private remoting codes carry the same messages to the same services
(``node/remoting/ferry_data.py``).

A refusal by the ACL aborts the call (gRPC ``PERMISSION_DENIED``, ``UNAUTHENTICATED``);
every other refusal is an answer with its ``apache.rocketmq.v2.Code``.

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

from ferrymq.codec.commitlog_record import NO_HOST
from ferrymq.protocol.ferrymq import data_pb2 as api
from ferrymq.protocol.ferrymq import data_pb2_grpc
from node.client_port import client_peer
from node.grpc.authentication import caller_of, refuse_call
from node.long_polling import poll_budget_s
from node.message_rules import born_host_bytes
from node.rpc_status import AccessDenied
from node.services.caller import Door
from node.services.registry import Services
from node.services.send import ProduceRequest, produce_response


def produce_request(request: api.ProduceRequest, born_host: bytes) -> ProduceRequest:
    return ProduceRequest(
        request.topic, request.queue_id, request.count, request.records, request.atomic, born_host
    )


def peer_host(context) -> bytes:
    """BORNHOST of a produce request: the peer's IPv4 address and port (else zeros)."""
    peer = client_peer(context.peer()) if context is not None else ""
    return born_host_bytes(peer[5:]) if peer.startswith("ipv4:") else NO_HOST


class DataService(data_pb2_grpc.DataServicer):
    def __init__(self, services: Services) -> None:
        self.services = services

    async def Fetch(self, request, context):
        caller = caller_of(context, Door.FERRY, "Fetch")
        try:
            outcome = await self.services.reads.fetch(
                caller,
                request.topic,
                request.group,
                request.queue_id,
                request.offset,
                request.max_messages,
                request.max_bytes,
                list(request.tags),
                poll_budget_s(request.wait_ms / 1000, context),
                follow=request.follow,
            )
        except AccessDenied as denied:
            await refuse_call(context, denied)
        return api.FetchResponse(**outcome.fields())

    async def Produce(self, request, context):
        caller = caller_of(context, Door.FERRY, "Produce")
        try:
            outcome = await self.services.send.produce(
                caller, produce_request(request, peer_host(context))
            )
        except AccessDenied as denied:
            await refuse_call(context, denied)
        return produce_response(outcome)
