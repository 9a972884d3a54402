"""Which fault comes when: named faults take turns, families name their members in turn."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from chaos import nemesis
from chaos.history import Fault, History, MasterSnapshot
from chaos.nemesis import Nemesis, expand, kind_for
from ferrymq.launcher.cluster import ClusterPlan, NodePlan


def test_families_take_one_turn_each_and_rotate_their_members():
    faults = ["kill", "pause", "power-loss"]
    turns = [kind_for(faults, t) for t in range(9)]
    assert turns == [
        "kill-master",
        "pause",
        "power-loss-master",
        "kill-slave",
        "pause",
        "power-loss-all",
        "kill-leader",
        "pause",
        "power-loss-master",
    ]
    # 50 rounds give 50 faults of each named fault, whatever the family's size.
    counts = [kind_for(faults, t) for t in range(150)]
    assert sum(k.startswith("kill") for k in counts) == 50 == counts.count("pause")


def test_expand_names_every_member_and_refuses_unknown_faults():
    assert expand(["partition", "restart-all"]) == [
        "partition-master",
        "partition-slave",
        "partition-random",
        "partition-clients",
        "restart-all",
    ]
    with pytest.raises(ValueError, match="unknown fault 'flood'"):
        expand(["flood"])


class HeldBodies:
    """``LogCopies`` over a table of the bodies each node holds: a copy is the node's set
    as it was, and every take and read is written down in ``events``."""

    def __init__(self, held: dict[str, set[str]], events: list[tuple[str, str]]) -> None:
        self.held, self.events = held, events

    def take(self, node_id: str, data_dir: str) -> frozenset[str]:
        self.events.append(("copy", node_id))
        return frozenset(self.held[node_id])

    def read(self, node_id: str, copy: frozenset[str]) -> MasterSnapshot:
        self.events.append(("read", node_id))
        return MasterSnapshot(node_id, 1, dict.fromkeys(copy, 0))


def power_loss_cluster(monkeypatch, events: list[tuple[str, str]]) -> Nemesis:
    held = {"n1": {"a", "b", "c", "d"}, "n2": {"a", "b", "c"}, "n3": {"a"}}
    unsynced = {"n1": {"d"}, "n2": {"c"}, "n3": set()}
    nodes = [NodePlan(i, "g", True, "", "", "", "", data=i) for i in held]

    def discard(data: str) -> int:
        held[data] -= unsynced[data]
        return len(unsynced[data])

    monkeypatch.setattr(nemesis, "discard_unsynced", discard)
    plan = ClusterPlan("", "", tuple(nodes), {})
    return Nemesis(plan, History("sync-async-flush"), 0.0, logs=HeldBodies(held, events))


def test_a_power_loss_of_every_node_may_lose_what_an_in_sync_node_no_longer_holds(monkeypatch):
    """The bound the checker applies under ASYNC_FLUSH: bodies that some in-sync node lost
    with its unsynced tail (it may resume as master); a lagging slave outside the in-sync
    set, which cannot be elected, does not widen it."""
    chaos = power_loss_cluster(monkeypatch, [])
    fault = Fault("power-loss-all", ["n1", "n2", "n3"], "all", 0.0)
    chaos.cut_power_everywhere(fault, electable=list(chaos.plan.nodes[:2]))
    chaos.settle()
    assert sorted(chaos.history.lost_to_power) == ["c", "d"]
    assert fault.note.endswith("2 bodies gone from an in-sync node, 1 from every node")


def test_a_restart_of_every_node_reads_no_log_before_the_nodes_are_restarted(monkeypatch):
    """Reading a log took seconds, more as it grew: read before the restart, it counted in
    the recovery a restart-all or power-loss-all measures (4 s early in a 30-minute run,
    92 s late). The faults copy the logs; ``settle`` reads them once the cluster is back."""
    events: list[tuple[str, str]] = []
    chaos = power_loss_cluster(monkeypatch, events)
    master = chaos.plan.nodes[0]
    in_sync = SimpleNamespace(broker_groups=[SimpleNamespace(in_sync=["n1", "n2"])])
    monkeypatch.setattr(chaos, "status", lambda: in_sync)
    monkeypatch.setattr(chaos, "master_in", lambda status: master)
    monkeypatch.setattr(chaos, "wait_dead", lambda node: None)
    monkeypatch.setattr(chaos, "restart", lambda node: events.append(("restart", node.id)))
    monkeypatch.setattr(nemesis.os, "kill", lambda pid, signum: None)

    fault = chaos.restart_all(power_loss=True)
    assert [kind for kind, _ in events].count("restart") == 3
    assert "read" not in [kind for kind, _ in events]
    assert chaos.history.snapshots == [] and fault.note == ""

    chaos.settle()
    assert [kind for kind, _ in events].count("read") == 7  # the master's, 3 before, 3 after
    assert [s.node for s in chaos.history.snapshots] == ["n1"]
    assert sorted(chaos.history.lost_to_power) == ["c", "d"]
