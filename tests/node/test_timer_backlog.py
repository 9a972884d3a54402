"""A large backlog of delayed messages due at the same time: delivered exactly once and in
order per queue while other work goes on, in bounded batches (also for large messages and
after a failed batch), and through a real node SIGKILLed in the middle of the release.

Correctness only: how fast and how smoothly a backlog is released is measured by
``bench/timer.py``."""

from __future__ import annotations

import asyncio
import time

import grpc

from ferrymq.client.messages import decode_records
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from ferrymq.protocol.ferrymq import data_pb2 as data
from ferrymq.protocol.ferrymq import data_pb2_grpc
from node.timer_service import DELIVERY_CHUNK, TimerService
from store.message import Message
from tests.support.nodes import start_node
from tests.support.rpc import create_group, create_topic, message, stubs
from tests.support.timers import T0, Timers

QUEUES = 8


def park_backlog(timers: Timers, count: int, due_ms: int, body_bytes: int = 0) -> None:
    """``count`` messages due at ``due_ms``; message ``s`` goes to queue ``s % QUEUES``
    with a body that starts with ``s``."""
    pad = b"." * body_bytes
    step = max(1, min(500, (1 << 20) // (body_bytes + 200)))
    for start in range(0, count, step):
        batch = [
            TimerService.park(Message("orders", b"%08d" % s + pad, queue_id=s % QUEUES), due_ms)
            for s in range(start, min(count, start + step))
        ]
        assert timers.store.put_messages(batch).ok
    timers.loop.run_until_complete(asyncio.sleep(0))  # let dispatch hand the entries over
    assert timers.service.pending == count


def delivered_count(timers: Timers) -> int:
    return sum(timers.store.max_offset_in_queue("orders", q) for q in range(QUEUES))


def assert_each_once_in_order(timers: Timers, count: int) -> None:
    for queue_id in range(QUEUES):
        sequences = [int(body[:8]) for body in timers.topic_bodies("orders", queue_id)]
        assert sequences == list(range(queue_id, count, QUEUES)), queue_id


def test_a_same_time_backlog_is_delivered_once_in_order_while_other_puts_complete(timers):
    count = 30_000
    park_backlog(timers, count, T0 + 1000)
    timers.now = T0 + 1000
    puts_during_release = 0
    releasing = True

    async def other_traffic() -> None:
        nonlocal puts_during_release
        while releasing:
            before = delivered_count(timers)
            result = await timers.store.put_messages_async([Message("other", b"x")])
            assert result.ok
            if before > 0 and delivered_count(timers) < count:
                puts_during_release += 1

    async def release() -> bool:
        nonlocal releasing
        other = asyncio.ensure_future(other_traffic())
        delivered = await timers.service.deliver_due()
        releasing = False
        await other
        return delivered

    assert timers.loop.run_until_complete(release())
    assert timers.service.pending == 0 and timers.service.delivered == count
    assert_each_once_in_order(timers, count)
    assert puts_during_release >= 1
    # Each batch is one append: many batches, none larger than the bound.
    done = timers.store.get_messages("%SYS%TIMER_DONE", 0, 0, 100_000).messages
    sizes = [len(record.body.split(b",")) for record in done]
    assert sum(sizes) == count and max(sizes) <= DELIVERY_CHUNK


def test_a_failed_batch_in_the_middle_of_a_backlog_keeps_the_order(timers, monkeypatch):
    from store.results import PutResult, PutStatus

    count = DELIVERY_CHUNK * 10
    park_backlog(timers, count, T0)
    real_put = timers.store.put_messages_async
    calls = 0

    async def third_fails(messages):
        nonlocal calls
        calls += 1
        if calls == 3:
            return PutResult(PutStatus.DISK_FULL, error="no space")
        return await real_put(messages)

    monkeypatch.setattr(timers.store, "put_messages_async", third_fails)
    assert not timers.deliver()
    assert timers.service.pending == count - 2 * DELIVERY_CHUNK
    assert timers.deliver()
    assert timers.service.pending == 0
    assert_each_once_in_order(timers, count)


def test_large_messages_due_together_go_in_batches_that_fit(timers):
    # 40 x 256 KiB is more than one append may carry here (the 8 MiB segment bounds it).
    count = 40
    park_backlog(timers, count, T0, body_bytes=256 * 1024)
    assert timers.deliver()
    assert timers.service.pending == 0
    assert_each_once_in_order(timers, count)


def test_a_cancelled_put_in_the_same_turn_does_not_stall_delivery(timers):
    """A client that goes away cancels its put; the timer's batch appended in the same loop
    turn must still get its answer."""
    park_backlog(timers, 3, T0)

    async def scenario() -> bool:
        other = asyncio.ensure_future(timers.store.put_messages_async([Message("other", b"x")]))
        delivery = asyncio.ensure_future(timers.service.deliver_due())
        await asyncio.sleep(0)  # both have submitted their puts
        other.cancel()
        return await asyncio.wait_for(delivery, 10)

    assert timers.loop.run_until_complete(scenario())
    assert_each_once_in_order(timers, 3)


# ---- through a real node ---------------------------------------------------------------
NODE_BACKLOG = 20_000
PER_REQUEST = 500


def delayed_requests(count: int, due_ms: int) -> list[rpc.SendMessageRequest]:
    requests = []
    for queue_id in range(QUEUES):
        sequences = list(range(queue_id, count, QUEUES))
        for start in range(0, len(sequences), PER_REQUEST):
            messages = []
            for s in sequences[start : start + PER_REQUEST]:
                sent = message("backlog", b"%08d" % s, f"B{s:08d}", message_type=pb.DELAY)
                sent.system_properties.queue_id = queue_id
                sent.system_properties.delivery_timestamp.seconds = due_ms // 1000
                sent.system_properties.delivery_timestamp.nanos = (due_ms % 1000) * 1_000_000
                messages.append(sent)
            requests.append(rpc.SendMessageRequest(messages=messages))
    return requests


def released(admin) -> int:
    answer = admin.DescribeTopic(api.DescribeTopicRequest(name="backlog"))
    return sum(queue.max_offset for queue in answer.queues)


def read_all(address: str) -> dict[int, list[tuple[int, int]]]:
    """Every message of the backlog topic per queue: (sequence, store time ms)."""
    found: dict[int, list[tuple[int, int]]] = {}
    with grpc.insecure_channel(address) as channel:
        fetch = data_pb2_grpc.DataStub(channel)
        for queue_id in range(QUEUES):
            found[queue_id] = []
            offset = 0
            while True:
                request = data.FetchRequest(
                    group="G", topic="backlog", queue_id=queue_id, offset=offset, max_messages=4096
                )
                answer = fetch.Fetch(request)
                if not answer.count:
                    break
                for record in decode_records(answer.records):
                    found[queue_id].append((int(record.body), record.store_timestamp_ms))
                offset = answer.next_offset
    return found


def test_sigkill_in_the_middle_of_a_backlog_release_neither_loses_nor_duplicates(tmp_path):
    data_dir = str(tmp_path / "node")
    node = start_node(data_dir)
    try:
        _, messaging, admin = stubs(node.address)
        create_topic(admin, "backlog", queues=QUEUES, message_type=api.DELAY)
        create_topic(admin, "other", queues=1)
        create_group(admin, "G")
        # Pick a due time the whole backlog is sent well before, from how fast this
        # machine sends right now (a send after it would not be parked at all).
        sizing = [message("other", b"%08d" % i, f"S{i:08d}") for i in range(2000)]
        started = time.monotonic()
        for start in range(0, len(sizing), PER_REQUEST):
            request = rpc.SendMessageRequest(messages=sizing[start : start + PER_REQUEST])
            assert messaging.SendMessage(request).status.code == pb.OK
        send_s = (time.monotonic() - started) * NODE_BACKLOG / len(sizing)
        due_ms = int((time.time() + 1.5 + 4 * send_s) * 1000)
        for request in delayed_requests(NODE_BACKLOG, due_ms):
            assert messaging.SendMessage(request).status.code == pb.OK
        assert time.time() * 1000 < due_ms, "the backlog was not sent before its due time"

        deadline = time.monotonic() + 60
        while released(admin) == 0:  # the release has started
            assert time.monotonic() < deadline, "nothing released"
        # Other traffic is served while the release goes on.
        extra = rpc.SendMessageRequest(messages=[message("other", b"during", "DURING")])
        assert messaging.SendMessage(extra).status.code == pb.OK
        assert released(admin) < NODE_BACKLOG, "the release ended before the send returned"
        node.sigkill()
        killed_ms = time.time() * 1000

        node = start_node(data_dir)
        _, messaging, admin = stubs(node.address)
        deadline = time.monotonic() + 60
        while released(admin) < NODE_BACKLOG:
            assert time.monotonic() < deadline, f"{released(admin)} of {NODE_BACKLOG}"
        found = read_all(node.address)
        before = sum(1 for q in found.values() for _, stored in q if stored < killed_ms)
        assert 0 < before < NODE_BACKLOG  # the kill did come in the middle
        for queue_id, records in found.items():
            sequences = [sequence for sequence, _ in records]
            assert sequences == list(range(queue_id, NODE_BACKLOG, QUEUES)), queue_id
            assert all(stored >= due_ms for _, stored in records)  # never early
        # Nothing more comes: no duplicate waits behind the last one.
        with grpc.insecure_channel(node.address) as channel:
            fetch = data_pb2_grpc.DataStub(channel)
            for queue_id in range(QUEUES):
                answer = fetch.Fetch(
                    data.FetchRequest(
                        group="G",
                        topic="backlog",
                        queue_id=queue_id,
                        offset=len(found[queue_id]),
                        wait_ms=200,
                    )
                )
                assert answer.count == 0, queue_id
    finally:
        node.sigkill()
