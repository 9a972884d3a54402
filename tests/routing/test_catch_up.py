"""The read barrier (``RoutingReplica.catch_up``) on three real replicas over loopback: a
follower that caught up holds every change committed before it asked (a topic created a
moment ago through the leader), and calls made at once share barriers instead of each
appending one."""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.launcher.cluster import free_ports
from ferrymq.launcher.polling import until
from routing.commands import CatchUp, CreateTopic, RegisterNode
from routing.replica import RoutingReplica, RoutingUnavailable


@pytest.fixture
def replicas(tmp_path):
    voters = [f"127.0.0.1:{port}" for port in free_ports(3)]
    applied: list[list[object]] = [[], [], []]
    made = [
        RoutingReplica(
            self_address=voter,
            voters=voters,
            secret="test-secret",
            data_dir=str(tmp_path / f"r{i}"),
            lease_s=3.0,
            on_applied=lambda command, result, mine=applied[i]: mine.append(command),
        )
        for i, voter in enumerate(voters)
    ]

    def agreed_leader() -> str:
        leaders = {r.status().leader for r in made}
        return leaders.pop() if len(leaders) == 1 and "" not in leaders else ""

    leader = until(agreed_leader, 20, "a leader every replica knows")
    yield made, voters.index(leader), applied
    for replica in made:
        replica.close()


def test_a_follower_that_caught_up_knows_a_topic_committed_before_it_asked(replicas):
    made, leading, _ = replicas
    leader = made[leading]
    follower = made[(leading + 1) % 3]

    async def create_then_catch_up() -> list[str]:
        assert (await leader.submit(RegisterNode("n1", "g1", "n1:1"))).ok
        missing = []
        for i in range(20):
            assert (await leader.submit(CreateTopic(f"t{i}", 1))).ok
            await follower.catch_up()
            if f"t{i}" not in follower.state.topics:
                missing.append(f"t{i}")
        return missing

    assert asyncio.run(create_then_catch_up()) == []


def test_calls_made_at_once_share_barriers(replicas):
    made, _, applied = replicas
    asker = made[0]

    async def many_at_once() -> None:
        await asyncio.gather(*(asker.catch_up() for _ in range(50)))

    asyncio.run(many_at_once())
    barriers = sum(isinstance(c, CatchUp) for c in applied[0])
    assert 1 <= barriers <= 2, barriers


def test_a_replica_that_cannot_reach_routing_says_so(replicas):
    made, leading, _ = replicas
    lonely = made[(leading + 1) % 3]
    for replica in made:
        if replica is not lonely:
            replica.close()
    until(lambda: not lonely.status().has_quorum, 10, "the lone replica to lose its quorum")
    with pytest.raises(RoutingUnavailable):
        asyncio.run(lonely.catch_up(timeout_s=0.5))
