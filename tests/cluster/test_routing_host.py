"""A node's routing host (``node/routing_host.py``) lives and dies with its node, and vouches
for the node's process only while that process runs: kill -9 of either ends both, and a
node process that is stopped while its host runs is marked down and replaced as a dead
one is."""

from __future__ import annotations

import os
import signal

import pytest

from ferrymq.client import Admin, Message, Producer
from ferrymq.launcher.cluster import cluster_up, is_running, log_path
from ferrymq.launcher.polling import until
from ferrymq.launcher.processes import process_tree
from tests.support.cluster import SMALL_STORE, status_of, stop_all, topic_everywhere


def routing_host_of(pid: int) -> int:
    """The pid of the node's routing host: its child running ``node.routing_host``."""

    def find() -> int | None:
        for child in process_tree(pid)[1:]:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                if b"node.routing_host" in f.read().split(b"\0"):
                    return child
        return None

    return until(find, 10, f"the routing host of {pid}")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


@pytest.fixture
def one_node(tmp_path):
    plan = cluster_up(str(tmp_path / "one"), nodes=1, auto_ports=True, settings=SMALL_STORE)
    yield plan
    stop_all(plan)


@pytest.fixture
def three_nodes(tmp_path):
    settings = {**SMALL_STORE, "replication": {"mode": "SYNC"}}
    plan = cluster_up(str(tmp_path / "three"), nodes=3, auto_ports=True, settings=settings)
    yield plan
    stop_all(plan)


def test_a_killed_node_takes_its_routing_host_with_it(one_node):
    (node,) = one_node.nodes
    host = routing_host_of(node.pid)
    # A session of its own, a scheduling group of its own (Linux autogroups): sharing
    # the node's, a busy host kept its heartbeats seconds late (bench.saturation --busy).
    assert os.getsid(host) == host != os.getsid(node.pid)
    os.kill(node.pid, signal.SIGKILL)
    until(lambda: not alive(host), 10, "the routing host to end with its node")


def test_a_node_whose_routing_host_dies_stops_and_says_why(one_node):
    (node,) = one_node.nodes
    os.kill(routing_host_of(node.pid), signal.SIGKILL)
    until(lambda: not is_running(node, one_node), 15, "the node to stop without its host")
    with open(log_path(one_node, node), encoding="utf-8") as f:
        assert "the routing host ended" in f.read()


def test_a_stopped_node_process_is_not_vouched_for_by_its_running_host(three_nodes):
    """SIGSTOP of the master's process alone: its routing host runs on but stops
    heartbeating once the process shows no progress, so the master is replaced."""
    plan = three_nodes
    with Admin(plan.nodes[0].grpc, timeout_s=10) as admin:
        admin.create_topic("stopped", 2)
    topic_everywhere(plan, "stopped")
    (before,) = status_of(plan.nodes[0]).broker_groups
    master = next(n for n in plan.nodes if n.id == before.master)
    host = routing_host_of(master.pid)
    os.kill(master.pid, signal.SIGSTOP)
    try:
        others = [n for n in plan.nodes if n is not master]

        def replaced():
            status = status_of(others[0])
            group = status.broker_groups[0] if status and status.broker_groups else None
            return group is not None and group.master != master.id and group

        after = until(replaced, 30, "another master")  # two leases of silence, then one
        assert alive(host)  # the host ran on: only what it vouched for changed
        assert after.epoch > before.epoch
        access = ",".join(n.grpc for n in others)
        with Producer(access, timeout_s=10) as producer:
            producer.send(Message("stopped", b"after"))
    finally:
        os.kill(master.pid, signal.SIGCONT)
    # Resumed, the old master learns it was deposed and follows the new one.
    until(
        lambda: (s := status_of(master)) and s.broker_groups[0].master == after.master,
        20,
        "the old master to follow",
    )
