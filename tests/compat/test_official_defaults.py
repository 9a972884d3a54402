"""RocketMQ 5's defaults that applications rely on (docs/architecture.md, "RocketMQ's
defaults"): a topic created without a message type takes every type, and a consumer group
is created the first time a consumer uses it; both can be turned off per node.

Real node processes; the official ``rocketmq-python-client`` in a process of its own.
"""

from __future__ import annotations

import time

from ferrymq.client import Admin, ClientSecurity
from ferrymq.client.admin import AclRule
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from routing import state as routing_state
from routing.commands import CreateGroup
from routing.metadata import GroupConfig
from routing.state import RoutingState
from tests.support.auth import AUTH_TOML, ROOT, signed
from tests.support.nodes import start_node
from tests.support.official_client import run_official_at
from tests.support.rpc import create_topic, message, pull, receive, stubs

OFF_TOML = """
[messages]
untyped_topics_take_any_type = false
auto_create_groups = false
"""


def group_names(admin) -> set[str]:
    return {g.name for g in admin.ListGroups(api.ListGroupsRequest()).groups}


def pull_all(messaging, topic: str, queues: int, want: int, deadline_s: float = 20) -> list:
    """Every message of ``topic`` once ``want`` are there (delayed ones come late)."""
    deadline = time.monotonic() + deadline_s
    while True:
        found = []
        for queue_id in range(queues):
            _, messages, _ = pull(messaging, topic, queue_id, 0, group="defaults-reader")
            found.extend(messages)
        if len(found) >= want or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def test_an_untyped_topic_takes_every_type_from_the_official_producer(
    module_node, client_home, grpc_stubs
):
    messaging, admin = grpc_stubs
    create_topic(admin, "untyped", queues=2, message_type=api.MESSAGE_TYPE_UNSPECIFIED)
    (described,) = [
        t for t in admin.ListTopics(api.ListTopicsRequest()).topics if t.name == "untyped"
    ]
    assert described.message_type == api.MESSAGE_TYPE_UNSPECIFIED
    route = messaging.QueryRoute(rpc.QueryRouteRequest(topic=pb.Resource(name="untyped")))
    assert list(route.message_queues[0].accept_message_types) == [
        pb.NORMAL,
        pb.FIFO,
        pb.DELAY,
        pb.TRANSACTION,
    ]
    sends = [
        {"topic": "untyped", "body": "normal"},
        {"topic": "untyped", "body": "fifo-1", "group": "g"},
        {"topic": "untyped", "body": "fifo-2", "group": "g"},
        {"topic": "untyped", "body": "delayed", "delivery_timestamp": int(time.time()) + 2},
    ]
    events = run_official_at(
        module_node.address,
        client_home,
        {"scenario": "produce", "topics": ["untyped"], "messages": sends},
    )
    assert [e["body"] for e in events if e["event"] == "sent"] == [s["body"] for s in sends]
    events = run_official_at(
        module_node.address,
        client_home,
        {
            "scenario": "transaction",
            "topic": "untyped",
            "messages": [{"topic": "untyped", "body": "transactional", "end": "commit"}],
        },
    )
    assert [e["body"] for e in events if e["event"] == "ended"] == ["transactional"]
    found = {m.body.decode(): m for m in pull_all(messaging, "untyped", 2, want=5)}
    assert set(found) == {"normal", "fifo-1", "fifo-2", "delayed", "transactional"}
    types = {body: m.system_properties.message_type for body, m in found.items()}
    assert types == {
        "normal": pb.NORMAL,
        "fifo-1": pb.FIFO,
        "fifo-2": pb.FIFO,
        "delayed": pb.DELAY,
        "transactional": pb.TRANSACTION,
    }
    assert found["fifo-1"].system_properties.queue_id == found["fifo-2"].system_properties.queue_id
    assert found["delayed"].system_properties.HasField("delivery_timestamp")


def test_typed_topics_still_refuse_other_types(grpc_stubs):
    messaging, admin = grpc_stubs
    for name, kind in (("typed-normal", api.NORMAL), ("typed-fifo", api.FIFO)):
        create_topic(admin, name, queues=2, message_type=kind)

    def send(topic: str, message_type: int, **system) -> pb.Status:
        request = rpc.SendMessageRequest(
            messages=[
                message(topic, b"x", f"T{topic}{message_type}", message_type=message_type, **system)
            ]
        )
        return messaging.SendMessage(request).status

    for message_type, system in (
        (pb.FIFO, {"message_group": "g"}),
        (pb.DELAY, {}),
        (pb.TRANSACTION, {}),
    ):
        refused = send("typed-normal", message_type, **system)
        assert refused.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, refused
    assert send("typed-fifo", pb.NORMAL).code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert send("typed-normal", pb.NORMAL).code == pb.OK
    # An untyped topic takes the four types, not what a message leaves undeclared.
    create_topic(admin, "untyped-strict", queues=1, message_type=api.MESSAGE_TYPE_UNSPECIFIED)
    undeclared = send("untyped-strict", pb.MESSAGE_TYPE_UNSPECIFIED)
    assert undeclared.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert send("untyped-strict", pb.FIFO).code == pb.ILLEGAL_MESSAGE_GROUP  # FIFO needs one


def test_the_official_consumer_creates_its_group_on_first_use(module_node, client_home, grpc_stubs):
    messaging, admin = grpc_stubs
    create_topic(admin, "first-use", queues=2)
    sent = messaging.SendMessage(
        rpc.SendMessageRequest(messages=[message("first-use", b"hello", "FU1")])
    )
    assert sent.status.code == pb.OK
    assert "fresh-group" not in group_names(admin)
    steps = [{"do": "receive_until", "count": 1, "invisible_s": 10, "deadline_s": 20, "ack": True}]
    events = run_official_at(
        module_node.address,
        client_home,
        {"scenario": "simple", "topic": "first-use", "group": "fresh-group", "steps": steps},
    )
    assert [e["body"] for e in events if e["event"] == "received"] == ["hello"]
    assert [e["id"] for e in events if e["event"] == "acked"] == ["FU1"]
    assert "fresh-group" in group_names(admin)
    # A heartbeat creates one too, with the default settings; a bad name creates nothing.
    heartbeat = messaging.Heartbeat(
        rpc.HeartbeatRequest(group=pb.Resource(name="beating"), client_type=pb.PUSH_CONSUMER),
        metadata=[("x-mq-client-id", "c-1")],
    )
    assert heartbeat.status.code == pb.OK
    (beating,) = [
        g for g in admin.ListGroups(api.ListGroupsRequest()).groups if g.name == "beating"
    ]
    assert (beating.max_delivery_attempts, beating.fifo) == (16, False)
    assert receive(messaging, "first-use", group="bad.name")[0].code == pb.ILLEGAL_CONSUMER_GROUP
    # QueryAssignment needs no permission on the group: it answers, creating nothing.
    assigned = messaging.QueryAssignment(
        rpc.QueryAssignmentRequest(
            topic=pb.Resource(name="first-use"), group=pb.Resource(name="only-asked")
        )
    )
    assert assigned.status.code == pb.OK and [a.message_queue.id for a in assigned.assignments] == [
        -1
    ]
    assert "only-asked" not in group_names(admin)


def test_both_defaults_can_be_turned_off(tmp_path):
    started = start_node(str(tmp_path / "node"), OFF_TOML)
    channel, messaging, admin = stubs(started.address)
    try:
        create_topic(admin, "plain", queues=1, message_type=api.MESSAGE_TYPE_UNSPECIFIED)
        (plain,) = admin.ListTopics(api.ListTopicsRequest()).topics
        assert plain.message_type == api.NORMAL  # created as before: NORMAL
        request = rpc.SendMessageRequest(
            messages=[message("plain", b"x", "D1", message_type=pb.DELAY)]
        )
        assert messaging.SendMessage(request).status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
        assert receive(messaging, "plain", group="unknown")[0].code == pb.CONSUMER_GROUP_NOT_FOUND
        heartbeat = messaging.Heartbeat(
            rpc.HeartbeatRequest(group=pb.Resource(name="unknown"), client_type=pb.PUSH_CONSUMER),
            metadata=[("x-mq-client-id", "c-1")],
        )
        assert heartbeat.status.code == pb.CONSUMER_GROUP_NOT_FOUND
        assert group_names(admin) == set()
    finally:
        channel.close()
        started.sigkill()


def test_with_auth_a_group_is_created_only_by_who_may_subscribe_to_it(tmp_path):
    started = start_node(str(tmp_path / "node"), AUTH_TOML)
    channel, messaging, _ = stubs(started.address)
    try:
        with Admin(started.address, security=ROOT) as admin:
            admin.create_topic("events", 1, "NORMAL")
            admin.create_user("reader", "reader-secret-key")
            admin.grant("reader", AclRule("ALLOW", "SUBSCRIBE", "TOPIC", "events"))
            admin.grant("reader", AclRule("ALLOW", "SUBSCRIBE", "GROUP", "readers-*"))
        reader = ClientSecurity("reader", "reader-secret-key")

        def receive_as(group: str) -> pb.Status:
            request = rpc.ReceiveMessageRequest(
                group=pb.Resource(name=group),
                message_queue=pb.MessageQueue(topic=pb.Resource(name="events")),
                filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                batch_size=1,
            )
            request.invisible_duration.seconds = 10
            request.long_polling_timeout.seconds = 0
            answers = list(
                messaging.ReceiveMessage(request, metadata=signed(reader, "r-1"), timeout=10)
            )
            return next(a.status for a in answers if a.WhichOneof("content") == "status")

        refused = receive_as("others")
        assert refused.code == pb.FORBIDDEN and "subscribe permission on group others" in (
            refused.message
        )
        assert receive_as("readers-1").code == pb.MESSAGE_NOT_FOUND  # created, then empty
        with Admin(started.address, security=ROOT) as admin:
            assert {g.name for g in admin.list_groups()} == {"readers-1"}
    finally:
        channel.close()
        started.sigkill()


def test_routing_stops_creating_groups_on_first_use_at_its_limit(monkeypatch):
    monkeypatch.setattr(routing_state, "FIRST_USE_GROUPS_MAX", 2)
    state = RoutingState()
    assert state.apply(CreateGroup("a", 16, on_first_use=True)).ok
    again = state.apply(CreateGroup("a", 5, fifo=True, on_first_use=True))
    assert again.ok and again.value == GroupConfig("a")  # the existing group, unchanged
    assert state.apply(CreateGroup("b", 16, on_first_use=True)).ok
    refused = state.apply(CreateGroup("c", 16, on_first_use=True))
    assert not refused.ok and refused.reason == "GROUP_LIMIT" and "limit" in refused.detail
    assert state.apply(CreateGroup("c", 16)).ok  # an operator's creation is not bounded
    assert sorted(state.groups) == ["a", "b", "c"]
