"""Batch: replay Parquet rows into a topic (``body`` required; ``topic``, ``keys``, ``tag``,
``properties`` and ``message_group`` used when present). Reads what export-parquet writes.

    ferrymq spark run replay-parquet --endpoints 127.0.0.1:8081 --input /data/orders.parquet \\
        [--topic orders-copy]

With ``--replay-id`` the replay is idempotent: running it again with the same id and input
stores nothing twice.
"""

from __future__ import annotations

import argparse
import json
import sys

WRITABLE = ("topic", "body", "keys", "tag", "properties", "message_group")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="replay-parquet", description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", required=True, help="node addresses, comma-separated")
    parser.add_argument("--input", required=True, help="Parquet directory")
    parser.add_argument("--topic", help="send every row here (default: the topic column)")
    parser.add_argument("--replay-id", help="make the replay idempotent under this id")
    return parser


def run(spark, args) -> int:
    source = spark.read.parquet(args.input)
    columns = [c for c in WRITABLE if c in source.columns and not (c == "topic" and args.topic)]
    if "body" not in columns:
        raise ValueError(f"{args.input} has no 'body' column (columns: {source.columns})")
    if {"topic", "queue_id", "queue_offset"} <= set(source.columns):
        # An export: replay in the order the messages were stored, queue by queue.
        source = source.orderBy("topic", "queue_id", "queue_offset")
    frame = source.select(*columns)
    write = frame.write.format("ferrymq").option("endpoints", args.endpoints).mode("append")
    if args.topic:
        write = write.option("topic", args.topic)
    if args.replay_id:
        write = write.option("sinkId", f"replay:{args.replay_id}").option("batchId", "0")
    write.save()
    print(json.dumps({"job": "replay-parquet", "input": args.input, "rows": frame.count()}))
    return 0


if __name__ == "__main__":
    from ferrymq.spark.jobs import submit_main

    sys.exit(submit_main("replay-parquet", sys.argv[1:]))
