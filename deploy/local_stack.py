"""A local monitoring stack: node processes, their ``cluster.json``, and a steady load.

Used by the monitoring tests and by ``python -m deploy.render_dashboard --demo``. Nodes are
real ``python -m node`` processes on OS-chosen ports; each one's client and metrics
addresses come from the lines it prints when ready. ``cluster.json`` follows the cluster
format (``{"nodes": [{"id", "group", "role", "grpc", "metrics", ...}]}``) so the scrape
configuration is generated exactly as for a cluster started by ``ferrymq cluster up``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from ferrymq.client import Admin, Message, Producer, PullConsumer, SimpleConsumer
from ferrymq.client.errors import FerryError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL_STORE = """
[store]
commitlog_segment_bytes = 8388608
consume_queue_entries_per_file = 10000
index_slot_count = 10007
index_entry_count = 40000
"""
START_TIMEOUT_S = 30.0


@dataclass
class LocalNode:
    id: str
    group: str
    data_dir: str
    process: subprocess.Popen
    grpc: str  # host:port
    metrics: str  # host:port

    def sigkill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def describe(self) -> dict:
        return {
            "id": self.id,
            "group": self.group,
            "role": "master",
            "grpc": self.grpc,
            "metrics": self.metrics,
            "ha": "",
            "raft": "",
            "pid": self.process.pid,
            "data": self.data_dir,
        }


def start_node(
    data_dir: str, node_id: str, group: str, *, grpc_port: int = 0, metrics_port: int = 0
) -> LocalNode:
    """Start ``python -m node``; returns once it printed its metrics and ready lines."""
    os.makedirs(data_dir, exist_ok=True)
    config = data_dir.rstrip("/") + ".toml"
    with open(config, "w", encoding="utf-8") as f:
        f.write(
            f'[node]\nid = "{node_id}"\ngroup = "{group}"\n\n'
            f"[ports]\nmetrics = {metrics_port}\nremoting = 0\n" + SMALL_STORE
        )
    command = [sys.executable, "-m", "node", "--config", config, "--data", data_dir]
    process = subprocess.Popen(
        [*command, "--port", str(grpc_port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    metrics = ""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        if " metrics on " in line:
            metrics = line.rsplit(" ", 1)[1].strip()
        if " ready on " in line:
            grpc = line.rsplit(" ", 1)[1].strip()
            # Keep reading stdout so the node never blocks on a full pipe.
            threading.Thread(target=process.stdout.read, daemon=True).start()
            return LocalNode(node_id, group, data_dir, process, grpc, metrics)
    process.kill()
    raise RuntimeError(f"node {node_id} did not start (exit {process.poll()})")


def write_cluster_json(path: str, nodes: list[LocalNode]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"nodes": [n.describe() for n in nodes]}, f, indent=2)


TOPIC = "orders"
PULL_GROUP = "billing"  # offset-based, commits part of what it reads
POP_GROUP = "audit"  # POP, acks part of what it receives (the rest stays in flight)
DLQ_GROUP = "fragile"  # POP with one attempt: what it does not ack is dead-lettered


def prepare(address: str) -> None:
    """The topic and groups the load uses."""
    with Admin(address) as admin:
        admin.create_topic(TOPIC, queue_count=4)
        admin.create_group(PULL_GROUP)
        admin.create_group(POP_GROUP)
        admin.create_group(DLQ_GROUP, max_delivery_attempts=1)


@dataclass
class Load:
    """Producers and consumers on one node, in a thread, until ``stop``.

    Each round sends a batch, reads about half of it with the pull group (committing),
    receives a few with the POP group (acking every other one) and with the DLQ group
    (acking none, so they are dead-lettered once invisible again). Lag therefore grows,
    which is what the dashboards should show.
    """

    address: str
    batch: int = 16
    body_bytes: int = 512
    pause_s: float = 0.05
    sent: int = 0
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Load:
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def _run(self) -> None:
        body = b"x" * self.body_bytes
        round_number = 0
        with (
            Producer(self.address) as producer,
            PullConsumer(self.address, PULL_GROUP, batch_size=self.batch // 2) as puller,
            SimpleConsumer(self.address, POP_GROUP, TOPIC) as popper,
            SimpleConsumer(self.address, DLQ_GROUP, TOPIC) as fragile,
        ):
            puller.subscribe(TOPIC)
            while not self._stop.is_set():
                round_number += 1
                try:
                    messages = [Message(TOPIC, body, tag="load") for _ in range(self.batch)]
                    self.sent += len(producer.send_batch(messages))
                    puller.poll(wait_s=0)
                    puller.commit()
                    for i, received in enumerate(popper.receive(4, invisible_s=60, wait_s=0)):
                        if i % 2 == 0:
                            popper.ack(received)
                    if round_number % 5 == 0:
                        fragile.receive(2, invisible_s=1, wait_s=0)
                except FerryError as error:  # recorded; the tests look at them
                    self.errors.append(str(error))
                self._stop.wait(self.pause_s)
