"""ferrymq: a 3-node group (one broker group, three Raft voters) in SYNC replication,
started with ``ferrymq.launcher.cluster.cluster_up``; clients through ferrymq's SDK.

A send is acknowledged once the master has it and every in-sync slave (both, normally)
has acknowledged it: in the memory (page cache) of all three nodes. Each node flushes
asynchronously (ASYNC_FLUSH, every 500 ms). Consumers read with ``PullConsumer`` (Data.Fetch),
which only ever sees messages every in-sync node holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import signal
import threading
import time
from dataclasses import replace
from importlib.metadata import version

from bench.cluster import master_of, raft_leader_id, stop_cluster, wait_all_in_sync
from bench.peers.drills import Timeline, drill_body, drill_seq
from bench.peers.growth import spread
from bench.peers.java_client import JavaClientWorkloads, JavaGrpcClientWorkloads
from bench.peers.official import OfficialClientWorkloads
from bench.peers.workloads import (
    BATCH,
    BATCHES_IN_FLIGHT,
    IN_FLIGHT,
    WAIT_S,
    WARMUP,
    age_s,
    log,
    plain_body,
    stamped_body,
)
from bench.produce import sdk_send_batches, sdk_send_each
from ferrymq.client import Admin, FerryError, Message, Producer, PullConsumer
from ferrymq.launcher.cluster import (
    cluster_down,
    cluster_up,
    is_running,
    load_plan,
    save_plan,
    start_node,
)
from ferrymq.launcher.polling import until

NODES = 3
QUEUES = 8
FETCH = 512
# Small segments: a file is zero-filled when created, on each of the three nodes. Each
# queue's consume-queue file is reserved on disk whole (fallocate) when the queue is first
# written: 10,000 entries (200 KB) rather than the default 300,000 (6 MB), so that the
# 10,000 topics of bench.peers.growth take 6 GB on the three nodes, not 180 GB.
STORE = {"commitlog_segment_bytes": 64 << 20, "consume_queue_entries_per_file": 10_000}


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
        self._registry = None

    def start(self, registry) -> None:
        self._registry = registry
        self.directory = os.path.join(registry.make_dir("ferrymq"), "cluster")
        self._up()

    def _up(self) -> None:
        settings = {"replication": {"mode": "SYNC"}, "store": dict(STORE)}
        plan = cluster_up(
            self.directory, nodes=NODES, auto_ports=True, settings=settings, timeout_s=120
        )
        for node in plan.nodes:
            self._registry.adopt(f"ferrymq-{node.id}", node.pid)
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
        batches = (  # made as they are sent: a backlog of GiBs is millions of messages
            [Message(topic, body) for _ in range(min(BATCH, count - first))]
            for first in range(0, count, BATCH)
        )
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

    # ---- failover (bench.peers.drills) ----------------------------------------------
    failover_how = (
        "kill -9 of the master node; the SDK producer knows all three addresses, retries "
        "with backoff and asks routing for the new master"
    )

    def failover_prepare(self, topic: str) -> None:
        with Admin(self.admin_address) as admin:
            admin.create_topic(topic, 1)
            for group in ("drill-steady", "drill-readback"):
                admin.create_group(group)

    def steady_load(self, topic: str) -> FerrySteadyLoad:
        return FerrySteadyLoad(self.access, topic)

    def _node(self, key: str):
        plan = load_plan(self.directory)
        return plan, next(n for n in plan.nodes if n.id == key)

    def master_node(self, topic: str) -> tuple[str, str]:
        plan = load_plan(self.directory)
        master = master_of(plan)
        also = " (also the routing Raft leader)" if raft_leader_id(plan) == master.id else ""
        return master.id, f"master {master.id}{also}"

    def kill_node(self, key: str) -> None:
        plan, node = self._node(key)
        with contextlib.suppress(ProcessLookupError):
            os.kill(node.pid, signal.SIGKILL)
        until(lambda: not is_running(node, plan), 10, f"{key} to die")

    def restart_node(self, key: str) -> None:
        plan, node = self._node(key)
        restarted = start_node(plan, node)
        save_plan(replace(plan, nodes=tuple(restarted if n.id == key else n for n in plan.nodes)))
        self._registry.adopt(f"ferrymq-{key}", restarted.pid)
        self.plan = load_plan(self.directory)

    def wait_rejoined(self, topic: str) -> None:
        self.plan = load_plan(self.directory)
        wait_all_in_sync(self.plan)

    def read_back(self, topic: str, expected: set[int]) -> set[int]:
        return pull_everything(self.access, "drill-readback", topic, [0], expected)

    # ---- how the cost grows (bench.peers.growth) --------------------------------------
    def create_topics(self, names: list[str]) -> None:
        with Admin(self.admin_address) as admin:
            for name in names:
                admin.create_topic(name, 1)

    def spread_send(self, names: list[str], count: int) -> float:
        body = plain_body()

        async def run() -> float:
            await sdk_send_each(producer, [Message(name, body) for name in names], 64)
            messages = [Message(topic, body) for topic in spread(names, count)]
            return await sdk_send_each(producer, messages, IN_FLIGHT)

        with Producer(self.access, timeout_s=WAIT_S) as producer:
            return asyncio.run(run())

    def backlog_prepare(self, topic: str, groups: tuple[str, ...]) -> None:
        wait_all_in_sync(self.plan)
        with Admin(self.admin_address) as admin:
            admin.create_topic(topic, QUEUES)
            for group in groups:
                try:
                    admin.create_group(group)
                except FerryError as error:  # the backlog of another size made it
                    if "GROUP_EXISTS" not in error.detail:
                        raise

    def fill(self, topic: str, count: int) -> float:
        with Producer(self.access, timeout_s=WAIT_S) as producer:
            return asyncio.run(self._send_batches(producer, topic, count))

    def read_all(self, topic: str, count: int, group: str) -> float:
        with PullConsumer(
            self.access,
            group,
            start="beginning",
            batch_size=FETCH,
            timeout_s=WAIT_S,
            prefetch=True,  # explicit queues: the next fetch travels while one is decoded
        ) as reader:
            reader.assign(topic, list(range(QUEUES)))
            received = 0
            deadline = time.monotonic() + max(WAIT_S * 10, count / 2000)
            started = time.perf_counter()
            while received < count:
                received += len(reader.poll(wait_s=1.0))
                if time.monotonic() > deadline:
                    raise RuntimeError(f"read {received} of {count}")
            return time.perf_counter() - started

    def stop_nodes(self) -> None:
        cluster_down(self.directory)

    def start_nodes(self) -> None:
        self._up()

    def data_dirs(self) -> list[str]:
        return [node.data for node in self.plan.nodes]

    def backlog_cleanup(self, topic: str) -> None:
        with Admin(self.admin_address) as admin:
            admin.delete_topic(topic)


def pull_everything(
    access: str, group: str, topic: str, queues: list[int], expected: set[int], idle_s: float = 10.0
) -> set[int]:
    """The drill numbers a fresh consumer reads from the beginning of ``topic``: until
    it has every one of ``expected`` or nothing new came for ``idle_s``."""
    found: set[int] = set()
    with PullConsumer(access, group, start="beginning", batch_size=FETCH, timeout_s=WAIT_S) as r:
        r.assign(topic, queues)
        last_new = time.monotonic()
        while not expected <= found and time.monotonic() - last_new < idle_s:
            batch = r.poll(wait_s=0.5)
            if batch:
                found.update(drill_seq(m.body) for m in batch)
                last_new = time.monotonic()
    return found


class FerrySteadyLoad:
    """The SDK's producer sending numbered messages one at a time, and a consumer of the
    same queue, each in a thread of its own, until ``stop``."""

    def __init__(self, access: str, topic: str) -> None:
        self.access, self.topic = access, topic
        self.timeline = Timeline()
        self._stop_producing = threading.Event()
        self._stop_consuming = threading.Event()
        self._threads = [
            threading.Thread(target=self._produce, daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _produce(self) -> None:
        seq = 0
        try:
            with Producer(self.access, timeout_s=3) as producer:
                while not self._stop_producing.is_set():
                    seq += 1
                    started = time.monotonic()
                    try:
                        producer.send(Message(self.topic, drill_body(seq)))
                        self.timeline.ack(seq, started, time.monotonic())
                    except FerryError as error:
                        self.timeline.fail(time.monotonic(), error.code_name)
                    except Exception as error:  # anything else the SDK lets through
                        self.timeline.fail(time.monotonic(), type(error).__name__)
        except Exception as error:
            self.timeline.errors.append(f"producer: {error!r}")

    def _consume(self) -> None:
        while not self._stop_consuming.is_set():
            try:
                with PullConsumer(
                    self.access, "drill-steady", start="beginning", timeout_s=3
                ) as reader:
                    reader.assign(self.topic, [0])
                    while not self._stop_consuming.is_set():
                        for message in reader.poll(wait_s=0.5):
                            self.timeline.received.add(drill_seq(message.body))
            except Exception:  # the master it read from died: start again
                time.sleep(0.1)

    def stop(self) -> None:
        self._stop_producing.set()
        self._threads[0].join(30)
        acked = self.timeline.acked_seqs()
        with contextlib.suppress(TimeoutError):
            until(lambda: acked <= self.timeline.received, 10, "the steady consumer")
        self._stop_consuming.set()
        self._threads[1].join(30)


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

    # ---- failover: the same nodes as ferrymq's column, killed the same way ------------
    failover_how = (
        "kill -9 of the master node; the official client knows all three addresses and "
        "retries as its settings from the server say"
    )

    def master_node(self, topic: str) -> tuple[str, str]:
        return self.group.master_node(topic)

    def kill_node(self, key: str) -> None:
        self.group.kill_node(key)

    def restart_node(self, key: str) -> None:
        self.group.restart_node(key)

    def wait_rejoined(self, topic: str) -> None:
        self.group.wait_rejoined(topic)


class FerrymqJava4Client(JavaClientWorkloads, FerrymqOfficialClient):
    """The same 3-node SYNC group through the official Java 4.x client on the remoting
    doors, given the three nodes as its name servers: the client of the rocketmq-java4
    column, so the two differ by broker only."""

    name = "ferrymq-java4"

    @property
    def java_address(self) -> str:
        return ";".join(n.remoting for n in self.group.plan.nodes)


class FerrymqJava5Client(JavaGrpcClientWorkloads, FerrymqOfficialClient):
    """The same through the official Java 5.x client on the gRPC doors (every node as an
    endpoint): the client of the rocketmq-java5 column."""

    name = "ferrymq-java5"

    @property
    def java_address(self) -> str:
        return self.endpoints
