"""What every door shares because it calls the same service, driven through every door
that serves each job, on one node without authentication: a topic's read permission,
the traffic metrics, one round-robin position per topic, the records a send-back may
copy, and the bounds of producer registrations (docs/architecture.md, "Services and
doors")."""

from __future__ import annotations

import json

import grpc
import pytest

from ferrymq.client import Admin
from ferrymq.codec.message_id import parse_offset_message_id
from ferrymq.codec.remoting_codes import FerryRequestCode, RequestCode, ResponseCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from ferrymq.protocol.ferrymq import data_pb2 as data
from ferrymq.protocol.ferrymq import data_pb2_grpc
from node.config import MessagingOptions
from tests.support.metrics import scrape, value
from tests.support.remoting_client import RemotingClient, pull_fields, send_v2
from tests.support.rpc import message, queue_of

QUEUES = 16


@pytest.fixture(scope="module")
def open_node(module_nodes):
    """A node with ``inbox`` (write-only), ``spread`` (16 queues), ``counted`` and group G."""
    node = module_nodes()
    with Admin(node.address) as admin:
        admin.create_topic("inbox", 1, message_type="ANY", permission="WRITE")
        admin.create_topic("spread", QUEUES)
        admin.create_topic("counted", 1, message_type="ANY")
        admin.create_group("G")
    return node


# ---- a topic's read permission -----------------------------------------------------------
def grpc_pull(node, topic: str) -> str:
    with grpc.insecure_channel(node.address) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = rpc.PullMessageRequest(
            group=pb.Resource(name="G"), message_queue=queue_of(topic, 0), batch_size=32
        )
        (first, *_) = list(stub.PullMessage(request))
    return pb.Code.Name(first.status.code)


def grpc_receive(node, topic: str) -> str:
    with grpc.insecure_channel(node.address) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = rpc.ReceiveMessageRequest(
            group=pb.Resource(name="G"), message_queue=queue_of(topic, 0), batch_size=32
        )
        request.long_polling_timeout.seconds = 0
        (first, *_) = list(stub.ReceiveMessage(request))
    return pb.Code.Name(first.status.code)


def fetch_request(topic: str) -> data.FetchRequest:
    return data.FetchRequest(group="G", topic=topic, queue_id=0, offset=0, max_messages=32)


def grpc_fetch(node, topic: str) -> str:
    with grpc.insecure_channel(node.address) as channel:
        answer = data_pb2_grpc.DataStub(channel).Fetch(fetch_request(topic))
    return pb.Code.Name(answer.code)


def ferry_fetch(node, topic: str) -> str:
    with RemotingClient(node.remoting) as client:
        answer = client.call(
            FerryRequestCode.FERRY_FETCH, {}, fetch_request(topic).SerializeToString()
        )
    return pb.Code.Name(data.FetchResponse.FromString(answer.body).code)


def remoting_pull(node, topic: str) -> str:
    with RemotingClient(node.remoting) as client:
        return ResponseCode(
            client.call(RequestCode.PULL_MESSAGE, pull_fields("G", topic)).code
        ).name


def remoting_pop(node, topic: str) -> str:
    fields = {
        "consumerGroup": "G", "topic": topic, "queueId": "-1", "maxMsgNums": "32",
        "invisibleTime": "10000", "pollTime": "0", "exp": "*", "expType": "TAG",
    }  # fmt: skip
    with RemotingClient(node.remoting) as client:
        return ResponseCode(client.call(RequestCode.POP_MESSAGE, fields).code).name


READ_DOORS = {
    "PullMessage": (grpc_pull, "FORBIDDEN"),
    "ReceiveMessage": (grpc_receive, "FORBIDDEN"),
    "Data.Fetch": (grpc_fetch, "FORBIDDEN"),
    "FERRY_FETCH": (ferry_fetch, "FORBIDDEN"),
    "PULL_MESSAGE": (remoting_pull, "NO_PERMISSION"),
    "POP_MESSAGE": (remoting_pop, "NO_PERMISSION"),
}


@pytest.mark.parametrize("door", sorted(READ_DOORS))
def test_a_write_only_topic_is_read_by_no_door(open_node, door):
    """gRPC PullMessage and Data.Fetch / FERRY_FETCH did not check the read permission that
    POP and the 4.x pull checked: a write-only topic could be read there."""
    with RemotingClient(open_node.remoting) as client:
        assert send_v2(client, "inbox", b"for the writer only").code == ResponseCode.SUCCESS
    read, refused = READ_DOORS[door]
    assert read(open_node, "inbox") == refused


# ---- the traffic metrics -------------------------------------------------------------------
def messages_in(node) -> float:
    return value(scrape(node.metrics), "rocketmq_messages_in", topic="counted")


def messages_out(node) -> float:
    samples = scrape(node.metrics)
    found = [
        s.value
        for s in samples.get("rocketmq_messages_out", [])
        if s.labels.get("topic") == "counted" and s.name.endswith("_total")
    ]
    return sum(found)


def test_every_doors_sends_and_deliveries_count_in_the_same_metrics(open_node):
    """4.x traffic was invisible to the metrics the docs say cover every send and pull."""
    node = open_node
    with grpc.insecure_channel(node.address) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        answer = stub.SendMessage(
            rpc.SendMessageRequest(messages=[message("counted", b"grpc", "M1")])
        )
        assert answer.status.code == pb.OK
    with RemotingClient(node.remoting) as client:
        assert send_v2(client, "counted", b"remoting").code == ResponseCode.SUCCESS
        fields = {
            "producerGroup": "p", "topic": "counted", "defaultTopic": "TBW102",
            "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0",
            "bornTimestamp": "0", "flag": "0", "properties": "",
        }  # fmt: skip
        assert client.call(RequestCode.SEND_MESSAGE, fields, b"v1").code == ResponseCode.SUCCESS
    assert messages_in(node) == 3
    before = messages_out(node)
    assert remoting_pull(node, "counted") == "SUCCESS"  # the three
    assert messages_out(node) == before + 3
    assert grpc_pull(node, "counted") == "OK"
    assert grpc_fetch(node, "counted") == "OK"
    assert ferry_fetch(node, "counted") == "OK"
    assert messages_out(node) == before + 12
    assert remoting_pop(node, "counted") == "SUCCESS"  # G's first receive: all three
    assert messages_out(node) == before + 15


# ---- one round-robin position per topic ------------------------------------------------------
def test_sends_that_leave_the_queue_to_the_node_share_one_rotation_across_doors(open_node):
    """Each door had its own ``Admission``: a topic's sends through two doors went round
    two rotations, each from its own random start."""
    queues = []
    with (
        grpc.insecure_channel(open_node.address) as channel,
        RemotingClient(open_node.remoting) as client,
    ):
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        for i in range(QUEUES):
            if i % 2:
                answer = send_v2(client, "spread", b"remoting", queue_id=-1)
                queues.append(int(answer.ext_fields["queueId"]))
            else:  # the official clients' queue 0: the node chooses (no pinned header)
                sent = stub.SendMessage(
                    rpc.SendMessageRequest(messages=[message("spread", b"grpc", f"R{i}")])
                )
                assert sent.status.code == pb.OK, sent.status
                queues.append(queue_of_offset(open_node, f"R{i}"))
    start = queues[0]
    assert queues == [(start + i) % QUEUES for i in range(QUEUES)]


def queue_of_offset(node, message_id: str) -> int:
    with Admin(node.address) as admin:
        (found,) = admin.query_by_id(message_id, "spread")
    return found.queue_id


# ---- what a send-back may copy --------------------------------------------------------------
def test_a_send_back_copies_no_record_of_a_system_topic(open_node):
    """A transaction half is a system record (%SYS%TRANS_HALF): handed back by its offset,
    it was copied into the group's retry topic, readable before it was committed."""
    with RemotingClient(open_node.remoting) as client:
        half = send_v2(client, "counted", b"not yet", TRAN_MSG="true", PGROUP="pg")
        assert half.code == ResponseCode.SUCCESS
        offset = parse_offset_message_id(half.ext_fields["msgId"])[1]
        fields = {"offset": str(offset), "group": "G", "delayLevel": "-1"}
        answer = client.call(RequestCode.CONSUMER_SEND_MSG_BACK, fields)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert f"look message by offset failed, {offset}" in answer.remark


# ---- producer registrations ---------------------------------------------------------------------
def test_a_client_produces_for_a_bounded_number_of_producer_groups(open_node):
    """A heartbeat's producer groups were registered unbounded (~3 MiB per connection, and
    closing many such connections froze the node): now at most
    ``[messages] max_producer_groups_per_client`` per client, a heartbeat past it refused
    whole."""
    limit = MessagingOptions().max_producer_groups_per_client
    with RemotingClient(open_node.remoting) as client:

        def heartbeat(count: int, client_id: str):
            body = {"clientID": client_id, "producerDataSet": [
                {"groupName": f"pg-{client_id}-{i}"} for i in range(count)
            ]}  # fmt: skip
            return client.call(RequestCode.HEART_BEAT, body=json.dumps(body).encode())

        refused = heartbeat(limit + 1, "greedy")
        assert refused.code == ResponseCode.SYSTEM_BUSY, refused
        assert f"the limit is {limit}" in refused.remark
        listed = client.call(
            RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "pg-greedy-0"}
        )
        assert listed.code == ResponseCode.SYSTEM_ERROR  # none of them was registered
        assert heartbeat(limit, "modest").code == ResponseCode.SUCCESS
        listed = client.call(
            RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "pg-modest-0"}
        )
        assert listed.code == ResponseCode.SUCCESS
    with RemotingClient(open_node.remoting) as other:  # the first client's connection closed
        listed = other.call(
            RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "pg-modest-0"}
        )
        assert listed.code == ResponseCode.SYSTEM_ERROR
