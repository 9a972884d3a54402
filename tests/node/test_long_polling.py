"""The one long-poll loop (``node.long_polling.long_poll``), its wait budget, and which waiters
a dispatch or a move of the read cap wakes (``QueueWaiters``)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import SimpleNamespace

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.lite_names import lmq_name
from node.long_polling import (
    DEADLINE_MARGIN_S,
    LONG_POLLING_MAX_S,
    QueueWaiters,
    long_poll,
    poll_budget_s,
)
from node.services.lite import LiteService
from store.dispatch_request import DispatchBatch


def deadline_in(seconds: float | None) -> SimpleNamespace:
    return SimpleNamespace(time_remaining=lambda: seconds)


def test_the_budget_is_the_request_bounded_by_the_maximum_and_the_deadline():
    assert poll_budget_s(5.0, None) == 5.0
    assert poll_budget_s(-1.0, None) == 0.0
    assert poll_budget_s(LONG_POLLING_MAX_S + 1, None) == LONG_POLLING_MAX_S
    assert poll_budget_s(5.0, deadline_in(None)) == 5.0
    assert poll_budget_s(5.0, deadline_in(2.0)) == 2.0 - DEADLINE_MARGIN_S
    assert poll_budget_s(5.0, deadline_in(0.1)) == 0.0


def test_an_answer_ends_the_poll_and_every_wake_up_tries_again():
    attempts, waits = [], []

    async def attempt():
        attempts.append(1)
        return "found" if len(attempts) == 3 else None

    async def wait(remaining_s: float) -> None:
        waits.append(remaining_s)  # woken at once, as by a new message

    assert asyncio.run(long_poll(attempt, wait, 30.0)) == "found"
    assert len(attempts) == 3 and len(waits) == 2
    assert all(0 < w <= 30.0 for w in waits)


def test_no_budget_tries_once_and_answers_none():
    attempts = []

    async def attempt():
        attempts.append(1)

    async def wait(remaining_s: float) -> None:
        raise AssertionError("must not wait without a budget")

    assert asyncio.run(long_poll(attempt, wait, 0.0)) is None
    assert attempts == [1]


def test_the_waits_shrink_to_the_deadline():
    waits = []

    async def attempt():
        return None

    async def wait(remaining_s: float) -> None:
        waits.append(remaining_s)
        with contextlib.suppress(TimeoutError):  # nothing arrives: the wait times out
            await asyncio.wait_for(asyncio.Event().wait(), remaining_s)

    assert asyncio.run(long_poll(attempt, wait, 0.05)) is None
    assert waits and waits[0] <= 0.05


# ---- QueueWaiters: which long polls wake, and when --------------------------------------
class Cap:
    """A read cap the test moves (None: no cap)."""

    def __init__(self, offset: int | None) -> None:
        self.offset = offset

    def __call__(self) -> int | None:
        return self.offset


def batch(queues: list[tuple[str, int]], end: int) -> DispatchBatch:
    return DispatchBatch(queues, [], end)


async def parked(waiters: QueueWaiters, topic: str, queue_id: int) -> asyncio.Task:
    """A long poll's wait, registered (one turn of the loop) and not answered yet."""
    task = asyncio.ensure_future(waiters.wait(topic, queue_id, 30.0))
    await asyncio.sleep(0)
    assert not task.done()
    return task


async def one_turn() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def cap_moved_to(waiters: QueueWaiters, cap: Cap, offset: int) -> None:
    """The read cap moves to ``offset``, the waiters are told, and the woken run."""
    cap.offset = offset
    waiters.readable_moved()
    await one_turn()


def test_without_a_read_cap_a_dispatch_wakes_its_queues_waiters_at_once():
    async def run():
        waiters = QueueWaiters(asyncio.get_running_loop(), read_cap=Cap(None))
        mine, other = await parked(waiters, "t", 0), await parked(waiters, "t", 1)
        waiters.on_dispatch(batch([("t", 0)], 100))
        await one_turn()
        assert mine.done() and not other.done()
        other.cancel()

    asyncio.run(run())


def test_under_a_read_cap_a_dispatch_past_it_wakes_nobody_until_the_cap_passes_it():
    """A read woken before its records are readable finds nothing and waits again: under
    SYNC replication that was a wasted read per send, before the slaves had answered."""

    async def run():
        cap = Cap(50)
        waiters = QueueWaiters(asyncio.get_running_loop(), read_cap=cap)
        mine = await parked(waiters, "t", 0)
        waiters.on_dispatch(batch([("t", 0)], 100))
        await one_turn()
        assert not mine.done()
        await cap_moved_to(waiters, cap, 100)
        assert mine.done()

    asyncio.run(run())


def test_a_move_of_the_cap_wakes_only_the_queues_that_got_records():
    """Every long poll of the node used to wake on each move of the cap: on a SYNC master,
    on every send, each idle consumer read once for nothing."""

    async def run():
        cap = Cap(0)
        waiters = QueueWaiters(asyncio.get_running_loop(), read_cap=cap)
        mine, idle = await parked(waiters, "t", 0), await parked(waiters, "idle", 0)
        waiters.on_dispatch(batch([("t", 0)], 100))
        await cap_moved_to(waiters, cap, 100)
        assert mine.done() and not idle.done()
        waiters.readable_moved()  # nothing more was dispatched: still nobody
        await one_turn()
        assert not idle.done()
        idle.cancel()

    asyncio.run(run())


def test_a_queue_partly_passed_by_the_cap_wakes_on_each_move_until_all_of_it_is_passed():
    async def run():
        cap = Cap(0)
        waiters = QueueWaiters(asyncio.get_running_loop(), read_cap=cap)
        waiters.on_dispatch(batch([("t", 0)], 100))
        for offset in (40, 99):  # records of the pass may be readable already
            waiter = await parked(waiters, "t", 0)
            await cap_moved_to(waiters, cap, offset)
            assert waiter.done()
        cap.offset = 100
        waiters.readable_moved()
        late = await parked(waiters, "t", 0)  # registered after the last of it was passed
        waiters.readable_moved()
        await one_turn()
        assert not late.done()
        late.cancel()

    asyncio.run(run())


def test_a_waiter_registered_between_the_dispatch_and_the_cap_is_woken():
    async def run():
        cap = Cap(0)
        waiters = QueueWaiters(asyncio.get_running_loop(), read_cap=cap)
        waiters.on_dispatch(batch([("t", 0)], 100))  # nobody waits yet
        mine = await parked(waiters, "t", 0)
        await cap_moved_to(waiters, cap, 100)
        assert mine.done()

    asyncio.run(run())


def test_a_later_dispatch_releases_what_the_cap_passed_since():
    """A slave's cap moves with what its master says, and each dispatch looks again."""

    async def run():
        cap = Cap(0)
        waiters = QueueWaiters(asyncio.get_running_loop(), read_cap=cap)
        mine = await parked(waiters, "t", 0)
        waiters.on_dispatch(batch([("t", 0)], 100))
        cap.offset = 100  # moved without a word to the waiters
        waiters.on_dispatch(batch([("u", 0)], 200))
        await one_turn()
        assert mine.done()

    asyncio.run(run())


def test_a_dispatch_on_another_thread_is_applied_on_the_loop():
    async def run():
        waiters = QueueWaiters(asyncio.get_running_loop(), read_cap=Cap(None))
        mine = await parked(waiters, "t", 0)
        thread = threading.Thread(target=waiters.on_dispatch, args=(batch([("t", 0)], 9),))
        thread.start()
        thread.join()
        await asyncio.wait_for(mine, 5)

    asyncio.run(run())


def test_a_wait_ends_after_its_timeout_and_leaves_nothing_registered():
    async def run():
        waiters = QueueWaiters(asyncio.get_running_loop())
        await waiters.wait_any("t", (0, 1), 0.01)
        assert not waiters._waiters
        task = asyncio.ensure_future(waiters.wait("t", 0, 30.0))
        await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert not waiters._waiters

    asyncio.run(run())


# ---- lite consumers: the same rule through LiteService ---------------------------------
class LiteOnACap:
    """A LiteService whose read cap the test moves, with one lite consumer ("G", "c1")
    subscribed to lite topics a and b of topic T, its ready marks cleared."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.cap: int | None = 0
        pop, index = SimpleNamespace(), SimpleNamespace()
        self.lite = LiteService(None, None, None, pop, index, read_cap=lambda: self.cap)
        assert index.on_arrival == self.lite.arrived
        self.lite.subscriptions.sync(pb.PARTIAL_ADD, "G", "c1", "T", ["a", "b"])
        self.client = self.lite.subscriptions.client("G", "c1")
        self.client.ready.clear()  # a receive found nothing in them
        self.waiter: asyncio.Task | None = None

    def wait(self) -> None:
        self.waiter = self.loop.create_task(self.lite._wait(self.client, "c1", 30.0))
        self.run_a_turn()

    def run_a_turn(self) -> None:
        self.loop.run_until_complete(asyncio.sleep(0))

    def woken(self) -> bool:
        self.run_a_turn()
        return self.waiter.done()

    def cap_moved_to(self, cap: int | None) -> None:
        self.cap = cap
        self.lite.readable_moved()


def test_a_lite_arrival_past_the_cap_wakes_and_readies_nothing_until_the_cap_passes_it():
    """Each move of a SYNC master's read cap woke every lite long poll (and an arrival
    woke its subscribers before the slaves had it): each woken receive read for nothing
    and waited again. Now a lite topic changes once the cap passes what arrived."""
    loop = asyncio.new_event_loop()
    try:
        on_cap = LiteOnACap(loop)
        on_cap.wait()
        on_cap.cap_moved_to(50)  # nothing of a or b arrived: nobody wakes
        assert not on_cap.woken()
        on_cap.lite.arrived([lmq_name("T", "a")], 200)  # past the cap
        assert not on_cap.woken() and on_cap.client.ready == set()
        on_cap.cap_moved_to(150)  # part of it: a may have something readable
        assert on_cap.woken() and on_cap.client.ready == {lmq_name("T", "a")}
        on_cap.client.ready.clear()
        on_cap.wait()
        on_cap.cap_moved_to(200)  # the rest
        assert on_cap.woken() and on_cap.client.ready == {lmq_name("T", "a")}
        on_cap.wait()
        on_cap.cap_moved_to(260)  # passed already: nothing left to wake for
        assert not on_cap.woken()
        on_cap.lite.arrived([lmq_name("T", "b")], 250)  # within the cap: at once
        assert on_cap.woken() and lmq_name("T", "b") in on_cap.client.ready
    finally:
        loop.close()
