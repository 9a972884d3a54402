"""The SYNC acknowledgement rule on the master, in-process: a real store, no sockets, no
processes, and a hand-driven clock for ``ack_timeout_ms``. Slaves are links opened on
``ReplicationMaster`` and acknowledge with ``record_ack``, as ``_read_acks`` does for a
frame off the wire."""

from __future__ import annotations

import asyncio

import pytest

from ha.link_auth import MAC_BYTES, Handshake, Role, new_nonce, session_macs
from ha.master import (
    CONFIRM_NOTICE_S,
    HEARTBEAT_S,
    MARK_SPACING_S,
    REPUT_TAIL_S,
    EndTimeline,
    ReplicationMaster,
)
from ha.wire import DATA_HEADER, FRAME_HEADER, Kind
from store.config import StoreConfig
from store.message import Message
from store.message_store import MessageStore
from store.results import PutResult, PutStatus
from tests.support.manual_clock import ManualClock
from tests.support.sync_master import master_of

TIMEOUT_S = 3.0


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


async def put(store: MessageStore, body: bytes = b"x") -> PutResult:
    result = await store.put_messages_async([Message("orders", body)])
    assert result.ok
    return result


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def test_ok_once_every_counted_slave_acked_the_end(store):
    async def run() -> None:
        clock = ManualClock()
        master = master_of(store, clock, min_insync=3)
        master.activate(frozenset({"m", "s1", "s2"}))
        s1 = master.open_link("s1", 0, store.write_offset)
        s2 = master.open_link("s2", 0, store.write_offset)
        result = await put(store)
        end = store.write_offset
        ack = asyncio.ensure_future(master.acknowledge(result, TIMEOUT_S))
        master.record_ack(s1, end)
        await settle()
        assert not ack.done()  # one of two counted slaves: not yet
        master.record_ack(s2, end - 1)
        await settle()
        assert not ack.done()  # short of the batch's end
        master.record_ack(s2, end)
        assert (await ack).status is PutStatus.OK
        assert master.confirmed_offset == end

    asyncio.run(run())


def test_not_acked_in_time_is_slave_timeout_and_never_ok(store):
    async def run() -> None:
        clock = ManualClock()
        master = master_of(store, clock)
        master.activate(frozenset({"m", "s1"}))
        s1 = master.open_link("s1", 0, store.write_offset)
        result = await put(store)
        ack = asyncio.ensure_future(master.acknowledge(result, TIMEOUT_S))
        await settle()
        clock.advance(TIMEOUT_S - 0.001)
        await settle()
        assert not ack.done()
        clock.advance(0.001)
        timed_out = await ack
        assert timed_out.status is PutStatus.FLUSH_SLAVE_TIMEOUT
        assert timed_out.appended == result.appended  # stored, and the caller is told where
        master.record_ack(s1, store.write_offset)  # a late ack changes no answer given
        assert timed_out.status is PutStatus.FLUSH_SLAVE_TIMEOUT

    asyncio.run(run())


def test_a_slave_leaving_the_in_sync_set_is_no_longer_waited_for(store):
    async def run() -> None:
        clock = ManualClock()
        master = master_of(store, clock)
        master.activate(frozenset({"m", "s1", "s2"}))
        s1 = master.open_link("s1", 0, store.write_offset)
        master.open_link("s2", 0, store.write_offset)
        result = await put(store)
        ack = asyncio.ensure_future(master.acknowledge(result, TIMEOUT_S))
        master.record_ack(s1, store.write_offset)
        await settle()
        assert not ack.done()  # s2 is counted and silent
        master.set_counted(frozenset({"m", "s1"}))  # routing committed s2's removal
        assert (await ack).status is PutStatus.OK

    asyncio.run(run())


class Ahead:
    """An ``on_replicated`` that notes when it is prepared (with which result) and when
    what it prepared runs."""

    def __init__(self, fail_at: str = "") -> None:
        self.prepared: list[PutResult] = []
        self.ran: list[PutResult] = []
        self.fail_at = fail_at

    def __call__(self, result: PutResult):
        if self.fail_at == "prepare":
            raise RuntimeError("a door's answer could not be encoded")
        self.prepared.append(result)

        def run() -> None:
            if self.fail_at == "run":
                raise RuntimeError("a door's answer could not be written")
            self.ran.append(result)

        return run


def test_on_replicated_runs_in_the_ack_that_confirms_the_write_before_its_waiter_resumes(store):
    """How a SYNC send is answered ahead (``RemotingConnection.answer_ahead``): prepared
    as the put starts to wait, run inside the ``record_ack`` that confirms it, once,
    while the waiting task has yet to run."""

    async def run() -> None:
        clock = ManualClock()
        master = master_of(store, clock, min_insync=3)
        master.activate(frozenset({"m", "s1", "s2"}))
        s1 = master.open_link("s1", 0, store.write_offset)
        s2 = master.open_link("s2", 0, store.write_offset)
        result = await put(store)
        ahead = Ahead()
        ack = asyncio.ensure_future(master.acknowledge(result, TIMEOUT_S, ahead))
        await settle()
        assert (ahead.prepared, ahead.ran) == ([result], [])
        master.record_ack(s1, store.write_offset)
        assert ahead.ran == []  # one of the two counted slaves
        master.record_ack(s2, store.write_offset)
        assert ahead.ran == [result] and not ack.done()  # in the ACK's call, before the task
        assert (await ack).status is PutStatus.OK
        master.record_ack(s2, store.write_offset)
        assert ahead.ran == [result]  # once

    asyncio.run(run())


def test_on_replicated_runs_only_for_a_write_confirmed_while_it_waited(store):
    """Not prepared when nothing has to be waited for (the caller answers as it
    returns); never run after a timeout (the answer is FLUSH_SLAVE_TIMEOUT, and a late ACK
    changes nothing) or a lost mastership; and what fails in it, prepared or run, is
    logged, never raised into the ACK's intake or the put."""

    async def run() -> None:
        clock = ManualClock()
        master = master_of(store, clock)
        master.activate(frozenset({"m", "s1"}))
        s1 = master.open_link("s1", 0, store.write_offset)

        late = Ahead()
        waiting = asyncio.ensure_future(master.acknowledge(await put(store), TIMEOUT_S, late))
        await settle()
        clock.advance(TIMEOUT_S)
        assert (await waiting).status is PutStatus.FLUSH_SLAVE_TIMEOUT
        master.record_ack(s1, store.write_offset)
        assert len(late.prepared) == 1 and late.ran == []

        for fail_at in ("prepare", "run"):
            failing = Ahead(fail_at)
            waiting = asyncio.ensure_future(
                master.acknowledge(await put(store), TIMEOUT_S, failing)
            )
            await settle()
            master.record_ack(s1, store.write_offset)  # does not raise
            assert (await waiting).status is PutStatus.OK and failing.ran == []

        confirmed = await put(store)
        master.record_ack(s1, store.write_offset)  # confirmed before anyone waits
        at_once = Ahead()
        assert (await master.acknowledge(confirmed, TIMEOUT_S, at_once)).ok
        assert at_once.prepared == []

        lost = Ahead()
        waiting = asyncio.ensure_future(master.acknowledge(await put(store), TIMEOUT_S, lost))
        await settle()
        master.deactivate()
        assert (await waiting).status is PutStatus.FLUSH_SLAVE_TIMEOUT
        assert len(lost.prepared) == 1 and lost.ran == []

    asyncio.run(run())


def test_a_confirmation_wakes_its_readers_before_the_writers_it_confirmed_resume(store):
    """What a confirmation does, in order: what answers ahead runs, then ``on_confirmed``
    (which wakes the long polls waiting under the read cap), and only then the confirmed
    writers' tasks resume, so a waiting read's answer does not queue behind what a
    writer's task does after its answer left. A reader's wake that raises still lets every
    confirmed writer resume."""

    async def run() -> None:
        loop = asyncio.get_running_loop()
        clock = ManualClock()
        master = master_of(store, clock)
        master.activate(frozenset({"m", "s1"}))
        s1 = master.open_link("s1", 0, store.write_offset)
        order: list[str] = []

        async def writer(name: str) -> None:
            acknowledged = await master.acknowledge(await put(store), TIMEOUT_S, ahead)
            assert acknowledged.ok
            order.append(name)

        def wake_readers(confirmed: int) -> None:  # as ``QueueWaiters``: through the loop
            loop.call_soon(order.append, "reader")

        ahead = Ahead()
        master.on_confirmed = wake_readers
        writers = [asyncio.ensure_future(writer(name)) for name in ("writer 1", "writer 2")]
        await settle()
        master.record_ack(s1, store.write_offset)
        assert len(ahead.ran) == 2 and order == []  # answered ahead, in the ACK's call
        await asyncio.gather(*writers)
        assert order == ["reader", "writer 1", "writer 2"]

        def failing_wake(confirmed: int) -> None:
            raise RuntimeError("a reader's wake failed")

        master.on_confirmed = failing_wake
        waiting = asyncio.ensure_future(master.acknowledge(await put(store), TIMEOUT_S))
        await settle()
        with pytest.raises(RuntimeError, match="reader's wake"):
            master.record_ack(s1, store.write_offset)
        assert (await waiting).status is PutStatus.OK

    asyncio.run(run())


class Answers:
    """An ``acknowledge_now`` caller's ``answer``: notes each answer made (its status)
    and each one written."""

    def __init__(self, fail_making: bool = False) -> None:
        self.made: list[PutStatus] = []
        self.written: list[PutStatus] = []
        self.fail_making = fail_making

    def __call__(self, result: PutResult):
        if self.fail_making and not self.made:
            self.made.append(result.status)
            raise RuntimeError("the answer could not be made")
        self.made.append(result.status)
        return lambda: self.written.append(result.status)


def test_acknowledge_now_makes_the_answer_while_it_waits_and_writes_it_in_the_confirming_ack(
    store,
):
    """The produce lane's acknowledgement: with no task, the answer is made as the put
    starts to wait and written inside the ``record_ack`` that confirms it, once."""

    async def run() -> None:
        clock = ManualClock()
        master = master_of(store, clock, min_insync=3)
        master.activate(frozenset({"m", "s1", "s2"}))
        s1 = master.open_link("s1", 0, store.write_offset)
        s2 = master.open_link("s2", 0, store.write_offset)
        answers = Answers()
        master.acknowledge_now(await put(store), TIMEOUT_S, answers)
        assert (answers.made, answers.written) == ([PutStatus.OK], [])
        master.record_ack(s1, store.write_offset)
        assert answers.written == []  # one of the two counted slaves
        master.record_ack(s2, store.write_offset)
        assert answers.written == [PutStatus.OK]  # in the ACK's call
        await settle()
        master.record_ack(s2, store.write_offset)
        assert answers.made == answers.written == [PutStatus.OK]  # once

    asyncio.run(run())


def test_acknowledge_now_answers_slave_timeout_after_a_timeout_or_a_lost_mastership_never_ok(
    store,
):
    async def run() -> None:
        clock = ManualClock()
        master = master_of(store, clock)
        master.activate(frozenset({"m", "s1"}))
        s1 = master.open_link("s1", 0, store.write_offset)

        late = Answers()
        master.acknowledge_now(await put(store), TIMEOUT_S, late)
        clock.advance(TIMEOUT_S - 0.001)
        await settle()
        assert late.written == []
        clock.advance(0.001)
        await settle()
        assert late.written == [PutStatus.FLUSH_SLAVE_TIMEOUT]
        master.record_ack(s1, store.write_offset)  # a late ack writes nothing more
        await settle()
        assert late.written == [PutStatus.FLUSH_SLAVE_TIMEOUT]

        lost = Answers()
        master.acknowledge_now(await put(store), TIMEOUT_S, lost)
        master.deactivate()
        await settle()
        assert lost.written == [PutStatus.FLUSH_SLAVE_TIMEOUT]

    asyncio.run(run())


def test_acknowledge_now_answers_at_once_what_needs_no_wait_and_still_answers_a_failed_making(
    store,
):
    """At once: ASYNC replication, an end confirmed already, too few in-sync replicas
    (FLUSH_SLAVE_TIMEOUT), a refused put. An answer whose making failed while it waited
    (logged) is made again and written when the end is confirmed."""

    async def run() -> None:
        clock = ManualClock()
        master = master_of(store, clock, sync=False)
        master.activate(frozenset({"m", "s1"}))
        s1 = master.open_link("s1", 0, store.write_offset)  # never acks while ASYNC
        at_once = Answers()
        master.acknowledge_now(await put(store), TIMEOUT_S, at_once)
        assert at_once.written == [PutStatus.OK]
        master.sync = True
        master.record_ack(s1, store.write_offset)
        confirmed = await put(store)
        master.record_ack(s1, store.write_offset)
        already = Answers()
        master.acknowledge_now(confirmed, TIMEOUT_S, already)
        assert already.written == [PutStatus.OK]

        refused = Answers()
        master.acknowledge_now(PutResult(PutStatus.DISK_FULL, error="full"), TIMEOUT_S, refused)
        assert refused.written == [PutStatus.DISK_FULL]

        failing = Answers(fail_making=True)
        master.acknowledge_now(await put(store), TIMEOUT_S, failing)
        master.record_ack(s1, store.write_offset)  # does not raise
        await settle()
        assert failing.written == [PutStatus.OK]

        master.set_counted(frozenset({"m"}))
        master.min_insync_replicas = 2
        too_few = Answers()
        master.acknowledge_now(await put(store), TIMEOUT_S, too_few)
        assert too_few.written == [PutStatus.FLUSH_SLAVE_TIMEOUT]

    asyncio.run(run())


def test_too_few_in_sync_replicas_never_acknowledges(store):
    async def run() -> None:
        clock = ManualClock()
        master = master_of(store, clock, min_insync=2)
        master.activate(frozenset({"m"}))  # the only slave left the set
        assert not master.enough_in_sync()
        result = await put(store)
        answer = await master.acknowledge(result, TIMEOUT_S)
        assert answer.status is PutStatus.FLUSH_SLAVE_TIMEOUT

    asyncio.run(run())


def test_async_replication_acknowledges_at_once(store):
    async def run() -> None:
        clock = ManualClock()
        master = master_of(store, clock, sync=False)
        master.activate(frozenset({"m", "s1"}))
        master.open_link("s1", 0, store.write_offset)  # never acks
        result = await put(store)
        assert (await master.acknowledge(result, TIMEOUT_S)).status is PutStatus.OK

    asyncio.run(run())


def test_confirmed_offset_only_grows_within_an_epoch_and_never_passes_the_end(store):
    async def run() -> None:
        await put(store, b"first")
        end = store.write_offset
        store.set_confirmed_offset(end)
        with pytest.raises(AssertionError):
            store.set_confirmed_offset(end - 1)  # a fall within the epoch
        with pytest.raises(AssertionError):
            store.set_confirmed_offset(end + 1)  # past what is written
        store.set_confirmed_offset(0, new_epoch=True)  # a new epoch may lower it
        assert store.confirmed_offset == 0

    asyncio.run(run())


def test_a_cut_tail_lowers_the_read_cap_to_the_cut(store):
    async def run() -> None:
        first = await put(store, b"kept")
        await put(store, b"cut")
        store.set_confirmed_offset(store.write_offset)
        cut = first.appended[0].physical_offset + first.appended[0].size
        store.truncate_to(cut)
        assert store.confirmed_offset == cut == store.write_offset

    asyncio.run(run())


class CapturingWriter:
    """A streaming link's writer that keeps what is written (nothing is ever buffered)."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.transport = self
        self.socket_fd = -1  # no socket: the master's native write passes it by

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False

    def write(self, frame: bytes) -> None:
        self.frames.append(frame)

    def writelines(self, parts) -> None:
        self.frames.append(b"".join(parts))


def streaming_link(master: ReplicationMaster, store: MessageStore, slave: str):
    """A link streaming from the log's end into a ``CapturingWriter``, and the slave's
    end of its MAC."""
    start = store.write_offset
    link = master.open_link(slave, start, start)
    handshake = Handshake("group-1", slave, new_nonce(), new_nonce())
    link.writer = CapturingWriter()
    link.mac, link.sent = session_macs("secret", handshake, Role.MASTER).outgoing, start
    return link, session_macs("secret", handshake, Role.SLAVE).incoming


def test_a_streaming_link_is_written_in_the_append_before_the_dispatch(store):
    """The copies of a SYNC write leave in the append itself (no task switch per link),
    before the store writes its own consume-queue and index entries (the reput, at the
    slave's ACK)."""

    async def run() -> None:
        master = master_of(store, ManualClock())
        master.activate(frozenset({"m", "s1"}))
        start = store.write_offset
        link, _ = streaming_link(master, store, "s1")
        writer = link.writer
        written_at_dispatch: list[int] = []
        store.add_dispatch_listener(lambda batch: written_at_dispatch.append(len(writer.frames)))
        await put(store, b"copied at once")
        end = store.write_offset
        assert written_at_dispatch == [] and len(writer.frames) == 1
        master.record_ack(link, end)
        assert written_at_dispatch == [1]  # the frame was out before the dispatch
        (frame,) = writer.frames
        kind, _ = FRAME_HEADER.unpack_from(frame)
        offset, epoch, _, _ = DATA_HEADER.unpack_from(frame, FRAME_HEADER.size)
        assert (kind, offset, epoch) == (Kind.DATA, start, 1)
        records = frame[FRAME_HEADER.size + DATA_HEADER.size : -MAC_BYTES]
        assert records == store.read_records(start, end - start)
        assert link.sent == end

    asyncio.run(run())


def test_a_sync_master_dispatches_behind_its_appends_after_the_answer_and_before_the_cap(store):
    """The reput: while a SYNC master waits for slaves, an append leaves its consume-queue
    and index entries behind it. An ACK that confirms nothing only counts; the ACK that
    confirms the write answers its writer first, then writes the entries, and only then
    moves the read cap, so a reader woken by the confirmation finds them."""

    async def run() -> None:
        clock = ManualClock()
        master = master_of(store, clock, min_insync=3)
        master.activate(frozenset({"m", "s1", "s2"}))
        s1 = master.open_link("s1", 0, store.write_offset)
        s2 = master.open_link("s2", 0, store.write_offset)
        seen: list[tuple[str, int, int]] = []  # (who, dispatched, read cap)
        master.on_confirmed = lambda confirmed: seen.append(
            ("reader", store.dispatched_offset, confirmed)
        )
        before = store.write_offset
        result = await put(store, b"behind")
        end = store.write_offset
        assert store.dispatches_behind
        assert store.dispatched_offset == before  # nothing dispatched in the append
        assert store.max_offset_in_queue("orders", 0) == 0

        def answer(outcome):
            def write() -> None:
                seen.append(("writer", store.dispatched_offset, master.confirmed_offset))

            return write

        master.acknowledge_now(result, TIMEOUT_S, answer)
        master.record_ack(s1, end)  # confirms nothing: counted, nothing dispatched
        assert store.dispatched_offset == before and seen == []
        master.record_ack(s2, end)
        assert seen == [("writer", before, before), ("reader", end, end)]
        assert store.max_offset_in_queue("orders", 0) == 1

    asyncio.run(run())


def test_a_confirmation_the_in_sync_set_moves_dispatches_before_the_cap_moves(store):
    """A slave leaving the in-sync set can confirm what the others acknowledged, with no
    ACK arriving: the entries the appends left are written before the read cap moves."""

    async def run() -> None:
        master = master_of(store, ManualClock(), min_insync=2)
        master.activate(frozenset({"m", "s1", "s2"}))
        s1 = master.open_link("s1", 0, store.write_offset)
        master.open_link("s2", 0, store.write_offset)
        seen: list[tuple[int, int]] = []
        master.on_confirmed = lambda confirmed: seen.append((confirmed, store.dispatched_offset))
        before = store.write_offset
        await put(store, b"held by s1 only")
        end = store.write_offset
        master.record_ack(s1, end)
        assert master.confirmed_offset == before and store.dispatched_offset == before
        master.set_counted(frozenset({"m", "s1"}))  # s2 left the in-sync set
        assert store.dispatches_behind
        assert seen == [(end, end)]

    asyncio.run(run())


def test_what_the_reput_left_is_dispatched_after_its_tail_or_once_no_ack_is_awaited(store):
    """Appends dispatch behind them only while ACKs are awaited: with no ACK, the tail
    timer dispatches; when the in-sync set empties (or the node stops being master) what
    was left is dispatched at once and later appends dispatch in the append again."""

    async def run() -> None:
        clock = ManualClock()
        master = master_of(store, clock, min_insync=1)
        master.activate(frozenset({"m", "s1"}))
        master.open_link("s1", 0, store.write_offset)
        await put(store)
        assert store.dispatched_offset < store.write_offset
        clock.advance(REPUT_TAIL_S - 0.001)
        assert store.dispatched_offset < store.write_offset
        clock.advance(0.001)
        assert store.dispatched_offset == store.write_offset  # no ACK came: the tail's
        assert clock.armed == 0

        await put(store)
        master.set_counted(frozenset({"m"}))  # the slave left the in-sync set
        assert not store.dispatches_behind
        assert store.dispatched_offset == store.write_offset
        await put(store)
        assert store.dispatched_offset == store.write_offset  # in the append

        master.set_counted(frozenset({"m", "s1"}))
        await put(store)
        assert store.dispatched_offset < store.write_offset
        master.deactivate()
        assert not store.dispatches_behind
        assert store.dispatched_offset == store.write_offset
        assert clock.armed == 0

    asyncio.run(run())


def test_records_a_crash_left_undispatched_behind_the_appends_are_dispatched_by_recovery(
    tmp_path,
):
    """kill -9 between an append and its reput: the records are in the CommitLog, and the
    next start's recovery writes their consume-queue entries."""
    config = StoreConfig(data_dir=str(tmp_path / "store"), commitlog_segment_bytes=8 << 20)
    crashed = MessageStore.open(config)

    async def run() -> None:
        master = master_of(crashed, ManualClock())
        master.activate(frozenset({"m", "s1"}))
        master.open_link("s1", 0, crashed.write_offset)
        for _ in range(3):
            await put(crashed)
        # an append finding one left undispatched dispatches both; the last is left
        assert crashed.dispatched_offset < crashed.write_offset
        assert crashed.max_offset_in_queue("orders", 0) == 2

    asyncio.run(run())
    end = crashed.write_offset
    crashed.close_abruptly_for_tests()
    reopened = MessageStore.open(config)
    try:
        assert reopened.write_offset == end
        assert reopened.dispatched_offset == end
        assert reopened.max_offset_in_queue("orders", 0) == 3
    finally:
        reopened.shutdown()


def test_a_master_busier_than_one_append_per_ack_dispatches_after_the_copies_as_before(store):
    """Behind by one append at most: an append that finds an earlier one still undispatched
    (no ACK came between, as under pipelined batches) dispatches both after its copies
    left, as without the reput (dispatching them before its append would delay its
    copies, and so every ACK, by the dispatch)."""

    async def run() -> None:
        master = master_of(store, ManualClock())
        master.activate(frozenset({"m", "s1"}))
        link, _ = streaming_link(master, store, "s1")
        frames_at_dispatch: list[int] = []
        store.add_dispatch_listener(
            lambda batch: frames_at_dispatch.append(len(link.writer.frames))
        )
        await put(store, b"first")
        assert store.dispatched_offset < store.write_offset and frames_at_dispatch == []
        await put(store, b"second")
        assert store.dispatched_offset == store.write_offset
        assert frames_at_dispatch == [2]  # one pass, after the second append's copy left

    asyncio.run(run())


def test_an_async_master_dispatches_in_its_appends(store):
    async def run() -> None:
        master = master_of(store, ManualClock(), sync=False)
        master.activate(frozenset({"m", "s1"}))
        master.open_link("s1", 0, store.write_offset)
        await put(store)
        assert not store.dispatches_behind
        assert store.dispatched_offset == store.write_offset

    asyncio.run(run())


def test_the_links_of_one_append_read_its_records_once_and_each_frame_is_sealed_for_its_slave(
    store, monkeypatch
):
    """Both slaves' frames carry the same records, read from the log once, each under its
    own link's MAC (one payload, the DATA header and the records, shared by the links and
    written between each frame's head and its tag)."""

    async def run() -> None:
        master = master_of(store, ManualClock(), min_insync=3)
        master.activate(frozenset({"m", "s1", "s2"}))
        start = store.write_offset
        slaves = {slave: streaming_link(master, store, slave) for slave in ("s1", "s2")}
        reads = []
        read_records = store.read_records
        monkeypatch.setattr(
            store, "read_records", lambda *args: reads.append(args) or read_records(*args)
        )
        await put(store, b"read once, sent twice")
        assert len(reads) == 1
        expected = read_records(start, store.write_offset - start)
        for link, incoming in slaves.values():
            (frame,) = link.writer.frames
            payload = frame[FRAME_HEADER.size : -MAC_BYTES]
            assert payload[DATA_HEADER.size :] == expected
            assert incoming.verify(Kind.DATA, payload, frame[-MAC_BYTES:])

    asyncio.run(run())


def confirmed_told(frame: bytes, incoming) -> tuple[int, int]:
    """(records carried, confirmed offset) of a DATA frame, checked against its MAC."""
    kind, _ = FRAME_HEADER.unpack_from(frame)
    payload = frame[FRAME_HEADER.size : -MAC_BYTES]
    assert kind == Kind.DATA and incoming.verify(Kind.DATA, payload, frame[-MAC_BYTES:])
    _, _, _, confirmed = DATA_HEADER.unpack_from(payload)
    return len(payload) - DATA_HEADER.size, confirmed


def test_a_confirmed_offset_no_frame_carried_reaches_the_quiet_slaves_at_once(store):
    """A slave serves records only up to the confirmed offset its master last sent, which
    rides on the next frame. When the write that moved it is the last for a while, each
    slave gets it in a heartbeat ``CONFIRM_NOTICE_S`` later, not after a second of
    silence: before, a record held by every slave stayed unreadable on them that long."""

    async def run() -> None:
        clock = ManualClock()
        master = master_of(store, clock, min_insync=3)
        master.activate(frozenset({"m", "s1", "s2"}))
        slaves = [streaming_link(master, store, name) for name in ("s1", "s2")]
        await put(store, b"the last write for a while")
        end = store.write_offset
        for link, incoming in slaves:
            (frame,) = link.writer.frames
            assert confirmed_told(frame, incoming)[1] < end  # sent before the acks
            master.record_ack(link, end)
        assert master.confirmed_offset == end
        clock.advance(CONFIRM_NOTICE_S)
        for link, incoming in slaves:
            assert [confirmed_told(f, incoming) for f in link.writer.frames[1:]] == [(0, end)]
        clock.advance(HEARTBEAT_S)  # told once: nothing more until the link's heartbeat
        assert [len(link.writer.frames) for link, _ in slaves] == [2, 2]
        assert clock.armed == 0

    asyncio.run(run())


def test_a_busy_link_carries_the_confirmed_offset_on_its_data_and_gets_no_extra_frame(store):
    """Under load each DATA frame carries the offset as it stands; a link that wrote a
    frame within ``CONFIRM_NOTICE_S`` gets no heartbeat (that would double the frames a
    slave reads and answers), and gets one once it falls quiet with the offset untold."""

    async def run() -> None:
        clock = ManualClock()
        master = master_of(store, clock)
        master.activate(frozenset({"m", "s1"}))
        link, incoming = streaming_link(master, store, "s1")
        for round_ in range(5):
            await put(store, b"load %d" % round_)
            master.record_ack(link, store.write_offset)
            clock.advance(CONFIRM_NOTICE_S / 2)
        told = [confirmed_told(frame, incoming) for frame in link.writer.frames]
        assert len(told) == 5 and all(records > 0 for records, _ in told)  # DATA only
        assert told[-1][1] < master.confirmed_offset == store.write_offset
        clock.advance(2 * CONFIRM_NOTICE_S)  # a notice finds it busy at most once more
        assert confirmed_told(link.writer.frames[-1], incoming) == (0, store.write_offset)
        assert len(link.writer.frames) == 6 and clock.armed == 0

    asyncio.run(run())


def test_an_async_master_sends_no_confirm_notices(store):
    """Under ASYNC replication slaves do not cap their reads: nothing to tell."""

    async def run() -> None:
        clock = ManualClock()
        master = master_of(store, clock, sync=False)
        master.activate(frozenset({"m", "s1"}))
        link, _ = streaming_link(master, store, "s1")
        await put(store)
        master.record_ack(link, store.write_offset)
        clock.advance(HEARTBEAT_S / 2)
        assert len(link.writer.frames) == 1 and clock.armed == 0

    asyncio.run(run())


# ---- how far behind, in time ------------------------------------------------------------
def test_a_slave_always_a_little_behind_under_load_is_not_lagging(store):
    """Under continuous load new appends are always in flight, so a slave's ack never
    reaches the end of the moment. It holds what the master had a moment ago: that is
    what counts (Kafka's rule). Measured against the moment's end, such a slave left the
    in-sync set after ``max_lag_ms`` although it was milliseconds behind (both slaves of
    ``bench.saturation`` did, and writes were refused with "1 in-sync replicas, 2
    needed")."""

    async def run() -> None:
        clock = ManualClock()
        master = master_of(store, clock)
        master.activate(frozenset({"m", "s1"}))
        link = master.open_link("s1", 0, store.write_offset)
        for _ in range(200):  # 20 s of load, a put every 100 ms
            await put(store)
            behind = store.write_offset
            clock.advance(0.1)
            await put(store)  # in flight when the ack of the one before arrives
            master.record_ack(link, behind)
            assert master.backlog_s() < 0.5
        assert not master.lagging("s1", max_lag_s=15.0, max_lag_bytes=1 << 30)
        await master.close()

    asyncio.run(run())


def test_a_slave_that_stopped_acking_is_lagging_after_max_lag(store):
    async def run() -> None:
        clock = ManualClock()
        master = master_of(store, clock)
        master.activate(frozenset({"m", "s1"}))
        link = master.open_link("s1", 0, store.write_offset)
        await put(store)
        master.record_ack(link, store.write_offset)
        stopped = store.write_offset
        for _ in range(160):  # 16 s of load; the slave holds only what it had at the start
            clock.advance(0.1)
            await put(store)
            master.record_ack(link, stopped)
        assert master.lagging("s1", max_lag_s=15.0, max_lag_bytes=1 << 30)
        assert master.backlog_s() == pytest.approx(16.0, abs=0.2)
        await master.close()

    asyncio.run(run())


def test_a_write_after_a_quiet_spell_is_behind_only_since_it_was_written(store):
    """The in-sync set held the end for the whole quiet spell: a write in flight after it
    is behind since it was written, not since the write before the spell. Dated from the
    write before, the second of two concurrent writes after a quiet second was refused
    REPLICATION_BACKLOG (a transaction check's answer, racing the check's own record)."""

    async def run() -> None:
        clock = ManualClock()
        master = master_of(store, clock)
        master.activate(frozenset({"m", "s1"}))
        link = master.open_link("s1", 0, store.write_offset)
        await put(store)
        master.record_ack(link, store.write_offset)
        clock.advance(5.0)  # quiet: nothing written, the slave holds everything
        await put(store)  # its copy is on its way
        assert master.backlog_s() == 0.0
        clock.advance(0.3)
        assert master.backlog_s() == pytest.approx(0.3)
        await master.close()

    asyncio.run(run())


def test_the_end_timeline_dates_when_the_end_left_an_offset():
    clock = ManualClock()
    timeline = EndTimeline(lambda: clock.now)
    timeline.reset(10)
    clock.now = 101.0
    timeline.mark(20)
    clock.now = 101.0 + MARK_SPACING_S / 2
    timeline.mark(25)  # folded into the mark at 101
    clock.now = 104.0
    timeline.mark(30)
    clock.now = 110.0
    assert timeline.held_as_of(5) is None  # before the term: nobody's backlog
    assert timeline.held_as_of(10) == 101.0  # the end left 10 at 101
    assert timeline.held_as_of(20) == 101.0  # at most one spacing older than the truth
    assert timeline.held_as_of(25) == 104.0  # then stood at 25 until 104
    assert timeline.held_as_of(29) == 104.0
    assert timeline.held_as_of(30) == 110.0  # the end is still 30
    timeline.mark(30)  # no move: no mark
    assert timeline.held_as_of(29) == 104.0
