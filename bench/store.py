"""Storage-engine benchmark: ``python -m bench.store --json [--quick]``.

Runs in one process on 1 KiB bodies and prints one JSON object (last line) with:
``append_async_msgs_per_s`` (ASYNC_FLUSH, batches of 32, with dispatch to consume queue
and index), ``append_async_single_msgs_per_s`` (one message per put),
``append_sync_64_writers_msgs_per_s`` (SYNC_FLUSH, 64 concurrent asyncio writers — the
node's model — one message per put, group commit), ``append_sync_64_threads_msgs_per_s``
(the same with 64 OS threads and the blocking API), ``get_msgs_per_s`` (get_messages,
32 per call), ``replica_apply_msgs_per_s`` (a slave's work: the same log appended
verbatim into a second store in 256 KiB chunks as a master streams them, with dispatch),
``recovery_scan_mb_per_s``
(validating scan of the whole CommitLog, CRC included), and for comparison, measured in the
same run, ``raw_pack_msgs_per_s`` (the same records packed with ``struct`` only) and
``raw_write_mb_per_s`` (sequential ``os.write`` of the same bytes) and
``raw_fdatasync_64_per_group_msgs_per_s`` (the same bytes as the SYNC_FLUSH phase, 64
records per ``fdatasync``, no store code: the disk's ceiling for that phase).

Every message carries a tag and a unique key, as official clients send them, so dispatch
writes one consume-queue entry and one index entry per message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import mmap
import os
import platform
import shutil
import struct
import tempfile
import threading
import time

from crc32c import crc32c

from store.config import FlushMode, StoreConfig
from store.message import Message
from store.message_store import MessageStore

BODY = bytes(range(256)) * 4  # 1 KiB
TOPIC = "BenchTopic"
QUEUES = 8


def make_messages(count: int, start: int = 0) -> list[Message]:
    return [
        Message.build(
            TOPIC,
            BODY,
            queue_id=i % QUEUES,
            tags="TagA" if i % 2 else "TagB",
            unique_key=f"7F0000010001{i:020X}",
            born_timestamp_ms=1_700_000_000_000,
        )
        for i in range(start, start + count)
    ]


def config_for(directory: str, mode: FlushMode) -> StoreConfig:
    return StoreConfig(
        directory,
        commitlog_segment_bytes=256 << 20,
        index_slot_count=1_000_000,
        index_entry_count=4_000_000,
        flush_mode=mode,
    )


def bench_append_async(directory: str, count: int, batch: int) -> float:
    store = MessageStore.open(config_for(directory, FlushMode.ASYNC_FLUSH))
    messages = make_messages(count)
    batches = [messages[i : i + batch] for i in range(0, count, batch)]
    started = time.perf_counter()
    for chunk in batches:
        result = store.put_messages(chunk)
        assert result.ok, result
    elapsed = time.perf_counter() - started
    store.shutdown()
    return count / elapsed


def bench_append_sync_async_writers(directory: str, count: int, writers: int) -> float:
    """SYNC_FLUSH with ``writers`` concurrent asyncio writers, one message per put: how the
    node drives the store, each writer awaiting its group commit."""
    store = MessageStore.open(config_for(directory, FlushMode.SYNC_FLUSH))
    per_writer = count // writers
    batches = [make_messages(per_writer, w * per_writer) for w in range(writers)]
    # Opening a new store creates and warms its first segment; a running node warmed its
    # active segment long before. Let that write reach the disk before timing.
    os.sync()

    async def write(messages: list[Message]) -> None:
        for message in messages:
            result = await store.put_messages_async([message])
            assert result.ok, result

    async def run_all() -> float:
        started = time.perf_counter()
        await asyncio.gather(*(write(b) for b in batches))
        return time.perf_counter() - started

    elapsed = asyncio.run(run_all())
    store.shutdown()
    return per_writer * writers / elapsed


def bench_append_sync_threads(directory: str, count: int, writers: int) -> float:
    """SYNC_FLUSH with ``writers`` OS threads calling the blocking ``put_message``."""
    store = MessageStore.open(config_for(directory, FlushMode.SYNC_FLUSH))
    per_writer = count // writers
    batches = [make_messages(per_writer, w * per_writer) for w in range(writers)]
    os.sync()  # as above: the new store's first segment was just warmed
    barrier = threading.Barrier(writers + 1)
    failures: list[object] = []

    def write(messages: list[Message]) -> None:
        barrier.wait()
        for message in messages:
            result = store.put_message(message)
            if not result.ok:
                failures.append(result)

    threads = [threading.Thread(target=write, args=(b,)) for b in batches]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    store.shutdown()
    assert not failures, failures[:3]
    return per_writer * writers / elapsed


def bench_get(directory: str) -> float:
    store = MessageStore.open(config_for(directory, FlushMode.ASYNC_FLUSH))
    total = 0
    started = time.perf_counter()
    for queue_id in range(QUEUES):
        offset = store.min_offset_in_queue(TOPIC, queue_id)
        end = store.max_offset_in_queue(TOPIC, queue_id)
        while offset < end:
            result = store.get_messages(TOPIC, queue_id, offset, 32)
            total += len(result.messages)
            offset = result.next_begin_offset
    elapsed = time.perf_counter() - started
    store.shutdown()
    return total / elapsed


def bench_replica_apply(source_dir: str, directory: str) -> float:
    """Append the log of ``source_dir`` into a new store the way a slave does
    (``append_replicated`` of ``read_records`` chunks, consume queues and index built by
    the dispatcher)."""
    source = MessageStore.open(config_for(source_dir, FlushMode.ASYNC_FLUSH))
    log = source.commitlog
    chunks, offset = [], log.min_offset
    while offset < log.write_offset:
        chunk = log.read_records(offset, 256 << 10)
        chunks.append((offset, chunk))
        offset += len(chunk)
    records = sum(q.max_offset - q.min_offset for q in source.consume_queues.queues.values())
    source.shutdown()
    replica = MessageStore.open(config_for(directory, FlushMode.ASYNC_FLUSH))
    started = time.perf_counter()
    for offset, chunk in chunks:
        replica.append_replicated(offset, chunk)
    elapsed = time.perf_counter() - started
    replica.shutdown()
    return records / elapsed


def bench_recovery_scan(directory: str) -> float:
    store = MessageStore.open(config_for(directory, FlushMode.ASYNC_FLUSH))
    commitlog = store.commitlog
    start, end = commitlog.min_offset, commitlog.write_offset
    started = time.perf_counter()
    scan = commitlog.scan(start)
    elapsed = time.perf_counter() - started
    assert scan.end_offset == end and scan.corruption is None, scan
    store.shutdown()
    return (end - start) / elapsed / 1e6


def bench_raw_pack(count: int) -> tuple[float, bytes]:
    header = struct.Struct(">iIIiiqqiq8sq8siqi")
    topic = TOPIC.encode()
    host = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"
    properties = [
        f"TAGS\x01TagA\x02UNIQ_KEY\x017F0000010001{i:020X}\x02".encode() for i in range(count)
    ]
    parts = []
    started = time.perf_counter()
    position = 0
    for i in range(count):
        props = properties[i]
        size = 88 + len(BODY) + 1 + len(topic) + 2 + len(props)
        parts.append(
            header.pack(
                size,
                0xDAA320A7,
                crc32c(BODY),
                i % QUEUES,
                0,
                i,
                position,
                0,
                1_700_000_000_000,
                host,
                1_700_000_000_000,
                host,
                0,
                0,
                len(BODY),
            )
            + BODY
            + bytes((len(topic),))
            + topic
            + len(props).to_bytes(2, "big")
            + props
        )
        position += size
    elapsed = time.perf_counter() - started
    return count / elapsed, b"".join(parts)


def bench_raw_write(directory: str, data: bytes) -> float:
    path = os.path.join(directory, "raw")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    view = memoryview(data)
    chunk = 1 << 20
    started = time.perf_counter()
    for i in range(0, len(data), chunk):
        os.write(fd, view[i : i + chunk])
    elapsed = time.perf_counter() - started
    os.close(fd)
    os.unlink(path)
    return len(data) / elapsed / 1e6


def bench_raw_sync_groups(directory: str, data: bytes, group_bytes: int) -> float:
    """The disk's own ceiling for SYNC_FLUSH with 64 writers: write the same records into a
    preallocated, warmed map ``group_bytes`` at a time and ``fdatasync`` after each group, with no
    store code at all. Returns records per second at 1,100 bytes per record."""
    path = os.path.join(directory, "raw-sync")
    size = len(data)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.posix_fallocate(fd, 0, size)
    zeros = bytes(1 << 20)
    for position in range(0, size, len(zeros)):  # warmed, as the store's segments are
        os.pwrite(fd, zeros[: size - position], position)
    os.fdatasync(fd)
    os.sync()
    mapped = mmap.mmap(fd, size)
    started = time.perf_counter()
    for position in range(0, size, group_bytes):
        end = min(size, position + group_bytes)
        mapped[position:end] = data[position:end]
        os.fdatasync(fd)
    elapsed = time.perf_counter() - started
    mapped.close()
    os.close(fd)
    os.unlink(path)
    record_bytes = size / (size // 1100)
    return size / record_bytes / elapsed


def run(quick: bool, work_dir: str | None) -> dict[str, object]:
    count = 100_000 if quick else 400_000
    sync_count = 64 * (1000 if quick else 1500)
    root = tempfile.mkdtemp(prefix="ferrymq-bench-", dir=work_dir)
    try:
        # Each timed phase starts with no dirty pages left by the previous one, so one
        # phase's writeback does not slow the next one's fsyncs; the fsync-bound phases
        # run first, before the bulk phases have written (and deleted) hundreds of MB.
        os.sync()
        figures: dict[str, object] = {
            "append_sync_64_writers_msgs_per_s": round(
                bench_append_sync_async_writers(os.path.join(root, "sync"), sync_count, 64)
            )
        }
        os.sync()
        figures["append_sync_64_threads_msgs_per_s"] = round(
            bench_append_sync_threads(os.path.join(root, "sync-threads"), sync_count // 2, 64)
        )
        async_dir = os.path.join(root, "async")
        os.sync()
        figures["append_async_msgs_per_s"] = round(bench_append_async(async_dir, count, 32))
        figures["get_msgs_per_s"] = round(bench_get(async_dir))
        figures["recovery_scan_mb_per_s"] = round(bench_recovery_scan(async_dir), 1)
        replica_dir = os.path.join(root, "replica")
        figures["replica_apply_msgs_per_s"] = round(bench_replica_apply(async_dir, replica_dir))
        shutil.rmtree(replica_dir)
        shutil.rmtree(async_dir)
        os.sync()
        single_dir = os.path.join(root, "single")
        figures["append_async_single_msgs_per_s"] = round(
            bench_append_async(single_dir, count // 2, 1)
        )
        shutil.rmtree(single_dir)
        pack_rate, packed = bench_raw_pack(count)
        figures["raw_pack_msgs_per_s"] = round(pack_rate)
        os.sync()
        sync_bytes = packed[: sync_count * 1100]
        figures["raw_fdatasync_64_per_group_msgs_per_s"] = round(
            bench_raw_sync_groups(root, sync_bytes, 64 * 1100)
        )
        figures["raw_write_mb_per_s"] = round(bench_raw_write(root, packed), 1)
        figures["messages"] = count
        figures["body_bytes"] = len(BODY)
        figures["machine"] = (
            f"{platform.machine()} {os.cpu_count()} cores, "
            f"{platform.python_implementation()} {platform.python_version()}"
        )
        return figures
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    parser.add_argument("--quick", action="store_true", help="smaller run (under 60 s)")
    parser.add_argument("--dir", help="where to put the data (default: a temp dir)")
    args = parser.parse_args()
    figures = run(args.quick, args.dir)
    if not args.json:
        for name, value in figures.items():
            print(f"{name:40} {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
