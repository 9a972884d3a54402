"""The ferrymq source and sink on a Spark standalone cluster: a master and two workers,
each a process of its own from the pyspark package's distribution, one executor per
worker, and a driver submitted with spark-submit. Unlike local[2], every partition is read
and written in another process than the driver's, and a killed worker takes its executor's
tasks with it.

One cluster and one application serve the module (their JVMs take ~25 s to start here);
the last test kills a worker, so it stays last.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet
import pytest

from ferrymq.client import Admin, Message, Producer, PullConsumer
from ferrymq.launcher.polling import until
from tests.support.spark_standalone import StandaloneCluster
from tests.support.spark_submit import RemoteDriver

STEP_TIMEOUT_S = 90
QUEUES = 4


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    cluster = StandaloneCluster.start(tmp_path_factory.mktemp("standalone"))
    yield cluster
    cluster.close()


@pytest.fixture(scope="module")
def driver(standalone, tmp_path_factory):
    remote = RemoteDriver.submit(standalone, tmp_path_factory.mktemp("driver"))
    yield remote
    remote.close()


def send(address: str, topic: str, prefix: str, batches: int = 8) -> dict[str, bytes]:
    """``batches`` requests of 10 messages, each request to the next queue; message id ->
    body."""
    sent = {}
    with Producer(address) as producer:
        for batch in range(batches):
            messages = [Message(topic, f"{prefix}-{batch}-{i}".encode()) for i in range(10)]
            producer.send_batch(messages)
            sent.update((m.message_id, m.body) for m in messages)
    return sent


def queue_ends(address: str, topic: str) -> dict[int, int]:
    """Queue id -> its end offset (every queue starts at 0 here)."""
    with Admin(address) as admin:
        return {q.queue_id: q.max_offset for q in admin.describe_topic(topic)[1]}


def read_all(address: str, topic: str) -> list:
    """Every stored message of ``topic``, through the SDK (not through Spark)."""
    total = sum(queue_ends(address, topic).values())
    found: list = []
    with Admin(address) as admin:
        admin.create_group(f"check-{topic}")
    with PullConsumer(address, f"check-{topic}", start="beginning") as consumer:
        consumer.assign(topic, list(range(QUEUES)))
        until(
            lambda: found.extend(consumer.poll(wait_s=0.2)) or len(found) >= total,
            STEP_TIMEOUT_S,
            f"the {total} messages of {topic}",
        )
    return found


@pytest.fixture(scope="module")
def orders(address) -> dict[str, bytes]:
    """Topic "sa-orders", 4 queues with 20 messages each: message id -> body."""
    with Admin(address) as admin:
        admin.create_topic("sa-orders", queue_count=QUEUES)
    sent = send(address, "sa-orders", "order")
    assert set(queue_ends(address, "sa-orders").values()) == {20}, "not spread evenly"
    return sent


def worker_dir(standalone: StandaloneCluster, where: str) -> str:
    """The worker whose work directory holds the executor directory ``where``."""
    relative = Path(where).resolve().relative_to((standalone.root / "work").resolve())
    return relative.parts[0]


def test_each_queue_is_a_partition_read_on_executors_in_other_processes(
    address, standalone, driver, orders
):
    answer = driver.call("read_topic", STEP_TIMEOUT_S, endpoints=address, topic="sa-orders")

    rows = answer["rows"]
    assert answer["partitions"] == QUEUES
    assert sorted(r[3] for r in rows) == sorted(orders)  # every message once
    assert all(orders[r[3]] == r[4].encode() for r in rows)
    by_partition: dict[int, list] = {}
    for row in rows:
        by_partition.setdefault(row[0], []).append(row)
    assert len(by_partition) == QUEUES
    queues = set()
    for partition_rows in by_partition.values():
        (queue,) = {r[1] for r in partition_rows}  # a partition is one queue's range
        queues.add(queue)
        offsets = sorted(r[2] for r in partition_rows)
        assert offsets == list(range(20))  # [0, end) of its queue: no gap, no duplicate
    assert queues == set(range(QUEUES))
    # Executors in processes of their own, on both workers, under this application.
    executors = {r[5] for r in rows}
    assert {worker_dir(standalone, where) for where in executors} == {"worker-0", "worker-1"}
    assert all(Path(where).parent.name == driver.app_id for where in executors)
    assert driver.program_pid not in {r[6] for r in rows}


def test_a_pipeline_exports_a_topic_on_the_cluster(address, driver, orders, tmp_path):
    """export-parquet, the README's spark-submit example, in this application."""
    output = tmp_path / "export.parquet"
    argv = ["--endpoints", address, "--topic", "sa-orders", "--output", str(output)]
    assert driver.call("run_job", STEP_TIMEOUT_S, name="export-parquet", argv=argv) == 0
    exported = pyarrow.parquet.read_table(output).to_pydict()
    assert sorted(exported["message_id"]) == sorted(orders)


def test_an_idempotent_batch_write_from_both_executors_stores_each_row_once(
    address, driver, orders
):
    with Admin(address) as admin:
        admin.create_topic("sa-copy", queue_count=QUEUES)
    copy = {"endpoints": address, "source": "sa-orders", "target": "sa-copy", "sink_id": "sa"}
    driver.call("copy_topic", STEP_TIMEOUT_S, batch_id=0, **copy)
    driver.call("copy_topic", STEP_TIMEOUT_S, batch_id=0, **copy)  # a replay of batch 0
    assert Counter(m.body for m in read_all(address, "sa-copy")) == Counter(orders.values())


def test_a_worker_killed_mid_write_is_retried_with_no_duplicate_and_no_loss(
    address, standalone, driver, tmp_path
):
    """The first attempt of partition 0 stores 2 chunks of 4 messages and stalls; the test
    kill -9s its worker (worker JVM, executor JVM, Python workers). Spark runs the task
    again on the other worker's executor: the sink finds the 2 chunks stored and skips
    them, so the topic holds every input record exactly once."""
    with Admin(address) as admin:
        admin.create_topic("sa-stream-src", queue_count=QUEUES)
        admin.create_topic("sa-stream-dst", queue_count=QUEUES)
    sent = send(address, "sa-stream-src", "stream")
    assert queue_ends(address, "sa-stream-src")[0] == 20  # partition 0: 5 chunks
    signal = tmp_path / "stalled.json"

    driver.send(
        "stream_with_a_stall",
        endpoints=address,
        source="sa-stream-src",
        target="sa-stream-dst",
        checkpoint=str(tmp_path / "checkpoint"),
        signal_path=str(signal),
        stall_after_chunks=2,
        timeout_s=STEP_TIMEOUT_S,
    )
    stalled = until(
        lambda: signal.exists() and json.loads(signal.read_text()),
        STEP_TIMEOUT_S,
        "partition 0's first attempt to stall",
    )
    assert len(stalled["stored"]) == 8
    with Admin(address) as admin:
        for message_id in stalled["stored"]:  # stored before the kill, by the killed task
            assert admin.query_by_id(message_id, "sa-stream-dst")
    standalone.kill_worker(standalone.worker_hosting(stalled["pid"]))

    answer = driver.result(STEP_TIMEOUT_S)

    assert answer["ended"] and answer["error"] is None, answer
    assert answer["failed_tasks"] >= 1  # the killed attempt, run again elsewhere
    assert standalone.state()["aliveworkers"] == 1
    written = read_all(address, "sa-stream-dst")
    assert Counter(m.body for m in written) == Counter(sent.values())
    ids = Counter(m.message_id for m in written)
    assert all(ids[message_id] == 1 for message_id in stalled["stored"])
    assert len(ids) == len(sent)
