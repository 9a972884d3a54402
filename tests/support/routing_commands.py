"""Routing states and commands for tests: a cluster of registered nodes, and a strategy of
commands (valid and refused) for properties that replay a command log."""

from __future__ import annotations

from hypothesis import strategies as st

from routing.commands import (
    CreateGroup,
    CreateTopic,
    DeleteGroup,
    DeleteTopic,
    MarkNodeDown,
    NodeHeartbeat,
    RegisterNode,
    Tracked,
    UpdateGroup,
    UpdateTopic,
)
from routing.metadata import MessageType
from routing.state import RoutingState


def cluster(*members: tuple[str, str]) -> RoutingState:
    state = RoutingState()
    for node_id, group in members:
        assert state.apply(RegisterNode(node_id, group, f"127.0.0.1:{len(state.members) + 1}")).ok
    return state


UNTRACKED_COMMANDS = st.one_of(
    st.builds(
        RegisterNode,
        st.sampled_from(["n1", "n2", "n3", "n4"]),
        st.sampled_from(["g1", "g2"]),
        st.just("127.0.0.1:1"),
        damaged_log=st.booleans(),
    ),
    st.builds(
        NodeHeartbeat,
        st.sampled_from(["n1", "n2", "n9"]),
        st.integers(0, 99),
        st.just(1),
        damaged_log=st.booleans(),
    ),
    st.builds(MarkNodeDown, st.sampled_from(["n1", "n2"]), st.integers(0, 5)),
    st.builds(
        CreateTopic,
        st.sampled_from(["a", "b", "bad name", "%SYS%x"]),
        st.integers(0, 5),
        st.sampled_from([(), ("g1",), ("g2",), ("g9",)]),
        st.sampled_from(list(MessageType)),
    ),
    st.builds(UpdateTopic, st.sampled_from(["a", "b"]), st.integers(0, 6)),
    st.builds(DeleteTopic, st.sampled_from(["a", "b"])),
    st.builds(CreateGroup, st.sampled_from(["G", "H"]), st.integers(0, 20), st.booleans()),
    st.builds(
        UpdateGroup,
        st.sampled_from(["G", "H"]),
        st.none() | st.integers(0, 20),
        st.none() | st.booleans(),
        st.none() | st.booleans(),
    ),
    st.builds(DeleteGroup, st.sampled_from(["G", "H"])),
)
# Every command, plain or tracked (a few request ids, so that some repeat).
COMMANDS = st.one_of(
    UNTRACKED_COMMANDS,
    st.builds(Tracked, st.sampled_from([b"r1", b"r2", b"r3"]), UNTRACKED_COMMANDS),
)
