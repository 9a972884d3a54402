"""Consistency checks shared by the store's fault tests."""

from __future__ import annotations

from store.hashing import tag_hash_code
from store.message_store import MessageStore


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
