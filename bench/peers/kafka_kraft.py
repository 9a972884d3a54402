"""Apache Kafka 4.x: three KRaft nodes (each broker and controller), topics with
replication factor 3 and ``min.insync.replicas=2``, clients through confluent-kafka
(librdkafka) with ``acks=all``. ``KafkaKraft(nodes=1)`` is one such node alone (RF 1), the
peer of one ferrymq node in ``bench.saturation --peer kafka --nodes 1``.

A send is acknowledged once every in-sync replica (all three, normally; never fewer than
two) has it in its log: in memory (page cache), as Kafka flushes on the OS's schedule.
Consumers read with ``Consumer.consume`` from assigned partitions.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import threading
import time
import uuid
from importlib.metadata import version

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.peers import jvm
from bench.peers.drills import Timeline, drill_body, drill_seq
from bench.peers.growth import PartialLevel, batches, spread
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
from ferrymq.launcher.cluster import free_ports
from ferrymq.launcher.polling import until

ARTIFACTS = (jvm.Artifact("org.apache.kafka", "kafka_2.13", "4.1.1"),)
NODES = 3
PARTITIONS = 8
# Each broker holds every partition (RF 3): at 10,000 one-partition topics a 512 MiB heap
# ran out (OutOfMemoryError in the topics part, two brokers of three); 2 GiB holds them.
HEAP_MB = 2048
MIN_INSYNC = 2
FETCH = 512
# The settings a Kafka producer has unless told otherwise (the Java client's defaults
# since Kafka 3.0, spelled out for librdkafka, whose own defaults predate them): acks=all,
# idempotence on, which allows at most 5 requests in flight per broker, linger 5 ms.
ORDINARY_PRODUCER = {
    "acks": "all",
    "enable.idempotence": True,
    "max.in.flight.requests.per.connection": 5,
    "linger.ms": 5,
}


def cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def min_insync(nodes: int) -> int:
    """``MIN_INSYNC``, or every node of a smaller cluster."""
    return min(MIN_INSYNC, nodes)


def server_properties(
    index: int, broker_ports: list[int], controller_ports: list[int], root: str
) -> dict[str, str]:
    """Node ``index``'s server.properties: combined broker+controller, replication factor
    the cluster's size (one node per port of ``broker_ports``), min ISR 2 (or all)."""
    nodes = len(broker_ports)
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
        "default.replication.factor": str(nodes),
        "min.insync.replicas": str(min_insync(nodes)),
        "offsets.topic.replication.factor": str(nodes),
        "transaction.state.log.replication.factor": str(nodes),
        "transaction.state.log.min.isr": str(min_insync(nodes)),
        "unclean.leader.election.enable": "false",
        "auto.create.topics.enable": "false",
        "group.initial.rebalance.delay.ms": "0",
        # Small segments: like the other peers, no large preallocated files.
        "log.segment.bytes": str(64 << 20),
    }


def render(properties: dict[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in properties.items())


def last_news(log_path: str) -> str:
    """The last ERROR (or last) line of a log, for a failure message."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError as error:
        return f"(no log: {error})"
    errors = [line for line in lines if "ERROR" in line or "Exception" in line]
    return (errors or lines or ["(empty)"])[-1][:300]


class KafkaKraft:
    name = "kafka"
    durability = (
        f"RF {NODES}, min.insync.replicas={MIN_INSYNC}, acks=all: acknowledged once every "
        "in-sync replica (all three, normally) has it, in memory; flushed by the OS"
    )

    failover_how = (
        "kill -9 of the leader of the topic's one partition (RF 3; a combined broker and "
        "KRaft controller); the controller elects a leader from the ISR, librdkafka finds "
        "it through its metadata refresh and retries"
    )

    def __init__(self, nodes: int = NODES) -> None:
        self.nodes = nodes
        self.client = f"confluent-kafka {version('confluent-kafka')}"
        self.bootstrap = ""
        self.admin: AdminClient | None = None
        self._topics = 0
        self._registry = None
        self._nodes: dict[str, tuple[list[str], str, str]] = {}  # key: (argv, log, log.dirs)

    def start(self, registry) -> None:
        java = jvm.find_java()
        lib = jvm.resolve("kafka", ARTIFACTS)
        root = registry.make_dir("kafka")
        ports = free_ports(2 * self.nodes)
        broker_ports, controller_ports = ports[: self.nodes], ports[self.nodes :]
        cluster = cluster_id()
        logging = {"kafka.logs.dir": root, "log4j2.level": "WARN"}
        self._registry = registry
        for index in range(self.nodes):
            path = os.path.join(root, f"k{index + 1}.properties")
            properties = server_properties(index, broker_ports, controller_ports, root)
            with open(path, "w", encoding="utf-8") as f:
                f.write(render(properties))
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
            code = formatted.wait(timeout=120)
            if code != 0:  # the log goes with the directory: say what it says
                raise RuntimeError(
                    f"kafka storage format failed (exit {code}): {last_news(log_path)}"
                )
            argv = jvm.java_argv(java, lib, "kafka.Kafka", HEAP_MB, [path], logging)
            self._nodes[f"k{index + 1}"] = (argv, log_path, properties["log.dirs"])
            registry.spawn(f"kafka-k{index + 1}", argv, log_path)
        self.bootstrap = ",".join(f"127.0.0.1:{port}" for port in broker_ports)
        # Refused connections while the nodes start are expected: librdkafka logs errors only.
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 2})
        # Ready once a topic on every node can be created: the quorum has a leader, all
        # brokers are up.
        wanted = f"a {self.nodes}-node KRaft cluster accepting an RF {self.nodes} topic"
        try:
            until(self._ready, 240, wanted, 0.5)
        except TimeoutError as error:  # the logs go with the directory: say what they say
            raise TimeoutError(f"{error}; {self._log_news()}") from None
        log(f"  kafka: {self.nodes}-node KRaft cluster up at {self.bootstrap}")

    def _log_news(self) -> str:
        """The last ERROR (or last) line of each node's log, for a failure message."""
        return " | ".join(
            f"{key}: {last_news(log_path)}" for key, (_, log_path, _) in self._nodes.items()
        )

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
            replication_factor=self.nodes,
            config={"min.insync.replicas": str(min_insync(self.nodes))},
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

    def create_topic(self, topic: str, partitions: int) -> None:
        """``topic`` with ``partitions`` partitions on every node, once each has a leader."""
        self._create(topic, partitions)

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
        """The latency producer: ``linger.ms`` 0 sends each message at once (one at a
        time in the sequential, end-to-end and failover workloads)."""
        return Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "linger.ms": 0,
                "message.timeout.ms": int(WAIT_S * 1000),
                **settings,
            }
        )

    def _ordinary_producer(self) -> Producer:
        """Kafka's own producer defaults (``ORDINARY_PRODUCER``) for many messages over many
        partitions."""
        return Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "message.timeout.ms": int(WAIT_S * 1000),
                **ORDINARY_PRODUCER,
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
    def _send_windowed(producer: Producer, topic, count: int, window: int) -> float:
        """``count`` sends with at most ``window`` unacknowledged: seconds for all.
        ``topic`` is one name, or a list with the topic of each message."""
        body = plain_body()
        topics = [topic] * count if isinstance(topic, str) else topic
        outstanding = [0]
        failures: list = []

        def delivered(error, _message) -> None:
            outstanding[0] -= 1
            if error is not None:
                failures.append(error)

        started = time.perf_counter()
        deadline = time.monotonic() + WAIT_S * 10
        for i in range(count):
            while outstanding[0] >= window:
                producer.poll(0.001)
                if time.monotonic() > deadline:
                    acknowledged = i - outstanding[0]
                    raise PartialLevel(
                        acknowledged,
                        time.perf_counter() - started,
                        "sends not acknowledged in time",
                    )
            producer.produce(topics[i], body, on_delivery=delivered)
            outstanding[0] += 1
        if producer.flush(WAIT_S) or failures:
            raise KafkaException(failures[0] if failures else "delivery timed out")
        return time.perf_counter() - started

    def inflight_send(self, count: int, in_flight: int) -> float:
        """Kafka's ordinary producer, as in ``spread_send``: the latency producer sends
        each of the ``in_flight`` messages as a request of its own."""

        def workload(topic: str) -> float:
            producer = self._ordinary_producer()
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

    # ---- the nodes as processes (failover, cold reads) --------------------------------
    def _process(self, key: str) -> subprocess.Popen:
        name = f"kafka-{key}"
        return next(s.process for s in reversed(self._registry.started) if s.name == name)

    def _partition(self, topic: str, partition: int = 0):
        return self.admin.list_topics(topic, timeout=5).topics[topic].partitions[partition]

    def master_node(self, topic: str) -> tuple[str, str]:
        def leader() -> int | None:
            try:
                found = self._partition(topic).leader
            except Exception:
                return None
            return found if found > 0 else None

        node = until(leader, 60, f"a leader for {topic}", interval_s=0.1)
        return f"k{node}", f"k{node} (partition leader)"

    def kill_node(self, key: str) -> None:
        process = self._process(key)
        process.kill()
        process.wait(30)

    def restart_node(self, key: str) -> None:
        argv, log_path, _ = self._nodes[key]
        self._registry.spawn(f"kafka-{key}", argv, log_path)

    def wait_rejoined(self, topic: str) -> None:
        def in_sync() -> bool:
            try:
                metadata = self.admin.list_topics(topic, timeout=5)
                partitions = metadata.topics[topic].partitions.values()
            except Exception:
                return False
            return len(metadata.brokers) == self.nodes and all(
                p.leader > 0 and len(p.isrs) == self.nodes for p in partitions
            )

        until(in_sync, 180, f"every replica of {topic} back in the ISR", interval_s=0.2)

    # ---- failover (bench.peers.drills) ----------------------------------------------
    def failover_prepare(self, topic: str) -> None:
        self._create(topic, 1)

    def steady_load(self, topic: str) -> KafkaSteadyLoad:
        return KafkaSteadyLoad(self, topic)

    def read_back(self, topic: str, expected: set[int]) -> set[int]:
        consumer = self._consumer("drill-readback")
        consumer.assign([TopicPartition(topic, 0, 0)])
        found: set[int] = set()
        try:
            last_new = time.monotonic()
            while not expected <= found and time.monotonic() - last_new < 10:
                for message in consumer.consume(FETCH, timeout=0.5):
                    if message.error() is None:
                        found.add(drill_seq(message.value()))
                        last_new = time.monotonic()
        finally:
            consumer.close()
        return found

    # ---- how the cost grows (bench.peers.growth) --------------------------------------
    def create_topics(self, names: list[str]) -> None:
        """``CREATE_BATCH`` topics a CreateTopics request; then until each has a leader."""
        for batch in batches(names):
            new = [
                NewTopic(n, num_partitions=1, replication_factor=self.nodes, config={})
                for n in batch
            ]
            futures = self.admin.create_topics(new, operation_timeout=WAIT_S * 4)
            for future in futures.values():
                future.result(WAIT_S * 4)
        wanted = set(names)

        def led() -> bool:
            topics = self.admin.list_topics(timeout=30).topics
            return all(
                name in topics and all(p.leader > 0 for p in topics[name].partitions.values())
                for name in wanted
            )

        until(led, 300, f"leaders for {len(names)} new topics", interval_s=0.5)

    def spread_send(self, names: list[str], count: int) -> float:
        """With the latency producer (linger 0, a million requests in flight) each message
        went out as a request of its own, one partition each; the broker handles one
        request per connection at a time, each waiting for its replicas (acks=all): one
        message per replication round trip and broker. ``ORDINARY_PRODUCER`` keeps at most
        five requests outstanding per broker, so the rest wait in the client and go out
        together."""
        producer = self._ordinary_producer()
        try:
            self._send_windowed(producer, names, len(names), 64)
        except PartialLevel as slow:  # the untimed warm-up is no figure
            raise KafkaException(f"the first message to each topic: {slow}") from None
        return self._send_windowed(producer, spread(names, count), count, IN_FLIGHT)

    def backlog_prepare(self, topic: str, groups: tuple[str, ...]) -> None:
        self._create(topic, PARTITIONS)

    def fill(self, topic: str, count: int) -> float:
        window = BATCH * BATCHES_IN_FLIGHT
        return self._send_windowed(self._batching_producer(), topic, count, window)

    def read_all(self, topic: str, count: int, group: str) -> float:
        consumer = self._consumer(group)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        try:
            received = 0
            deadline = time.monotonic() + WAIT_S * 10 + count / 2000
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

    def stop_nodes(self) -> None:
        """SIGTERM to every node (a controlled shutdown), then wait."""
        processes = [self._process(key) for key in self._nodes]
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(90)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)

    def start_nodes(self) -> None:
        for key in self._nodes:
            self.restart_node(key)
        until(self._ready, 180, "the KRaft cluster back", interval_s=0.5)

    def data_dirs(self) -> list[str]:
        return [log_dirs for _, _, log_dirs in self._nodes.values()]

    def backlog_cleanup(self, topic: str) -> None:
        self._delete(topic)


class KafkaSteadyLoad:
    """A producer sending numbered messages one at a time (acks=all, each given up after
    3 s: librdkafka retries inside that), and a consumer of the partition, in threads."""

    def __init__(self, peer: KafkaKraft, topic: str) -> None:
        self.peer, self.topic = peer, topic
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
        try:
            producer = self.peer._producer(**{"message.timeout.ms": 3000})
            seq = 0
            while not self._stop_producing.is_set():
                seq += 1
                started = time.monotonic()

                def delivered(error, _message, seq=seq, started=started) -> None:
                    if error is None:
                        self.timeline.ack(seq, started, time.monotonic())
                    else:
                        self.timeline.fail(time.monotonic(), str(error.name()))

                producer.produce(self.topic, drill_body(seq), on_delivery=delivered)
                producer.flush(10)
        except Exception as error:
            self.timeline.errors.append(f"producer: {error!r}")

    def _consume(self) -> None:
        consumer = self.peer._consumer("drill-steady")
        consumer.assign([TopicPartition(self.topic, 0, 0)])
        try:
            while not self._stop_consuming.is_set():
                for message in consumer.consume(FETCH, timeout=0.5):
                    if message.error() is None:
                        self.timeline.received.add(drill_seq(message.value()))
        except Exception as error:
            self.timeline.errors.append(f"consumer: {error!r}")
        finally:
            consumer.close()

    def stop(self) -> None:
        self._stop_producing.set()
        self._threads[0].join(30)
        acked = self.timeline.acked_seqs()
        with contextlib.suppress(TimeoutError):
            until(lambda: acked <= self.timeline.received, 10, "the steady consumer")
        self._stop_consuming.set()
        self._threads[1].join(30)
