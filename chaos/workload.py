"""The workload: writers sending unique, per-writer ordered bodies through the SDK (one
attempt per invocation, so each outcome is that invocation's), a pull consumer committing
offsets, and the final drain that reads every replica's CommitLog offline.

Each writer and the consumer run on their own thread and stop when ``stop`` is set.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import threading
import time

from chaos.history import (
    FAILED,
    NOT_REPLICATED,
    OK,
    UNKNOWN,
    Delivery,
    History,
    MasterSnapshot,
    Replica,
    StoredRecord,
)
from ferrymq.client import FerryError, Message, Producer, PullConsumer
from ferrymq.client.errors import TRANSPORT
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb

TOPIC = "chaos"
GROUP = "chaos-readers"
QUEUES = 4
# Answers that mean nothing was written (the node refused before appending).
REFUSED = frozenset({pb.HA_NOT_AVAILABLE, pb.TOPIC_NOT_FOUND, pb.BAD_REQUEST})
# Stored on the master, durability or replication not confirmed in time.
NOT_CONFIRMED = frozenset({pb.SLAVE_PERSISTENCE_TIMEOUT, pb.MASTER_PERSISTENCE_TIMEOUT})
PAUSE_AFTER_ERROR_S = 0.05  # a refused writer does not spin while the cluster fails over


def outcome_of(error: FerryError) -> str:
    if error.code == TRANSPORT:
        return UNKNOWN
    if error.code in REFUSED:
        return FAILED
    if error.code in NOT_CONFIRMED:
        return NOT_REPLICATED
    return UNKNOWN


def writer(history: History, access: str, number: int, stop: threading.Event, t0: float):
    with Producer(access, max_attempts=1, timeout_s=3) as producer:
        seq = 0
        while not stop.is_set():
            body = f"w{number}-{seq}"
            send = history.invoke(number, seq, body, time.monotonic() - t0)
            try:
                receipt = producer.send(Message(TOPIC, body.encode()))
                history.complete(send, OK, time.monotonic() - t0, offset=receipt.queue_offset)
            except FerryError as error:
                history.complete(send, outcome_of(error), time.monotonic() - t0, error.code_name)
                producer.endpoints.forget(TOPIC)  # the next send asks for a fresh route
                stop.wait(PAUSE_AFTER_ERROR_S)
            seq += 1


def consumer(history: History, access: str, stop: threading.Event, t0: float) -> None:
    """A pull consumer that commits after every batch; errors (failover) are retried."""
    while not stop.is_set():
        try:
            with PullConsumer(access, GROUP, timeout_s=3) as pull:
                pull.assign(TOPIC, list(range(QUEUES)))
                while not stop.is_set():
                    for m in pull.poll(wait_s=0.2):
                        history.deliver(
                            Delivery(
                                time.monotonic() - t0,
                                "pull-1",
                                m.queue_id,
                                m.queue_offset,
                                m.body.decode(),
                            )
                        )
                    pull.commit()
        except FerryError:
            stop.wait(PAUSE_AFTER_ERROR_S)


def snapshot_log(data_dir: str, node_id: str, scratch: str, store_settings: dict):
    """Where every workload body sits in a (dead or stopped) node's log, and its last
    epoch; read from a copy so the node's own files are never touched."""
    from ha.epochs import EpochHistory

    copy = os.path.join(scratch, f"snapshot-{node_id}-{time.monotonic_ns()}")
    shutil.copytree(data_dir, copy)
    try:
        positions = {r.body: r.physical_offset for r in read_records(copy, store_settings)[1]}
        return MasterSnapshot(node_id, EpochHistory(copy).last_epoch, positions)
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def read_records(data_dir: str, store_settings: dict) -> tuple[int, list[StoredRecord]]:
    """The CommitLog end and the workload topic's records of one (stopped) node."""
    from store.config import StoreConfig
    from store.message_store import MessageStore

    store = MessageStore.open(StoreConfig(data_dir, **store_settings))
    try:
        log = store.commitlog
        records = [
            StoredRecord(m.queue_id, m.queue_offset, m.physical_offset, m.body.decode())
            for m in log.iterate(log.min_offset, log.write_offset)
            if m.topic == TOPIC
        ]
        return log.write_offset, records
    finally:
        store.shutdown()


def log_digest(data_dir: str, length: int) -> str:
    digest = hashlib.sha256()
    remaining = length
    for path in sorted(glob.glob(os.path.join(data_dir, "commitlog", "*"))):
        with open(path, "rb") as f:
            chunk = f.read(remaining)
        digest.update(chunk)
        remaining -= len(chunk)
        if remaining <= 0:
            break
    return digest.hexdigest()


def drain(nodes: list[tuple[str, str, str]], store_settings: dict) -> list[Replica]:
    """Read every replica ``(id, role, data_dir)`` of a stopped cluster; digests of each
    log up to the common end."""
    replicas = []
    for node_id, role, data_dir in nodes:
        end, records = read_records(data_dir, store_settings)
        replicas.append(Replica(node_id, role, end, records))
    common = min(r.log_end for r in replicas)
    for replica, (_, _, data_dir) in zip(replicas, nodes, strict=True):
        replica.digest_to[common] = log_digest(data_dir, common)
    return replicas
