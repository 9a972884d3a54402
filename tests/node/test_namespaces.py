"""RocketMQ 5 namespaces on the gRPC port (``node/namespaces.py``): the rules, raw requests
naming their namespace in the ``x-mq-namespace`` header or in ``resource_namespace``,
the official Python client configured with a namespace, and ACLs on the qualified names,
against real nodes."""

from __future__ import annotations

import grpc
import pytest

from ferrymq.client import Admin, ClientSecurity
from ferrymq.client.admin import AclRule
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from node.grpc.namespaces import qualify, qualify_request, unqualify, unqualify_answer
from tests.support.auth import AUTH_TOML, ROOT, signed
from tests.support.nodes import start_node
from tests.support.official_client import run_official_at
from tests.support.rpc import create_group, create_topic, message, pull, receive, stubs


def test_names_are_qualified_as_rocketmq_wraps_them():
    assert qualify("shop", "orders") == "shop%orders"
    assert qualify("shop", "shop%orders") == "shop%orders"  # already in it
    assert qualify("shop", "%RETRY%readers") == "%RETRY%shop%readers"
    assert qualify("shop", "%DLQ%readers") == "%DLQ%shop%readers"
    assert qualify("shop", "%SYS%POP") == "%SYS%POP"
    assert qualify("", "orders") == "orders"
    assert unqualify("shop", "shop%orders") == "orders"
    assert unqualify("shop", "%DLQ%shop%readers") == "%DLQ%readers"
    assert unqualify("shop", "other%orders") is None
    assert unqualify("shop", "orders") is None


def test_a_request_is_qualified_with_its_resources_namespace_else_the_headers():
    request = rpc.ReceiveMessageRequest(
        group=pb.Resource(name="readers"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="orders", resource_namespace="a")),
    )
    assert qualify_request(request, "b") == "b"
    assert request.group.name == "b%readers" and request.message_queue.topic.name == "a%orders"
    assert request.message_queue.topic.resource_namespace == ""
    plain = rpc.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name="orders"))])
    assert qualify_request(plain, "") == "" and plain.messages[0].topic.name == "orders"
    answer = rpc.ReceiveMessageResponse(message=pb.Message(topic=pb.Resource(name="b%orders")))
    unqualify_answer(answer, "b")
    assert answer.message.topic == pb.Resource(name="orders", resource_namespace="b")


@pytest.fixture(scope="module")
def grpc_stubs(address):
    channel, messaging, admin = stubs(address)
    yield messaging, admin
    channel.close()


def in_namespace(namespace: str) -> tuple[tuple[str, str], ...]:
    return (("x-mq-namespace", namespace),)


def test_raw_requests_in_a_namespace_reach_the_qualified_topic_and_nothing_else(grpc_stubs):
    messaging, admin = grpc_stubs
    create_topic(admin, "shop%orders", queues=1)
    create_topic(admin, "orders", queues=1)  # another topic of the same short name
    by_header = messaging.SendMessage(
        rpc.SendMessageRequest(messages=[message("orders", b"by-header", "m1")]),
        metadata=in_namespace("shop"),
    )
    assert by_header.status.code == pb.OK, by_header.status
    own = message("orders", b"by-field", "m2")
    own.topic.resource_namespace = "shop"
    by_field = messaging.SendMessage(rpc.SendMessageRequest(messages=[own]))
    assert by_field.status.code == pb.OK, by_field.status
    _, stored, _ = pull(messaging, "shop%orders", 0, 0, group="shop%raw")
    assert [m.body for m in stored] == [b"by-header", b"by-field"]
    _, plain, _ = pull(messaging, "orders", 0, 0, group="raw")
    assert plain == []
    # A namespace's reader sees its messages under the name it asked for.
    _, got, _ = receive(messaging, "orders", group="readers", batch=8)
    assert got == []  # no namespace: the plain topic, empty
    status, got, _ = receive(
        messaging, "orders", group="readers", batch=8, metadata=in_namespace("shop")
    )
    assert status.code == pb.OK, status
    assert {m.body for m in got} == {b"by-header", b"by-field"}
    assert {(m.topic.name, m.topic.resource_namespace) for m in got} == {("orders", "shop")}
    route = messaging.QueryRoute(
        rpc.QueryRouteRequest(topic=pb.Resource(name="orders", resource_namespace="shop"))
    )
    assert route.status.code == pb.OK, route.status
    assert {q.topic.name for q in route.message_queues} == {"orders"}
    assert {q.topic.resource_namespace for q in route.message_queues} == {"shop"}
    other = messaging.SendMessage(
        rpc.SendMessageRequest(messages=[message("orders", b"x", "m3")]),
        metadata=in_namespace("elsewhere"),
    )
    assert other.status.code == pb.TOPIC_NOT_FOUND, other.status


def test_a_malformed_namespace_is_refused_and_stores_nothing(grpc_stubs):
    messaging, admin = grpc_stubs
    create_topic(admin, "strict", queues=1)
    for bad in ("sp ace", "a%b", "x" * 65):
        answer = messaging.SendMessage(
            rpc.SendMessageRequest(messages=[message("strict", b"no", "m")]),
            metadata=in_namespace(bad),
        )
        assert answer.status.code == pb.BAD_REQUEST, (bad, answer.status)
        assert "namespace" in answer.status.message
    field = message("strict", b"no", "m")
    field.topic.resource_namespace = "a%b"
    answer = messaging.SendMessage(rpc.SendMessageRequest(messages=[field]))
    assert answer.status.code == pb.BAD_REQUEST
    with pytest.raises(grpc.RpcError) as refused:
        list(
            messaging.Telemetry(
                iter([rpc.TelemetryCommand(settings=pb.Settings())]),
                metadata=in_namespace("bad namespace"),
                timeout=5,
            )
        )
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    _, stored, _ = pull(messaging, "strict", 0, 0, group="raw")
    assert stored == []


def test_a_bad_namespace_later_in_a_session_stream_ends_it_at_once(grpc_stubs):
    """Found by the RPC fuzz: a settings command with a bad ``resource_namespace`` after a
    good one left the stream open until the client's deadline, the abort raised in the
    task that reads the stream never reaching the client."""
    messaging, _ = grpc_stubs
    producer = pb.Settings(
        client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="t")])
    )
    bad = pb.Settings(
        client_type=pb.SIMPLE_CONSUMER,
        subscription=pb.Subscription(group=pb.Resource(resource_namespace="%SYS%X", name="g")),
    )
    commands = [rpc.TelemetryCommand(settings=producer), rpc.TelemetryCommand(settings=bad)]
    answers = []
    with pytest.raises(grpc.RpcError) as refused:
        for answer in messaging.Telemetry(iter(commands), timeout=5):
            answers.append(answer)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
    assert "namespace '%SYS%X'" in refused.value.details()
    assert [a.WhichOneof("command") for a in answers] == ["settings"]  # the good one's


def test_the_official_client_with_a_namespace_produces_and_consumes_in_it(
    address, grpc_stubs, tmp_path
):
    messaging, admin = grpc_stubs
    create_topic(admin, "team%events", queues=2)
    create_group(admin, "team%workers")
    sends = [{"topic": "events", "body": f"e{i}", "tag": "T"} for i in range(4)]
    produced = run_official_at(
        address,
        tmp_path / "producer",
        {"scenario": "produce", "topics": ["events"], "messages": sends, "namespace": "team"},
    )
    assert sorted(e["body"] for e in produced if e["event"] == "sent") == ["e0", "e1", "e2", "e3"]
    stored = []
    for queue in range(2):
        _, found, _ = pull(messaging, "team%events", queue, 0, group="raw")
        stored += [m.body for m in found]
    assert sorted(stored) == [b"e0", b"e1", b"e2", b"e3"]
    consumed = run_official_at(
        address,
        tmp_path / "consumer",
        {
            "scenario": "simple",
            "topic": "events",
            "group": "workers",
            "namespace": "team",
            "steps": [
                {
                    "do": "receive_until",
                    "count": 4,
                    "invisible_s": 30,
                    "deadline_s": 20,
                    "ack": True,
                }
            ],
        },
    )
    received = [e for e in consumed if e["event"] == "received"]
    assert sorted(e["body"] for e in received) == ["e0", "e1", "e2", "e3"]
    assert {e["topic"] for e in received} == {"events"}
    assert len([e for e in consumed if e["event"] == "acked"]) == 4
    # Acked in the namespace's group: nothing comes back to it.
    _, again, _ = receive(
        messaging, "events", group="workers", batch=8, metadata=in_namespace("team")
    )
    assert again == [], again


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    node = start_node(str(tmp_path_factory.mktemp("namespaces-auth") / "node"), AUTH_TOML)
    try:
        with Admin(node.address, security=ROOT) as admin:
            admin.create_topic("shop%orders", 1)
            admin.create_topic("other%orders", 1)
            admin.create_user("tenant", "tenant-secret-key")
            admin.grant("tenant", AclRule("ALLOW", "PUBLISH", "TOPIC", "shop%*"))
        yield node
    finally:
        node.sigkill()


def test_acls_see_the_qualified_names_so_a_namespace_grants_nothing_by_itself(secured):
    tenant = ClientSecurity("tenant", "tenant-secret-key")
    channel, messaging, _ = stubs(secured.address)
    try:

        def send(namespace: str) -> pb.Status:
            metadata = (*signed(tenant, "tenant-client"), ("x-mq-namespace", namespace))
            request = rpc.SendMessageRequest(messages=[message("orders", b"x", "m")])
            return messaging.SendMessage(request, metadata=metadata).status

        assert send("shop").code == pb.OK
        refused = send("other")  # the topic exists; the tenant may not publish there
        assert refused.code == pb.FORBIDDEN, refused
        assert "other%orders" in refused.message
    finally:
        channel.close()
