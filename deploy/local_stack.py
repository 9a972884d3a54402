"""A local monitoring stack: node processes, their ``cluster.json``, and a steady load.

Used by the monitoring tests and by ``python -m deploy.render_dashboard --demo``. Nodes are
real ``python -m node`` processes on OS-chosen ports; each one's client and metrics
addresses come from the lines it prints when ready. ``cluster.json`` follows the cluster
format (``{"nodes": [{"id", "group", "role", "grpc", "metrics", ...}]}``) so the scrape
configuration is generated exactly as for a cluster started by ``ferrymq cluster up``.
"""

from __future__ import annotations

import json
import subprocess
import threading
from dataclasses import dataclass, field

from ferrymq.client import Admin, Message, Producer, PullConsumer, SimpleConsumer
from ferrymq.client.errors import FerryError
from ferrymq.launcher.node_process import NodeProcess, start_node_process

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
    node: NodeProcess  # started and stopped by ``ferrymq.launcher.node_process``

    @property
    def data_dir(self) -> str:
        return self.node.data_dir

    @property
    def process(self) -> subprocess.Popen:
        return self.node.process

    @property
    def grpc(self) -> str:  # host:port
        return self.node.address

    @property
    def metrics(self) -> str:  # host:port, or "off" as the node says it
        return self.node.metrics or "off"

    def sigkill(self) -> None:
        self.node.sigkill()

    def stop(self) -> None:
        self.node.stop()

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
    config = f'[node]\nid = "{node_id}"\ngroup = "{group}"\n\n[ports]\nmetrics = {metrics_port}\n'
    started = start_node_process(
        data_dir, config + SMALL_STORE, port=grpc_port, timeout_s=START_TIMEOUT_S
    )
    return LocalNode(node_id, group, started)


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
            subscribed = False
            while not self._stop.is_set():
                round_number += 1
                try:
                    if not subscribed:  # retried: the node it asked may have been killed
                        puller.subscribe(TOPIC)
                        subscribed = True
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
