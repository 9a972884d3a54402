"""The Spark source's reads on a node's remoting port (FERRY_FETCH), without a Spark
session: one queue range read on an executor is ``reading.read_range``."""

from __future__ import annotations

import pytest

from ferrymq.client import Admin, FerryError, Message, Producer
from ferrymq.client.routes import QueueRef
from ferrymq.spark import reading, topology
from ferrymq.spark.options import write_options
from ferrymq.spark.sink import Sender

TOO_LARGE = b"x" * (4 * 1024 * 1024 + 1)  # one byte over the node's default body limit


def test_a_range_is_read_over_the_remoting_port(address, module_node):
    with Admin(address) as admin:
        admin.create_topic("spark-remoting", queue_count=1)
        admin.create_group("spark-remoting-reader")
    with Producer(address) as producer:
        route = producer.route("spark-remoting")
        receipts = producer.send_batch([Message("spark-remoting", b"r%d" % i) for i in range(5)])
    assert topology.remoting_address(address) == module_node.remoting
    [broker_group] = route.broker_groups
    part = reading.QueueRange(
        endpoints=(address,),
        group="spark-remoting-reader",
        topic="spark-remoting",
        queue_id=0,
        start=receipts[0].queue_offset,
        end=receipts[-1].queue_offset + 1,
        address=address,
        broker_group=broker_group,
        fail_on_data_loss=True,
        retry_timeout_ms=5000,
        fetch_messages=2,
    )
    fetcher = reading._Fetcher(part, address)
    try:
        assert fetcher.channel is not None and fetcher.channel.address == module_node.remoting
    finally:
        fetcher.close()
    batches = list(reading.read_range(part))
    bodies = [body for batch in batches for body in batch.column("body").to_pylist()]
    assert bodies == [b"r%d" % i for i in range(5)]
    assert QueueRef(broker_group, 0) in route.queues


def test_the_sink_sends_chunks_over_the_remoting_port(address, module_node):
    """NORMAL topic: each chunk is one atomic FERRY_PRODUCE in the queue the sink chose;
    a chunk with a message the node refuses stores nothing and raises its code."""
    with Admin(address) as admin:
        admin.create_topic("spark-sink-remoting", queue_count=2)
    options = write_options(
        {"endpoints": address, "topic": "spark-sink-remoting", "chunkMessages": "3"}
    )
    sender = Sender(options)
    chunk = [Message("spark-sink-remoting", b"s%d" % i, keys=["k"]) for i in range(3)]
    sender.send(chunk, idempotent=False)
    channel = topology.remoting_channel(address)
    assert channel is not None and channel.address == module_node.remoting
    assert channel._socket is not None  # the chunk went through it
    too_large = [Message("spark-sink-remoting", b"ok"), Message("spark-sink-remoting", TOO_LARGE)]
    with pytest.raises(FerryError) as refused:
        sender.send(too_large, idempotent=False)
    assert refused.value.code_name == "MESSAGE_BODY_TOO_LARGE"
    with Admin(address) as admin:
        _, queues = admin.describe_topic("spark-sink-remoting")
    assert sum(q.max_offset for q in queues) == 3
