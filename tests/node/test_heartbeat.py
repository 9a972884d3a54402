"""A node's heartbeats: a heartbeat routing did not commit is retried within RETRY_S, not
an interval later (a CI failure: a master's lease lapsed for seconds after the Raft leader,
a slave, was killed), the lease runs from when the committed heartbeat left, ``renew_now``
does not wait for the interval, and a node routing forgot registers again."""

from __future__ import annotations

import asyncio
import itertools
import time

from node.heartbeat import RETRY_S, Heartbeat
from routing.commands import CommandResult, NodeHeartbeat
from routing.replica import RoutingUnavailable

LONG_INTERVAL_S = 30.0  # no test here may wait for an interval


class FakeRouting:
    def __init__(self, answers: list) -> None:
        self.answers = answers  # per heartbeat: a CommandResult, or an exception to raise
        self.sent_at: list[float] = []
        self.renewed: list[float] = []
        self.registered = 0

    async def submit(self, heartbeat: NodeHeartbeat, timeout_s: float) -> CommandResult:
        assert timeout_s == LONG_INTERVAL_S * 2
        self.sent_at.append(time.monotonic())
        answer = self.answers.pop(0) if self.answers else CommandResult(True)
        await asyncio.sleep(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def register(self, deadline: float) -> None:
        self.registered += 1
        if self.registered == 1:
            raise RoutingUnavailable("routing refused this node: not yet")

    def heartbeat(self) -> Heartbeat:
        return Heartbeat(
            interval_s=LONG_INTERVAL_S,
            sample=lambda: NodeHeartbeat("n1", 0, 0),
            submit=self.submit,
            on_renewed=self.renewed.append,
            register=self.register,
        )


async def until(condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def run(scenario) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_heartbeat_routing_did_not_commit_is_retried_soon_and_the_lease_runs_from_the_last():
    async def scenario():
        routing = FakeRouting(
            [
                RoutingUnavailable("leader changed", outcome_unknown=True),
                RoutingUnavailable("no leader"),
                CommandResult(False, "NOT_LEADER", "try again"),
                CommandResult(True),
            ]
        )
        heartbeat = routing.heartbeat()
        started = time.monotonic()
        task = asyncio.ensure_future(heartbeat.run())
        try:
            heartbeat.renew_now()  # the first heartbeat without waiting for the interval
            await until(lambda: routing.renewed)
            assert len(routing.sent_at) == 4
            # Three retries RETRY_S apart: the renewal came long before one interval.
            assert routing.sent_at[-1] - started < LONG_INTERVAL_S / 2
            assert all(b - a >= RETRY_S * 0.9 for a, b in itertools.pairwise(routing.sent_at))
            (renewed_from,) = routing.renewed  # from when the fourth left
            assert routing.sent_at[-2] < renewed_from <= routing.sent_at[-1]
            assert heartbeat.failures == 0
            # Committed again: the next one waits for the interval or renew_now.
            heartbeat.renew_now()
            await until(lambda: len(routing.renewed) == 2)
            assert len(routing.sent_at) == 5
        finally:
            task.cancel()

    run(scenario)


def test_a_node_routing_forgot_registers_again_and_an_unexpected_error_ends_nothing():
    async def scenario():
        routing = FakeRouting(
            [
                CommandResult(False, "UNKNOWN_NODE", "no such node"),
                ValueError("bug"),
                CommandResult(True),
            ]
        )
        heartbeat = routing.heartbeat()
        task = asyncio.ensure_future(heartbeat.run())
        try:
            heartbeat.renew_now()
            await until(lambda: routing.renewed)
            assert routing.registered == 1 and len(routing.sent_at) == 3  # a failed one too
        finally:
            task.cancel()

    run(scenario)


def test_no_heartbeat_goes_out_without_a_sample_to_vouch_for():
    """The routing host has no sample while the node's process shows no progress: the
    heartbeat is withheld (the lease lapses, the node is marked down), not sent stale."""
    routing = FakeRouting([])
    samples = [None, NodeHeartbeat("n1", 7, 0)]
    heartbeat = routing.heartbeat()
    heartbeat.sample = lambda: samples.pop(0)

    async def scenario():
        await heartbeat.beat()
        assert routing.sent_at == [] and routing.renewed == []
        assert heartbeat.times.withheld == 1 and heartbeat.failures == 0
        await heartbeat.beat()
        assert len(routing.sent_at) == 1 and len(routing.renewed) == 1

    run(scenario)
