"""Clusters of node processes started by ``ferrymq.launcher.cluster`` (loopback, free
ports, real data directories): the tests' store sizes, each node's view of the cluster,
waiting for a routing leader, a master or a topic on every node (with deadlines, never
sleeps), and killing, restarting and stopping nodes."""

from __future__ import annotations

import os
import signal
from dataclasses import replace

from ferrymq.client import Admin, FerryError
from ferrymq.launcher.cluster import (
    ClusterPlan,
    NodePlan,
    bootstrap_admin,
    is_running,
    kill_node,
    save_plan,
    start_node,
)
from ferrymq.launcher.polling import until

SMALL_STORE = {
    "store": {
        "commitlog_segment_bytes": 8 << 20,
        "consume_queue_entries_per_file": 10_000,
        "index_slot_count": 10_007,
        "index_entry_count": 40_000,
    }
}


def status_of(node: NodePlan, timeout_s: float = 2.0, security=None):
    """``security``: the credentials of a cluster with auth on (``bootstrap_admin``)."""
    try:
        with Admin(node.grpc, timeout_s=timeout_s, security=security) as admin:
            return admin.cluster_status()
    except FerryError:
        return None


def topics_on(node: NodePlan, timeout_s: float = 5.0) -> set[str]:
    with Admin(node.grpc, timeout_s=timeout_s) as admin:
        return {t.name for t in admin.list_topics()}


def topic_everywhere(plan: ClusterPlan, name: str, timeout_s: float = 10.0) -> None:
    """Until every running node knows topic ``name``: a node applies a committed routing
    change a heartbeat round after the node that made it, and a test that writes straight
    to one node must not race that. ``timeout_s`` bounds each node's wait and each of its
    answers (a contended node takes seconds to answer one)."""
    for node in plan.nodes:
        if is_running(node, plan):
            until(
                lambda node=node: name in topics_on_safe(node, timeout_s),
                timeout_s,
                f"{name} on {node.id}",
            )


def create_topic_everywhere(
    plan: ClusterPlan,
    name: str,
    queues: int,
    *,
    groups: tuple[str, ...] = (),
    message_type: str = "NORMAL",
) -> None:
    """Create topic ``name`` and consumer ``groups`` through the first node, waiting until
    every running node knows the topic (``topic_everywhere``) before the groups."""
    with Admin(plan.nodes[0].grpc) as admin:
        admin.create_topic(name, queues, message_type=message_type)
        topic_everywhere(plan, name)
        for group in groups:
            admin.create_group(group)


def kill(plan: ClusterPlan, node: NodePlan) -> None:
    """kill -9 of ``node``; its ports stay held for ``restart`` (``kill_node``)."""
    kill_node(plan, node)
    until(lambda: not is_running(node, plan), 10, f"{node.id} to die")


def restart(plan: ClusterPlan, node: NodePlan) -> ClusterPlan:
    started = start_node(plan, node)
    plan = replace(plan, nodes=tuple(started if n.id == node.id else n for n in plan.nodes))
    save_plan(plan)
    return plan


def leader_of(plan: ClusterPlan, among: list[NodePlan] | None = None) -> NodePlan:
    security = bootstrap_admin(plan)

    def find():
        for node in among or plan.nodes:
            status = status_of(node, security=security)
            if status is not None and status.raft_leader:
                for candidate in among or plan.nodes:
                    if candidate.raft == status.raft_leader:
                        return candidate
        return None

    return until(find, 10, "a routing leader")


def stop_all(plan: ClusterPlan) -> None:
    for node in plan.nodes:
        if is_running(node, plan):
            os.kill(node.pid, signal.SIGKILL)


def topics_on_safe(node: NodePlan, timeout_s: float = 5.0) -> set[str]:
    try:
        return topics_on(node, timeout_s)
    except FerryError:
        return set()


def node_by_id(plan: ClusterPlan, node_id: str) -> NodePlan:
    return next(n for n in plan.nodes if n.id == node_id)


def master_of(plan: ClusterPlan, among: list[NodePlan] | None = None) -> NodePlan:
    security = bootstrap_admin(plan)

    def find():
        for node in among or plan.nodes:
            status = status_of(node, security=security)
            if status is not None:
                (group,) = status.broker_groups
                if group.master and group.master in {n.id for n in among or plan.nodes}:
                    return node_by_id(plan, group.master)
        return None

    return until(find, 30, "a master")


class ClientCluster:
    """A 3-node cluster as a client module uses it (``client_cluster``): the official
    clients get every node (``endpoints``, ``namesrv``), the test's own setup and checks
    go to the master (``address``, ``remoting``), as ``module_node`` had them. No fault
    moves the master in such a module: it is found once."""

    def __init__(self, plan: ClusterPlan) -> None:
        self.plan = plan
        self.master = master_of(plan)

    @property
    def address(self) -> str:
        return self.master.grpc

    @property
    def remoting(self) -> str:
        return self.master.remoting

    @property
    def slave(self) -> NodePlan:
        return next(node for node in self.plan.nodes if node.id != self.master.id)

    @property
    def endpoints(self) -> str:
        return ";".join(node.grpc for node in self.plan.nodes)

    @property
    def namesrv(self) -> str:
        """Every node's remoting address, as a Java 4.x ``namesrvAddr`` names them."""
        return ";".join(self.namesrv_list)

    @property
    def namesrv_list(self) -> list[str]:
        """The same as a list (the Go v2 client and ali-ons take one)."""
        return [node.remoting for node in self.plan.nodes]


# The long poll the clusters of the official clients' tests tell push consumers: a push
# consumer's stop waits for its long polls (20 s by default, Apache's too).
CLIENT_LONG_POLLING_S = 5


def client_cluster(directory: str, settings: dict | None = None) -> ClientCluster:
    """Three nodes (one broker group, three voters) with the tests' store sizes and
    ``settings`` (``{"messages": {...}}``), ready, with a master."""
    from ferrymq.launcher.cluster import cluster_up

    settings = settings or {}
    messages = {"long_polling_s": CLIENT_LONG_POLLING_S, **settings.get("messages", {})}
    merged = {**SMALL_STORE, **settings, "messages": messages}
    return ClientCluster(cluster_up(directory, nodes=3, auto_ports=True, settings=merged))
