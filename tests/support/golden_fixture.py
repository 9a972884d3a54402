"""Writes a release's golden fixture: a node's whole data directory after a workload that
touches every persisted format, and a manifest of what a reader must find in it.

Run with a release's checkout first on the path (it drives that release's node and SDK):

    PYTHONPATH=<checkout of the release> python tests/support/golden_fixture.py <out dir>

The workload (auth on, so users and their sealed keys are in the routing state): topics of
each kind, groups, a user with an ACL entry; normal messages with tags, keys and
properties over four queues, FIFO messages of two message groups, a delayed message not
yet due when the node stops; a group's committed offsets; a POP group with acked and
in-flight deliveries. The node is stopped with SIGTERM, then its data directory (the
CommitLog, consume queues, index, checkpoint, consumer offsets, POP and timer records, the
Raft journal and snapshot) is packed as ``node-data.tar.gz`` beside ``manifest.json``.
``tests/golden/test_golden_formats.py`` reads it with the current code.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tarfile
import tempfile
import time

from ferrymq.client import Admin, ClientSecurity, Message, Producer, PullConsumer, SimpleConsumer
from ferrymq.client.admin import AclRule
from ferrymq.launcher.node_process import start_node_process

ROOT = ClientSecurity("root", "golden-root-secret")
APP = ClientSecurity("app", "golden-app-secret")
CONFIG = """
[store]
commitlog_segment_bytes = 8388608
consume_queue_entries_per_file = 10000
index_slot_count = 10007
index_entry_count = 40000
[cluster]
secret = "golden-fixture-cluster-secret"
[security]
auth = true
clock_skew_s = 120
admin_access_key = "root"
admin_secret_key = "golden-root-secret"
"""
NORMAL, FIFO, DELAY = "golden-normal", "golden-fifo", "golden-delay"
READERS, FIFO_READERS, POP_READERS = "golden-readers", "golden-fifo-readers", "golden-pop"
DELAY_S = 30  # due after the node stopped: the reader's node delivers it


def described(message: Message, receipt) -> dict:
    return {
        "topic": message.topic,
        "body": message.body.decode(),
        "tag": message.tag,
        "keys": message.keys,
        "properties": message.properties,
        "group": message.message_group,
        "id": receipt.message_id,
        "queue_offset": receipt.queue_offset,
    }


def workload(address: str) -> dict:
    manifest: dict = {"messages": []}
    with Admin(address, security=ROOT) as admin:
        admin.create_topic(NORMAL, 4)
        admin.create_topic(FIFO, 2, message_type="FIFO")
        admin.create_topic(DELAY, 1, message_type="DELAY")
        admin.create_group(READERS, max_delivery_attempts=5)
        admin.create_group(FIFO_READERS, fifo=True)
        admin.create_group(POP_READERS)
        admin.create_user(APP.access_key, APP.secret_key)
        admin.grant(APP.access_key, AclRule("ALLOW", "PUBLISH", "TOPIC", "golden-*"))
    with Producer(address, security=ROOT) as producer:
        for n in range(40):
            message = Message(
                NORMAL,
                f"normal-{n}".encode(),
                tag=f"tag-{n % 3}",
                keys=[f"key-{n}", "golden"],
                properties={"n": str(n), "text": "ünïcode ✓"},
            )
            manifest["messages"].append(described(message, producer.send(message)))
        for n in range(10):
            message = Message(FIFO, f"fifo-{n}".encode(), message_group=f"g{n % 2}")
            manifest["messages"].append(described(message, producer.send(message)))
        due_ms = int(time.time() * 1000) + DELAY_S * 1000
        delayed = Message(DELAY, b"delayed", delivery_time_ms=due_ms)
        receipt = producer.send(delayed)
        manifest["delayed"] = {"id": receipt.message_id, "due_ms": due_ms, "body": "delayed"}
    # Committed offsets: the group read queue 0 of the normal topic and committed.
    with PullConsumer(address, READERS, start="beginning", security=ROOT) as consumer:
        consumer.assign(NORMAL, [0])
        while not consumer.poll(wait_s=1):
            pass
        consumer.commit()
    with Admin(address, security=ROOT) as admin:
        manifest["committed"] = {
            str(q.queue_id): q.consumer_offset for q in admin.group_progress(READERS, NORMAL)
        }
    # POP: ten deliveries, five acked, five left in flight (visible again by the time a
    # reader opens the fixture).
    with SimpleConsumer(address, POP_READERS, NORMAL, security=ROOT) as consumer:
        received: list = []
        while len(received) < 10:
            received += consumer.receive(max_messages=10 - len(received), invisible_s=5)
        for message in received[:5]:
            consumer.ack(message)
        manifest["pop_acked"] = sorted(m.message_id for m in received[:5])
        manifest["pop_in_flight"] = sorted(m.message_id for m in received[5:])
    return manifest


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        data = os.path.join(scratch, "node")
        node = start_node_process(data, CONFIG)
        try:
            manifest = workload(node.address)
        finally:
            node.sigterm()
        manifest["written_by"] = os.environ.get("PYTHONPATH", "")
        shutil.rmtree(os.path.join(data, "raft", "tmp"), ignore_errors=True)
        with tarfile.open(os.path.join(out, "node-data.tar.gz"), "w:gz") as archive:
            archive.add(data, arcname="node")
    manifest.pop("written_by")
    with open(os.path.join(out, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
