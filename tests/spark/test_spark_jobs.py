"""The Spark pipelines in ferrymq/spark/jobs/, run through ``ferrymq spark run`` against a
real node on local[2] Spark."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

from ferrymq.cli.main import main as cli
from ferrymq.client import Admin, Message, Producer


def read_topic(spark, address, topic):
    return (
        spark.read.format("ferrymq")
        .option("endpoints", address)
        .option("subscribe", topic)
        .load()
        .collect()
    )


def test_export_a_range_to_parquet_and_replay_it_into_another_topic(spark, address, tmp_path):
    with Admin(address) as admin:
        admin.create_topic("jb-orders", queue_count=2)
        admin.create_topic("jb-copy", queue_count=3)
    with Producer(address) as producer:
        producer.send_batch(
            [
                Message(
                    "jb-orders",
                    b"order-%d" % i,
                    tag="new",
                    keys=[f"o{i}"],
                    properties={"i": str(i)},
                )
                for i in range(30)
            ]
        )
    by_queue = {}
    for row in read_topic(spark, address, "jb-orders"):
        by_queue.setdefault(row.queue_id, []).append(row)
    (queue,) = by_queue  # one batch request: one queue
    output = str(tmp_path / "orders.parquet")
    ending = json.dumps({"jb-orders": {str(queue): 20}})
    args = ["--endpoints", address, "--topic", "jb-orders", "--output", output]
    assert cli(["spark", "run", "export-parquet", *args, "--ending-offsets", ending]) == 0
    exported = spark.read.parquet(output).collect()
    assert sorted(r.queue_offset for r in exported) == list(range(20))
    assert {r.body for r in exported} == {b"order-%d" % i for i in range(20)}

    replay = ["--endpoints", address, "--input", output, "--topic", "jb-copy", "--replay-id", "r1"]
    assert cli(["spark", "run", "replay-parquet", *replay]) == 0
    assert cli(["spark", "run", "replay-parquet", *replay]) == 0  # idempotent: nothing twice
    copied = read_topic(spark, address, "jb-copy")
    assert sorted((r.body, r.tag, r.keys[0], r.properties["i"]) for r in copied) == sorted(
        (r.body, r.tag, r.keys[0], r.properties["i"]) for r in exported
    )


def minute_of(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms // 60_000 * 60, UTC).strftime("%Y-%m-%dT%H:%MZ")


def test_tag_minute_aggregates_to_parquet_and_topic_across_restarts(spark, address, tmp_path):
    with Admin(address) as admin:
        admin.create_topic("jb-events", queue_count=2)
        admin.create_topic("jb-minutes", queue_count=1)
    base = 1_700_000_040_000  # a minute boundary
    events = [
        ("click", base + 1_000, 1.0),
        ("click", base + 2_000, 2.0),
        ("view", base + 3_000, 5.0),
        ("click", base + 61_000, 4.0),
    ]

    def send(batch):
        with Producer(address) as producer:
            producer.send_batch(
                [
                    Message("jb-events", json.dumps({"ts": ts, "value": v}).encode(), tag=tag)
                    for tag, ts, v in batch
                ]
            )

    output, checkpoint = str(tmp_path / "minutes"), str(tmp_path / "checkpoint")
    args = [
        "--endpoints", address, "--topic", "jb-events", "--output", output,
        "--output-topic", "jb-minutes", "--checkpoint", checkpoint, "--available-now",
    ]  # fmt: skip

    def current() -> dict:
        """(minute, tag) -> (events, sum) from the newest batch that wrote it, in Parquet
        and in the topic."""
        parquet, topic = {}, {}
        for row in spark.read.parquet(output).collect():
            key = (row.minute.strftime("%Y-%m-%dT%H:%MZ"), row.tag)
            if key not in parquet or parquet[key][0] < row.batch_id:
                parquet[key] = (row.batch_id, row.events, row.value_sum)
        for row in read_topic(spark, address, "jb-minutes"):
            body = json.loads(row.body)
            key = (body["minute"], body["tag"])
            assert row.keys == [f"{body['tag']}@{body['minute']}"]
            if key not in topic or topic[key][0] < body["batch_id"]:
                topic[key] = (body["batch_id"], body["events"], body["value_sum"])
        assert {k: v[1:] for k, v in parquet.items()} == {k: v[1:] for k, v in topic.items()}
        return {k: v[1:] for k, v in parquet.items()}

    send(events)
    assert cli(["spark", "run", "tag-minute-aggregates", *args]) == 0
    first, second = minute_of(base), minute_of(base + 61_000)
    assert current() == {
        (first, "click"): (2, 3.0),
        (first, "view"): (1, 5.0),
        (second, "click"): (1, 4.0),
    }
    sent_before = len(read_topic(spark, address, "jb-minutes"))

    # A crash after the last batch's writes but before its commit: the batch runs again
    # on restart and adds no message and no Parquet copy.
    os.remove(os.path.join(checkpoint, "commits", "0"))
    assert cli(["spark", "run", "tag-minute-aggregates", *args]) == 0
    assert len(read_topic(spark, address, "jb-minutes")) == sent_before

    send([("view", base + 4_000, 1.5)])
    assert cli(["spark", "run", "tag-minute-aggregates", *args]) == 0
    assert current()[(first, "view")] == (2, 6.5)
    assert len(read_topic(spark, address, "jb-minutes")) == sent_before + 1
