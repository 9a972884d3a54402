"""ferrymq's SDK against a real node process."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferrymq.client import (
    Admin,
    FerryError,
    LiteConsumer,
    Message,
    Producer,
    PullConsumer,
    SimpleConsumer,
)
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc


@pytest.fixture
def admin(address):
    with Admin(address) as client:
        yield client


def drain(consumer: PullConsumer, count: int, deadline_s: float = 10) -> list:
    got = []
    deadline = time.monotonic() + deadline_s
    while len(got) < count and time.monotonic() < deadline:
        got.extend(consumer.poll(wait_s=0.5))
    return got


def test_produce_sync_async_batch_then_pull_commit_and_resume(address, admin):
    admin.create_topic("sdk-orders", queue_count=3)
    admin.create_group("sdk-readers")
    with Producer(address) as producer:
        single = producer.send(Message("sdk-orders", b"one", tag="A", keys=["k1"]))
        batch = producer.send_batch([Message("sdk-orders", b"b%d" % i) for i in range(5)])

        async def send_some():
            return await asyncio.gather(
                *(producer.send_async(Message("sdk-orders", b"a%d" % i)) for i in range(4))
            )

        receipts = asyncio.run(send_some())
    assert len({single.message_id, *(r.message_id for r in batch + receipts)}) == 10
    assert [r.queue_offset for r in batch] == list(
        range(batch[0].queue_offset, batch[0].queue_offset + 5)
    )

    with PullConsumer(address, "sdk-readers") as consumer:
        consumer.assign("sdk-orders", [0, 1, 2])
        first = drain(consumer, 10)
        assert sorted(m.body for m in first) == sorted(
            [b"one"] + [b"b%d" % i for i in range(5)] + [b"a%d" % i for i in range(4)]
        )
        one = next(m for m in first if m.body == b"one")
        assert one.tag == "A" and one.keys == ["k1"] and one.message_id == single.message_id
        consumer.commit()

    with Producer(address) as producer:
        producer.send(Message("sdk-orders", b"after-commit"))
    with PullConsumer(address, "sdk-readers") as again:
        again.assign("sdk-orders", [0, 1, 2])
        assert [m.body for m in drain(again, 1)] == [b"after-commit"]  # resumed, not replayed
    progress = admin.group_progress("sdk-readers", "sdk-orders")
    assert sum(q.lag for q in progress) == 1  # "after-commit" was read but not committed


def test_a_consumer_assigned_another_topic_reads_it_from_its_own_start(address, admin):
    """Positions were kept by ``QueueRef`` alone (a broker group and a queue id): a
    consumer assigned another topic read it from the offsets reached in the last one."""
    admin.create_topic("sdk-first", queue_count=1)
    admin.create_topic("sdk-second", queue_count=1)
    admin.create_group("sdk-switchers")
    with Producer(address) as producer:
        producer.send_batch([Message("sdk-first", b"first-%d" % i) for i in range(3)])
        producer.send_batch([Message("sdk-second", b"second-%d" % i) for i in range(2)])
    with PullConsumer(address, "sdk-switchers", start="beginning") as consumer:
        consumer.assign("sdk-first", [0])
        assert len(drain(consumer, 3)) == 3
        consumer.assign("sdk-second", [0])
        assert [m.body for m in drain(consumer, 2)] == [b"second-0", b"second-1"]
    progress = admin.group_progress("sdk-switchers", "sdk-first")
    assert sum(q.lag for q in progress) == 0  # what was read of the first was committed


def test_fifo_messages_keep_their_group_order(address, admin):
    admin.create_topic("sdk-fifo", queue_count=4, message_type="FIFO")
    admin.create_group("sdk-fifo-readers")
    with Producer(address) as producer:
        for i in range(10):
            producer.send(Message("sdk-fifo", b"%d" % i, message_group=f"g{i % 3}"))
    with PullConsumer(address, "sdk-fifo-readers") as consumer:
        consumer.assign("sdk-fifo", [0, 1, 2, 3])
        got = drain(consumer, 10)
    for group in ("g0", "g1", "g2"):
        bodies = [int(m.body) for m in got if m.message_group == group]
        assert bodies == sorted(bodies) and bodies


def test_group_members_share_queues_and_rebalance_when_one_leaves(address, admin):
    admin.create_topic("sdk-shared", queue_count=4)
    admin.create_group("sdk-shared-group")
    first = PullConsumer(address, "sdk-shared-group")
    second = PullConsumer(address, "sdk-shared-group")
    try:
        first.subscribe("sdk-shared")
        second.subscribe("sdk-shared")
        first.rebalance()  # now it knows about the second member
        ids = sorted(q.queue_id for q in first.assignment + second.assignment)
        assert ids == [0, 1, 2, 3]
        assert {q.broker_group for q in first.assignment} == {"group-1"}
        assert len(first.assignment) == 2 and len(second.assignment) == 2
        assert len(admin.group_members("sdk-shared-group")) == 2
        with Producer(address) as producer:
            for queue_round in range(8):
                producer.send(Message("sdk-shared", b"%d" % queue_round))
        got = drain(first, 4) + drain(second, 4)
        assert sorted(int(m.body) for m in got) == list(range(8))
        first.commit()
        second.close()
        first.rebalance()
        assert [q.queue_id for q in first.assignment] == [0, 1, 2, 3]
    finally:
        first.close()


def test_lite_consumer_receives_its_lite_topics_and_tells_a_master_that_forgot(
    address, admin, monkeypatch
):
    """The SDK's lite topics: a producer names each message's lite topic; a LiteConsumer
    receives the lite topics it subscribed to, in order, acks and changes them; a master
    that no longer holds its set (here: the client left, as after a failover the new master
    never heard it) is told the whole set again before the next receive."""
    from ferrymq.client import lite_consumer

    admin.create_topic("sdk-lite", queue_count=2, message_type="LITE")
    with Producer(address) as producer:
        for i in range(3):
            for lite in ("chat-1", "chat-2"):
                producer.send(Message("sdk-lite", b"%s-%d" % (lite.encode(), i), lite_topic=lite))
    with LiteConsumer(address, "sdk-lite-group", "sdk-lite") as consumer:
        consumer.subscribe(["chat-1"])
        got = consumer.receive(max_messages=10, invisible_s=30, wait_s=2)
        assert [m.body for m in got] == [b"chat-1-0", b"chat-1-1", b"chat-1-2"]
        assert {m.lite_topic for m in got} == {"chat-1"}
        consumer.change_invisible_duration(got[0], 60)
        for message in got:
            consumer.ack(message)
        master = consumer.connection
        left = master.call(
            master.messaging.NotifyClientTermination,
            rpc.NotifyClientTerminationRequest(group=pb.Resource(name="sdk-lite-group")),
        )
        assert left.status.code == pb.OK
        with Producer(address) as producer:
            producer.send(Message("sdk-lite", b"chat-1-3", lite_topic="chat-1"))
        monkeypatch.setattr(lite_consumer, "RESYNC_S", 0.0)
        again = consumer.receive(max_messages=10, invisible_s=30, wait_s=2)
        assert [m.body for m in again] == [b"chat-1-3"]  # not chat-2: never subscribed
    # A LITE topic's progress is per lite topic, counted in messages: chat-1's first three
    # acked, its fourth in flight; chat-2 never received.
    progress = {q.topic: q for q in admin.group_progress("sdk-lite-group", "sdk-lite")}
    assert sorted(progress) == ["%LMQ%$sdk-lite$chat-1", "%LMQ%$sdk-lite$chat-2"]
    chat_1, chat_2 = progress["%LMQ%$sdk-lite$chat-1"], progress["%LMQ%$sdk-lite$chat-2"]
    assert (chat_1.broker_offset, chat_1.consumer_offset, chat_1.lag, chat_1.in_flight) == (
        4,
        3,
        1,
        1,
    )
    assert (chat_2.broker_offset, chat_2.consumer_offset, chat_2.lag, chat_2.in_flight) == (
        3,
        0,
        3,
        0,
    )


def test_priority_messages_are_received_highest_priority_first(address, admin):
    """A PRIORITY topic's queue is its message's priority; a receive takes the highest
    first, and the SDK reads each message's priority back."""
    admin.create_topic("sdk-priority", queue_count=4, message_type="PRIORITY")
    with Producer(address) as producer:
        for priority in (0, 3, 1, 2, 3):
            producer.send(Message("sdk-priority", b"p%d" % priority, priority=priority))
    with SimpleConsumer(address, "sdk-priority-group", "sdk-priority") as consumer:
        got = consumer.receive(max_messages=10, invisible_s=30, wait_s=2)
    assert [m.priority for m in got] == [3, 3, 2, 1, 0]
    assert [m.queue_id for m in got] == [3, 3, 2, 1, 0]
    assert [m.body for m in got] == [b"p3", b"p3", b"p2", b"p1", b"p0"]


def test_simple_consumer_receive_ack_and_change(address, admin):
    admin.create_topic("sdk-pop", queue_count=2)
    admin.create_group("sdk-pop-group")
    with Producer(address) as producer:
        for i in range(3):
            producer.send(Message("sdk-pop", b"%d" % i))
    with SimpleConsumer(address, "sdk-pop-group", "sdk-pop") as consumer:
        got = consumer.receive(max_messages=10, invisible_s=30, wait_s=2)
        assert sorted(m.body for m in got) == [b"0", b"1", b"2"]
        assert all(m.delivery_attempt == 1 and m.receipt_handle for m in got)
        old_handle = got[0].receipt_handle
        consumer.change_invisible_duration(got[0], 60)
        assert got[0].receipt_handle != old_handle
        for message in got:
            consumer.ack(message)
        assert consumer.receive(wait_s=0) == []
        got[1].receipt_handle = "forged"
        with pytest.raises(FerryError) as refused:
            consumer.ack(got[1])
        assert refused.value.code_name == "INVALID_RECEIPT_HANDLE"


def test_errors_are_precise(address, admin):
    with Producer(address) as producer:
        with pytest.raises(FerryError) as missing:
            producer.send(Message("sdk-nowhere", b"x"))
        assert missing.value.code_name == "TOPIC_NOT_FOUND" and not missing.value.retriable
        with pytest.raises(FerryError) as bad_name:
            producer.send(Message("bad name", b"x"))
        assert bad_name.value.code_name == "ILLEGAL_TOPIC"
        admin.create_topic("sdk-small")
        with pytest.raises(FerryError) as too_big:
            producer.send(Message("sdk-small", b"x" * (4 * 1024 * 1024 + 1)))
        assert too_big.value.code_name == "MESSAGE_BODY_TOO_LARGE"
        # A lone surrogate has no UTF-8 form: refused before sending, on both send paths
        # (Data.Produce for NORMAL topics, SendMessage for DELAY ones).
        admin.create_topic("sdk-delay", message_type="DELAY")
        lone = "\ud800"
        for message in (
            Message("sdk-small", b"x", tag=lone),
            Message("sdk-small", b"x", keys=[lone]),
            Message("sdk-small", b"x", properties={"p": lone}),
            Message("sdk-delay", b"x", tag=lone, delivery_time_ms=1),
            Message("sdk-delay", b"x", properties={lone: "v"}, delivery_time_ms=1),
        ):
            with pytest.raises(FerryError) as surrogate:
                producer.send(message)
            assert surrogate.value.code_name == "BAD_REQUEST"
            assert "not valid Unicode" in surrogate.value.detail
    with pytest.raises(FerryError) as exists:
        admin.create_topic("sdk-small")
    assert exists.value.code_name == "ALREADY_EXISTS"
    with pytest.raises(FerryError) as unknown_group:
        admin.group_progress("sdk-no-group", "sdk-small")
    assert unknown_group.value.code_name == "NOT_FOUND"
    with Producer("127.0.0.1:1", max_attempts=2, timeout_s=1) as nowhere:
        with pytest.raises(FerryError) as down:
            nowhere.send(Message("t", b"x"))
        assert down.value.code_name == "UNAVAILABLE" and down.value.retriable
