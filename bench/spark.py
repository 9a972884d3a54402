"""Spark benchmark: ``python -m bench.spark --json [--quick]``.

Starts a real node process (a temporary data directory, a free port), fills one topic of
4 queues with 1 KiB messages (a tag and a key each, as the other benchmarks send), and
reads it with the ``ferrymq`` data source on local[2]. Node, Spark's JVM and its Python
workers share the machine's cores. Prints one JSON object (last line):

- ``batch_read_rows_per_s``: ``spark.read.format("ferrymq")`` of the whole topic into the
  ``noop`` sink (every row materialised in the JVM, nothing written); best of the runs
  after one warm-up read;
- ``batch_read_cpu_us_per_row``: CPU time (user + system) of every process involved — the
  node, this driver, Spark's JVM and its Python workers — per row of the fastest batch
  read. The cores are often shared with other work; this figure does not depend on that:
  two idle cores give at most ``2e6 / cpu_us_per_row`` rows/s;
- ``stream_rows_per_s``: a streaming query with ``trigger(availableNow=True)`` from the
  earliest offsets into the ``noop`` sink, start to termination (planning and the
  checkpoint's writes included).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import tempfile
import time

import grpc

from bench.produce import BODY
from ferrymq.launcher.node_process import start_node_process
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from ferrymq.protocol.ferrymq import admin_pb2_grpc

# Files sized for the data (the defaults reserve 1 GiB segments and a 420 MB index).
NODE_TOML = """
[store]
commitlog_segment_bytes = 134217728
consume_queue_entries_per_file = 100000
index_slot_count = 100003
index_entry_count = 400000
"""
TOPIC = "SparkBench"
QUEUES = 4
PER_REQUEST = 256


def fill(address: str, count: int) -> None:
    async def go() -> None:
        async with grpc.aio.insecure_channel(address) as channel:
            admin = admin_pb2_grpc.AdminStub(channel)
            answer = await admin.CreateTopic(
                api.CreateTopicRequest(topic=api.Topic(name=TOPIC, queue_count=QUEUES))
            )
            assert answer.status.code == 0, answer.status
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            requests = []
            for r in range(count // PER_REQUEST):
                messages = [
                    pb.Message(
                        topic=pb.Resource(name=TOPIC),
                        body=BODY,
                        system_properties=pb.SystemProperties(
                            message_id=f"SB{r * PER_REQUEST + i:032X}",
                            message_type=pb.NORMAL,
                            tag="TagA" if i % 2 else "TagB",
                            keys=[f"key-{r * PER_REQUEST + i}"],
                            queue_id=r % QUEUES,
                            body_encoding=pb.IDENTITY,
                        ),
                    )
                    for i in range(PER_REQUEST)
                ]
                requests.append(rpc.SendMessageRequest(messages=messages))
            pending = iter(requests)

            async def worker() -> None:
                for request in pending:
                    sent = await stub.SendMessage(request)
                    assert sent.status.code == pb.OK, sent.status

            await asyncio.gather(*(worker() for _ in range(8)))

    asyncio.run(go())


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_s(roots: list[int]) -> float:
    """CPU seconds used so far by ``roots`` and all their descendants (live ones, plus
    the children they have waited for), from /proc."""
    parents, used = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        parents[int(name)] = int(fields[1])
        used[int(name)] = sum(int(f) for f in fields[11:15]) / CLOCK_TICKS
    total = 0.0
    for pid in used:
        walk = pid
        while walk > 1 and walk not in roots:
            walk = parents.get(walk, 0)
        if walk in roots:
            total += used[pid]
    return total


def run(quick: bool) -> dict:
    from ferrymq.spark import build_session

    count = 60_000 if quick else 300_000
    count -= count % PER_REQUEST
    data_dir = tempfile.mkdtemp(prefix="ferrymq-bench-spark-")
    node = start_node_process(os.path.join(data_dir, "node"), NODE_TOML, timeout_s=60)
    process, address = node.process, node.address
    try:
        fill(address, count)
        spark = build_session("local[2]", "ferrymq-bench", **{"spark.driver.memory": "1g"})

        roots = [os.getpid(), process.pid]
        cpu_per_row: list[float] = []

        def batch_read() -> float:
            cpu_before = tree_cpu_s(roots)
            started = time.perf_counter()
            (
                spark.read.format("ferrymq")
                .option("endpoints", address)
                .option("subscribe", TOPIC)
                .load()
                .write.format("noop")
                .mode("overwrite")
                .save()
            )
            elapsed = time.perf_counter() - started
            cpu_per_row.append((tree_cpu_s(roots) - cpu_before) / count * 1e6)
            return elapsed

        batch_read()  # warm-up: JVM code paths and Python workers
        batch_seconds = [batch_read() for _ in range(2 if quick else 3)]

        def stream_read(checkpoint: str) -> float:
            started = time.perf_counter()
            query = (
                spark.readStream.format("ferrymq")
                .option("endpoints", address)
                .option("subscribe", TOPIC)
                .option("startingOffsets", "earliest")
                .load()
                .writeStream.format("noop")
                .option("checkpointLocation", checkpoint)
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            assert query.exception() is None, query.exception()
            rows = sum(p["numInputRows"] for p in query.recentProgress)
            assert rows == count, (rows, count)
            return time.perf_counter() - started

        stream_seconds = [
            stream_read(os.path.join(data_dir, f"checkpoint-{i}")) for i in range(2 if quick else 3)
        ]
        spark.stop()
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        shutil.rmtree(data_dir, ignore_errors=True)
    return {
        "rows": count,
        "body_bytes": len(BODY),
        "queues": QUEUES,
        "batch_read_rows_per_s": round(count / min(batch_seconds)),
        "batch_read_runs_s": [round(s, 2) for s in batch_seconds],
        "batch_read_cpu_us_per_row": round(min(cpu_per_row[1:]), 2),
        "stream_rows_per_s": round(count / min(stream_seconds)),
        "stream_runs_s": [round(s, 2) for s in stream_seconds],
        "load_average_1m": round(os.getloadavg()[0], 2),
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    parser.add_argument("--quick", action="store_true", help="smaller run")
    args = parser.parse_args()
    figures = run(args.quick)
    if not args.json:
        for name, value in figures.items():
            print(f"{name:28} {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
