"""The official Go 5.x gRPC client (``github.com/apache/rocketmq-clients/golang/v5``
v5.1.2), unchanged, against a real ferrymq node.

The client runs in a process of its own through our driver (``tests/compat/go/grpc5``),
built by ``tests/support/clients.py`` with ``go build`` from the Go module proxy on first
use; each test is one driver run doing several steps. That client always speaks TLS
(accepting any certificate), so the module's node serves TLS with a throwaway
certificate, as a deployment for Go clients must.
"""

from __future__ import annotations

import grpc
import pytest

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from ferrymq.protocol.ferrymq import admin_pb2_grpc
from tests.support import clients
from tests.support.nodes import start_node
from tests.support.rpc import create_topic, message
from tests.support.tls_certs import make_pki

# The first run fetches the client's modules and builds the driver.
pytestmark = pytest.mark.timeout(clients.INSTALL_TIMEOUT_S + 300)

NODE_TOML = """
[messages]
transaction_check_interval_ms = 2000
transaction_max_checks = 3
"""


@pytest.fixture(scope="module")
def go():
    try:
        return clients.driver("go-grpc")
    except clients.ClientUnavailable as error:
        pytest.fail(clients.unavailable(error), pytrace=False)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("go-grpc-pki"))


@pytest.fixture(scope="module")
def node(tmp_path_factory, pki):
    tls = f'[security]\ntls_cert = "{pki.server_cert}"\ntls_key = "{pki.server_key}"\n'
    started = start_node(str(tmp_path_factory.mktemp("go-grpc") / "node"), NODE_TOML + tls)
    yield started
    started.sigkill()


@pytest.fixture
def grpc_stubs(node, pki):
    with open(pki.ca, "rb") as f:
        channel = grpc.secure_channel(node.address, grpc.ssl_channel_credentials(f.read()))
    yield service_pb2_grpc.MessagingServiceStub(channel), admin_pb2_grpc.AdminStub(channel)
    channel.close()


def run_go(go, node, tmp_path, steps: list[dict], timeout_s: float = 150) -> clients.Run:
    return clients.run(
        go, {"endpoints": node.address, "steps": steps}, tmp_path / "go-home", timeout_s
    )


def create_group(admin, name: str, **options) -> None:
    answer = admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name=name, **options)))
    assert answer.status.code == 0, answer.status


def by_body(events: list[dict]) -> dict[str, dict]:
    return {e["body"]: e for e in events}


def simple(topic: str, group: str, count: int) -> dict:
    op = {"op": "receive", "count": count, "invisible_s": 30, "deadline_s": 25, "ack": True}
    return {"do": "simple", "topic": topic, "group": group, "await_s": 2, "ops": [op]}


def test_producer_sends_every_kind_and_a_simple_consumer_gets_them_intact(
    go, node, tmp_path, grpc_stubs
):
    """Normal (sync and async), FIFO, delay and transactional sends from the Go producer;
    Go SimpleConsumers receive every one with its id, tag, keys and properties intact,
    FIFO in order per message group, delayed ones not before their time, committed and
    checked-then-committed transactions but never a rolled-back one."""
    _, admin = grpc_stubs
    create_topic(admin, "go-normal", queues=4)
    create_topic(admin, "go-fifo", queues=4, message_type=api.FIFO)
    create_topic(admin, "go-delay", queues=2, message_type=api.DELAY)
    create_topic(admin, "go-tx", queues=2, message_type=api.TRANSACTION)
    for group in ("go-normal-reader", "go-fifo-reader", "go-delay-reader", "go-tx-reader"):
        create_group(admin, group, fifo=group == "go-fifo-reader")
    normal = [
        {
            "topic": "go-normal",
            "body": f"n{i}",
            "tag": f"Tag{i % 2}",
            "keys": [f"key-{i}", f"other-{i}"],
            "properties": {"color": f"c{i}", "unicode": "ü-✓"},
            "async": i % 2 == 1,
        }
        for i in range(6)
    ]
    fifo = [
        {"topic": "go-fifo", "body": f"{g}-{i}", "group": g, "tag": "F"}
        for i in range(5)
        for g in ("ga", "gb")
    ]
    delays = [{"topic": "go-delay", "body": f"d{ms}", "delay_ms": ms} for ms in (3000, 1000)]
    transactions = [
        {"body": "committed", "end": "commit", "keys": ["tx-1"]},
        {"body": "rolled-back", "end": "rollback"},
        {"body": "orphan", "end": "none"},
    ]
    run = run_go(
        go,
        node,
        tmp_path,
        [
            {"do": "produce", "messages": normal + fifo + delays},
            {
                "do": "transaction",
                "topic": "go-tx",
                "messages": transactions,
                "checker": "COMMIT",
                "checks": 1,
                "wait_for_check_s": 30,
            },
            simple("go-normal", "go-normal-reader", len(normal)),
            simple("go-fifo", "go-fifo-reader", len(fifo)),
            simple("go-delay", "go-delay-reader", len(delays)),
            simple("go-tx", "go-tx-reader", 2),
        ],
    )
    assert not run.of("step_failed") and not run.of("send_failed"), run.explain()
    sent = by_body(run.of("sent"))
    assert len(sent) == len(normal + fifo + delays + transactions), run.explain()
    received = run.of("received")
    got = by_body(received)
    assert len(received) == len(got), run.explain()  # nothing twice

    for m in normal:
        r = got[m["body"]]
        assert r["id"] == sent[m["body"]]["id"]
        assert (r["topic"], r["tag"], sorted(r["keys"])) == ("go-normal", m["tag"], m["keys"])
        assert r["properties"] == m["properties"], r
        assert r["attempt"] == 1
    assert {e["body"] for e in run.of("sent") if e["async"]} == {"n1", "n3", "n5"}

    fifo_received = [e for e in received if e["topic"] == "go-fifo"]
    for g in ("ga", "gb"):
        in_order = [e["body"] for e in fifo_received if e.get("group") == g]
        assert in_order == [f"{g}-{i}" for i in range(5)], run.explain()

    for m in delays:
        r = got[m["body"]]
        assert r["delivery_timestamp"], r
        assert r["received_at"] >= r["delivery_timestamp"] - 50, r

    assert [e["body"] for e in run.of("checked")] == ["orphan"]
    assert [e["body"] for e in run.of("committed")] == ["committed"]
    assert [e["body"] for e in run.of("rolled_back")] == ["rolled-back"]
    tx_received = sorted(e["body"] for e in received if e["topic"] == "go-tx")
    assert tx_received == ["committed", "orphan"], run.explain()
    assert got["committed"]["id"] == sent["committed"]["id"]
    assert got["committed"]["keys"] == ["tx-1"]


def test_simple_consumer_ack_change_invisible_duration_and_redelivery(
    go, node, tmp_path, grpc_stubs
):
    """Three messages received with a short invisibility: one acked, one hidden longer with
    ChangeInvisibleDuration (then acked with the handle that call returned), the third not
    acked comes back with attempt 2, and only it. (v5.1.2's ``Ack`` returns nil whatever
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
