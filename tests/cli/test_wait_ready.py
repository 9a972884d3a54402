"""Waiting for a cluster to be ready. ``wait_ready`` sees a slow node ready: a node whose
interpreter is contended takes seconds to answer one status (``tests/cluster/test_liveness.py``'s
GIL-hogged nodes took 2-6 s on a busy host), and a probe that gave up after a fixed 2 s never
saw such a cluster ready. ``cluster_up`` leaves nothing running when the cluster it started
never became ready (a test fixture that fails there has no teardown: its nodes ran on,
taking CPU from every test after it)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

import ferrymq.client
from ferrymq.client import FerryError
from ferrymq.launcher import cluster
from ferrymq.launcher.cluster import (
    ClusterError,
    cluster_up,
    is_running,
    load_plan,
    plan_cluster,
    save_plan,
    start_node,
    wait_ready,
)
from tests.support import silent_node
from tests.support.cluster import SMALL_STORE, stop_all

ANSWER_S = 3.0  # how long each (fake) node takes to answer ClusterStatus


def ready_status(plan) -> SimpleNamespace:
    nodes = [SimpleNamespace(id=n.id, alive=True, broker_group=n.group) for n in plan.nodes]
    groups = [
        SimpleNamespace(name=g, master=members[0], in_sync=members)
        for g in {n.group for n in plan.nodes}
        for members in [[n.id for n in plan.nodes if n.group == g]]
    ]
    return SimpleNamespace(nodes=nodes, raft_leader="127.0.0.1:1", broker_groups=groups)


class SlowAdmin:
    """Answers a probe that waits at least ``ANSWER_S``; a shorter one times out."""

    plan = None  # the plan whose status it answers (set by the test)
    probes: list[float] = []

    def __init__(self, address: str, timeout_s: float, security=None) -> None:
        self.timeout_s = timeout_s
        SlowAdmin.probes.append(timeout_s)

    def __enter__(self) -> SlowAdmin:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def cluster_status(self):
        if self.timeout_s < ANSWER_S:
            raise FerryError(4, "DEADLINE_EXCEEDED", "the node did not answer in time")
        return ready_status(self.plan)


def test_a_node_slower_than_a_short_probe_is_still_seen_ready(tmp_path, monkeypatch):
    plan = plan_cluster(str(tmp_path), 3, auto_ports=True, settings=SMALL_STORE)
    SlowAdmin.plan = plan
    SlowAdmin.probes = []
    monkeypatch.setattr(ferrymq.client, "Admin", SlowAdmin)
    monkeypatch.setattr(cluster, "is_running", lambda node, plan: True)
    wait_ready(plan, timeout_s=10)
    assert len(SlowAdmin.probes) == 3  # one answered probe per node
    assert all(probe >= ANSWER_S for probe in SlowAdmin.probes)


def test_a_cluster_that_never_becomes_ready_is_not_left_running(tmp_path, monkeypatch):
    directory = str(tmp_path / "cluster")
    plan = plan_cluster(directory, 3, auto_ports=True, settings=SMALL_STORE)
    monkeypatch.setattr(cluster, "NODE_MODULE", silent_node.__name__)
    first = start_node(plan, plan.nodes[0])  # running before: left as found
    plan = replace(plan, nodes=(first, *plan.nodes[1:]))
    save_plan(plan)
    try:
        with pytest.raises(ClusterError, match="not ready"):
            cluster_up(directory, nodes=3, timeout_s=1)
        after = load_plan(directory)
        assert [n.pid for n in after.nodes[1:]] == [0, 0]
        assert after.nodes[0].pid == first.pid and is_running(first, after)
        assert cluster.unnamed_nodes(after) == []  # the two it started are gone
    finally:
        stop_all(load_plan(directory))
