"""The official Node.js client (``rocketmq-client-nodejs`` 1.0.8 from npm, unchanged) against a
real node process and a 3-node cluster (through a kill of the master), and the Settings
every official client reads (docs/architecture.md, "Settings").

The client runs in a ``node`` process of its own (``tests/compat/official_nodejs.js``),
installed on first use by ``tests/support/nodejs.py``; without node, npm or the npm
registry the test fails, it does not skip.
"""

from __future__ import annotations

import itertools
import queue
import threading

import pytest
from google.protobuf import duration_pb2

from ferrymq.client import Admin, PullConsumer
from ferrymq.launcher.cluster import cluster_up
from ferrymq.launcher.polling import until
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from tests.support.cluster import SMALL_STORE, kill, master_of, stop_all, topic_everywhere
from tests.support.nodejs import events_of, run_nodejs_at, start_nodejs_at
from tests.support.rpc import create_topic, pull


def of(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["event"] == kind]


def test_nodejs_producer_and_simple_consumer(module_node, client_home, grpc_stubs):
    messaging, admin = grpc_stubs
    create_topic(admin, "node-normal", queues=4)
    create_topic(admin, "node-fifo", queues=4, message_type=api.FIFO)
    answer = admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name="node-simple")))
    assert answer.status.code == 0, answer.status
    normal = [
        {"topic": "node-normal", "body": f"n{i}", "tag": "TagA", "properties": {"k": str(i)}}
        for i in range(12)
    ]
    fifo = [{"topic": "node-fifo", "body": f"g{i % 2}-{i}", "group": f"g{i % 2}"} for i in range(6)]
    events = run_nodejs_at(
        module_node.address,
        client_home,
        {"scenario": "produce", "topics": ["node-normal", "node-fifo"], "messages": normal + fifo},
    )
    assert not of(events, "send_failed"), events
    assert len(of(events, "sent")) == 18

    # FIFO: each message group in order, on one queue.
    by_group: dict[str, list[tuple[int, str]]] = {}
    for queue_id in range(4):
        _, messages, _ = pull(messaging, "node-fifo", queue_id, 0, group="node-simple")
        for m in messages:
            by_group.setdefault(m.system_properties.message_group, []).append(
                (queue_id, m.body.decode())
            )
    for group in ("g0", "g1"):
        assert len({q for q, _ in by_group[group]}) == 1
        assert [b for _, b in by_group[group]] == [
            f"{group}-{i}" for i in range(6) if i % 2 == int(group[1])
        ]

    steps = [
        {"do": "receive_until", "count": 12, "invisible_s": 30, "deadline_s": 30},
        {"do": "change", "id": None, "invisible_s": 1},
        {"do": "ack", "ids": []},
    ]
    sent_ids = [e["id"] for e in of(events, "sent")][:12]
    steps[1]["id"] = sent_ids[0]
    steps[2]["ids"] = sent_ids[1:]
    steps.append(
        {"do": "receive_until", "count": 1, "invisible_s": 30, "deadline_s": 20, "ack": True}
    )
    consumed = run_nodejs_at(
        module_node.address,
        client_home,
        {"scenario": "simple", "topic": "node-normal", "group": "node-simple", "steps": steps},
    )
    received = of(consumed, "received")
    assert sorted(e["body"] for e in received[:12]) == sorted(m["body"] for m in normal)
    assert all(e["tag"] == "TagA" and e["attempt"] == 1 for e in received[:12])
    assert {e["body"]: e["properties"]["k"] for e in received[:12]} == {
        m["body"]: m["properties"]["k"] for m in normal
    }
    # The message whose invisibility was cut to 1 s comes back, attempt 2, and is acked.
    assert [(e["id"], e["attempt"]) for e in received[12:]] == [(sent_ids[0], 2)]
    assert len(of(consumed, "acked")) == 12


def settings_answer(messaging, settings: pb.Settings) -> pb.Settings:
    """The node's answer to one Telemetry settings command."""
    commands: queue.Queue = queue.Queue()
    commands.put(rpc.TelemetryCommand(settings=settings))
    done = threading.Event()

    def requests():
        yield commands.get()
        done.wait(10)  # keep the stream open until the answer is read

    stream = messaging.Telemetry(requests(), timeout=10)
    try:
        answer = next(stream)
    finally:
        done.set()
        stream.cancel()
    assert answer.status.code == pb.OK, answer.status
    return answer.settings


def test_settings_carry_what_the_official_clients_read(grpc_stubs):
    messaging, admin = grpc_stubs
    user_agent = pb.UA(language=pb.NODE_JS, version="1.0.8", platform="linux", hostname="h")
    producer = settings_answer(
        messaging,
        pb.Settings(
            client_type=pb.PRODUCER,
            publishing=pb.Publishing(topics=[pb.Resource(name="node-normal")]),
            user_agent=user_agent,
        ),
    )
    policy = producer.backoff_policy
    assert policy.WhichOneof("strategy") == "exponential_backoff"
    assert policy.max_attempts == 3
    assert policy.exponential_backoff.initial.nanos == 10_000_000
    assert policy.exponential_backoff.max.seconds == 1
    assert policy.exponential_backoff.multiplier == 2
    assert producer.publishing.max_body_size == 4 * 1024 * 1024
    assert producer.publishing.validate_message_type
    assert producer.request_timeout.seconds == 3  # the client sent none
    assert producer.user_agent == user_agent and not producer.metric.on

    answer = admin.CreateGroup(
        api.CreateGroupRequest(
            group=api.Group(name="node-fifo-group", fifo=True, max_delivery_attempts=5)
        )
    )
    assert answer.status.code == 0, answer.status
    for language, strategy in (
        (pb.NODE_JS, "exponential_backoff"),
        (pb.PYTHON, "customized_backoff"),
    ):
        for group, fifo, attempts in (("node-fifo-group", True, 5), ("never-created", False, 16)):
            consumer = settings_answer(
                messaging,
                pb.Settings(
                    client_type=pb.PUSH_CONSUMER,
                    subscription=pb.Subscription(group=pb.Resource(name=group)),
                    user_agent=pb.UA(language=language),
                    request_timeout=duration_pb2.Duration(seconds=5),
                ),
            )
            subscription = consumer.subscription
            assert subscription.fifo is fifo
            assert subscription.receive_batch_size == 32
            assert subscription.long_polling_timeout.seconds == 20
            assert consumer.request_timeout.seconds == 5  # the client's own
            assert consumer.backoff_policy.max_attempts == attempts
            assert consumer.backoff_policy.WhichOneof("strategy") == strategy
            assert not consumer.metric.on
    # Telemetry creates no group (it needs no permission on one).
    listed = admin.ListGroups(api.ListGroupsRequest())
    assert "never-created" not in {g.name for g in listed.groups}


@pytest.fixture
def three(tmp_path):
    plan = cluster_up(str(tmp_path / "cluster"), nodes=3, auto_ports=True, settings=SMALL_STORE)
    yield plan
    stop_all(plan)


def stored_on(node, topic: str) -> int:
    with Admin(node.grpc, timeout_s=5) as admin:
        return sum(max(0, q.max_offset) for q in admin.describe_topic(topic)[1])


def bodies_in(address: str, topic: str) -> set[str]:
    with PullConsumer(address, "node-ha-check", start="beginning") as consumer:
        consumer.assign(topic, list(range(4)))
        found: set[str] = set()
        while batch := consumer.poll(wait_s=0.2):
            found.update(m.body.decode() for m in batch)
        return found


def test_nodejs_on_a_cluster_writes_through_a_slave_and_through_a_master_kill(three, client_home):
    """The 1.0.8 client joins a route's addresses into one DNS name: it gets the one node
    it asked, which forwards to the master (``node/grpc/route_endpoints.py``). Configured
    with a slave, it writes; the master is killed under its load; writes go on after the
    election, every acknowledged one is in the new master's log, and its consumer gets
    them all through the other survivor."""
    plan = three
    master = master_of(plan)
    slave = next(n for n in plan.nodes if n.id != master.id)
    with Admin(master.grpc) as admin:
        admin.create_topic("node-ha", queue_count=4)
        admin.create_group("node-ha-check")
        admin.create_group("node-ha-readers")
    topic_everywhere(plan, "node-ha")
    count, pace_ms = 400, 20
    started = start_nodejs_at(
        slave.grpc,
        client_home,
        {"scenario": "produce_for", "topic": "node-ha", "count": count, "pace_ms": pace_ms},
    )
    until(lambda: stored_on(master, "node-ha") >= 50, 60, "the client's first 50 writes")
    kill(plan, master)
    events = events_of(started, client_home, timeout_s=120)
    sent, failed = of(events, "sent"), of(events, "send_failed")
    assert len(sent) + len(failed) == count, events[-5:]
    assert not failed, failed[:5]  # the slave held the calls through the election
    longest_ms = max(b["ms"] - a["ms"] for a, b in itertools.pairwise(sent))
    print(f"Node.js writes through a master kill: longest gap {longest_ms} ms")
    assert longest_ms < 10_000, longest_ms
    survivors = [n for n in plan.nodes if n.id != master.id]
    new_master = master_of(plan, survivors)
    assert {e["body"] for e in sent} <= bodies_in(new_master.grpc, "node-ha")
    # And its simple consumer, configured with whichever survivor is not the master,
    # receives and acks every one of them there.
    other = next(n for n in survivors if n.id != new_master.id)
    steps = [
        {"do": "receive_until", "count": count, "invisible_s": 30, "deadline_s": 60, "ack": True}
    ]
    consumed = run_nodejs_at(
        other.grpc,
        client_home,
        {"scenario": "simple", "topic": "node-ha", "group": "node-ha-readers", "steps": steps},
        timeout_s=120,
    )
    assert {e["body"] for e in of(consumed, "received")} == {e["body"] for e in sent}
    assert len(of(consumed, "acked")) >= count
