"""The SDK's side of a followed fetch (``FetchRequest.follow``): one request answered many
times. The channel keeps every answer of it in arrival order, however many came before
the reader took the first; a reader sees every message once, in order, across writes it
did not poll for, a seek while the fetch waits, and fetches whose answers are spent."""

from __future__ import annotations

import socket

import pytest

from ferrymq.client import Admin, Message, Producer, PullConsumer
from ferrymq.client.pull_consumer import FETCH_FOLLOW_MAX
from ferrymq.client.remoting_channel import RemotingChannel, wait_readable
from ferrymq.codec.remoting import FLAG_RESPONSE, SERIALIZE_ROCKETMQ, RemotingCommand, encode
from ferrymq.codec.remoting_codes import FerryRequestCode
from ferrymq.protocol.ferrymq.data_pb2 import FetchRequest


def test_answers_to_one_request_that_come_together_are_each_received_in_order():
    """Read from the socket in one go before the reader took the first, a followed
    fetch's answers were kept by their request's number, each in the place of the one
    before: the reader received the last and skipped the records of the others."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    channel = RemotingChannel(f"127.0.0.1:{server.getsockname()[1]}", timeout_s=5)
    try:
        opaque = channel.send(30002, b"fetch")
        peer, _ = server.accept()
        with peer:
            answers = [
                RemotingCommand(
                    0, opaque, FLAG_RESPONSE, body=b"%d" % i, serialize_type=SERIALIZE_ROCKETMQ
                )
                for i in range(3)
            ]
            peer.sendall(b"".join(encode(a) for a in answers))
            assert wait_readable([channel], 5) == [channel]
            channel.read_frame()  # and every whole frame behind it
            received = []
            for _ in range(3):
                assert channel.answered(opaque)
                received.append(channel.receive(opaque).body)
                channel.await_more(opaque)
            assert received == [b"0", b"1", b"2"]
            assert not channel.answered(opaque)
            channel.forget(opaque)
    finally:
        channel.close()
        server.close()


def test_writes_the_reader_did_not_poll_for_are_read_once_in_order(address):
    with Admin(address) as admin:
        admin.create_topic("followed", queue_count=1)
        admin.create_group("followers")
    with (
        Producer(address) as producer,
        PullConsumer(address, "followers", start="end", batch_size=2, follow=64) as consumer,
    ):
        consumer.assign("followed", [0])
        producer.send(Message("followed", b"0"))
        assert [m.body for m in consumer.poll(wait_s=5)] == [b"0"]
        for i in range(1, 40):
            producer.send(Message("followed", b"%d" % i))
        got: list = []
        while len(got) < 39:
            polled = consumer.poll(wait_s=5)
            assert polled, "a poll found nothing"
            got += polled
        assert [m.body for m in got] == [b"%d" % i for i in range(1, 40)]
        assert [m.queue_offset for m in got] == list(range(1, 40))
        assert consumer.poll(wait_s=0.1) == []


def test_a_seek_while_a_followed_fetch_waits_reads_from_the_seek(address):
    """The followed fetch waits at the queue's end; after a seek its answers are not the
    reader's (it forgets them) and the reader reads from where the seek put it."""
    with Admin(address) as admin:
        admin.create_topic("refollowed", queue_count=1)
        admin.create_group("refollowers")
    with (
        Producer(address) as producer,
        PullConsumer(address, "refollowers", start="end", follow=64) as consumer,
    ):
        consumer.assign("refollowed", [0])
        for i in range(3):
            producer.send(Message("refollowed", b"%d" % i))
        got: list = []
        while len(got) < 3:
            got += consumer.poll(wait_s=5)
        assert [m.body for m in got] == [b"0", b"1", b"2"]
        [queue] = consumer.assignment
        consumer.seek(queue, 1)
        producer.send(Message("refollowed", b"3"))
        again: list = []
        while len(again) < 3:
            again += consumer.poll(wait_s=5)
        assert [m.body for m in again] == [b"1", b"2", b"3"]
        assert consumer.poll(wait_s=0.1) == []


def test_a_reader_follows_unless_told_not_to(address, monkeypatch):
    """A reader made with no ``follow`` asked for each answer (``follow`` was 0 unless
    given): a fetch a message at its queue's end. It now asks the node to read on, and
    one fetch brings every message of a run shorter than its follows."""
    with Admin(address) as admin:
        admin.create_topic("followed-by-default", queue_count=1)
        admin.create_group("default-followers")
    asked: list[int] = []  # each FERRY_FETCH's ``follow``
    send = RemotingChannel.send

    def recorded(self, code, body=b"", *args, **kwargs):
        if code == FerryRequestCode.FERRY_FETCH:
            asked.append(FetchRequest.FromString(body).follow)
        return send(self, code, body, *args, **kwargs)

    monkeypatch.setattr(RemotingChannel, "send", recorded)
    with (
        Producer(address) as producer,
        PullConsumer(address, "default-followers", start="end") as consumer,
    ):
        consumer.assign("followed-by-default", [0])
        for i in range(10):
            producer.send(Message("followed-by-default", b"%d" % i))
            assert [m.body for m in consumer.poll(wait_s=5)] == [b"%d" % i]
        assert asked == [FETCH_FOLLOW_MAX]  # one fetch brought all ten


@pytest.mark.parametrize("follow", [-1, 65])
def test_a_follow_out_of_range_is_refused_at_once(follow):
    with pytest.raises(ValueError, match=r"follow must be 0\.\.64"):
        PullConsumer("127.0.0.1:1", "g", follow=follow)
