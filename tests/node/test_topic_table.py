"""A node's view of the topics it serves (``node/topics.py``): refreshed incrementally after
every routing change, and always exactly what the routing state says it serves."""

from __future__ import annotations

import pickle
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.topics import TopicTable
from routing.commands import CreateGroup, CreateTopic, NodeHeartbeat
from routing.state import RoutingState
from tests.support.routing_commands import COMMANDS, cluster


@settings(max_examples=60, deadline=None)
@given(st.lists(COMMANDS, max_size=40), st.integers(0, 40))
def test_a_nodes_topic_table_refreshed_after_each_command_is_what_the_state_serves(
    commands, restored_at
):
    """``TopicTable.refresh`` is incremental (it reuses the configs of routes the state
    kept); its contents must still be exactly ``topics_on``, also across a snapshot load
    (every record a new object) and a table that put a record of its own."""
    state = RoutingState()
    tables = {"g1": TopicTable(), "g2": TopicTable()}
    for i, command in enumerate(commands):
        state.apply(command)
        if i == restored_at:
            state = pickle.loads(pickle.dumps(state))
        for group, table in tables.items():
            table.refresh(state, group)
            assert table.topics == state.topics_on(group)
            assert table.groups == state.groups


def test_a_topics_creation_reuses_every_other_topics_config_and_checks_only_its_route():
    state = cluster(("n1", "g1"))
    table = TopicTable()
    for name in ("a", "b"):
        assert state.apply(CreateTopic(name, 2)).ok
    assert state.apply(CreateGroup("G", 3)).ok
    table.refresh(state, "g1")
    before = dict(table.topics)
    assert state.apply(CreateTopic("c", 1)).ok
    table.refresh(state, "g1")
    assert table.topics["c"].queue_count == 1
    assert all(table.topics[name] is config for name, config in before.items())
    heartbeat_view = table.topics
    assert state.apply(NodeHeartbeat("n1", 5, 1)).ok  # replaces members only
    table.refresh(state, "g1")
    assert table.topics is heartbeat_view  # nothing walked
    # A broken route is still caught when it changes (the invariants check changed routes).
    broken = replace(state.topics["a"], queues=(("g1", 0),))
    with pytest.raises(AssertionError):
        state._assert_invariants({"topics": {}}, [("topics", "a", broken)])
