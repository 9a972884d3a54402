"""Routing format 2 (``routing/encoding.py``): every command and record has the fields of
its protobuf message and comes back equal from its bytes; a state comes back equal from a
snapshot; ``SetRoutingFormat`` waits for every node; a real voter writes format 1 until
the switch, format 2 after it, and reads both from its journal and snapshot."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import gzip
import pickle
import types
import typing

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.launcher.cluster import free_ports
from ferrymq.launcher.polling import until
from ferrymq.protocol.ferrymq import routing_pb2 as pb
from routing import encoding
from routing.commands import (
    CreateTopic,
    RegisterNode,
    SetRoutingFormat,
    Tracked,
)
from routing.encoding import COMMAND_TYPES, RECORD_TYPES, UnreadableRoutingData
from routing.formats import NEWEST_FORMAT, PICKLED, PROTOBUF
from routing.metadata import MessageType
from routing.replica import SNAPSHOT_KEY, RoutingReplica
from routing.state import RoutingState
from tests.support.routing_commands import COMMANDS, cluster

INT64 = st.integers(-(2**63), 2**63 - 1)


def strategy_for(hint: typing.Any) -> st.SearchStrategy:
    """Any value of the type ``hint`` that a routing dataclass field may hold."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in args if a is not type(None)]
        return st.none() | strategy_for(inner)
    if hint is bool:
        return st.booleans()
    if hint is int:
        return INT64
    if hint is str:
        return st.text(max_size=12)
    if hint is bytes:
        return st.binary(max_size=12)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return st.sampled_from(list(hint))
    if dataclasses.is_dataclass(hint):
        return records_of(hint)
    if origin is frozenset:
        return st.frozensets(strategy_for(args[0]), max_size=4)
    if origin is tuple and args[-1] is Ellipsis:
        return st.lists(strategy_for(args[0]), max_size=4).map(tuple)
    if origin is tuple:
        return st.tuples(*(strategy_for(a) for a in args))
    raise AssertionError(f"no strategy for {hint}")


def records_of(cls: type) -> st.SearchStrategy:
    hints = typing.get_type_hints(cls)
    return st.builds(cls, **{name: strategy_for(hint) for name, hint in hints.items()})


ANY_COMMAND = st.one_of([records_of(cls) for cls in COMMAND_TYPES])


def fields_of_message(message_class) -> set[str]:
    return {field.name for field in message_class.DESCRIPTOR.fields}


@pytest.mark.parametrize("cls", COMMAND_TYPES + RECORD_TYPES, ids=lambda c: c.__name__)
def test_every_dataclass_and_its_message_have_the_same_fields(cls):
    """One schema: a field added to a dataclass and not to routing.proto (or the other way)
    would be lost in format 2."""
    message_class = getattr(pb, cls.__name__)
    assert {f.name for f in dataclasses.fields(cls)} == fields_of_message(message_class)


def test_every_command_and_record_has_its_oneof_field():
    assert set(encoding.COMMAND_FIELDS) == fields_of_message(pb.Command)
    assert set(encoding.RECORD_FIELDS) == fields_of_message(pb.Record)


@settings(max_examples=300, deadline=None)
@given(ANY_COMMAND, st.binary(max_size=16))
def test_a_command_comes_back_equal_from_its_entry(command, request_id):
    submitted = Tracked(request_id, command) if request_id else command
    assert encoding.decode_entry(encoding.encode_entry(submitted)) == submitted


@settings(max_examples=100, deadline=None)
@given(st.one_of([records_of(cls) for cls in RECORD_TYPES]))
def test_a_record_comes_back_equal_from_its_message(record):
    message = encoding.to_message(record, getattr(pb, type(record).__name__)())
    assert encoding.from_message(type(record), message) == record


@settings(max_examples=60, deadline=None)
@given(st.lists(COMMANDS, max_size=40))
def test_a_state_comes_back_equal_from_its_snapshot(commands):
    state = cluster(("n1", "g1"), ("n2", "g1"), ("n3", "g2"))
    for command in commands:
        state.apply(command)
    data = encoding.encode_state(state)
    assert encoding.encode_state(state) == data  # every replica writes the same bytes
    restored = encoding.decode_state(data, RoutingState())
    assert vars(restored) == vars(state)
    assert list(restored.outcomes) == list(state.outcomes)  # oldest first, as kept


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xff",
        pb.Entry(routing_format=7).SerializeToString(),
        pb.Entry(routing_format=2).SerializeToString(),
    ],
    ids=["garbage", "unknown format", "no command"],
)
def test_an_unreadable_entry_is_refused_saying_why(data):
    with pytest.raises(UnreadableRoutingData):
        encoding.decode_entry(data)


def test_an_unknown_enum_value_is_refused_not_guessed():
    entry = pb.Entry(routing_format=PROTOBUF)
    entry.command.create_topic.name = "t"
    entry.command.create_topic.message_type = "SOMETHING_NEW"
    with pytest.raises(UnreadableRoutingData, match="SOMETHING_NEW"):
        encoding.decode_entry(entry.SerializeToString())


# ---- the switch: SetRoutingFormat ----------------------------------------------------------
def register(state: RoutingState, node_id: str, routing_format: int) -> None:
    version = "" if routing_format == PICKLED else "0.2.0"  # 0.1.0 said neither
    command = RegisterNode(
        node_id, "g1", f"{node_id}:1", software_version=version, routing_format=routing_format
    )
    assert state.apply(command).ok


def test_the_switch_waits_for_every_node_to_read_the_format():
    state = RoutingState()
    register(state, "n1", NEWEST_FORMAT)
    assert not state.awaits_finalize
    register(state, "n2", PICKLED)  # as a node of 0.1.0 registers
    assert state.awaits_finalize  # from now on, only an operator moves the format on
    refused = state.apply(SetRoutingFormat(PROTOBUF))
    assert (refused.ok, refused.reason) == (False, "NODES_NOT_UPGRADED")
    assert "n2 (0.1.0 or older)" in refused.detail and "n1" not in refused.detail
    assert state.routing_format == PICKLED
    register(state, "n2", NEWEST_FORMAT)  # n2 restarted on the new release
    assert state.awaits_finalize  # every node upgraded: still the operator's decision
    assert state.apply(SetRoutingFormat(PROTOBUF)).ok
    assert (state.routing_format, state.awaits_finalize) == (PROTOBUF, False)
    back = state.apply(SetRoutingFormat(PICKLED))
    assert (back.ok, back.reason) == (False, "FORMAT_DOWNGRADE")
    assert state.apply(SetRoutingFormat(NEWEST_FORMAT + 1)).reason == "UNKNOWN_FORMAT"


def test_a_pickled_state_of_0_1_0_loads_as_format_1():
    state = cluster(("n1", "g1"))
    fields = dict(vars(state))
    del fields["routing_format"]  # what 0.1.0 pickled
    loaded = RoutingState.__new__(RoutingState)
    loaded.__setstate__(fields)
    assert loaded.routing_format == PICKLED


# ---- a real voter across the switch --------------------------------------------------------
def test_a_voter_writes_format_1_until_the_switch_and_reads_both_after_restarts(tmp_path):
    (voter,) = (f"127.0.0.1:{port}" for port in free_ports(1))

    def open_replica() -> RoutingReplica:
        return RoutingReplica(
            self_address=voter, voters=[voter], secret="s", data_dir=str(tmp_path), lease_s=3.0
        )

    handed: list[object] = []

    def watch(replica: RoutingReplica) -> None:
        apply = replica.machine.apply

        def recording(command, **kwargs):
            handed.append(command)
            return apply(command, **kwargs)

        replica.machine.apply = recording

    async def submit(replica: RoutingReplica, *commands: object) -> None:
        for command in commands:
            assert (await replica.submit(command)).ok, command

    replica = open_replica()
    until(replica.leads_with_quorum, 20, "the lone voter to lead")
    watch(replica)
    register_new = RegisterNode("n1", "g1", "n1:1", routing_format=NEWEST_FORMAT)
    asyncio.run(submit(replica, register_new, CreateTopic("before", 1)))
    assert all(isinstance(c, Tracked) for c in handed)  # format 1: objects pysyncobj pickles
    assert isinstance(replica.machine._serialize()["state"], RoutingState)  # pickled whole
    asyncio.run(submit(replica, SetRoutingFormat(PROTOBUF), CreateTopic("after", 1)))
    assert isinstance(handed[-1], bytes)  # format 2: an entry's bytes
    assert isinstance(encoding.decode_entry(handed[-1]), Tracked)
    replica.close()

    replica = open_replica()  # the journal holds both formats
    until(lambda: {"before", "after"} <= set(replica.state.topics), 20, "the log replayed")
    assert replica.state.routing_format == PROTOBUF
    assert set(replica.machine._serialize()) == {SNAPSHOT_KEY}
    replica.sync.forceLogCompaction()
    until(lambda: (tmp_path / "raft" / "snapshot").exists(), 20, "a snapshot")
    asyncio.run(submit(replica, CreateTopic("later", 1)))
    replica.close()

    replica = open_replica()  # a format-2 snapshot, then the log after it
    until(lambda: "later" in replica.state.topics, 20, "the snapshot and log read")
    assert {"before", "after"} <= set(replica.state.topics)
    assert replica.state.routing_format == PROTOBUF
    assert replica.state.members["n1"].routing_format == NEWEST_FORMAT
    replica.close()
    with gzip.open(tmp_path / "raft" / "snapshot") as snapshot:  # pysyncobj's envelope
        assert b"routing.state" not in snapshot.read()  # no pickled RoutingState in it


def test_while_an_older_node_may_follow_the_log_commands_are_written_as_it_wrote_them(tmp_path):
    """A node of 0.1.0 registered: commands go into the log without a request id (0.1.0
    has no ``Tracked``: unpickling one stopped its Raft thread, found by the rolling
    upgrade drill), a topic type it does not know is refused before it reaches the log,
    and after finalizing the log is format 2, tracked again."""
    (voter,) = (f"127.0.0.1:{port}" for port in free_ports(1))
    replica = RoutingReplica(
        self_address=voter, voters=[voter], secret="s", data_dir=str(tmp_path), lease_s=3.0
    )
    handed: list[object] = []
    apply = replica.machine.apply

    def recording(command, **kwargs):
        handed.append(command)
        return apply(command, **kwargs)

    async def submit(command: object):
        return await replica.submit(command)

    try:
        until(replica.leads_with_quorum, 20, "the lone voter to lead")
        replica.machine.apply = recording
        old = RegisterNode("old", "g1", "old:1", routing_format=PICKLED)
        assert asyncio.run(submit(old)).ok
        assert replica.state.awaits_finalize
        assert asyncio.run(submit(CreateTopic("plain", 1))).ok
        assert handed[-1] == CreateTopic("plain", 1)  # the command alone, pickled
        assert b"Tracked" not in pickle.dumps(handed[-1])
        lite = asyncio.run(submit(CreateTopic("lite", 1, message_type=MessageType.LITE)))
        assert (lite.ok, lite.reason) == (False, "UPGRADE_NOT_FINALIZED")
        assert asyncio.run(submit(RegisterNode("old", "g1", "old:1"))).ok  # upgraded
        assert asyncio.run(submit(SetRoutingFormat(PROTOBUF))).ok
        assert asyncio.run(submit(CreateTopic("lite", 1, message_type=MessageType.LITE))).ok
        assert isinstance(encoding.decode_entry(handed[-1]), Tracked)
    finally:
        replica.close()


@dataclasses.dataclass(frozen=True)
class LaterField:
    """A record whose ``admin`` came later, with a default: its message field is ``optional``
    (UpdateUser's ``admin`` is), as routing.proto's evolution rules ask."""

    access_key: str
    admin: bool = True


def test_an_optional_field_added_later_reads_as_the_default_when_absent_not_as_zero():
    absent = pb.UpdateUser(access_key="a")
    assert encoding.from_message(LaterField, absent) == LaterField("a", True)
    written = pb.UpdateUser(access_key="a", admin=False)
    assert encoding.from_message(LaterField, written) == LaterField("a", False)
