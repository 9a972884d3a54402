"""The official Go 5.x gRPC client (``github.com/apache/rocketmq-clients/golang/v5``
v5.1.4), unchanged, against a real 3-node ferrymq cluster.

The client runs in a process of its own through our driver (``tests/compat/go/grpc5``),
built by ``tests/support/clients.py`` with ``go build`` from the Go module proxy on first
use; each test is one driver run doing several steps. That client speaks TLS unless its
environment says otherwise (accepting any certificate); the module's nodes keep their
default settings, whose client ports take TLS and plaintext alike, and the client is
given every node. The producer
and SimpleConsumer scenario (``tests/support/every_kind.py``) and the PushConsumer one
(``tests/support/push_retries.py``) are the Java 5.x client's too."""

from __future__ import annotations

import grpc
import pytest

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from ferrymq.protocol.ferrymq import admin_pb2_grpc
from tests.support import clients
from tests.support.client_drivers import check_master_kill
from tests.support.cluster import client_cluster, stop_all
from tests.support.every_kind import EveryKind, simple_receive
from tests.support.push_retries import PushRetries
from tests.support.rpc import create_group, create_topic, message, stubs

# The first run fetches the client's modules and builds the driver.
pytestmark = pytest.mark.timeout(clients.INSTALL_TIMEOUT_S + 300)

SETTINGS = {"messages": {"transaction_check_interval_ms": 2000, "transaction_max_checks": 3}}


@pytest.fixture(scope="module")
def go():
    return clients.required("go-grpc")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """A 3-node cluster: the client is given every node, the test's checks go to the master."""
    cluster = client_cluster(str(tmp_path_factory.mktemp("go-grpc") / "cluster"), SETTINGS)
    yield cluster
    stop_all(cluster.plan)


@pytest.fixture
def grpc_stubs(node):
    channel = grpc.insecure_channel(node.address)
    yield service_pb2_grpc.MessagingServiceStub(channel), admin_pb2_grpc.AdminStub(channel)
    channel.close()


def run_go(go, node, tmp_path, steps: list[dict], timeout_s: float = 150) -> clients.Run:
    return clients.run(
        go, {"endpoints": node.endpoints, "steps": steps}, tmp_path / "go-home", timeout_s
    )


def test_producer_sends_every_kind_and_a_simple_consumer_gets_them_intact(
    go, node, tmp_path, grpc_stubs
):
    """Normal (sync and async), FIFO, delay and transactional sends from the Go producer;
    Go SimpleConsumers receive every one with its id, tag, keys and properties intact,
    FIFO in order per message group, delayed ones not before their time, committed and
    checked-then-committed transactions but never a rolled-back one."""
    _, admin = grpc_stubs
    scenario = EveryKind("go")
    scenario.create(admin)
    run = run_go(go, node, tmp_path, scenario.steps())
    scenario.check(run, reports_born_host_and_queue=False)


def test_simple_consumer_ack_change_invisible_duration_and_redelivery(
    go, node, tmp_path, grpc_stubs
):
    """Three messages received with a short invisibility: one acked, one hidden longer with
    ChangeInvisibleDuration (then acked with the handle that call returned), the third not
    acked comes back with attempt 2, and only it. (v5.1.4's ``Ack`` returns nil whatever
    the answer's status, so a refused ack cannot be seen from this client.)"""
    messaging, admin = grpc_stubs
    create_topic(admin, "go-simple", queues=2)
    create_group(admin, "go-simple-group")
    for i in range(3):
        answer = messaging.SendMessage(
            rpc.SendMessageRequest(messages=[message("go-simple", b"m%d" % i, f"S{i}", tag="T")])
        )
        assert answer.status.code == pb.OK
    ops = [
        {"op": "receive", "count": 3, "invisible_s": 4, "deadline_s": 20},
        {"op": "ack", "bodies": ["m0"]},
        {"op": "change", "body": "m1", "invisible_s": 60},
        {"op": "receive", "count": 1, "invisible_s": 30, "deadline_s": 25, "ack": True},
        {"op": "ack", "bodies": ["m1"]},
        {"op": "receive", "count": 1, "invisible_s": 30, "deadline_s": 5, "ack": True},
    ]
    run = run_go(
        go,
        node,
        tmp_path,
        [{"do": "simple", "topic": "go-simple", "group": "go-simple-group", "ops": ops}],
    )
    assert not run.of("step_failed"), run.explain()
    received = run.of("received")
    assert sorted(e["id"] for e in received[:3]) == ["S0", "S1", "S2"], run.explain()
    assert all(e["attempt"] == 1 and e["tag"] == "T" for e in received[:3])
    assert [(e["id"], e["attempt"]) for e in received[3:]] == [("S2", 2)], run.explain()
    assert run.of("changed") and [e["body"] for e in run.of("acked")] == ["m0", "m2", "m1"]
    assert not run.of("ack_failed") and not run.of("change_failed"), run.explain()


def test_push_consumers_retry_then_dead_letter_normal_and_fifo(go, node, tmp_path, grpc_stubs):
    """A Go PushConsumer of a normal group fails one message: it is redelivered (attempt
    2) and then dead-lettered; the others are consumed once. A FIFO group's consumer gets
    each message group in order, its failing message retried and then dead-lettered
    without blocking the rest."""
    messaging, admin = grpc_stubs
    scenario = PushRetries("go")
    scenario.create(admin)
    run = run_go(go, node, tmp_path, scenario.steps(), timeout_s=200)
    scenario.check(run, messaging)


def test_push_consumer_with_an_sql92_subscription_gets_only_what_it_selects(
    go, node, tmp_path, grpc_stubs
):
    """A Go PushConsumer subscribed with an SQL92 expression on a user property consumes
    the messages it selects and never the others (RocketMQ's rule: a message without the
    property is not selected)."""
    _, admin = grpc_stubs
    create_topic(admin, "go-push-sql", queues=2)
    create_group(admin, "go-push-sql-group")
    colors = {"r1": "red", "b1": "blue", "r2": "red", "none": None, "r3": "red", "b2": "blue"}
    messages = [
        {"topic": "go-push-sql", "body": body, "properties": {"color": color} if color else {}}
        for body, color in colors.items()
    ]
    push = {
        "do": "push",
        "topic": "go-push-sql",
        "group": "go-push-sql-group",
        "expression": "color = 'red'",
        "sql": True,
        "expect": ["r1", "r2", "r3"],
        "deadline_s": 30,
        "linger_s": 3,
    }
    run = run_go(go, node, tmp_path, [{"do": "produce", "messages": messages}, push])
    assert not run.of("step_failed") and not run.of("send_failed"), run.explain()
    assert [e["all_seen"] for e in run.of("push_waited")] == [True], run.explain()
    consumed = sorted(e["body"] for e in run.of("consumed"))
    assert consumed == ["r1", "r2", "r3"], run.explain()
    assert all(e["properties"] == {"color": "red"} for e in run.of("consumed"))


def test_speaks_plaintext_when_its_environment_turns_tls_off(go, node, tmp_path):
    """With ``rocketmq.client.enableSsl=false`` in its environment (v5.1.4) the client
    speaks plaintext: it sends to and receives from a node without TLS."""
    channel, _, admin = stubs(node.address)
    create_topic(admin, "go-plain", queues=2)
    create_group(admin, "go-plain-reader")
    channel.close()
    messages = [{"topic": "go-plain", "body": f"p{i}"} for i in range(3)]
    steps = [
        {"do": "produce", "messages": messages},
        simple_receive("go-plain", "go-plain-reader", len(messages)),
    ]
    spec = {"endpoints": node.endpoints, "steps": steps}
    run = clients.run(
        go, spec, tmp_path / "go-home", 120, env={"rocketmq.client.enableSsl": "false"}
    )
    assert not run.of("step_failed") and not run.of("send_failed"), run.explain()
    assert sorted(e["body"] for e in run.of("received")) == ["p0", "p1", "p2"], run.explain()


def test_the_master_killed_under_the_go_clients_load_loses_nothing_acknowledged(tmp_path):
    """kill -9 of the master of a fresh 3-node SYNC cluster under the Go client's load (its
    default TLS, every node as access point): no acknowledged message lost, sends and
    receives back at once."""
    check_master_kill("go", tmp_path)
