"""The pull consumer's prefetch on the remoting port: while ``poll`` decodes one queue's
records, the fetch of the queue whose turn is next is already on its way. It must change
nothing a reader sees: every message once, in queue order, from where a seek put the
position, and across a connection that fails while a prefetch is pending."""

from __future__ import annotations

from collections import defaultdict

import pytest

from ferrymq.client import Admin, Message, Producer, PullConsumer
from ferrymq.client.remoting_channel import RemotingChannel
from ferrymq.codec.remoting_codes import FerryRequestCode

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
        assert [m.queue_offset for m in second] == list(range(50))
        assert channel._answers == {}  # nothing left behind


def test_a_reader_keeping_up_with_one_queue_sends_one_fetch_per_poll(address, monkeypatch):
    """Each poll asked without waiting first, then waited, and each fetch with records sent
    a prefetch: a reader at the queue's end made two or three fetches per message, the
    prefetch always answered empty (twice a tailing reader's requests on the node, and a
    round trip more between a send and its arrival)."""
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
        PullConsumer(address, "tail-readers", start="end") as consumer,
    ):
        consumer.assign("tailed", [0])
        fetches.clear()
        for i in range(10):
            producer.send(Message("tailed", b"%d" % i))
            assert [m.body for m in consumer.poll(wait_s=5)] == [b"%d" % i]
        assert len(fetches) == 10
        fetches.clear()
        assert consumer.poll(wait_s=0.2) == []  # nothing: one fetch, waited out
        assert len(fetches) == 1
