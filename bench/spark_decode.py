"""Spark source decoding: ``python -m bench.spark_decode --json [--smoke]``.

The CPU the Spark source spends per row turning one Data.Fetch answer into an Arrow batch
(``ferrymq.spark.records.decode_batch``), without Spark, a node or the network: 1,000
records of a 1 KiB body with UNIQ_KEY, TAGS, two KEYS, the message type and one user
property, as a node stores them, decoded over and over in this process. Prints one JSON
object (last line):

- ``decode_batch_cpu_us_per_row``: process CPU time (user + system) per row, best of 7
  rounds of 50 answers (a round is ~15 ms with the C walk: the best one is the least
  disturbed by other work on the cores);
- ``python_twin_cpu_us_per_row``: the same for ``fetch_columns_in_python``, the walk's
  specification, which the C declines to (only for answers it refuses): what a refusal
  path costs, and what the C saves.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable

from ferrymq.codec.commitlog_record import encode, record_size
from ferrymq.codec.properties import encode_properties
from ferrymq.spark.fetch_columns import fetch_columns_in_python
from ferrymq.spark.records import decode_batch

TOPIC = "bench-topic"
QUEUE_ID = 3
BODY_BYTES = 1024


def fetch_answer(rows: int) -> bytes:
    """``rows`` records back to back, as Data.Fetch returns them."""
    topic = TOPIC.encode()
    records = []
    for index in range(rows):
        body = os.urandom(BODY_BYTES)
        properties = encode_properties(
            {
                "UNIQ_KEY": f"0A0B0C0D{index:024X}",
                "TAGS": "TagA",
                "KEYS": f"k{index} order-{index}",
                "__MSG_TYPE": "1",
                "user": "v",
            }
        )
        records.append(
            encode(
                size=record_size(len(body), len(topic), len(properties)),
                body=body,
                topic=topic,
                properties=properties,
                queue_id=QUEUE_ID,
                flag=0,
                queue_offset=index,
                physical_offset=index * 1200,
                sys_flag=0,
                born_timestamp_ms=1_700_000_000_000 + index,
                born_host=b"\x00" * 8,
                store_timestamp_ms=1_700_000_000_001 + index,
                store_host=b"\x00" * 8,
                reconsume_times=0,
                prepared_transaction_offset=0,
            )
        )
    return b"".join(records)


def cpu_us_per_row(decode: Callable[[], object], rows: int, rounds: int, calls: int) -> float:
    for _ in range(max(1, calls // 5)):  # warm-up: caches, Arrow's memory pool
        decode()
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for _ in range(calls):
            decode()
        best = min(best, (time.process_time() - started) / calls / rows * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    parser.add_argument("--smoke", action="store_true", help="a few rounds of a small answer")
    arguments = parser.parse_args()
    rows, rounds, calls = (100, 2, 3) if arguments.smoke else (1000, 7, 50)
    records = fetch_answer(rows)
    end = 1 << 62
    figures = {
        "rows_per_answer": rows,
        "decode_batch_cpu_us_per_row": cpu_us_per_row(
            lambda: decode_batch(records, TOPIC, QUEUE_ID, end, "group"), rows, rounds, calls
        ),
        "python_twin_cpu_us_per_row": cpu_us_per_row(
            lambda: fetch_columns_in_python(records, TOPIC, QUEUE_ID, end),
            rows,
            rounds,
            max(1, calls // 10),
        ),
    }
    if not arguments.json:
        for name, value in figures.items():
            print(f"{name}: {value:.3f}" if isinstance(value, float) else f"{name}: {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
