"""The ferrymq Spark data source in batch mode: real local[2] Spark, real node processes.

Needs Java 17+ (the session fixture fails with a clear message otherwise, never skips).
"""

from __future__ import annotations

import json
import time

import pytest

from ferrymq.client import Admin, Message, Producer
from ferrymq.spark.options import read_options
from ferrymq.spark.records import ARROW_SCHEMA
from tests.support.nodes import start_node

# Small segments and instant retention so a test can make a queue's minimum move.
RETENTION_TOML = """
retention_ms = 1
retention_check_interval_ms = 100
max_message_body_bytes = 1048576
"""


def reader(spark, address, topics, **options):
    read = spark.read.format("ferrymq").option("endpoints", address).option("subscribe", topics)
    for name, value in options.items():
        read = read.option(name, value)
    return read.load()


def test_arrow_schema_is_what_spark_expects(spark):
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = reader(spark, "127.0.0.1:1", "any").schema
    assert to_arrow_schema(schema, timezone="UTC").equals(ARROW_SCHEMA)


def test_batch_read_of_a_known_range_returns_exactly_what_was_sent(spark, address):
    with Admin(address) as admin:
        admin.create_topic("sp-read", queue_count=3)
    sent = {}
    with Producer(address) as producer:
        for round_ in range(4):
            batch = [
                Message(
                    "sp-read",
                    b"body-%d-%d" % (round_, i) * (i + 1),
                    tag=f"t{i % 2}",
                    keys=[f"k{round_}-{i}", "shared"],
                    properties={"round": str(round_)},
                )
                for i in range(5)
            ]
            for message, receipt in zip(batch, producer.send_batch(batch), strict=True):
                sent[message.message_id] = (message, receipt.queue_offset)

    rows = reader(spark, address, "sp-read").collect()
    assert len(rows) == 20
    for row in rows:
        message, offset = sent[row.message_id]
        assert (row.topic, row.body, row.keys, row.tag) == (
            "sp-read",
            message.body,
            message.keys,
            message.tag,
        )
        assert row.queue_offset == offset and row.properties == message.properties
        assert row.broker_group and row.store_timestamp >= row.born_timestamp
    assert len({(r.queue_id, r.queue_offset) for r in rows}) == 20

    # A range: queue by queue, [start, end) exactly.
    by_queue = {}
    for row in rows:
        by_queue.setdefault(row.queue_id, []).append(row.queue_offset)
    queue = max(by_queue, key=lambda q: len(by_queue[q]))
    high = max(by_queue[queue])
    ranged = reader(
        spark,
        address,
        "sp-read",
        startingOffsets=json.dumps({"sp-read": {str(queue): 1}}),
        endingOffsets=json.dumps({"sp-read": {str(queue): high}}),
    ).collect()
    mine = sorted(r.queue_offset for r in ranged if r.queue_id == queue)
    assert mine == list(range(1, high))
    others = sorted((r.queue_id, r.queue_offset) for r in ranged if r.queue_id != queue)
    assert others == sorted((q, o) for q in by_queue if q != queue for o in by_queue[q])


def test_batch_write_then_read_back(spark, address):
    with Admin(address) as admin:
        admin.create_topic("sp-write-src", queue_count=2)
        admin.create_topic("sp-write-dst", queue_count=2)
    rows = [
        ("sp-write-dst", b"payload-%d" % i, [f"key-{i}"], f"tag-{i % 3}", {"n": str(i)})
        for i in range(50)
    ]
    frame = spark.createDataFrame(
        rows,
        "topic string, body binary, keys array<string>, tag string, properties map<string,string>",
    )
    frame.write.format("ferrymq").option("endpoints", address).mode("append").save()
    back = reader(spark, address, "sp-write-dst").collect()
    assert sorted((r.body, r.keys[0], r.tag, r.properties["n"]) for r in back) == sorted(
        (body, keys[0], tag, props["n"]) for _, body, keys, tag, props in rows
    )


def test_idempotent_batch_write_stores_each_row_once(spark, address):
    """``sinkId`` + ``batchId`` (foreachBatch): writing the same batch again adds nothing,
    even when its rows arrive in another order."""
    with Admin(address) as admin:
        admin.create_topic("sp-idem", queue_count=2)
    frame = spark.createDataFrame(
        [(b"row-%d" % (i % 40),) for i in range(60)], "body binary"
    )  # 20 duplicated contents: duplicates in the input are kept, replays are not

    def write(data, batch_id):
        (
            data.write.format("ferrymq")
            .option("endpoints", address)
            .option("topic", "sp-idem")
            .option("sinkId", "test-sink")
            .option("batchId", str(batch_id))
            .option("chunkMessages", "7")
            .mode("append")
            .save()
        )

    write(frame.coalesce(1), 0)
    write(frame.coalesce(1).orderBy("body", ascending=False).coalesce(1), 0)
    bodies = sorted(r.body for r in reader(spark, address, "sp-idem").collect())
    assert bodies == sorted(b"row-%d" % (i % 40) for i in range(60))
    write(frame.coalesce(1), 1)  # another batch id is another batch
    assert reader(spark, address, "sp-idem").count() == 120


def test_bad_options_give_clear_errors(spark, address):
    with Admin(address) as admin:
        admin.create_topic("sp-bad", queue_count=2)

    def error_of(**options) -> str:
        with pytest.raises(Exception) as caught:
            reader(spark, address, options.pop("subscribe", "sp-bad"), **options).collect()
        return str(caught.value)

    assert "topic 'sp-missing' does not exist" in error_of(subscribe="sp-missing")
    assert "startingOffsets" in error_of(startingOffsets='{"sp-bad": {"0": 1')
    assert "nor valid JSON" in error_of(startingOffsets='{"sp-bad": {"0": 1')
    assert "has no queue 7" in error_of(startingOffsets='{"sp-bad": {"7": 0}}')
    assert "not in 'subscribe'" in error_of(endingOffsets='{"other": {"0": 0}}')
    assert "past the end" in error_of(endingOffsets='{"sp-bad": {"0": 5}}')
    with pytest.raises(ValueError, match="'endpoints' is required"):
        read_options({"subscribe": "x"}, streaming=False)
    with pytest.raises(ValueError, match="is not a number"):
        read_options(
            {"endpoints": "h:1", "subscribe": "x", "startingOffsets": '{"x": {"a": 1}}'},
            streaming=False,
        )
    with pytest.raises(ValueError, match="for streaming reads only"):
        read_options(
            {"endpoints": "h:1", "subscribe": "x", "maxOffsetsPerTrigger": "5"}, streaming=False
        )


def test_offsets_below_the_retained_minimum(spark, tmp_path):
    node = start_node(str(tmp_path / "node"), RETENTION_TOML)
    try:
        with Admin(node.address) as admin:
            admin.create_topic("sp-retained", queue_count=1)
            with Producer(node.address) as producer:
                for _ in range(12):  # 12 MiB: the 8 MiB first segment fills and rolls
                    producer.send_batch(
                        [Message("sp-retained", b"x" * (256 << 10)) for _ in range(4)]
                    )
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                (queue,) = admin.describe_topic("sp-retained")[1]
                if queue.min_offset > 0:
                    break
                time.sleep(0.05)
            assert queue.min_offset > 0, "retention did not remove the first segment"
        start = json.dumps({"sp-retained": {"0": 0}})
        with pytest.raises(Exception, match="below the retained minimum"):
            reader(spark, node.address, "sp-retained", startingOffsets=start).collect()
        rows = (
            reader(
                spark, node.address, "sp-retained", startingOffsets=start, failOnDataLoss="false"
            )
            .select("queue_offset")
            .collect()
        )
        assert [r.queue_offset for r in rows] == list(range(queue.min_offset, queue.max_offset))
    finally:
        node.sigkill()


def test_java_older_than_17_or_missing_is_reported_plainly(tmp_path, monkeypatch):
    from ferrymq.spark import JavaMissing, require_java

    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nothing"))
    with pytest.raises(JavaMissing, match="needs Java 17 or newer, and no java was found"):
        require_java()
    (tmp_path / "old" / "bin").mkdir(parents=True)
    java = tmp_path / "old" / "bin" / "java"
    java.write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "old"))
    with pytest.raises(JavaMissing, match="is Java 11: install a JDK 17"):
        require_java()
