"""Structured Streaming with the ferrymq source and sink: exactly-once across a stopped
query, a lost commit (the batch runs again) and a task that died half-way through its rows.
Real local[2] Spark, a real node process."""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest

from ferrymq.client import Admin, Message, Producer
from ferrymq.launcher.cluster import cluster_up
from ferrymq.spark.options import write_options
from ferrymq.spark.sink import Sender, write_rows
from tests.support.cluster import SMALL_STORE, kill, master_of, stop_all, topic_everywhere
from tests.support.nodes import start_node

DEADLINE_S = 90


def send(address: str, topic: str, bodies: list[bytes]) -> None:
    with Producer(address) as producer:
        for i in range(0, len(bodies), 7):  # several requests: spread over the queues
            producer.send_batch([Message(topic, b, tag="t") for b in bodies[i : i + 7]])


def stream(spark, address, topic, **options):
    read = (
        spark.readStream.format("ferrymq")
        .option("endpoints", address)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for name, value in options.items():
        read = read.option(name, value)
    return read.load()


def batches_done(query) -> list[int]:
    return [p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0]


def wait_batches(query, count: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while len(batches_done(query)) < count:
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, f"fewer than {count} batches: {query.recentProgress}"
        query.awaitTermination(0.2)


def forget_last_commit(checkpoint: str) -> int:
    """Make the restart run a batch again, as after a driver crash between a batch's sink
    and its commit: the batch the stop interrupted (offsets logged, no commit) if there is
    one, else the last batch, whose commit is removed. Returns that batch's id."""

    def batches(kind: str) -> list[int]:
        return [int(n) for n in os.listdir(os.path.join(checkpoint, kind)) if n.isdigit()]

    planned, committed = max(batches("offsets")), max(batches("commits"))
    if planned > committed:
        return planned  # Spark runs it again over the same logged range
    for name in (str(committed), f".{committed}.crc"):
        path = os.path.join(checkpoint, "commits", name)
        if os.path.exists(path):
            os.remove(path)
    return committed


def test_stream_to_parquet_exactly_once_across_stop_lost_commit_and_new_queue(
    spark, address, tmp_path
):
    with Admin(address) as admin:
        admin.create_topic("st-events", queue_count=3)
    first = [b"first-%d" % i for i in range(45)]
    send(address, "st-events", first)
    output, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def start(trigger: dict):
        return (
            stream(spark, address, "st-events", maxOffsetsPerTrigger="15")
            .select("queue_id", "queue_offset", "body")
            .writeStream.format("parquet")
            .option("path", output)
            .option("checkpointLocation", checkpoint)
            .trigger(**trigger)
            .start()
        )

    query = start({"processingTime": "0 seconds"})
    wait_batches(query, 2)
    query.stop()  # mid-stream: more data is waiting
    assert all(p["numInputRows"] <= 15 for p in query.recentProgress)
    replayed = forget_last_commit(checkpoint)

    with Admin(address) as admin:
        admin.update_topic("st-events", queue_count=4)  # a queue added mid-query
    second = [b"second-%d" % i for i in range(25)]
    send(address, "st-events", second)

    query = start({"availableNow": True})
    assert query.awaitTermination(DEADLINE_S)
    assert query.exception() is None
    assert query.recentProgress[0]["batchId"] == replayed
    assert all(p["numInputRows"] <= 15 for p in query.recentProgress)

    rows = spark.read.parquet(output).collect()
    assert Counter(r.body for r in rows) == Counter(first + second)  # each exactly once
    assert len({(r.queue_id, r.queue_offset) for r in rows}) == 70
    assert 3 in {r.queue_id for r in rows}


def test_ferrymq_sink_exactly_once_across_stop_and_lost_commit(spark, address, tmp_path):
    with Admin(address) as admin:
        admin.create_topic("st-src", queue_count=2)
        admin.create_topic("st-dst", queue_count=2)
    bodies = [b"event-%d" % (i % 35) for i in range(40)]  # repeated contents are kept
    send(address, "st-src", bodies)
    checkpoint = str(tmp_path / "checkpoint")

    def start(trigger: dict):
        return (
            stream(spark, address, "st-src", maxOffsetsPerTrigger="15")
            .selectExpr(
                "body", "keys", "tag", "map('from', cast(queue_offset as string)) AS properties"
            )
            .writeStream.format("ferrymq")
            .option("endpoints", address)
            .option("topic", "st-dst")
            .option("chunkMessages", "4")
            .option("checkpointLocation", checkpoint)
            .trigger(**trigger)
            .start()
        )

    query = start({"processingTime": "0 seconds"})
    wait_batches(query, 2)
    query.stop()
    replayed = forget_last_commit(checkpoint)
    more = [b"late-%d" % i for i in range(20)]
    send(address, "st-src", more)

    query = start({"availableNow": True})
    assert query.awaitTermination(DEADLINE_S)
    assert query.exception() is None
    assert query.recentProgress[0]["batchId"] == replayed

    written = (
        spark.read.format("ferrymq")
        .option("endpoints", address)
        .option("subscribe", "st-dst")
        .load()
        .collect()
    )
    assert Counter(r.body for r in written) == Counter(bodies + more)
    assert len({r.message_id for r in written}) == len(written)


def test_a_task_that_died_half_way_resumes_after_its_last_stored_chunk(address):
    """The sink's unit of atomicity, without Spark: a task's rows are cut into chunks in an
    order that does not depend on how the rows arrive; the rerun skips stored chunks."""
    from pyspark.sql import Row

    with Admin(address) as admin:
        admin.create_topic("st-partial", queue_count=3)
    options = write_options({"endpoints": address, "topic": "st-partial", "chunkMessages": "5"})
    rows = [Row(body=b"r-%d" % (i % 17), tag=f"g{i % 2}") for i in range(40)]

    class Crash(Exception):
        pass

    real_send, calls = Sender.send, []

    def send_then_crash(self, chunk, idempotent):
        if len(calls) == 3:
            raise Crash
        calls.append(len(chunk))
        real_send(self, chunk, idempotent)

    Sender.send = send_then_crash
    try:
        with pytest.raises(Crash):
            write_rows(options, iter(rows), 0, "sink|7")
    finally:
        Sender.send = real_send
    # The rerun gets its rows in another order and even cuts chunks differently (another
    # chunkMessages): what is stored is still recognised, message by message if need be.
    again = write_options({"endpoints": address, "topic": "st-partial", "chunkMessages": "6"})
    report = write_rows(again, iter(reversed(rows)), 0, "sink|7")
    assert (report.skipped, report.sent) == (15, 25)
    report = write_rows(options, iter(rows), 0, "sink|7")
    assert (report.skipped, report.sent) == (40, 0)
    with Admin(address) as admin:
        stored = sum(q.max_offset for q in admin.describe_topic("st-partial")[1])
    assert stored == 40


def test_stream_read_continues_across_a_node_restart(spark, tmp_path):
    """SIGKILL the node mid-query and start it again on its port: the driver's planning and
    the executors' fetches retry until it answers, and the output has no gap and no
    duplicate offset. (A master failover in a cluster takes the same path, through
    routing; that test comes with the cluster.)"""
    data_dir = str(tmp_path / "node")
    node = start_node(data_dir)
    port = int(node.address.rsplit(":", 1)[1])
    try:
        with Admin(node.address) as admin:
            admin.create_topic("st-restart", queue_count=2)
        before = [b"before-%d" % i for i in range(30)]
        send(node.address, "st-restart", before)
        output, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
        query = (
            stream(spark, node.address, "st-restart", maxOffsetsPerTrigger="10")
            .select("queue_id", "queue_offset", "body")
            .writeStream.format("parquet")
            .option("path", output)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="0 seconds")
            .start()
        )
        wait_batches(query, 1)
        node.sigkill()
        node = start_node(data_dir, port=port)
        after = [b"after-%d" % i for i in range(20)]
        send(node.address, "st-restart", after)
        deadline = time.monotonic() + DEADLINE_S
        while sum(p["numInputRows"] for p in query.recentProgress) < 50:
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, query.recentProgress
            query.awaitTermination(0.2)
        query.stop()
        rows = spark.read.parquet(output).collect()
        assert Counter(r.body for r in rows) == Counter(before + after)
        offsets = sorted((r.queue_id, r.queue_offset) for r in rows)
        for queue in (0, 1):
            mine = [o for q, o in offsets if q == queue]
            assert mine == list(range(len(mine)))  # no gap, no duplicate
    finally:
        node.sigkill()


def test_stream_read_continues_across_a_master_failover(spark, tmp_path):
    """A 3-node broker group (SYNC): kill -9 its master mid-query. Planning and fetches ask
    routing again and continue on the new master; everything read before the kill was
    confirmed by the in-sync slaves, so offsets continue with no gap and no duplicate."""
    plan = cluster_up(str(tmp_path / "cluster"), nodes=3, auto_ports=True, settings=SMALL_STORE)
    access = ",".join(n.grpc for n in plan.nodes)
    try:
        with Admin(plan.nodes[0].grpc) as admin:
            admin.create_topic("st-failover", queue_count=2)
        topic_everywhere(plan, "st-failover")
        before = [b"before-%d" % i for i in range(30)]
        send(access, "st-failover", before)
        output, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
        query = (
            stream(spark, access, "st-failover", maxOffsetsPerTrigger="10")
            .select("broker_group", "queue_id", "queue_offset", "body")
            .writeStream.format("parquet")
            .option("path", output)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="0 seconds")
            .start()
        )
        wait_batches(query, 1)
        master = master_of(plan)
        kill(plan, master)
        survivors = [n for n in plan.nodes if n.id != master.id]
        master_of(plan, survivors)
        after = [b"after-%d" % i for i in range(20)]
        send(",".join(n.grpc for n in survivors), "st-failover", after)
        deadline = time.monotonic() + DEADLINE_S
        while sum(p["numInputRows"] for p in query.recentProgress) < 50:
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, query.recentProgress
            query.awaitTermination(0.2)
        query.stop()
        rows = spark.read.parquet(output).collect()
        assert Counter(r.body for r in rows) == Counter(before + after)
        offsets = sorted((r.queue_id, r.queue_offset) for r in rows)
        for queue in (0, 1):
            mine = [o for q, o in offsets if q == queue]
            assert mine == list(range(len(mine)))  # no gap, no duplicate
    finally:
        stop_all(plan)
