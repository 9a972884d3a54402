"""Spark benchmark: ``python -m bench.spark --json [--quick | --smoke] [--no-kafka]``.

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
  checkpoint's writes included);
- ``kafka_batch_read_rows_per_s`` and ``kafka_batch_read_cpu_us_per_row``: the same rows
  (1 KiB values, a key each, one topic of 4 partitions) in the Kafka peer of
  ``bench.peers`` (Apache Kafka 4.1, three KRaft nodes, RF 3), read in the same session
  through Spark's own Kafka source (``spark-sql-kafka-0-10`` at the installed PySpark's
  version, or one of ``KAFKA_SOURCE_FALLBACKS`` when Maven Central lacks it; fetched by Spark from
  Maven Central into the benchmark cache's Ivy directory; ``kafka_source`` says which)
  into ``noop``, best of the runs after a warm-up; the CPU counts this driver, Spark's
  JVM and the three Kafka JVMs (the ferrymq node is stopped by then). ``ratio_batch_read
  _vs_kafka`` is ferrymq's rows/s over Kafka's. Without Java, Maven or the artifacts, one
  line says why and the ferrymq figures stand alone (``--no-kafka`` skips it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from importlib.metadata import version

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


# Spark Kafka sources of the same line (Spark 4, Scala 2.13) to try, newest first, when the
# installed PySpark's own version is not on Maven Central (PySpark 4.3.0 is on PyPI while
# Spark 4.3.0's artifacts are not, as of this writing). 4.2.0 and 4.1.1 are the newest whose
# spark-token-provider-kafka dependency is served too (4.1.0 and 4.0.1 lack it).
KAFKA_SOURCE_FALLBACKS = ("4.2.0", "4.1.1")


def kafka_package(spark_version: str = "") -> str:
    """Spark's Kafka source at ``spark_version`` (the installed PySpark's by default;
    Scala 2.13, as Spark 4)."""
    return f"org.apache.spark:spark-sql-kafka-0-10_2.13:{spark_version or version('pyspark')}"


def kafka_packages() -> list[str]:
    """The Kafka sources to try, in order: the installed PySpark's version, then the
    fallbacks."""
    wanted = [kafka_package(), *(kafka_package(v) for v in KAFKA_SOURCE_FALLBACKS)]
    return list(dict.fromkeys(wanted))


def session_config(package: str, cache: str) -> dict[str, str]:
    """The session's settings: with a Kafka source ``package``, Spark fetches it from
    Maven Central into ``cache``'s Ivy directory at start (once; later runs find it)."""
    config = {"spark.driver.memory": "1g"}
    if package:
        config["spark.jars.packages"] = package
        config["spark.jars.ivy"] = os.path.join(cache, "ivy")
    return config


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[-1] if text else repr(error)


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def fill_kafka(peer, topic: str, count: int) -> None:
    """``count`` rows like ``fill``'s: 1 KiB values, a key each, over 4 partitions."""
    producer = peer._batching_producer()
    failures: list = []

    def delivered(error, _message) -> None:
        if error is not None:
            failures.append(error)

    for i in range(count):
        while True:
            try:
                producer.produce(topic, BODY, key=f"key-{i}", on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(120) or failures:
        raise RuntimeError(f"kafka fill: {failures[:1] or 'not all delivered'}")


def kafka_read(spark, count: int, runs: int) -> dict:
    """Start the Kafka peer, fill it, read it through Spark's Kafka source; its figures,
    or {"kafka_unavailable": why} in one line."""
    from bench.peers.kafka_kraft import KafkaKraft
    from bench.peers.processes import ProcessRegistry

    with ProcessRegistry("spark-kafka") as registry:
        peer = KafkaKraft()
        try:
            peer.start(registry)
        except Exception as error:  # jvm.JvmUnavailable is already one line
            reason = str(error).splitlines()[0] if str(error) else repr(error)
            log(f"kafka: not measured: {reason}")
            return {"kafka_unavailable": reason}
        peer._create(TOPIC, QUEUES)
        fill_kafka(peer, TOPIC, count)
        roots = [os.getpid()]  # Spark's JVM and the Kafka JVMs are its children
        cpu_per_row: list[float] = []

        def batch_read() -> float:
            cpu_before = tree_cpu_s(roots)
            started = time.perf_counter()
            (
                spark.read.format("kafka")
                .option("kafka.bootstrap.servers", peer.bootstrap)
                .option("subscribe", TOPIC)
                .option("startingOffsets", "earliest")
                .load()
                .write.format("noop")
                .mode("overwrite")
                .save()
            )
            elapsed = time.perf_counter() - started
            cpu_per_row.append((tree_cpu_s(roots) - cpu_before) / count * 1e6)
            return elapsed

        rows = spark.read.format("kafka").option("kafka.bootstrap.servers", peer.bootstrap)
        assert rows.option("subscribe", TOPIC).load().count() == count
        batch_read()  # warm-up
        seconds = [batch_read() for _ in range(runs)]
        return {
            "kafka_batch_read_rows_per_s": round(count / min(seconds)),
            "kafka_batch_read_runs_s": [round(s, 2) for s in seconds],
            "kafka_batch_read_cpu_us_per_row": round(min(cpu_per_row[1:]), 2),
        }


SIZES = {"full": (300_000, 3), "quick": (60_000, 2), "smoke": (8192, 1)}  # rows, runs


def run(mode: str = "full", kafka: bool = True) -> dict:
    from bench.peers import jvm
    from ferrymq.spark import build_session

    count, runs = SIZES[mode]
    count -= count % PER_REQUEST
    data_dir = tempfile.mkdtemp(prefix="ferrymq-bench-spark-")
    node = start_node_process(os.path.join(data_dir, "node"), NODE_TOML, timeout_s=60)
    process, address = node.process, node.address
    kafka_figures: dict = {}
    try:
        fill(address, count)
        spark, package, failures = None, "", []
        for package in kafka_packages() if kafka else []:
            try:
                config = session_config(package, jvm.CACHE)
                spark = build_session("local[2]", "ferrymq-bench", **config)
                break
            except Exception as error:  # spark-submit exits; its output above names it
                failures.append(package)
                log(f"kafka: {package} not loaded: {first_line(error)}")
        if spark is None:
            if kafka:
                kafka_figures = {
                    "kafka_unavailable": f"Spark could not load {' nor '.join(failures)}: an "
                    "artifact or one of its dependencies not found on Maven Central (Spark's "
                    "output names it)"
                }
                log(f"kafka: not measured: {kafka_figures['kafka_unavailable']}")
                kafka = False
            package = ""
            spark = build_session("local[2]", "ferrymq-bench", **session_config("", ""))

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
        batch_seconds = [batch_read() for _ in range(runs)]

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
            stream_read(os.path.join(data_dir, f"checkpoint-{i}")) for i in range(runs)
        ]
        # The node goes before Kafka's turn: its CPU must not count in Kafka's figure.
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        if kafka:
            kafka_figures = kafka_read(spark, count, runs)
            kafka_figures.setdefault("kafka_source", package)
        spark.stop()
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait(10)
        shutil.rmtree(data_dir, ignore_errors=True)
    ours = round(count / min(batch_seconds))
    if "kafka_batch_read_rows_per_s" in kafka_figures:
        theirs = kafka_figures["kafka_batch_read_rows_per_s"]
        kafka_figures["ratio_batch_read_vs_kafka"] = round(ours / theirs, 2)
    return {
        "rows": count,
        "body_bytes": len(BODY),
        "queues": QUEUES,
        "batch_read_rows_per_s": ours,
        "batch_read_runs_s": [round(s, 2) for s in batch_seconds],
        "batch_read_cpu_us_per_row": round(min(cpu_per_row[1:]), 2),
        "stream_rows_per_s": round(count / min(stream_seconds)),
        "stream_runs_s": [round(s, 2) for s in stream_seconds],
        **kafka_figures,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="smaller run")
    size.add_argument("--smoke", action="store_true", help="a few thousand rows, one run")
    parser.add_argument(
        "--no-kafka", action="store_true", help="skip Spark's Kafka source on the Kafka peer"
    )
    args = parser.parse_args()
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    figures = run(mode, kafka=not args.no_kafka)
    if not args.json:
        for name, value in figures.items():
            print(f"{name:28} {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
