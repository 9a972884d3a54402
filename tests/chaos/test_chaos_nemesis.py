"""Which fault comes when: named faults take turns, families name their members in turn."""

from __future__ import annotations

import pytest

from chaos import nemesis
from chaos.history import Fault, History
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


def test_a_power_loss_of_every_node_may_lose_what_an_in_sync_node_no_longer_holds(monkeypatch):
    """The bound the checker applies under ASYNC_FLUSH: bodies that some in-sync node lost
    with its unsynced tail (it may resume as master); a lagging slave outside the in-sync
    set, which cannot be elected, does not widen it."""
    held = {"n1": {"a", "b", "c", "d"}, "n2": {"a", "b", "c"}, "n3": {"a"}}
    unsynced = {"n1": {"d"}, "n2": {"c"}, "n3": set()}
    nodes = [NodePlan(i, "g", True, "", "", "", "", data=i) for i in held]

    def discard(data: str) -> int:
        held[data] -= unsynced[data]
        return len(unsynced[data])

    monkeypatch.setattr(nemesis, "discard_unsynced", discard)
    chaos = Nemesis(ClusterPlan("", "", tuple(nodes), {}), History("sync-async-flush"), 0.0)
    chaos.bodies_on = lambda node: set(held[node.id])
    fault = Fault("power-loss-all", ["n1", "n2", "n3"], "all", 0.0)
    chaos.cut_power_everywhere(fault, electable=nodes[:2])
    assert sorted(chaos.history.lost_to_power) == ["c", "d"]
    assert fault.note.endswith("2 bodies gone from an in-sync node, 1 from every node")
