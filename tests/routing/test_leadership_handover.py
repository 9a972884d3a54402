"""Routing leadership handed to another voter, on three real replicas over loopback:
``RoutingReplica.hand_leadership_to`` runs pysyncobj's transfer on its own thread (its
connections are that thread's alone), and the chosen voter leads within an election's
time, while the replicas keep committing. A command that met a leader change unapplied is
submitted again; one whose outcome the change hid is found out, and submitted again only
when it was not applied."""

from __future__ import annotations

import asyncio
import time

import pytest
from pysyncobj import FAIL_REASON

from ferrymq.launcher.polling import until
from routing.commands import CatchUp, RegisterNode, Tracked
from routing.replica import RoutingReplica, RoutingUnavailable
from tests.support.addresses import free_address


def test_leadership_moves_to_the_voter_it_was_handed_to(tmp_path):
    voters = [free_address() for _ in range(3)]
    replicas = [
        RoutingReplica(
            self_address=voter,
            voters=voters,
            secret="test-secret",
            data_dir=str(tmp_path / f"r{i}"),
            lease_s=3.0,
        )
        for i, voter in enumerate(voters)
    ]
    try:

        def agreed_leader() -> str:
            leaders = {r.status().leader for r in replicas}
            return leaders.pop() if len(leaders) == 1 and "" not in leaders else ""

        leader = until(agreed_leader, 20, "a leader every replica knows")
        leading = replicas[voters.index(leader)]
        target = next(v for v in voters if v != leader)

        def moved() -> bool:
            if agreed_leader() == target:
                return True
            leading.hand_leadership_to(target)  # refused while target lags: ask again
            time.sleep(0.1)
            return agreed_leader() == target

        until(moved, 10, f"{target} leading")
        new_leader = replicas[voters.index(target)]
        result = asyncio.run(new_leader.submit(RegisterNode("n1", "g1", "n1:1")))
        assert result.ok
        until(lambda: all("n1" in r.state.members for r in replicas), 5, "n1 everywhere")
    finally:
        for replica in replicas:
            replica.close()


def lone_voter(tmp_path) -> RoutingReplica:
    address = free_address()
    replica = RoutingReplica(
        self_address=address,
        voters=[address],
        secret="test-secret",
        data_dir=str(tmp_path),
        lease_s=3.0,
    )
    until(lambda: replica.status().leader == address, 10, "the lone voter leading")
    return replica


def failing_first(replica: RoutingReplica, error: int) -> list[object]:
    """Make the replica's next apply fail with pysyncobj's ``error``, as a leader change
    does; later applies go through. Returns the list of commands applied."""
    real_apply = replica.machine.apply
    calls: list[object] = []

    def apply(command, callback):
        calls.append(command)
        if len(calls) == 1:
            callback(None, error)
            return None
        return real_apply(command, callback=callback)

    replica.machine.apply = apply
    return calls


def test_a_command_a_leader_change_refused_unapplied_is_submitted_again(tmp_path):
    """A new leader discarded the entry (or no leader was known for a moment, as in a
    handover): the command was not applied, so ``submit`` tries it again and it commits
    (a benchmark's topic creation failed on exactly this after a handover)."""
    replica = lone_voter(tmp_path)
    try:
        for refusal in (FAIL_REASON.DISCARDED, FAIL_REASON.MISSING_LEADER):
            calls = failing_first(replica, refusal)
            result = asyncio.run(replica.submit(RegisterNode(f"n{refusal}", "g1", "n:1")))
            assert result.ok and len(calls) == 2
    finally:
        replica.close()


def test_a_command_refused_through_an_election_is_submitted_until_a_leader_takes_it(tmp_path):
    """No leader takes commands for 1.5 s, as in an election after a lost leader on a busy
    host: ``submit`` keeps trying and the command commits once one does (a test's
    CreateGroup failed on CI after a one-second retry window)."""
    replica = lone_voter(tmp_path)
    real_apply = replica.machine.apply
    election_ends = time.monotonic() + 1.5
    refused: list[object] = []

    def apply(command, callback):
        if time.monotonic() < election_ends:
            refused.append(command)
            callback(None, FAIL_REASON.NOT_LEADER)
            return None
        return real_apply(command, callback=callback)

    replica.machine.apply = apply
    try:
        result = asyncio.run(replica.submit(RegisterNode("n1", "g1", "n1:1")))
        assert result.ok and result.value.node_id == "n1"
        assert len(refused) > 1
    finally:
        replica.close()


def hiding_the_first_outcome(replica: RoutingReplica, *, applied: bool) -> list[object]:
    """Make the replica's next apply end as a leader change ends it, LEADER_CHANGED
    whether or not the entry committed: committed (and applied) when ``applied``. Later
    applies go through. Returns the list of commands applied."""
    real_apply = replica.machine.apply
    calls: list[object] = []

    def apply(command, callback):
        calls.append(command)
        if len(calls) == 1:
            if applied:
                return real_apply(
                    command, callback=lambda _, __: callback(None, FAIL_REASON.LEADER_CHANGED)
                )
            callback(None, FAIL_REASON.LEADER_CHANGED)
            return None
        return real_apply(command, callback=callback)

    replica.machine.apply = apply
    return calls


def test_a_command_a_leader_change_hid_but_applied_answers_its_result_once(tmp_path):
    """The leader changed after the entry committed: ``submit`` learns from the state, after
    a read barrier, that it was applied and what it did, and does not submit it again
    (the topic creation of a benchmark's first seconds failed with "outcome unknown" on
    exactly this: a master that led routing handed leadership over)."""
    replica = lone_voter(tmp_path)
    try:
        calls = hiding_the_first_outcome(replica, applied=True)
        result = asyncio.run(replica.submit(RegisterNode("n1", "g1", "n1:1")))
        assert result.ok and result.value.node_id == "n1"
        assert [type(c) for c in calls] == [Tracked, CatchUp]
    finally:
        replica.close()


def test_a_command_a_leader_change_hid_and_did_not_apply_is_submitted_again(tmp_path):
    replica = lone_voter(tmp_path)
    try:
        calls = hiding_the_first_outcome(replica, applied=False)
        result = asyncio.run(replica.submit(RegisterNode("n1", "g1", "n1:1")))
        assert result.ok and result.value.node_id == "n1"
        assert [type(c) for c in calls] == [Tracked, CatchUp, Tracked]
        assert calls[0] == calls[2]  # the same request: applied once even if both commit
    finally:
        replica.close()


def test_an_outcome_still_unknown_at_the_timeout_is_reported_unknown(tmp_path):
    """No read barrier can commit (the replica lost its quorum): the outcome stays
    unknown, and the caller hears so."""
    replica = lone_voter(tmp_path)
    try:
        calls = hiding_the_first_outcome(replica, applied=False)
        replica._has_quorum = lambda: len(calls) == 0  # type: ignore[method-assign]
        with pytest.raises(RoutingUnavailable) as raised:
            asyncio.run(replica.submit(RegisterNode("n1", "g1", "n1:1"), timeout_s=0.5))
        assert raised.value.outcome_unknown and [type(c) for c in calls] == [Tracked]
    finally:
        replica.close()


def test_listeners_hear_the_command_a_request_carries_and_never_a_repeat(tmp_path):
    address = free_address()
    heard: list[object] = []
    replica = RoutingReplica(
        self_address=address,
        voters=[address],
        secret="test-secret",
        data_dir=str(tmp_path),
        lease_s=3.0,
        on_applied=lambda command, result: heard.append(command),
    )
    try:
        until(lambda: replica.status().leader == address, 10, "the lone voter leading")
        calls = hiding_the_first_outcome(replica, applied=True)
        asyncio.run(replica.submit(RegisterNode("n1", "g1", "n1:1")))
        repeat = calls[0]
        asyncio.run(replica._submit_once(repeat, 5.0))  # the same request, committed again
        assert [type(c) for c in heard] == [RegisterNode, CatchUp]
    finally:
        replica.close()
