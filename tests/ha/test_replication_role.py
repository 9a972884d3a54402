"""The replication role in-process (a real store, routing as a plain state machine): the
one answer to "may this node write?", and the read cap it alone decides."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time

import pytest

from ha.options import ReplicationMode, ReplicationOptions
from ha.replicated_store import ReplicatedStore
from ha.role import ReplicationRole
from routing.commands import AlterInSync, ElectMaster, RegisterNode
from routing.state import RoutingState
from store.config import StoreConfig
from store.message import Message
from store.message_store import MessageStore
from store.results import PutStatus


class Routing:
    """What the role reads of a routing replica: its state."""

    def __init__(self) -> None:
        self.state = RoutingState()


@pytest.fixture
def store(tmp_path):
    opened = MessageStore.open(
        StoreConfig(
            data_dir=str(tmp_path / "store"),
            commitlog_segment_bytes=8 << 20,
            consume_queue_entries_per_file=1_000,
            index_slot_count=1_009,
            index_entry_count=4_000,
        )
    )
    yield opened
    opened.shutdown()


def role_of(store: MessageStore, routing: Routing, mode: ReplicationMode) -> ReplicationRole:
    return ReplicationRole(
        store,
        routing,
        node_id="m",
        broker_group="g",
        data_dir=store.config.data_dir,
        options=ReplicationOptions(mode=mode, min_insync_replicas=1),
        lease_s=3.0,
        secret="secret",
        standalone=False,
        reload_states=lambda: None,
        on_confirmed=lambda offset: None,
    )


def test_a_deposed_master_refuses_writes_as_soon_as_routing_names_another(store):
    async def run() -> None:
        routing = Routing()
        assert routing.state.apply(RegisterNode("m", "g", "127.0.0.1:1")).ok
        assert routing.state.apply(RegisterNode("s", "g", "127.0.0.1:2")).ok
        role = role_of(store, routing, ReplicationMode.ASYNC)
        replicated = ReplicatedStore(store, role)
        assert role.write_refusal() is not None  # not joined: no role taken yet
        await role.follow_routing()
        assert role.is_master and replicated.is_master and role.write_refusal() is None
        assert (await replicated.put_messages_async([Message("orders", b"a")])).ok
        end = store.write_offset
        # Routing elects another master; this node's demotion has not run yet.
        assert routing.state.apply(ElectMaster("g", "s", 1, "test", unclean=True)).ok
        assert not role.is_master and not replicated.is_master
        refused = await replicated.put_messages_async([Message("orders", b"b")])
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert store.write_offset == end  # nothing appended
        await role.close()

    asyncio.run(run())


def test_the_role_caps_reads_at_the_confirmed_offset_under_sync_only(store):
    async def run(mode: ReplicationMode) -> int | None:
        routing = Routing()
        assert routing.state.apply(RegisterNode("m", "g", "127.0.0.1:1")).ok
        role = role_of(store, routing, mode)
        await role.follow_routing()  # master with no slave: its end is confirmed at once
        result = await ReplicatedStore(store, role).put_messages_async([Message("t", b"x")])
        assert result.ok
        cap = store.confirmed_offset
        await role.close()
        return cap

    assert asyncio.run(run(ReplicationMode.ASYNC)) is None
    assert asyncio.run(run(ReplicationMode.SYNC)) == store.write_offset


class SubmittingRouting(Routing):
    """Routing that commits each command at once."""

    async def submit(self, command: object, timeout_s: float = 5.0):
        return self.state.apply(command)


def test_a_slave_reports_a_master_whose_port_refuses_it_at_once_and_a_silent_one_after_grace(
    store,
):
    """A kill -9'd master's replication port refuses the slave's dial: nothing listens, so
    the slave reports it lost at once instead of after LOST_MASTER_GRACE_S (half a second
    of every failover). A port that accepts but stays silent still gets the grace."""

    async def reported_after_two_rounds(master_port: int, dialled) -> frozenset[str]:
        routing = SubmittingRouting()
        master = RegisterNode("x", "g", "127.0.0.1:1", ha_address=f"127.0.0.1:{master_port}")
        assert routing.state.apply(master).ok
        assert routing.state.apply(RegisterNode("m", "g", "127.0.0.1:2")).ok
        assert routing.state.apply(AlterInSync("g", "x", 1, frozenset({"x", "m"}), 1)).ok
        role = role_of(store, routing, ReplicationMode.SYNC)
        await role.follow_routing()
        deadline = time.monotonic() + 5
        while not dialled(role):
            assert time.monotonic() < deadline, "the slave never dialled its master"
            await asyncio.sleep(0.01)
        await role._report_lost_master()  # the first round notes when the link went
        await role._report_lost_master()
        await role.close()
        return routing.state.broker_groups["g"].lost_by

    async def run() -> None:
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            refusing = closed.getsockname()[1]  # bound, never listening: refuses
            lost = await reported_after_two_rounds(refusing, lambda role: role.slave.refused_by)
            assert lost == {"m"}
        with socket.socket() as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen()  # the kernel accepts; nobody speaks (a paused process)
            silent.setblocking(False)
            accepted: list[socket.socket] = []

            def dialled(role) -> bool:
                with contextlib.suppress(BlockingIOError):
                    accepted.append(silent.accept()[0])
                return bool(accepted)

            lost = await reported_after_two_rounds(silent.getsockname()[1], dialled)
            assert lost == frozenset()
            accepted[0].close()

    asyncio.run(run())
