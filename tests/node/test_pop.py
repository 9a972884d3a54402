"""POP consumption logic in-process, with an injected clock: invisibility, redelivery,
stale handles, change of invisibility, dead letters, FIFO groups, tag filters, failed
appends, and replay of the state from the log after an abrupt stop."""

from __future__ import annotations

import asyncio
import random
import time
import zlib

import pytest

from ferrymq.codec.properties import PROPERTY_LITE_TOPIC
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from node import system_state
from node.handle_key import receipt_handle_key
from node.lite_names import lmq_name
from node.pop_state import PopState
from node.receipt_handle import ReceiptHandle, ReceiptHandles
from node.services.admin import AdminRefused
from node.services.caller import Caller, Door
from node.services.offset_reset import ResetRequest, ResetTarget
from node.services.pop import ACK_ENTRIES_MAX, PopFailed
from node.topics import GroupConfig, MessageType, TopicConfig
from store.message import Message
from store.results import PutResult, PutStatus
from tests.support.pop_broker import (
    CLUSTER_SECRET,
    Broker,
    closed,
    opened_broker,
    reset_service,
)


@pytest.fixture
def broker(tmp_path):
    created = opened_broker(tmp_path)
    yield created
    closed(created)


def bodies(deliveries) -> list[bytes]:
    return [d.stored.body for d in deliveries]


def test_receive_makes_messages_invisible_until_acked_or_expired(broker):
    broker.send("orders", 3, queue_id=0)
    first = broker.receive("G", "orders")
    assert bodies(first) == [b"body-0", b"body-1", b"body-2"]
    assert [d.attempt for d in first] == [1, 1, 1]
    assert broker.receive("G", "orders") == []  # invisible

    assert broker.ack("G", "orders", first[0].handle).status.code == pb.OK
    broker.clock.ms += 10_000  # the other two become visible again
    again = broker.receive("G", "orders")
    assert bodies(again) == [b"body-1", b"body-2"]
    assert [d.attempt for d in again] == [2, 2]
    broker.state.check()


def test_a_handle_of_an_earlier_delivery_is_stale(broker):
    broker.send("orders", 1)
    (first,) = broker.receive("G", "orders")
    broker.clock.ms += 10_000
    (second,) = broker.receive("G", "orders")
    stale = broker.ack("G", "orders", first.handle)
    assert stale.status.code == pb.INVALID_RECEIPT_HANDLE
    assert "stale" in stale.status.message
    assert broker.ack("G", "orders", second.handle).status.code == pb.OK
    assert broker.ack("G", "orders", second.handle).status.code == pb.INVALID_RECEIPT_HANDLE


def test_an_expired_but_not_redelivered_handle_still_acks(broker):
    broker.send("orders", 1)
    (delivery,) = broker.receive("G", "orders")
    broker.clock.ms += 60_000
    assert broker.ack("G", "orders", delivery.handle).status.code == pb.OK
    assert broker.receive("G", "orders") == []


def old_format(queue_id: int, offset: int, delivery: str) -> str:
    """A handle as the first format wrote it (a CRC32 anyone can compute)."""
    text = f"{queue_id}.{offset}.{delivery}"
    return f"{text}.{zlib.crc32(text.encode()):08x}"


def issued(broker, queue_id: int, offset: int, delivery: str, topic="orders", group="G") -> str:
    return broker.handles.encode(ReceiptHandle(queue_id, offset, delivery), topic, group)


@pytest.mark.parametrize(
    "make_handle",
    [
        lambda broker: "",
        lambda broker: "garbage",
        lambda broker: "0.0.0123456789abcdef.00000000",  # wrong checksum
        lambda broker: old_format(0, 0, "0123456789abcdef"),  # forged, old format
        lambda broker: "h2.0.0.0123456789abcdef." + "0" * 32,  # forged MAC
        lambda broker: "h2.0.0.0123456789abcdef." + "0" * 200,  # too long
        lambda broker: issued(broker, 0, 0, "0123456789abcdef"),  # never delivered
        lambda broker: issued(broker, 7, 0, "0123456789abcdef"),  # no such queue
    ],
)
def test_malformed_forged_and_unknown_handles_are_invalid(broker, make_handle):
    handle = make_handle(broker)
    broker.send("orders", 1)
    broker.receive("G", "orders")
    answer = broker.ack("G", "orders", handle)
    assert answer.status.code == pb.INVALID_RECEIPT_HANDLE
    assert answer.entries[0].status.code == pb.INVALID_RECEIPT_HANDLE
    changed = broker.change("G", "orders", handle, 5)
    assert changed.status.code == pb.INVALID_RECEIPT_HANDLE
    assert changed.receipt_handle == handle  # the official client reads it first


def test_ack_with_good_and_bad_entries_answers_multiple_results(broker):
    broker.send("orders", 2)
    deliveries = broker.receive("G", "orders")
    answer = broker.ack("G", "orders", deliveries[0].handle, "garbage")
    assert answer.status.code == pb.MULTIPLE_RESULTS
    assert [e.status.code for e in answer.entries] == [pb.OK, pb.INVALID_RECEIPT_HANDLE]


def test_change_invisible_duration_returns_a_new_handle_and_moves_the_time(broker):
    broker.send("orders", 1)
    (delivery,) = broker.receive("G", "orders")
    changed = broker.change("G", "orders", delivery.handle, 60)
    assert changed.status.code == pb.OK and changed.receipt_handle != delivery.handle
    broker.clock.ms += 30_000  # past the first invisibility, before the new one
    assert broker.receive("G", "orders") == []
    assert broker.ack("G", "orders", delivery.handle).status.code == pb.INVALID_RECEIPT_HANDLE
    broker.clock.ms += 30_001
    (again,) = broker.receive("G", "orders")
    assert again.attempt == 2  # a change is not a delivery
    short = broker.change("G", "orders", again.handle, 0)
    assert short.status.code == pb.ILLEGAL_INVISIBLE_TIME


def test_after_max_attempts_the_message_goes_to_the_dead_letter_topic(broker):
    broker.send("orders", 1, tags="TagA", keys=["order-1"])
    for attempt in (1, 2, 3):
        (delivery,) = broker.receive("G", "orders")
        assert delivery.attempt == attempt
        broker.clock.ms += 10_000
    assert broker.receive("G", "orders") == []  # attempts used up: dead-lettered instead
    assert broker.dead_letters("G") == [b"body-0"]
    (dead,) = broker.store.get_messages("%DLQ%G", 0, 0, 1).messages
    assert dead.tags == "TagA" and dead.keys == ["order-1"] and dead.reconsume_times == 3
    assert dead.properties["DLQ_ORIGIN_TOPIC"] == "orders"
    assert broker.topics.topic("%DLQ%G").queue_count == 1
    broker.clock.ms += 10_000
    assert broker.receive("G", "orders") == []
    broker.state.check()


def test_an_in_flight_message_beyond_the_read_cap_is_redelivered_not_dropped(broker):
    """After a promotion the read cap trails the log until the slaves ack; a delivery
    already in flight must be retried, not acked as if retention had removed it."""
    broker.send("orders", 1, queue_id=0)
    (first,) = broker.receive("G", "orders")
    broker.store.set_confirmed_offset(0, new_epoch=True)  # a promoted master before its acks
    broker.clock.ms += 10_000
    (again,) = broker.receive("G", "orders")
    assert again.stored.body == first.stored.body and again.attempt == 2
    broker.state.check()


def test_an_in_flight_message_not_readable_for_a_moment_is_kept_not_acked(broker, caplog):
    """A delivery whose message cannot be read at the moment of its redelivery (its
    queue entry not there yet; the queue still holds the offset) stays in flight and is
    redelivered once readable. Ending it, as for a message retention removed, lost it for
    the group: its cursor is past it (one way the 30-minute chaos runs could end with
    acknowledged messages never delivered to a POP group)."""
    broker.send("orders", 3, queue_id=0)
    first = broker.receive("G", "orders")
    assert [d.stored.queue_offset for d in first] == [0, 1, 2]
    broker.clock.ms += 10_000
    read = broker.service._read
    broker.service._read = lambda topic, queue, offset: (
        None if offset == 1 else read(topic, queue, offset)
    )
    again = broker.receive("G", "orders")
    assert [d.stored.queue_offset for d in again] == [0, 2]
    assert "in-flight offset 1 not readable" in caplog.text
    broker.service._read = read
    (third,) = broker.receive("G", "orders")
    assert third.stored.queue_offset == 1 and third.attempt == 2
    broker.state.check()


def test_an_in_flight_message_removed_by_retention_ends_its_delivery(broker):
    broker.send("orders", 2, queue_id=0)
    broker.receive("G", "orders")
    broker.clock.ms += 10_000
    broker.store.min_offset_in_queue = lambda topic, queue: 1  # offset 0 deleted
    broker.service._read = lambda topic, queue, offset: None  # nothing readable
    assert broker.receive("G", "orders") == []
    cursor = broker.state.cursor(("G", "orders", 0))
    assert sorted(cursor.in_flight) == [1]


def test_forward_to_dead_letter_queue_is_idempotent(broker):
    broker.send("orders", 1)
    (first,) = broker.receive("G", "orders")
    broker.clock.ms += 10_000
    (second,) = broker.receive("G", "orders")
    # A handle of an earlier delivery changes nothing; the official FIFO consumer
    # repeats the forward of the current one until it hears OK.
    stale = broker.forward("G", "orders", first.handle)
    assert stale.status.code == pb.INVALID_RECEIPT_HANDLE and "stale" in stale.status.message
    assert broker.dead_letters("G") == []
    assert broker.forward("G", "orders", second.handle).status.code == pb.OK
    assert broker.forward("G", "orders", second.handle).status.code == pb.OK
    assert broker.dead_letters("G") == [b"body-0"]
    assert broker.forward("G", "orders", "garbage").status.code == pb.INVALID_RECEIPT_HANDLE
    broker.clock.ms += 10_000
    assert broker.receive("G", "orders") == []


def test_a_forged_handle_dead_letters_nothing(broker):
    """Issue 25: a handle with a checksum anyone can compute dead-lettered another
    consumer's in-flight message, since the forward did not check the delivery."""
    broker.send("orders", 1)
    (delivery,) = broker.receive("G", "orders")
    for forged in (
        old_format(0, 0, "0123456789abcdef"),
        "h2.0.0.0123456789abcdef." + "0" * 32,
    ):
        answer = broker.forward("G", "orders", forged)
        assert answer.status.code == pb.INVALID_RECEIPT_HANDLE, forged
    assert broker.dead_letters("G") == []
    assert broker.ack("G", "orders", delivery.handle).status.code == pb.OK  # still its own


def test_a_handle_of_one_group_or_topic_is_refused_for_another(broker):
    broker.topics.put_group(GroupConfig("H", max_delivery_attempts=3))
    broker.topics.put_topic(TopicConfig("invoices", queue_count=2))
    broker.send("orders", 1)
    (of_g,) = broker.receive("G", "orders")
    (of_h,) = broker.receive("H", "orders")
    for group, topic in (("H", "orders"), ("G", "invoices")):
        acked = broker.ack(group, topic, of_g.handle)
        assert acked.status.code == pb.INVALID_RECEIPT_HANDLE
        assert "not issued by this cluster for this topic and group" in acked.status.message
        changed = broker.change(group, topic, of_g.handle, 30)
        assert changed.status.code == pb.INVALID_RECEIPT_HANDLE
        forwarded = broker.forward(group, topic, of_g.handle)
        assert forwarded.status.code == pb.INVALID_RECEIPT_HANDLE
    assert broker.dead_letters("H") == [] and broker.dead_letters("G") == []
    assert broker.ack("H", "orders", of_h.handle).status.code == pb.OK
    assert broker.ack("G", "orders", of_g.handle).status.code == pb.OK


def test_an_old_format_handle_is_refused_saying_so_and_the_message_comes_back(broker):
    broker.send("orders", 1)
    (delivery,) = broker.receive("G", "orders")
    fields = broker.handles.decode(delivery.handle, "orders", "G")
    old = old_format(fields.queue_id, fields.queue_offset, fields.delivery)
    for answer in (
        broker.ack("G", "orders", old),
        broker.change("G", "orders", old, 30),
        broker.forward("G", "orders", old),
    ):
        assert answer.status.code == pb.INVALID_RECEIPT_HANDLE
        assert "old-format receipt handle" in answer.status.message
    assert broker.dead_letters("G") == []
    broker.clock.ms += 10_000  # its invisibility ends: delivered again
    (again,) = broker.receive("G", "orders")
    assert again.stored.body == delivery.stored.body and again.attempt == 2


def test_handles_verify_on_another_node_with_the_same_cluster_secret(broker, tmp_path):
    """A new master replays the same POP state and derives the same key from the cluster
    secret (its own data directory holds no key): the old master's handles still act."""
    broker.send("orders", 2)
    first, second = broker.receive("G", "orders")
    broker.store.close_abruptly_for_tests()
    broker.handles = ReceiptHandles(receipt_handle_key(CLUSTER_SECRET, str(tmp_path / "other")))
    broker.open()
    assert broker.ack("G", "orders", first.handle).status.code == pb.OK
    broker.store.close_abruptly_for_tests()
    broker.handles = ReceiptHandles(receipt_handle_key("another-secret", str(tmp_path)))
    broker.open()
    refused = broker.ack("G", "orders", second.handle)
    assert refused.status.code == pb.INVALID_RECEIPT_HANDLE
    assert "not issued by this cluster" in refused.status.message


def test_an_ack_of_too_many_entries_is_refused_before_any_is_looked_at(broker):
    broker.send("orders", 1)
    (delivery,) = broker.receive("G", "orders")
    too_many = [delivery.handle] * (ACK_ENTRIES_MAX + 1)
    answer = broker.ack("G", "orders", *too_many)
    assert answer.status.code == pb.BAD_REQUEST
    assert f"the limit is {ACK_ENTRIES_MAX}" in answer.status.message
    assert broker.ack("G", "orders", delivery.handle).status.code == pb.OK  # not acked before


def test_fifo_group_delivers_a_queue_in_order_with_one_batch_in_flight(broker):
    broker.topics.put_topic(TopicConfig("fifo", queue_count=1, message_type=MessageType.FIFO))
    broker.topics.put_group(GroupConfig("F", max_delivery_attempts=5, fifo=True))
    for i in range(6):
        group = "a" if i % 2 else "b"
        message = Message.build("fifo", b"%d" % i, properties={"__SHARDINGKEY": group})
        assert broker.store.put_message(message).ok
    first = broker.receive("F", "fifo", batch=3)
    assert bodies(first) == [b"0", b"1", b"2"]
    assert broker.receive("F", "fifo") == []  # the queue is held while the batch is out
    broker.ack("F", "fifo", first[0].handle, first[2].handle)
    assert broker.receive("F", "fifo") == []  # "1" still in flight: "3" must wait
    broker.clock.ms += 10_000
    again = broker.receive("F", "fifo", batch=3)  # "1" comes back first, then the rest
    assert bodies(again) == [b"1", b"3", b"4"] and again[0].attempt == 2


def test_normal_group_keeps_delivering_while_others_are_in_flight(broker):
    broker.send("orders", 2)
    assert bodies(broker.receive("G", "orders", batch=1)) == [b"body-0"]
    assert bodies(broker.receive("G", "orders", batch=1)) == [b"body-1"]


def test_tag_filter_delivers_matching_messages_and_skips_the_rest(broker):
    for i, tag in enumerate(["TagA", "TagB", "TagC", "TagA"]):
        assert broker.store.put_message(Message.build("orders", b"%d" % i, tags=tag)).ok
    picked = broker.receive("G", "orders", tags=["TagA", "TagC"])
    assert bodies(picked) == [b"0", b"2", b"3"]
    for delivery in picked:
        broker.ack("G", "orders", delivery.handle)
    cursor = broker.state.cursor(("G", "orders", 0))
    assert cursor.consumed_below == 4 and not cursor.in_flight  # TagB skipped, consumed


def test_groups_are_independent_and_start_at_a_committed_offset(broker):
    broker.topics.put_group(GroupConfig("H"))
    broker.send("orders", 5)
    broker.run(broker.offsets.commit("H", "orders", 0, 3))
    assert len(broker.receive("G", "orders")) == 5
    assert bodies(broker.receive("H", "orders")) == [b"body-3", b"body-4"]


def test_the_whole_topic_is_popped_across_queues(broker):
    broker.send("orders", 2, queue_id=0)
    broker.send("orders", 2, queue_id=1)
    picked = broker.receive("G", "orders")
    assert sorted((d.stored.queue_id, d.stored.queue_offset) for d in picked) == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ]


def test_a_failed_append_is_undone_and_reported(broker, monkeypatch):
    broker.send("orders", 2)
    (kept,) = broker.receive("G", "orders", batch=1)

    async def disk_full(records):
        return PutResult(PutStatus.DISK_FULL, error="no space left on device")

    monkeypatch.setattr(broker.state, "append", disk_full)
    refused = broker.ack("G", "orders", kept.handle)
    assert refused.status.code == pb.INTERNAL_SERVER_ERROR
    assert "no space" in refused.status.message
    with pytest.raises(Exception, match="no space"):
        broker.receive("G", "orders")  # body-1 popped in memory, then made visible again
    monkeypatch.undo()
    assert broker.ack("G", "orders", kept.handle).status.code == pb.OK  # still in flight
    assert bodies(broker.receive("G", "orders")) == [b"body-1"]


def test_failed_pops_do_not_use_up_attempts(broker, monkeypatch):
    """A node that cannot append (a master without enough in-sync replicas) answers every
    receive with an error; those pops reached nobody, so they must not count towards the
    group's max attempts (3 here): otherwise a few seconds of refusals dead-letter
    messages no consumer ever saw, and a FIFO group skips them."""
    broker.send("orders", 2, queue_id=0)
    assert len(broker.receive("G", "orders", batch=1)) == 1
    broker.clock.ms += 10_000

    async def refused(records):
        return PutResult(PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH, error="1 in-sync replica")

    monkeypatch.setattr(broker.state, "append", refused)
    for _ in range(5):
        with pytest.raises(Exception, match="in-sync"):
            broker.receive("G", "orders")
    monkeypatch.undo()
    again = broker.receive("G", "orders")
    assert [(d.stored.body, d.attempt) for d in again] == [(b"body-0", 2), (b"body-1", 1)]
    assert broker.dead_letters("G") == []
    broker.state.check()


def test_a_pop_of_older_messages_does_not_move_the_logs_cursor_past_refused_new_ones(
    broker, monkeypatch
):
    """A refused pop of new messages leaves them in flight in memory only, past a cursor
    the log has not moved. A later pop that redelivers older messages (a full batch of
    them) writes memory's cursor into the log: unless the refused ones are restated in
    the same batch, a restart or failover loses them for the group. A 30-minute chaos run
    (sync-async-flush) ended with 15 acknowledged messages of one queue never delivered to
    one POP group; its history fits this sequence: a receive whose answer was lost, the
    next 16 offsets never delivered, the first 16 redelivered as a full batch, restart-all."""
    broker.send("orders", 4, queue_id=0)
    first = broker.receive("G", "orders", batch=2)  # its answer lost on the way
    assert [d.stored.queue_offset for d in first] == [0, 1]

    async def refused(records):
        return PutResult(PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH, error="1 in-sync replica")

    monkeypatch.setattr(broker.state, "append", refused)
    with pytest.raises(PopFailed, match="in-sync"):
        broker.receive("G", "orders", batch=2)  # pops 2 and 3: refused
    monkeypatch.undo()
    broker.clock.ms += 10_000  # 0 and 1 visible again
    again = broker.receive("G", "orders", batch=2)
    assert [(d.stored.queue_offset, d.attempt) for d in again] == [(0, 2), (1, 2)]
    broker.crash_and_reopen()
    broker.clock.ms += 10_000
    after = broker.receive("G", "orders", batch=8)
    assert sorted((d.stored.queue_offset, d.attempt) for d in after) == [
        (0, 3),
        (1, 3),
        (2, 1),
        (3, 1),
    ]
    broker.state.check()


def test_pops_written_but_not_confirmed_do_not_use_up_attempts(broker, monkeypatch):
    """A master cut off from its slaves writes each pop but cannot confirm it, and answers
    the receive with an error: no consumer has those messages, so the pops must not count
    towards the group's max attempts (3 here), in memory or in the log. Before the
    hand-back, a chaos run dead-lettered two acknowledged sends that no consumer of the
    group had ever received."""
    broker.send("orders", 2, queue_id=0)
    first = broker.receive("G", "orders", batch=1)
    assert [(d.stored.body, d.attempt) for d in first] == [(b"body-0", 1)]
    broker.clock.ms += 10_000  # body-0 is visible again, still on its first delivery
    real_append = broker.state.append
    unconfirmed = []  # one entry per receive: its pop is written, then not confirmed

    async def slaves_cut_off(records):
        result = await real_append(records)
        if unconfirmed and not unconfirmed[-1]:
            unconfirmed[-1] = [r.properties["kind"] for r in records]
            return PutResult(PutStatus.FLUSH_SLAVE_TIMEOUT, result.appended, error="timeout")
        return result

    monkeypatch.setattr(broker.state, "append", slaves_cut_off)
    for _ in range(5):
        unconfirmed.append([])
        with pytest.raises(PopFailed, match="timeout"):
            broker.receive("G", "orders")
    monkeypatch.undo()
    assert unconfirmed == [["pop"]] * 5
    broker.state.check()
    queue = ("G", "orders", 0)
    live = broker.state.cursor(queue)
    live = (live.next_offset, dict(live.in_flight))
    broker.crash_and_reopen()
    replayed = broker.state.cursor(queue)
    assert (replayed.next_offset, dict(replayed.in_flight)) == live  # the log agrees
    again = broker.receive("G", "orders")
    assert [(d.stored.body, d.attempt) for d in again] == [(b"body-0", 2), (b"body-1", 1)]
    assert broker.dead_letters("G") == []
    broker.state.check()


class CallOver:
    """A call's context whose client leaves once the pop is decided: a deadline that
    still had time when the long poll asked, and none when the answer is ready."""

    def __init__(self) -> None:
        self.asked = 0

    def time_remaining(self) -> float:
        self.asked += 1
        return 5.0 if self.asked == 1 else -0.1

    def cancelled(self) -> bool:
        return False

    def peer(self) -> str:
        return "ipv4:10.0.0.1:40000"


def receive_request(group: str, topic: str, batch: int = 32) -> rpc.ReceiveMessageRequest:
    request = rpc.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=0),
        batch_size=batch,
    )
    request.invisible_duration.seconds = 10
    request.long_polling_timeout.seconds = 1
    return request


def test_a_receive_whose_client_left_gives_its_messages_back(broker):
    """A consumer whose call timed out while the node decided its pop gets no answer: the
    messages come back at once on their old attempt, in memory and in the log. A chaos
    run at load 35, its consumers' calls timing out, dead-lettered 7 acknowledged sends
    of a 3-attempt group that no consumer of it had received."""
    broker.send("orders", 2, queue_id=0)
    first = broker.receive("G", "orders", batch=1)
    broker.clock.ms += 10_000  # body-0 is visible again, still on its first delivery

    async def answered(request, context):
        return [part async for part in broker.door.ReceiveMessage(request, context)]

    for _ in range(4):
        assert broker.run(answered(receive_request("G", "orders"), CallOver())) == []
    assert [(d.stored.body, d.attempt) for d in first] == [(b"body-0", 1)]
    broker.state.check()
    broker.crash_and_reopen()
    again = broker.receive("G", "orders")
    assert [(d.stored.body, d.attempt) for d in again] == [(b"body-0", 2), (b"body-1", 1)]


def test_a_receive_cancelled_while_its_pop_is_appended_gives_it_back(broker, monkeypatch):
    """The call is cancelled (its deadline) while the pop's records wait for the log: the
    append finishes all the same, and then the pop is given back."""
    broker.send("orders", 1, queue_id=0)
    real_append = broker.state.append
    release, finished = asyncio.Event(), asyncio.Event()

    async def slow(records):
        result = await real_append(records)
        await release.wait()
        finished.set()
        return result

    monkeypatch.setattr(broker.state, "append", slow)

    async def cancelled_receive():
        receiving = asyncio.ensure_future(
            broker.service.receive(
                broker.topics.group("G"), broker.topics.topic("orders"), None, 32, 10_000
            )
        )
        while not broker.state.cursors:  # the pop is decided and its append waits
            await asyncio.sleep(0)
        receiving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await receiving
        monkeypatch.undo()
        release.set()
        await finished.wait()
        for _ in range(3):  # the append's task ends, then its callbacks run
            await asyncio.sleep(0)
        while broker.service._background:  # the hand-back it started
            await asyncio.sleep(0)

    broker.run(cancelled_receive())
    (entry,) = broker.state.cursor(("G", "orders", 0)).in_flight.values()
    assert (entry.attempt, entry.visible_at_ms) == (0, 0)  # in flight to nobody
    broker.crash_and_reopen()
    assert [(d.stored.body, d.attempt) for d in broker.receive("G", "orders")] == [(b"body-0", 1)]


def test_memory_agrees_with_the_log_after_refused_and_unconfirmed_appends(broker, monkeypatch):
    """Random receives, acks, changes, forwards and expiries while appends are refused
    (nothing written) or written but not confirmed in time; then SIGKILL-equivalent: the
    replayed state is the live one, save the new messages of a refused pop, which memory
    holds as delivered to nobody past a cursor the log never moved."""
    rng = random.Random(11)
    broker.send("orders", 30, queue_id=0)
    broker.send("orders", 30, queue_id=1)
    real_append = broker.state.append

    async def flaky(records):
        roll = rng.random()
        if roll < 0.2:
            return PutResult(PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH, error="refused")
        result = await real_append(records)
        if roll < 0.4:
            return PutResult(PutStatus.FLUSH_SLAVE_TIMEOUT, result.appended, error="timeout")
        return result

    monkeypatch.setattr(broker.state, "append", flaky)
    handles: list[str] = []
    for _ in range(300):
        action = rng.random()
        try:
            if action < 0.35:
                handles += [d.handle for d in broker.receive("G", "orders", batch=4)]
            elif action < 0.6 and handles:
                broker.ack("G", "orders", handles.pop(rng.randrange(len(handles))))
            elif action < 0.7 and handles:
                answer = broker.change("G", "orders", handles.pop(), rng.randint(1, 20))
                handles.append(answer.receipt_handle)
            elif action < 0.75 and handles:
                broker.forward("G", "orders", handles.pop())
            else:
                broker.clock.ms += rng.randint(1_000, 15_000)
        except PopFailed:
            pass
    monkeypatch.undo()

    def as_the_log_has_it(state):
        view = {}
        for key, cursor in state.cursors.items():
            unsent = [o for o, f in cursor.in_flight.items() if f.attempt == 0]
            assert not unsent or max(unsent) == cursor.next_offset - 1  # a suffix
            view[key] = (
                min(unsent, default=cursor.next_offset),
                {o: f for o, f in cursor.in_flight.items() if f.attempt},
            )
        return view

    before = as_the_log_has_it(broker.state)
    broker.state.check()
    broker.crash_and_reopen()
    assert as_the_log_has_it(broker.state) == before


def test_state_after_an_abrupt_stop_is_replayed_from_the_log(broker):
    """Random receives, acks, changes, expiries and forwards; then SIGKILL-equivalent: the
    replayed state equals the live one, handles stay valid, nothing acked comes back."""
    rng = random.Random(7)
    broker.send("orders", 40, queue_id=0)
    broker.send("orders", 40, queue_id=1)
    live: dict[str, object] = {}
    acked: set[tuple[int, int]] = set()
    for _ in range(120):
        action = rng.random()
        if action < 0.35:
            for d in broker.receive("G", "orders", batch=rng.randint(1, 5)):
                live[d.handle] = d
        elif action < 0.65 and live:
            handle = rng.choice(sorted(live))
            d = live.pop(handle)
            if broker.ack("G", "orders", handle).status.code == pb.OK:
                acked.add((d.stored.queue_id, d.stored.queue_offset))
        elif action < 0.8 and live:
            handle = rng.choice(sorted(live))
            answer = broker.change("G", "orders", handle, rng.randint(1, 20), rng.random() < 0.5)
            d = live.pop(handle)
            if answer.status.code == pb.OK:
                live[answer.receipt_handle] = d
        elif action < 0.85 and live:
            broker.forward("G", "orders", live.pop(rng.choice(sorted(live))).handle)
        else:
            broker.clock.ms += rng.randint(1_000, 15_000)
    before = {k: (c.next_offset, dict(c.in_flight)) for k, c in broker.state.cursors.items()}
    broker.crash_and_reopen()
    after = {k: (c.next_offset, dict(c.in_flight)) for k, c in broker.state.cursors.items()}
    assert after == before
    broker.state.check()
    for handle in sorted(live):
        code = broker.ack("G", "orders", handle).status.code
        assert code in (pb.OK, pb.INVALID_RECEIPT_HANDLE)  # stale if redelivered since
    broker.clock.ms += 3_600_000
    redelivered = set()
    while picked := broker.receive("G", "orders"):
        for d in picked:
            redelivered.add((d.stored.queue_id, d.stored.queue_offset))
            broker.ack("G", "orders", d.handle)
    assert not redelivered & acked


def test_snapshots_keep_the_state_when_retention_deletes_old_segments(tmp_path):
    """Records spread over many small segments; retention deletes all but the active one
    (and the snapshot it holds): the replayed state is still the live one."""
    loop = asyncio.new_event_loop()
    broker = Broker(tmp_path, loop)
    small = dict(commitlog_segment_bytes=160 * 1024, max_message_body_bytes=64 * 1024)
    broker.store.shutdown()
    broker.open(**small)
    broker.topics.put_topic(TopicConfig("orders", queue_count=1))
    broker.topics.put_group(GroupConfig("G"))
    broker.send("orders", 10)
    handles = {d.stored.queue_offset: d.handle for d in broker.receive("G", "orders", batch=5)}
    for round_number in range(1500):  # ~1,500 change records: several segments
        offset = round_number % 5
        handles[offset] = broker.change("G", "orders", handles[offset], 30).receipt_handle
    broker.ack("G", "orders", handles[0])
    assert len(broker.store.commitlog.segments.files) >= 3
    assert broker.store.delete_expired(now_ms=time.time_ns() // 1_000_000 + 10**12) >= 2
    before = {k: (c.next_offset, dict(c.in_flight)) for k, c in broker.state.cursors.items()}
    broker.store.close_abruptly_for_tests()
    broker.open(**small)
    after = {k: (c.next_offset, dict(c.in_flight)) for k, c in broker.state.cursors.items()}
    assert after == before and len(after[("G", "orders", 0)][1]) == 4
    assert broker.ack("G", "orders", handles[4]).status.code == pb.OK
    broker.store.shutdown()
    loop.close()


def test_replay_starts_at_the_newest_snapshot(broker, monkeypatch):
    """A promoted replica replays the deltas since the newest snapshot, not every
    retained record: snapshots come every SNAPSHOT_EVERY_RECORDS deltas (50 here)."""
    monkeypatch.setattr(system_state, "SNAPSHOT_EVERY_RECORDS", 50)
    broker.send("orders", 10)
    handles = {d.stored.queue_offset: d.handle for d in broker.receive("G", "orders", batch=5)}
    for round_number in range(520):
        offset = round_number % 5
        handles[offset] = broker.change("G", "orders", handles[offset], 30).receipt_handle
    broker.ack("G", "orders", handles[0])
    before = {k: (c.next_offset, dict(c.in_flight)) for k, c in broker.state.cursors.items()}
    applied = []
    monkeypatch.setattr(PopState, "apply", lambda self, p, b: applied.append(p["kind"]))
    replayed = PopState(broker.store)
    replayed.replay()
    assert 0 < len(applied) <= 50  # the deltas after the newest snapshot only
    monkeypatch.undo()
    broker.crash_and_reopen()
    after = {k: (c.next_offset, dict(c.in_flight)) for k, c in broker.state.cursors.items()}
    assert after == before
    assert broker.ack("G", "orders", handles[4]).status.code == pb.OK


def test_a_replay_applies_the_records_past_the_read_cap(broker):
    """A promoted node replays every record its log holds, past its read cap too (under
    SYNC_FLUSH that cap is what is on disk, and a promoted slave may not have fsynced its
    old master's last records yet). Before, the replay stopped at the cap: the end of a
    delivery written last was missed, and the new master dead-lettered the message a
    second time (a sync-sync-flush chaos run: two copies in the DLQ)."""
    broker.send("orders", 1)
    for _ in range(3):
        assert len(broker.receive("G", "orders")) == 1
        broker.clock.ms += 10_000
    before_dead_letter = broker.store.write_offset
    assert broker.receive("G", "orders") == []  # attempts used up: dead-lettered
    assert broker.dead_letters("G") == [b"body-0"]
    live = {k: (c.next_offset, dict(c.in_flight)) for k, c in broker.state.cursors.items()}
    broker.store.set_confirmed_offset(before_dead_letter, new_epoch=True)
    replayed = PopState(broker.store)
    replayed.replay()
    after = {k: (c.next_offset, dict(c.in_flight)) for k, c in replayed.cursors.items()}
    assert after == live
    assert after[("G", "orders", 0)][1] == {}  # not in flight any more: it is in the DLQ


def test_concurrent_appends_past_the_threshold_write_one_snapshot_at_a_time(broker, monkeypatch):
    monkeypatch.setattr(system_state, "SNAPSHOT_EVERY_RECORDS", 10)
    broker.send("orders", 1)
    broker.receive("G", "orders")  # some state, so that a snapshot has a body

    async def many():
        def delta():
            return broker.state.record("ack", b"", group="G", topic="orders", queue="1")

        await asyncio.gather(*(broker.state.append([delta()]) for _ in range(100)))

    broker.run(many())
    stored = broker.store.get_messages("%SYS%POP", 0, 0, 1000).messages
    snapshots = [m for m in stored if m.properties["kind"] == "snapshot"]
    assert 1 <= len(snapshots) <= 100 // 10 + 1


def test_a_nack_of_the_last_attempt_dead_letters_at_once(broker):
    broker.send("orders", 1)
    for _ in range(2):
        assert len(broker.receive("G", "orders")) == 1
        broker.clock.ms += 10_000
    (last,) = broker.receive("G", "orders")
    assert last.attempt == 3  # the group's max
    assert broker.change("G", "orders", last.handle, 5).status.code == pb.OK
    assert broker.dead_letters("G") == [b"body-0"]
    broker.clock.ms += 10_000
    assert broker.receive("G", "orders") == []


def test_a_suspended_delivery_comes_back_with_the_attempt_it_had(broker):
    """RocketMQ 5.5's ``suspend`` on ChangeInvisibleDuration: the delivery is not counted,
    so the message comes back with its attempt (and a suspend at the group's last attempt
    is not a nack that dead-letters it); after a crash the log replays the same count."""
    broker.send("orders", 1)
    (first,) = broker.receive("G", "orders")
    assert first.attempt == 1
    assert broker.change("G", "orders", first.handle, 5, suspend=True).status.code == pb.OK
    broker.clock.ms += 4_000
    assert broker.receive("G", "orders") == []  # invisible for the 5 s asked
    broker.clock.ms += 1_001
    (again,) = broker.receive("G", "orders")
    assert again.attempt == 1
    for attempt in (2, 3):
        broker.clock.ms += 10_000
        (again,) = broker.receive("G", "orders")
        assert again.attempt == attempt
    assert broker.change("G", "orders", again.handle, 5, suspend=True).status.code == pb.OK
    assert broker.dead_letters("G") == []
    broker.crash_and_reopen()
    broker.clock.ms += 5_001
    (kept,) = broker.receive("G", "orders")
    assert kept.attempt == 3 and broker.dead_letters("G") == []
    broker.state.check()


def test_a_lite_receive_looks_only_at_the_lite_topics_that_may_have_something(broker, monkeypatch):
    """A client subscribed to 2,000 lite topics: once a receive found them all empty, the
    next looks only at the one a message arrived in (the ready set), not at all 2,000."""
    broker.topics.put_topic(TopicConfig("chat", queue_count=1, message_type=MessageType.LITE))
    index = broker.service.lite_index
    index.load(broker.loop, ["chat"])
    names = [f"t-{n}" for n in range(2000)]
    broker.lite.subscriptions.sync(pb.PARTIAL_ADD, "G", "c1", "chat", names)
    client = broker.lite.subscriptions.client("G", "c1")
    looked_at = []
    has_after = index.has_after
    monkeypatch.setattr(
        index, "has_after", lambda lmq, o: looked_at.append(lmq) or has_after(lmq, o)
    )

    def receive():
        group = broker.topics.group("G")
        return broker.run(broker.service.receive_lite(group, client, 16, 10_000))

    assert receive() == [] and len(looked_at) == 2000 and client.ready == set()
    looked_at.clear()
    message = Message.build("chat", b"hello", properties={PROPERTY_LITE_TOPIC: "t-5"})
    assert broker.store.put_message(message).ok
    assert bodies(receive()) == [b"hello"]
    assert len(looked_at) <= 2, looked_at


def test_an_offset_reset_ends_the_cursor_and_its_deliveries_and_is_replayed_so(broker):
    """The records an offset reset writes (``node/services/offset_reset.py``): the
    committed offsets, then a ``reset`` record per POP cursor, which ends it with its
    deliveries in flight; the next receive starts at the committed offset, before and
    after a restart from the log."""
    broker.send("orders", 6)
    delivered = broker.receive("G", "orders", batch=4)
    assert bodies(delivered) == [b"body-%d" % i for i in range(4)]
    key = ("G", "orders", 0)
    assert broker.run(broker.offsets.reset("G", "orders", {0: 2, 1: 0})).ok
    record, before = broker.state.reset(key)
    assert before is not None and sorted(before.in_flight) == [0, 1, 2, 3]
    assert broker.run(broker.state.append([record])).ok
    assert broker.state.cursor(key) is None
    stale = broker.ack("G", "orders", delivered[3].handle)
    assert stale.status.code == pb.INVALID_RECEIPT_HANDLE
    broker.crash_and_reopen()
    assert broker.state.cursor(key) is None
    assert (broker.offsets.get("G", "orders", 0), broker.offsets.get("G", "orders", 1)) == (2, 0)
    again = broker.receive("G", "orders", batch=8)
    assert bodies(again) == [b"body-%d" % i for i in range(2, 6)]


def test_a_refused_offset_reset_changes_nothing(broker, monkeypatch):
    broker.send("orders", 3)
    delivered = broker.receive("G", "orders", batch=3)
    key = ("G", "orders", 0)
    refused = PutResult(PutStatus.SERVICE_NOT_AVAILABLE)

    async def refuse(records):
        return refused

    monkeypatch.setattr(system_state.SystemState, "append", lambda self, records: refuse(records))
    assert not broker.run(broker.offsets.reset("G", "orders", {0: 1})).ok
    assert broker.offsets.get("G", "orders", 0) is None
    record, before = broker.state.reset(key)
    assert not broker.run(broker.state.append([record])).appended
    broker.state.restore_reset(key, before)
    assert broker.state.cursor(key) is before and sorted(before.in_flight) == [0, 1, 2]
    monkeypatch.undo()
    assert broker.ack("G", "orders", delivered[0].handle).status.code == pb.OK


def test_a_reset_the_log_refuses_is_reported_and_tells_no_client(broker, monkeypatch):
    broker.send("orders", 4)
    broker.receive("G", "orders", batch=2)
    service = reset_service(broker)
    told = []
    service.reset_listeners.append(lambda *reset: told.append(reset))
    request = ResetRequest("G", "orders", ResetTarget.LATEST)
    refused = PutResult(PutStatus.SERVICE_NOT_AVAILABLE)

    async def refuse(records):
        return refused

    monkeypatch.setattr(system_state.SystemState, "append", lambda self, records: refuse(records))
    with pytest.raises(AdminRefused) as error:
        broker.run(service.reset(Caller(Door.FERRY, "ResetOffsets", None), request))
    assert error.value.code == 14 and "was refused" in error.value.message
    assert broker.offsets.get("G", "orders", 0) is None and told == []
    assert sorted(broker.state.cursor(("G", "orders", 0)).in_flight) == [0, 1]
    monkeypatch.undo()
    reset = broker.run(service.reset(Caller(Door.FERRY, "ResetOffsets", None), request)).queues
    assert [(q.queue_id, q.old_offset, q.new_offset) for q in reset] == [(0, 0, 4), (1, -1, 0)]
    assert broker.state.cursor(("G", "orders", 0)) is None
    assert told == [("G", "orders", reset)]


def test_a_lite_delivery_whose_offset_holds_another_record_ends_and_is_not_served(broker):
    """A lite topic's offsets are CommitLog offsets: once another record stands at one (a
    cut of the log's tail replaced it), its delivery in flight ends and that record is
    never served to the lite consumer (a 30-minute sync-async-flush chaos run delivered a
    ``%SYS%POP`` record to one, 16 times, then dead-lettered it)."""
    broker.topics.put_topic(TopicConfig("chat", queue_count=1, message_type=MessageType.LITE))
    broker.service.lite_index.load(broker.loop, ["chat"])
    broker.lite.subscriptions.sync(pb.PARTIAL_ADD, "G", "c1", "chat", ["t-1"])
    client = broker.lite.subscriptions.client("G", "c1")

    def receive():
        group = broker.topics.group("G")
        return broker.run(broker.service.receive_lite(group, client, 16, 10_000))

    message = Message.build("chat", b"hello", properties={PROPERTY_LITE_TOPIC: "t-1"})
    assert broker.store.put_message(message).ok
    (delivered,) = receive()
    offset = delivered.stored.physical_offset
    other = broker.store.put_message(Message.build("%SYS%POP", b"8133:2"))
    replaced = broker.store.read_message(other.appended[0].physical_offset)
    read = broker.store.read_message
    broker.store.read_message = lambda at: replaced if at == offset else read(at)
    broker.clock.ms += 10_000  # the delivery is visible again
    assert receive() == []
    key = ("G", lmq_name("chat", "t-1"), 0)
    assert offset not in broker.state.cursor(key).in_flight
    broker.state.check()
