"""The backlog the benchmark writes to and reads from Apache RocketMQ's master broker over
the remoting protocol (``bench.peers.remoting``), checked against a ferrymq node, which
serves the same codes: every message sent is acknowledged, and the read counts exactly
those, across queues, batches that do not divide the count, and an empty queue."""

from __future__ import annotations

import pytest

from bench.peers import ferry, growth, remoting
from bench.peers.processes import ProcessRegistry
from tests.support.nodes import start_node
from tests.support.rpc import create_topic, stubs


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    started = start_node(str(tmp_path_factory.mktemp("backlog") / "node"))
    channel, _, admin = stubs(started.address)
    create_topic(admin, "backlog", queues=4)
    yield started
    channel.close()
    started.sigterm()


def test_a_backlog_sent_in_batches_is_read_whole_from_the_start_of_every_queue(node):
    body = bytes(range(256)) * 4
    took = remoting.send_batches(
        node.remoting, "backlog", 1000, body, batch=64, in_flight=4, queues=3
    )
    assert took > 0
    # Queue 3 stays empty: its pull comes back NOT_FOUND and waits while the others read.
    read = remoting.pull_all(node.remoting, "backlog", "readers", 4, 1000, wait_s=30)
    assert read > 0
    with pytest.raises(remoting.RemotingError, match="read 1000 of 1001"):
        remoting.pull_all(node.remoting, "backlog", "readers-2", 4, 1001, wait_s=3)


def test_a_refused_batch_and_a_torn_pull_answer_are_errors_not_counts(node):
    with pytest.raises(remoting.RemotingError, match="send to"):
        remoting.send_batches(node.remoting, "no-such-topic", 10, b"x", 5, 2, 1)
    assert remoting.received_messages(b"", "g") == []
    with pytest.raises(remoting.RemotingError, match="no message record"):
        remoting.received_messages((12).to_bytes(4, "big") + b"\0" * 8, "g")


def test_sends_spread_over_topics_one_message_each_in_turn(node):
    channel, _, admin = stubs(node.address)
    try:
        for name in ("spread-a", "spread-b"):
            create_topic(admin, name, queues=1)
    finally:
        channel.close()
    topics = ["spread-a", "spread-b"] * 50
    assert remoting.send_spread(node.remoting, topics, b"x" * 100, in_flight=16) > 0
    for name in ("spread-a", "spread-b"):  # 50 each, no more
        remoting.pull_all(node.remoting, name, "spread-readers", 1, 50, wait_s=30)
        with pytest.raises(remoting.RemotingError, match="read 50 of 51"):
            remoting.pull_all(node.remoting, name, "spread-readers", 1, 51, wait_s=2)
    with pytest.raises(remoting.RemotingError, match="send to"):
        remoting.send_spread(node.remoting, ["spread-a", "nowhere"], b"x", in_flight=2)


def test_ferrymq_backlogs_of_two_sizes_share_their_consumer_groups():
    """The 4 GiB backlog came after the 1 GiB one and found its groups already made
    (GROUP_EXISTS ended the part); a group that exists is used as it is."""
    with ProcessRegistry("test", grace_s=1) as registry:
        peer = ferry.Ferrymq()
        peer.start(registry)
        try:
            for topic in ("Backlog0", "Backlog1"):
                peer.backlog_prepare(topic, growth.BACKLOG_GROUPS)
        finally:
            peer.stop()
