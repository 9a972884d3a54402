"""Tail reads (``node/tail_reads.py``): a fetch parked at its queue's end on a SYNC master
is answered by the reput of what it waits for, inside the confirming ACK's call, before
the read cap moves; what it gets is what it would have read at the new cap, and its task
then returns that answer without reading again. In-process: a real store, the master on a
hand-driven clock, the read service with the ACL off; slaves are links acknowledging with
``record_ack``."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from ferrymq.client.messages import decode_records
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.long_polling import QueueWaiters
from node.services.caller import Caller, Door
from node.services.permissions import Permissions
from node.services.reads import ReadService
from node.tail_reads import TailReads
from node.topics import TopicConfig, TopicTable
from routing.metadata import GroupConfig
from store.config import StoreConfig
from store.message import Message
from store.message_store import MessageStore
from tests.support.manual_clock import ManualClock
from tests.support.stores import SMALL
from tests.support.sync_master import master_of

CALLER = Caller(Door.REMOTING, "remoting:FERRY_FETCH", None)
WAIT_S = 30.0


@pytest.fixture
def store(tmp_path):
    opened = MessageStore.open(StoreConfig(str(tmp_path / "store"), **SMALL))
    yield opened
    opened.shutdown()


class Group:
    """A SYNC master with two slaves over ``store``, the node's long polls and tail reads
    wired as ``node/server.py`` and ``ha/role.py`` wire them, and its read service."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.master = master_of(store, ManualClock(), min_insync=3)
        self.master.activate(frozenset({"m", "s1", "s2"}))
        self.slaves = [self.master.open_link(s, 0, store.write_offset) for s in ("s1", "s2")]
        store.set_confirmed_offset(store.write_offset)  # reads capped from the start
        self.waiters = QueueWaiters(asyncio.get_running_loop(), read_cap=store.read_cap)
        store.add_dispatch_listener(self.waiters.on_dispatch)
        tail_reads = TailReads(store)
        store.set_run_reader(tail_reads.on_run)
        self.master.on_confirmed = self._confirmed
        self.delivered: list[int] = []
        self.reads = ReadService(
            store,
            TopicTable([TopicConfig("orders", queue_count=2)], [GroupConfig("G")]),
            self.waiters,
            None,
            Permissions(enabled=False),
            SimpleNamespace(delivered=lambda topic, group, n, size: self.delivered.append(n)),
            tail_reads=tail_reads,
        )

    def _confirmed(self, offset: int) -> None:  # ``ReplicationRole._confirmed``
        self.store.set_confirmed_offset(offset)
        self.waiters.readable_moved()

    def fetch(self, given: list, offset: int = 0, **fields) -> asyncio.Task:
        """A FERRY_FETCH of queue 0 waiting up to ``WAIT_S``; what is answered ahead is
        appended to ``given`` with the read cap at that moment."""
        options = {"max_messages": 0, "max_bytes": 0, "tags": []} | fields
        return asyncio.ensure_future(
            self.reads.fetch(
                CALLER,
                "orders",
                "G",
                0,
                offset,
                options["max_messages"],
                options["max_bytes"],
                options["tags"],
                WAIT_S,
                lambda outcome: given.append((outcome, self.store.read_cap())),
            )
        )

    async def put(self, *bodies: bytes, tag: str = "") -> list[int]:
        """Append ``bodies`` to queue 0 as one batch: each record's end offset."""
        messages = [Message.build("orders", body, queue_id=0, tags=tag or None) for body in bodies]
        result = await self.store.put_messages_async(messages)
        assert result.ok
        return [a.physical_offset + a.size for a in result.appended]

    def ack(self, end: int) -> None:
        for slave in self.slaves:
            self.master.record_ack(slave, end)


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def bodies(outcome) -> list[bytes]:
    return [r.body for r in decode_records(b"".join(outcome.records))]


def test_a_parked_fetch_is_answered_in_the_confirming_ack_before_the_cap_moves(store):
    async def run() -> None:
        group = Group(store)
        before = store.write_offset
        given: list = []
        task = group.fetch(given)
        await settle()  # its first look found nothing: parked
        [end] = await group.put(b"first")
        assert store.dispatched_offset == before  # the reput's, not the append's
        group.master.record_ack(group.slaves[0], end)
        assert given == []  # not confirmed yet
        group.master.record_ack(group.slaves[1], end)  # no loop turn from here on
        [(outcome, cap_then)] = given
        assert cap_then == before  # answered before the read cap moved
        assert store.read_cap() == end
        assert (outcome.code, outcome.count, outcome.next_offset) == (pb.OK, 1, 1)
        assert (outcome.min_offset, outcome.max_offset) == (0, 1)
        assert bodies(outcome) == [b"first"]
        assert await task is outcome  # its task returns that answer, read once
        assert group.delivered == [1]

    asyncio.run(run())


def test_a_tail_read_takes_only_what_the_new_cap_passes_and_its_limits_allow(store):
    async def run() -> None:
        group = Group(store)
        capped: list = []
        one: list = []
        first = group.fetch(capped)
        limited = group.fetch(one, max_messages=1)
        await settle()
        ends = await group.put(b"a", b"b", b"c")
        group.ack(ends[1])  # the slaves hold two of the three
        [(outcome, _)] = capped
        assert bodies(outcome) == [b"a", b"b"] and outcome.next_offset == 2
        [(single, _)] = one
        assert bodies(single) == [b"a"] and single.next_offset == 1
        assert single.max_offset == 3  # the queue's entries, as a read reports them
        assert await first is outcome and await limited is single

    asyncio.run(run())


def test_a_filtered_fetch_or_one_waiting_before_the_run_reads_when_the_cap_moves(store):
    """Only a fetch with no filter, waiting at the run's first offset, is answered from
    the run: one waiting for entries dispatched before it (the reput's tail, with no
    confirmation) needs the queue's, and reads when the cap moves, as does a filtered
    one."""

    async def run() -> None:
        group = Group(store)
        await group.put(b"zero")
        store.dispatch_behind()  # as the reput's tail does: written, not readable yet
        behind: list = []
        filtered: list = []
        earlier = group.fetch(behind)  # entry 0 is above the cap: it waits at 0
        tagged = group.fetch(filtered, offset=1, tags=["a"])
        await settle()
        ends = await group.put(b"one", b"two", tag="a")
        group.ack(ends[-1])
        assert behind == [] and filtered == []  # neither answered from the reput
        assert bodies(await earlier) == [b"zero", b"one", b"two"]  # read by its task
        assert bodies(await tagged) == [b"one", b"two"]

    asyncio.run(run())


def test_a_dispatch_in_the_append_leaves_a_parked_fetch_to_the_cap(store):
    """A master with no slave to wait for dispatches in its appends: nothing for a
    confirmation's reput to hand on, and the fetch is read by its task as before."""

    async def run() -> None:
        group = Group(store)
        group.master.min_insync_replicas = 1
        group.master.set_counted(frozenset({"m"}))  # the slaves left the in-sync set
        given: list = []
        task = group.fetch(given)
        await settle()
        await group.put(b"alone")
        assert bodies(await task) == [b"alone"]
        assert given == []

    asyncio.run(run())
