"""Retention by age and by disk high-water mark: oldest segments go first, the active one
stays, and consume-queue and index files that point only into deleted segments go too."""

from __future__ import annotations

import os

from store.config import StoreConfig
from store.message import Message
from store.message_store import MessageStore
from store.results import GetStatus
from tests.store_checks import assert_derived_files_agree

HOUR_MS = 3600 * 1000
SMALL = dict(
    commitlog_segment_bytes=128 * 1024,
    max_message_body_bytes=8 * 1024,
    consume_queue_entries_per_file=20,
    index_slot_count=7,
    index_entry_count=30,
    retention_ms=72 * HOUR_MS,
)


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now_ms


def fill(store: MessageStore, clock: Clock, count: int, start: int = 0) -> list:
    appended = []
    for i in range(start, start + count):
        result = store.put_message(
            Message.build("T", os.urandom(4000), queue_id=i % 2, unique_key=f"K{i}")
        )
        assert result.ok
        appended.append(result.appended[0])
        clock.now_ms += 60_000  # a minute between messages
    return appended


def segments_of(store: MessageStore) -> list[int]:
    return [f.base_offset for f in store.commitlog.segments.files]


def test_retention_by_age(tmp_path):
    clock = Clock()
    config = StoreConfig(str(tmp_path / "store"), **SMALL)
    store = MessageStore.open(config, clock_ms=clock)
    old = fill(store, clock, 60)  # about two segments, one hour of messages
    clock.now_ms += 100 * HOUR_MS
    recent = fill(store, clock, 40, start=60)
    before = segments_of(store)
    assert len(before) >= 3

    # Nothing is older than 72 h yet relative to a clock just after the recent messages.
    assert store.delete_expired(now_ms=clock.now_ms - 101 * HOUR_MS) == 0
    deleted = store.delete_expired(now_ms=clock.now_ms)
    assert deleted >= 1
    floor = store.commitlog.min_offset
    assert floor == segments_of(store)[0] > 0
    # Every deleted message lived entirely below the floor, every kept one above it.
    gone = [a for a in old if a.physical_offset < floor]
    assert gone and all(a.physical_offset + a.size <= floor for a in gone)
    for i, a in enumerate(old + recent):
        found = store.query_by_unique_key("T", f"K{i}")
        assert (found is None) == (a.physical_offset < floor)
    # Queue minimums moved forward; reading below them says so.
    for queue_id in (0, 1):
        low = store.min_offset_in_queue("T", queue_id)
        assert low > 0
        assert store.get_messages("T", queue_id, 0, 10).status is GetStatus.OFFSET_TOO_SMALL
        first = store.get_messages("T", queue_id, low, 1).messages[0]
        assert first.physical_offset >= floor
        files = os.listdir(os.path.join(config.data_dir, "consumequeue", "T", str(queue_id)))
        assert int(min(files)) // 20 <= low  # files below the minimum were deleted
    assert all(f.end_physical_offset > floor for f in store.index.files)
    assert_derived_files_agree(store)

    # The minimums survive restarts, clean and abrupt.
    minimums = [store.min_offset_in_queue("T", q) for q in (0, 1)]
    store.shutdown()
    store = MessageStore.open(config, clock_ms=clock)
    assert [store.min_offset_in_queue("T", q) for q in (0, 1)] == minimums
    store.close_abruptly_for_tests()
    store = MessageStore.open(config, clock_ms=clock)
    assert [store.min_offset_in_queue("T", q) for q in (0, 1)] == minimums
    assert store.commitlog.min_offset == floor
    store.shutdown()


def test_the_active_segment_always_stays(tmp_path):
    clock = Clock()
    store = MessageStore.open(StoreConfig(str(tmp_path / "s"), **SMALL), clock_ms=clock)
    fill(store, clock, 70)
    store.delete_expired(now_ms=clock.now_ms + 10_000 * HOUR_MS)
    assert len(store.commitlog.segments.files) == 1
    assert store.put_message(Message.build("T", b"still works", unique_key="LAST")).ok
    assert store.query_by_unique_key("T", "LAST").body == b"still works"
    store.shutdown()


def test_retention_by_disk_high_water_mark(tmp_path):
    clock = Clock()
    store = MessageStore.open(StoreConfig(str(tmp_path / "s"), **SMALL), clock_ms=clock)
    fill(store, clock, 100)
    count = len(segments_of(store))
    store.disk_usage = lambda path: (100, 50, 50)  # below the 85% mark: nothing to do
    assert store.delete_expired() == 0
    store.disk_usage = lambda path: (100, 90, 10)  # above: oldest go though young
    assert store.delete_expired() == count - 1
    assert store.commitlog.min_offset == segments_of(store)[0]
    assert_derived_files_agree(store)
    store.shutdown()


def test_a_queue_whose_messages_all_expired_is_empty(tmp_path):
    clock = Clock()
    store = MessageStore.open(StoreConfig(str(tmp_path / "s"), **SMALL), clock_ms=clock)
    for i in range(10):
        assert store.put_message(Message.build("Old", os.urandom(3000), unique_key=f"O{i}")).ok
    for _ in range(40):  # old padding, so the first segment holds only old records
        assert store.put_message(Message.build("Pad", os.urandom(4000))).ok
    clock.now_ms += 100 * HOUR_MS
    fill(store, clock, 80)
    store.delete_expired(now_ms=clock.now_ms)
    assert store.min_offset_in_queue("Old", 0) == store.max_offset_in_queue("Old", 0) == 10
    assert store.get_messages("Old", 0, 10, 5).status is GetStatus.OFFSET_OVERFLOW_ONE
    # New messages of that queue continue its offsets.
    appended = store.put_message(Message.build("Old", b"new")).appended[0]
    assert appended.queue_offset == 10
    assert store.get_messages("Old", 0, 10, 5).messages[0].body == b"new"
    store.shutdown()
