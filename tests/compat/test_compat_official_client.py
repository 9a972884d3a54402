"""The official ``rocketmq-python-client`` 5.1.2, unchanged, against a real 3-node ferrymq
cluster, given a slave as its access point.

Each scenario runs the official client in a process of its own (it registers the same
protobuf names as ferrymq) with HOME pointed at a temporary directory, where it writes its
log; a failing scenario shows the tail of that log. One cluster serves the whole module;
every test uses its own topics and groups.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from tests.support.cluster import client_cluster, stop_all
from tests.support.nodes import start_node
from tests.support.official_client import RUNNER, run_official_at
from tests.support.rpc import create_group, create_topic, message, pull, stubs

SETTINGS = {"messages": {"transaction_check_interval_ms": 2000, "transaction_max_checks": 3}}


@pytest.fixture(scope="module")
def module_node(tmp_path_factory):
    """Three nodes for the module, checking orphan transactions every 2 s; the test's own
    setup and checks go to the master (``address``)."""
    directory = tmp_path_factory.mktemp("official-python") / "cluster"
    cluster = client_cluster(str(directory), SETTINGS)
    yield cluster
    stop_all(cluster.plan)


def run_official(cluster, home: Path, scenario: dict, timeout_s: float = 90) -> list[dict]:
    """The client takes one access point: a slave, which its routes lead past to the
    master (routes name every node, and any node forwards to the master)."""
    return run_official_at(cluster.slave.grpc, home, scenario, timeout_s)


def of(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["event"] == kind]


def pull_all(messaging, topic: str, queues: int, group: str = "reader") -> list[pb.Message]:
    found = []
    for queue_id in range(queues):
        _, messages, _ = pull(messaging, topic, queue_id, 0, group=group)
        found.extend(messages)
    return found


def test_producer_sync_async_tags_keys_and_fifo(module_node, client_home, grpc_stubs):
    messaging, admin = grpc_stubs
    create_topic(admin, "compat-normal", queues=4)
    create_topic(admin, "compat-fifo", queues=4, message_type=api.FIFO)
    create_group(admin, "reader")
    sends = [
        {"topic": "compat-normal", "body": "sync-1", "tag": "TagA", "keys": "order-1"},
        {
            "topic": "compat-normal",
            "body": "async-1",
            "tag": "TagB",
            "keys": "order-2",
            "async": True,
        },
    ] + [{"topic": "compat-fifo", "body": f"g{i % 2}-{i}", "group": f"g{i % 2}"} for i in range(6)]
    events = run_official(
        module_node,
        client_home,
        {"scenario": "produce", "topics": ["compat-normal", "compat-fifo"], "messages": sends},
    )
    sent = {e["body"]: e["id"] for e in of(events, "sent")}
    assert len(sent) == 8 and not of(events, "send_failed")

    normal = {m.body.decode(): m for m in pull_all(messaging, "compat-normal", 4)}
    assert set(normal) == {"sync-1", "async-1"}
    for body, tag, key in (("sync-1", "TagA", "order-1"), ("async-1", "TagB", "order-2")):
        system = normal[body].system_properties
        assert system.message_id == sent[body] and system.tag == tag
        assert list(system.keys) == [key]
    by_key = admin.QueryMessageByKey(
        api.QueryMessageByKeyRequest(topic="compat-normal", key="order-2")
    )
    assert [m.message_id for m in by_key.messages] == [sent["async-1"]]

    fifo = pull_all(messaging, "compat-fifo", 4)
    for group in ("g0", "g1"):
        in_order = [m.body.decode() for m in fifo if m.system_properties.message_group == group]
        assert in_order == [f"{group}-{i}" for i in range(6) if f"g{i % 2}" == group]
        queues = {
            m.system_properties.queue_id for m in fifo if m.system_properties.message_group == group
        }
        assert len(queues) == 1  # one message group, one queue


def test_simple_consumer_receive_ack_change_redelivery_and_bad_handle(
    module_node, client_home, grpc_stubs
):
    messaging, admin = grpc_stubs
    create_topic(admin, "compat-simple", queues=2)
    create_group(admin, "simple-group")
    for i in range(3):
        sent = messaging.SendMessage(
            rpc.SendMessageRequest(
                messages=[message("compat-simple", b"m%d" % i, f"S{i}", tag="T")]
            )
        )
        assert sent.status.code == pb.OK
    steps = [
        {"do": "receive_until", "count": 3, "invisible_s": 2, "deadline_s": 20},
        {"do": "ack", "ids": ["S0"]},
        {"do": "change", "id": "S1", "invisible_s": 30},
        # S2 is not acked: it comes back after 2 s with attempt 2; S1 stays hidden.
        {"do": "receive_until", "count": 1, "invisible_s": 30, "deadline_s": 20, "ack": True},
        {"do": "ack", "ids": ["S1"]},
        {"do": "ack_forged", "id": "S0", "handle": "forged-handle"},
    ]
    events = run_official(
        module_node,
        client_home,
        {"scenario": "simple", "topic": "compat-simple", "group": "simple-group", "steps": steps},
    )
    received = of(events, "received")
    assert sorted(e["id"] for e in received[:3]) == ["S0", "S1", "S2"]
    assert all(e["attempt"] == 1 and e["tag"] == "T" and not e["corrupted"] for e in received[:3])
    assert [(e["id"], e["attempt"]) for e in received[3:]] == [("S2", 2)]
    acked = [e["id"] for e in of(events, "acked")]
    assert acked == ["S0", "S2", "S1"]  # S1 acked with the handle the change returned
    (forged,) = of(events, "ack_failed")
    assert (forged["type"] == "BadRequestException" and "40013" in forged["message"]) or (
        "INVALID_RECEIPT_HANDLE" in forged["message"]
    )


def test_push_consumer_normal_group_retries_then_dead_letters(module_node, client_home, grpc_stubs):
    messaging, admin = grpc_stubs
    create_topic(admin, "compat-push", queues=2)
    create_group(admin, "push-group", max_delivery_attempts=2)
    create_group(admin, "dlq-reader")
    for body in (b"ok-1", b"ok-2", b"poison"):
        sent = messaging.SendMessage(
            rpc.SendMessageRequest(messages=[message("compat-push", body, body.decode())])
        )
        assert sent.status.code == pb.OK
    events = run_official(
        module_node,
        client_home,
        {
            "scenario": "push",
            "topic": "compat-push",
            "group": "push-group",
            "fail": ["poison"],
            "expect": ["ok-1", "ok-2"],
            "deadline_s": 30,
            "linger_s": 4,
        },
    )
    poison = [e["attempt"] for e in of(events, "consumed") if e["body"] == "poison"]
    assert poison[:2] == [1, 2]  # redelivered after the failure
    deadline = time.monotonic() + 20
    dead = []
    while not dead and time.monotonic() < deadline:
        _, dead, _ = pull(messaging, "%DLQ%push-group", 0, 0, group="dlq-reader", wait_s=1)
    assert [m.body for m in dead] == [b"poison"]


def test_push_consumer_fifo_group_in_order_and_dead_letter(module_node, client_home, grpc_stubs):
    messaging, admin = grpc_stubs
    create_topic(admin, "compat-fifo-push", queues=2, message_type=api.FIFO)
    create_group(admin, "fifo-group", fifo=True, max_delivery_attempts=2)
    create_group(admin, "fifo-dlq-reader")
    bodies = [f"{group}-{i}" for i in range(4) for group in ("a", "b")]
    for body in bodies:
        group = body.split("-")[0]
        sent = messaging.SendMessage(
            rpc.SendMessageRequest(
                messages=[
                    message(
                        "compat-fifo-push",
                        body.encode(),
                        "F" + body,
                        message_type=pb.FIFO,
                        message_group=group,
                    )
                ]
            )
        )
        assert sent.status.code == pb.OK
    events = run_official(
        module_node,
        client_home,
        {
            "scenario": "push",
            "topic": "compat-fifo-push",
            "group": "fifo-group",
            "fail": ["b-3"],
            "expect": [b for b in bodies if b != "b-3"],
            "deadline_s": 40,
            "linger_s": 3,
        },
    )
    consumed = [e["body"] for e in of(events, "consumed") if not e["failed"]]
    for group in ("a", "b"):
        firsts = []
        for body in consumed:
            if body.startswith(group) and body not in firsts:
                firsts.append(body)
        assert firsts == [b for b in bodies if b.startswith(group) and b != "b-3"]
    deadline = time.monotonic() + 20
    dead = []
    while not dead and time.monotonic() < deadline:
        _, dead, _ = pull(messaging, "%DLQ%fifo-group", 0, 0, group="fifo-dlq-reader", wait_s=1)
    assert [m.body for m in dead] == [b"b-3"]


def test_ferrymq_sends_are_received_by_the_official_client_and_bad_input(
    module_node, client_home, grpc_stubs
):
    messaging, admin = grpc_stubs
    create_topic(admin, "compat-cross", queues=1)
    create_group(admin, "cross-group")
    sent = messaging.SendMessage(
        rpc.SendMessageRequest(
            messages=[message("compat-cross", b"from-ferrymq", "X1", tag="Tx", keys=["kx"])]
        )
    )
    assert sent.status.code == pb.OK
    steps = [{"do": "receive_until", "count": 1, "invisible_s": 10, "deadline_s": 20, "ack": True}]
    events = run_official(
        module_node,
        client_home,
        {"scenario": "simple", "topic": "compat-cross", "group": "cross-group", "steps": steps},
    )
    (got,) = of(events, "received")
    assert (got["id"], got["body"], got["tag"], got["keys"]) == ("X1", "from-ferrymq", "Tx", ["kx"])

    bad = [
        {"topic": "compat-missing", "body": "x"},
        {"topic": "compat-cross", "body": "big", "pad_to": 4 * 1024 * 1024 + 1},
        {"topic": "compat-cross", "body": "still-serving"},
    ]
    events = run_official(
        module_node,
        client_home,
        {"scenario": "produce", "topics": ["compat-cross"], "messages": bad},
    )
    failed = {e["body"]: e for e in of(events, "send_failed")}
    assert set(failed) == {"x", "big"}, events
    # The route query answered TOPIC_NOT_FOUND; the client reports it as a route failure.
    assert "compat-missing route" in failed["x"]["message"]
    # The limit the node announced in its Telemetry settings (max_body_size) is enforced.
    assert failed["big"]["type"] == "IllegalArgumentException"
    assert "max size=4194304" in failed["big"]["message"]
    assert [e["body"] for e in of(events, "sent")] == ["still-serving"]


def test_recall_cancels_a_delayed_message_before_its_time(module_node, client_home, grpc_stubs):
    """RocketMQ 5.3.2's recall through the official client, given a slave (the recall goes
    to its master): the recalled message never arrives, its twin due the same millisecond
    does; recalling again is OK; a recall after the delivery time, or of a handle altered
    or for another topic, is refused."""
    messaging, admin = grpc_stubs
    create_topic(admin, "compat-recall", queues=1, message_type=api.DELAY)
    create_group(admin, "recall-group")
    due = int(time.time()) + 3
    messages = [
        {"topic": "compat-recall", "body": "recalled", "delivery_timestamp": due, "recall": 2},
        {"topic": "compat-recall", "body": "kept", "delivery_timestamp": due},
    ]
    events = run_official(
        module_node,
        client_home,
        {"scenario": "produce", "topics": ["compat-recall"], "messages": messages},
    )
    sent = {e["body"]: e for e in of(events, "sent")}
    assert sent["recalled"]["recall_handle"] and sent["kept"]["recall_handle"], events
    recalled = of(events, "recalled")
    assert [e["id"] for e in recalled] == [sent["recalled"]["id"]] * 2, events
    steps = [{"do": "receive_until", "count": 1, "invisible_s": 10, "deadline_s": 20, "ack": True}]
    events = run_official(
        module_node,
        client_home,
        {"scenario": "simple", "topic": "compat-recall", "group": "recall-group", "steps": steps},
    )
    # Due the same millisecond: delivered together, or the recalled one skipped.
    assert [e["body"] for e in of(events, "received")] == ["kept"]
    kept = sent["kept"]["recall_handle"]
    altered = kept[:10] + ("A" if kept[10] != "A" else "B") + kept[11:]
    late = run_official(
        module_node,
        client_home,
        {
            "scenario": "produce",
            "topics": ["compat-recall"],
            "messages": [],
            "recall_handles": [["kept", kept], ["altered", altered]],
        },
    )
    failed = {e["body"]: e["message"] for e in of(late, "recall_failed")}
    assert "has come" in failed["kept"], late
    assert "recall handle" in failed["altered"], late
    assert not of(late, "recalled")
    assert pull_all(messaging, "compat-recall", 1, group="recall-reader")[0].body == b"kept"


def test_priority_messages_are_received_highest_first(module_node, client_home, grpc_stubs):
    """RocketMQ 5.4's priority messages through the official client, given a slave: a
    PRIORITY topic's messages come highest priority first, each with its priority."""
    _, admin = grpc_stubs
    create_topic(admin, "compat-priority", queues=4, message_type=api.PRIORITY)
    create_group(admin, "priority-group")
    messages = [
        {"topic": "compat-priority", "body": f"p{p}", "priority": p} for p in (1, 3, 0, 2, 7)
    ]
    events = run_official(
        module_node,
        client_home,
        {"scenario": "produce", "topics": ["compat-priority"], "messages": messages},
    )
    assert len(of(events, "sent")) == 5, events
    steps = [{"do": "receive_until", "count": 5, "max": 5, "invisible_s": 30, "deadline_s": 20}]
    events = run_official(
        module_node,
        client_home,
        {
            "scenario": "simple",
            "topic": "compat-priority",
            "group": "priority-group",
            "steps": steps,
        },
    )
    received = of(events, "received")
    assert [e["body"] for e in received] == ["p3", "p7", "p2", "p1", "p0"], received
    assert [e["priority"] for e in received] == [3, 7, 2, 1, 0]


def test_delay_and_transactions(module_node, client_home, grpc_stubs):
    messaging, admin = grpc_stubs
    create_topic(admin, "compat-delay", queues=1, message_type=api.DELAY)
    create_topic(admin, "compat-tx", queues=1, message_type=api.TRANSACTION)
    create_group(admin, "delay-group")
    create_group(admin, "tx-reader")
    now = time.time()
    delays = [
        {"topic": "compat-delay", "body": f"d{i}", "delivery_timestamp": int(now) + 2 + i}
        for i in (2, 0, 1)
    ]
    events = run_official(
        module_node,
        client_home,
        {"scenario": "produce", "topics": ["compat-delay"], "messages": delays},
    )
    assert len(of(events, "sent")) == 3
    steps = [{"do": "receive_until", "count": 3, "invisible_s": 10, "deadline_s": 20, "ack": True}]
    events = run_official(
        module_node,
        client_home,
        {"scenario": "simple", "topic": "compat-delay", "group": "delay-group", "steps": steps},
    )
    received = of(events, "received")
    assert [e["body"] for e in received] == ["d0", "d1", "d2"]
    assert all(e["delivery_timestamp"] for e in received)

    transactions = [
        {"topic": "compat-tx", "body": "committed", "end": "commit"},
        {"topic": "compat-tx", "body": "rolled-back", "end": "rollback"},
        {"topic": "compat-tx", "body": "orphan", "end": "none"},
    ]
    events = run_official(
        module_node,
        client_home,
        {
            "scenario": "transaction",
            "topic": "compat-tx",
            "messages": transactions,
            "checker_answer": "COMMIT",
            "wait_for_check_s": 20,
        },
    )
    assert [e["body"] for e in of(events, "checked")] == ["orphan"]
    deadline = time.monotonic() + 10
    visible = []
    while len(visible) < 2 and time.monotonic() < deadline:
        _, visible, _ = pull(messaging, "compat-tx", 0, 0, group="tx-reader", wait_s=1)
    assert sorted(m.body for m in visible) == [b"committed", b"orphan"]


def test_sigkill_between_a_transactional_send_and_its_commit(tmp_path, client_home):
    """The official producer sends a half, the node is killed and restarted on its port,
    then the producer commits: exactly one message becomes visible."""
    data_dir = str(tmp_path / "node")
    node = start_node(data_dir)
    _, messaging, admin = stubs(node.address)
    create_topic(admin, "compat-tx-kill", queues=1, message_type=api.TRANSACTION)
    create_group(admin, "tx-kill-reader")
    go = tmp_path / "commit-now"
    scenario = {
        "endpoint": node.address,
        "scenario": "transaction",
        "topic": "compat-tx-kill",
        "messages": [
            {
                "topic": "compat-tx-kill",
                "body": "paid",
                "end": "commit",
                "commit_when_file_exists": str(go),
            },
        ],
    }
    runner = subprocess.Popen(
        [sys.executable, str(RUNNER)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, HOME=str(client_home)),
    )
    try:
        runner.stdin.write(json.dumps(scenario))
        runner.stdin.close()
        events = []
        while not any(e["event"] == "sent" for e in events):
            line = runner.stdout.readline()
            assert line, (events, runner.stderr.read()[-2000:])
            events.append(json.loads(line))
        node.sigkill()
        node = start_node(data_dir, port=int(node.address.rsplit(":", 1)[1]))
        go.touch()
        rest = runner.stdout.read()  # to its exit: the runner bounds its own waits
        errors = runner.stderr.read()
        runner.wait(30)
        events += [json.loads(line) for line in rest.splitlines() if line.startswith("{")]
        assert events[-1]["event"] == "done", (events, errors[-2000:])
        _, messaging, _ = stubs(node.address)
        _, visible, _ = pull(messaging, "compat-tx-kill", 0, 0, group="tx-kill-reader")
        assert [m.body for m in visible] == [b"paid"]
    finally:
        if runner.poll() is None:
            runner.kill()
        node.sigkill()


def test_lite_topics_through_the_lite_simple_consumer(module_node, client_home, grpc_stubs):
    """RocketMQ 5.5's lite topics through the official client, given a slave: a producer
    names each message's lite topic; a LiteSimpleConsumer receives the lite topics it
    subscribed to, each in order, and nothing of the others; an illegal name is refused
    with RocketMQ's words. (Its LitePushConsumer speaks as Java's does, which
    tests/compat/test_compat_java_grpc.py drives.)"""
    _, admin = grpc_stubs
    create_topic(admin, "compat-lite", queues=4, message_type=api.LITE)
    messages = [
        {"topic": "compat-lite", "body": f"{lite}-{n}", "lite_topic": lite}
        for n in range(3)
        for lite in ("session-a", "session-b", "session-c")
    ]
    events = run_official(
        module_node,
        client_home,
        {"scenario": "produce", "topics": ["compat-lite"], "messages": messages},
    )
    assert len(of(events, "sent")) == 9, events
    steps = [
        {"do": "subscribe", "names": ["session-a", "session-b", "bad.name"]},
        # 5.1.2's subscribe_lite sends the name's characters as the lite topics (it extends
        # the request's set with the string): the whole set, as its 30 s sync sends it.
        {"do": "sync_all"},
        {"do": "receive_until", "count": 6, "max": 16, "invisible_s": 30, "deadline_s": 30},
    ]
    events = run_official(
        module_node,
        client_home,
        {
            "scenario": "lite_simple",
            "topic": "compat-lite",
            "group": "lite-simple",
            "steps": steps,
            "await_s": 1,
        },
    )
    failed = of(events, "subscribe_failed")
    assert [e["name"] for e in failed] == ["bad.name"], events  # its "." is refused
    assert "alphanumeric characters" in failed[0]["message"]
    received = of(events, "received")
    assert len(received) == 6, events
    for lite in ("session-a", "session-b"):
        bodies = [e["body"] for e in received if e["lite_topic"] == lite]
        assert bodies == [f"{lite}-{n}" for n in range(3)], received
    assert len(of(events, "acked")) == 6
