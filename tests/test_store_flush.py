"""Flush modes: SYNC_FLUSH confirms only what is on disk and shares fsyncs among waiting
writers; ASYNC_FLUSH reaches the disk in the background and the checkpoint follows."""

from __future__ import annotations

import os
import threading
import time

from store.checkpoint import Checkpoint
from store.config import FlushMode, StoreConfig
from store.message import Message
from store.message_store import MessageStore

SMALL = dict(
    commitlog_segment_bytes=1 << 20,
    max_message_body_bytes=8 * 1024,
    consume_queue_entries_per_file=1000,
    index_slot_count=101,
    index_entry_count=1000,
)


def test_sync_flush_confirms_only_flushed_bytes_and_shares_fsyncs(tmp_path):
    store = MessageStore.open(
        StoreConfig(str(tmp_path / "s"), flush_mode=FlushMode.SYNC_FLUSH, **SMALL)
    )
    writers, per_writer = 32, 20
    violations: list[str] = []
    barrier = threading.Barrier(writers)

    def write(w: int) -> None:
        barrier.wait()
        for i in range(per_writer):
            result = store.put_message(Message.build("T", b"x" * 500, queue_id=w % 4))
            if not result.ok:
                violations.append(f"{w}/{i}: {result.status}")
                continue
            end = result.appended[0].physical_offset + result.appended[0].size
            if store.commitlog.flushed_offset < end:
                violations.append(f"{w}/{i}: confirmed before its bytes were flushed")

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert violations == []
    flushes = store._group_commit.flush_count
    assert flushes < writers * per_writer, "group commit did not group"
    store.shutdown()


def test_async_flush_reaches_the_disk_in_the_background(tmp_path):
    config = StoreConfig(
        str(tmp_path / "s"),
        flush_mode=FlushMode.ASYNC_FLUSH,
        flush_interval_ms=20,
        flush_min_pages=1,
        derived_flush_interval_ms=50,
        **SMALL,
    )
    store = MessageStore.open(config)
    for i in range(200):
        assert store.put_message(Message.build("T", os.urandom(700), unique_key=f"U{i}")).ok
    end = store.commitlog.write_offset
    deadline = time.monotonic() + 10
    while True:
        checkpoint = Checkpoint.read(os.path.join(config.data_dir, "checkpoint"))
        if (
            store.commitlog.flushed_offset == end
            and checkpoint is not None
            and checkpoint.consume_queue_flushed_offset == end
            and checkpoint.commitlog_flushed_offset == end
        ):
            break
        assert time.monotonic() < deadline, (store.commitlog.flushed_offset, end, checkpoint)
        time.sleep(0.01)
    assert checkpoint.index_flushed_offset == end
    store.shutdown()


def test_checkpoint_round_trip_and_damage(tmp_path):
    path = str(tmp_path / "checkpoint")
    written = Checkpoint(100, 90, 80, 1, 2, 3)
    written.write(path)
    assert Checkpoint.read(path) == written
    assert written.recovery_start_offset == 80
    with open(path, "r+b") as f:
        f.seek(5)
        f.write(b"\x01")
    assert Checkpoint.read(path) is None
    assert Checkpoint.read(str(tmp_path / "missing")) is None
