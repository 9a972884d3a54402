"""Retention by age and by disk high-water mark: oldest segments go first, the active one
stays, and consume-queue and index files that point only into deleted segments go too."""

from __future__ import annotations

import os

from store.config import StoreConfig
from store.message import Message
from store.message_store import MessageStore
from store.results import GetStatus
from tests.support.stores import assert_derived_files_agree

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


# ---- retention checked against what the store wrote ----------------------------------

AGE = dict(SMALL, index_entry_count=30, consume_queue_entries_per_file=20)


def listing(store: MessageStore, *parts: str) -> list[str]:
    return sorted(os.listdir(os.path.join(store.config.data_dir, *parts)))


def fill_segments(store: MessageStore, clock: Clock, segments: int) -> list:
    """One message a minute, keys shared by many messages, until ``segments`` segments
    are full. Returns ``(appended, store timestamp, queue id, unique key)`` per message."""
    sent = []
    i = 0
    while store.commitlog.write_offset < segments * SMALL["commitlog_segment_bytes"]:
        queue_id = i % 3
        result = store.put_message(
            Message.build(
                "T",
                bytes([i % 251]) * 4000,
                queue_id=queue_id,
                keys=[f"k{i % 5}"],
                unique_key=f"K{i}",
            )
        )
        assert result.ok
        sent.append((result.appended[0], clock.now_ms, queue_id, f"K{i}"))
        clock.now_ms += 60_000
        i += 1
    return sent


def first_record_time(sent: list, segment_base: int) -> int | None:
    times = [at for a, at, _, _ in sent if a.physical_offset >= segment_base]
    return times[0] if times else None


def test_age_retention_deletes_exactly_the_expired_prefix_oldest_first(tmp_path):
    """A segment expires when the first record of the next one (so every record of its
    own) is older than retention_ms — strictly. Deletion goes oldest first and stops at
    the first segment still needed; its consume-queue and index files follow."""
    clock = Clock()
    config = StoreConfig(str(tmp_path / "s"), **AGE)
    store = MessageStore.open(config, clock_ms=clock)
    sent = fill_segments(store, clock, 6)
    segment = config.commitlog_segment_bytes
    names_before = listing(store, "commitlog")
    index_before = {os.path.basename(f.path): f.end_physical_offset for f in store.index.files}
    assert len(names_before) == 7 and len(index_before) >= 10
    # Expire the records of segments 0-2: "now" is exactly retention after the first
    # record of segment 3 — not yet older than retention — then one millisecond later.
    edge = first_record_time(sent, 3 * segment) + config.retention_ms
    assert store.delete_expired(now_ms=edge) == 2
    assert store.commitlog.min_offset == 2 * segment
    assert store.delete_expired(now_ms=edge + 1) == 1
    floor = store.commitlog.min_offset
    assert floor == 3 * segment
    assert listing(store, "commitlog") == names_before[3:]  # a prefix, oldest first

    gone = [s for s in sent if s[0].physical_offset < floor]
    kept = [s for s in sent if s[0].physical_offset >= floor]
    assert gone and kept
    # Index files pointing only below the floor are gone, the others stay.
    index_after = listing(store, "index")
    assert set(index_after) == {n for n, end in index_before.items() if end > floor} | {
        os.path.basename(store.index.files[-1].path)
    }
    assert set(index_before) - set(index_after)
    # Consume queues: the minimum is the first kept message of each queue; its file is
    # the first one left.
    for queue_id in range(3):
        of_queue = [a for a, _, q, _ in sent if q == queue_id]
        expected_min = next(a.queue_offset for a in of_queue if a.physical_offset >= floor)
        low = store.min_offset_in_queue("T", queue_id)
        assert low == expected_min
        assert store.max_offset_in_queue("T", queue_id) == len(of_queue)
        first_file = int(listing(store, "consumequeue", "T", str(queue_id))[0])
        assert first_file // 20 <= low < first_file // 20 + 20
        below = store.get_messages("T", queue_id, low - 1, 5)
        assert below.status is GetStatus.OFFSET_TOO_SMALL
        assert (below.next_begin_offset, below.min_offset) == (low, low)
        assert store.get_messages("T", queue_id, low, 1).messages[0].queue_offset == low
        assert store.offset_by_time("T", queue_id, 0) == low
    # Deleted messages are found by no query; kept ones by all.
    for appended, _, _, unique_key in gone:
        assert store.query_by_unique_key("T", unique_key) is None
        assert store.look_message_by_id(appended.offset_message_id) is None
        assert store.look_message_by_offset(appended.physical_offset) is None
    for appended, _, _, unique_key in kept:
        assert store.query_by_unique_key("T", unique_key).physical_offset == (
            appended.physical_offset
        )
        assert store.look_message_by_id(appended.offset_message_id) is not None
    for k in range(5):
        expected = sorted(a.physical_offset for a, _, _, key in kept if int(key[1:]) % 5 == k)
        found = store.query_by_key("T", f"k{k}", max_count=10_000)
        assert sorted(m.physical_offset for m in found) == expected
    assert_derived_files_agree(store)

    minimums = [store.min_offset_in_queue("T", q) for q in range(3)]
    for abrupt in (False, True):
        if abrupt:
            store.close_abruptly_for_tests()
        else:
            store.shutdown()
        store = MessageStore.open(config, clock_ms=clock)
        assert store.commitlog.min_offset == floor
        assert [store.min_offset_in_queue("T", q) for q in range(3)] == minimums
        assert store.query_by_unique_key("T", gone[-1][3]) is None
        assert store.query_by_unique_key("T", kept[0][3]) is not None
        assert_derived_files_agree(store)
    store.shutdown()


def test_one_run_deletes_at_most_max_segments_deleted_per_run(tmp_path):
    clock = Clock()
    config = StoreConfig(str(tmp_path / "s"), **AGE, max_segments_deleted_per_run=2)
    store = MessageStore.open(config, clock_ms=clock)
    fill_segments(store, clock, 7)
    far = clock.now_ms + 1000 * HOUR_MS
    assert [store.delete_expired(now_ms=far) for _ in range(5)] == [2, 2, 2, 1, 0]
    assert len(store.commitlog.segments.files) == 1
    assert_derived_files_agree(store)
    store.shutdown()


def test_high_water_mark_is_strict_and_reads_the_data_directory(tmp_path):
    """Retention by disk use starts only above disk_high_water_ratio, and asks about the
    store's own data directory."""
    clock = Clock()
    config = StoreConfig(str(tmp_path / "s"), **AGE, disk_high_water_ratio=0.5)
    store = MessageStore.open(config, clock_ms=clock)
    sent = fill_segments(store, clock, 4)
    asked: list[str] = []

    def usage(used: int):
        def disk_usage(path: str) -> tuple[int, int, int]:
            asked.append(path)
            return (1000, used, 1000 - used)

        return disk_usage

    store.disk_usage = usage(500)  # exactly at the mark: not above it
    assert store.delete_expired() == 0
    store.disk_usage = lambda path: (0, 0, 0)  # a file system that reports nothing
    assert store.delete_expired() == 0
    store.disk_usage = usage(501)
    assert store.delete_expired() == 4  # young, but the disk is above the mark
    assert asked == [config.data_dir, config.data_dir]
    floor = store.commitlog.min_offset
    assert floor == 4 * config.commitlog_segment_bytes
    assert all(f.end_physical_offset > floor for f in store.index.files[:-1])
    for queue_id in range(3):
        low = store.min_offset_in_queue("T", queue_id)
        count = sum(1 for s in sent if s[2] == queue_id)
        live = [a for a, _, q, _ in sent if q == queue_id and a.physical_offset >= floor]
        assert low == (live[0].queue_offset if live else count)
    assert_derived_files_agree(store)

    minimums = [store.min_offset_in_queue("T", q) for q in range(3)]
    for abrupt in (True, False):
        if abrupt:
            store.close_abruptly_for_tests()
        else:
            store.shutdown()
        store = MessageStore.open(config, clock_ms=clock)
        assert store.commitlog.min_offset == floor
        assert [store.min_offset_in_queue("T", q) for q in range(3)] == minimums
    store.shutdown()


def test_an_expired_queue_stays_empty_across_restarts_and_continues_its_offsets(tmp_path):
    """A queue whose messages all expired reports min == max, keeps that through clean
    and abrupt restarts, and its next message takes the next offset."""
    clock = Clock()
    config = StoreConfig(str(tmp_path / "s"), **AGE)
    store = MessageStore.open(config, clock_ms=clock)
    for _ in range(7):
        assert store.put_message(Message.build("Old", b"old", queue_id=1, keys=["o"])).ok
        clock.now_ms += 1000
    while store.commitlog.write_offset < config.commitlog_segment_bytes + 10_000:
        # Old padding into the second segment: the first segment then holds only old
        # records, and so does the start of the second.
        assert store.put_message(Message.build("Pad", bytes(4000))).ok
    clock.now_ms += 100 * HOUR_MS
    fill_segments(store, clock, 3)
    assert store.delete_expired() == 1
    assert store.min_offset_in_queue("Old", 1) == store.max_offset_in_queue("Old", 1) == 7
    assert store.query_by_key("Old", "o") == []
    for abrupt in (False, True):
        if abrupt:
            store.close_abruptly_for_tests()
        else:
            store.shutdown()
        store = MessageStore.open(config, clock_ms=clock)
        assert store.min_offset_in_queue("Old", 1) == store.max_offset_in_queue("Old", 1) == 7
        assert store.get_messages("Old", 1, 6, 1).status is GetStatus.OFFSET_TOO_SMALL
        assert store.get_messages("Old", 1, 7, 1).status is GetStatus.OFFSET_OVERFLOW_ONE
    appended = store.put_message(Message.build("Old", b"new", queue_id=1, keys=["o"]))
    assert appended.appended[0].queue_offset == 7
    assert [m.body for m in store.query_by_key("Old", "o")] == [b"new"]
    store.shutdown()
    store = MessageStore.open(config, clock_ms=clock)
    assert (store.min_offset_in_queue("Old", 1), store.max_offset_in_queue("Old", 1)) == (7, 8)
    assert store.get_messages("Old", 1, 7, 5).messages[0].body == b"new"
    assert_derived_files_agree(store)
    store.shutdown()
