"""A fetch taken with no task (``ReadService.fetch_now``, the fetch lane's): answered as
``ReadService.fetch`` answers the same read, at once or from the callbacks it waits in
(the confirming ACK's tail read, a queue's wake-up, its time running out); it ends once,
and leaves nothing waiting behind it; what is not the common case it declines, untouched,
to ``fetch``. In-process on a SYNC master (``tests/support/sync_reads.py``)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.pending_resets import PendingResets
from node.rpc_status import AccessDenied
from node.topics import TopicConfig, TopicTable
from routing.metadata import GroupConfig, Permission
from store.config import StoreConfig
from store.message_store import MessageStore
from tests.support.stores import SMALL
from tests.support.sync_reads import CALLER, Ends, Group, bodies, settle


@pytest.fixture
def store(tmp_path):
    opened = MessageStore.open(StoreConfig(str(tmp_path / "store"), **SMALL))
    yield opened
    opened.shutdown()


def nothing_waits(group: Group, ends: Ends) -> bool:
    listeners, parked = group.waiting()
    return listeners == {} and parked == {} and ends.held == set()


async def answered(ends: Ends, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not ends.answers and not ends.failures:
        assert asyncio.get_running_loop().time() < deadline, "no answer in time"
        await asyncio.sleep(0.005)


@pytest.mark.parametrize(
    "offset, fields",
    [
        (0, {}),
        (1, {"max_messages": 1}),
        (0, {"max_bytes": 1}),
        (2, {}),  # at the cap: nothing yet
        (9, {}),  # past the queue's end
        (0, {"queue_id": 1}),  # an empty queue
    ],
)
def test_what_it_answers_at_once_is_what_the_task_answers(store, offset, fields):
    async def run() -> None:
        group = Group(store)
        ends = await group.put(b"a", b"b", b"c")
        group.ack(ends[1])  # two of the three readable
        taken = Ends()
        assert group.fetch_now(taken, offset, wait_s=0, **fields)
        queue_id = fields.get("queue_id", 0)
        by_task = await group.reads.fetch(
            CALLER,
            "orders",
            "G",
            queue_id,
            offset,
            fields.get("max_messages", 0),
            fields.get("max_bytes", 0),
            [],
            0,
        )
        [outcome] = taken.answers
        assert outcome.fields() == by_task.fields()
        assert nothing_waits(group, taken)

    asyncio.run(run())


def test_a_waiting_fetch_is_answered_by_the_confirming_ack_and_leaves_nothing(store):
    async def run() -> None:
        group = Group(store)
        before = store.write_offset
        ends = Ends()
        assert group.fetch_now(ends)
        assert ends.answers == [] and len(ends.held) == 1
        [end] = await group.put(b"first")
        group.master.record_ack(group.slaves[0], end)
        assert ends.answers == []
        caps: list[int] = []

        def answer(outcome) -> None:
            ends.answers.append(outcome)
            caps.append(store.read_cap())

        ends.answer = answer
        group.master.record_ack(group.slaves[1], end)  # no loop turn from here on
        [outcome] = ends.answers
        assert caps == [before]  # from the reput, before the read cap moved
        assert (outcome.code, outcome.count, outcome.next_offset) == (pb.OK, 1, 1)
        assert bodies(outcome) == [b"first"]
        assert group.delivered == [1]
        assert nothing_waits(group, ends)
        await settle()
        assert len(ends.answers) == 1  # its wake-up, when the cap moved, found it ended

    asyncio.run(run())


def test_a_fetch_waiting_behind_the_run_is_answered_when_the_cap_moves(store):
    async def run() -> None:
        group = Group(store)
        await group.put(b"zero")
        store.dispatch_behind()  # written, not readable yet
        ends = Ends()
        assert group.fetch_now(ends)
        [end] = await group.put(b"one")
        group.ack(end)
        [outcome] = ends.answers
        assert bodies(outcome) == [b"zero", b"one"]
        assert nothing_waits(group, ends)

    asyncio.run(run())


def test_with_no_slave_to_wait_for_the_queue_wakes_it(store):
    async def run() -> None:
        group = Group(store)
        group.master.min_insync_replicas = 1
        group.master.set_counted(frozenset({"m"}))
        ends = Ends()
        assert group.fetch_now(ends)
        await group.put(b"alone")
        await answered(ends)
        [outcome] = ends.answers
        assert bodies(outcome) == [b"alone"]
        assert nothing_waits(group, ends)

    asyncio.run(run())


def test_when_its_time_is_up_it_answers_not_found_with_the_bounds(store):
    async def run() -> None:
        group = Group(store)
        ends = await group.put(b"a")
        group.ack(ends[0])
        waiting = Ends()
        assert group.fetch_now(waiting, 1, wait_s=0.05)
        assert waiting.answers == []
        await answered(waiting)
        [outcome] = waiting.answers
        assert (outcome.code, outcome.next_offset) == (pb.MESSAGE_NOT_FOUND, 1)
        assert (outcome.min_offset, outcome.max_offset) == (0, 1)
        assert nothing_waits(group, waiting)

    asyncio.run(run())


def test_a_cancelled_fetch_answers_nothing_and_leaves_nothing(store):
    async def run() -> None:
        group = Group(store)
        ends = Ends()
        assert group.fetch_now(ends)
        [read] = ends.held
        read.cancel()  # its connection ended
        assert group.waiting() == ({}, {})
        group.ack((await group.put(b"late"))[0])
        await settle()
        assert ends.answers == [] and ends.failures == []

        refused = Ends(hold=False)  # a connection that ended already
        assert group.fetch_now(refused, 1)  # past "late": it would wait
        assert refused.answers == [] and group.waiting() == ({}, {})

    asyncio.run(run())


def test_a_look_that_fails_while_it_waits_is_answered_as_a_failure_once(store, monkeypatch):
    async def run() -> None:
        group = Group(store)
        group.master.min_insync_replicas = 1
        group.master.set_counted(frozenset({"m"}))
        ends = Ends()
        assert group.fetch_now(ends)

        def broken(*args):
            raise OSError("the disk went away")

        monkeypatch.setattr(group.reads, "_get", broken)
        await group.put(b"x")
        await answered(ends)
        assert ends.answers == [] and [str(e) for e in ends.failures] == ["the disk went away"]
        assert nothing_waits(group, ends)

    asyncio.run(run())


def denied(*args):
    raise AccessDenied(True, "no SUB on orders")


@pytest.mark.parametrize(
    "case",
    [
        *("unknown topic", "no such group", "no such queue", "write-only", "too many"),
        *("bytes < 0", "a reset to tell", "refused by the ACL"),
    ],
)
def test_what_is_not_the_common_case_is_declined_untouched(store, case):
    async def run() -> None:
        group = Group(store)
        reads = group.reads
        reads.topics = TopicTable(
            [TopicConfig("orders", 2), TopicConfig("wo", 1, permission=Permission.WRITE)],
            [GroupConfig("G")],
        )
        fields = {
            "unknown topic": {"topic": "nope"},
            "no such group": {"group": "H"},
            "no such queue": {"queue_id": 2},
            "write-only": {"topic": "wo"},
            "too many": {"max_messages": 4097},
            "bytes < 0": {"max_bytes": -1},
        }.get(case, {})
        if case == "a reset to tell":
            reads.resets = PendingResets()
            reads.resets.mark("G", "orders", {0: 0})
        if case == "refused by the ACL":
            reads.permissions = SimpleNamespace(require=denied)
        ends = Ends()
        assert not group.fetch_now(ends, **fields)
        assert ends.answers == [] and ends.failures == [] and nothing_waits(group, ends)
        if case == "a reset to tell":
            assert len(reads.resets) == 1  # still there for the handler to tell

    asyncio.run(run())


def test_a_wait_that_cannot_start_raises_and_leaves_nothing_to_answer_again(store, monkeypatch):
    """The door answers what ``fetch_now`` raises (SYSTEM_ERROR): a read half registered
    would answer the same request a second time."""

    async def run() -> None:
        group = Group(store)

        def full(*args):
            raise MemoryError("no room to park")

        monkeypatch.setattr(group.reads.tail_reads, "park", full)
        ends = Ends()
        with pytest.raises(MemoryError):
            group.fetch_now(ends)
        assert nothing_waits(group, ends)
        group.ack((await group.put(b"after"))[0])
        await settle()
        assert ends.answers == [] and ends.failures == []

    asyncio.run(run())
