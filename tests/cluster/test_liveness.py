"""A node busy with its own work is slow, not dead (issue 38's benchmarks: under a busy CPU
masters refused writes for their lease, and one was deposed while alive). Every node of a
3-node SYNC cluster here computes for 2.5 s out of every 3 without yielding its event loop
(``tests/support/stalled_loop_node.py``): longer than the two thirds of the 3 s lease a
master may go without renewing it. The heartbeats run on the liveness loop, a thread of
their own, so no send is refused for the lease and no master is deposed."""

from __future__ import annotations

import time

import pytest

from ferrymq.client import Admin, FerryError, Message, Producer
from ferrymq.launcher import cluster
from ferrymq.launcher.cluster import cluster_up
from tests.support import stalled_loop_node
from tests.support.cluster import SMALL_STORE, status_of, stop_all, topic_everywhere

RUN_S = 15.0


@pytest.fixture
def stalled(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster, "NODE_MODULE", stalled_loop_node.__name__)
    settings = {**SMALL_STORE, "replication": {"mode": "SYNC"}}
    plan = cluster_up(str(tmp_path / "cluster"), nodes=3, auto_ports=True, settings=settings)
    yield plan
    stop_all(plan)


def test_nodes_whose_loops_stall_keep_their_lease_and_their_master(stalled):
    plan = stalled
    with Admin(plan.nodes[0].grpc, timeout_s=10) as admin:
        admin.create_topic("busy", 2)
        topic_everywhere(plan, "busy")
    (before,) = status_of(plan.nodes[0]).broker_groups
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
    (after,) = status_of(plan.nodes[0]).broker_groups
    assert sent > 20
    assert not [r for r in refusals if "lease" in r], refusals[:5]
    assert (after.master, after.epoch) == (before.master, before.epoch), refusals[:5]
