"""The node's routing through its routing host (``node/routing_proxy.py``): a command is
readable here as soon as its outcome is, read barriers and refusals come back as a local
replica's would, committed heartbeats renew the lease, and a host that dies fails what
waited on it and tells the node."""

from __future__ import annotations

import asyncio
import secrets
import time

import pytest

from node.liveness import LivenessLoop
from node.port_holds import hold_port, port_of
from node.routing_channel import Setup
from node.routing_proxy import RoutingProxy
from routing.commands import CreateTopic, NodeHeartbeat, RegisterNode
from routing.replica import CommandTooLarge, RoutingUnavailable


async def until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


@pytest.fixture
def proxy(tmp_path):
    held = hold_port("127.0.0.1")
    address = f"127.0.0.1:{port_of(held)}"
    setup = Setup(
        node_id="n1",
        self_address=address,
        voters=[address],
        secret=secrets.token_hex(16),
        data_dir=str(tmp_path),
        lease_s=3.0,
        heartbeat_interval_s=0.2,
        unclean_election=False,
        join_timeout_s=10.0,
    )
    liveness = LivenessLoop()
    events = {"applied": [], "lost": []}
    proxy = RoutingProxy(
        setup,
        liveness,
        sample=lambda: NodeHeartbeat("n1", 0, 0),
        on_applied=lambda command, result: events["applied"].append(command),
        on_restored=lambda: None,
        on_lost=events["lost"].append,
    )
    proxy.events = events
    proxy.start()
    yield proxy
    liveness.stop()
    proxy.close()
    held.close()


def registration() -> RegisterNode:
    return RegisterNode("n1", "g1", "127.0.0.1:1", "127.0.0.1:2", "", "127.0.0.1:3", 0, 0, 3000)


def test_what_was_submitted_is_read_here_at_once_and_heartbeats_renew(proxy):
    async def scenario():
        await proxy.wait_ready(10)
        assert (await proxy.submit(registration())).ok
        result = await proxy.submit(CreateTopic("orders", 2))
        assert result.ok
        assert "orders" in proxy.state.topics  # no waiting: the Applied came first
        assert any(isinstance(c, CreateTopic) for c in proxy.events["applied"])
        await proxy.catch_up(2)
        with pytest.raises(CommandTooLarge):
            await proxy.submit(CreateTopic("x" * 300_000, 1))
        created = proxy.lease.renewed_at
        await asyncio.sleep(0.5)
        assert proxy.lease.renewed_at == created  # heartbeats begin when the node serves
        proxy.start_liveness()
        await until(lambda: proxy.lease.renewed_at > created)  # written by the host
        assert proxy.lease.renewed_at <= time.monotonic()  # one clock for both processes
        await until(lambda: proxy.is_leader() and proxy.status().commit_index > 0)
        await until(lambda: proxy.heartbeat_times.committed >= 2)

    asyncio.run(scenario())


def test_a_host_that_dies_fails_what_waited_and_tells_the_node(proxy):
    async def scenario():
        await proxy.wait_ready(10)
        proxy.process.kill()
        await until(lambda: proxy.events["lost"] != [])
        with pytest.raises(RoutingUnavailable, match="the routing host ended") as refused:
            await proxy.submit(CreateTopic("late", 1), timeout_s=0.5)
        assert not refused.value.outcome_unknown  # it was never sent

    asyncio.run(scenario())
