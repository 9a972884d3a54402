"""A routing voter restarted into a healthy group rejoins without an election: three real
replicas over loopback, the leader committing all along; a follower is closed and
started again on its own journal, again and again, and the leader and its term stay
what they were.

Why the follower picked is the most exposed one: pysyncobj connects two voters from the
one whose address sorts higher, so a restarted voter whose address sorts lowest hears
nobody until each other voter's next connection retry (``connectionRetryTime``, 0.5 s),
and its first election timeout (0.4-1.4 s) often fell before the leader's first
heartbeat reached it. It then called an election at a higher term, which deposed the
leader (it could not win: it had missed entries). Rolling restarts and upgrades moved
routing's leader this way (the upgrade drill saw FinalizeUpgrade and a failover answered
UNAVAILABLE right after a node's restart)."""

from __future__ import annotations

import asyncio
import random
from unittest import mock

from ferrymq.launcher.polling import until
from routing.commands import RegisterNode
from routing.replica import RoutingReplica
from tests.support.addresses import free_address

RESTARTS = 8


def start_replica(
    address: str, voters: list[str], data_dir: str, *, shortest_first_timeout: bool = False
) -> RoutingReplica:
    """``shortest_first_timeout``: the replica draws its first election timeout at the
    bottom of pysyncobj's range (0.4 s), a draw it makes at random anyway, and the one
    that leaves a leader the least time to reach it."""
    if shortest_first_timeout:
        with mock.patch.object(random, "random", return_value=0.0):
            return start_replica(address, voters, data_dir)
    return RoutingReplica(
        self_address=address,
        voters=voters,
        secret="test-secret",
        data_dir=data_dir,
        lease_s=3.0,
    )


def test_a_restarted_follower_rejoins_without_deposing_the_leader(tmp_path):
    voters = [free_address() for _ in range(3)]
    directories = {voter: str(tmp_path / f"r{i}") for i, voter in enumerate(voters)}
    replicas = {voter: start_replica(voter, voters, directories[voter]) for voter in voters}
    lowest, highest = min(voters), max(voters)
    try:

        def agreed_leader() -> str:
            leaders = {r.status().leader for r in replicas.values()}
            return leaders.pop() if len(leaders) == 1 and "" not in leaders else ""

        until(agreed_leader, 20, "a leader every replica knows")

        def highest_leads() -> bool:
            if agreed_leader() == highest:
                return True
            leader = agreed_leader()
            if leader:
                replicas[leader].hand_leadership_to(highest)  # refused while it lags
            return False

        until(highest_leads, 20, f"{highest} leading")
        leader = replicas[highest]
        term = leader.status().term
        for restart in range(RESTARTS):
            # Entries the restarted voter misses while it is down, as heartbeats commit.
            result = asyncio.run(leader.submit(RegisterNode(f"n{restart}", "g", "n:1")))
            assert result.ok
            replicas[lowest].close()
            result = asyncio.run(leader.submit(RegisterNode(f"m{restart}", "g", "m:1")))
            assert result.ok
            replicas[lowest] = start_replica(
                lowest, voters, directories[lowest], shortest_first_timeout=True
            )
            missed = f"m{restart}"
            until(
                lambda: missed in replicas[lowest].state.members,  # noqa: B023 (used at once)
                20,
                f"the restarted voter caught up (restart {restart})",
            )
            statuses = [r.status() for r in replicas.values()]
            assert {(s.leader, s.term) for s in statuses} == {(highest, term)}, (
                f"restart {restart}: routing's leader or term moved: "
                f"{[(s.self_address, s.leader, s.term) for s in statuses]}"
            )
    finally:
        for replica in replicas.values():
            replica.close()
