"""Faults the store must survive: a full disk, SIGKILL mid-append, a torn tail, a flipped byte.

Every test ends with the same full audit (``assert_consistent``): the CommitLog, the
consume queues and the index agree in both directions, queue offsets are contiguous with
no duplicate, and every message the store acknowledged is still there exactly once, at
the position it was acknowledged with, byte for byte.

The full-disk tests use a real tmpfs (``tmpfs_disk`` in conftest.py, needs root), so the
ENOSPC comes from the kernel at the call that really hits it. The SIGKILL tests run the
writer of ``tests/support/store_crash_writer.py`` in a child process and read its
acknowledgements from a pipe; waits are polls with a deadline, never sleeps.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import time
import zlib
from collections import defaultdict
from dataclasses import dataclass
from errno import ENOSPC

import pytest

from ferrymq.codec import commitlog_record as record
from ferrymq.codec.commitlog_record import StoredMessage
from ferrymq.launcher.polling import until
from store.checkpoint import Checkpoint
from store.config import FlushMode, StoreConfig
from store.consume_queue import BLANK_SIZE
from store.hashing import tag_hash_code
from store.index_file import index_file_name
from store.message import Message
from store.message_store import MessageStore
from store.results import GetStatus, PutStatus
from tests.support import ROOT
from tests.support import store_crash_writer as writer

WRITER = writer.__file__  # run as a script in the child
DEADLINE_S = 20.0
# No background flush or checkpoint: what is on disk is what the test wrote.
QUIET_FLUSH = dict(flush_interval_ms=10**9, derived_flush_interval_ms=10**9)


# ---- the audit ---------------------------------------------------------------------
@dataclass(frozen=True)
class Ack:
    """A message the store acknowledged, and where it said it put it."""

    unique_key: str
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    body_crc: int

    @classmethod
    def parse(cls, line: str) -> Ack:
        _, key, topic, queue_id, queue_offset, physical, crc = line.split()
        return cls(key, topic, int(queue_id), int(queue_offset), int(physical), int(crc))

    @classmethod
    def of(cls, messages: list[Message], result) -> list[Ack]:
        assert result.ok, result
        return [
            cls(
                m.properties["UNIQ_KEY"],
                m.topic,
                m.queue_id,
                a.queue_offset,
                a.physical_offset,
                zlib.crc32(m.body),
            )
            for m, a in zip(messages, result.appended, strict=True)
        ]


def put_acked(store: MessageStore, message: Message) -> list[Ack]:
    result = store.put_message(message)
    assert result.ok, result
    return Ack.of([message], result)


def assert_consistent(store: MessageStore) -> dict[str, StoredMessage]:
    """Audit the derived files against the CommitLog; return its records by unique key."""
    commitlog = store.commitlog
    records = list(commitlog.iterate(commitlog.min_offset, commitlog.write_offset))
    at = {r.physical_offset: r for r in records}
    by_key: dict[str, StoredMessage] = {}
    per_queue: dict[tuple[str, int], list[int]] = defaultdict(list)
    physical_per_queue: dict[tuple[str, int], list[int]] = defaultdict(list)
    offsets_by_index_key: dict[tuple[str, str], set[int]] = defaultdict(set)
    for r in records:
        assert r.physical_offset + r.size <= commitlog.write_offset
        # CommitLog -> consume queue: the record's own entry.
        queue = store.consume_queues.get(r.topic, r.queue_id)
        assert queue is not None, f"no consume queue for {r.topic}/{r.queue_id}"
        tag_code = tag_hash_code(r.tags) if r.tags else 0
        assert queue.entry_at(r.queue_offset) == (r.physical_offset, r.size, tag_code), (
            f"consume queue disagrees at {r.topic}/{r.queue_id}@{r.queue_offset}"
        )
        per_queue[(r.topic, r.queue_id)].append(r.queue_offset)
        physical_per_queue[(r.topic, r.queue_id)].append(r.physical_offset)
        assert r.unique_key, "every test message has a unique key"
        assert r.unique_key not in by_key, f"{r.unique_key} stored twice"
        by_key[r.unique_key] = r
        for key in r.keys:
            offsets_by_index_key[(r.topic, key)].add(r.physical_offset)
    for (topic, queue_id), queue in store.consume_queues.queues.items():
        # Contiguous, no duplicate, and exactly the queue's range.
        assert per_queue.get((topic, queue_id), []) == list(
            range(queue.min_offset, queue.max_offset)
        ), f"queue offsets of {topic}/{queue_id} are not contiguous"
        # Consume queue -> CommitLog: every entry from min to max points at its record.
        for queue_offset in range(queue.min_offset, queue.max_offset):
            physical, size, _ = queue.entry_at(queue_offset)
            assert size != BLANK_SIZE, f"blank entry {topic}/{queue_id}@{queue_offset}"
            r = at.get(physical)
            assert r is not None, f"{topic}/{queue_id}@{queue_offset} points at no record"
            assert (r.topic, r.queue_id, r.queue_offset, r.size) == (
                topic,
                queue_id,
                queue_offset,
                size,
            )
        # What a consumer reads is the same.
        read = []
        offset = queue.min_offset
        while offset < queue.max_offset:
            got = store.get_messages(topic, queue_id, offset, 64)
            assert got.status is GetStatus.FOUND, (topic, queue_id, offset, got.status)
            read.extend(m.physical_offset for m in got.messages)
            offset = got.next_begin_offset
        assert read == physical_per_queue.get((topic, queue_id), [])
    # Index: every unique key and every key finds exactly its records.
    for key, r in by_key.items():
        found = store.query_by_unique_key(r.topic, key)
        assert found is not None and found.physical_offset == r.physical_offset, key
    for (topic, key), offsets in offsets_by_index_key.items():
        hits = store.query_by_key(topic, key, max_count=len(offsets) + 8)
        assert sorted(m.physical_offset for m in hits) == sorted(offsets), (topic, key)
    return by_key


def assert_acknowledged(by_key: dict[str, StoredMessage], acks: list[Ack]) -> None:
    """Every acknowledged message is present where and as it was acknowledged."""
    for ack in acks:
        stored = by_key.get(ack.unique_key)
        assert stored is not None, f"acknowledged {ack.unique_key} is lost"
        assert (
            stored.topic,
            stored.queue_id,
            stored.queue_offset,
            stored.physical_offset,
            zlib.crc32(stored.body),
        ) == (ack.topic, ack.queue_id, ack.queue_offset, ack.physical_offset, ack.body_crc), ack


# ---- disk full -----------------------------------------------------------------------
SEGMENT = 128 * 1024
DISK_CONFIG = dict(
    commitlog_segment_bytes=SEGMENT,
    max_message_body_bytes=16 * 1024,
    consume_queue_entries_per_file=1000,
    index_slot_count=1000,
    index_entry_count=4000,
)


def build(i: int, *, queue_id: int = 0, size: int = 100, topic: str = "orders") -> Message:
    return Message.build(
        topic,
        os.urandom(size),
        queue_id=queue_id,
        tags="TagA" if i % 3 else "TagB",
        keys=[f"key-{i % 7}"],
        unique_key=f"M{i}",
    )


def written_state(store: MessageStore) -> tuple:
    """What a refused put must leave alone. (A refused put may still move the dispatcher
    forward over records already acknowledged: that is catching up, not writing.)"""
    return (
        store.commitlog.write_offset,
        [f.path for f in store.commitlog.segments.files],
        {k: (q.min_offset, q.max_offset) for k, q in store.consume_queues.queues.items()},
        dict(store.commitlog.queue_offsets),
    )


def state_of(store: MessageStore) -> tuple:
    """``written_state`` and the derived positions, for when dispatch is not behind."""
    return (
        *written_state(store),
        store.dispatcher.dispatched_offset,
        [(f.path, f.index_count, f.end_physical_offset) for f in store.index.files],
    )


@pytest.fixture
def opened():
    """``opened(config)`` opens a store that is stopped (abruptly) at teardown if a failed
    assertion left it open; listed after ``tmpfs_disk``, it stops before the unmount."""
    stores: list[MessageStore] = []

    def open_store(config: StoreConfig) -> MessageStore:
        store = MessageStore.open(config)
        stores.append(store)
        return store

    yield open_store
    for store in stores:
        if store.is_open:
            store.close_abruptly_for_tests()


def write_file(path, size: int) -> None:
    with open(path, "wb") as f:
        f.write(b"\xee" * size)
        f.flush()
        os.fsync(f.fileno())


def assert_nothing_after_write_offset(store: MessageStore) -> None:
    """No partial record and no blank filler past the write offset: the tail is zeros and
    no file exists that the store does not know about."""
    commitlog = store.commitlog
    last = commitlog.segments.last
    local = commitlog.write_offset - last.base_offset
    assert last.is_zero_at(local, last.size - local)
    directory = commitlog.segments.directory
    assert sorted(os.listdir(directory)) == [
        os.path.basename(f.path) for f in commitlog.segments.files
    ]


@pytest.mark.parametrize(
    ("preallocate", "mode", "free_space"),
    [
        (True, FlushMode.ASYNC_FLUSH, "delete-filler"),
        (False, FlushMode.ASYNC_FLUSH, "grow-the-disk"),
        (True, FlushMode.SYNC_FLUSH, "delete-filler"),
    ],
)
def test_disk_full_when_a_new_commitlog_segment_is_needed(
    tmpfs_disk, opened, preallocate, mode, free_space
):
    disk = tmpfs_disk(2048)
    config = StoreConfig(
        str(disk.path / "store"),
        flush_mode=mode,
        preallocate_segments=preallocate,
        **DISK_CONFIG,
    )
    store = opened(config)
    acks: list[Ack] = []
    for i in range(2):  # create both consume queues and the index file
        message = build(i, queue_id=i)
        acks += put_acked(store, message)
    # Room for one and a half more segments: the next one fits, the one after does not.
    filler = disk.path / "filler"
    write_file(filler, (disk.free_bytes() - SEGMENT - SEGMENT // 2) // 4096 * 4096)

    i = 2
    while True:
        assert i < 1000, "the disk never filled up"
        message = build(i, queue_id=i % 2, size=7000)
        before = state_of(store)
        result = store.put_message(message)
        if result.status is PutStatus.DISK_FULL:
            break
        assert result.ok, result
        acks += Ack.of([message], result)
        i += 1
    # The failure is the creation of the third segment, and nothing of the put is visible.
    assert store.commitlog.write_offset < 2 * SEGMENT
    assert len(store.commitlog.segments.files) == 2
    assert f"{SEGMENT} bytes" in result.error and result.appended == []
    assert state_of(store) == before
    assert_nothing_after_write_offset(store)
    assert store.query_by_unique_key("orders", f"M{i}") is None
    # The store still reads everything acknowledged, and a retry fails the same way.
    assert_acknowledged(assert_consistent(store), acks)
    for ack in acks:
        stored = store.look_message_by_id(
            store.commitlog.store_host.hex().upper() + f"{ack.physical_offset:016X}"
        )
        assert stored is not None and stored.unique_key == ack.unique_key
    assert store.put_message(message).status is PutStatus.DISK_FULL
    assert state_of(store) == before

    # Space returns: the same put succeeds with the queue offset the failed one did not take.
    if free_space == "delete-filler":
        filler.unlink()
    else:
        disk.resize(4096)
    expected_queue_offset = store.max_offset_in_queue("orders", message.queue_id)
    result = store.put_message(message)
    assert result.ok and result.appended[0].queue_offset == expected_queue_offset
    assert result.appended[0].physical_offset == 2 * SEGMENT  # the first record of segment 3
    acks += Ack.of([message], result)
    while store.commitlog.write_offset < 3 * SEGMENT + 10_000:  # and roll once more
        i += 1
        message = build(i, queue_id=i % 2, size=7000)
        acks += put_acked(store, message)
    store.shutdown()

    store = opened(config)
    try:
        report = store.recovery_report
        assert report.clean_shutdown and report.corruption is None
        by_key = assert_consistent(store)
        assert_acknowledged(by_key, acks)
        assert len(by_key) == len(acks)
    finally:
        store.shutdown()


# The store in a child, on a file system without fallocate (refused as such file systems
# do): its files are sparse, so a write through the map into a new page on a full disk is
# SIGBUS, which would kill the test's worker instead of failing the test.
STORE_WITHOUT_FALLOCATE = """
import errno, faulthandler, json, os, sys
from store.config import StoreConfig
from store.message import Message
from store.message_store import MessageStore
faulthandler.enable()
def unsupported(fd, offset, length):
    raise OSError(errno.EOPNOTSUPP, "fallocate is not supported here")
os.posix_fallocate = unsupported
store = MessageStore.open(StoreConfig(sys.argv[1], **json.loads(sys.argv[2])))
for i in range(3):
    assert store.put_message(Message.build("orders", b"a" * 1000, unique_key=f"M{i}")).ok
before = store.commitlog.write_offset
with open(sys.argv[3], "wb", buffering=0) as filler:  # fill the disk to its last byte
    for chunk in (65536, 4096, 1):
        try:
            while True:
                filler.write(bytes(chunk))
        except OSError:
            pass
refused = store.put_message(Message.build("orders", b"x" * 7000, unique_key="M-full"))
after = store.commitlog.write_offset
os.unlink(sys.argv[3])  # space returns: the same put again, in the same process
retried = store.put_message(Message.build("orders", b"x" * 7000, unique_key="M-full"))
assert retried.ok, retried
at = retried.appended[0]
outcome = [refused.status.name, refused.error, before, after, at.physical_offset, at.queue_offset]
print(json.dumps(outcome))
store.shutdown()
"""


def test_a_full_disk_where_fallocate_is_unsupported_is_disk_full_not_sigbus(tmpfs_disk, opened):
    """Where the file system has no fallocate, a segment's space cannot be reserved and its
    file is sparse (``reserve_space``). A store into a new page through the map on a full
    disk is then SIGBUS and the node dies; appends go through ``pwrite``
    (``MappedFile.append_at``), which answers ENOSPC: the put is DISK_FULL, the part
    written before the disk filled is zeroed again, and once space returns the same put
    succeeds where the refused one would have gone, with the queue offset it gave back."""
    disk = tmpfs_disk(2048)
    config = StoreConfig(str(disk.path / "store"), **DISK_CONFIG)
    filler = disk.path / "filler"
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            STORE_WITHOUT_FALLOCATE,
            config.data_dir,
            json.dumps(DISK_CONFIG),
            str(filler),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S * 3,
    )
    assert child.returncode == 0, f"the store died ({child.returncode}): {child.stderr[-2000:]}"
    status, error, before, after, retried_at, retried_queue_offset = json.loads(
        child.stdout.splitlines()[-1]
    )
    assert (status, after) == ("DISK_FULL", before), error
    assert "no space to write" in error
    # The retry went where the refused put would have, with the queue offset it gave back.
    assert (retried_at, retried_queue_offset) == (before, 3)

    store = opened(config)
    assert store.recovery_report.corruption is None
    assert_nothing_after_write_offset(store)
    by_key = assert_consistent(store)
    assert sorted(by_key) == ["M-full", "M0", "M1", "M2"]
    store.shutdown()


def test_disk_full_when_a_new_consume_queue_file_is_needed(tmpfs_disk, opened, caplog):
    """The CommitLog segment has room but the next consume-queue file does not: the put is
    kept (and acknowledged), dispatch falls behind, later puts answer DISK_FULL and write
    nothing, and once space returns the dispatcher catches up with consistent entries.
    The background flusher, whose checkpoint writes fail meanwhile, must survive."""
    disk = tmpfs_disk(1024)
    config = StoreConfig(
        str(disk.path / "store"),
        **{
            **DISK_CONFIG,
            "consume_queue_entries_per_file": 100,
            "flush_interval_ms": 10,
            "derived_flush_interval_ms": 20,
        },
    )
    store = opened(config)
    acks: list[Ack] = []
    for i in range(95):
        message = build(i)
        acks += put_acked(store, message)
    filler = disk.fill()

    # Entries 95..99 fit the first consume-queue file, 100..104 need the second one.
    batch = [build(i) for i in range(95, 105)]
    result = store.put_messages(batch)
    assert result.ok, result
    acks += Ack.of(batch, result)
    assert [a.queue_offset for a in result.appended] == list(range(95, 105))
    assert store.dispatcher.last_error is not None  # dispatch is behind
    visible = store.get_messages("orders", 0, 0, 200)
    assert [m.queue_offset for m in visible.messages] == list(range(100))

    # The background flusher fails to write the checkpoint on the full disk (and says so).
    def flush_failed_for_lack_of_space() -> bool:
        return any(
            r.exc_info and isinstance(r.exc_info[1], OSError) and r.exc_info[1].errno == ENOSPC
            for r in caplog.records
        )

    until(flush_failed_for_lack_of_space, DEADLINE_S, "a background flush to fail with ENOSPC")

    before = written_state(store)
    for message in (build(200), build(201, queue_id=3), build(202, topic="payments")):
        refused = store.put_message(message)
        assert refused.status is PutStatus.DISK_FULL and "no space" in refused.error
        assert written_state(store) == before
        assert store.dispatcher.dispatched_offset < store.commitlog.write_offset
        assert store.query_by_unique_key(message.topic, message.properties["UNIQ_KEY"]) is None
    # Reads still work for everything dispatched.
    assert store.query_by_unique_key("orders", "M3").body is not None

    filler.unlink()
    message = build(105)
    result = store.put_message(message)
    assert result.ok and result.appended[0].queue_offset == 105
    acks += Ack.of([message], result)
    assert store.dispatcher.last_error is None
    assert store.dispatcher.dispatched_offset == store.commitlog.write_offset
    assert_acknowledged(assert_consistent(store), acks)
    assert store.max_offset_in_queue("orders", 0) == 106
    # The flusher lived through the failures: the checkpoint catches up again.
    checkpoint_path = os.path.join(config.data_dir, "checkpoint")
    until(
        lambda: (
            (Checkpoint.read(checkpoint_path) or Checkpoint()).consume_queue_flushed_offset
            == store.commitlog.write_offset
        ),
        DEADLINE_S,
        "the checkpoint to catch up",
    )

    store.close_abruptly_for_tests()
    store = opened(config)
    assert not store.recovery_report.clean_shutdown
    assert store.recovery_report.corruption is None
    by_key = assert_consistent(store)
    assert_acknowledged(by_key, acks)
    assert len(by_key) == len(acks)
    store.shutdown()
    store = opened(config)
    assert store.recovery_report.clean_shutdown
    assert_acknowledged(assert_consistent(store), acks)
    store.shutdown()


@pytest.mark.parametrize("full_between_keys", [False, True], ids=["at-record", "between-keys"])
def test_disk_full_when_a_new_index_file_is_needed(tmpfs_disk, opened, full_between_keys):
    """The index file is full and the next one cannot be created: once space returns, the
    replay must index every key of the record that overflowed it."""
    disk = tmpfs_disk(1024)
    entries = 50
    config = StoreConfig(
        str(disk.path / "store"),
        **{**DISK_CONFIG, "index_slot_count": 97, "index_entry_count": entries},
    )
    store = opened(config)
    acks: list[Ack] = []
    one_key_messages = entries - 1 if full_between_keys else entries
    for i in range(one_key_messages):
        message = Message.build("orders", b"x" * 50, unique_key=f"M{i}")
        acks += put_acked(store, message)
    assert len(store.index.files) == 1
    filler = disk.fill()

    overflowing = Message.build("orders", b"overflow", keys=["shared"], unique_key="OVER")
    result = store.put_message(overflowing)
    assert result.ok, result  # in the CommitLog and its consume queue; the index lags
    acks += Ack.of([overflowing], result)
    refused = store.put_message(Message.build("orders", b"refused", unique_key="NO"))
    assert refused.status is PutStatus.DISK_FULL

    filler.unlink()
    after = Message.build("orders", b"after", keys=["shared"], unique_key="AFTER")
    result = store.put_message(after)
    assert result.ok
    acks += Ack.of([after], result)
    assert len(store.index.files) == 2
    assert store.query_by_unique_key("orders", "OVER").body == b"overflow"
    assert {m.unique_key for m in store.query_by_key("orders", "shared")} == {"OVER", "AFTER"}
    assert store.query_by_unique_key("orders", "NO") is None
    assert_acknowledged(assert_consistent(store), acks)
    store.close_abruptly_for_tests()

    store = opened(config)
    assert_acknowledged(assert_consistent(store), acks)
    store.shutdown()


# ---- SIGKILL mid-append ------------------------------------------------------------
class AckPipe:
    """Lines from the writer's stdout, read with a deadline (select, no sleeping)."""

    def __init__(self, child: subprocess.Popen) -> None:
        self.child = child
        self.fd = child.stdout.fileno()
        self.buffer = b""

    def read_line(self, deadline: float) -> str | None:
        """The next complete line, or None at end of file."""
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            assert remaining > 0, "the writer is too slow"
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if ready:
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    return None  # an incomplete last line cannot happen: one write per put
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode()


def run_writer_until_killed(
    data_dir: str, mode: FlushMode, seed: int, kill_after: int, log_dir
) -> list[Ack]:
    """Run the writer, SIGKILL it once ``kill_after`` messages were acknowledged, and
    return every acknowledgement it sent, including those still in the pipe."""
    with open(log_dir / f"writer-{seed}.stderr", "wb") as stderr:
        child = subprocess.Popen(
            [sys.executable, WRITER, data_dir, mode.value, str(seed)],
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    pipe = AckPipe(child)
    acks: list[Ack] = []
    try:
        deadline = time.monotonic() + DEADLINE_S
        ready = pipe.read_line(deadline)
        assert ready is not None and ready.startswith("ready"), (
            ready,
            (log_dir / f"writer-{seed}.stderr").read_text(),
        )
        while len(acks) < kill_after:
            line = pipe.read_line(deadline)
            assert line is not None and line.startswith("ack "), (
                line,
                (log_dir / f"writer-{seed}.stderr").read_text(),
            )
            acks.append(Ack.parse(line))
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=DEADLINE_S) == -signal.SIGKILL
        while (line := pipe.read_line(time.monotonic() + DEADLINE_S)) is not None:
            assert line.startswith("ack "), line  # no "nack": every put succeeded
            acks.append(Ack.parse(line))
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
    return acks


# (messages acknowledged before the kill, audit in this process before the next round)
KILL_ROUNDS = [
    (0, False),
    (1, True),
    (40, False),
    (3, False),
    (250, True),
    (17, True),
    (600, False),
]


@pytest.mark.parametrize("mode", [FlushMode.SYNC_FLUSH, FlushMode.ASYNC_FLUSH])
def test_sigkill_while_appending_keeps_every_acknowledged_message(tmp_path, opened, mode):
    """Several kills in a row on one directory, some with no recovery in between but the
    next writer's own. SIGKILL keeps the page cache, so under ASYNC_FLUSH too nothing that
    was acknowledged may be lost; SYNC_FLUSH additionally had it on disk before the ack."""
    data_dir = str(tmp_path / "store")
    config = writer.config_for(data_dir, mode)
    acks: list[Ack] = []
    for round_number, (kill_after, audit) in enumerate([*KILL_ROUNDS, (120, True)]):
        acks += run_writer_until_killed(data_dir, mode, round_number, kill_after, tmp_path)
        if not audit:
            continue
        store = opened(config)
        try:
            report = store.recovery_report
            assert not report.clean_shutdown
            by_key = assert_consistent(store)
            assert_acknowledged(by_key, acks)
            # Beyond the acknowledged, at most the one put in flight at each kill survives.
            kills = round_number + 1
            assert len(by_key) - len(acks) <= writer.MAX_BATCH * kills
        finally:
            store.close_abruptly_for_tests()  # the next writer recovers from a crash again
    assert len(acks) >= sum(n for n, _ in KILL_ROUNDS)
    assert len({a.unique_key for a in acks}) == len(acks)
    assert len(os.listdir(os.path.join(data_dir, "commitlog"))) > 3  # rolls were crossed

    # After all that, a clean cycle: append, shut down, reopen.
    store = opened(config)
    batch = [build(i, queue_id=i % 4) for i in range(5)]
    result = store.put_messages(batch)
    assert result.ok
    acks += Ack.of(batch, result)
    store.shutdown()
    store = opened(config)
    try:
        assert store.recovery_report.clean_shutdown
        assert store.recovery_report.corruption is None
        assert_acknowledged(assert_consistent(store), acks)
    finally:
        store.shutdown()


@pytest.mark.parametrize("kind", ["commitlog", "consume-queue", "index"])
def test_sigkill_while_creating_a_file_leaves_an_empty_file_that_open_repairs(
    tmp_path, opened, kind
):
    """A process killed inside ``create_mapped``, after the file was created but before its
    space was reserved, leaves a file of 0 bytes. Where the store creates one: the next
    CommitLog segment (at a roll, or preallocated half way through the current one), the
    next consume-queue file once the current one is full, the next index file once the
    current one is full. Open must repair each, not refuse the directory."""
    entries = 64
    config = StoreConfig(
        str(tmp_path / "store"),
        commitlog_segment_bytes=SEGMENT,
        max_message_body_bytes=16 * 1024,
        consume_queue_entries_per_file=entries,
        index_slot_count=97,
        index_entry_count=entries,
        preallocate_segments=False,
    )
    store = opened(config)
    acks: list[Ack] = []
    for i in range(entries):  # fills a consume-queue file and an index file exactly
        message = Message.build("orders", os.urandom(1000), unique_key=f"M{i}")
        acks += put_acked(store, message)
    assert store.commitlog.write_offset < SEGMENT
    store.close_abruptly_for_tests()
    root = config.data_dir
    empty = {
        "commitlog": os.path.join(root, "commitlog", f"{SEGMENT:020d}"),
        "consume-queue": os.path.join(root, "consumequeue", "orders", "0", f"{entries * 20:020d}"),
        "index": os.path.join(root, "index", index_file_name(int(time.time() * 1000) + 60_000)),
    }[kind]
    open(empty, "wb").close()

    store = opened(config)
    report = store.recovery_report
    assert not report.clean_shutdown and report.corruption is None
    assert (
        report.end_offset
        == acks[-1].physical_offset + store.look_message_by_offset(acks[-1].physical_offset).size
    )
    by_key = assert_consistent(store)
    assert_acknowledged(by_key, acks)
    assert len(by_key) == entries
    for i in range(entries, entries + 80):  # across every kind of file boundary
        message = Message.build("orders", os.urandom(1000), unique_key=f"M{i}")
        acks += put_acked(store, message)
    assert store.commitlog.write_offset > SEGMENT
    store.shutdown()
    store = opened(config)
    assert store.recovery_report.corruption is None
    assert_acknowledged(assert_consistent(store), acks)
    store.shutdown()


# ---- a torn tail ---------------------------------------------------------------------
@dataclass(frozen=True)
class RawRecord:
    offset: int
    size: int
    path: str
    local: int


def raw_records(commitlog_dir: str) -> list[RawRecord]:
    """The valid records of a CommitLog directory, read from the files themselves (not
    through a store, whose open would already repair them)."""
    found = []
    for name in sorted(os.listdir(commitlog_dir)):
        path = os.path.join(commitlog_dir, name)
        with open(path, "rb") as f:
            data = f.read()
        local = 0
        while True:
            check = record.check_at(data, local, len(data))
            if check.blank:
                break
            if check.size == 0:
                return found
            found.append(RawRecord(int(name) + local, check.size, path, local))
            local += check.size
    return found


@pytest.fixture(scope="module")
def killed_store_dir(tmp_path_factory):
    """A store directory as a SIGKILLed writer left it, with its acknowledgements."""
    root = tmp_path_factory.mktemp("killed")
    data_dir = str(root / "store")
    acks = run_writer_until_killed(data_dir, FlushMode.ASYNC_FLUSH, 7, 150, root)
    return data_dir, acks


def tear_last_byte(path: str, last: RawRecord) -> None:
    zero(path, last.local + last.size - 1, 1)


def tear_last_16_bytes(path: str, last: RawRecord) -> None:
    zero(path, last.local + last.size - 16, 16)


def tear_half(path: str, last: RawRecord) -> None:
    zero(path, last.local + last.size // 2, last.size - last.size // 2)


def tear_all_but_size_and_magic(path: str, last: RawRecord) -> None:
    zero(path, last.local + 8, last.size - 8)


def cut_the_file(path: str, last: RawRecord) -> None:
    os.truncate(path, last.local + last.size // 3)


def zero(path: str, position: int, length: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(bytes(length))


@pytest.mark.parametrize(
    "tear",
    [tear_last_byte, tear_last_16_bytes, tear_half, tear_all_but_size_and_magic, cut_the_file],
    ids=lambda tear: tear.__name__,
)
def test_torn_tail_is_cut_and_appends_continue(killed_store_dir, tmp_path, opened, tear):
    source, acks = killed_store_dir
    copy = str(tmp_path / "store")
    shutil.copytree(source, copy)
    records = raw_records(os.path.join(copy, "commitlog"))
    last = records[-1]
    with open(last.path, "rb") as f:
        torn = record.decode(f.read(), last.local)
    assert len(records) >= len(acks)
    tear(last.path, last)

    config = writer.config_for(copy, FlushMode.ASYNC_FLUSH)
    store = opened(config)
    report = store.recovery_report
    assert not report.clean_shutdown
    assert report.corrupt_offset == last.offset and report.corruption
    assert report.end_offset == store.commitlog.write_offset == last.offset
    kept = [a for a in acks if a.unique_key != torn.unique_key]
    by_key = assert_consistent(store)
    assert_acknowledged(by_key, kept)
    assert len(by_key) == len(records) - 1
    assert store.query_by_unique_key(torn.topic, torn.unique_key) is None
    assert store.max_offset_in_queue(torn.topic, torn.queue_id) == torn.queue_offset

    # New appends start where the torn record was, with its queue offset.
    again = Message.build(torn.topic, b"again", queue_id=torn.queue_id, unique_key="AGAIN")
    result = store.put_message(again)
    assert result.ok
    assert result.appended[0].physical_offset == last.offset
    assert result.appended[0].queue_offset == torn.queue_offset
    batch = [build(i, queue_id=i % 4) for i in range(4)]
    more = store.put_messages(batch)
    assert more.ok
    kept += Ack.of([again], result) + Ack.of(batch, more)
    store.shutdown()

    store = opened(config)
    try:
        report = store.recovery_report
        assert report.clean_shutdown and report.corruption is None
        by_key = assert_consistent(store)
        assert_acknowledged(by_key, kept)
        assert by_key["AGAIN"].body == b"again"
    finally:
        store.shutdown()


# ---- a flipped byte ------------------------------------------------------------------
@pytest.mark.parametrize("stop", ["clean-shutdown", "abrupt-stop"])
def test_flipped_body_byte_in_the_last_segment_stops_recovery_there(tmp_path, opened, stop):
    segment = 256 * 1024
    config = StoreConfig(
        str(tmp_path / "store"),
        commitlog_segment_bytes=segment,
        max_message_body_bytes=16 * 1024,
        consume_queue_entries_per_file=1000,
        index_slot_count=1000,
        index_entry_count=4000,
    )
    store = opened(config)
    acks: list[Ack] = []
    i = 0
    while store.commitlog.write_offset < 2 * segment + segment * 3 // 4:
        message = build(i, queue_id=i % 4, size=500 + (i * 37) % 1000)
        acks += put_acked(store, message)
        i += 1
    if stop == "clean-shutdown":
        store.shutdown()
    else:
        store.close_abruptly_for_tests()

    last_base = 2 * segment
    in_last = [a for a in acks if a.physical_offset >= last_base]
    victim = in_last[len(in_last) // 2]
    before = [a for a in acks if a.physical_offset < victim.physical_offset]
    after = [a for a in acks if a.physical_offset >= victim.physical_offset]
    with open(os.path.join(config.data_dir, "commitlog", f"{last_base:020d}"), "r+b") as f:
        f.seek(victim.physical_offset - last_base + record.HEADER_SIZE + 321)  # in the body
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x10]))

    store = opened(config)
    report = store.recovery_report
    assert report.clean_shutdown is (stop == "clean-shutdown")
    assert report.corrupt_offset == victim.physical_offset
    assert "CRC" in report.corruption
    assert report.end_offset == store.commitlog.write_offset == victim.physical_offset
    by_key = assert_consistent(store)
    assert_acknowledged(by_key, before)
    assert len(by_key) == len(before)
    # Everything from the victim on is gone from the queues and the index.
    for ack in after:
        assert store.query_by_unique_key(ack.topic, ack.unique_key) is None
        assert store.look_message_by_offset(ack.physical_offset) is None
    for queue_id in range(4):
        expected = [a.queue_offset for a in before if a.queue_id == queue_id]
        assert store.max_offset_in_queue("orders", queue_id) == len(expected)
        got = store.get_messages("orders", queue_id, 0, 10_000)
        assert [m.queue_offset for m in got.messages] == expected
        assert store.get_messages("orders", queue_id, len(expected), 1).status is (
            GetStatus.OFFSET_OVERFLOW_ONE
        )
    survivors = {a.physical_offset for a in before}
    for key in range(7):
        hits = store.query_by_key("orders", f"key-{key}", max_count=10_000)
        assert {m.physical_offset for m in hits} <= survivors

    # New appends start at the victim's offset and continue every queue where it was cut.
    new_batch = [build(10_000 + q, queue_id=q) for q in range(4)]
    result = store.put_messages(new_batch)
    assert result.ok
    assert result.appended[0].physical_offset == victim.physical_offset
    for q, appended in enumerate(result.appended):
        assert appended.queue_offset == len([a for a in before if a.queue_id == q])
    store.shutdown()
    store = opened(config)
    try:
        assert store.recovery_report.clean_shutdown
        assert store.recovery_report.corruption is None
        by_key = assert_consistent(store)
        assert_acknowledged(by_key, before + Ack.of(new_batch, result))
        assert len(by_key) == len(before) + 4
        for ack in after:
            assert store.query_by_unique_key(ack.topic, ack.unique_key) is None
    finally:
        store.shutdown()


# ---- a corrupt byte must not delete the rest of the log ----------------------------------
CORRUPTION_CONFIG = dict(
    commitlog_segment_bytes=1 << 20,
    max_message_body_bytes=64 * 1024,
    consume_queue_entries_per_file=1000,
    index_slot_count=1000,
    index_entry_count=4000,
)


def log_bytes(data_dir: str, end: int) -> bytes:
    """The CommitLog's bytes [0, end), read from its files."""
    directory = os.path.join(data_dir, "commitlog")
    parts = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            parts.append(f.read())
    return b"".join(parts)[:end]


def flip_bit(data_dir: str, offset: int) -> None:
    with open(os.path.join(data_dir, "commitlog", f"{0:020d}"), "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x01]))


def test_a_flipped_bit_in_the_first_record_keeps_every_later_record_aside(
    tmp_path, opened, caplog, capsys
):
    """The review's reproduction: 3,000 records, a clean shutdown, one bit flipped in the
    first record's body. Recovery still ends the log at the bad record (appends go on from
    a record boundary), but the bytes from it to the old end are kept in a file that
    ``ferrymq rollback`` lists, with the 2,999 later records decoded; the cut is logged
    as an error naming the offset, the reason and the file. Before: the log went to 0 and
    nothing was kept or logged."""
    from ferrymq.cli.main import main

    config = StoreConfig(str(tmp_path / "store"), **CORRUPTION_CONFIG)
    store = opened(config)
    bodies = [b"body-%05d-" % i + b"x" * (40 + i % 60) for i in range(3000)]
    for start in range(0, 3000, 100):
        batch = [
            Message.build("orders", b, keys=[f"k{start}"]) for b in bodies[start : start + 100]
        ]
        assert store.put_messages(batch).ok
    end = store.commitlog.write_offset
    store.shutdown()
    before = log_bytes(config.data_dir, end)
    flip_bit(config.data_dir, record.HEADER_SIZE + 3)  # in the first record's body

    caplog.set_level(logging.WARNING, logger="ferrymq.store")
    store = opened(config)
    report = store.recovery_report
    assert report.clean_shutdown and report.corrupt_offset == 0
    assert "body CRC mismatch" in report.corruption
    assert store.commitlog.write_offset == 0  # the log ends at the bad record, as before
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, errors
    assert "invalid record at CommitLog offset 0 (body CRC mismatch" in errors[0]
    damaged = report.damaged
    assert (damaged.start, damaged.end, damaged.kept_end) == (0, end, end)
    kept_path = os.path.join(config.data_dir, "damaged", damaged.file)
    assert f"the {end} bytes [0, {end}) from it are kept in {kept_path}" in errors[0]
    assert store.damage.unrefilled and store.damage.cut_bytes == end
    # The kept file is the log's bytes verbatim, the flipped bit included.
    with open(kept_path, "rb") as f:
        kept = f.read()
    assert len(kept) == end
    differing = [i for i in range(end) if kept[i] != before[i]]
    assert differing == [record.HEADER_SIZE + 3]
    store.shutdown()

    capsys.readouterr()
    assert main(["rollback", "--data", config.data_dir, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    first_size = record.check_at(before, 0, len(before)).size
    assert [(r["kind"], r["physical_offset"], r["end_offset"]) for r in rows[:1]] == [
        ("unreadable", 0, first_size)
    ]
    assert "body CRC mismatch" in rows[0]["reason"]
    assert [r["kind"] for r in rows[1:]] == ["damaged"] * 2999
    assert [r["body"].encode() for r in rows[1:]] == bodies[1:]
    assert {r["file"] for r in rows} == {damaged.file}
    assert main(["rollback", "--data", config.data_dir]) == 0
    listed = capsys.readouterr().out
    assert f"damaged range [0, {end}) cut by recovery" in listed
    assert "2999 records of it still valid; not refilled from a master" in listed


def crashed_with_20_records(data_dir: str, opened) -> tuple[StoreConfig, list[StoredMessage]]:
    """A store killed after 20 appends it never flushed (no checkpoint names them)."""
    config = StoreConfig(data_dir, **CORRUPTION_CONFIG, **QUIET_FLUSH)
    store = opened(config)
    for i in range(20):
        assert store.put_message(build(i)).ok
    records = list(store.commitlog.iterate(0, store.commitlog.write_offset))
    store.close_abruptly_for_tests()
    return config, records


def test_after_a_crash_only_a_torn_last_record_is_cut_without_a_copy(tmp_path, opened, caplog):
    """A process killed while appending leaves a partial last record and nothing valid
    after it: a write never finished, cut as before with a warning and nothing kept. A bad
    record with valid ones after it is damage even after a crash: kept."""
    config, records = crashed_with_20_records(str(tmp_path / "torn"), opened)
    last = records[-1]
    path = os.path.join(config.data_dir, "commitlog", f"{0:020d}")
    zero(path, last.physical_offset + last.size // 2, last.size - last.size // 2)
    caplog.set_level(logging.WARNING, logger="ferrymq.store")
    store = opened(config)
    report = store.recovery_report
    assert report.corrupt_offset == last.physical_offset and report.damaged is None
    assert not store.damage.unrefilled
    assert not os.path.exists(os.path.join(config.data_dir, "damaged"))
    assert f"cut a torn record at CommitLog offset {last.physical_offset}" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    store.shutdown()

    config, records = crashed_with_20_records(str(tmp_path / "damaged"), opened)
    middle = records[7]
    path = os.path.join(config.data_dir, "commitlog", f"{0:020d}")
    zero(path, middle.physical_offset + record.HEADER_SIZE, 4)  # the body's first bytes
    store = opened(config)
    damaged = store.recovery_report.damaged
    assert damaged is not None and damaged.start == middle.physical_offset
    assert damaged.end == records[-1].physical_offset + records[-1].size
    assert store.damage.unrefilled
    store.shutdown()


def test_a_range_that_cannot_be_kept_stops_the_open_and_cuts_nothing(tmp_path, opened):
    from store.errors import RecoveryRefused

    config = StoreConfig(str(tmp_path / "store"), **CORRUPTION_CONFIG)
    store = opened(config)
    for i in range(30):
        assert store.put_message(build(i)).ok
    end = store.commitlog.write_offset
    store.shutdown()
    flip_bit(config.data_dir, record.HEADER_SIZE + 1)
    before = log_bytes(config.data_dir, end)

    full = dataclasses.replace(config, disk_high_water_ratio=1e-9)
    with pytest.raises(RecoveryRefused) as refused:
        MessageStore.open(full)
    assert str(refused.value).startswith(
        "recovery found an invalid record at CommitLog offset 0 (body CRC mismatch"
    )
    assert f"could not keep the {end} bytes [0, {end}) after it" in str(refused.value)
    assert "would pass the disk's high-water mark. Nothing was cut. Free space" in str(
        refused.value
    )
    assert log_bytes(config.data_dir, end) == before  # nothing cut
    assert os.listdir(os.path.join(config.data_dir, "damaged")) == []  # no .tmp left

    store = opened(config)  # with room: kept, then cut
    assert store.recovery_report.damaged.end == end
    store.shutdown()


def test_an_open_that_dies_between_the_keep_and_the_cut_keeps_the_range_once(
    tmp_path, opened, monkeypatch
):
    from store.commitlog import CommitLog

    config = StoreConfig(str(tmp_path / "store"), **CORRUPTION_CONFIG)
    store = opened(config)
    for i in range(30):
        assert store.put_message(build(i)).ok
    store.shutdown()
    flip_bit(config.data_dir, record.HEADER_SIZE + 1)

    def power_cut(*args, **kwargs):
        raise RuntimeError("power cut before the cut")

    with monkeypatch.context() as patch:
        patch.setattr(CommitLog, "set_end", power_cut)
        with pytest.raises(RuntimeError, match="power cut"):
            MessageStore.open(config, clock_ms=lambda: 1_000)  # another time, another name
    store = opened(config)
    (damaged,) = store.damage.ranges
    assert store.recovery_report.damaged == damaged
    stem = damaged.file.removesuffix(".log")
    assert sorted(os.listdir(os.path.join(config.data_dir, "damaged"))) == [
        stem + ".json",
        stem + ".log",
    ]
    store.shutdown()


def test_a_range_past_the_keep_limit_keeps_its_first_part_and_says_so(
    tmp_path, opened, caplog, monkeypatch
):
    from store import kept_files

    config = StoreConfig(str(tmp_path / "store"), **CORRUPTION_CONFIG)
    store = opened(config)
    for i in range(30):
        assert store.put_message(build(i)).ok
    end = store.commitlog.write_offset
    store.shutdown()
    flip_bit(config.data_dir, record.HEADER_SIZE + 1)
    monkeypatch.setattr(kept_files, "MAX_KEPT_BYTES", 2000)
    caplog.set_level(logging.ERROR, logger="ferrymq.store")
    store = opened(config)
    damaged = store.recovery_report.damaged
    assert (damaged.start, damaged.kept_end, damaged.end) == (0, 2000, end)
    assert f"[2000, {end}) is cut without a copy" in caplog.text
    store.shutdown()


OPTIMIZED_RECOVERY = r"""
import json, os, sys
from ferrymq.codec import commitlog_record as record
from store.config import StoreConfig
from store.damaged_ranges import Unreadable, read_kept
from store.message import Message
from store.message_store import MessageStore

assert False, "run with python -O: asserts must be gone"
config = StoreConfig(sys.argv[1], commitlog_segment_bytes=1 << 20, max_message_body_bytes=1 << 16)
store = MessageStore.open(config)
for i in range(50):
    store.put_message(Message.build("t", b"message-%d" % i))
offsets = [m.physical_offset for m in store.commitlog.iterate(0, store.commitlog.write_offset)]
store.shutdown()
with open(os.path.join(sys.argv[1], "commitlog", "0" * 20), "r+b") as f:
    f.seek(offsets[10] + record.OFFSET_BODY_LENGTH)
    f.write((5).to_bytes(4, "big"))  # a body length the record's other lengths deny
store = MessageStore.open(config)
report = store.recovery_report
kept = read_kept(os.path.join(store.damage.directory, report.damaged.file), offsets[10], "")
store.shutdown()
print(json.dumps({
    "bad": offsets[10],
    "corrupt_offset": report.corrupt_offset,
    "corruption": report.corruption,
    "end": store.commitlog.write_offset,
    "unreadable": [[i.start, i.end] for i in kept if isinstance(i, Unreadable)],
    "bodies": [i.body.decode() for i in kept if not isinstance(i, Unreadable)],
    "next": offsets[11],
}))
"""


def test_recovery_validates_records_without_asserts(tmp_path):
    """Under ``python -O`` (asserts stripped) recovery still finds a record whose lengths
    disagree, keeps the range and decodes the records after it: its checks are
    ``check_at``'s, never an ``assert``."""
    done = subprocess.run(
        [sys.executable, "-O", "-c", OPTIMIZED_RECOVERY, str(tmp_path / "store")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert found["corrupt_offset"] == found["end"] == found["bad"]
    assert found["corruption"] == "topic length inconsistent with record size"
    assert found["unreadable"] == [[found["bad"], found["next"]]]
    assert found["bodies"] == [f"message-{i}" for i in range(11, 50)]


READ_DURING_CUT = r"""
import sys, threading
from store.mapped_file import MappedFile

segment = MappedFile.create(sys.argv[1], 0, 1 << 20)
stop = threading.Event()


def read_the_tail():
    while not stop.is_set():
        segment.map[600_000:600_100]


reader = threading.Thread(target=read_the_tail)
reader.start()
for _ in range(200):
    segment.map[0 : 1 << 20] = b"\x07" * (1 << 20)
    segment.wrote_position = 1 << 20
    segment.zero_from(4096)
    assert segment.map[4096:8192] == bytes(4096) and segment.map[:4096] == b"\x07" * 4096
stop.set()
reader.join()
print("survived")
"""


def test_a_cut_never_faults_a_thread_reading_the_same_map(tmp_path):
    # A slave cuts its tail (zero_from) while consumers may read that tail through the
    # map. Shortening the file, even for an instant, made such reads SIGBUS and killed
    # the node without a word (the long async chaos runs: twice, right after a cut).
    done = subprocess.run(
        [sys.executable, "-c", READ_DURING_CUT, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == "survived"
