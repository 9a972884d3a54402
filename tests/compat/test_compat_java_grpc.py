"""The official Java 5.x gRPC client (``rocketmq-client-java`` 5.2.0), unchanged, against a
real 3-node ferrymq cluster.

The client runs in a JVM of its own through our driver (``tests/compat/java/grpc5``),
fetched from Maven Central and compiled by ``tests/support/clients.py`` on first use; each
test is one driver run doing several steps. Three nodes serve the module with their
default settings, and the client keeps its own: TLS (the nodes' ports take TLS and
plaintext, with a certificate each made), every node as its access point; every test uses
its own topics and groups, created first as ferrymq requires.
"""

from __future__ import annotations

import pytest

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from tests.support import clients
from tests.support.cluster import client_cluster, stop_all
from tests.support.every_kind import EveryKind, simple_receive
from tests.support.push_retries import PushRetries
from tests.support.rpc import create_group, create_topic, message

# The first run fetches the client from Maven Central and compiles the driver.
pytestmark = pytest.mark.timeout(clients.INSTALL_TIMEOUT_S + 300)

SETTINGS = {"messages": {"transaction_check_interval_ms": 2000, "transaction_max_checks": 3}}


@pytest.fixture(scope="module")
def java():
    return clients.required("java-grpc")


@pytest.fixture(scope="module")
def module_node(tmp_path_factory):
    """A 3-node cluster, checking orphan transactions every 2 s: the client is given every
    node, the test's own setup and checks go to the master."""
    cluster = client_cluster(str(tmp_path_factory.mktemp("java-grpc") / "cluster"), SETTINGS)
    yield cluster
    stop_all(cluster.plan)


def run_java(java, module_node, tmp_path, steps: list[dict], timeout_s: float = 150) -> clients.Run:
    spec = {"endpoints": module_node.endpoints, "steps": steps}
    return clients.run(java, spec, tmp_path / "java-home", timeout_s)


def test_producer_sends_every_kind_and_a_simple_consumer_gets_them_intact(
    java, module_node, tmp_path, grpc_stubs
):
    """Normal (sync and async), FIFO, delay and transactional sends from the Java producer;
    Java SimpleConsumers receive every one with its id, tag, keys and properties intact,
    FIFO in order per message group, delayed ones not before their time, committed and
    checked-then-committed transactions but never a rolled-back one."""
    _, admin = grpc_stubs
    scenario = EveryKind("java")
    scenario.create(admin)
    run = run_java(java, module_node, tmp_path, scenario.steps())
    scenario.check(run, reports_born_host_and_queue=True)


def test_simple_consumer_ack_change_invisible_duration_and_redelivery(
    java, module_node, tmp_path, grpc_stubs
):
    """Three messages received with a short invisibility: one acked, one hidden longer with
    ChangeInvisibleDuration (then acked with the handle that call returned), the third not
    acked comes back with attempt 2; acking the first one again fails."""
    messaging, admin = grpc_stubs
    create_topic(admin, "java-simple", queues=2)
    create_group(admin, "java-simple-group")
    for i in range(3):
        answer = messaging.SendMessage(
            rpc.SendMessageRequest(messages=[message("java-simple", b"m%d" % i, f"S{i}", tag="T")])
        )
        assert answer.status.code == pb.OK
    ops = [
        {"op": "receive", "count": 3, "invisible_s": 4, "deadline_s": 20},
        {"op": "ack", "bodies": ["m0"]},
        {"op": "change", "body": "m1", "invisible_s": 60},
        {"op": "receive", "count": 1, "invisible_s": 30, "deadline_s": 25, "ack": True},
        {"op": "ack", "bodies": ["m1"]},
        {"op": "ack", "bodies": ["m0"]},
    ]
    run = run_java(
        java,
        module_node,
        tmp_path,
        [{"do": "simple", "topic": "java-simple", "group": "java-simple-group", "ops": ops}],
    )
    assert not run.of("step_failed"), run.explain()
    received = run.of("received")
    assert sorted(e["id"] for e in received[:3]) == ["S0", "S1", "S2"], run.explain()
    assert all(e["attempt"] == 1 and e["tag"] == "T" for e in received[:3])
    assert [(e["id"], e["attempt"]) for e in received[3:]] == [("S2", 2)], run.explain()
    assert run.of("changed") and [e["body"] for e in run.of("acked")] == ["m0", "m2", "m1"]
    (twice,) = run.of("ack_failed")  # m0 was acked already: its handle is spent
    assert twice["body"] == "m0", run.explain()


def test_push_consumers_retry_then_dead_letter_normal_and_fifo(
    java, module_node, tmp_path, grpc_stubs
):
    """A Java PushConsumer of a normal group fails one message: it is redelivered (attempt
    2) and then dead-lettered; the others are consumed once. A FIFO group's consumer gets
    each message group in order, its failing message retried and then dead-lettered
    without blocking the rest."""
    messaging, admin = grpc_stubs
    scenario = PushRetries("java")
    scenario.create(admin)
    run = run_java(java, module_node, tmp_path, scenario.steps(), timeout_s=200)
    scenario.check(run, messaging)


def test_recall_cancels_a_delayed_message_and_refuses_a_late_or_altered_handle(
    java, module_node, tmp_path, grpc_stubs
):
    """RocketMQ 5.3.2's recall through the newest Java client, its access point every node:
    the recalled message never arrives, its twin due the same millisecond does; a recall
    once the time has come, or of an altered handle, is refused."""
    _, admin = grpc_stubs
    create_topic(admin, "j5-recall", queues=1, message_type=api.DELAY)
    create_group(admin, "j5-recall-reader")
    messages = [
        {"topic": "j5-recall", "body": "recalled", "delay_ms": 3000, "recall": 1},
        {"topic": "j5-recall", "body": "kept", "delay_ms": 3000},
    ]
    run = run_java(java, module_node, tmp_path, [{"do": "produce", "messages": messages}])
    sent = {e["body"]: e for e in run.of("sent")}
    assert sent["recalled"]["recall_handle"] and sent["kept"]["recall_handle"], run.explain()
    assert [e["id"] for e in run.of("recalled")] == [sent["recalled"]["id"]], run.explain()
    # Both were sent within the same run: due within a few ms of each other.
    receive = simple_receive("j5-recall", "j5-recall-reader", 1)
    kept = sent["kept"]["recall_handle"]
    altered = kept[:10] + ("A" if kept[10] != "A" else "B") + kept[11:]
    late = {
        "do": "produce",
        "messages": [],
        "topics": ["j5-recall"],
        "recall_handles": [
            {"topic": "j5-recall", "body": "kept", "handle": kept},
            {"topic": "j5-recall", "body": "altered", "handle": altered},
        ],
    }
    run = run_java(java, module_node, tmp_path, [receive, late], timeout_s=120)
    assert [e["body"] for e in run.of("received")] == ["kept"], run.explain()
    failed = {e["body"]: e["message"] for e in run.of("recall_failed")}
    assert "has come" in failed["kept"] and "recall handle" in failed["altered"], run.explain()


def test_priority_messages_are_received_highest_first(java, module_node, tmp_path, grpc_stubs):
    """RocketMQ 5.4's priority messages through the newest Java client (setPriority): a
    PRIORITY topic's messages come highest priority first (a priority above the last queue
    is the last queue's), each with its priority."""
    _, admin = grpc_stubs
    create_topic(admin, "j5-priority", queues=4, message_type=api.PRIORITY)
    create_group(admin, "j5-priority-reader")
    messages = [{"topic": "j5-priority", "body": f"p{p}", "priority": p} for p in (1, 3, 0, 2, 7)]
    produce = {"do": "produce", "messages": messages}
    op = {"op": "receive", "count": 5, "max": 5, "invisible_s": 30, "deadline_s": 20, "ack": True}
    receive = {"do": "simple", "topic": "j5-priority", "group": "j5-priority-reader", "ops": [op]}
    run = run_java(java, module_node, tmp_path, [produce, receive])
    received = run.of("received")
    assert [e["body"] for e in received] == ["p3", "p7", "p2", "p1", "p0"], run.explain()
    assert [e["priority"] for e in received] == [3, 7, 2, 1, 0], run.explain()


def test_lite_topics_through_the_lite_push_consumer(java, module_node, tmp_path, grpc_stubs):
    """RocketMQ 5.5's lite topics through the newest Java client (setLiteTopic,
    LitePushConsumer): a consumer gets the lite topics it subscribed to, each in order; one
    subscribed with OffsetOption.MAX_OFFSET gives nothing of what was stored before; an
    illegal name is refused with RocketMQ's words."""
    _, admin = grpc_stubs
    create_topic(admin, "j5-lite", queues=4, message_type=api.LITE)
    # A FIFO group: the client then consumes each lite topic in order (RocketMQ's advice for
    # lite groups); the server delivers each one in order whatever the group.
    create_group(admin, "j5-lite-readers", fifo=True)
    messages = [
        {"topic": "j5-lite", "body": f"{lite}-{n}", "lite_topic": lite}
        for n in range(3)
        for lite in ("agent-a", "agent-b", "agent-c")
    ]
    consume = {
        "do": "lite_push",
        "topic": "j5-lite",
        "group": "j5-lite-readers",
        "lite_topics": ["agent-c", "agent-a", "agent-b", "bad.name"],
        "from_end": ["agent-c"],
        "expect": [f"{lite}-{n}" for n in range(3) for lite in ("agent-a", "agent-b")],
        "deadline_s": 40,
    }
    run = run_java(java, module_node, tmp_path, [{"do": "produce", "messages": messages}, consume])
    assert len(run.of("sent")) == 9, run.explain()
    failed = run.of("subscribe_failed")
    assert [e["name"] for e in failed] == ["bad.name"], run.explain()
    assert "alphanumeric characters" in failed[0]["message"], run.explain()
    consumed = run.of("consumed")
    for lite in ("agent-a", "agent-b"):
        bodies = [e["body"] for e in consumed if e["lite_topic"] == lite]
        assert bodies == [f"{lite}-{n}" for n in range(3)], run.explain()
    assert not [e for e in consumed if e["lite_topic"] == "agent-c"], run.explain()


def test_an_exclusive_lite_group_gives_a_lite_topic_to_its_newest_subscriber(
    java, module_node, tmp_path, grpc_stubs
):
    """RocketMQ 5.5's Exclusive lite subscription model through the newest Java client: of
    two LitePushConsumers of a group created ``lite_exclusive``, the second to subscribe to
    a lite topic takes it; the first is told (NotifyUnsubscribeLiteCommand: its own set no
    longer has it, though its stream is on a slave) and consumes nothing of it."""
    _, admin = grpc_stubs
    create_topic(admin, "j5-lite-x", queues=4, message_type=api.LITE)
    create_group(admin, "j5-lite-x-readers", lite_exclusive=True)
    bodies = [f"x-{n}" for n in range(4)]
    step = {
        "do": "lite_exclusive",
        "topic": "j5-lite-x",
        "group": "j5-lite-x-readers",
        "lite_topic": "session-1",
        "messages": bodies,
        "deadline_s": 40,
    }
    # A slave first: the clients' Telemetry streams go to it, the subscriptions are held by
    # the master, so the notice must travel (a record the slave dispatches).
    others = [n.grpc for n in module_node.plan.nodes if n.id != module_node.slave.id]
    spec = {"endpoints": ";".join([module_node.slave.grpc, *others]), "steps": [step]}
    run = clients.run(java, spec, tmp_path / "java-home", 150)
    assert not run.of("step_failed"), run.explain()
    (sets,) = run.of("sets")
    assert sets["a"] == [] and sets["b"] == ["session-1"], run.explain()
    consumed = run.of("consumed")
    assert sorted(e["body"] for e in consumed) == bodies, run.explain()
    assert {e["instance"] for e in consumed} == {"b"}, run.explain()
