"""Batch: export a topic's offset range to Parquet (every column of the source's schema).

    ferrymq spark run export-parquet --endpoints 127.0.0.1:8081 --topic orders \\
        --output /data/orders.parquet [--starting-offsets earliest] [--ending-offsets latest]
"""

from __future__ import annotations

import argparse
import json
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="export-parquet", description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", required=True, help="node addresses, comma-separated")
    parser.add_argument("--topic", required=True, help="topic(s), comma-separated")
    parser.add_argument("--output", required=True, help="Parquet directory")
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--ending-offsets", default="latest")
    parser.add_argument("--mode", default="errorifexists", help="Spark save mode")
    parser.add_argument("--fail-on-data-loss", default="true", choices=["true", "false"])
    return parser


def run(spark, args) -> int:
    frame = (
        spark.read.format("ferrymq")
        .option("endpoints", args.endpoints)
        .option("subscribe", args.topic)
        .option("startingOffsets", args.starting_offsets)
        .option("endingOffsets", args.ending_offsets)
        .option("failOnDataLoss", args.fail_on_data_loss)
        .load()
    )
    frame.write.mode(args.mode).parquet(args.output)
    rows = spark.read.parquet(args.output).count()
    print(json.dumps({"job": "export-parquet", "output": args.output, "rows": rows}))
    return 0


if __name__ == "__main__":
    from ferrymq.spark.jobs import submit_main

    sys.exit(submit_main("export-parquet", sys.argv[1:]))
