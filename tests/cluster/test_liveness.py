"""A node busy with its own work is slow, not dead (issue 38's benchmarks: under a busy CPU
masters refused writes for their lease, and one was deposed while alive). Every node of a
3-node SYNC cluster here is busy in one of two ways: its event loop computes for 2.5 s out
of every 3 without yielding (``tests/support/stalled_loop_node.py``), longer than the two
thirds of the 3 s lease a master may go without renewing it; or a thread of its process
holds the GIL 0.1 s at a time, over and over (``tests/support/gil_hog_node.py``), as many
busy threads on a busy host do. The heartbeats, Raft and the controller run in each node's
routing host, a process of its own (``node/routing_host.py``), so no send is refused for
the lease and no master is deposed. (Before it, with them on a thread of the node's
process, the GIL-hogged cluster never became ready: Raft's own timers lapsed.)"""

from __future__ import annotations

import time

import pytest

from ferrymq.client import Admin, FerryError, Message, Producer
from ferrymq.launcher import cluster
from ferrymq.launcher.cluster import cluster_up
from tests.support import gil_hog_node, stalled_loop_node
from tests.support.cluster import SMALL_STORE, status_of, stop_all, topic_everywhere

RUN_S = 15.0
SLOW_ANSWER_S = 15.0


@pytest.fixture(params=[stalled_loop_node, gil_hog_node], ids=["stalled-loop", "gil-hog"])
def stalled(request, tmp_path, monkeypatch):
    monkeypatch.setattr(cluster, "NODE_MODULE", request.param.__name__)
    settings = {**SMALL_STORE, "replication": {"mode": "SYNC"}}
    plan = cluster_up(str(tmp_path / "cluster"), nodes=3, auto_ports=True, settings=settings)
    yield plan
    stop_all(plan)


def test_busy_nodes_keep_their_lease_and_their_master(stalled):
    plan = stalled
    with Admin(plan.nodes[0].grpc, timeout_s=SLOW_ANSWER_S) as admin:
        admin.create_topic("busy", 2)
        topic_everywhere(plan, "busy", SLOW_ANSWER_S)
    # A contended node answers slowly (each hop through its client port's relay waits for
    # the GIL too, node/client_port.py): its answers get time, its lease none.
    (before,) = status_of(plan.nodes[0], SLOW_ANSWER_S).broker_groups
    access = ",".join(n.grpc for n in plan.nodes)
    refusals, sent = [], 0
    with Producer(access, max_attempts=1, timeout_s=10) as producer:
        deadline = time.monotonic() + RUN_S
        while time.monotonic() < deadline:
            try:
                producer.send(Message("busy", b"x"))
                sent += 1
            except FerryError as error:
                refusals.append(str(error))
    (after,) = status_of(plan.nodes[0], SLOW_ANSWER_S).broker_groups
    assert sent >= 5, (sent, refusals[:5])  # slow (a hogged node: ~1 a second), not stopped
    assert not [r for r in refusals if "lease" in r], refusals[:5]
    assert (after.master, after.epoch) == (before.master, before.epoch), refusals[:5]
