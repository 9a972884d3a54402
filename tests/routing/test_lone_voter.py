"""A lone voter (a standalone node's routing) commits a write without waiting a tick
period: pysyncobj appends a submitted command in one tick and commits it in the next, and
between the two its thread waits for a peer's message that a lone voter never gets
(``autoTickPeriod``, 50 ms: every CreateTopic of a standalone node took that long). The
test ticks the Raft node itself and records what each tick's poller was told to wait, so
nothing here depends on timing."""

from __future__ import annotations

import asyncio
import threading

import pytest
from pysyncobj import SyncObjConf, SyncObjConsumer, replicated

from ferrymq.launcher.cluster import free_ports
from ferrymq.launcher.polling import until
from routing.commands import CreateTopic
from routing.raft_transport import BoundedTcpTransport
from routing.replica import RoutingReplica, RoutingUnavailable, _RaftNode

IDLE_WAIT_S = 5.0  # what the test asks each tick to wait: a tick that waits it is seen


class Counter(SyncObjConsumer):
    def __init__(self) -> None:
        super().__init__()
        self.value = 0

    @replicated
    def add(self, amount: int) -> int:
        self.value += amount
        return self.value


def lone_voter() -> tuple[_RaftNode, Counter, list[float]]:
    """A lone voter ticked by the caller, and the list of its poller's waits."""
    (address,) = (f"127.0.0.1:{port}" for port in free_ports(1))
    conf = SyncObjConf(
        autoTick=False,
        password="test-secret",
        raftMinTimeout=0.07,
        raftMaxTimeout=0.1,
        appendEntriesPeriod=0.02,
        dynamicMembershipChange=False,
    )
    counter = Counter()
    node = _RaftNode(
        address, [], conf, consumers=[counter], transportClass=BoundedTcpTransport, lone=True
    )
    waits: list[float] = []
    poll = node._poller.poll

    def recorded(time_to_wait: float) -> None:
        waits.append(time_to_wait)
        poll(time_to_wait)

    node._poller.poll = recorded
    return node, counter, waits


def test_a_lone_voter_commits_a_write_without_waiting_a_tick_period():
    node, counter, waits = lone_voter()
    try:
        until(lambda: node.doTick(0.01) or node.isReady(), 20, "the lone voter to be ready")
        applied = threading.Event()
        counter.add(5, callback=lambda result, error: applied.set())
        waits.clear()
        ticks = 0
        while not applied.is_set():
            assert ticks < 2, waits  # appended in one tick, committed in the next
            node.doTick(IDLE_WAIT_S)
            ticks += 1
        assert counter.value == 5
        assert waits == [0.0] * ticks  # neither tick waited for a peer
        # Idle again, a tick waits what it is given (no busy ticking).
        for _ in range(3):
            node.doTick(0.01)
        assert waits[-1] == 0.01
    finally:
        node.destroy()


def test_only_a_replica_that_is_its_own_only_voter_is_lone(tmp_path):
    ports = free_ports(3)
    voters = [f"127.0.0.1:{port}" for port in ports]
    alone = RoutingReplica(
        self_address=voters[0],
        voters=voters[:1],
        secret="s",
        data_dir=str(tmp_path / "a"),
        lease_s=3.0,
    )
    one_of_three = RoutingReplica(
        self_address=voters[1], voters=voters, secret="s", data_dir=str(tmp_path / "b"), lease_s=3.0
    )
    # A read-only replica of a lone voter follows it: the voter's messages wake it.
    reader = RoutingReplica(
        self_address=None, voters=voters[:1], secret="s", data_dir=str(tmp_path / "c"), lease_s=3.0
    )
    try:
        assert alone.sync._lone
        assert not one_of_three.sync._lone
        assert not reader.sync._lone
    finally:
        for replica in (alone, one_of_three, reader):
            replica.close()


def test_a_submit_after_close_began_is_routing_unavailable(tmp_path):
    """A routing host that stops closes its replica while its heartbeat loop may still
    submit: pysyncobj's destroyed object failed each with an ``AttributeError``, logged
    with its traceback every 100 ms for as long as the destroy took (the chaos suite counts
    exceptions in node logs)."""
    (port,) = free_ports(1)
    address = f"127.0.0.1:{port}"
    replica = RoutingReplica(
        self_address=address, voters=[address], secret="s", data_dir=str(tmp_path), lease_s=3.0
    )

    async def submit_after_close() -> None:
        await replica.wait_ready(20)
        # Committed (and refused by the state: no broker group here), through pysyncobj.
        assert (await replica.submit(CreateTopic("before", 1), 5)).reason == "NO_BROKER_GROUP"
        replica.close()
        with pytest.raises(RoutingUnavailable, match="closed"):
            await replica.submit(CreateTopic("after", 1), 5)

    asyncio.run(submit_after_close())
