"""ferrymq: a 3-node group (one broker group, three Raft voters) in SYNC replication,
started with ``ferrymq.launcher.cluster.cluster_up``; clients through ferrymq's SDK.

A send is acknowledged once the master has it and every in-sync slave (both, normally)
has acknowledged it: in the memory (page cache) of all three nodes. Each node flushes
asynchronously (ASYNC_FLUSH, every 500 ms). Consumers read with ``PullConsumer`` (Data.Fetch),
which only ever sees messages every in-sync node holds.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import time
from importlib.metadata import version

from bench.cluster import stop_cluster, wait_all_in_sync
from bench.peers.official import OfficialClientWorkloads
from bench.peers.workloads import (
    BATCH,
    BATCHES_IN_FLIGHT,
    WAIT_S,
    WARMUP,
    age_s,
    log,
    plain_body,
    stamped_body,
)
from bench.produce import sdk_send_batches, sdk_send_each
from ferrymq.client import Admin, Message, Producer, PullConsumer
from ferrymq.launcher.cluster import cluster_up

NODES = 3
QUEUES = 8
FETCH = 512
# Small segments: a file is zero-filled when created, on each of the three nodes.
STORE = {"commitlog_segment_bytes": 64 << 20}


class Ferrymq:
    name = "ferrymq"
    durability = (
        "SYNC replication, 3 nodes: acknowledged once the master and every in-sync slave "
        "(both) hold it, in memory; ASYNC_FLUSH (page cache, flushed every 500 ms)"
    )

    def __init__(self) -> None:
        try:
            self.client = f"ferrymq SDK {version('ferrymq')}"
        except Exception:
            self.client = "ferrymq SDK"
        self.directory = ""
        self.access = ""
        self._topics = 0

    def start(self, registry) -> None:
        self.directory = os.path.join(registry.make_dir("ferrymq"), "cluster")
        settings = {"replication": {"mode": "SYNC"}, "store": dict(STORE)}
        plan = cluster_up(
            self.directory, nodes=NODES, auto_ports=True, settings=settings, timeout_s=120
        )
        for node in plan.nodes:
            registry.adopt(f"ferrymq-{node.id}", node.pid)
        self.plan = plan
        self.access = ",".join(n.grpc for n in plan.nodes)
        self.admin_address = plan.nodes[0].grpc
        log(f"  ferrymq: 3-node SYNC group up at {self.access}")

    def stop(self) -> None:
        if self.directory:
            stop_cluster(self.directory)

    def _run(self, workload, queues: int = QUEUES, group: str = ""):
        """Run ``workload(topic)`` on a fresh topic, deleted afterwards; each starts with
        all three nodes in sync, as the peers' workloads start with all replicas up."""
        wait_all_in_sync(self.plan)
        self._topics += 1
        topic = f"Bench{self._topics}"
        with Admin(self.admin_address) as admin:
            admin.create_topic(topic, queues)
            if group:
                admin.create_group(group)
            try:
                return workload(topic)
            finally:
                admin.delete_topic(topic)
                if group:
                    admin.delete_group(group)

    # ---- sends -----------------------------------------------------------------------
    def sequential_send(self, count: int) -> list[float]:
        def workload(topic: str) -> list[float]:
            body = plain_body()
            took = []
            with Producer(self.access, timeout_s=WAIT_S) as producer:
                for _ in range(WARMUP):
                    producer.send(Message(topic, body))
                for _ in range(count):
                    message = Message(topic, body)
                    started = time.perf_counter()
                    producer.send(message)
                    took.append(time.perf_counter() - started)
            return took

        return self._run(workload)

    def inflight_send(self, count: int, in_flight: int) -> float:
        """256 callers each awaiting ``send_async``; the SDK coalesces what they send
        while its requests are in flight."""

        def workload(topic: str) -> float:
            body = plain_body()

            async def run() -> float:
                await sdk_send_each(producer, [Message(topic, body) for _ in range(WARMUP)], 8)
                messages = [Message(topic, body) for _ in range(count)]
                return await sdk_send_each(producer, messages, in_flight)

            with Producer(self.access, timeout_s=WAIT_S) as producer:
                return asyncio.run(run())

        return self._run(workload)

    async def _send_batches(self, producer: Producer, topic: str, count: int) -> float:
        body = plain_body()
        batches = [
            [Message(topic, body) for _ in range(min(BATCH, count - first))]
            for first in range(0, count, BATCH)
        ]
        return await sdk_send_batches(producer, batches, BATCHES_IN_FLIGHT)

    def batched_send(self, count: int) -> float:
        def workload(topic: str) -> float:
            async def run() -> float:
                await self._send_batches(producer, topic, WARMUP * 4)
                return await self._send_batches(producer, topic, count)

            with Producer(self.access, timeout_s=WAIT_S) as producer:
                return asyncio.run(run())

        return self._run(workload)

    # ---- reads -----------------------------------------------------------------------
    def end_to_end(self, count: int) -> list[float]:
        """One queue, so that the consumer's long poll is on the queue written to."""

        def workload(topic: str) -> list[float]:
            arrived: queue.Queue[float] = queue.Queue()
            stop = threading.Event()
            failures: list[BaseException] = []

            def consume() -> None:
                try:
                    with PullConsumer(
                        self.access, "bench-e2e", start="beginning", timeout_s=WAIT_S
                    ) as reader:
                        reader.assign(topic, [0])
                        while not stop.is_set():
                            for message in reader.poll(wait_s=1.0):
                                arrived.put(age_s(message.body))
                except BaseException as error:
                    failures.append(error)

            consumer = threading.Thread(target=consume, daemon=True)
            consumer.start()
            try:
                took = []
                with Producer(self.access, timeout_s=WAIT_S) as producer:
                    for i in range(WARMUP + count):
                        producer.send(Message(topic, stamped_body()))
                        try:
                            latency = arrived.get(timeout=WAIT_S)
                        except queue.Empty:
                            raise RuntimeError(f"consumer: {failures or 'timed out'}") from None
                        if i >= WARMUP:
                            took.append(latency)
                return took
            finally:
                stop.set()
                consumer.join(WAIT_S)

        return self._run(workload, queues=1, group="bench-e2e")

    def consume(self, count: int) -> float:
        def workload(topic: str) -> float:
            with Producer(self.access, timeout_s=WAIT_S) as producer:
                asyncio.run(self._send_batches(producer, topic, count))
            with PullConsumer(
                self.access, "bench-consume", start="beginning", batch_size=FETCH, timeout_s=WAIT_S
            ) as reader:
                reader.assign(topic, list(range(QUEUES)))
                received = 0
                deadline = time.monotonic() + WAIT_S * 10
                started = time.perf_counter()
                while received < count:
                    received += len(reader.poll(wait_s=1.0))
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"read {received} of {count}")
                return time.perf_counter() - started

        return self._run(workload, group="bench-consume")


class FerrymqOfficialClient(OfficialClientWorkloads):
    """The same 3-node SYNC group measured through the official RocketMQ Python client,
    the client of the Apache RocketMQ column: the two columns differ by broker only."""

    name = "ferrymq-official"
    durability = Ferrymq.durability

    def __init__(self) -> None:
        super().__init__()
        self.client = f"rocketmq-python-client {version('rocketmq-python-client')} (official)"
        self.group = Ferrymq()

    def start(self, registry) -> None:
        self.group.start(registry)
        self.client_home = os.path.join(os.path.dirname(self.group.directory), "client")
        self.endpoints = ";".join(n.grpc for n in self.group.plan.nodes)

    def stop(self) -> None:
        self.group.stop()

    def create_topic(self, topic: str, queues: int) -> None:
        wait_all_in_sync(self.group.plan)
        with Admin(self.group.admin_address) as admin:
            admin.create_topic(topic, queues)

    def delete_topic(self, topic: str) -> None:
        with Admin(self.group.admin_address) as admin:
            admin.delete_topic(topic)

    def create_group(self, group: str) -> None:
        with Admin(self.group.admin_address) as admin:
            admin.create_group(group)

    def delete_group(self, group: str) -> None:
        with Admin(self.group.admin_address) as admin:
            admin.delete_group(group)
