"""ferrymq's SDK on the remoting port: its private codes (``FerryRequestCode``,
30000..30099) carry the Data service's own messages to the same services as the gRPC Data
door, so a send or a fetch costs a framed round trip on the uvloop listener instead of a
gRPC call.

- ``FERRY_PRODUCE``: the body is a ``ProduceRequest`` (the SDK's binary produce records),
  answered with the ``ProduceResponse`` that ``Data.Produce`` gives (``SendService.produce``:
  the same ACL decision, admission, per-record answers, SYNC replication, metrics).
- ``FERRY_FETCH``: a ``FetchRequest``, answered as ``Data.Fetch`` (``ReadService.fetch``,
  long polling included).
- ``FERRY_ROUTE``: the NameServer role's answer for the SDK: a topic's message type and,
  for every broker group with a master, its queue count and its master's gRPC and
  remoting addresses (JSON), from the Raft-replicated routing state.

Every answer is SUCCESS with the answer in the body; a refusal is the
``apache.rocketmq.v2.Code`` inside it, as on gRPC, so the SDK reports the same errors on
both doors (an ACL refusal is NO_PERMISSION, as every remoting refusal of the ACL). A body
that does not decode is answered SYSTEM_ERROR naming why.

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

import json

from google.protobuf.message import DecodeError

from ferrymq.codec import bytes_field
from ferrymq.codec.properties import PROPERTIES_MAX_BYTES
from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import FerryRequestCode, ResponseCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.ferrymq import data_pb2 as api
from node.admission import accepted_types
from node.long_polling import poll_budget_s
from node.message_rules import PRODUCE_SCANNER, born_host_bytes, produce_spans
from node.remoting.authentication import DoorHandler
from node.rpc_status import topic_error_status
from node.services.caller import Caller
from node.services.reads import FetchOutcome
from node.services.registry import Services
from node.services.send import ProduceOutcome, ProduceRequest, produce_response
from node.topics import TopicError
from routing.state import RoutingState
from store.commitlog import PreparedRun


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


def read_produce(request: RemotingCommand, caller: Caller) -> ProduceRequest:
    """FERRY_PRODUCE's ``ProduceRequest``, from ``caller`` (``ValueError`` or
    ``DecodeError`` for a body that is not one). The records stay in the frame (a view),
    the other fields go through protobuf."""
    head, records = bytes_field.split(request.body, bytes_field.PRODUCE_RECORDS_FIELD)
    produce = api.ProduceRequest.FromString(head)
    return ProduceRequest(
        produce.topic,
        produce.queue_id,
        produce.count,
        records,
        produce.atomic,
        born_host_bytes(caller.address),
    )


# The produce lane's snapshot of the topics it may take (``SendService.lane_topics``):
# name -> (TOPICLENGTH + TOPIC, queue count, message type text).
LaneTopics = dict[str, tuple[bytes, int, str]]


def produce_run(
    body: bytes | memoryview,
    born_host: bytes,
    topics: LaneTopics,
    body_limit: int,
    max_records: int,
) -> PreparedRun | None:
    """The ``PreparedRun`` of a FERRY_PRODUCE body in one C pass (ferrymq/codec/_speedups.c's
    ``ProduceScanner.produce_run``) when ``topics`` holds its topic, its queue exists there
    and all its records pass; None for anything else, which is then read the usual way
    (``read_produce``). The twin is ``produce_run_in_python``: where this answers, it
    answers the same; it may decline what the twin reads (a field given twice, one it does
    not know), never the reverse."""
    return PRODUCE_SCANNER.produce_run(
        body, born_host, topics, body_limit, PROPERTIES_MAX_BYTES, max_records, PreparedRun
    )


def produce_run_in_python(
    body: bytes | memoryview,
    born_host: bytes,
    topics: LaneTopics,
    body_limit: int,
    max_records: int,
) -> PreparedRun | None:
    """What ``produce_run`` gives: the body read as ``read_produce`` reads it, and the
    checks ``SendService.produce_now`` makes, with ``topics`` for its topic rules."""
    try:
        head, records = bytes_field.split(body, bytes_field.PRODUCE_RECORDS_FIELD)
        produce = api.ProduceRequest.FromString(head)
    except (ValueError, DecodeError):
        return None
    entry = topics.get(produce.topic)
    if entry is None or not 1 <= produce.count <= max_records or len(born_host) != 8:
        return None
    topic_prefix, queue_count, type_text = entry
    if not 0 <= produce.queue_id < queue_count:
        return None
    spans = produce_spans(records, produce.count, body_limit, type_text)
    if spans is None:
        return None
    return PreparedRun.of(produce.topic, topic_prefix, produce.queue_id, born_host, records, spans)


def produce_answer(request: RemotingCommand, outcome: ProduceOutcome) -> RemotingCommand:
    """FERRY_PRODUCE's answer: SUCCESS, the ``ProduceResponse`` in the body."""
    body = produce_response(outcome).SerializeToString()
    return request.reply(ResponseCode.SUCCESS, body=body)


def fetch_reply(
    request: RemotingCommand, outcome: FetchOutcome, follows: bool = False
) -> RemotingCommand:
    """FERRY_FETCH's answer: SUCCESS, the ``FetchResponse`` in the body, its records
    appended as stored (``bytes_field``); ``follows``: another answer to ``request`` comes
    (the fetch lane's followed fetch)."""
    head = api.FetchResponse(**outcome.head_fields(), follows=follows).SerializeToString()
    body = bytes_field.encode(head, outcome.records, bytes_field.FETCH_RECORDS_FIELD)
    return request.reply(ResponseCode.SUCCESS, body=body)


class FerryDataHandlers:
    def __init__(self, services: Services) -> None:
        self.services = services

    def handlers(self) -> list[tuple[int, DoorHandler]]:
        return [
            (FerryRequestCode.FERRY_ROUTE, self.route),
            (FerryRequestCode.FERRY_PRODUCE, self.produce),
            (FerryRequestCode.FERRY_FETCH, self.fetch),
        ]

    async def route(self, request: RemotingCommand, connection, caller: Caller):
        topic = request.text("topic")
        try:
            answer = await self.services.routes.read_caught_up(
                caller, lambda state: ferry_route(state, topic)
            )
        except TopicError as error:
            status = topic_error_status(error)
            answer = {"code": status.code, "message": status.message}
        body = json.dumps(answer, separators=(",", ":")).encode()
        return request.reply(ResponseCode.SUCCESS, body=body)

    async def produce(self, request: RemotingCommand, connection, caller: Caller):
        try:
            sent = read_produce(request, caller)
        except (ValueError, DecodeError) as error:
            return request.reply(ResponseCode.SYSTEM_ERROR, f"not a ProduceRequest: {error}")
        # A SYNC send is answered the moment its in-sync replicas hold it, in the ACK's
        # callback (``answer_ahead``), and then not again.
        encoded = connection.answer_ahead(request)
        outcome = await self.services.send.produce(
            caller, sent, lambda outcome: encoded(produce_answer(request, outcome))
        )
        return None if connection.answered_ahead() else produce_answer(request, outcome)

    async def fetch(self, request: RemotingCommand, connection, caller: Caller):
        try:
            fetch = api.FetchRequest.FromString(request.body)
        except DecodeError as error:
            return request.reply(ResponseCode.SYSTEM_ERROR, f"not a FetchRequest: {error}")
        # A fetch parked at its queue's end is answered by the dispatch of what it waits
        # for (``node/tail_reads.py``), from that callback, and then not again.
        encoded = connection.answer_ahead(request)
        outcome = await self.services.reads.fetch(
            caller,
            fetch.topic,
            fetch.group,
            fetch.queue_id,
            fetch.offset,
            fetch.max_messages,
            fetch.max_bytes,
            list(fetch.tags),
            poll_budget_s(fetch.wait_ms / 1000, None),
            lambda outcome: encoded(fetch_reply(request, outcome))(),
            follow=fetch.follow,
        )
        return None if connection.answered_ahead() else fetch_reply(request, outcome)
