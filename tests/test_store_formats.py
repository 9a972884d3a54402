"""On-disk formats byte for byte (DESIGN §3.1-3.3) and the invariants each file states."""

from __future__ import annotations

import os
import struct

from crc32c import crc32c

from store import commitlog_record
from store.config import StoreConfig
from store.consume_queue import ENTRY_SIZE
from store.hashing import tag_hash_code
from store.index_file import HEADER_SIZE as INDEX_HEADER_SIZE
from store.message import Message
from store.message_store import MessageStore

SMALL = dict(
    commitlog_segment_bytes=128 * 1024,
    max_message_body_bytes=8 * 1024,
    consume_queue_entries_per_file=10,
    index_slot_count=7,
    index_entry_count=20,
)


def open_store(tmp_path, **overrides) -> MessageStore:
    return MessageStore.open(StoreConfig(str(tmp_path / "store"), **{**SMALL, **overrides}))


def test_record_layout_byte_for_byte(tmp_path):
    store = open_store(tmp_path)
    message = Message.build("TopicA", b"hello body", queue_id=3, tags="TagA", keys=["k1", "k2"])
    message.flag = 7
    message.born_timestamp_ms = 1_700_000_000_123
    message.born_host = bytes([10, 0, 0, 9]) + (5555).to_bytes(4, "big")
    message.reconsume_times = 2
    first = store.put_message(Message.build("TopicA", b"x", queue_id=3)).appended[0]
    appended = store.put_message(message).appended[0]
    raw = store.commitlog.read_bytes(appended.physical_offset, appended.size)
    properties = b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02"
    body = b"hello body"
    expected_size = 88 + len(body) + 1 + 6 + 2 + len(properties)
    assert len(raw) == appended.size == expected_size
    fields = struct.unpack(">iIIiiqqiq8sq8siqi", raw[:88])
    assert fields[0] == expected_size  # TOTALSIZE
    assert fields[1] == 0xDAA320A7  # MAGICCODE
    assert fields[2] == crc32c(body)  # BODYCRC
    assert fields[3] == 3  # QUEUEID
    assert fields[4] == 7  # FLAG
    assert fields[5] == first.queue_offset + 1  # QUEUEOFFSET
    assert fields[6] == appended.physical_offset  # PHYSICALOFFSET
    assert fields[7] == 0  # SYSFLAG
    assert fields[8] == 1_700_000_000_123  # BORNTIMESTAMP
    assert fields[9] == bytes([10, 0, 0, 9, 0, 0, 0x15, 0xB3])  # BORNHOST
    assert fields[11] == bytes([127, 0, 0, 1]) + (10911).to_bytes(4, "big")  # STOREHOST
    assert fields[12] == 2  # RECONSUMETIMES
    assert fields[13] == 0  # PREPARED TRANSACTION OFFSET
    assert fields[14] == len(body)  # BODYLENGTH
    assert raw[88 : 88 + len(body)] == body
    assert raw[98] == 6 and raw[99:105] == b"TopicA"
    assert int.from_bytes(raw[105:107], "big") == len(properties)
    assert raw[107:] == properties
    decoded = store.look_message_by_id(appended.offset_message_id)
    assert decoded.keys == ["k1", "k2"] and decoded.tags == "TagA" and decoded.body == body
    assert len(appended.offset_message_id) == 32
    assert appended.offset_message_id[16:] == f"{appended.physical_offset:016X}"
    store.shutdown()


def test_a_record_that_does_not_fit_goes_to_the_next_segment_after_a_blank(tmp_path):
    store = open_store(tmp_path)
    segment = SMALL["commitlog_segment_bytes"]
    offsets = [store.put_message(Message("T", os.urandom(7000))).appended[0] for _ in range(40)]
    rolled = next(a for a in offsets if a.physical_offset >= segment)
    before = offsets[offsets.index(rolled) - 1]
    assert rolled.physical_offset == segment  # starts the next segment
    blank_at = before.physical_offset + before.size
    raw = store.commitlog.read_bytes(blank_at, 8)
    size, magic = struct.unpack(">iI", raw)
    assert magic == 0xCBD43194 and blank_at + size == segment
    names = sorted(os.listdir(os.path.join(store.config.data_dir, "commitlog")))
    assert names[:2] == [f"{0:020d}", f"{segment:020d}"]
    # Every segment file has the configured size and a 20-digit name.
    for name in names:
        assert len(name) == 20
        assert os.path.getsize(os.path.join(store.config.data_dir, "commitlog", name)) == segment
    assert [m.physical_offset for m in store.get_messages("T", 0, 0, 100).messages] == [
        a.physical_offset for a in offsets
    ]
    store.shutdown()


def test_java_string_hash_code_of_tags():
    assert tag_hash_code("TagA") == 2598919
    assert tag_hash_code("Aa") == tag_hash_code("BB") == 2112
    assert tag_hash_code("标签") == (0x6807 * 31 + 0x7B7E)  # UTF-16 units
    assert tag_hash_code("polygenelubricants") == -2147483648  # wraps to Integer.MIN_VALUE


def test_consume_queue_entries_and_files(tmp_path):
    store = open_store(tmp_path)
    appended = [
        store.put_message(Message.build("T", b"m", queue_id=1, tags="TagA")).appended[0]
        for _ in range(25)
    ]
    directory = os.path.join(store.config.data_dir, "consumequeue", "T", "1")
    file_bytes = SMALL["consume_queue_entries_per_file"] * ENTRY_SIZE
    assert sorted(os.listdir(directory)) == [f"{i * file_bytes:020d}" for i in range(3)]
    with open(os.path.join(directory, f"{file_bytes:020d}"), "rb") as f:
        data = f.read()
    for i in range(10):  # entry of queue offset 10 + i at byte i * 20 of the second file
        physical, size, tag = struct.unpack_from(">qiq", data, i * ENTRY_SIZE)
        assert (physical, size, tag) == (
            appended[10 + i].physical_offset,
            appended[10 + i].size,
            2598919,
        )
    assert store.min_offset_in_queue("T", 1) == 0
    assert store.max_offset_in_queue("T", 1) == 25
    store.shutdown()


def test_tag_filter_rechecks_the_real_tag_on_collisions(tmp_path):
    store = open_store(tmp_path)
    for i in range(12):
        assert store.put_message(Message.build("T", b"%d" % i, tags="Aa" if i % 2 else "BB")).ok
    only_aa = store.get_messages("T", 0, 0, 100, tags=["Aa"])
    assert [m.tags for m in only_aa.messages] == ["Aa"] * 6
    both = store.get_messages("T", 0, 0, 100, tags=["Aa", "BB"])
    assert len(both.messages) == 12
    store.shutdown()


def test_index_collisions_never_return_each_others_messages(tmp_path):
    # One slot: every key shares a chain. "Aa"/"BB" share Java's hash as well.
    store = open_store(tmp_path, index_slot_count=1, index_entry_count=50)
    for i in range(30):
        key = ["Aa", "BB", "other"][i % 3]
        assert store.put_message(Message.build("T", b"%d" % i, keys=[key], unique_key=f"u{i}")).ok
        assert store.put_message(Message.build("U", b"%d" % i, keys=[key])).ok
    for key in ("Aa", "BB", "other"):
        found = store.query_by_key("T", key, max_count=100)
        assert len(found) == 10 and all(m.keys == [key] and m.topic == "T" for m in found)
        assert [int(m.body) for m in found] == sorted((int(m.body) for m in found), reverse=True)
    assert store.query_by_key("T", "aA") == []
    assert store.query_by_unique_key("T", "u7").body == b"7"
    assert store.query_by_unique_key("U", "u7") is None
    # 60 records x up to 2 keys over 50-entry files: the index rolled to new files.
    assert len(store.index.files) >= 2
    store.shutdown()


def test_index_file_layout(tmp_path):
    store = open_store(tmp_path, index_slot_count=5, index_entry_count=10)
    appended = store.put_message(Message.build("T", b"x", keys=["k"])).appended[0]
    index = store.index.files[0]
    with open(index.path, "rb") as f:
        data = f.read()
    assert len(data) == INDEX_HEADER_SIZE + 5 * 4 + 11 * 20
    _begin_ts, _end_ts, begin_phys, end_phys, used_slots, count = struct.unpack_from(
        ">qqqqii", data
    )
    assert (
        begin_phys == appended.physical_offset
        and end_phys == appended.physical_offset + appended.size
    )
    assert used_slots == 1 and count == 2  # entry numbers start at 1
    _key_hash, physical, delta, previous = struct.unpack_from(">iqii", data, 40 + 5 * 4 + 20)
    assert physical == appended.physical_offset and delta == 0 and previous == 0
    slot = (crc32c(b"T#k") % 5) * 4 + 40
    assert struct.unpack_from(">i", data, slot)[0] == 1
    store.shutdown()


def test_time_range_queries(tmp_path):
    now = [1_700_000_000_000]
    store = MessageStore.open(
        StoreConfig(str(tmp_path / "store"), **SMALL), clock_ms=lambda: now[0]
    )
    for i in range(6):
        assert store.put_message(Message.build("T", b"%d" % i, keys=["k"])).ok
        now[0] += 60_000
    start = 1_700_000_000_000
    hits = store.query_by_key("T", "k", begin_ms=start + 120_000, end_ms=start + 240_000)
    assert sorted(int(m.body) for m in hits) == [2, 3, 4]
    assert store.offset_by_time("T", 0, start + 150_000) == 3
    assert store.offset_by_time("T", 0, 0) == 0
    assert store.offset_by_time("T", 0, start + 10**9) == 6
    store.shutdown()


def test_segment_preallocation(tmp_path):
    store = open_store(tmp_path)
    directory = os.path.join(store.config.data_dir, "commitlog")
    # The active segment exists from open; the next one is prepared once it is half full.
    assert os.listdir(directory) == [f"{0:020d}"]
    while store.commitlog.write_offset < SMALL["commitlog_segment_bytes"] // 2:
        assert store.put_message(Message("T", bytes(4000))).ok
    assert store.put_message(Message("T", b"x")).ok
    next_segment = os.path.join(directory, f"{SMALL['commitlog_segment_bytes']:020d}")

    def preallocated() -> bool:
        return os.path.exists(next_segment)

    import time

    deadline = time.monotonic() + 10
    while not preallocated():
        assert time.monotonic() < deadline, "next segment never preallocated"
        time.sleep(0.01)
    store.shutdown()
    # A clean shutdown drops the unused preallocated segment.
    assert not preallocated()


def test_record_check_detects_each_kind_of_damage():
    body = b"payload"
    raw = bytearray(
        commitlog_record.encode(
            size=commitlog_record.record_size(len(body), 1, 0),
            body=body,
            topic=b"T",
            properties=b"",
            queue_id=0,
            flag=0,
            queue_offset=0,
            physical_offset=0,
            sys_flag=0,
            born_timestamp_ms=0,
            born_host=bytes(8),
            store_timestamp_ms=0,
            store_host=bytes(8),
            reconsume_times=0,
            prepared_transaction_offset=0,
        )
    )
    buffer = raw + bytes(64)
    assert commitlog_record.check_at(buffer, 0, len(buffer)).size == len(raw)
    for position, reason in ((4, "magic"), (90, "CRC"), (0, "size")):
        damaged = bytearray(buffer)
        damaged[position] ^= 0x7F
        check = commitlog_record.check_at(damaged, 0, len(damaged))
        assert check.size == 0 and reason in check.reason
    assert commitlog_record.check_at(bytes(64), 0, 64).reason is None  # zeros: clean end


def test_index_chain_survives_a_crash_between_entries_and_header(tmp_path):
    """A batch wrote entries and slots, then the process died before the header said so:
    the next put into that slot must keep the older, counted entries reachable."""
    from store.index_file import IndexFile

    path = str(tmp_path / "index")
    index = IndexFile.create(path, slot_count=1, entry_count=10)
    assert index.put(11, 100, 1_000)
    index.write_header(200)  # the first batch completed
    assert index.put(22, 200, 1_000)
    assert index.put(33, 300, 1_000)  # no header: the process dies here
    index.map.flush()
    del index

    reopened = IndexFile.open(path, slot_count=1, entry_count=10)
    assert reopened.index_count == 2  # the header still counts only the first entry
    assert reopened.put(22, 200, 1_000)  # the replay writes the lost batch again
    assert reopened.put(33, 300, 1_000)
    reopened.write_header(400)
    assert reopened.lookup(11, 0, 10_000, 10) == [100]
    assert reopened.lookup(22, 0, 10_000, 10) == [200]
    assert reopened.lookup(33, 0, 10_000, 10) == [300]
