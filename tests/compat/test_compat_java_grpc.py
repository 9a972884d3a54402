"""The official Java 5.x gRPC client (``rocketmq-client-java`` 5.0.8), unchanged, against a
real ferrymq node.

The client runs in a JVM of its own through our driver (``tests/compat/java/grpc5``),
fetched from Maven Central and compiled by ``tests/support/clients.py`` on first use; each
test is one driver run doing several steps. One node serves the module, plaintext (the
client's ``enableSsl(false)``); every test uses its own topics and groups, created first as
ferrymq requires.
"""

from __future__ import annotations

import time

import pytest

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from tests.support import clients
from tests.support.nodes import start_node
from tests.support.rpc import create_topic, message, pull, stubs

# The first run fetches the client from Maven Central and compiles the driver.
pytestmark = pytest.mark.timeout(clients.INSTALL_TIMEOUT_S + 300)

NODE_TOML = """
[messages]
transaction_check_interval_ms = 2000
transaction_max_checks = 3
"""


@pytest.fixture(scope="module")
def java():
    try:
        return clients.driver("java-grpc")
    except clients.ClientUnavailable as error:
        pytest.fail(clients.unavailable(error), pytrace=False)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    started = start_node(str(tmp_path_factory.mktemp("java-grpc") / "node"), NODE_TOML)
    yield started
    started.sigkill()


@pytest.fixture
def grpc_stubs(node):
    channel, messaging, admin = stubs(node.address)
    yield messaging, admin
    channel.close()


def run_java(java, node, tmp_path, steps: list[dict], timeout_s: float = 150) -> clients.Run:
    spec = {"endpoints": node.address, "tls": False, "steps": steps}
    return clients.run(java, spec, tmp_path / "java-home", timeout_s)


def create_group(admin, name: str, **options) -> None:
    answer = admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name=name, **options)))
    assert answer.status.code == 0, answer.status


def by_body(events: list[dict]) -> dict[str, dict]:
    return {e["body"]: e for e in events}


def dead_letters(messaging, group: str, reader: str, count: int, wait_s: float = 20):
    deadline = time.monotonic() + wait_s
    dead = []
    while len(dead) < count and time.monotonic() < deadline:
        _, dead, _ = pull(messaging, f"%DLQ%{group}", 0, 0, group=reader, wait_s=1)
    return dead


def test_producer_sends_every_kind_and_a_simple_consumer_gets_them_intact(
    java, node, tmp_path, grpc_stubs
):
    """Normal (sync and async), FIFO, delay and transactional sends from the Java producer;
    Java SimpleConsumers receive every one with its id, tag, keys and properties intact,
    FIFO in order per message group, delayed ones not before their time, committed and
    checked-then-committed transactions but never a rolled-back one."""
    _, admin = grpc_stubs
    create_topic(admin, "java-normal", queues=4)
    create_topic(admin, "java-fifo", queues=4, message_type=api.FIFO)
    create_topic(admin, "java-delay", queues=2, message_type=api.DELAY)
    create_topic(admin, "java-tx", queues=2, message_type=api.TRANSACTION)
    for group in ("java-normal-reader", "java-fifo-reader", "java-delay-reader", "java-tx-reader"):
        create_group(admin, group, fifo=group == "java-fifo-reader")
    normal = [
        {
            "topic": "java-normal",
            "body": f"n{i}",
            "tag": f"Tag{i % 2}",
            "keys": [f"key-{i}", f"other-{i}"],
            "properties": {"color": f"c{i}", "unicode": "ü-✓"},
            "async": i % 2 == 1,
        }
        for i in range(6)
    ]
    fifo = [
        {"topic": "java-fifo", "body": f"{g}-{i}", "group": g, "tag": "F"}
        for i in range(5)
        for g in ("ga", "gb")
    ]
    delays = [{"topic": "java-delay", "body": f"d{ms}", "delay_ms": ms} for ms in (3000, 1000)]
    transactions = [
        {"body": "committed", "end": "commit", "keys": ["tx-1"]},
        {"body": "rolled-back", "end": "rollback"},
        {"body": "orphan", "end": "none"},
    ]

    def simple(topic, group, count, **extra):
        op = {"op": "receive", "count": count, "invisible_s": 30, "deadline_s": 25, "ack": True}
        return {"do": "simple", "topic": topic, "group": group, "await_s": 2, "ops": [op], **extra}

    run = run_java(
        java,
        node,
        tmp_path,
        [
            {"do": "produce", "messages": normal + fifo + delays},
            {
                "do": "transaction",
                "topic": "java-tx",
                "messages": transactions,
                "checker": "COMMIT",
                "checks": 1,
                "wait_for_check_s": 30,
            },
            simple("java-normal", "java-normal-reader", len(normal)),
            simple("java-fifo", "java-fifo-reader", len(fifo)),
            simple("java-delay", "java-delay-reader", len(delays)),
            simple("java-tx", "java-tx-reader", 2),
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
        assert (r["topic"], r["tag"], sorted(r["keys"])) == ("java-normal", m["tag"], m["keys"])
        assert r["properties"] == m["properties"], r
        assert r["attempt"] == 1 and r["born_host"]
    assert {e["body"] for e in run.of("sent") if e["async"]} == {"n1", "n3", "n5"}

    fifo_received = [e for e in received if e["topic"] == "java-fifo"]
    for g in ("ga", "gb"):
        in_order = [e["body"] for e in fifo_received if e["group"] == g]
        assert in_order == [f"{g}-{i}" for i in range(5)], run.explain()
        assert len({sent[f"{g}-{i}"]["queue"] for i in range(5)}) == 1  # one group, one queue

    for m in delays:
        r = got[m["body"]]
        assert r["delivery_timestamp"], r
        # Not delivered before it was due (the driver sent it at most a few ms before due - delay).
        assert r["received_at"] >= r["delivery_timestamp"] - 50, r

    assert [e["body"] for e in run.of("checked")] == ["orphan"]
    assert [e["body"] for e in run.of("committed")] == ["committed"]
    assert [e["body"] for e in run.of("rolled_back")] == ["rolled-back"]
    tx_received = sorted(e["body"] for e in received if e["topic"] == "java-tx")
    assert tx_received == ["committed", "orphan"], run.explain()
    assert got["committed"]["id"] == sent["committed"]["id"]
    assert got["committed"]["keys"] == ["tx-1"]
    assert all(e["body"] in got for e in run.of("acked"))


def test_simple_consumer_ack_change_invisible_duration_and_redelivery(
    java, node, tmp_path, grpc_stubs
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
        node,
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


def test_push_consumers_retry_then_dead_letter_normal_and_fifo(java, node, tmp_path, grpc_stubs):
    """A Java PushConsumer of a normal group fails one message: it is redelivered (attempt
    2) and then dead-lettered; the others are consumed once. A FIFO group's consumer gets
    each message group in order, its failing message retried and then dead-lettered
    without blocking the rest."""
    messaging, admin = grpc_stubs
    create_topic(admin, "java-push", queues=2)
    create_topic(admin, "java-push-fifo", queues=2, message_type=api.FIFO)
    create_group(admin, "java-push-group", max_delivery_attempts=2)
    create_group(admin, "java-fifo-push-group", fifo=True, max_delivery_attempts=2)
    create_group(admin, "java-dlq-reader")
    fifo_bodies = [f"{g}-{i}" for i in range(4) for g in ("a", "b")]
    run = run_java(
        java,
        node,
        tmp_path,
        [
            {
                "do": "produce",
                "messages": [
                    {"topic": "java-push", "body": b, "tag": "P", "keys": [b]}
                    for b in ("ok-1", "ok-2", "poison")
                ]
                + [
                    {"topic": "java-push-fifo", "body": b, "group": b.split("-")[0]}
                    for b in fifo_bodies
                ],
            },
            {
                "do": "push",
                "deadline_s": 40,
                "linger_s": 3,
                "consumers": [
                    {
                        "topic": "java-push",
                        "group": "java-push-group",
                        "fail": ["poison"],
                        "fail_attempts": 2,
                        "expect": ["ok-1", "ok-2"],
                    },
                    {
                        "topic": "java-push-fifo",
                        "group": "java-fifo-push-group",
                        "fail": ["b-1"],
                        "fail_attempts": 2,
                        "expect": [b for b in fifo_bodies if b != "b-1"],
                    },
                ],
            },
        ],
        timeout_s=200,
    )
    assert not run.of("step_failed") and not run.of("send_failed"), run.explain()
    assert [e["all_seen"] for e in run.of("push_waited")] == [True, True], run.explain()
    consumed = [e for e in run.of("consumed") if e["topic"] == "java-push"]
    poison = [e["attempt"] for e in consumed if e["body"] == "poison"]
    assert poison[:2] == [1, 2], run.explain()
    for body in ("ok-1", "ok-2"):
        assert [e["attempt"] for e in consumed if e["body"] == body] == [1], run.explain()
        (one,) = [e for e in consumed if e["body"] == body]
        assert (one["tag"], one["keys"]) == ("P", [body])
    assert [m.body for m in dead_letters(messaging, "java-push-group", "java-dlq-reader", 1)] == [
        b"poison"
    ]

    fifo_consumed = [e for e in run.of("consumed") if e["topic"] == "java-push-fifo"]
    for g in ("a", "b"):
        firsts = []
        for e in fifo_consumed:
            if e["group"] == g and not e["failed"] and e["body"] not in firsts:
                firsts.append(e["body"])
        assert firsts == [b for b in fifo_bodies if b.startswith(g) and b != "b-1"], run.explain()
    assert [
        m.body for m in dead_letters(messaging, "java-fifo-push-group", "java-dlq-reader", 1)
    ] == [b"b-1"]
