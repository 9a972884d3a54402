"""Each access rule of a job, driven through every door that serves the job, against one
node with authentication on (docs/security.md, "Rules and bounds per door"). The rules
live in the services (node/services/), so one test per rule shows every door keeps it.

The user ``app`` may publish to and subscribe to ``orders`` and consume as the group
``readers``; nothing on ``payments``, ``escrow`` or the group ``others``. ``root`` is the
admin that writes what the tests look at."""

from __future__ import annotations

import json
import threading
import zlib

import grpc
import pytest

from ferrymq.client import Admin, ClientSecurity
from ferrymq.client.admin import AclRule
from ferrymq.client.messages import Message
from ferrymq.client.produce_records import encode_record
from ferrymq.codec.message_id import parse_offset_message_id
from ferrymq.codec.remoting_codes import FerryRequestCode, RequestCode, ResponseCode
from ferrymq.codec.remoting_messages import BatchedMessage, encode_batch
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from ferrymq.protocol.ferrymq import data_pb2 as data
from ferrymq.protocol.ferrymq import data_pb2_grpc
from tests.support.auth import APP, AUTH_TOML, ROOT, signed
from tests.support.remoting_client import (
    RemotingClient,
    heartbeat_body,
    properties_text,
    pull_fields,
    send_v2,
)
from tests.support.rpc import message, queue_of

CHECK_INTERVAL_MS = 1_000
NODE_TOML = AUTH_TOML + f"[messages]\ntransaction_check_interval_ms = {CHECK_INTERVAL_MS}\n"
TOPICS = ("orders", "payments", "escrow")
GROUPS = ("readers", "others")


@pytest.fixture(scope="module")
def guarded(module_nodes):
    node = module_nodes(NODE_TOML)
    with Admin(node.address, security=ROOT) as admin:
        for topic in TOPICS:
            admin.create_topic(topic, 1, message_type="ANY")
        for group in GROUPS:
            admin.create_group(group)
        admin.create_user(APP.access_key, APP.secret_key)
        for rule in (
            AclRule("ALLOW", "PUBLISH", "TOPIC", "orders"),
            AclRule("ALLOW", "SUBSCRIBE", "TOPIC", "orders"),
            AclRule("ALLOW", "SUBSCRIBE", "GROUP", "readers"),
        ):
            admin.grant(APP.access_key, rule)
    return node


def stored(node, topic: str) -> int:
    with Admin(node.address, security=ROOT) as admin:
        _, queues = admin.describe_topic(topic)
        return sum(queue.max_offset for queue in queues)


def groups(node) -> set[str]:
    with Admin(node.address, security=ROOT) as admin:
        return {group.name for group in admin.list_groups()}


# ---- the doors of a send -----------------------------------------------------------------
def grpc_send(node, security: ClientSecurity, topic: str) -> str:
    with grpc.insecure_channel(node.address) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = rpc.SendMessageRequest(messages=[message(topic, b"grpc", f"G-{topic}")])
        answer = stub.SendMessage(request, metadata=signed(security, "c1"))
    return pb.Code.Name(answer.status.code)


def produce_request(topic: str) -> data.ProduceRequest:
    record = encode_record(
        Message(topic, b"produce", message_id=f"P{zlib.crc32(topic.encode())}"), pb.NORMAL, 0
    )
    return data.ProduceRequest(topic=topic, queue_id=0, count=1, records=record)


def grpc_produce(node, security: ClientSecurity, topic: str) -> str:
    with grpc.insecure_channel(node.address) as channel:
        stub = data_pb2_grpc.DataStub(channel)
        try:
            answer = stub.Produce(produce_request(topic), metadata=signed(security, "c1"))
        except grpc.RpcError as error:
            return error.code().name
    return pb.Code.Name(answer.code)


def remoting_answer(answer) -> str:
    if answer.code != ResponseCode.SUCCESS:
        return ResponseCode(answer.code).name
    return "OK"


def ferry_produce(node, security: ClientSecurity, topic: str) -> str:
    with RemotingClient(node.remoting, security=security) as client:
        answer = client.call(
            FerryRequestCode.FERRY_PRODUCE, {}, produce_request(topic).SerializeToString()
        )
    if answer.code != ResponseCode.SUCCESS:
        return ResponseCode(answer.code).name
    return pb.Code.Name(data.ProduceResponse.FromString(answer.body).code)


def v1_send(node, security: ClientSecurity, topic: str) -> str:
    fields = {
        "producerGroup": "producers",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "0",
        "sysFlag": "0",
        "bornTimestamp": "0",
        "flag": "0",
        "properties": properties_text({}),
    }
    with RemotingClient(node.remoting, security=security) as client:
        return remoting_answer(client.call(RequestCode.SEND_MESSAGE, fields, b"v1"))


def v2_send(node, security: ClientSecurity, topic: str) -> str:
    with RemotingClient(node.remoting, security=security) as client:
        return remoting_answer(send_v2(client, topic, b"v2"))


def batch_send(node, security: ClientSecurity, topic: str) -> str:
    with RemotingClient(node.remoting, security=security) as client:
        fields = {"a": "producers", "b": topic, "e": "0", "f": "0", "g": "0", "h": "0"}
        body = encode_batch([BatchedMessage(0, b"batched", b"")])
        return remoting_answer(client.call(RequestCode.SEND_BATCH_MESSAGE, fields, body))


SEND_DOORS = {
    "SendMessage": (grpc_send, "OK", "FORBIDDEN"),
    "Data.Produce": (grpc_produce, "OK", "PERMISSION_DENIED"),
    "FERRY_PRODUCE": (ferry_produce, "OK", "NO_PERMISSION"),
    "SEND_MESSAGE": (v1_send, "OK", "NO_PERMISSION"),
    "SEND_MESSAGE_V2": (v2_send, "OK", "NO_PERMISSION"),
    "SEND_BATCH_MESSAGE": (batch_send, "OK", "NO_PERMISSION"),
}


@pytest.mark.parametrize("door", sorted(SEND_DOORS))
def test_a_send_needs_publish_on_the_topic_it_writes_through_every_door(guarded, door):
    send, allowed, refused = SEND_DOORS[door]
    before = {topic: stored(guarded, topic) for topic in ("orders", "payments")}
    assert send(guarded, APP, "orders") == allowed
    assert send(guarded, APP, "payments") == refused
    # Step 1 before step 3: a topic that does not exist is refused for the ACL too, so a
    # caller learns nothing of which topics exist.
    assert send(guarded, APP, "no-such-topic") == refused
    assert {topic: stored(guarded, topic) for topic in before} == {
        "orders": before["orders"] + 1,
        "payments": before["payments"],
    }


def test_a_v2_send_is_decided_and_written_on_one_reading_of_its_topic(guarded):
    """SEND_MESSAGE_V2 carries the topic twice when a client sends both names (``topic``
    and the short ``b``): the access rule read one and the handler wrote the other, so a
    publisher of ``orders`` wrote into ``payments``, and a subscriber of its own group's
    retry topic wrote into another group's retry and dead-letter topics."""
    before = stored(guarded, "payments")
    with RemotingClient(guarded.remoting, security=APP) as client:
        for first, then in (("topic", "b"), ("b", "topic")):
            fields = {first: "orders" if first == "topic" else "payments"}
            fields[then] = "payments" if then == "b" else "orders"
            fields |= {"a": "producers", "e": "0", "f": "0", "g": "0", "h": "0"}
            answer = client.call(RequestCode.SEND_MESSAGE_V2, fields, b"smuggled")
            assert answer.code == ResponseCode.NO_PERMISSION, answer
            assert "publish permission on topic payments" in answer.remark
        fields = {
            "topic": "%RETRY%readers",  # its own group's: subscribe on readers
            "b": "%RETRY%others",
            "a": "producers",
            "e": "0",
            "f": "0",
            "g": "0",
            "h": "0",
            "j": "99",  # consumed often enough to go to %DLQ%others
        }
        answer = client.call(RequestCode.SEND_MESSAGE_V2, fields, b"into another group")
        assert answer.code == ResponseCode.NO_PERMISSION, answer
        assert "subscribe permission on group others" in answer.remark
    assert stored(guarded, "payments") == before
    with Admin(guarded.address, security=ROOT) as admin:
        for topic in ("%RETRY%others", "%DLQ%others"):
            _, queues = admin.describe_topic(topic)
            assert sum(q.max_offset for q in queues) == 0, topic


def offset_of(answer) -> int:
    return parse_offset_message_id(answer.ext_fields["msgId"])[1]


def test_a_message_handed_back_is_read_from_a_topic_the_group_may_consume(guarded):
    """CONSUMER_SEND_MSG_BACK copies the record at an offset into the caller's retry topic:
    with subscribe on its group only, any topic was readable one offset at a time."""
    with RemotingClient(guarded.remoting, security=ROOT) as root:
        secret = send_v2(root, "payments", b"not yours")
        mine = send_v2(root, "orders", b"yours")
    with RemotingClient(guarded.remoting, security=APP) as client:

        def send_back(offset: int):
            fields = {"offset": str(offset), "group": "readers", "delayLevel": "-1"}
            return client.call(RequestCode.CONSUMER_SEND_MSG_BACK, fields)

        refused = send_back(offset_of(secret))
        assert refused.code == ResponseCode.NO_PERMISSION, refused
        assert "subscribe permission on topic payments" in refused.remark
        assert send_back(offset_of(mine)).code == ResponseCode.SUCCESS  # to %DLQ%readers
    assert stored(guarded, "%DLQ%readers") == 1  # the allowed one only


def test_a_producer_is_asked_only_about_halves_of_topics_it_may_publish_to(guarded):
    """A 4.x heartbeat naming any producer group registered its connection, and the node
    then sent that group's pending halves, bodies included, to a user with no rights.
    Both doors' producers are registered with the same service and the same rule."""
    with RemotingClient(guarded.remoting, security=ROOT) as root:
        half = send_v2(root, "escrow", b"half secret", TRAN_MSG="true", PGROUP="pg")
        assert half.code == ResponseCode.SUCCESS, half
        # The rightful producer never answers: the half stays pending and is checked.
    outsider = ClientSecurity(APP.access_key, APP.secret_key)  # may publish to orders only
    with (
        RemotingClient(guarded.remoting, security=outsider, timeout_s=1) as spy,
        grpc.insecure_channel(guarded.address) as channel,
    ):
        body = json.loads(heartbeat_body("spy-1", [], "orders"))
        body["producerDataSet"] = [{"groupName": "pg"}]
        registered = spy.call(RequestCode.HEART_BEAT, body=json.dumps(body).encode())
        assert registered.code == ResponseCode.SUCCESS, registered
        # The RocketMQ 5 door: a producer whose settings name the half's topic.
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        settings = pb.Settings(
            client_type=pb.PRODUCER,
            publishing=pb.Publishing(topics=[pb.Resource(name="escrow")]),
        )
        open_stream = threading.Event()

        def commands():  # a producer keeps its session open, as the official clients do
            yield rpc.TelemetryCommand(settings=settings)
            open_stream.wait(30)

        stream = stub.Telemetry(
            commands(), metadata=signed(outsider, "spy-2"), timeout=4 * CHECK_INTERVAL_MS / 1000
        )
        answers = []
        with pytest.raises(grpc.RpcError) as ended:
            for answer in stream:
                answers.append(answer)
        open_stream.set()
        assert ended.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        assert [a.WhichOneof("command") for a in answers] == ["settings"]  # no check
        with pytest.raises(TimeoutError):  # several check intervals: none came here either
            spy.node_request()


@pytest.mark.parametrize(
    "door",
    ["PULL_MESSAGE", "LITE_PULL_MESSAGE", "QUERY_CONSUMER_OFFSET", "UPDATE_CONSUMER_OFFSET",
     "POP_MESSAGE", "PullMessage", "ReceiveMessage", "GetOffset"],
)  # fmt: skip
def test_only_a_group_the_acl_allowed_is_created_on_first_use(guarded, door):
    """For ``%RETRY%<g>`` the rule checked ``g`` but the handlers first created the header's
    group: a user could create arbitrary groups and spend the cluster's group budget."""
    group = f"made-up-{door.lower().replace('_', '-')}"
    topic = "%RETRY%readers"  # app's own group's retry topic: allowed on its own
    if door in ("PullMessage", "ReceiveMessage", "GetOffset"):
        with grpc.insecure_channel(guarded.address) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            metadata = signed(APP, "c1")
            if door == "PullMessage":
                request = rpc.PullMessageRequest(
                    group=pb.Resource(name=group), message_queue=queue_of(topic, 0), batch_size=1
                )
                (answer, *_) = list(stub.PullMessage(request, metadata=metadata))
            elif door == "ReceiveMessage":
                request = rpc.ReceiveMessageRequest(
                    group=pb.Resource(name=group), message_queue=queue_of(topic, 0), batch_size=1
                )
                request.long_polling_timeout.seconds = 0
                (answer, *_) = list(stub.ReceiveMessage(request, metadata=metadata))
            else:
                request = rpc.GetOffsetRequest(
                    group=pb.Resource(name=group), message_queue=queue_of(topic, 0)
                )
                answer = stub.GetOffset(request, metadata=metadata)
        assert answer.status.code == pb.FORBIDDEN, answer
    else:
        fields = {
            "PULL_MESSAGE": pull_fields(group, topic),
            "LITE_PULL_MESSAGE": pull_fields(group, topic),
            "QUERY_CONSUMER_OFFSET": {"consumerGroup": group, "topic": topic, "queueId": "0"},
            "UPDATE_CONSUMER_OFFSET": {
                "consumerGroup": group, "topic": topic, "queueId": "0", "commitOffset": "0"
            },
            "POP_MESSAGE": {
                "consumerGroup": group, "topic": topic, "queueId": "-1", "maxMsgNums": "1",
                "invisibleTime": "10000", "pollTime": "0", "exp": "*", "expType": "TAG",
            },
        }[door]  # fmt: skip
        with RemotingClient(guarded.remoting, security=APP) as client:
            answer = client.call(RequestCode[door], fields)
        assert answer.code == ResponseCode.NO_PERMISSION, answer
    assert group not in groups(guarded)
