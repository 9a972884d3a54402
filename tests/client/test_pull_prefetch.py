"""The pull consumer's fetches on the remoting port: every assigned queue has one on its
way or waiting on the node, so a queue's next fetch travels while ``poll`` decodes its
records and a message written to any queue answers a waiting poll at once. It must change
nothing a reader sees: every message once, in queue order, from where a seek put the
position, and across a connection that fails while a fetch is pending."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest

from ferrymq.client import Admin, Message, Producer, PullConsumer
from ferrymq.client.remoting_channel import RemotingChannel
from ferrymq.codec.remoting_codes import FerryRequestCode
from ferrymq.protocol.ferrymq.data_pb2 import FetchRequest

TOPIC, QUEUES, PER_QUEUE = "prefetched", 3, 400


@pytest.fixture(scope="module")
def filled(address) -> str:
    with Admin(address) as admin:
        admin.create_topic(TOPIC, queue_count=QUEUES)
        admin.create_group("prefetch-readers")
    with Producer(address) as producer:
        for start in range(0, QUEUES * PER_QUEUE, 100):
            producer.send_batch([Message(TOPIC, b"%06d" % i) for i in range(start, start + 100)])
    return TOPIC


def read(consumer: PullConsumer, want: int, polls: int = 500) -> list:
    got = []
    for _ in range(polls):
        got += consumer.poll(wait_s=0.1)
        if len(got) >= want:
            break
    return got


def by_queue(messages) -> dict[int, list[int]]:
    offsets = defaultdict(list)
    for message in messages:
        offsets[message.queue_id].append(message.queue_offset)
    return offsets


def test_prefetched_reads_give_every_message_once_in_queue_order(address, filled):
    with PullConsumer(
        address, "prefetch-readers", start="beginning", batch_size=50, prefetch=True
    ) as consumer:
        consumer.assign(filled, list(range(QUEUES)))
        got = read(consumer, QUEUES * PER_QUEUE)
        assert sorted(m.body for m in got) == [b"%06d" % i for i in range(QUEUES * PER_QUEUE)]
        for offsets in by_queue(got).values():
            assert offsets == list(range(len(offsets)))
        assert consumer.prefetched >= QUEUES * PER_QUEUE // 50 - QUEUES  # nearly every fetch
        assert consumer.poll(wait_s=0.1) == []  # nothing twice
    with PullConsumer(address, "prefetch-readers", start="beginning", prefetch=False) as plain:
        plain.assign(filled, list(range(QUEUES)))
        assert len(read(plain, QUEUES * PER_QUEUE)) == QUEUES * PER_QUEUE
        assert plain.prefetched == 0


def test_a_reader_that_never_waits_still_gets_the_answers_already_on_their_way(address, filled):
    """``while batch := poll(wait_s=0)`` reads a backlog to its end (the chaos checker's
    read of everything served does). A poll that did not wait returned nothing while the
    answers to the fetches earlier polls had sent ahead were still on their way, and
    the reader stopped after its first batch."""
    with PullConsumer(address, "prefetch-readers", start="beginning", batch_size=50) as consumer:
        consumer.assign(filled, list(range(QUEUES)))
        got = []
        while batch := consumer.poll(wait_s=0):
            got += batch
        assert len(got) == QUEUES * PER_QUEUE
        assert consumer.prefetched > 0


def test_a_seek_while_a_prefetch_is_pending_reads_from_the_seek(address, filled):
    with PullConsumer(
        address, "prefetch-readers", start="beginning", batch_size=50, prefetch=True
    ) as consumer:
        consumer.assign(filled, [0])
        (queue,) = consumer.assignment
        first = consumer.poll(wait_s=0.1)  # leaves the fetch of offsets 50.. pending
        assert [m.queue_offset for m in first] == list(range(50))
        consumer.seek(queue, 10)
        again = consumer.poll(wait_s=0.1)
        assert [m.queue_offset for m in again] == list(range(10, 60))
        assert consumer.position(queue) == 60


def test_a_connection_lost_with_a_prefetch_pending_is_fetched_again(address, filled):
    with PullConsumer(
        address, "prefetch-readers", start="beginning", batch_size=50, prefetch=True
    ) as consumer:
        consumer.assign(filled, [1])
        first = consumer.poll(wait_s=0.1)
        for channel in consumer.endpoints._channels.values():
            channel.close()  # the prefetch's answer goes with the connection
        second = consumer.poll(wait_s=0.1)
        offsets = [m.queue_offset for m in first + second]
        assert offsets == list(range(100))
        assert consumer.prefetched == 0


def test_a_prefetch_answered_while_another_request_is_waited_for_is_kept(address, filled):
    """A route refresh (any request) on the prefetch's connection reads the prefetch's
    answer first: the channel keeps it for the prefetch's own receive. It skipped it, and
    the next poll waited out its whole timeout (seen as a 10 s stall of a subscribed
    reader in the dashboards test)."""
    with PullConsumer(
        address, "prefetch-readers", start="beginning", batch_size=50, timeout_s=2
    ) as consumer:
        assert consumer.prefetch  # on by default
        consumer.assign(filled, [0, 1])
        first = consumer.poll(wait_s=0)  # queue 0; queue 1's fetch is now on its way
        (channel,) = consumer.endpoints._channels.values()
        other = consumer._request(next(q for q in consumer.assignment if q.queue_id == 0), 0)
        channel.call(FerryRequestCode.FERRY_FETCH, other.SerializeToString())
        second = consumer.poll(wait_s=0)
        assert consumer.prefetched == 1
        assert [m.queue_id for m in first] == [0] * 50
        assert [(m.queue_id, m.queue_offset) for m in second] == [(1, o) for o in range(50)]
        third = consumer.poll(wait_s=0)  # queue 0's next fetch, answered during the call
        assert [(m.queue_id, m.queue_offset) for m in third] == [(0, o) for o in range(50, 100)]
        assert consumer.prefetched == 2


def test_a_reader_keeping_up_with_one_queue_sends_one_fetch_for_many_messages(address, monkeypatch):
    """Each poll asked without waiting first, then waited, and each fetch with records sent
    a prefetch: a reader at the queue's end made two or three fetches per message, the
    prefetch always answered empty. Then one a message (``follow=0`` still). A reader that
    asks to ``follow`` (``FetchRequest.follow``) has the node read on after each answer,
    and asks again only once a fetch's answers are spent (here ``follow=3``: every fourth
    message)."""
    with Admin(address) as admin:
        admin.create_topic("tailed", queue_count=1)
        admin.create_group("tail-readers")
    fetches = []
    send = RemotingChannel.send

    def counted(self, code, *args, **kwargs):
        if code == FerryRequestCode.FERRY_FETCH:
            fetches.append(code)
        return send(self, code, *args, **kwargs)

    monkeypatch.setattr(RemotingChannel, "send", counted)
    with (
        Producer(address) as producer,
        PullConsumer(address, "tail-readers", start="end", follow=3) as consumer,
    ):
        consumer.assign("tailed", [0])
        fetches.clear()
        for i in range(10):
            producer.send(Message("tailed", b"%d" % i))
            assert [m.body for m in consumer.poll(wait_s=5)] == [b"%d" % i]
            assert len(fetches) == 1 + (i + 1) // 4
        fetches.clear()
        assert consumer.poll(wait_s=0.2) == []  # nothing: it waits on the followed fetch
        assert fetches == []
        producer.send(Message("tailed", b"late"))
        assert [m.body for m in consumer.poll(wait_s=5)] == [b"late"]
        assert fetches == []


def test_a_tailing_reader_s_next_fetch_leaves_with_its_answer(address, monkeypatch):
    """A reader at its queue's end sent its next fetch only in its next poll, after the
    poll's caller had the message: in the end to end it reached the node just before
    the next send, which waited while the node parked the fetch. It now leaves before
    the poll returns, and parks on the node. A poll that does not wait sends none
    (nothing would hold it on the node). A reader that does not ask to ``follow``
    (``follow=0``), or reads from a node that does not (an older one)."""
    with Admin(address) as admin:
        admin.create_topic("tail-ahead", queue_count=1)
        admin.create_group("tail-ahead-readers")
    sent: list[tuple[int, int]] = []  # (polls returned so far, the fetch's offset)
    returned = [0]
    send = RemotingChannel.send

    def recorded(self, code, body=b"", *args, **kwargs):
        if code == FerryRequestCode.FERRY_FETCH:
            sent.append((returned[0], FetchRequest.FromString(body).offset))
        return send(self, code, body, *args, **kwargs)

    monkeypatch.setattr(RemotingChannel, "send", recorded)
    with (
        Producer(address) as producer,
        PullConsumer(address, "tail-ahead-readers", start="end", follow=0) as consumer,
    ):
        consumer.assign("tail-ahead", [0])
        producer.send(Message("tail-ahead", b"first"))
        (first,) = consumer.poll(wait_s=5)
        returned[0] += 1
        assert sent[-1] == (0, first.queue_offset + 1)  # sent within the poll
        producer.send(Message("tail-ahead", b"second"))
        (second,) = consumer.poll(wait_s=5)
        returned[0] += 1
        assert second.queue_offset == first.queue_offset + 1
        assert sent[-2:] == [(0, second.queue_offset), (1, second.queue_offset + 1)]
        producer.send(Message("tail-ahead", b"third"))
        deadline = time.monotonic() + 10
        got: list = []
        while not got and time.monotonic() < deadline:
            got = consumer.poll(wait_s=0)  # a poll that does not wait...
        assert [m.body for m in got] == [b"third"]  # ...answered by the fetch parked for it
        assert sent[-1] == (1, second.queue_offset + 1)  # and sends none after it


def test_a_message_to_any_queue_answers_a_poll_waiting_on_all_of_them(address, monkeypatch):
    """A poll asked the queues in turn without waiting and waited on the last one only: a
    message written to another queue meanwhile waited for that poll's whole ``wait_s``
    (end to end p99 ~500 ms at low rates for a reader of 8 queues, the saturation ramps)."""
    with Admin(address) as admin:
        admin.create_topic("watched", queue_count=4)
        admin.create_group("watchers")
    fetches = threading.Semaphore(0)
    send = RemotingChannel.send

    def counted(self, code, *args, **kwargs):
        opaque = send(self, code, *args, **kwargs)
        if code == FerryRequestCode.FERRY_FETCH:
            fetches.release()
        return opaque

    monkeypatch.setattr(RemotingChannel, "send", counted)
    polled: list = []
    with PullConsumer(address, "watchers", start="end") as consumer:
        consumer.assign("watched", [0, 1, 2, 3])
        polling = threading.Thread(target=lambda: polled.extend(consumer.poll(wait_s=30)))
        started = time.monotonic()
        polling.start()
        for _ in range(4):  # every queue asked: the poll waits now
            assert fetches.acquire(timeout=10)
        with Producer(address) as producer:
            producer.send(Message("watched", b"first"))  # a new producer's: queue 0
        polling.join(timeout=10)
        assert not polling.is_alive(), "the poll waited on another queue"
        assert [(m.queue_id, m.body) for m in polled] == [(0, b"first")]
        assert time.monotonic() - started < 10
