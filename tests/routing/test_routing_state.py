"""The routing state machine on its own: deterministic rules, precise refusals, and the
same state on every replica that applies the same commands (pickled as pysyncobj does)."""

from __future__ import annotations

import pickle
import threading
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from routing.commands import (
    AlterInSync,
    CreateGroup,
    CreateTopic,
    DeleteGroup,
    DeleteTopic,
    MarkNodeDown,
    NodeHeartbeat,
    RegisterNode,
    SetRoutingFormat,
    Tracked,
    UpdateGroup,
    UpdateTopic,
)
from routing.encoding import decode_entry, decode_state, encode_entry, encode_state
from routing.formats import PICKLED, PROTOBUF
from routing.metadata import MAX_DELIVERY_ATTEMPTS_LIMIT, GroupConfig, MessageType, TopicError
from routing.state import OUTCOMES_KEPT, RoutingState
from tests.support.routing_commands import COMMANDS, cluster


def test_the_first_node_of_a_broker_group_becomes_its_master_with_epoch_one():
    state = cluster(("n1", "g1"), ("n2", "g1"), ("n4", "g2"))
    assert state.broker_groups["g1"].master == "n1" and state.broker_groups["g1"].epoch == 1
    assert state.broker_groups["g2"].master == "n4"
    assert state.broker_groups["g1"].in_sync == frozenset({"n1"})
    # Registering again (a restart) keeps the master, in a new epoch.
    assert state.apply(RegisterNode("n1", "g1", "127.0.0.1:9")).ok
    assert state.broker_groups["g1"].master == "n1" and state.broker_groups["g1"].epoch == 2
    assert state.members["n1"].grpc_address == "127.0.0.1:9"


def test_a_restarted_master_hands_over_to_the_in_sync_member_with_the_longest_log():
    """It may have lost what it had not forced to disk (power loss): like a failed master,
    it is replaced by a live in-sync member and rejoins as a slave."""
    state = cluster(("n1", "g1"), ("n2", "g1"), ("n3", "g1"))
    assert state.apply(AlterInSync("g1", "n1", 1, frozenset({"n1", "n2", "n3"}), 1)).ok
    assert state.apply(NodeHeartbeat("n2", max_offset=500, wall_ms=10_000)).ok
    assert state.apply(NodeHeartbeat("n3", max_offset=700, wall_ms=10_500)).ok
    restart = RegisterNode("n1", "g1", "127.0.0.1:1", max_offset=300, wall_ms=12_000)
    assert state.apply(replace(restart, lease_ms=3000)).ok
    group = state.broker_groups["g1"]
    assert (group.master, group.epoch) == ("n3", 2)
    assert group.in_sync == frozenset({"n2", "n3"})


def test_a_restarted_master_keeps_its_role_when_no_in_sync_member_was_heard_lately():
    """In a new epoch: its log may have lost a tail that n2 copied, and what it writes
    next must not be taken for those bytes when n2 compares epoch histories."""
    state = cluster(("n1", "g1"), ("n2", "g1"))
    assert state.apply(AlterInSync("g1", "n1", 1, frozenset({"n1", "n2"}), 1)).ok
    assert state.apply(NodeHeartbeat("n2", max_offset=500, wall_ms=10_000)).ok
    # n2 was last heard 5 s before the restart (restart-all: it is down too).
    assert state.apply(RegisterNode("n1", "g1", "x:1", wall_ms=15_000, lease_ms=3000)).ok
    group = state.broker_groups["g1"]
    assert (group.master, group.epoch, group.in_sync) == ("n1", 2, frozenset({"n1", "n2"}))


def test_a_node_cannot_move_to_another_broker_group():
    state = cluster(("n1", "g1"))
    result = state.apply(RegisterNode("n1", "g2", "127.0.0.1:1"))
    assert not result.ok and result.reason == "NODE_GROUP_MISMATCH"
    assert "g2" not in state.broker_groups


def test_topics_spread_over_every_broker_group_unless_named():
    state = cluster(("n1", "g1"), ("n4", "g2"))
    spread = state.apply(CreateTopic("orders", 4)).value
    assert spread.queues == (("g1", 4), ("g2", 4))
    one = state.apply(CreateTopic("audit", 2, broker_groups=("g2",))).value
    assert one.queues == (("g2", 2),)
    assert "audit" not in state.topics_on("g1") and state.topics_on("g2")["audit"].queue_count == 2


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        (CreateTopic("bad name", 4), "ILLEGAL_TOPIC"),
        (CreateTopic("newline\n", 4), "ILLEGAL_TOPIC"),  # "$" of a match() let it through
        (CreateTopic("", 4), "ILLEGAL_TOPIC"),
        (CreateTopic("x" * 128, 4), "ILLEGAL_TOPIC"),
        (CreateTopic("zero", 0), "ILLEGAL_TOPIC"),
        (CreateTopic("huge", 1025), "ILLEGAL_TOPIC"),
        (CreateTopic("%SYS%mine", 1), "ILLEGAL_TOPIC"),
        (CreateTopic("%DLQ%mine", 1), "ILLEGAL_TOPIC"),
        (CreateTopic("elsewhere", 1, broker_groups=("g9",)), "UNKNOWN_BROKER_GROUP"),
        (CreateTopic("twice", 1, broker_groups=("g1", "g1")), "ILLEGAL_TOPIC"),
        (CreateTopic("orders", 1), "TOPIC_EXISTS"),
        (UpdateTopic("orders", 2), "ILLEGAL_TOPIC"),  # fewer queues
        (UpdateTopic("missing", 2), "TOPIC_NOT_FOUND"),
        (UpdateTopic("orders", 4, lite_expiration_minutes=60), "ILLEGAL_TOPIC"),  # not LITE
        (CreateTopic("n", 1, lite_expiration_minutes=5), "ILLEGAL_TOPIC"),
        (
            CreateTopic("l", 1, message_type=MessageType.LITE, lite_expiration_minutes=-2),
            "ILLEGAL_TOPIC",
        ),
        (
            CreateTopic("l", 1, message_type=MessageType.LITE, lite_expiration_minutes=43201),
            "ILLEGAL_TOPIC",
        ),
        (DeleteTopic("missing"), "TOPIC_NOT_FOUND"),
        (CreateGroup("bad group", 16), "ILLEGAL_CONSUMER_GROUP"),
        (CreateGroup("newline\n", 16), "ILLEGAL_CONSUMER_GROUP"),
        (CreateGroup("g", 0), "ILLEGAL_CONSUMER_GROUP"),
        (CreateGroup("G", 16), "GROUP_EXISTS"),
        (DeleteGroup("missing"), "CONSUMER_GROUP_NOT_FOUND"),
        (UpdateGroup("missing", 3), "CONSUMER_GROUP_NOT_FOUND"),
        (UpdateGroup("bad group", 3), "ILLEGAL_CONSUMER_GROUP"),
        (UpdateGroup("G", 0), "ILLEGAL_CONSUMER_GROUP"),
        (UpdateGroup("G", MAX_DELIVERY_ATTEMPTS_LIMIT + 1), "ILLEGAL_CONSUMER_GROUP"),
        (NodeHeartbeat("ghost", 0, 0), "UNKNOWN_NODE"),
        (RegisterNode("bad id!", "g1", "127.0.0.1:1"), "ILLEGAL_NODE"),
        (RegisterNode("n9\n", "g1", "127.0.0.1:1"), "ILLEGAL_NODE"),
        (RegisterNode("n9", "g1\n", "127.0.0.1:1"), "ILLEGAL_BROKER_GROUP"),
    ],
)
def test_bad_commands_are_refused_precisely_and_change_nothing(command, reason):
    state = cluster(("n1", "g1"))
    assert state.apply(CreateTopic("orders", 4)).ok
    assert state.apply(CreateGroup("G", 16)).ok
    before = pickle.dumps((state.topics, state.groups, state.broker_groups, state.members))
    with pytest.raises(TopicError) as refused:
        state.check(command)
    assert refused.value.reason == reason
    result = state.apply(command)
    assert not result.ok and result.reason == reason
    after = pickle.dumps((state.topics, state.groups, state.broker_groups, state.members))
    assert after == before


def test_creating_a_topic_before_any_node_registered_is_refused():
    result = RoutingState().apply(CreateTopic("early", 1))
    assert not result.ok and result.reason == "NO_BROKER_GROUP"


def test_update_grows_a_topic_and_spreads_it_to_new_broker_groups():
    state = cluster(("n1", "g1"))
    state.apply(CreateTopic("orders", 2))
    state.apply(RegisterNode("n4", "g2", "127.0.0.1:4"))
    grown = state.apply(UpdateTopic("orders", 4, broker_groups=("g1", "g2"))).value
    assert grown.queues == (("g1", 4), ("g2", 4))


def test_a_lite_topics_expiration_is_kept_by_updates_that_do_not_name_it():
    """RocketMQ 5.5's lite.topic.expiration: set on create, changed by an update naming it,
    kept by one that does not (and by every UpdateTopic logged before the field existed),
    and carried to the broker group's TopicConfig."""
    state = cluster(("n1", "g1"))
    made = state.apply(
        CreateTopic("chat", 2, message_type=MessageType.LITE, lite_expiration_minutes=30)
    )
    assert made.ok and made.value.lite_expiration_minutes == 30
    assert state.apply(UpdateTopic("chat", 4)).value.lite_expiration_minutes == 30
    changed = state.apply(UpdateTopic("chat", 4, lite_expiration_minutes=43200)).value
    assert changed.lite_expiration_minutes == 43200
    assert changed.on("g1").lite_expiration_minutes == 43200
    assert state.apply(CreateTopic("plain", 1)).value.on("g1").lite_expiration_minutes == -1
    with pytest.raises(TopicError, match=r"lite\.topic\.expiration is for LITE topics only"):
        state.check(UpdateTopic("plain", 1, lite_expiration_minutes=0))
    with pytest.raises(TopicError, match=r"must be -1\.\.43200 minutes"):
        state.check(UpdateTopic("chat", 4, lite_expiration_minutes=-5))


def test_dead_letter_topics_exist_for_every_group_on_every_broker_group():
    state = cluster(("n1", "g1"), ("n4", "g2"))
    state.apply(CreateGroup("billing", 16))
    assert state.topic("%DLQ%billing").queues == (("g1", 1), ("g2", 1))
    assert state.topics_on("g2")["%DLQ%billing"].queue_count == 1
    with pytest.raises(TopicError):
        state.topic("%DLQ%nobody")


def test_retry_topics_exist_for_every_group_untyped_and_cannot_be_created():
    state = cluster(("n1", "g1"), ("n4", "g2"))
    state.apply(CreateGroup("billing", 16))
    retry = state.topic("%RETRY%billing")
    assert retry.queues == (("g1", 1), ("g2", 1)) and retry.message_type is MessageType.UNSPECIFIED
    assert state.topics_on("g2")["%RETRY%billing"].message_type is MessageType.UNSPECIFIED
    with pytest.raises(TopicError):
        state.topic("%RETRY%nobody")
    refused = state.apply(CreateTopic("%RETRY%billing", 1))
    assert not refused.ok and "reserved" in refused.detail


def test_an_update_changes_a_group_in_place_and_keeps_what_it_does_not_name():
    state = cluster(("n1", "g1"))
    assert state.apply(CreateGroup("billing", 16, lite_exclusive=True)).ok
    fewer = state.apply(UpdateGroup("billing", max_delivery_attempts=3))
    assert fewer.ok and fewer.value == GroupConfig("billing", 3, False, True)
    ordered = state.apply(UpdateGroup("billing", fifo=True, lite_exclusive=False)).value
    assert ordered == GroupConfig("billing", 3, True, False)
    assert state.groups["billing"] == ordered and state.group("billing") == ordered
    assert state.apply(UpdateGroup("billing")).value == ordered  # names nothing: as it is
    # Its retry and dead-letter topics are the group's, untouched by an update.
    assert state.topic("%DLQ%billing").queues == (("g1", 1),)


def test_updating_a_group_waits_until_the_upgrade_is_finalized():
    """A node of 0.1.0 cannot unpickle an UpdateGroup (its Raft thread would stop): while
    one may follow the log the command is refused, before it costs a Raft round (check)
    and when applied; once every node reads format 2 and it is finalized, it applies."""
    state = cluster(("n1", "g1"))
    assert state.apply(CreateGroup("billing", 16)).ok
    assert state.apply(RegisterNode("old", "g1", "127.0.0.1:9", routing_format=PICKLED)).ok
    assert state.awaits_finalize
    update = UpdateGroup("billing", max_delivery_attempts=3)
    with pytest.raises(TopicError) as refused:
        state.check(update)
    assert refused.value.reason == "UPGRADE_NOT_FINALIZED"
    assert "ferrymq cluster finalize-upgrade" in refused.value.detail
    assert state.apply(update).reason == "UPGRADE_NOT_FINALIZED"
    assert state.groups["billing"].max_delivery_attempts == 16
    # An unknown group or a bad value is still said first: the precise reason.
    assert state.apply(UpdateGroup("nobody", 3)).reason == "CONSUMER_GROUP_NOT_FOUND"
    assert state.apply(UpdateGroup("billing", 0)).reason == "ILLEGAL_CONSUMER_GROUP"
    assert state.apply(RegisterNode("old", "g1", "127.0.0.1:9")).ok  # upgraded
    assert state.apply(SetRoutingFormat(PROTOBUF)).ok
    assert state.apply(update).value.max_delivery_attempts == 3


def test_an_updated_group_is_the_same_replayed_from_the_log_or_from_a_snapshot():
    """Both routing formats: the commands pickled (format 1) or as protobuf entries (format
    2), and the state after them as a pickled or a protobuf snapshot."""
    state = cluster(("n1", "g1"))
    commands = [
        CreateGroup("billing", 16),
        UpdateGroup("billing", max_delivery_attempts=4, fifo=True),
        Tracked(b"r1", UpdateGroup("billing", lite_exclusive=True)),
        UpdateGroup("billing", fifo=False),
    ]
    for command in commands:
        assert state.apply(command).ok
    expected = GroupConfig("billing", 4, False, True)
    assert state.groups["billing"] == expected
    for read_back in (
        lambda command: pickle.loads(pickle.dumps(command)),
        lambda command: decode_entry(encode_entry(command)),
    ):
        replica = cluster(("n1", "g1"))
        for command in commands:
            assert replica.apply(read_back(command)).ok
        assert replica.groups == state.groups
        assert replica.outcomes[b"r1"].value == GroupConfig("billing", 4, True, True)
    for snapshot in (
        pickle.loads(pickle.dumps(state)),
        decode_state(encode_state(state), RoutingState()),
    ):
        assert snapshot.groups["billing"] == expected
        assert snapshot.outcomes == state.outcomes


def test_mark_down_applies_only_if_no_heartbeat_came_since():
    state = cluster(("n1", "g1"))
    seen = state.members["n1"].heartbeats
    assert state.apply(NodeHeartbeat("n1", 100, 5)).ok  # races with the decision
    assert state.apply(MarkNodeDown("n1", seen)).reason == "STALE"
    assert state.members["n1"].alive
    assert state.apply(MarkNodeDown("n1", state.members["n1"].heartbeats)).ok
    assert not state.members["n1"].alive
    assert state.apply(NodeHeartbeat("n1", 120, 6)).ok  # back
    assert state.members["n1"].alive and state.members["n1"].max_offset == 120


@settings(max_examples=60, deadline=None)
@given(st.lists(COMMANDS, max_size=40))
def test_replicas_applying_the_same_pickled_log_reach_the_same_state(commands):
    """What Raft relies on: apply is a function of the state and the command alone."""
    leader, follower = RoutingState(), RoutingState()
    for command in commands:
        expected = leader.apply(command)
        assert follower.apply(pickle.loads(pickle.dumps(command))) == expected
    restored = pickle.loads(pickle.dumps(leader))  # a snapshot, as log compaction takes
    for replica in (follower, restored):
        assert replica.topics == leader.topics and replica.groups == leader.groups
        assert replica.broker_groups == leader.broker_groups
        assert replica.members == leader.members
        assert replica.outcomes == leader.outcomes


def test_a_tracked_request_applies_once_and_answers_what_it_did_every_time():
    """A submitter that lost sight of its command may submit it again: the second copy
    changes nothing and answers the first one's result, even though a plain repeat of
    the command would now be refused."""
    state = cluster(("n1", "g1"))
    create = Tracked(b"r1", CreateTopic("t1", 2))
    first = state.apply(create)
    assert first.ok and state.outcome(b"r1") == first
    applied = state.applied
    assert state.apply(pickle.loads(pickle.dumps(create))) == first
    assert state.applied == applied and state.topics["t1"] == first.value
    assert state.apply(CreateTopic("t1", 2)).reason == "TOPIC_EXISTS"
    refused = state.apply(Tracked(b"r2", CreateTopic("t1", 2)))
    assert state.outcome(b"r2") == refused and refused.reason == "TOPIC_EXISTS"
    assert state.outcome(b"never") is None


def test_routing_remembers_the_last_tracked_requests_only():
    state = cluster(("n1", "g1"))
    for n in range(OUTCOMES_KEPT + 5):
        state.apply(Tracked(n.to_bytes(4, "big"), NodeHeartbeat("n1", 1, n)))
    assert len(state.outcomes) == OUTCOMES_KEPT
    assert state.outcome((4).to_bytes(4, "big")) is None
    assert state.outcome((5).to_bytes(4, "big")) is not None


def test_a_snapshot_written_before_tracked_requests_loads_with_none():
    state = cluster(("n1", "g1"))
    del state.outcomes  # the state an older version pickled
    restored = pickle.loads(pickle.dumps(state))
    assert restored.outcomes == {} and restored.members == state.members


def test_commands_and_members_pickled_before_the_damaged_log_flag_load_as_healthy():
    """Raft journals and snapshots written before ``damaged_log`` existed hold commands
    and members without it: they load with the default (a whole log), and apply as they
    did."""

    def as_old(record):
        object.__delattr__(record, "damaged_log")  # the pickle an older version wrote
        data = pickle.dumps(record)
        assert b"damaged_log" not in data
        return pickle.loads(data)

    register = as_old(RegisterNode("n1", "g1", "127.0.0.1:1", max_offset=5))
    heartbeat = as_old(NodeHeartbeat("n1", 7, 9))
    assert register.damaged_log is False and heartbeat.damaged_log is False
    state = RoutingState()
    assert state.apply(register).ok and state.apply(heartbeat).ok
    member = as_old(state.members["n1"])
    assert member.damaged_log is False and member.max_offset == 7


def test_apply_replaces_tables_and_never_changes_one_a_reader_holds():
    """The node's event loop iterates tables while the Raft thread applies: a table it
    took stays exactly as it was, whatever is applied after."""
    state = cluster(("n1", "g1"), ("n2", "g1"))
    members, groups, topics = state.members, state.broker_groups, state.topics
    before = (dict(members), dict(groups), dict(topics))
    assert state.apply(NodeHeartbeat("n2", 77, 1_000)).ok
    assert state.apply(RegisterNode("n3", "g2", "127.0.0.1:3")).ok
    assert state.apply(CreateTopic("orders", 4)).ok
    assert (dict(members), dict(groups), dict(topics)) == before
    assert state.members is not members and state.members["n2"].max_offset == 77
    assert "n3" in state.members and "g2" in state.broker_groups and "orders" in state.topics


def test_a_reader_iterates_while_another_thread_applies():
    """Registrations on one thread, iteration of the member table on another: with tables
    changed in place this raises "dictionary changed size during iteration"."""
    state = cluster(("n0", "g1"))
    done = threading.Event()
    errors: list[BaseException] = []

    def apply_many() -> None:
        try:
            for i in range(1, 3_000):
                assert state.apply(RegisterNode(f"n{i}", "g1", f"127.0.0.1:{i}")).ok
        finally:
            done.set()

    writer = threading.Thread(target=apply_many)
    writer.start()
    try:
        while not done.is_set():
            members = state.members
            sum(1 for m in members.values() if m.broker_group == "g1")
    except RuntimeError as error:
        errors.append(error)
    writer.join()
    assert not errors
    assert len(state.members) == 3_000
