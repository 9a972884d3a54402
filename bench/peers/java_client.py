"""The five workloads through the official Java 4.x client (``bench/java/PeerWorkloads.java``,
rocketmq-client 5.1.4 with its default settings), against any broker a 4.x client reaches
through a name server address: Apache RocketMQ's name server and ferrymq's remoting door
alike, so that both are measured through the same client, and the fastest one RocketMQ
has (its official Python client moves ~1,000 to 2,500 messages a second here).

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


def java_client_name() -> str:
    return f"rocketmq-client {load_driver.CLIENT.version} (official Java 4.x, default settings)"


class JavaClientWorkloads:
    """A peer's five workloads through the Java client, mixed in before the peer's class:
    the peer provides ``java_namesrv`` (the address a 4.x client is given),
    ``client_home`` and ``create_topic``, ``delete_topic``, ``create_group`` and
    ``delete_group``."""

    def _java_run(self, workload: str, count: int, queues: int = QUEUES, window: int = 0) -> dict:
        """``workload`` in a JVM of its own, on a fresh topic and group: what it printed
        last; ``RuntimeError`` with the end of its stderr when it failed."""
        self._java_topics = getattr(self, "_java_topics", 0) + 1
        topic = f"JavaBench{self._java_topics}"
        group = f"java-{workload.replace('_', '-')}-{self._java_topics}"
        self.create_topic(topic, queues)
        self.create_group(group)
        home = self.client_home or os.environ.get("HOME", "")
        argv = load_driver.program("PeerWorkloads", HEAP_MB)
        argv[1:1] = [f"-Duser.home={home}"]  # where the client writes its logs
        arguments = [self.java_namesrv, workload, topic, group, str(count)]
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
            raise RuntimeError(f"Java client {workload}: {done.stderr.strip()[-600:]}")
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
