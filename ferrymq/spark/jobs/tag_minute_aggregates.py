"""Streaming: JSON events from a topic, counted (and their ``value`` summed) per tag per
minute, written to Parquet and back to a ferrymq topic.

    ferrymq spark run tag-minute-aggregates --endpoints 127.0.0.1:8081 --topic events \\
        --output /data/minutes --output-topic minutes --checkpoint /data/minutes-checkpoint \\
        [--available-now] [--max-offsets-per-trigger 100000]

Events are JSON objects; ``ts`` (epoch milliseconds) is the event time when present, the
store time otherwise; ``value`` (a number) is summed when present. Malformed bodies count
as events without a value. A minute stays open for ``--watermark`` (default 10 minutes)
of event time, then its state is dropped.

Each micro-batch writes the minutes it changed (Spark's update mode):

- Parquet: ``<output>/batch_id=<n>/``, overwritten when the batch runs again, so a replay
  after a crash leaves one copy. A minute's current figures are in its row with the
  highest ``batch_id``.
- the topic: one message per (minute, tag), body ``{"minute": ..., "tag": ..., "events":
  ..., "value_sum": ..., "batch_id": ...}``, tag = the event tag, key ``<tag>@<minute>``;
  written idempotently per batch id (a replayed batch adds no message).

Restarting with the same ``--checkpoint`` continues exactly after the last committed batch.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tag-minute-aggregates", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--endpoints", required=True, help="node addresses, comma-separated")
    parser.add_argument("--topic", required=True, help="topic(s) of JSON events")
    parser.add_argument("--output", required=True, help="Parquet directory")
    parser.add_argument("--output-topic", required=True, help="topic for the aggregates")
    parser.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--max-offsets-per-trigger", type=int)
    parser.add_argument("--watermark", default="10 minutes")
    parser.add_argument(
        "--available-now", action="store_true", help="process what is there, then stop"
    )
    parser.add_argument("--trigger-interval", default="10 seconds")
    return parser


def aggregates(spark, args):
    from pyspark.sql import functions as F

    read = (
        spark.readStream.format("ferrymq")
        .option("endpoints", args.endpoints)
        .option("subscribe", args.topic)
        .option("startingOffsets", args.starting_offsets)
    )
    if args.max_offsets_per_trigger:
        read = read.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    events = read.load()
    parsed = events.select(
        F.coalesce(F.col("tag"), F.lit("")).alias("tag"),
        F.from_json(F.col("body").cast("string"), "ts long, value double").alias("event"),
        F.col("store_timestamp"),
    )
    timed = parsed.select(
        "tag",
        F.coalesce(F.timestamp_millis(F.col("event.ts")), F.col("store_timestamp")).alias(
            "event_time"
        ),
        F.col("event.value").alias("value"),
    )
    return (
        timed.withWatermark("event_time", args.watermark)
        .groupBy(F.window("event_time", "1 minute").start.alias("minute"), "tag")
        .agg(F.count(F.lit(1)).alias("events"), F.sum("value").alias("value_sum"))
    )


def write_batch(args, sink_id: str):
    def write(frame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        frame = frame.withColumn("batch_id", F.lit(batch_id)).persist()
        try:
            frame.write.mode("overwrite").parquet(os.path.join(args.output, f"batch_id={batch_id}"))
            minute = F.date_format("minute", "yyyy-MM-dd'T'HH:mm'Z'")
            (
                frame.select(
                    F.to_json(
                        F.struct(minute.alias("minute"), "tag", "events", "value_sum", "batch_id")
                    ).alias("body"),
                    F.col("tag"),
                    F.array(F.concat_ws("@", "tag", minute)).alias("keys"),
                )
                .write.format("ferrymq")
                .option("endpoints", args.endpoints)
                .option("topic", args.output_topic)
                .option("sinkId", sink_id)
                .option("batchId", str(batch_id))
                .mode("append")
                .save()
            )
        finally:
            frame.unpersist()

    return write


def run(spark, args) -> int:
    # The same checkpoint gives the same sink id, so a batch replayed after a restart is
    # recognised as already written.
    checkpoint = os.path.realpath(args.checkpoint)
    sink_id = "tag-minute:" + hashlib.blake2b(checkpoint.encode(), digest_size=8).hexdigest()
    writer = (
        aggregates(spark, args)
        .writeStream.outputMode("update")
        .foreachBatch(write_batch(args, sink_id))
        .option("checkpointLocation", checkpoint)
    )
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=args.trigger_interval)
    query = writer.start()
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"the query failed: {query.exception()}")
    print(json.dumps({"job": "tag-minute-aggregates", "batches": len(query.recentProgress)}))
    return 0


if __name__ == "__main__":
    from ferrymq.spark.jobs import submit_main

    sys.exit(submit_main("tag-minute-aggregates", sys.argv[1:]))
