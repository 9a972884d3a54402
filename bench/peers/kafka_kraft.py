"""Apache Kafka 4.x: three KRaft nodes (each broker and controller), topics with
replication factor 3 and ``min.insync.replicas=2``, clients through confluent-kafka
(librdkafka) with ``acks=all``.

A send is acknowledged once every in-sync replica (all three, normally; never fewer than
two) has it in its log: in memory (page cache), as Kafka flushes on the OS's schedule.
Consumers read with ``Consumer.consume`` from assigned partitions.
"""

from __future__ import annotations

import base64
import os
import time
import uuid
from importlib.metadata import version

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.peers import jvm
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
from ferrymq.launcher.cluster import free_ports
from ferrymq.launcher.polling import until

ARTIFACTS = (jvm.Artifact("org.apache.kafka", "kafka_2.13", "4.1.1"),)
NODES = 3
PARTITIONS = 8
HEAP_MB = 512
MIN_INSYNC = 2
FETCH = 512


def cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def server_properties(
    index: int, broker_ports: list[int], controller_ports: list[int], root: str
) -> dict[str, str]:
    """Node ``index``'s server.properties: combined broker+controller, RF 3, min ISR 2."""
    voters = ",".join(f"{i + 1}@127.0.0.1:{port}" for i, port in enumerate(controller_ports))
    return {
        "process.roles": "broker,controller",
        "node.id": str(index + 1),
        "controller.quorum.voters": voters,
        "listeners": (
            f"PLAINTEXT://127.0.0.1:{broker_ports[index]},"
            f"CONTROLLER://127.0.0.1:{controller_ports[index]}"
        ),
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker_ports[index]}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": os.path.join(root, f"k{index + 1}", "data"),
        "num.partitions": str(PARTITIONS),
        "default.replication.factor": str(NODES),
        "min.insync.replicas": str(MIN_INSYNC),
        "offsets.topic.replication.factor": str(NODES),
        "transaction.state.log.replication.factor": str(NODES),
        "transaction.state.log.min.isr": str(MIN_INSYNC),
        "unclean.leader.election.enable": "false",
        "auto.create.topics.enable": "false",
        "group.initial.rebalance.delay.ms": "0",
        # Small segments: like the other peers, no large preallocated files.
        "log.segment.bytes": str(64 << 20),
    }


def render(properties: dict[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in properties.items())


class KafkaKraft:
    name = "kafka"
    durability = (
        f"RF {NODES}, min.insync.replicas={MIN_INSYNC}, acks=all: acknowledged once every "
        "in-sync replica (all three, normally) has it, in memory; flushed by the OS"
    )

    def __init__(self) -> None:
        self.client = f"confluent-kafka {version('confluent-kafka')}"
        self.bootstrap = ""
        self.admin: AdminClient | None = None
        self._topics = 0

    def start(self, registry) -> None:
        java = jvm.find_java()
        lib = jvm.resolve("kafka", ARTIFACTS)
        root = registry.make_dir("kafka")
        ports = free_ports(2 * NODES)
        broker_ports, controller_ports = ports[:NODES], ports[NODES:]
        cluster = cluster_id()
        logging = {"kafka.logs.dir": root, "log4j2.level": "WARN"}
        for index in range(NODES):
            path = os.path.join(root, f"k{index + 1}.properties")
            with open(path, "w", encoding="utf-8") as f:
                f.write(render(server_properties(index, broker_ports, controller_ports, root)))
            log_path = os.path.join(root, f"k{index + 1}.log")
            formatted = registry.spawn(
                f"kafka-format-{index + 1}",
                jvm.java_argv(
                    java,
                    lib,
                    "kafka.tools.StorageTool",
                    128,
                    ["format", "-t", cluster, "-c", path],
                    logging,
                ),
                log_path,
            )
            if formatted.wait(timeout=120) != 0:
                raise RuntimeError(f"kafka storage format failed: see {log_path}")
            registry.spawn(
                f"kafka-{index + 1}",
                jvm.java_argv(java, lib, "kafka.Kafka", HEAP_MB, [path], logging),
                log_path,
            )
        self.bootstrap = ",".join(f"127.0.0.1:{port}" for port in broker_ports)
        # Refused connections while the nodes start are expected: librdkafka logs errors only.
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 2})
        # Ready once an RF 3 topic can be created: the quorum has a leader, all brokers up.
        until(self._ready, 120, "a 3-node KRaft cluster accepting an RF 3 topic", interval_s=0.5)
        log(f"  kafka: 3-node KRaft cluster up at {self.bootstrap}")

    def _ready(self) -> bool:
        try:
            self._create("ready", 1)
            self._delete("ready")
            return True
        except Exception:
            return False

    def stop(self) -> None:
        self.admin = None

    # ---- topics ----------------------------------------------------------------------
    def _create(self, topic: str, partitions: int) -> None:
        new = NewTopic(
            topic,
            num_partitions=partitions,
            replication_factor=NODES,
            config={"min.insync.replicas": str(MIN_INSYNC)},
        )
        self.admin.create_topics([new], operation_timeout=WAIT_S)[topic].result(WAIT_S)
        # Created means the controller has it; wait until every partition has a leader.
        until(
            lambda: all(
                p.leader >= 0
                for p in self.admin.list_topics(topic, timeout=5).topics[topic].partitions.values()
            ),
            WAIT_S,
            f"leaders for {topic}",
            interval_s=0.05,
        )

    def _delete(self, topic: str) -> None:
        self.admin.delete_topics([topic], operation_timeout=WAIT_S)[topic].result(WAIT_S)

    def _run(self, workload, partitions: int = PARTITIONS):
        """Run ``workload(topic)`` on a fresh topic, deleted afterwards."""
        self._topics += 1
        topic = f"bench{self._topics}"
        self._create(topic, partitions)
        try:
            return workload(topic)
        finally:
            self._delete(topic)

    def _producer(self, **settings) -> Producer:
        return Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "linger.ms": 0,
                "message.timeout.ms": int(WAIT_S * 1000),
                **settings,
            }
        )

    # ---- sends -----------------------------------------------------------------------
    @staticmethod
    def _send_one(producer: Producer, topic: str, body: bytes) -> None:
        failures: list = []
        producer.produce(topic, body, on_delivery=lambda error, _: error and failures.append(error))
        if producer.flush(WAIT_S) or failures:
            raise KafkaException(failures[0] if failures else "delivery timed out")

    def sequential_send(self, count: int) -> list[float]:
        def workload(topic: str) -> list[float]:
            body = plain_body()
            producer = self._producer()
            for _ in range(WARMUP):
                self._send_one(producer, topic, body)
            took = []
            for _ in range(count):
                started = time.perf_counter()
                self._send_one(producer, topic, body)
                took.append(time.perf_counter() - started)
            return took

        return self._run(workload)

    @staticmethod
    def _send_windowed(producer: Producer, topic: str, count: int, window: int) -> float:
        """``count`` sends with at most ``window`` unacknowledged: seconds for all."""
        body = plain_body()
        outstanding = [0]
        failures: list = []

        def delivered(error, _message) -> None:
            outstanding[0] -= 1
            if error is not None:
                failures.append(error)

        started = time.perf_counter()
        deadline = time.monotonic() + WAIT_S * 10
        for _ in range(count):
            while outstanding[0] >= window:
                producer.poll(0.001)
                if time.monotonic() > deadline:
                    raise KafkaException("sends not acknowledged in time")
            producer.produce(topic, body, on_delivery=delivered)
            outstanding[0] += 1
        if producer.flush(WAIT_S) or failures:
            raise KafkaException(failures[0] if failures else "delivery timed out")
        return time.perf_counter() - started

    def inflight_send(self, count: int, in_flight: int) -> float:
        def workload(topic: str) -> float:
            producer = self._producer()
            self._send_windowed(producer, topic, WARMUP, 8)
            return self._send_windowed(producer, topic, count, in_flight)

        return self._run(workload)

    def _batching_producer(self) -> Producer:
        """librdkafka's batching: up to BATCH messages a request, BATCHES_IN_FLIGHT requests
        outstanding per broker connection."""
        return self._producer(
            **{
                "linger.ms": 5,
                "batch.num.messages": BATCH,
                "max.in.flight.requests.per.connection": BATCHES_IN_FLIGHT,
            }
        )

    def batched_send(self, count: int) -> float:
        def workload(topic: str) -> float:
            producer = self._batching_producer()
            window = BATCH * BATCHES_IN_FLIGHT
            self._send_windowed(producer, topic, WARMUP * 4, window)
            return self._send_windowed(producer, topic, count, window)

        return self._run(workload)

    # ---- reads -----------------------------------------------------------------------
    def _consumer(self, group: str) -> Consumer:
        return Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 100,
            }
        )

    def end_to_end(self, count: int) -> list[float]:
        """One partition, so that the consumer's fetch waits on the partition written to."""

        def workload(topic: str) -> list[float]:
            consumer = self._consumer("bench-e2e")
            consumer.assign([TopicPartition(topic, 0, 0)])
            producer = self._producer()
            try:
                took = []
                for i in range(WARMUP + count):
                    self._send_one(producer, topic, stamped_body())
                    deadline = time.monotonic() + WAIT_S
                    while True:
                        message = consumer.poll(0.5)
                        if message is not None and message.error() is None:
                            break
                        if time.monotonic() > deadline:
                            raise RuntimeError("consumer timed out")
                    if i >= WARMUP:
                        took.append(age_s(message.value()))
                return took
            finally:
                consumer.close()

        return self._run(workload, partitions=1)

    def consume(self, count: int) -> float:
        def workload(topic: str) -> float:
            self._send_windowed(self._batching_producer(), topic, count, BATCH * BATCHES_IN_FLIGHT)
            consumer = self._consumer("bench-consume")
            consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
            try:
                received = 0
                deadline = time.monotonic() + WAIT_S * 10
                started = time.perf_counter()
                while received < count:
                    received += sum(
                        1 for m in consumer.consume(FETCH, timeout=1.0) if m.error() is None
                    )
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"read {received} of {count}")
                return time.perf_counter() - started
            finally:
                consumer.close()

        return self._run(workload)
