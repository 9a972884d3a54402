"""The replication role in-process (a real store, routing as a plain state machine): the
one answer to "may this node write?", and the read cap it alone decides."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time

import pytest

from ha.epochs import EpochEntry
from ha.options import ReplicationMode, ReplicationOptions
from ha.replicated_store import ReplicatedStore
from ha.role import ReplicationRole
from ha.slave import TailCutFailed
from routing.commands import AlterInSync, ElectMaster, MarkNodeDown, RegisterNode
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


def role_of(
    store: MessageStore, routing: Routing, mode: ReplicationMode, **extra
) -> ReplicationRole:
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
        **{"on_confirmed": lambda offset: None, **extra},
    )


def test_a_lapsed_lease_refuses_writes_as_back_pressure_when_the_host_is_starved(store):
    """Issue 38: a master whose lease lapsed only because its host is short of CPU (its
    routing host's wakeups come late) refuses writes as retriable back-pressure
    (SYSTEM_BUSY); one whose host is not starved, as a master that may be cut off from
    routing. Either way nothing is written."""

    async def run() -> None:
        routing = Routing()
        assert routing.state.apply(RegisterNode("m", "g", "127.0.0.1:1")).ok
        renewed_at = [time.monotonic()]
        starved = [False]
        role = role_of(
            store,
            routing,
            ReplicationMode.ASYNC,
            lease_renewed_at=lambda: renewed_at[0],
            host_starved=lambda: starved[0],
        )
        replicated = ReplicatedStore(store, role)
        await role.follow_routing()
        assert role.is_master and role.write_refusal() is None
        end = store.write_offset
        renewed_at[0] -= 2.5  # older than two thirds of the 3 s lease
        refused = await replicated.put_messages_async([Message("orders", b"cut")])
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert "could not renew its lease" in refused.error
        starved[0] = True
        refused = await replicated.put_messages_async([Message("orders", b"busy")])
        assert refused.status is PutStatus.SYSTEM_BUSY and "[OVERLOADED]" in refused.error
        assert store.write_offset == end  # nothing appended either way
        renewed_at[0] = time.monotonic()
        assert (await replicated.put_messages_async([Message("orders", b"ok")])).ok
        await role.close()

    asyncio.run(run())


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


def test_a_slave_tells_its_readers_when_its_masters_word_moves_its_read_cap(store):
    """A slave's cap moves when its master says what the in-sync set holds; the node's
    long polls hear of it as of a master's (``on_confirmed``). It was not told on: a long
    poll on a slave held beyond its cap slept until its deadline."""
    moves: list[int] = []

    async def run() -> None:
        routing = Routing()
        assert routing.state.apply(RegisterNode("m", "g", "127.0.0.1:1")).ok
        assert store.put_messages([Message("t", b"x"), Message("t", b"y")]).ok  # replicated
        role = role_of(store, routing, ReplicationMode.SYNC, on_confirmed=moves.append)
        end = store.write_offset
        try:
            role.slave.confirmed_offset = end  # what a DATA frame or a heartbeat says
            role.slave.on_confirmed()
            assert store.confirmed_offset == end
            assert moves == [end]
            role.slave.on_confirmed()  # the same word again: nothing moved, nobody told
            assert moves == [end]
        finally:
            await role.close()

    asyncio.run(run())


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


def test_a_slave_reports_its_end_when_routing_marks_its_master_down(store):
    """The controller elects the longest in-sync log by the ends the slaves report; a
    slave reports its end as soon as routing marks its master down, linked or not, and
    only once per epoch."""

    async def run() -> None:
        routing = SubmittingRouting()
        assert routing.state.apply(RegisterNode("x", "g", "127.0.0.1:1")).ok
        assert routing.state.apply(RegisterNode("m", "g", "127.0.0.1:2")).ok
        assert routing.state.apply(AlterInSync("g", "x", 1, frozenset({"x", "m"}), 1)).ok
        assert store.put_messages([Message("t", b"x" * 100)] * 3).ok
        role = role_of(store, routing, ReplicationMode.SYNC)
        await role.follow_routing()
        await role._report_master_down()
        assert routing.state.broker_groups["g"].lost_by == frozenset()  # x is alive
        heartbeats = routing.state.members["x"].heartbeats
        assert routing.state.apply(MarkNodeDown("x", heartbeats)).ok
        await role._report_master_down()
        group = routing.state.broker_groups["g"]
        assert group.lost_by == {"m"} and group.reported_end("m") == store.write_offset
        await role.close()

    asyncio.run(run())


def test_a_master_whose_in_sync_replicas_fall_behind_refuses_new_writes_as_busy(store):
    """Back-pressure, not a fence: while the in-sync set lacks what the master had
    ``max_backlog_ms`` ago, a put is refused SYSTEM_BUSY with nothing written; once the
    slave catches up, puts are taken again."""

    async def run() -> None:
        routing = Routing()
        assert routing.state.apply(RegisterNode("m", "g", "127.0.0.1:1")).ok
        assert routing.state.apply(RegisterNode("s", "g", "127.0.0.1:2")).ok
        assert routing.state.apply(AlterInSync("g", "m", 1, frozenset({"m", "s"}), 1)).ok
        role = ReplicationRole(
            store,
            routing,
            node_id="m",
            broker_group="g",
            data_dir=store.config.data_dir,
            options=ReplicationOptions(min_insync_replicas=2, max_backlog_ms=100),
            lease_s=3.0,
            secret="secret",
            standalone=False,
            reload_states=lambda: None,
            on_confirmed=lambda offset: None,
        )
        await role.follow_routing()
        link = role.master.open_link("s", 0, store.write_offset)
        replicated = ReplicatedStore(store, role)
        written = asyncio.ensure_future(replicated.put_messages_async([Message("t", b"a")]))
        await asyncio.sleep(0)
        deadline = time.monotonic() + 10
        while (refusal := role.write_refusal()) is None:
            assert time.monotonic() < deadline, "never refused while the slave lagged"
            await asyncio.sleep(0.01)
        assert refusal[0] is PutStatus.SYSTEM_BUSY and "REPLICATION_BACKLOG" in refusal[1]
        end = store.write_offset
        refused = await replicated.put_messages_async([Message("t", b"b")])
        assert refused.status is PutStatus.SYSTEM_BUSY and store.write_offset == end
        role.master.record_ack(link, end)  # the slave caught up
        assert (await written).ok
        assert role.write_refusal() is None
        await role.close()

    asyncio.run(run())


# ---- a promotion on a log whose diverged tail could not be cut ----------------------------
TIMEOUT_S = 30.0


class FailingDisk:
    """``store.truncate_to`` raises OSError while ``failing`` (after ``release``, when
    ``wait`` is set); the real cut once the disk is repaired."""

    def __init__(self, store: MessageStore, monkeypatch, *, wait: bool = False) -> None:
        self.failing = True
        self.entered, self.release = threading.Event(), threading.Event()
        if not wait:
            self.release.set()
        truncate = store.truncate_to

        def truncate_to(point: int) -> None:
            self.entered.set()
            assert self.release.wait(TIMEOUT_S)
            if self.failing:
                raise OSError(5, "Input/output error (injected)")
            truncate(point)

        monkeypatch.setattr(store, "truncate_to", truncate_to)


async def slave_with_a_tail(store: MessageStore, routing: Routing) -> ReplicationRole:
    """Node m, a slave of s in epoch 1 (t too), whose log holds 5 records of epoch 1 that
    the master (its history: epoch 2 from offset 0) never had."""
    assert routing.state.apply(RegisterNode("s", "g", "127.0.0.1:2")).ok  # master, epoch 1
    for node_id in ("m", "t"):
        assert routing.state.apply(RegisterNode(node_id, "g", "127.0.0.1:1")).ok
    in_sync = frozenset({"s", "m", "t"})
    assert routing.state.apply(AlterInSync("g", "s", 1, in_sync, 1)).ok
    assert store.put_messages([Message("t", b"x" * 100)] * 5).ok
    role = role_of(store, routing, ReplicationMode.ASYNC)
    role.epochs.append(1, 0)
    await role.follow_routing()  # a slave of s (which has no replication address here)
    return role


def begin_the_cut(role: ReplicationRole) -> asyncio.Task:
    """What the slave's link does once it has the master's history: cut to the common
    point (offset 0), on a thread. The link is the slave's task, as in ``_run``."""
    slave = role.slave
    slave._task.cancel()  # the idle loop: this link stands for it
    slave._task = asyncio.ensure_future(slave._truncate_to_common_point(0, [EpochEntry(2, 0)]))
    return slave._task


def test_a_promotion_waiting_on_a_tail_cut_that_fails_refuses_the_masters_role(
    store, monkeypatch, caplog
):
    """The cut a promotion waits on (``ReplicationSlave.stop``) failed silently: the node
    then recorded its new term and took writes at the end of a log that still held the
    tail its old master's successor never had."""
    disk = FailingDisk(store, monkeypatch, wait=True)

    async def run() -> int:
        routing = Routing()
        role = await slave_with_a_tail(store, routing)
        end = store.write_offset
        link = begin_the_cut(role)
        assert await asyncio.get_running_loop().run_in_executor(None, disk.entered.wait, TIMEOUT_S)
        assert routing.state.apply(ElectMaster("g", "m", 1, "test")).ok  # m, epoch 2
        promotion = asyncio.ensure_future(role.follow_routing())
        await asyncio.sleep(0)  # the promotion waits on the cut
        disk.release.set()
        await asyncio.wait_for(promotion, TIMEOUT_S)
        with contextlib.suppress(BaseException):
            await link
        assert not role.is_master
        refusal = role.write_refusal()
        assert refusal is not None and refusal[0] is PutStatus.SERVICE_NOT_AVAILABLE
        assert "cutting this log's tail from offset 0 failed" in refusal[1], refusal
        assert role.epochs.entries == [EpochEntry(1, 0)]  # no new term recorded
        await role.close()
        return end

    caplog.set_level(logging.WARNING)
    end = asyncio.run(run())
    assert end > 0 and store.write_offset == end  # the tail is there, nothing written on it
    failures = [r for r in caplog.records if "cutting this log's tail from 0 failed" in r.message]
    assert failures and isinstance(failures[0].exc_info[1], OSError)
    assert "not taking the master's role of g in epoch 2" in caplog.text


def test_a_refused_promotion_goes_through_once_the_cut_succeeds(store, monkeypatch):
    """With no other in-sync member to hand the group to, the node tries the cut, then
    the promotion, again: once the disk is repaired it is master, on the cut log."""
    disk = FailingDisk(store, monkeypatch)

    async def run() -> None:
        routing = Routing()
        role = await slave_with_a_tail(store, routing)
        with pytest.raises(TailCutFailed):
            await begin_the_cut(role)
        # Elected alone (an unclean election starts an in-sync set of its own): no one to
        # hand the group to.
        assert routing.state.apply(ElectMaster("g", "m", 1, "test", unclean=True)).ok
        await role.follow_routing()  # the cut is tried once more, and fails
        assert not role.is_master
        await role._step_aside()  # no one to hand over to: the cut and promotion again
        assert not role.is_master
        disk.failing = False
        role._retry_promotion_at = 0.0  # the next retry is due
        await role._step_aside()
        assert role.is_master and role.write_refusal() is None
        assert store.write_offset == 0  # cut, then promoted
        assert role.epochs.entries == [EpochEntry(2, 0)]
        await role.close()

    asyncio.run(run())


def test_a_node_that_cannot_cut_its_tail_hands_its_group_to_an_in_sync_member(store, monkeypatch):
    FailingDisk(store, monkeypatch)  # never repaired

    async def run() -> None:
        routing = SubmittingRouting()
        role = await slave_with_a_tail(store, routing)
        with pytest.raises(TailCutFailed):
            await begin_the_cut(role)
        assert routing.state.apply(ElectMaster("g", "m", 1, "test")).ok  # m, epoch 2
        await role.follow_routing()
        assert not role.is_master
        await role._step_aside()
        group = routing.state.broker_groups["g"]
        assert (group.master, group.epoch, group.in_sync) == ("t", 3, frozenset({"t"}))
        await role.follow_routing()  # a slave of t, writes refused
        assert not role.is_master and role.slave.running
        await role.close()

    asyncio.run(run())
