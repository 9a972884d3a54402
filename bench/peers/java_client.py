"""The five workloads through the official Java clients with their default settings, so that
Apache RocketMQ and ferrymq are measured through the same client, and the fastest ones
RocketMQ has (its official Python client moves ~1,000 to 2,500 messages a second here):

- ``JavaClientWorkloads``: the 4.x client (rocketmq-client 5.1.4, over remoting;
  ``bench/java/PeerWorkloads.java``), given a name server address: Apache RocketMQ's name
  server, or ferrymq's remoting doors;
- ``JavaGrpcClientWorkloads``: the 5.x client (rocketmq-client-java, over gRPC;
  ``bench/java/PeerWorkloadsGrpc.java``), given endpoints: Apache RocketMQ's proxy, or
  ferrymq's gRPC doors.

Each workload runs in a JVM of its own, on a fresh topic and group, as
``OfficialClientWorkloads`` runs the official Python client's.
"""

from __future__ import annotations

import json
import os
import subprocess

from bench import load_driver
from bench.peers.workloads import BATCH, BATCHES_IN_FLIGHT, WAIT_S

QUEUES = 8
HEAP_MB = 512


class JavaClientWorkloads:
    """A peer's five workloads through the Java 4.x client, mixed in before the peer's
    class: the peer provides ``java_address`` (what the client is given),
    ``client_home`` and ``create_topic``, ``delete_topic``, ``create_group`` and
    ``delete_group``."""

    java_program = "PeerWorkloads"
    java_client = load_driver.CLIENT
    java_address = ""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.client = self.java_client_name()

    @classmethod
    def java_client_name(cls) -> str:
        line = "4.x, remoting" if cls.java_client == load_driver.CLIENT else "5.x, gRPC"
        return (
            f"{cls.java_client.artifact} {cls.java_client.version} "
            f"(official Java {line}, default settings)"
        )

    def _java_run(self, workload: str, count: int, queues: int = QUEUES, window: int = 0) -> dict:
        """``workload`` in a JVM of its own, on a fresh topic and group: what it printed
        last; ``RuntimeError`` with the end of its stderr when it failed."""
        self._java_topics = getattr(self, "_java_topics", 0) + 1
        topic = f"JavaBench{self._java_topics}"
        group = f"java-{workload.replace('_', '-')}-{self._java_topics}"
        self.create_topic(topic, queues)
        self.create_group(group)
        home = self.client_home or os.environ.get("HOME", "")
        argv = load_driver.program(self.java_program, HEAP_MB, self.java_client)
        argv[1:1] = [f"-Duser.home={home}"]  # where the client writes its logs
        arguments = [self.java_address, workload, topic, group, str(count)]
        if window:
            arguments.append(str(window))
        try:
            done = subprocess.run(
                argv + arguments,
                capture_output=True,
                text=True,
                timeout=WAIT_S * 20 + count / 200,
                env={**os.environ, "HOME": home},
            )
        finally:
            self.delete_topic(topic)
            self.delete_group(group)
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines:
            said = [line for line in done.stderr.splitlines() if line.startswith(workload)]
            why = said[-1] if said else done.stderr.strip()[-600:]
            raise RuntimeError(f"Java client {workload}: {why}")
        return json.loads(lines[-1])

    def sequential_send(self, count: int) -> list[float]:
        return self._java_run("sequential_send", count)["took"]

    def inflight_send(self, count: int, in_flight: int) -> float:
        return self._java_run("windowed_send", count, window=in_flight)["seconds"]

    def batched_send(self, count: int) -> float:
        """``BATCH`` messages per synchronous batch send, ``BATCHES_IN_FLIGHT`` threads."""
        assert (BATCH, BATCHES_IN_FLIGHT) == (128, 16), "PeerWorkloads.java holds the same"
        return self._java_run("batched_send", count)["seconds"]

    def end_to_end(self, count: int) -> list[float]:
        return self._java_run("end_to_end", count, queues=1)["took"]

    def consume(self, count: int) -> float:
        return self._java_run("consume", count)["seconds"]


class JavaGrpcClientWorkloads(JavaClientWorkloads):
    """The same through the Java 5.x client; ``java_address`` is its endpoints."""

    java_program = "PeerWorkloadsGrpc"
    java_client = load_driver.GRPC_CLIENT

    def batched_send(self, count: int) -> float:
        """The client has no batch API: ``BATCH * BATCHES_IN_FLIGHT`` sends outstanding,
        the same number of messages in flight as the other peers' batches."""
        return self._java_run("windowed_send", count, window=BATCH * BATCHES_IN_FLIGHT)["seconds"]
