"""bench.peers' Java client columns (``bench/java/PeerWorkloads*.java``): each of the five
workloads runs through the official Java 4.x client against a real node on its remoting
door and through the 5.x client on its gRPC door, and answers what
``bench.peers.workloads.measure`` expects of it."""

from __future__ import annotations

import pytest

from bench.peers.java_client import JavaClientWorkloads, JavaGrpcClientWorkloads
from bench.peers.run import PEERS
from bench.peers.workloads import BATCH
from ferrymq.client import Admin
from tests.support import clients

pytestmark = pytest.mark.timeout(clients.INSTALL_TIMEOUT_S + 300)


class OneNode:
    """The Java workloads against one node, its topics made through the admin API."""

    def __init__(self, node, home: str) -> None:
        self.node = node
        self.client_home = home
        self.groups: list[str] = []

    def create_topic(self, topic: str, queues: int) -> None:
        with Admin(self.node.address) as admin:
            admin.create_topic(topic, queues)

    def delete_topic(self, topic: str) -> None:
        with Admin(self.node.address) as admin:
            admin.delete_topic(topic)

    def create_group(self, group: str) -> None:
        with Admin(self.node.address) as admin:
            admin.create_group(group)
        self.groups.append(group)

    def delete_group(self, group: str) -> None:
        with Admin(self.node.address) as admin:
            admin.delete_group(group)


class Remoting(JavaClientWorkloads, OneNode):
    def __init__(self, node, home: str) -> None:
        super().__init__(node, home)
        self.java_address = node.remoting


class Grpc(JavaGrpcClientWorkloads, OneNode):
    def __init__(self, node, home: str) -> None:
        super().__init__(node, home)
        self.java_address = node.address


@pytest.mark.parametrize("door", [Remoting, Grpc], ids=["java4-remoting", "java5-grpc"])
def test_each_workload_runs_through_the_java_client(door, node, tmp_path):
    peer = door(node, str(tmp_path))
    took = peer.sequential_send(20)
    assert len(took) == 20 and all(0 < t < 30 for t in took)
    assert 0 < peer.inflight_send(300, 64) < 60
    assert 0 < peer.batched_send(BATCH * 3 + 5) < 60  # a last batch shorter than BATCH
    took = peer.end_to_end(10)
    assert len(took) == 10 and all(0 < t < 30 for t in took)
    assert 0 < peer.consume(500) < 60
    assert len(peer.groups) == 5  # a group of its own each, deleted after


def test_a_refused_workload_says_why(node, tmp_path):
    class Unknown(Remoting):
        def create_topic(self, topic: str, queues: int) -> None:
            """Not created: every send is refused for a topic the node does not have."""

        def delete_topic(self, topic: str) -> None:
            pass

    with pytest.raises(RuntimeError, match="Java client sequential_send"):
        Unknown(node, str(tmp_path)).sequential_send(5)


def test_the_java_columns_are_peers_of_the_run():
    names = {spec.name: spec for spec in PEERS}
    for generation in ("java4", "java5"):
        assert names[f"rocketmq-{generation}"].parts == ("workloads",)
        assert names[f"ferrymq-{generation}"].parts == ("workloads",)
