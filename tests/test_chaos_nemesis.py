"""Which fault comes when: named faults take turns, families name their members in turn."""

from __future__ import annotations

import pytest

from chaos.nemesis import expand, kind_for


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
        "partition-random",
        "partition-clients",
        "restart-all",
    ]
    with pytest.raises(ValueError, match="unknown fault 'flood'"):
        expand(["flood"])
