"""Stores for tests: small configurations, the consistency audit of a store's files, and
reading or damaging the CommitLog files of a stopped node."""

from __future__ import annotations

import os

from ferrymq.codec import commitlog_record as record
from store.hashing import tag_hash_code
from store.message_store import MessageStore

SEGMENT = 64 * 1024
SMALL = dict(
    commitlog_segment_bytes=SEGMENT,
    max_message_body_bytes=8 * 1024,
    consume_queue_entries_per_file=100,
    index_slot_count=64,
    index_entry_count=400,
)
# No background flushing or checkpoints unless a test asks for them: what is on disk and
# in the checkpoint is then exactly what the test wrote.
QUIET = dict(flush_interval_ms=10**9, derived_flush_interval_ms=10**9)


def assert_derived_files_agree(store: MessageStore, distinct_unique_keys: bool = True) -> int:
    """Every CommitLog record has exactly its consume-queue entry, every entry points at
    its record, queue offsets are contiguous, and every unique key is found by the index.
    A node's store may repeat a unique key (clients choose message ids; a committed
    transaction or a due timer keeps its id): ``distinct_unique_keys=False`` then only
    asks the index to find a record of the topic with that key. Returns the number of
    records."""
    commitlog = store.commitlog
    per_queue: dict[tuple[str, int], list[int]] = {}
    unique_keys: set[str] = set()
    records = 0
    for stored in commitlog.iterate(commitlog.min_offset, commitlog.write_offset):
        records += 1
        queue = store.consume_queues.get(stored.topic, stored.queue_id)
        assert queue is not None, f"no consume queue for {stored.topic}/{stored.queue_id}"
        tag_code = tag_hash_code(stored.tags) if stored.tags else 0
        assert queue.entry_at(stored.queue_offset) == (
            stored.physical_offset,
            stored.size,
            tag_code,
        ), f"consume queue disagrees at {stored.topic}/{stored.queue_id}@{stored.queue_offset}"
        per_queue.setdefault((stored.topic, stored.queue_id), []).append(stored.queue_offset)
        if stored.unique_key and distinct_unique_keys:
            assert stored.unique_key not in unique_keys, f"duplicate {stored.unique_key}"
            unique_keys.add(stored.unique_key)
            found = store.query_by_unique_key(stored.topic, stored.unique_key)
            assert found is not None and found.physical_offset == stored.physical_offset
        elif stored.unique_key:
            found = store.query_by_unique_key(stored.topic, stored.unique_key)
            assert found is not None and found.unique_key == stored.unique_key, stored.unique_key
    for (topic, queue_id), offsets in per_queue.items():
        queue = store.consume_queues.get(topic, queue_id)
        assert offsets == list(range(queue.min_offset, queue.min_offset + len(offsets)))
        assert queue.max_offset == queue.min_offset + len(offsets), (topic, queue_id)
    for (topic, queue_id), queue in store.consume_queues.queues.items():
        if (topic, queue_id) not in per_queue:
            assert queue.max_offset == queue.min_offset, f"entries without records: {topic}"
    return records


def log_records(data_dir: str, topic: str) -> list[tuple[int, int]]:
    """(offset, size) of the valid records of ``topic`` in a stopped node's CommitLog,
    read from its files."""
    directory = os.path.join(data_dir, "commitlog")
    found = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        local = 0
        while (check := record.check_at(data, local, len(data))).size:
            if check.blank:
                break
            if record.decode(data, local).topic == topic:
                found.append((int(name) + local, check.size))
            local += check.size
    return found


def flip_body_bit(data_dir: str, offset: int) -> None:
    directory = os.path.join(data_dir, "commitlog")
    first = sorted(os.listdir(directory))[0]
    segment_bytes = os.path.getsize(os.path.join(directory, first))
    base = offset - offset % segment_bytes
    with open(os.path.join(directory, f"{base:020d}"), "r+b") as f:
        f.seek(offset - base + record.HEADER_SIZE + 2)
        byte = f.read(1)
        f.seek(offset - base + record.HEADER_SIZE + 2)
        f.write(bytes([byte[0] ^ 0x04]))
