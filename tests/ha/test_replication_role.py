"""The replication role in-process (a real store, routing as a plain state machine): the
one answer to "may this node write?", and the read cap it alone decides."""

from __future__ import annotations

import asyncio

import pytest

from ha.options import ReplicationMode, ReplicationOptions
from ha.replicated_store import ReplicatedStore
from ha.role import ReplicationRole
from routing.commands import ElectMaster, RegisterNode
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
