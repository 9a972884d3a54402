"""Failover through any node, with the official RocketMQ Python (5.1.2) and Java (5.2.0)
clients in processes of their own against a 3-node SYNC cluster of real node processes.

- A client talking to a slave (every call pinned there) gets what it gets from the
  master: sends (sync, async, FIFO), receives, acks, invisibility changes, transactions
  committed, rolled back and checked (the check reaches a producer connected to a slave).
- kill -9 of the master, and separately of a slave, under a steady producer and
  SimpleConsumer of the official Python client and of the official Java client (5.2.0,
  its driver's ``load`` step) at once: sends and receives of both resume within 3 s, no
  acknowledged message is lost, every one is received. The Python client connects to the
  first of the route's addresses in its own (sorted) order, which the test makes a slave
  (it checks the client's TCP connections); the Java client keeps the route's order and
  connects to the master. So the master kill drops the Java client's node and reaches the
  Python client through the slave that forwards its calls; the slave kill drops the Python
  client's node.
- POP handles issued by a killed master ack and change invisibility on the new one; a
  stale one answers INVALID_RECEIPT_HANDLE; what is not acked comes back.
- An orphan transaction whose producer is on a slave is still checked and resolved after
  the master is killed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2

from bench.official_failover import (
    OfficialLoad,
    check_nothing_lost,
    java_load,
    tcp_peer_ports,
    unavailable_ms,
)
from ferrymq.client import Admin
from ferrymq.launcher.cluster import (
    ClusterPlan,
    NodePlan,
    cluster_up,
    is_running,
    kill_node,
    save_plan,
    start_node,
)
from ferrymq.launcher.polling import until
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from tests.support import clients
from tests.support.cluster import SMALL_STORE, status_of, stop_all
from tests.support.official_client import RUNNER, run_official_at

GROUP = "group-1"
RESUME_WITHIN_MS = 3000
SETTINGS = {
    **SMALL_STORE,
    "replication": {"mode": "SYNC", "ack_timeout_ms": 1000},
    "messages": {"transaction_check_interval_ms": 3000, "transaction_max_checks": 10},
}


class Cluster:
    def __init__(self, plan: ClusterPlan, home: Path) -> None:
        self.plan = plan
        self.home = home
        self.runs = 0

    def node(self, node_id: str) -> NodePlan:
        return next(n for n in self.plan.nodes if n.id == node_id)

    def master(self) -> NodePlan:
        def find():
            for node in self.plan.nodes:
                if not is_running(node, self.plan):
                    continue
                status = status_of(node)
                if status is not None and status.broker_groups[0].master:
                    master = self.node(status.broker_groups[0].master)
                    return master if is_running(master, self.plan) else None
            return None

        return until(find, 30, "a live master")

    def first(self) -> NodePlan:
        """The node an official Python client connects to: it sorts a route's addresses
        as ``host:port`` strings and gRPC's pick_first takes the first."""
        return min(self.plan.nodes, key=lambda n: n.grpc)

    def healed(self) -> None:
        """Every node running, alive and in sync with a master."""
        for node in self.plan.nodes:
            if not is_running(node, self.plan):
                started = start_node(self.plan, node)
                self.plan = replace(
                    self.plan,
                    nodes=tuple(started if n.id == node.id else n for n in self.plan.nodes),
                )
                save_plan(self.plan)
        everyone = {n.id for n in self.plan.nodes}

        def in_sync():
            status = status_of(self.plan.nodes[0])
            if status is None:
                return False
            group = status.broker_groups[0]
            alive = {n.id for n in status.nodes if n.alive}
            return bool(group.master) and set(group.in_sync) == everyone == alive

        until(in_sync, 90, "every node alive and in sync", 0.1)

    def make_master(self, node: NodePlan) -> None:
        if self.master().id != node.id:
            with Admin(self.master().grpc, timeout_s=30) as admin:
                admin.failover(GROUP, node.id)
        until(lambda: self.master().id == node.id, 30, f"{node.id} as master")

    def make_slave(self, node: NodePlan) -> None:
        if self.master().id == node.id:
            other = next(n for n in self.plan.nodes if n.id != node.id)
            self.make_master(other)

    def kill(self, node: NodePlan) -> float:
        killed_at = time.monotonic()
        kill_node(self.plan, node)  # its ports held for its restart
        until(lambda: not is_running(node, self.plan), 10, f"{node.id} to die")
        return killed_at

    def client_home(self) -> str:
        self.runs += 1
        home = self.home / f"client-{self.runs}"
        home.mkdir()
        return str(home)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("failover-any-node")
    plan = cluster_up(str(root / "cluster"), nodes=3, auto_ports=True, settings=SETTINGS)
    created = Cluster(plan, root)
    yield created
    stop_all(created.plan)


def create(cluster: Cluster, topic: str, group: str = "", queues: int = 2, **options) -> None:
    with Admin(cluster.master().grpc) as admin:
        admin.create_topic(topic, queues, **options)
        if group:
            admin.create_group(group)
    for node in cluster.plan.nodes:  # every node applies the change before it is used
        until(lambda n=node: topic in topics_on(n), 10, f"{topic} on {node.id}")


def topics_on(node: NodePlan) -> set[str]:
    with Admin(node.grpc, timeout_s=5) as admin:
        return {t.name for t in admin.list_topics()}


def pull_bodies(address: str, topic: str, group: str) -> list[bytes]:
    """Queue 0 of ``topic`` from its start, as ``group`` pulls it."""
    channel = grpc.insecure_channel(address)
    try:
        responses = service_pb2_grpc.MessagingServiceStub(channel).PullMessage(
            rpc.PullMessageRequest(
                group=pb.Resource(name=group),
                message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=0),
                offset=0,
                batch_size=32,
            ),
            timeout=10,
        )
        return [r.message.body for r in responses if r.HasField("message")]
    finally:
        channel.close()


def of(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["event"] == kind]


# ---- (a) a slave answers as the master does ---------------------------------------------
def through(cluster: Cluster, node: NodePlan, role: str) -> dict:
    """Send, receive, ack, change invisibility and transactions with every call pinned
    to ``node``; what the client saw, in a form to compare."""
    topic, group, tx = f"direct-{role}", f"direct-{role}-readers", f"tx-{role}"
    create(cluster, topic, group)
    create(cluster, tx, f"{tx}-readers", queues=1, message_type="TRANSACTION")
    create(cluster, f"fifo-{role}", queues=2, message_type="FIFO")
    access = cluster.master().grpc  # QueryRoute too goes where the pin says
    sends = [
        {"topic": topic, "body": "m0", "tag": "T", "keys": "k0"},
        {"topic": topic, "body": "m1", "tag": "T", "async": True},
        {"topic": topic, "body": "m2", "tag": "T"},
    ] + [{"topic": f"fifo-{role}", "body": f"f{i}", "group": "g"} for i in range(3)]
    produced = run_official_at(
        access,
        Path(cluster.client_home()),
        {
            "scenario": "produce",
            "topics": [topic, f"fifo-{role}"],
            "messages": sends,
            "pin": node.grpc,
        },
    )
    ids = {e["body"]: e["id"] for e in of(produced, "sent")}
    steps = [
        {"do": "receive_until", "count": 3, "invisible_s": 2, "deadline_s": 20},
        {"do": "ack", "ids": [ids["m0"]]},
        {"do": "change", "id": ids["m1"], "invisible_s": 30},
        # m2 is not acked: it comes back after 2 s with attempt 2; m1 stays hidden.
        {"do": "receive_until", "count": 1, "invisible_s": 30, "deadline_s": 20, "ack": True},
        {"do": "ack", "ids": [ids["m1"]]},
        {"do": "ack_forged", "id": ids["m0"], "handle": "forged-handle"},
    ]
    consumed = run_official_at(
        access,
        Path(cluster.client_home()),
        {"scenario": "simple", "topic": topic, "group": group, "steps": steps, "pin": node.grpc},
    )
    transactions = [
        {"topic": tx, "body": "committed", "end": "commit"},
        {"topic": tx, "body": "rolled-back", "end": "rollback"},
        {"topic": tx, "body": "orphan", "end": "none"},
    ]
    checked = run_official_at(
        access,
        Path(cluster.client_home()),
        {
            "scenario": "transaction",
            "topic": tx,
            "messages": transactions,
            "checker_answer": "COMMIT",
            "wait_for_check_s": 30,
            "pin": node.grpc,
        },
    )
    visible = until(
        lambda: sorted(pull_bodies(cluster.master().grpc, tx, f"{tx}-readers")) or None,
        10,
        "committed",
    )
    body_of = {v: k for k, v in ids.items()}
    (forged,) = of(consumed, "ack_failed")
    received = [(e["body"], e["attempt"], e["tag"]) for e in of(consumed, "received")]
    return {
        "sent": sorted(e["body"] for e in of(produced, "sent")),
        "send_failed": of(produced, "send_failed"),
        # The first three in any order: the node spreads sends over the queues, and a
        # receive reads them queue by queue.
        "received": sorted(received[:3]) + received[3:],
        "acked": [body_of[e["id"]] for e in of(consumed, "acked")],
        "forged_refused": "INVALID_RECEIPT_HANDLE" in forged["message"]
        or "40013" in forged["message"],
        "checked": [e["body"] for e in of(checked, "checked")],
        "visible": visible,
    }


def test_a_client_talking_to_a_slave_gets_what_the_master_answers(cluster):
    cluster.healed()
    master = cluster.master()
    slave = next(n for n in cluster.plan.nodes if n.id != master.id)
    on_master = through(cluster, master, "master")
    on_slave = through(cluster, slave, "slave")
    assert on_slave == on_master
    assert on_master["sent"] == ["f0", "f1", "f2", "m0", "m1", "m2"]
    assert not on_master["send_failed"]
    assert on_master["received"][:3] == [("m0", 1, "T"), ("m1", 1, "T"), ("m2", 1, "T")]
    assert on_master["received"][3:] == [("m2", 2, "T")]
    assert on_master["acked"] == ["m0", "m2", "m1"]  # m1 with the handle the change gave
    assert on_master["forged_refused"]
    assert on_master["checked"] == ["orphan"]  # on the slave: relayed to its producer
    assert on_master["visible"] == [b"committed", b"orphan"]


# ---- (b), (c) kill -9 under load ----------------------------------------------------------
@pytest.fixture(scope="module")
def java():
    return clients.required("java-grpc")


def drill(cluster: Cluster, java: clients.Driver, name: str, victim_of) -> dict[str, float]:
    """Official Python and Java producers and SimpleConsumers on a fresh topic, each
    connected to the node its client picks (Python: the first address sorted; Java: the
    route's first, the master); kill -9 of ``victim_of(the Python client's node)``;
    checks that both resume and lose nothing; each client's unavailability in ms."""
    topic, group = f"load-{name}", f"load-{name}-readers"
    create(cluster, topic, group, queues=4)
    connected = cluster.first()
    access = ";".join(n.grpc for n in cluster.plan.nodes)
    loads = {
        "python": OfficialLoad(
            {"scenario": "load", "endpoint": connected.grpc, "topic": topic, "group": group},
            home=cluster.client_home(),
            stop_file=str(cluster.home / f"stop-{name}"),
        ),
        "java": java_load(
            java.argv,
            access,
            topic,
            f"{group}-java",
            cluster.client_home(),
            str(cluster.home / f"stop-{name}"),
        ),
    }
    try:
        for load in loads.values():
            load.until(lambda load=load: len(load.of("received")) >= 20, 90, "steady load")
        port = int(connected.grpc.rsplit(":", 1)[1])
        python = loads["python"]
        until(  # the client's one node (connections being set up may still close)
            lambda: tcp_peer_ports(python.process.pid) == {port},
            10,
            f"the client connected to {connected.id} alone",
        )
        victim = victim_of(connected)
        killed_at = cluster.kill(victim)
        took_ms = {
            client: unavailable_ms(load, killed_at, timeout_s=30) for client, load in loads.items()
        }
        print(f"{name}: killed {victim.id}, sends and receives resumed after {took_ms} ms")
        for load in loads.values():
            later = len(load.of("sent"))
            load.until(lambda load=load, n=later: len(load.of("sent")) >= n + 20, 60, "load after")
        cluster.healed()  # the killed node back, caught up, while the load goes on
        for client, load in loads.items():
            # Java's group differs from Python's: each gets every message of the topic.
            sent, received = check_nothing_lost(load.stop())
            assert sent and sent <= received, (client, sorted(sent - received)[:20])
    finally:
        for load in loads.values():
            load.kill()
    return took_ms


def test_master_killed_under_official_python_and_java_load(cluster, java):
    cluster.healed()
    cluster.make_slave(cluster.first())  # Python through a slave, Java on the master
    took_ms = drill(cluster, java, "master-killed", lambda connected: cluster.master())
    assert max(took_ms.values()) <= RESUME_WITHIN_MS, took_ms


def test_a_slave_killed_under_official_python_and_java_load(cluster, java):
    cluster.healed()
    cluster.make_slave(cluster.first())  # the Python client's own node dies
    took_ms = drill(cluster, java, "slave-killed", lambda connected: connected)
    assert max(took_ms.values()) <= RESUME_WITHIN_MS, took_ms


# ---- POP handles and transactions across a failover ----------------------------------
def messaging(address: str):
    channel = grpc.insecure_channel(address)
    return channel, service_pb2_grpc.MessagingServiceStub(channel)


def test_pop_handles_of_a_killed_master_keep_their_meaning_through_any_node(cluster):
    cluster.healed()
    create(cluster, "handles", "handle-readers", queues=1)
    master = cluster.master()
    slave = next(n for n in cluster.plan.nodes if n.id != master.id)
    channel, stub = messaging(slave.grpc)  # every call through a slave
    try:
        for i in range(4):
            sent = stub.SendMessage(
                rpc.SendMessageRequest(
                    messages=[
                        pb.Message(
                            topic=pb.Resource(name="handles"),
                            body=b"h%d" % i,
                            system_properties=pb.SystemProperties(
                                message_id=f"H{i}", message_type=pb.NORMAL
                            ),
                        )
                    ]
                ),
                timeout=10,
            )
            assert sent.status.code == pb.OK, sent.status

        def receive(invisible_s: int) -> dict[bytes, str]:
            got = {}
            for answer in stub.ReceiveMessage(
                rpc.ReceiveMessageRequest(
                    group=pb.Resource(name="handle-readers"),
                    message_queue=pb.MessageQueue(
                        topic=pb.Resource(name="handles"), broker=pb.Broker(name=GROUP)
                    ),
                    batch_size=16,
                    invisible_duration=duration_pb2.Duration(seconds=invisible_s),
                    long_polling_timeout=duration_pb2.Duration(seconds=1),
                ),
                timeout=10,
            ):
                if answer.HasField("message"):
                    got[answer.message.body] = answer.message.system_properties.receipt_handle
            return got

        handles = until(lambda: receive(3) or None, 10, "the four messages")
        assert sorted(handles) == [b"h0", b"h1", b"h2", b"h3"]
        changed = stub.ChangeInvisibleDuration(
            rpc.ChangeInvisibleDurationRequest(
                group=pb.Resource(name="handle-readers"),
                topic=pb.Resource(name="handles"),
                receipt_handle=handles[b"h1"],
                invisible_duration=duration_pb2.Duration(seconds=60),
            ),
            timeout=10,
        )
        assert changed.status.code == pb.OK
        cluster.kill(master)

        def ack(handle: str):
            return stub.AckMessage(
                rpc.AckMessageRequest(
                    group=pb.Resource(name="handle-readers"),
                    topic=pb.Resource(name="handles"),
                    entries=[rpc.AckMessageEntry(receipt_handle=handle)],
                ),
                timeout=10,
            ).status

        # Delivered by the killed master, acked through a slave at the new one.
        assert ack(handles[b"h0"]).code == pb.OK
        assert ack(changed.receipt_handle).code == pb.OK  # the handle the change gave
        stale = ack(handles[b"h1"])  # replaced by the change: precise refusal
        assert stale.code == pb.INVALID_RECEIPT_HANDLE and "stale" in stale.message
        # h2 and h3 were never acked: they come back once their invisibility ends.
        again = {}
        deadline = time.monotonic() + 20
        while len(again) < 2 and time.monotonic() < deadline:
            again.update(receive(30))
        assert sorted(again) == [b"h2", b"h3"]
    finally:
        channel.close()


def test_an_orphan_whose_producer_is_on_a_slave_is_checked_after_the_master_dies(cluster):
    cluster.healed()
    create(cluster, "orphans", "orphan-readers", queues=1, message_type="TRANSACTION")
    master = cluster.master()
    slave = next(n for n in cluster.plan.nodes if n.id != master.id)
    home = cluster.client_home()
    resolved = Path(home) / "resolved"
    scenario = {
        "endpoint": slave.grpc,
        "pin": slave.grpc,
        "scenario": "transaction",
        "topic": "orphans",
        "messages": [{"topic": "orphans", "body": "left-open", "end": "none"}],
        "checker_answer": "COMMIT",
        "wait_for_check_s": 40,
        # Connected until the commit is seen, as a producer stays: a busy new master may
        # refuse the first answer (FLUSH_SLAVE_TIMEOUT, SYSTEM_BUSY), and checks again.
        "shutdown_when_file_exists": str(resolved),
    }
    runner = subprocess.Popen(
        [sys.executable, str(RUNNER)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=dict(os.environ, HOME=home),
    )
    seen: list[list[bytes]] = []
    try:
        runner.stdin.write(json.dumps(scenario))
        runner.stdin.close()
        events = []

        def read_until(kind: str) -> None:
            while not any(e["event"] == kind for e in events):
                line = runner.stdout.readline()
                assert line, events
                events.append(json.loads(line))

        read_until("sent")
        cluster.kill(master)  # before its first check (3 s after the send)
        read_until("checked")
        new_master = cluster.master()

        def committed() -> bool:
            seen.append(pull_bodies(new_master.grpc, "orphans", "orphan-readers"))
            return seen[-1] == [b"left-open"]

        try:
            until(committed, 30, "the orphan committed by its checker")
        finally:
            resolved.touch()
            rest = runner.stdout.read()
            runner.wait(60)
            events += [json.loads(line) for line in rest.splitlines() if line.startswith("{")]
    except TimeoutError:
        raise AssertionError(f"last pulled {seen[-1:]}, runner's events {events}") from None
    finally:
        if runner.poll() is None:
            runner.kill()
    assert events[-1]["event"] == "done", events
    assert {e["body"] for e in of(events, "checked")} == {"left-open"}, events
    assert of(events, "check_ended")[-1]["code"] == pb.OK, events
