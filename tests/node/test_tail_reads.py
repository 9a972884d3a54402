"""Tail reads (``node/tail_reads.py``): a fetch parked at its queue's end on a SYNC master
is answered by the reput of what it waits for, inside the confirming ACK's call, before
the read cap moves; what it gets is what it would have read at the new cap, and its task
then returns that answer without reading again. In-process: a real store, the master on a
hand-driven clock, the read service with the ACL off; slaves are links acknowledging with
``record_ack``."""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from store.config import StoreConfig
from store.message_store import MessageStore
from tests.support.stores import SMALL
from tests.support.sync_reads import Group, bodies, settle


@pytest.fixture
def store(tmp_path):
    opened = MessageStore.open(StoreConfig(str(tmp_path / "store"), **SMALL))
    yield opened
    opened.shutdown()


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
