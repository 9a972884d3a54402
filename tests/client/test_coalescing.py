"""The SDK Producer's coalesced ``send_async``: against an in-process fake Data stub (every
request and failure chosen by the test) and against real node processes."""

from __future__ import annotations

import asyncio
import time
import zlib
from collections import defaultdict, deque

import grpc
import pytest

from ferrymq.client import Admin, FerryError, Message, Producer
from ferrymq.client.messages import decode_records
from ferrymq.client.routes import QueueRef, TopicRoute
from ferrymq.codec.produce_records import produce_record_at
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.ferrymq import data_pb2 as data
from ferrymq.protocol.ferrymq import data_pb2_grpc
from node.message_rules import produce_properties
from tests.support.nodes import start_node


class Unavailable(grpc.RpcError):
    def code(self):
        return grpc.StatusCode.UNAVAILABLE

    def details(self):
        return "injected"


class FakeData:
    """Stores what it is sent, per queue, as the node does; ``fail`` decides, per request,
    to raise a transport error (after storing or not) before answering."""

    def __init__(self, queues: int = 4, fail=None) -> None:
        self.queues = queues
        self.stored: dict[int, list[dict[str, str]]] = defaultdict(list)
        self.requests: list[int] = []  # records per request
        self.fail = fail or (lambda number, request: None)
        self.release: asyncio.Event | None = None  # when set, answers wait for it

    async def Produce(self, request, timeout=None, metadata=None):
        number = len(self.requests)
        self.requests.append(request.count)
        if self.release is not None:
            await self.release.wait()
        await asyncio.sleep(0)  # answers interleave with other requests
        decision = self.fail(number, request)
        if decision == "before":
            raise Unavailable()
        offsets, failures, position = [], [], 0
        for index in range(request.count):
            position, body, raw, _ = produce_record_at(request.records, position)
            properties = produce_properties(raw)
            properties["body"] = body.decode()
            if properties.get("TAGS") == "refuse":
                offsets.append(-1)
                failures.append(
                    data.ProduceFailure(index=index, code=pb.ILLEGAL_MESSAGE_TAG, message="no")
                )
                continue
            group = properties.get("__SHARDINGKEY")
            queue = zlib.crc32(group.encode()) % self.queues if group else request.queue_id
            offsets.append(len(self.stored[queue]))
            self.stored[queue].append(properties)
        if decision == "after":
            raise Unavailable()
        code = failures[0].code if failures else pb.OK
        return data.ProduceResponse(code=code, offsets=offsets, failures=failures)


def fake_producer(fake: FakeData, message_type=pb.NORMAL, **options) -> Producer:
    producer = Producer("127.0.0.1:1", **options)  # never connected: the fake answers
    queues = tuple(QueueRef("group-1", q) for q in range(fake.queues))
    producer.endpoints._routes["T"] = TopicRoute(
        "T", message_type, queues, {"group-1": "127.0.0.1:1"}
    )
    loop = asyncio.get_running_loop()
    state = producer.loop_state()
    state._stubs["127.0.0.1:1"] = (None, fake)
    assert producer._loops[loop] is state
    return producer


def test_sends_in_one_loop_turn_share_requests_and_get_their_own_receipts():
    async def scenario():
        fake = FakeData()
        producer = fake_producer(fake, max_batch_messages=50, max_in_flight=2)
        messages = [
            Message("T", b"m%d" % i, tag="refuse" if i % 7 == 3 else "ok") for i in range(120)
        ]
        results = await asyncio.gather(
            *(producer.send_async(m) for m in messages), return_exceptions=True
        )
        return fake, messages, results

    fake, messages, results = asyncio.run(scenario())
    assert len(fake.requests) < len(messages) and max(fake.requests) <= 50
    stored = {p["UNIQ_KEY"]: p for queue in fake.stored.values() for p in queue}
    for message, result in zip(messages, results, strict=True):
        if message.tag == "refuse":
            assert isinstance(result, FerryError) and result.code == pb.ILLEGAL_MESSAGE_TAG
            assert message.message_id not in stored
        else:
            assert result.message_id == message.message_id
            assert stored[message.message_id]["body"] == message.body.decode()
    # Each receipt's offset is where its own message is.
    by_offset = {
        (q, i): p["UNIQ_KEY"] for q, queue in fake.stored.items() for i, p in enumerate(queue)
    }
    receipts = [r for r in results if not isinstance(r, Exception)]
    assert len(receipts) == 120 - 17
    for receipt in receipts:
        assert any(by_offset.get((q, receipt.queue_offset)) == receipt.message_id for q in range(4))


class WalkedDeque(deque):
    """A queue that counts the items anything walked through it (``__iter__``)."""

    walked = 0

    def __iter__(self):
        for item in super().__iter__():
            self.walked += 1
            yield item


def test_a_request_takes_its_sends_without_walking_the_rest_of_a_long_queue():
    """A caller sending faster than the node answers makes the queue long; each request
    once copied all of it, so the client's CPU per request grew with the queue."""

    async def scenario():
        fake = FakeData()
        fake.release = asyncio.Event()  # the first request stays in flight
        producer = fake_producer(fake, max_batch_messages=50, max_in_flight=1)
        first = asyncio.ensure_future(producer.send_async(Message("T", b"first")))
        await asyncio.sleep(0)
        coalescer = producer.loop_state().coalescers[("T", "group-1")]
        coalescer.pending = WalkedDeque(coalescer.pending)
        queue = coalescer.pending
        messages = [Message("T", b"m%d" % i) for i in range(5_000)]
        sends = [asyncio.ensure_future(producer.send_async(m)) for m in messages]
        await asyncio.sleep(0)
        assert len(queue) == len(messages)  # all waiting behind the first request
        fake.release.set()
        receipts = await asyncio.gather(first, *sends)
        return fake, queue, messages, receipts[1:]

    fake, queue, messages, receipts = asyncio.run(scenario())
    assert queue.walked == 0
    assert [r.message_id for r in receipts] == [m.message_id for m in messages]
    assert sum(fake.requests) == len(messages) + 1 and max(fake.requests) <= 50


def test_a_caller_ahead_of_the_node_waits_for_room_in_the_queue():
    """``max_pending_bytes``: with the node holding the only request in flight, the queue
    takes what fits (any one record when empty) and the next caller waits, in order, until
    sends leave it; a waiter that gives up passes its turn on."""

    async def scenario():
        fake = FakeData()
        fake.release = asyncio.Event()
        producer = fake_producer(fake, max_in_flight=1, max_pending_bytes=1)
        queued = [await producer.enqueue_async(Message("T", b"a"))]
        queued.append(await producer.enqueue_async(Message("T", b"b")))  # after a left
        waiting = [
            asyncio.ensure_future(producer.enqueue_async(Message("T", body)))
            for body in (b"c", b"gives-up", b"d")
        ]
        for _ in range(10):
            await asyncio.sleep(0)
        held = [w.done() for w in waiting]
        waiting[1].cancel()
        fake.release.set()
        queued += [await waiting[0], await waiting[2]]
        receipts = await asyncio.gather(*queued)
        return fake, held, receipts

    fake, held, receipts = asyncio.run(scenario())
    assert held == [False, False, False]  # b filled the queue while a was in flight
    stored = [p["body"] for queue in fake.stored.values() for p in queue]
    assert sorted(stored) == ["a", "b", "c", "d"] and len(receipts) == 4
    assert fake.requests == [1, 1, 1, 1]  # one record queued at a time


def test_a_caller_arriving_as_a_waiter_is_woken_queues_behind_it():
    """Sends are queued in the order their callers came: one arriving between a waiter's
    wake-up and its turn waits behind it (a message group's order depends on it)."""

    async def scenario():
        fake = FakeData(queues=1)
        fake.release = asyncio.Event()
        producer = fake_producer(fake, max_in_flight=1, max_pending_bytes=1)
        first = await producer.enqueue_async(Message("T", b"a"))  # in flight, held
        await asyncio.sleep(0)
        queued = await producer.enqueue_async(Message("T", b"b"))  # fills the queue
        coalescer = producer.loop_state().coalescers[("T", "group-1")]
        waiting = asyncio.ensure_future(producer.enqueue_async(Message("T", b"c")))
        await asyncio.sleep(0)
        late = []
        wake = coalescer._wake_for_room

        def wake_as_another_caller_arrives():
            if coalescer._room_waiters and not late:  # c is about to be woken
                late.append(asyncio.ensure_future(producer.send_async(Message("T", b"d"))))
            wake()

        coalescer._wake_for_room = wake_as_another_caller_arrives
        fake.release.set()
        await asyncio.gather(first, queued, await waiting, late[0])
        return fake

    fake = asyncio.run(scenario())
    assert [p["body"] for p in fake.stored[0]] == ["a", "b", "c", "d"]


def test_sends_their_callers_gave_up_make_room_for_the_next_in_line():
    async def scenario():
        fake = FakeData()
        fake.release = asyncio.Event()
        producer = fake_producer(fake, max_in_flight=1, max_pending_bytes=1)
        first = await producer.enqueue_async(Message("T", b"a"))  # in flight, held
        await asyncio.sleep(0)
        given_up = await producer.enqueue_async(Message("T", b"b"))  # fills the queue
        waiting = asyncio.ensure_future(producer.enqueue_async(Message("T", b"c")))
        await asyncio.sleep(0)
        given_up.cancel()  # b's caller stops waiting: the queue's only send is dropped
        fake.release.set()
        last = await asyncio.wait_for(waiting, 5)
        return await asyncio.wait_for(asyncio.gather(first, last), 5), fake

    (_, receipt), fake = asyncio.run(scenario())
    assert receipt.message_id and fake.requests == [1, 1]


def test_a_record_larger_than_the_queue_bound_still_goes_alone():
    async def scenario():
        fake = FakeData()
        producer = fake_producer(fake, max_pending_bytes=10)
        return await producer.send_async(Message("T", b"x" * 1000))

    assert asyncio.run(scenario()).message_id


def test_a_message_group_stays_in_order_through_failures_and_retries():
    seen: set[bytes] = set()

    def fail(number, request):
        # The first attempt of every other request fails, before or after storing it.
        first = request.records[:64]
        if first in seen:
            return None
        seen.add(first)
        return (None, "before", None, "after")[zlib.crc32(first) % 4]

    async def scenario():
        fake = FakeData(fail=fail)
        producer = fake_producer(
            fake, pb.FIFO, max_batch_messages=5, max_in_flight=4, max_attempts=2
        )
        messages = [Message("T", b"%d" % i, message_group=f"g{i % 6}") for i in range(300)]
        results = await asyncio.gather(
            *(producer.send_async(m) for m in messages), return_exceptions=True
        )
        return fake, messages, results

    fake, messages, results = asyncio.run(scenario())
    assert not [r for r in results if isinstance(r, Exception)]
    assert len(fake.requests) > 60  # many requests, some failed and retried
    for group in range(6):
        queue = zlib.crc32(f"g{group}".encode()) % 4
        sent = [m.body.decode() for m in messages if m.message_group == f"g{group}"]
        stored = [p["body"] for p in fake.stored[queue] if p["__SHARDINGKEY"] == f"g{group}"]
        # "after" failures store a request and then retry it: duplicates with the same id
        # may follow, but the first time each message appears is in send order.
        first_seen = list(dict.fromkeys(stored))
        assert first_seen == sent, group


def test_a_group_waits_while_it_is_in_flight():
    async def scenario():
        fake = FakeData()
        fake.release = asyncio.Event()
        producer = fake_producer(fake, pb.FIFO, max_in_flight=4)
        first = asyncio.ensure_future(producer.send_async(Message("T", b"a", message_group="g")))
        deadline = time.monotonic() + 5
        while not fake.requests and time.monotonic() < deadline:
            await asyncio.sleep(0)
        later = [
            asyncio.ensure_future(producer.send_async(Message("T", b"b", message_group="g"))),
            asyncio.ensure_future(producer.send_async(Message("T", b"c", message_group="h"))),
        ]
        while len(fake.requests) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0)
        # "h" left at once in a second request; "b" waits for "a"'s request to answer.
        assert fake.requests == [1, 1]
        fake.release.set()
        await asyncio.gather(first, *later)
        return fake

    fake = asyncio.run(scenario())
    assert fake.requests == [1, 1, 1]


def test_transport_errors_fail_each_send_after_the_last_attempt():
    async def scenario():
        fake = FakeData(fail=lambda number, request: "before")
        producer = fake_producer(fake, max_attempts=2)
        return await asyncio.gather(
            *(producer.send_async(Message("T", b"x")) for _ in range(3)), return_exceptions=True
        )

    results = asyncio.run(scenario())
    assert all(isinstance(r, FerryError) and r.code_name == "UNAVAILABLE" for r in results)


# ---- against real nodes --------------------------------------------------------------
@pytest.fixture(scope="module")
def coalesce_node(module_node):
    """The module's node with topics ``co`` and ``co-fifo`` and group ``co-readers``."""
    with Admin(module_node.address) as admin:
        admin.create_topic("co", queue_count=3)
        admin.create_topic("co-fifo", queue_count=4, message_type="FIFO")
        admin.create_group("co-readers")
    return module_node


def read_everything(address: str, topic: str, queues: int) -> dict[str, tuple[int, int, bytes]]:
    """message id -> (queue, offset, body) for every stored record of ``topic``."""
    found = {}
    with grpc.insecure_channel(address) as channel:
        stub = data_pb2_grpc.DataStub(channel)
        for queue in range(queues):
            offset = 0
            while True:
                answer = stub.Fetch(
                    data.FetchRequest(
                        group="co-readers",
                        topic=topic,
                        queue_id=queue,
                        offset=offset,
                        max_messages=4096,
                    ),
                    timeout=30,
                )
                if not answer.count:
                    break
                for stored in decode_records(answer.records):
                    found[stored.unique_key] = (queue, stored.queue_offset, stored.body)
                offset = answer.next_offset
    return found


def test_coalesced_sends_against_a_node(coalesce_node):
    async def scenario():
        with Producer(coalesce_node.address) as producer:
            messages = [
                Message("co", b"n%d" % i, tag="a|b" if i == 17 else "t", keys=[f"k{i}"])
                for i in range(400)
            ]
            results = await asyncio.gather(
                *(producer.send_async(m) for m in messages), return_exceptions=True
            )
            fifo = [Message("co-fifo", b"%d" % i, message_group=f"g{i % 5}") for i in range(200)]
            fifo_results = await asyncio.gather(*(producer.send_async(m) for m in fifo))
            return messages, results, fifo, fifo_results

    messages, results, fifo, fifo_results = asyncio.run(scenario())
    stored = read_everything(coalesce_node.address, "co", 3)
    for i, (message, result) in enumerate(zip(messages, results, strict=True)):
        if i == 17:
            assert isinstance(result, FerryError) and result.code == pb.ILLEGAL_MESSAGE_TAG
            assert message.message_id not in stored
            continue
        _, offset, body = stored[message.message_id]
        assert (result.message_id, result.queue_offset, body) == (
            message.message_id,
            offset,
            message.body,
        )
    stored_fifo = read_everything(coalesce_node.address, "co-fifo", 4)
    for group in range(5):
        mine = [m for m in fifo if m.message_group == f"g{group}"]
        places = [stored_fifo[m.message_id] for m in mine]
        assert len({q for q, _, _ in places}) == 1
        assert [o for _, o, _ in places] == sorted(o for _, o, _ in places)  # send order
    assert len(fifo_results) == 200


def test_sigkill_during_coalesced_sends_loses_no_acknowledged_message(tmp_path):
    node = start_node(str(tmp_path / "node"))
    with Admin(node.address) as admin:
        admin.create_topic("co", queue_count=3)
        admin.create_group("co-readers")
    acknowledged: dict[str, int] = {}
    failed = 0

    async def scenario():
        nonlocal failed
        with Producer(node.address, max_attempts=1) as producer:
            stop = asyncio.Event()

            async def sender(n: int) -> None:
                nonlocal failed
                i = 0
                while not stop.is_set():
                    message = Message("co", b"s%d-%d" % (n, i))
                    i += 1
                    try:
                        receipt = await producer.send_async(message)
                    except FerryError:
                        failed += 1
                        return
                    acknowledged[receipt.message_id] = receipt.queue_offset

            senders = [asyncio.ensure_future(sender(n)) for n in range(64)]
            deadline = time.monotonic() + 60
            while len(acknowledged) < 3000 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert len(acknowledged) >= 3000
            node.sigkill()  # sends are in flight: some answers will never come
            stop.set()
            await asyncio.wait_for(asyncio.gather(*senders), 60)

    asyncio.run(scenario())
    restarted = start_node(node.data_dir, port=int(node.address.rsplit(":", 1)[1]))
    try:
        stored = read_everything(restarted.address, "co", 3)
        missing = [m for m in acknowledged if m not in stored]
        assert not missing, f"{len(missing)} acknowledged messages lost"
        assert all(stored[m][1] == offset for m, offset in acknowledged.items())
    finally:
        restarted.sigkill()
