"""A followed FERRY_FETCH (``FetchRequest.follow``): after an answer with records the fetch
lane reads on from its ``next_offset`` on the same request, as a fetch sent with that
offset would be read, and says so (``follows``). It answers a last time, without
``follows``, once its answers are spent, when a read finds nothing in its wait, when the
next read is not the common case, and when the peer stops reading its answers; what it
leaves waiting is nothing once it has. In-process on a SYNC master
(``tests/support/sync_reads.py``), the lane's ends over a recording connection."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from ferrymq.client.messages import decode_records
from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import FerryRequestCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.ferrymq import data_pb2 as data
from node.pending_resets import PendingResets
from node.remoting import fetch_lane
from node.rpc_status import AccessDenied
from store.config import StoreConfig
from store.message_store import MessageStore
from tests.support.stores import SMALL
from tests.support.sync_reads import CALLER, Group, settle


@pytest.fixture
def store(tmp_path):
    opened = MessageStore.open(StoreConfig(str(tmp_path / "store"), **SMALL))
    yield opened
    opened.shutdown()


class Connection:
    """What the lane's ends use of a ``RemotingConnection``: each answer recorded as the
    ``FetchResponse`` written, ``last`` for the one through the request's answerer."""

    def __init__(self) -> None:
        self.written: list[tuple[data.FetchResponse, bool]] = []
        self.held: set = set()
        self.reading = True

    def keeps_up(self) -> bool:
        return self.reading

    def answer_more(self, response: RemotingCommand) -> bool:
        self.written.append((data.FetchResponse.FromString(response.body), False))
        return True

    def answerer(self, request: RemotingCommand, response: RemotingCommand):
        def write() -> None:
            self.written.append((data.FetchResponse.FromString(response.body), True))

        return write

    def failure_answer(self, request: RemotingCommand, error: Exception) -> RemotingCommand:
        return request.reply(
            1, str(error), body=data.FetchResponse(message=str(error)).SerializeToString()
        )

    def hold(self, read) -> bool:
        self.held.add(read)
        return True

    def release(self, read) -> None:
        self.held.discard(read)

    def answers(self) -> list[tuple[int, int, bool, bool]]:
        """Each answer as (code, next_offset, follows, through the answerer)."""
        return [(a.code, a.next_offset, a.follows, last) for a, last in self.written]


def followed(group: Group, connection: Connection, follow: int, wait_ms: int = 30_000, **fields):
    """A FERRY_FETCH of queue 0 from offset 0 asking ``follow``, taken as the lane takes
    it."""
    fetch = data.FetchRequest(
        group="G", topic="orders", queue_id=0, offset=0, wait_ms=wait_ms, follow=follow, **fields
    )
    request = RemotingCommand(FerryRequestCode.FERRY_FETCH, 7, body=fetch.SerializeToString())
    ends = fetch_lane._LaneFetchEnds(
        request, connection, connection.answerer, group.reads, CALLER, fetch, follow
    )
    assert group.fetch_now(ends, 0, ends.wait_s, **fields)
    return ends


async def written(group: Group, *bodies: bytes) -> None:
    """``bodies`` written, one batch each, and confirmed by both slaves."""
    for body in bodies:
        [end] = await group.put(body)
        group.ack(end)
    await settle()


def nothing_waits(group: Group, connection: Connection) -> bool:
    listeners, parked = group.waiting()
    return listeners == {} and parked == {} and connection.held == set()


def test_each_write_is_answered_on_the_same_request_until_its_answers_are_spent(store):
    async def run() -> None:
        group = Group(store)
        connection = Connection()
        followed(group, connection, follow=2)
        await written(group, b"a", b"b")
        assert connection.answers() == [(pb.OK, 1, True, False), (pb.OK, 2, True, False)]
        await written(group, b"c")
        assert connection.answers()[2:] == [(pb.OK, 3, False, True)]  # the last
        assert [r.body for a, _ in connection.written for r in decode_records(a.records)] == [
            b"a",
            b"b",
            b"c",
        ]
        assert nothing_waits(group, connection)
        await written(group, b"d")
        assert len(connection.written) == 3
        assert group.delivered == [1, 1, 1]

    asyncio.run(run())


def test_records_already_there_are_answered_in_order_one_a_turn_of_the_loop(store):
    """A backlog's answers are not made in one callback: the loop's other work (the
    replication link, the leases' timers, other readers) runs between them, as between
    fetches a reader asked one at a time."""

    async def run() -> None:
        group = Group(store)
        await written(group, b"a", b"b", b"c")
        connection = Connection()
        followed(group, connection, follow=5, max_messages=1)
        assert connection.answers() == [(pb.OK, 1, True, False)]
        await asyncio.sleep(0)
        assert len(connection.written) == 2
        await settle()
        assert connection.answers() == [
            (pb.OK, 1, True, False),
            (pb.OK, 2, True, False),
            (pb.OK, 3, True, False),
        ]
        assert [r.body for a, _ in connection.written for r in decode_records(a.records)] == [
            b"a",
            b"b",
            b"c",
        ]
        await written(group, b"d")
        assert connection.answers()[3] == (pb.OK, 4, True, False)

    asyncio.run(run())


def test_a_read_that_finds_nothing_in_its_wait_is_the_last_answer(store):
    async def run() -> None:
        group = Group(store)
        connection = Connection()
        followed(group, connection, follow=5, wait_ms=100)
        await written(group, b"a")
        deadline = asyncio.get_running_loop().time() + 10
        while len(connection.written) < 2:
            assert asyncio.get_running_loop().time() < deadline, "no last answer"
            await asyncio.sleep(0.01)
        assert connection.answers() == [
            (pb.OK, 1, True, False),
            (pb.MESSAGE_NOT_FOUND, 1, False, True),
        ]
        assert nothing_waits(group, connection)

    asyncio.run(run())


def test_a_peer_that_does_not_read_its_answers_gets_a_last_one(store):
    """While the peer's writes are paused an answer more would pile up on the node: the
    answer then is the last, and the reader asks again when it reads."""

    async def run() -> None:
        group = Group(store)
        connection = Connection()
        followed(group, connection, follow=5)
        await written(group, b"a")
        connection.reading = False
        await written(group, b"b")
        assert connection.answers() == [(pb.OK, 1, True, False), (pb.OK, 2, False, True)]
        assert nothing_waits(group, connection)

    asyncio.run(run())


def denied(*args):
    raise AccessDenied(True, "no SUB on orders")


@pytest.mark.parametrize("case", ["refused by the ACL", "a reset to tell"])
def test_a_next_read_that_is_not_the_common_case_ends_it_with_nothing(store, case):
    """The next read's rules are the read service's, applied again after each answer
    that says ``follows``: a reader whose right was revoked, or whose group has an offset
    reset to hear, gets its records, then a last answer with nothing at the next offset,
    and asks again; the handler answers that fetch precisely."""

    async def run() -> None:
        group = Group(store)
        connection = Connection()
        followed(group, connection, follow=5)
        await written(group, b"a")
        if case == "refused by the ACL":
            group.reads.permissions = SimpleNamespace(require=denied)
        else:
            group.reads.resets = PendingResets()
            group.reads.resets.mark("G", "orders", {0: 0})
        await written(group, b"b")
        assert connection.answers() == [
            (pb.OK, 1, True, False),
            (pb.OK, 2, True, False),
            (pb.MESSAGE_NOT_FOUND, 2, False, True),
        ]
        last, _ = connection.written[-1]
        assert (last.min_offset, last.max_offset, last.records) == (0, 2, b"")
        assert nothing_waits(group, connection)

    asyncio.run(run())


def test_a_next_read_whose_look_fails_is_answered_as_a_failure_last(store, monkeypatch):
    async def run() -> None:
        group = Group(store)
        connection = Connection()
        followed(group, connection, follow=5, max_messages=1)
        real_get = group.reads._get

        def broken(topic, queue_id, offset, *args):
            if offset >= 1:
                raise OSError("the disk went away")
            return real_get(topic, queue_id, offset, *args)

        monkeypatch.setattr(group.reads, "_get", broken)
        await group.put(b"a", b"b")
        group.ack(store.write_offset)
        await settle()
        assert connection.answers()[0] == (pb.OK, 1, True, False)
        last, through_answerer = connection.written[1]
        assert through_answerer and last.message == "the disk went away"
        assert len(connection.written) == 2
        assert nothing_waits(group, connection)

    asyncio.run(run())


def test_a_read_at_its_queue_s_end_does_not_look_at_the_store_until_a_write(store, monkeypatch):
    """After each answer the next read starts where the queue ends, and the read cap that
    made the answer readable wakes it: two looks a message, each ~3 µs of the master's,
    that could find nothing. Where the queue ends at the read's offset it waits without
    one; the tail read answers it from the dispatch, as before."""

    async def run() -> None:
        group = Group(store)
        looks: list[int] = []
        real_get = group.reads._get

        def counted(topic, queue_id, offset, *args):
            looks.append(offset)
            return real_get(topic, queue_id, offset, *args)

        monkeypatch.setattr(group.reads, "_get", counted)
        connection = Connection()
        followed(group, connection, follow=5)
        await written(group, b"a", b"b", b"c")
        assert connection.answers() == [(pb.OK, n, True, False) for n in (1, 2, 3)]
        assert looks == []

    asyncio.run(run())


def test_a_fetch_that_does_not_ask_to_follow_is_answered_once(store):
    async def run() -> None:
        group = Group(store)
        connection = Connection()
        followed(group, connection, follow=0)
        await written(group, b"a", b"b")
        assert connection.answers() == [(pb.OK, 1, False, True)]
        assert nothing_waits(group, connection)

    asyncio.run(run())


def test_a_followed_read_waits_on_with_the_same_listener_parked_read_and_timer(store, monkeypatch):
    """Each next read at the queue's end took its wait down and made it again (a waiting
    fetch, its listener, its parked read, a timer cancelled and one armed: ~3 µs of
    uvloop's a message for the timer alone); it is now the same waiting fetch, moved on."""

    async def run() -> None:
        group = Group(store)
        loop = asyncio.get_running_loop()
        armed: list[float] = []
        real_call_later = loop.call_later

        def counted(delay, callback, *args, **kwargs):
            if getattr(callback, "__name__", "") == "_expired":
                armed.append(delay)
            return real_call_later(delay, callback, *args, **kwargs)

        monkeypatch.setattr(loop, "call_later", counted)
        connection = Connection()
        followed(group, connection, follow=5)
        [waiting] = connection.held
        [[parked]] = group.waiting()[1].values()
        await written(group, b"a", b"b", b"c")
        assert connection.answers() == [(pb.OK, n, True, False) for n in (1, 2, 3)]
        assert connection.held == {waiting}
        assert list(group.waiting()[1].values()) == [[parked]] and parked.offset == 3
        assert len(armed) == 1
        waiting.cancel()  # its connection ended
        assert group.waiting() == ({}, {})

    asyncio.run(run())


def test_a_followed_read_s_wait_is_counted_from_its_own_start(store, monkeypatch):
    """The timer armed for the first read's wait is kept when a followed read moves the
    wait on: when it fires it finds the later deadline, and arms again for the rest, so
    the reader hears MESSAGE_NOT_FOUND a whole wait after its last answer, not sooner."""

    async def run() -> None:
        group = Group(store)
        loop = asyncio.get_running_loop()
        now = [loop.time()]
        monkeypatch.setattr(loop, "time", lambda: now[0])
        connection = Connection()
        followed(group, connection, follow=5, wait_ms=1000)
        now[0] += 0.6
        await written(group, b"a")
        assert connection.answers() == [(pb.OK, 1, True, False)]
        now[0] += 0.5  # past the first read's wait, within the second's
        await settle()
        assert connection.answers() == [(pb.OK, 1, True, False)]
        now[0] += 0.55  # past the second's
        await settle()
        assert connection.answers()[1:] == [(pb.MESSAGE_NOT_FOUND, 1, False, True)]
        assert nothing_waits(group, connection)

    asyncio.run(run())
