"""Priority messages (RocketMQ 5.4, RIP-80) on a real node: a PRIORITY topic's queue id is
the priority (a higher one goes to the last queue), and POP takes the highest priority
first; a priority anywhere else is refused with the code RocketMQ's proxy answers."""

from __future__ import annotations

import pytest

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from tests.support.remoting_client import RemotingClient, send_v2
from tests.support.rpc import create_group, create_topic, message, receive, stubs


@pytest.fixture(scope="module")
def grpc(module_node):
    channel, messaging, admin = stubs(module_node.address)
    create_topic(admin, "prio", queues=4, message_type=api.PRIORITY)
    create_topic(admin, "prio-normal", queues=2, message_type=api.NORMAL)
    create_topic(admin, "prio-any", queues=2, message_type=api.MESSAGE_TYPE_UNSPECIFIED)
    create_group(admin, "prio-readers")
    yield messaging
    channel.close()


def send(messaging, topic: str, body: bytes, **system) -> rpc.SendMessageResponse:
    system.setdefault("message_type", pb.PRIORITY)
    sent = message(topic, body, f"ID-{body.decode()}", **system)
    return messaging.SendMessage(rpc.SendMessageRequest(messages=[sent]))


def test_the_highest_priority_is_received_first_and_a_higher_one_takes_the_last_queue(
    grpc, module_node
):
    for body, priority in ((b"p0", 0), (b"p3", 3), (b"p1", 1), (b"p9", 9), (b"p2", 2)):
        assert send(grpc, "prio", body, priority=priority).status.code == pb.OK
    with RemotingClient(module_node.remoting) as client:  # a 4.x-protocol producer
        assert send_v2(client, "prio", b"r2", 0, _SYS_MSG_PRIORITY_="2").code == 0
    status, first, _ = receive(grpc, "prio", group="prio-readers", batch=2)
    assert status.code == pb.OK
    assert [m.body for m in first] == [b"p3", b"p9"]  # queue 3: 3, and 9 clamped
    assert {m.system_properties.queue_id for m in first} == {3}
    assert [m.system_properties.priority for m in first] == [3, 9]
    assert {m.system_properties.message_type for m in first} == {pb.PRIORITY}
    _, rest, _ = receive(grpc, "prio", group="prio-readers", batch=32)
    assert [m.body for m in rest] == [b"p2", b"r2", b"p1", b"p0"]
    assert [m.system_properties.priority for m in rest] == [2, 2, 1, 0]


@pytest.mark.parametrize(
    ("topic", "system", "code", "words"),
    [
        ("prio-normal", {"priority": 1}, pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "NORMAL"),
        ("prio-any", {"priority": 1}, pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "PRIORITY"),
        (
            "prio-any",
            {"priority": 1, "message_type": pb.NORMAL},
            pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            "a priority is for PRIORITY messages",
        ),
        ("prio", {"priority": -1}, pb.BAD_REQUEST, "negative"),
        ("prio", {}, pb.BAD_REQUEST, "needs a priority"),
        (
            "prio",
            {"priority": 1, "message_type": pb.NORMAL},
            pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            "PRIORITY",
        ),
    ],
)
def test_a_priority_where_it_does_not_belong_is_refused(grpc, topic, system, code, words):
    answer = send(grpc, topic, b"refused", **system)
    assert answer.status.code == code, answer
    assert words in answer.status.message, answer
