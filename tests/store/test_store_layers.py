"""The storage engine layer by layer (docs/architecture.md, "Storage engine"). Each test
names the invariant it checks and drives the layer it is about directly where it can:
mapped files, the CommitLog, consume queues, index files, the flush services, the
checkpoint and recovery (the record codec under them: tests/codec/test_commitlog_record.py).
Deterministic: clocks are injected and threads are ordered with events, never with sleeps."""

from __future__ import annotations

import collections
import contextlib
import os
import struct
import sys
import threading

import pytest

from bench.peers.pagecache import resident_fraction
from ferrymq.codec import commitlog_record as record
from ferrymq.codec.commitlog_record import encode_host
from ferrymq.codec.message_id import offset_message_id
from ferrymq.codec.properties import encode_properties
from ferrymq.launcher.polling import until
from store import checkpoint as checkpoint_format
from store import dispatcher, index_service, mapped_file_queue, sync_ledger
from store.checkpoint import Checkpoint
from store.commitlog import CommitLog, prepare, topic_prefix_of
from store.config import FlushMode, StoreConfig
from store.consume_queue import ENTRY_SIZE, ConsumeQueue
from store.errors import ReplicaMismatch
from store.flush_service import GroupCommitService
from store.hashing import index_key_hash, tag_hash_code
from store.index_file import HEADER_SIZE as INDEX_HEADER_SIZE
from store.index_file import INDEX_KEY, IndexFile
from store.index_service import IndexService
from store.mapped_file import MappedFile, file_name_of
from store.mapped_file_queue import MappedFileQueue
from store.message import Message
from store.message_store import CHECKPOINT_FILE, MessageStore
from store.results import GetStatus, PutStatus
from tests.support.stores import QUIET, SEGMENT, SMALL, assert_derived_files_agree

T0 = 1_700_000_000_000
STORE_HOST = encode_host("127.0.0.1", 10911)


class Clock:
    def __init__(self, now_ms: int = T0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def open_store(tmp_path, clock=None, **overrides) -> MessageStore:
    config = StoreConfig(str(tmp_path / "store"), **{**SMALL, **overrides})
    return MessageStore.open(config, clock_ms=clock)


# ---- mapped files ------------------------------------------------------------------

FILE = 4096


def fill_file(queue: MappedFileQueue, offset: int, byte: int) -> None:
    target = queue.file_for_write(offset)
    target.write_at(0, bytes([byte]) * target.size)
    target.wrote_position = target.size
    queue.write_offset = target.end_offset


def test_mapped_files_are_named_by_base_offset_in_20_digits(tmp_path):
    """Invariant: a file is named by its base offset, zero-padded to 20 digits."""
    assert file_name_of(0) == "00000000000000000000"
    assert file_name_of(1 << 30) == "00000000001073741824"
    queue = MappedFileQueue(str(tmp_path / "q"), FILE)
    for i in range(3):
        fill_file(queue, i * FILE, i + 1)
    names = sorted(os.listdir(tmp_path / "q"))
    assert names == [f"{i * FILE:020d}" for i in range(3)]
    assert all(len(name) == 20 for name in names)
    assert all(os.path.getsize(tmp_path / "q" / name) == FILE for name in names)
    queue.close()


def test_file_for_write_rolls_to_the_adjacent_file(tmp_path):
    """Invariant: files are adjacent — the file after the last starts at its end offset;
    rolling marks the previous file fully written."""
    queue = MappedFileQueue(str(tmp_path / "q"), FILE)
    first = queue.file_for_write(0)
    assert queue.file_for_write(FILE - 1) is first  # still inside the first file
    second = queue.file_for_write(FILE)
    assert second.base_offset == first.end_offset == FILE
    assert first.wrote_position == FILE
    assert [f.base_offset for f in queue.files] == [0, FILE]
    with pytest.raises(AssertionError):
        queue.file_for_write(3 * FILE)  # never a gap
    queue.close()


class _NoIteration(tuple):
    """A file tuple that counts item accesses and refuses to be scanned."""

    reads = 0

    def __getitem__(self, index):
        type(self).reads += 1
        return super().__getitem__(index)

    def __iter__(self):
        raise AssertionError("find() scanned the file list")


def test_find_is_arithmetic_and_none_outside_the_files(tmp_path):
    """Invariant: find(offset) is O(1) — at most two item reads, no scan — and returns
    None for offsets outside every file (below the first after retention, past the last)."""
    queue = MappedFileQueue(str(tmp_path / "q"), FILE)
    for i in range(50):
        fill_file(queue, i * FILE, i % 251)
    queue.delete_first(2)  # retention: the queue now starts at 2 * FILE
    files = queue.files
    queue.files = _NoIteration(files)
    for offset in (2 * FILE, 2 * FILE + 1, 17 * FILE + 4095, 49 * FILE, 50 * FILE - 1):
        _NoIteration.reads = 0
        found = queue.find(offset)
        assert _NoIteration.reads <= 2
        assert found is not None and found.base_offset <= offset < found.end_offset
        assert found.base_offset == offset - offset % FILE
    for outside in (-1, 0, 2 * FILE - 1, 50 * FILE, 10**12):
        assert queue.find(outside) is None
    queue.files = files
    queue.close()


def test_preallocation_creates_the_next_file_ahead_of_the_roll(tmp_path):
    """Invariant: with preallocate=True, writing past half of the last file creates the
    next one in the background, and the roll then uses that very file."""
    directory = tmp_path / "q"
    queue = MappedFileQueue(str(directory), FILE, preallocate=True)
    queue.file_for_write(0)
    queue.file_for_write(FILE // 2 - 1)
    assert queue._preallocated is None and sorted(os.listdir(directory)) == [f"{0:020d}"]
    queue.file_for_write(FILE // 2)  # half written: prepare the next file
    assert queue._preallocated is not None
    ahead = queue._preallocated[1].result(timeout=30)
    assert ahead.base_offset == FILE
    assert sorted(os.listdir(directory)) == [f"{0:020d}", f"{FILE:020d}"]
    assert queue.file_for_write(FILE) is ahead  # the roll takes the preallocated file
    # After the roll the one after is prepared again once this file is half written.
    queue.file_for_write(FILE + FILE // 2)
    assert queue._preallocated[1].result(timeout=30).base_offset == 2 * FILE
    assert len(os.listdir(directory)) == 3
    queue.close()  # an unused preallocated file is discarded
    assert sorted(os.listdir(directory)) == [f"{0:020d}", f"{FILE:020d}"]

    plain = MappedFileQueue(str(tmp_path / "plain"), FILE)
    plain.file_for_write(0)
    plain.file_for_write(FILE - 1)
    assert os.listdir(tmp_path / "plain") == [f"{0:020d}"]  # nothing ahead without it
    plain.close()


STEP = 8 << 20  # mapped_file_queue.DROP_STEP_BYTES: a file is one step of the drop


def test_a_log_keeps_only_its_cache_window_of_flushed_bytes_in_the_page_cache(tmp_path):
    """Invariant: after a flush, flushed bytes more than ``cache_bytes`` behind the flushed
    offset (rounded down to whole steps) are out of the page cache, the rest still in it,
    and every byte reads back unchanged (from disk). A cut below what was dropped re-arms
    the drop for what is written again."""
    assert mapped_file_queue.DROP_STEP_BYTES == STEP
    queue = MappedFileQueue(str(tmp_path / "q"), STEP, cache_bytes=STEP)
    for i in range(4):
        fill_file(queue, i * STEP, 0xA0 + i)
    paths = [f.path for f in queue.files]
    assert [resident_fraction([p]) for p in paths] == [1.0] * 4  # written, not yet flushed
    assert queue.flush() == 4 * STEP
    assert [resident_fraction([p]) for p in paths] == [0.0, 0.0, 0.0, 1.0]
    for i, f in enumerate(queue.files):
        assert f.read(0, STEP) == bytes([0xA0 + i]) * STEP  # read back from disk
    queue.flush()

    queue.truncate_to(STEP)  # files 1..3 go; file 1 comes back empty below
    for i in range(1, 4):
        fill_file(queue, i * STEP, 0xB0 + i)
    assert queue.flush() == 4 * STEP
    assert [resident_fraction([f.path]) for f in queue.files[1:]] == [0.0, 0.0, 1.0]
    queue.close()


def test_a_log_without_a_cache_window_leaves_its_pages_to_the_kernel(tmp_path):
    queue = MappedFileQueue(str(tmp_path / "q"), STEP)
    for i in range(3):
        fill_file(queue, i * STEP, 0xA0 + i)
    queue.flush()
    assert [resident_fraction([f.path]) for f in queue.files] == [1.0] * 3
    queue.close()


def test_a_store_drops_old_commitlog_pages_and_still_serves_their_messages(tmp_path, monkeypatch):
    """Through the store's configuration: ``commitlog_cache_bytes`` reaches the CommitLog,
    segments far behind the flush leave the page cache, their messages still read."""
    monkeypatch.setattr(mapped_file_queue, "DROP_STEP_BYTES", SEGMENT, raising=False)
    store = open_store(tmp_path, **QUIET, commitlog_cache_bytes=SEGMENT)
    offsets = []
    for i in range(200):
        result = store.put_message(Message.build("T", bytes([i]) * 1000))
        assert result.ok
        offsets.append(result.appended[0].physical_offset)
    store.flush_log()
    segments = store.commitlog.segments.files
    assert len(segments) >= 4
    assert [resident_fraction([f.path]) for f in segments[:-2]] == [0.0] * (len(segments) - 2)
    assert resident_fraction([segments[-1].path]) > 0
    for i, offset in enumerate(offsets):
        assert store.read_message(offset).body == bytes([i]) * 1000
    store.shutdown()


def test_a_negative_commitlog_cache_is_refused(tmp_path):
    with pytest.raises(ValueError, match="commitlog_cache_bytes"):
        StoreConfig(str(tmp_path), commitlog_cache_bytes=-1)


@pytest.mark.parametrize(
    ("flush_mode", "warmed"), [(FlushMode.SYNC_FLUSH, True), (FlushMode.ASYNC_FLUSH, False)]
)
def test_commitlog_segments_are_warmed_only_where_sends_wait_for_fdatasync(
    tmp_path, monkeypatch, flush_mode, warmed
):
    """Warming writes a segment's zeros to the disk before its records: a cost every
    message pays in writeback, which only buys a faster fdatasync. Under ASYNC_FLUSH no
    send waits for one, so neither the active segment nor the preallocated next is warmed."""
    commitlog_warm: list[bool] = []  # one per CommitLog segment created
    create = MappedFile.create.__func__

    def recording(cls, directory, base_offset, size, *, warm=False):
        if os.path.basename(directory) == "commitlog":
            commitlog_warm.append(warm)
        return create(cls, directory, base_offset, size, warm=warm)

    monkeypatch.setattr(MappedFile, "create", classmethod(recording))
    store = open_store(tmp_path, flush_mode=flush_mode)
    try:
        segments = store.commitlog.segments
        while segments._preallocated is None:  # past half of the active segment
            assert store.put_message(Message.build("T", b"x" * 1000)).ok
        segments._preallocated[1].result(timeout=30)
    finally:
        store.shutdown()
    assert commitlog_warm == [warmed, warmed]  # the active segment and the next


def writer_descriptors(log: CommitLog) -> list[str]:
    """The segments the process holds a descriptor of beyond the one each map keeps."""
    held = collections.Counter()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):
            held[os.readlink(f"/proc/self/fd/{fd}")] += 1
    held.subtract(f.path for f in log.segments.files)  # a map holds a copy of its file's
    return sorted(
        os.path.basename(path)
        for path, count in held.items()
        if count > 0 and path.startswith(log.segments.directory)
    )


def test_appends_hold_one_descriptor_the_active_segments_and_close_it(tmp_path):
    """Appends go through ``pwrite`` on a descriptor of the segment being written: it is
    closed when the segment is full, so a node that rolls thousands of segments holds one,
    and none once the log is closed."""
    log = new_commitlog(tmp_path)
    log.append([prepared(100)], T0)
    assert writer_descriptors(log) == [file_name_of(0)]
    while log.write_offset < 3 * LOG_SEGMENT + 100:
        log.append([prepared(1000)], T0)
    assert len(log.segments.files) == 4
    assert writer_descriptors(log) == [file_name_of(3 * LOG_SEGMENT)]
    log.close()
    assert writer_descriptors(log) == []


def test_truncate_to_deletes_later_files_and_zeroes_the_tail(tmp_path):
    """Invariant: after truncate_to(x) no byte at or past x survives — later files are
    deleted, the file holding x is zeroed from x on disk — and bytes below x are kept."""
    directory = tmp_path / "q"
    queue = MappedFileQueue(str(directory), FILE)
    for i in range(3):
        fill_file(queue, i * FILE, 0xA0 + i)
    queue.truncate_to(FILE + 100)
    assert [f.base_offset for f in queue.files] == [0, FILE]
    assert sorted(os.listdir(directory)) == [f"{0:020d}", f"{FILE:020d}"]
    assert queue.write_offset == FILE + 100 and queue.flushed_offset <= FILE + 100
    with open(directory / f"{FILE:020d}", "rb") as f:
        data = f.read()
    assert data[:100] == bytes([0xA1]) * 100 and data[100:] == bytes(FILE - 100)
    with open(directory / f"{0:020d}", "rb") as f:
        assert f.read() == bytes([0xA0]) * FILE
    # At a file boundary the file below stays whole, and the file starting there stays,
    # empty: it alone says where the data ends when every earlier file is gone.
    queue.truncate_to(FILE)
    assert [f.base_offset for f in queue.files] == [0, FILE]
    assert queue.files[0].read(FILE - 1, 1) == bytes([0xA0])
    assert queue.files[1].is_zero_at(0, FILE) and queue.write_offset == FILE
    queue.delete_first(1)
    queue.truncate_to(FILE)
    assert [f.base_offset for f in queue.files] == [FILE]
    queue.close()


class WaiterReportingLock:
    """A lock that says when a thread has started waiting for it, so a test can order
    two threads without sleeping."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.waiting = threading.Event()

    def __enter__(self):
        if not self._lock.acquire(blocking=False):
            self.waiting.set()
            self._lock.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self._lock.release()


def test_a_flush_under_way_never_marks_bytes_past_a_cut_flushed(tmp_path, monkeypatch):
    """Invariant: flushed_offset <= write_offset. A flush reads its target, then syncs;
    a cut (a slave truncating a diverged tail) that ran during the sync was undone by the
    flush setting flushed_offset back to its old target: bytes written there later
    counted as flushed before any sync (found by chaos: a checkpoint named an offset
    inside a record, and recovery stopped on it)."""
    queue = MappedFileQueue(str(tmp_path / "q"), FILE)
    fill_file(queue, 0, 0xA0)
    queue.write_offset = FILE // 2
    queue.files[0].wrote_position = FILE // 2
    lock = WaiterReportingLock()
    queue._flush_lock = lock
    in_sync, release_sync = threading.Event(), threading.Event()
    real_fdatasync = os.fdatasync

    def gated_fdatasync(fd: int) -> None:
        if threading.current_thread().name == "flusher":
            in_sync.set()
            assert release_sync.wait(10)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", gated_fdatasync)
    flusher = threading.Thread(target=queue.flush, name="flusher")
    flusher.start()
    assert in_sync.wait(10)
    cutter = threading.Thread(target=queue.truncate_to, args=(100,), name="cutter")
    cutter.start()
    until(lambda: lock.waiting.is_set() or not cutter.is_alive(), what="the cut to run or wait")
    release_sync.set()
    flusher.join()
    cutter.join()
    assert queue.write_offset == 100
    assert queue.flushed_offset <= queue.write_offset
    assert queue.files[0].flushed_position <= 100
    queue.close()


def test_concurrent_syncs_of_one_index_file_keep_the_chaos_copy(tmp_path):
    """The flusher and a truncation may sync the same index file at once; each sync
    copies the file for the chaos suite's power loss first, and two at once renamed one
    copy twice (FileNotFoundError in a node's flusher, found by a long chaos run)."""
    data = tmp_path / "data"
    sync_ledger.enable(str(data))
    try:
        index = IndexService(str(data / "index"), slot_count=64, entry_count=256)
        index.put_records(INDEX_KEY.pack(0, 100, T0, index_key_hash(b"T#k")))
        index_file = index.files[-1]
        errors: list[BaseException] = []

        def sync_many() -> None:
            try:
                for _ in range(200):
                    index_file.changes += 1
                    index_file.flush()
            except BaseException as error:  # reported below, not lost in the thread
                errors.append(error)

        threads = [threading.Thread(target=sync_many) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        copy = sync_ledger.synced_copy(str(data), os.path.relpath(index_file.path, data))
        with open(copy, "rb") as synced, open(index_file.path, "rb") as current:
            assert synced.read() == current.read()
    finally:
        sync_ledger.disable()


def test_load_refuses_gaps_and_misaligned_files(tmp_path):
    """Invariant: a loaded queue is adjacent and aligned, or loading fails loudly."""
    gap = tmp_path / "gap"
    queue = MappedFileQueue(str(gap), FILE)
    for i in range(3):
        fill_file(queue, i * FILE, 1)
    queue.close()
    os.unlink(gap / f"{FILE:020d}")
    with pytest.raises(ValueError, match="gap"):
        MappedFileQueue(str(gap), FILE).load()
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / f"{100:020d}").write_bytes(bytes(FILE))
    with pytest.raises(ValueError, match="aligned"):
        MappedFileQueue(str(odd), FILE).load()


# ---- CommitLog ---------------------------------------------------------------------

LOG_SEGMENT = 8192


def new_commitlog(tmp_path) -> CommitLog:
    return CommitLog(str(tmp_path / "commitlog"), LOG_SEGMENT, STORE_HOST, preallocate=False)


def prepared(body_length: int, queue_id: int = 0, topic: str = "T"):
    message = Message(topic, bytes([body_length % 251]) * body_length, queue_id)
    return prepare(message, topic_prefix_of(topic.encode()), encode_properties({}))


def record_of(body_length: int) -> int:
    return body_length + 88 + 1 + 1 + 2  # topic "T", no properties


def test_a_record_that_does_not_fit_is_preceded_by_a_blank_filling_the_segment(tmp_path):
    """Invariant: a record never spans two segments; when it does not fit the rest of a
    segment (with room left for a blank), a blank record fills the segment and the record
    starts the next one. A record that leaves exactly the blank's 8 bytes still fits."""
    log = new_commitlog(tmp_path)
    first_body = LOG_SEGMENT - 200 - record_of(0)
    [a] = log.append([prepared(first_body)], T0)
    assert a.physical_offset == 0 and log.write_offset == LOG_SEGMENT - 200
    [b] = log.append([prepared(200 - 8 - record_of(0))], T0)  # leaves exactly 8 bytes
    assert b.physical_offset == LOG_SEGMENT - 200 and b.size == 192
    assert log.write_offset == LOG_SEGMENT - 8
    [c] = log.append([prepared(10)], T0 + 1)
    assert c.physical_offset == LOG_SEGMENT  # the next segment
    blank = log.segments.files[0].read(LOG_SEGMENT - 8, 8)
    assert blank == (8).to_bytes(4, "big") + bytes.fromhex("CBD43194")
    # A record one byte too large for what is left rolls too, after a 200-byte blank.
    log2 = CommitLog(str(tmp_path / "log2"), LOG_SEGMENT, STORE_HOST, preallocate=False)
    log2.append([prepared(first_body)], T0)
    [d] = log2.append([prepared(200 - 7 - record_of(0))], T0)
    assert d.physical_offset == LOG_SEGMENT
    head = log2.segments.files[0].read(LOG_SEGMENT - 200, 200)
    assert head == (200).to_bytes(4, "big") + bytes.fromhex("CBD43194") + bytes(192)
    assert log2.read(LOG_SEGMENT - 200) is None  # a blank is not a message

    stored = log.read(c.physical_offset)
    assert stored.physical_offset == LOG_SEGMENT and stored.store_timestamp_ms == T0 + 1
    assert [m.physical_offset for m in log.iterate(0, log.write_offset)] == [
        0,
        LOG_SEGMENT - 200,
        LOG_SEGMENT,
    ]
    scan = log.scan(0)
    assert (scan.end_offset, scan.records, scan.corruption) == (log.write_offset, 3, None)
    assert sorted(os.listdir(tmp_path / "commitlog")) == [
        f"{0:020d}",
        f"{LOG_SEGMENT:020d}",
    ]
    log.close()
    log2.close()


def test_a_batch_is_written_whole_in_one_segment(tmp_path):
    """Invariant: a batch is one unit — when it does not fit the rest of the segment it
    rolls whole, even though its first records would have fitted, and its records are
    contiguous with consecutive queue offsets."""
    log = new_commitlog(tmp_path)
    log.append([prepared(LOG_SEGMENT - 2500 - record_of(0))], T0)
    room = LOG_SEGMENT - log.write_offset
    assert room == 2500
    batch = [prepared(1000 - record_of(0), queue_id=1) for _ in range(3)]  # 3 x 1000 bytes
    requests = log.append(batch, T0)
    assert [r.physical_offset for r in requests] == [LOG_SEGMENT + 1000 * i for i in range(3)]
    assert [r.queue_offset for r in requests] == [0, 1, 2]
    assert log.write_offset == LOG_SEGMENT + 3000
    size, magic = struct.unpack(">iI", log.segments.files[0].read(LOG_SEGMENT - 2500, 8))
    assert (size, magic) == (2500, record.BLANK_MAGIC)
    # A batch that fits stays where it is, right after the previous record.
    more = log.append([prepared(10, queue_id=1), prepared(20, queue_id=1)], T0)
    assert [r.physical_offset for r in more] == [LOG_SEGMENT + 3000, LOG_SEGMENT + 3000 + 102]
    assert [r.queue_offset for r in more] == [3, 4]
    log.close()


def test_offset_message_id_is_store_host_and_physical_offset(tmp_path):
    """Invariant: the offset id is STOREHOST(8) + PHYSICALOFFSET(8) as 32 hex characters,
    and look_message_by_id finds exactly that record with one read, or nothing."""
    store = open_store(tmp_path)
    appended = []
    for i in range(50):  # several segments, so ids carry offsets past the first one
        result = store.put_message(Message.build("T", bytes([i]) * 3000, unique_key=f"U{i}"))
        appended.append(result.appended[0])
    assert appended[-1].physical_offset > 2 * SEGMENT
    for i, a in enumerate(appended):
        message_id = a.offset_message_id
        assert len(message_id) == 32 and int(message_id, 16) >= 0
        assert message_id[:16] == "7F00000100002A9F"  # 127.0.0.1:10911
        assert int(message_id[16:], 16) == a.physical_offset
        assert message_id == offset_message_id(STORE_HOST, a.physical_offset)
        found = store.look_message_by_id(message_id)
        assert found.unique_key == f"U{i}" and found.offset_message_id == message_id
        assert store.look_message_by_id(message_id.lower()).unique_key == f"U{i}"
    last = appended[-1]
    foreign = offset_message_id(encode_host("10.0.0.1", 10911), last.physical_offset)
    middle = offset_message_id(STORE_HOST, last.physical_offset + 10)
    past = offset_message_id(STORE_HOST, store.commitlog.write_offset)
    for bad in (foreign, middle, past, "XYZ", "0" * 31, "G" * 32):
        assert store.look_message_by_id(bad) is None
    store.shutdown()


def test_a_replica_finds_its_masters_records_by_their_offset_ids(tmp_path):
    """A replica holds its master's records at the same offsets, with the master's store
    host in each: reopened as another host (a slave, or the slave promoted after a
    failover), the store finds them by the ids the clients were given, and not by an id
    that names itself or any other host at those offsets."""
    store = open_store(tmp_path)
    written = [store.put_message(Message.build("T", b"m%d" % i)).appended[0] for i in range(3)]
    store.shutdown()
    replica = open_store(tmp_path, store_host="127.0.0.2", store_port=10912)
    try:
        for i, appended in enumerate(written):
            found = replica.look_message_by_id(appended.offset_message_id)
            assert found is not None and found.body == b"m%d" % i
            assert replica.look_message_by_id(appended.offset_message_id.lower()).body == found.body
            its_own = offset_message_id(encode_host("127.0.0.2", 10912), appended.physical_offset)
            assert replica.look_message_by_id(its_own) is None
        own = replica.put_message(Message.build("T", b"own")).appended[0]
        assert own.offset_message_id[:16] == "7F00000200002AA0"  # 127.0.0.2:10912
        assert replica.look_message_by_id(own.offset_message_id).body == b"own"
    finally:
        replica.shutdown()


# ---- ConsumeQueue (docs/architecture.md, "Files on disk") ---------------------------


def test_consume_queue_entry_i_is_at_byte_i_times_20(tmp_path):
    """Invariant: entries are 20 bytes (physical 8 | size 4 | tag hash 8); entry i is at
    logical byte i * 20; files hold entries_per_file entries and are named by their first
    byte offset in 20 digits; the queue reloads to the same entries."""
    root = str(tmp_path / "consumequeue")
    queue = ConsumeQueue(root, "T", 3, entries_per_file=4)
    entries = [(1000 + 100 * i, 50 + i, tag_hash_code(f"tag{i}")) for i in range(10)]
    for i, entry in enumerate(entries):
        queue.put(i, *entry)
    directory = os.path.join(root, "T", "3")
    assert sorted(os.listdir(directory)) == [f"{0:020d}", f"{80:020d}", f"{160:020d}"]
    for i, entry in enumerate(entries):
        base = i * ENTRY_SIZE - i * ENTRY_SIZE % 80
        with open(os.path.join(directory, f"{base:020d}"), "rb") as f:
            f.seek(i * ENTRY_SIZE - base)
            assert struct.unpack(">qiq", f.read(ENTRY_SIZE)) == entry
        assert queue.entry_at(i) == entry
    assert (queue.min_offset, queue.max_offset) == (0, 10)
    assert queue.entry_at(10) is None and queue.entry_at(-1) is None
    assert [o for o, _ in queue.entries(3, 5)] == [3, 4, 5, 6, 7]
    queue.put(4, *entries[4])  # idempotent replay of an existing entry
    assert queue.max_offset == 10
    queue.flush()
    queue.close()
    reloaded = ConsumeQueue(root, "T", 3, entries_per_file=4)
    reloaded.load()
    assert (reloaded.min_offset, reloaded.max_offset) == (0, 10)
    assert [e for _, e in reloaded.entries(0, 100)] == entries
    assert reloaded.max_physical_end == entries[-1][0] + entries[-1][1]


def _zero_entries(directory: str, file_base: int, first: int, count: int) -> None:
    """Zero ``count`` entries of one file from its entry ``first``: what a power loss
    leaves of entries that were never synced."""
    with open(os.path.join(directory, f"{file_base:020d}"), "r+b") as f:
        f.seek(first * ENTRY_SIZE)
        f.write(bytes(count * ENTRY_SIZE))


@pytest.mark.parametrize(
    ("lost", "kept"),
    [
        # the tail of a full file and the whole next file (rolled after the last flush)
        ([(0, 2, 2), (80, 0, 4)], 2),
        # a hole: a middle page lost, later entries written back
        ([(80, 1, 1)], 5),
        # the next file lost whole, the earlier file complete
        ([(80, 0, 4)], 4),
    ],
)
def test_a_consume_queue_ends_at_its_first_unwritten_entry(tmp_path, lost, kept):
    """Invariant: every entry below ``max_offset`` is written. Entries past the first
    unwritten one are discarded at load (recovery re-dispatches them from the CommitLog):
    counting a lost tail as written made it read as pointers to physical offset 0."""
    root = str(tmp_path / "consumequeue")
    queue = ConsumeQueue(root, "T", 0, entries_per_file=4)
    entries = [(1000 + 100 * i, 50, 7) for i in range(8)]
    for i, entry in enumerate(entries):
        queue.put(i, *entry)
    queue.close()
    directory = os.path.join(root, "T", "0")
    for file_base, first, count in lost:
        _zero_entries(directory, file_base, first, count)
    reloaded = ConsumeQueue(root, "T", 0, entries_per_file=4)
    reloaded.load()
    assert reloaded.max_offset == kept
    assert [e for _, e in reloaded.entries(0, 100)] == entries[:kept]
    reloaded.put(kept, 9999, 1, 7)  # appends go on right after the last written entry
    assert reloaded.entry_at(kept) == (9999, 1, 7) and reloaded.max_offset == kept + 1
    reloaded.close()
    again = ConsumeQueue(root, "T", 0, entries_per_file=4)
    again.load()
    assert [e for _, e in again.entries(0, 100)] == [*entries[:kept], (9999, 1, 7)]


def test_tag_hash_code_is_java_string_hash_code():
    """Invariant: the tag hash is Java's String.hashCode over UTF-16 code units."""
    assert tag_hash_code("TagA") == 2598919
    assert tag_hash_code("hello") == 99162322
    assert tag_hash_code("") == 0
    assert tag_hash_code("Aa") == tag_hash_code("BB") == 2112
    # "标签" is U+6807 U+7B7E: 0x6807 * 31 + 0x7B7E = 26631 * 31 + 31614.
    assert tag_hash_code("标签") == 857175
    # Outside the BMP a character is two UTF-16 units: U+1F600 = D83D DE00.
    assert tag_hash_code("\U0001f600") == 0xD83D * 31 + 0xDE00 == 1772899
    assert tag_hash_code("polygenelubricants") == -(2**31)  # wraps like a Java int


def test_a_walk_of_a_queue_reads_every_message_from_where_it_starts_page_by_page(tmp_path):
    """``walk_queue``, how replays and rebuilds read a queue: every message from the start
    (the queue's first by default) to the end the queue had when the walk began."""
    store = open_store(tmp_path)
    try:
        for i in range(10):
            assert store.put_message(Message.build("W", b"%d" % i)).ok
        assert [int(m.body) for m in store.walk_queue("W", 0, page=3)] == list(range(10))
        assert [m.queue_offset for m in store.walk_queue("W", 0, start=7, page=3)] == [7, 8, 9]
        walk = store.walk_queue("W", 0, page=4)
        assert int(next(walk).body) == 0
        assert store.put_message(Message.build("W", b"10")).ok  # after the walk began
        assert [int(m.body) for m in walk] == list(range(1, 10))
        assert list(store.walk_queue("absent", 0)) == []
    finally:
        store.shutdown()


def test_tag_filter_on_colliding_tags_returns_only_the_real_tag(tmp_path):
    """Invariant: the consume queue filters by tag hash, then the real tag decides, so
    "Aa" (hash 2112) never returns "BB" (hash 2112) messages."""
    store = open_store(tmp_path)
    tags = ["Aa", "BB", None, "TagA"] * 6
    for i, tag in enumerate(tags):
        assert store.put_message(Message.build("T", b"%d" % i, tags=tag)).ok
    queue = store.consume_queues.get("T", 0)
    codes = [entry[2] for _, entry in queue.entries(0, 100)]
    assert codes[:4] == [2112, 2112, 0, 2598919]

    def bodies(filter_tags, count=100):
        result = store.get_messages("T", 0, 0, count, filter_tags)
        return [int(m.body) for m in result.messages], result

    for wanted in (["Aa"], ["BB"], ["TagA"], ["Aa", "TagA"]):
        got, _ = bodies(wanted)
        assert got == [i for i, t in enumerate(tags) if t in wanted]
    everything, _ = bodies(None)
    assert everything == list(range(len(tags)))
    got, result = bodies(["BB"], count=2)
    assert got == [1, 5] and result.next_begin_offset == 6
    nothing, result = bodies(["Zz"])
    assert nothing == [] and result.status is GetStatus.NO_MATCHED_MESSAGE
    store.shutdown()


def test_min_and_max_offsets_are_per_queue(tmp_path):
    """Invariant: every (topic, queue id) has its own offsets from 0, with no gaps."""
    store = open_store(tmp_path)
    counts = {("T", 0): 5, ("T", 2): 3, ("U", 0): 7}
    for (topic, queue_id), count in counts.items():
        for i in range(count):
            result = store.put_message(Message.build(topic, b"x", queue_id=queue_id))
            assert result.appended[0].queue_offset == i
    for (topic, queue_id), count in counts.items():
        assert store.min_offset_in_queue(topic, queue_id) == 0
        assert store.max_offset_in_queue(topic, queue_id) == count
        result = store.get_messages(topic, queue_id, 0, 100)
        assert [m.queue_offset for m in result.messages] == list(range(count))
        assert (result.min_offset, result.max_offset) == (0, count)
    assert store.queue_ids("T") == [0, 2] and store.queue_ids("U") == [0]
    assert store.max_offset_in_queue("T", 1) == 0
    assert store.get_messages("T", 1, 0, 1).status is GetStatus.NO_MESSAGE_IN_QUEUE
    assert store.get_messages("T", 0, 5, 1).status is GetStatus.OFFSET_OVERFLOW_ONE
    assert store.get_messages("T", 0, 6, 1).status is GetStatus.OFFSET_OVERFLOW_BADLY
    store.shutdown()


def test_offset_by_time_is_the_first_offset_stored_at_or_after(tmp_path):
    """Invariant: offset_by_time(t) is the first queue offset whose store time is >= t,
    and max_offset when none is."""
    clock = Clock()
    store = open_store(tmp_path, clock)
    deltas = [0, 0, 1000, 1000, 1000, 5000, 5001, 60_000]
    for delta in deltas:
        clock.now_ms = T0 + delta
        assert store.put_message(Message.build("T", b"x")).ok
    stored = [m.store_timestamp_ms for m in store.get_messages("T", 0, 0, 100).messages]
    assert stored == [T0 + d for d in deltas]
    for probe in sorted({T0 - 1, *(T0 + d for d in deltas), T0 + 999, T0 + 5002, T0 + 10**9}):
        expected = next((i for i, d in enumerate(deltas) if T0 + d >= probe), len(deltas))
        assert store.offset_by_time("T", 0, probe) == expected, probe
    assert store.offset_by_time("T", 9, T0) == 0  # unknown queue
    store.shutdown()


# ---- IndexFile (docs/architecture.md, "Files on disk") ------------------------------


def test_index_file_layout_header_slots_and_chained_entries(tmp_path):
    """Invariant: 40-byte header, slot_count slots of 4 bytes, then 20-byte entries
    (hash 4 | physical 8 | seconds since begin 4 | previous 4) numbered from 1; a slot holds
    the newest entry of its chain and each entry links to the previous one."""
    path = str(tmp_path / "index")
    index = IndexFile.create(path, slot_count=4, entry_count=6)
    assert index.put(9, 1000, T0)  # slot 1
    assert index.put(13, 2000, T0 + 2500)  # slot 1 again: chained after entry 1
    assert index.put(0xFFFFFFF2, 3000, T0 + 3000)  # slot 2; a hash above 2**31
    index.write_header(3100)
    index.map.flush()
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) == INDEX_HEADER_SIZE + 4 * 4 + 7 * 20 == 40 + 16 + 140
    assert struct.unpack_from(">qqqqii", data, 0) == (T0, T0 + 3000, 1000, 3100, 2, 4)
    slots = struct.unpack_from(">4i", data, 40)
    assert slots == (0, 2, 3, 0)

    def entry(number):
        return struct.unpack_from(">iqii", data, 40 + 16 + number * 20)

    assert entry(0) == (0, 0, 0, 0)  # numbers start at 1: 0 means "none"
    assert entry(1) == (9, 1000, 0, 0)
    assert entry(2) == (13, 2000, 2, 1)  # 2.5 s after the begin timestamp, links to 1
    assert entry(3) == (0xFFFFFFF2 - 2**32, 3000, 3, 0)  # stored as a signed int
    assert index.lookup(9, 0, 1 << 62, 10) == [1000]
    assert index.lookup(13, 0, 1 << 62, 10) == [2000]
    assert index.lookup(0xFFFFFFF2, 0, 1 << 62, 10) == [3000]
    assert index.lookup(5, 0, 1 << 62, 10) == []  # slot 1, no such hash
    reopened = IndexFile.open(path, slot_count=4, entry_count=6)
    assert (reopened.index_count, reopened.used_slot_count) == (4, 2)
    assert reopened.lookup(9, 0, 1 << 62, 10) == [1000]


def test_index_file_is_full_after_entry_count_entries(tmp_path):
    """Invariant: a file takes exactly entry_count entries, then refuses the next."""
    index = IndexFile.create(str(tmp_path / "index"), slot_count=2, entry_count=3)
    assert all(index.put(h, h * 100, T0) for h in (1, 2, 3))
    assert index.is_full and not index.put(4, 400, T0)
    assert index.lookup(1, 0, 1 << 62, 10) == [100]


def test_index_rolls_to_new_files_and_queries_span_them(tmp_path):
    """Invariant: a full index file is followed by a new one (17-digit creation-time
    name) and a key query walks every file, newest first."""
    clock = Clock()
    store = open_store(tmp_path, clock, index_slot_count=3, index_entry_count=5)
    offsets = []
    for i in range(25):  # two keys each (KEYS and UNIQ_KEY): 50 entries over 5-entry files
        result = store.put_message(Message.build("T", b"%d" % i, keys=["k"], unique_key=f"U{i}"))
        offsets.append(result.appended[0].physical_offset)
        clock.now_ms += 1500
    files = store.index.files
    assert len(files) >= 10
    names = [os.path.basename(f.path) for f in files]
    assert names == sorted(names) and all(len(n) == 17 and n.isdigit() for n in names)
    ends = [f.end_physical_offset for f in files]
    assert ends == sorted(ends) and ends[-1] == store.commitlog.write_offset
    found = store.query_by_key("T", "k", max_count=100)
    assert [m.physical_offset for m in found] == offsets[::-1]
    assert [int(m.body) for m in store.query_by_key("T", "k", max_count=3)] == [24, 23, 22]
    for i in range(25):
        assert store.query_by_unique_key("T", f"U{i}").body == b"%d" % i
    # Still true after a restart, clean and abrupt.
    store.shutdown()
    store = MessageStore.open(store.config, clock_ms=clock)
    assert [m.physical_offset for m in store.query_by_key("T", "k", 100)] == offsets[::-1]
    store.close_abruptly_for_tests()
    store = MessageStore.open(store.config, clock_ms=clock)
    assert [m.physical_offset for m in store.query_by_key("T", "k", 100)] == offsets[::-1]
    store.shutdown()


def java_index_hash(key: bytes) -> int:
    return tag_hash_code(key.decode()) & 0xFFFFFFFF


@pytest.mark.parametrize("java_hash", [False, True], ids=["crc32c", "java-hash"])
def test_colliding_keys_never_return_each_others_messages(tmp_path, monkeypatch, java_hash):
    """Invariant: a key query returns only records whose real topic and key match, even
    when every key shares one slot (slot_count=1) and, with Java's hash as the index hash,
    "T#Aa" and "T#BB" share the 4-byte hash too (a lookup that trusted the hash would
    return both)."""
    if java_hash:
        monkeypatch.setattr(index_service, "index_key_hash", java_index_hash)
        assert java_index_hash(b"T#Aa") == java_index_hash(b"T#BB")
    store = open_store(tmp_path, index_slot_count=1, index_entry_count=40)
    expected: dict[tuple[str, str], list[int]] = {}
    for i in range(60):
        topic = "T" if i % 4 else "U"
        key = ["Aa", "BB", "Ab"][i % 3]
        keys = [key, "shared"] if i % 5 == 0 else [key]
        assert store.put_message(Message.build(topic, b"%d" % i, keys=keys)).ok
        for k in keys:
            expected.setdefault((topic, k), []).append(i)
    assert len(store.index.files) >= 2
    for (topic, key), bodies in expected.items():
        found = store.query_by_key(topic, key, max_count=1000)
        assert [int(m.body) for m in found] == bodies[::-1], (topic, key)
        assert all(m.topic == topic and key in m.keys for m in found)
    assert store.query_by_key("T", "aB") == [] and store.query_by_key("V", "Aa") == []
    store.shutdown()


def test_key_queries_respect_the_time_range(tmp_path):
    """Invariant: query_by_key(begin, end) returns exactly the records stored in
    [begin, end], to the millisecond, although index entries keep whole seconds."""
    clock = Clock()
    store = open_store(tmp_path, clock)
    times = [T0 + i * 60_000 for i in range(6)] + [T0 + 400_100, T0 + 400_900]
    for i, at in enumerate(times):
        clock.now_ms = at
        assert store.put_message(Message.build("T", b"%d" % i, keys=["k"])).ok

    def hits(begin, end):
        return sorted(int(m.body) for m in store.query_by_key("T", "k", 100, begin, end))

    assert hits(T0 + 120_000, T0 + 240_000) == [2, 3, 4]
    assert hits(T0 + 120_001, T0 + 239_999) == [3]
    assert hits(T0 + 400_500, T0 + 401_000) == [7]
    assert hits(T0 + 400_000, T0 + 400_899) == [6]
    assert hits(0, T0 - 1) == [] and hits(T0 + 500_000, 1 << 62) == []
    assert hits(0, 1 << 62) == list(range(8))
    store.shutdown()


class _Crash(BaseException):
    """Stands for SIGKILL: bytes already written to the maps stay, nothing else runs."""


@pytest.mark.parametrize("crash_at", [1, 2, 3])
def test_a_crash_while_a_record_rolls_the_index_loses_none_of_its_keys(
    tmp_path, monkeypatch, crash_at
):
    """Invariant: after a crash at any header write of a put whose keys are split over
    a full index file and the new one, recovery re-indexes every key of that record —
    the new file must not claim the record as indexed before its header is final."""
    config = StoreConfig(
        str(tmp_path / "store"), **{**SMALL, "index_slot_count": 3, "index_entry_count": 3}
    )
    store = MessageStore.open(config)
    # Two entries (KEYS a, UNIQ_KEY U1), then "b" fills the file and U2 rolls to a new one.
    assert store.put_message(Message.build("T", b"1", keys=["a"], unique_key="U1")).ok
    calls = [0]
    real_write_header = IndexFile.write_header

    def crashing_write_header(self, end_physical_offset):
        calls[0] += 1
        if calls[0] == crash_at:
            raise _Crash
        real_write_header(self, end_physical_offset)

    monkeypatch.setattr(IndexFile, "write_header", crashing_write_header)
    with pytest.raises(_Crash):
        store.put_message(Message.build("T", b"2", keys=["b"], unique_key="U2"))
    monkeypatch.setattr(IndexFile, "write_header", real_write_header)
    store.close_abruptly_for_tests()

    store = MessageStore.open(config)
    assert assert_derived_files_agree(store) == 2  # finds U1 and U2 through the index
    for key, body in (("a", b"1"), ("U1", b"1"), ("b", b"2"), ("U2", b"2")):
        assert [m.body for m in store.query_by_key("T", key)] == [body], key
    store.shutdown()


def test_index_service_replay_is_idempotent(tmp_path):
    """Invariant: records below the newest file's end offset are not indexed twice, so
    the dispatcher may replay any range."""
    service = IndexService(str(tmp_path / "index"), slot_count=5, entry_count=100)
    rows = [INDEX_KEY.pack(i * 100, 100, T0 + i, index_key_hash(b"T#k")) for i in range(5)]
    service.put_records(b"".join(rows))
    service.put_records(b"".join(rows[2:]))  # a replay
    assert service.files[-1].index_count - 1 == 5
    assert service.lookup("T", "k", 0, 1 << 62, 100) == [400, 300, 200, 100, 0]


# ---- flushing (docs/architecture.md, "Files on disk") -------------------------------


def test_group_commit_shares_fsyncs_among_concurrent_writers(tmp_path):
    """Invariant: under SYNC_FLUSH every concurrent put is confirmed only once its bytes
    are flushed, and writers share flushes (flushes < appends). The first flush is held
    until all 32 writers have appended, so the grouping is deterministic."""
    store = open_store(tmp_path, flush_mode=FlushMode.SYNC_FLUSH)
    writers, per_writer = 32, 5
    first_round = threading.Event()
    appended = [0]
    count_lock = threading.Lock()
    flushes = [0]
    real_append = store.append_messages

    def counting_append(messages):
        result = real_append(messages)
        with count_lock:
            appended[0] += 1
            if appended[0] == writers:
                first_round.set()
        return result

    def gated_flush():
        flushes[0] += 1
        if flushes[0] == 1:
            assert first_round.wait(30), "writers never appended"
        return store.commitlog.flush()

    store.append_messages = counting_append
    store._group_commit.stop()
    store._group_commit = GroupCommitService(gated_flush, store.commitlog.flushed_offset)
    violations: list[str] = []
    barrier = threading.Barrier(writers)

    def write(w: int) -> None:
        barrier.wait()
        for i in range(per_writer):
            result = store.put_message(Message.build("T", b"x" * 300, queue_id=w % 4))
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
    assert appended[0] == writers * per_writer
    assert flushes[0] == store._group_commit.flush_count
    # The gated flush plus at most one per later append: strictly fewer than appends.
    assert flushes[0] <= 1 + writers * (per_writer - 1) < writers * per_writer
    assert sum(store.max_offset_in_queue("T", q) for q in range(4)) == writers * per_writer
    store.shutdown()


def test_one_flush_covers_every_request_that_arrived_during_the_previous_one():
    """Invariant: requests that arrive while an fsync runs are all served by the next
    one: 33 requests, 2 flushes."""
    written = [100]
    entered, release = threading.Event(), threading.Event()
    calls = [0]

    def flush() -> int:
        covered = written[0]  # an fsync covers what was written before it started
        calls[0] += 1
        entered.set()
        assert release.wait(30)
        return covered

    service = GroupCommitService(flush, 0)
    verdicts: list[tuple[int, bool]] = []
    service.request(100, lambda ok: verdicts.append((100, ok)))
    assert entered.wait(30)
    written[0] = 3300
    for offset in range(200, 3300 + 1, 100):
        service.request(offset, lambda ok, o=offset: verdicts.append((o, ok)))
    release.set()
    service.stop()  # returns once every waiter was answered
    assert sorted(verdicts) == [(o, True) for o in range(100, 3300 + 1, 100)]
    assert calls[0] == service.flush_count == 2
    answered_now = []
    service.request(3300, answered_now.append)  # already flushed: answered at once
    assert answered_now == [True]


def test_wait_flushed_reports_timeout_when_the_flush_is_blocked(tmp_path):
    """Invariant: a write whose flush does not finish in time is reported as
    FLUSH_DISK_TIMEOUT (it is written, not confirmed), never OK."""
    blocked = threading.Event()
    service = GroupCommitService(lambda: blocked.wait(30) and 1000, 0)
    assert service.wait_flushed(100, timeout_s=0.05) is False
    blocked.set()
    assert service.wait_flushed(100, timeout_s=30) is True
    service.stop()

    store = open_store(tmp_path, flush_mode=FlushMode.SYNC_FLUSH, sync_flush_timeout_ms=50)
    gate = threading.Event()

    def stuck_flush() -> int:
        assert gate.wait(30)
        return store.commitlog.flush()

    store._group_commit.stop()
    store._group_commit = GroupCommitService(stuck_flush, store.commitlog.flushed_offset)
    result = store.put_message(Message.build("T", b"late", unique_key="L"))
    assert result.status is PutStatus.FLUSH_DISK_TIMEOUT and not result.ok
    assert len(result.appended) == 1  # written, though not confirmed
    assert store.query_by_unique_key("T", "L").body == b"late"
    gate.set()
    assert store.put_message(Message.build("T", b"on time")).status is PutStatus.OK
    store.shutdown()


def test_a_failed_flush_is_never_reported_ok(tmp_path):
    """Invariant: once an fsync failed, no waiter — then or later — is told OK."""

    def failing_flush() -> int:
        raise OSError(5, "EIO")

    store = open_store(tmp_path, flush_mode=FlushMode.SYNC_FLUSH)
    store._group_commit.stop()
    store._group_commit = GroupCommitService(failing_flush, store.commitlog.flushed_offset)
    for _ in range(3):
        result = store.put_message(Message.build("T", b"x"))
        assert result.status is PutStatus.FLUSH_DISK_TIMEOUT
    store.shutdown()


def test_async_flusher_reaches_the_write_offset_and_the_checkpoint_follows(tmp_path):
    """Invariant: under ASYNC_FLUSH the background flusher brings flushed_offset to the
    write offset without any writer asking, and a clean shutdown records in the
    checkpoint that everything is durable."""
    store = open_store(
        tmp_path,
        flush_mode=FlushMode.ASYNC_FLUSH,
        flush_interval_ms=5,
        flush_min_pages=1,
        flush_full_interval_ms=10,
        derived_flush_interval_ms=10**9,
    )
    reached = threading.Event()
    target = [1 << 62]
    real_flush = store.commitlog.flush

    def observed_flush(up_to=None):
        flushed = real_flush(up_to)
        if store.commitlog.flushed_offset >= target[0]:
            reached.set()
        return flushed

    store.commitlog.flush = observed_flush  # the flusher looks it up on every round
    for i in range(100):
        assert store.put_message(Message.build("T", os.urandom(500), unique_key=f"U{i}")).ok
    target[0] = store.commitlog.write_offset
    assert reached.wait(30), (store.commitlog.flushed_offset, target[0])
    assert store.commitlog.flushed_offset == store.commitlog.write_offset
    path = os.path.join(store.config.data_dir, CHECKPOINT_FILE)
    store.flush_derived()
    checkpoint = Checkpoint.read(path)
    assert checkpoint.consume_queue_flushed_offset == target[0]
    assert checkpoint.index_flushed_offset == target[0]
    assert checkpoint.commitlog_flushed_offset == target[0]
    store.shutdown()
    assert Checkpoint.read(path).recovery_start_offset == target[0]


def test_checkpoint_round_trips_and_any_damaged_byte_reads_as_none(tmp_path):
    """Invariant: a checkpoint reads back exactly as written; a flipped byte anywhere, a
    short file or a missing one reads as None (and recovery then scans everything)."""
    path = str(tmp_path / "checkpoint")
    written = Checkpoint(100, 90, 80, T0 + 1, T0 + 2, T0 + 3)
    written.write(path)
    assert Checkpoint.read(path) == written
    assert written.recovery_start_offset == 80
    with open(path, "rb") as f:
        good = f.read()
    assert len(good) == checkpoint_format.VERSION_2_BYTES and good.startswith(b"FMQCKPT2")
    for position in range(len(good)):
        damaged = bytearray(good)
        damaged[position] ^= 0x10
        with open(path, "wb") as f:
            f.write(damaged)
        assert Checkpoint.read(path) is None, position
    with open(path, "wb") as f:
        f.write(good[:-1])
    assert Checkpoint.read(path) is None
    assert Checkpoint.read(str(tmp_path / "missing")) is None


def test_a_checkpoint_of_a_newer_version_reads_as_missing_and_says_so(tmp_path, caplog):
    """A node downgraded below the release that wrote its checkpoint recovers from the
    log's first segment (slower, never wrong) and logs why."""
    path = str(tmp_path / "checkpoint")
    Checkpoint(100, 90, 80, T0 + 1, T0 + 2, T0 + 3).write(path)
    with open(path, "rb") as f:
        newer = b"FMQCKPT3" + f.read()[8:]
    with open(path, "wb") as f:
        f.write(newer)
    assert Checkpoint.read(path) is None
    assert "of version '3', newer than 2" in caplog.text


# ---- recovery (docs/architecture.md, "Recovery") ------------------------------------


def write_segments(store: MessageStore, segments: float, start: int = 0) -> int:
    """Append ~3 KB messages until the log passes ``segments`` segments; returns the
    next sequence number."""
    i = start
    while store.commitlog.write_offset < segments * SEGMENT:
        message = Message.build("T", os.urandom(3000), queue_id=i % 3, unique_key=f"U{i}")
        assert store.put_message(message).ok
        i += 1
    return i


def records_from(store: MessageStore, offset: int) -> int:
    log = store.commitlog
    return sum(
        1 for m in log.iterate(log.min_offset, log.write_offset) if m.physical_offset >= offset
    )


def test_recovery_scans_only_from_the_segment_of_the_durable_point(tmp_path):
    """Invariant: recovery time is proportional to what must be scanned — the scan starts
    at the segment holding the checkpoint's durable point, not at the first segment."""
    config = StoreConfig(str(tmp_path / "store"), **SMALL, **QUIET)
    store = MessageStore.open(config)
    sent = write_segments(store, 3.5)
    store.commitlog.flush()
    store.flush_derived()  # the durable point: inside the fourth segment
    durable = store.commitlog.write_offset
    sent = write_segments(store, 6.2, sent)
    total = records_from(store, 0)
    store.close_abruptly_for_tests()

    store = MessageStore.open(config)
    report = store.recovery_report
    assert not report.clean_shutdown
    assert report.scan_start_offset == durable - durable % SEGMENT == 3 * SEGMENT
    assert report.records_scanned == records_from(store, 3 * SEGMENT) < total
    assert report.redispatched == records_from(store, durable)
    assert report.end_offset == store.commitlog.write_offset
    assert assert_derived_files_agree(store) == total == sent
    end = store.commitlog.write_offset
    store.shutdown()

    # After a clean shutdown only the last segment is scanned.
    store = MessageStore.open(config)
    report = store.recovery_report
    assert report.clean_shutdown
    assert report.scan_start_offset == end - end % SEGMENT == 6 * SEGMENT
    assert report.records_scanned == records_from(store, 6 * SEGMENT)
    assert report.redispatched == 0
    store.shutdown()


@pytest.mark.parametrize("max_length", [1, 2999, 5000, 20_000, 10**9])
def test_read_records_cuts_whole_records_within_one_segment(tmp_path, max_length):
    """Invariant: what a master streams is whole records — as many as fit in
    ``max_length`` (one when a record alone is longer), never past a segment's end or the
    write offset — so a slave's log is a prefix of the master's after every chunk."""
    store = MessageStore.open(StoreConfig(str(tmp_path / "store"), **SMALL, **QUIET))
    write_segments(store, 2.5)
    log = store.commitlog
    records = list(log.iterate(0, log.write_offset))
    boundaries = {m.physical_offset for m in records} | {
        m.physical_offset + m.size for m in records
    }
    boundaries |= {f.end_offset for f in log.segments.files}  # after a blank record
    offset, chunks = 0, 0
    while offset < log.write_offset:
        chunk = log.read_records(offset, max_length)
        end = offset + len(chunk)
        assert chunk and end in boundaries, (offset, len(chunk))
        assert end <= (offset // SEGMENT + 1) * SEGMENT, "a chunk crosses a segment end"
        if len(chunk) > max_length:  # only ever one record longer than the limit
            assert not {b for b in boundaries if offset < b < end}, (offset, len(chunk))
        elif end < min(log.write_offset, (offset // SEGMENT + 1) * SEGMENT):
            # No room was left: the next record would not have fitted.
            (next_size,) = struct.unpack_from(">i", log.read_bytes(end, 4))
            assert len(chunk) + next_size > max_length
        offset, chunks = end, chunks + 1
    assert offset == log.write_offset and chunks >= 3
    store.shutdown()


def test_replayed_chunks_dispatch_like_the_master_across_segment_rolls(tmp_path, monkeypatch):
    """Invariant: a slave appending a master's chunks verbatim ends with the same consume
    queues, index answers and listener calls as the master, although it dispatches them
    in catch-up batches (made small here, so that batches end mid-chunk and straddle
    the blank records of segment rolls)."""
    from store import dispatcher

    monkeypatch.setattr(dispatcher, "CATCH_UP_BATCH", 7)
    master = MessageStore.open(StoreConfig(str(tmp_path / "master"), **SMALL, **QUIET))
    for i in range(120):
        # Two separators in a row: the empty key between them is not indexed.
        properties = {"KEYS": f"K{i}  shared"} if i % 3 else {}
        message = Message.build(
            "T",
            os.urandom(1500),
            queue_id=i % 3,
            tags=f"Tag{i % 4}",
            unique_key=f"U{i}",
            properties=properties,
        )
        assert master.put_message(message).ok
    assert master.commitlog.write_offset > 2 * SEGMENT
    slave = MessageStore.open(StoreConfig(str(tmp_path / "slave"), **SMALL, **QUIET))
    seen: list[tuple[int, tuple[str, ...]]] = []
    slave.add_dispatch_listener(
        lambda batch: seen.extend((r.physical_offset, r.keys) for r in batch.records),
        topics=("T",),
    )
    offset = 0
    while offset < master.commitlog.write_offset:
        chunk = master.commitlog.read_records(offset, 10_000)
        offset = slave.append_replicated(offset, chunk)
    assert assert_derived_files_agree(slave) == assert_derived_files_agree(master) == 120
    for (topic, queue_id), queue in master.consume_queues.queues.items():
        replica = slave.consume_queues.get(topic, queue_id)
        assert [replica.entry_at(i) for i in range(queue.max_offset)] == [
            queue.entry_at(i) for i in range(queue.max_offset)
        ]
    shared = {m.physical_offset for m in slave.query_by_key("T", "shared", max_count=200)}
    assert len(shared) == 80
    log = master.commitlog
    expected = [
        (m.physical_offset, (*m.keys, m.unique_key)) for m in log.iterate(0, log.write_offset)
    ]
    assert seen == expected
    master.shutdown()
    slave.shutdown()


def test_a_replica_appends_first_and_dispatches_after(tmp_path):
    """A slave acknowledges once its CommitLog holds the master's bytes: the append alone
    makes nothing readable, and its dispatch (consume queue, index) comes after and
    finds the same entries as the master's."""
    master = MessageStore.open(StoreConfig(str(tmp_path / "master"), **SMALL, **QUIET))
    slave = MessageStore.open(StoreConfig(str(tmp_path / "slave"), **SMALL, **QUIET))
    for i in range(5):
        assert master.put_message(Message.build("T", b"x" * 100, unique_key=f"M{i}")).ok
    chunk = master.commitlog.read_records(0, 10**6)
    assert slave.append_replicated_records(0, chunk) == master.commitlog.write_offset
    assert slave.max_offset_in_queue("T", 0) == 0  # held, not yet dispatched
    assert slave.query_by_unique_key("T", "M4") is None
    slave.dispatch_replicated()
    assert slave.max_offset_in_queue("T", 0) == 5
    assert slave.query_by_unique_key("T", "M4").body == b"x" * 100
    assert assert_derived_files_agree(slave) == assert_derived_files_agree(master) == 5
    master.shutdown()
    slave.shutdown()


def test_a_replica_promoted_before_it_dispatched_gives_out_no_queue_offset_twice(tmp_path):
    """A slave promoted between appending its master's records and dispatching them (its
    link stopped while it fsynced them, under SYNC_FLUSH) takes its next queue offsets
    from consume queues that cover its whole log: before, the new master gave out the
    same queue offsets again, one consume-queue entry replaced the other, and POP groups
    never got the message of the second (found by a sync-sync-flush chaos run)."""
    master = MessageStore.open(StoreConfig(str(tmp_path / "master"), **SMALL, **QUIET))
    slave = MessageStore.open(StoreConfig(str(tmp_path / "slave"), **SMALL, **QUIET))
    for i in range(3):
        assert master.put_message(Message.build("T", b"old", unique_key=f"M{i}")).ok
    chunk = master.commitlog.read_records(0, 10**6)
    slave.append_replicated_records(0, chunk)  # acknowledged; promoted before dispatching
    slave.rebuild_queue_offsets()  # what a promotion does
    result = slave.put_message(Message.build("T", b"new", unique_key="N"))
    assert result.ok and result.appended[0].queue_offset == 3
    assert [m.body for m in slave.get_messages("T", 0, 0, 10).messages] == [b"old"] * 3 + [b"new"]
    master.shutdown()
    slave.shutdown()


def test_a_replay_reads_the_records_a_sync_flush_replica_has_not_flushed_yet(tmp_path):
    """A SYNC_FLUSH slave promoted while its last replicated records were appended and not
    yet fsynced: consumers still read only up to what is on disk (the read cap), but a
    replay (``walk_queue``) reads every record the log holds. Before, the replay stopped
    at the flushed offset: a promoted node's POP state missed the end of a delivery its
    old master had written last, and dead-lettered the message a second time (found by a
    sync-sync-flush chaos run)."""
    master = MessageStore.open(StoreConfig(str(tmp_path / "master"), **SMALL, **QUIET))
    slave = MessageStore.open(
        StoreConfig(str(tmp_path / "slave"), **SMALL, **QUIET, flush_mode=FlushMode.SYNC_FLUSH)
    )
    try:
        for i in range(3):
            assert master.put_message(Message.build("T", b"%d" % i)).ok
        flushed = master.write_offset
        slave.append_replicated_records(0, master.commitlog.read_records(0, 10**6))
        slave.flush_log()
        assert master.put_message(Message.build("T", b"3")).ok  # the last, not flushed
        tail = master.commitlog.read_records(flushed, 10**6)
        slave.append_replicated_records(flushed, tail)
        slave.rebuild_queue_offsets()  # what a promotion does, then the states replay
        assert slave.read_cap() == flushed < slave.write_offset
        assert [m.body for m in slave.get_messages("T", 0, 0, 10).messages] == [b"0", b"1", b"2"]
        assert [m.body for m in slave.walk_queue("T", 0)] == [b"0", b"1", b"2", b"3"]
    finally:
        master.shutdown()
        slave.shutdown()


def test_append_listeners_run_before_the_records_are_dispatched(tmp_path):
    """What copies the log elsewhere (a master's replication links) hears of new records
    when the CommitLog holds them and before their consume-queue and index entries are
    written; the dispatch listeners hear of them after."""
    store = MessageStore.open(StoreConfig(str(tmp_path / "store"), **SMALL, **QUIET))
    heard: list[tuple[str, int, int]] = []
    store.add_append_listener(
        lambda: heard.append(("append", store.write_offset, store.max_offset_in_queue("T", 0)))
    )
    store.add_dispatch_listener(
        lambda batch: heard.append(
            ("dispatch", store.write_offset, store.max_offset_in_queue("T", 0))
        )
    )
    result = store.put_messages([Message.build("T", b"one"), Message.build("T", b"two")])
    assert result.ok
    end = store.write_offset
    assert heard == [("append", end, 0), ("dispatch", end, 2)]
    store.shutdown()


def test_a_replica_refuses_bytes_that_are_not_whole_records_at_its_end(tmp_path):
    """Invariant: a slave stores a master's bytes only when they are whole records that
    start at its own end. Logs that differ below that point (their epochs agree, their
    bytes do not) must stop replication, not leave a replica that silently differs."""
    master = MessageStore.open(StoreConfig(str(tmp_path / "master"), **SMALL, **QUIET))
    slave = MessageStore.open(StoreConfig(str(tmp_path / "slave"), **SMALL, **QUIET))
    for i in range(3):
        assert master.put_message(Message.build("T", b"x" * (100 + i), unique_key=f"M{i}")).ok
    assert slave.put_message(Message.build("T", b"other", unique_key="S0")).ok
    end = slave.commitlog.write_offset
    chunk = master.commitlog.read_records(end, 10**6)  # the master's bytes from there
    before = slave.commitlog.read_bytes(0, end)
    with pytest.raises(ReplicaMismatch, match="not whole records"):
        slave.append_replicated(end, chunk)
    whole = master.commitlog.read_records(0, 10**6)
    for cut in (whole[: len(whole) - 1], whole[5:], whole + b"\0" * 10):
        empty = MessageStore.open(StoreConfig(str(tmp_path / f"e{len(cut)}"), **SMALL, **QUIET))
        with pytest.raises(ReplicaMismatch, match="not whole records"):
            empty.append_replicated(0, cut)
        assert empty.commitlog.write_offset == 0
        empty.shutdown()
    assert slave.commitlog.write_offset == end
    assert slave.commitlog.read_bytes(0, end) == before
    assert assert_derived_files_agree(slave) == 1
    master.shutdown()
    slave.shutdown()


@pytest.mark.parametrize("abrupt", [False, True], ids=["clean", "abrupt"])
@pytest.mark.parametrize("unreadable", ["damaged", "newer-version"])
def test_a_damaged_checkpoint_makes_recovery_scan_from_the_first_segment(
    tmp_path, abrupt, unreadable
):
    """Invariant: without a trustworthy checkpoint (damaged, or of a version a newer
    release wrote before this node was downgraded) recovery assumes nothing is durable:
    it scans from the first segment and rebuilds consume queues and index from there."""
    config = StoreConfig(str(tmp_path / "store"), **SMALL, **QUIET)
    store = MessageStore.open(config)
    sent = write_segments(store, 4.5)
    store.commitlog.flush()
    store.flush_derived()
    if abrupt:
        store.close_abruptly_for_tests()
    else:
        store.shutdown()
    path = os.path.join(config.data_dir, CHECKPOINT_FILE)
    with open(path, "r+b") as f:
        if unreadable == "damaged":
            f.seek(3)
            byte = f.read(1)
            f.seek(3)
            f.write(bytes([byte[0] ^ 0xFF]))
        else:
            f.seek(len(checkpoint_format.MAGIC_PREFIX))
            f.write(b"9")
    assert Checkpoint.read(path) is None

    store = MessageStore.open(config)
    report = store.recovery_report
    assert report.clean_shutdown is not abrupt
    assert report.scan_start_offset == 0
    assert report.records_scanned == sent == report.redispatched
    assert report.corruption is None
    assert assert_derived_files_agree(store) == sent
    assert Checkpoint.read(path) is not None  # rewritten by the recovery
    store.shutdown()


def test_index_chain_survives_a_crash_between_entries_and_header(tmp_path):
    """A batch wrote entries and slots, then the process died before the header said so:
    the next put into that slot must keep the older, counted entries reachable."""

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


def keys_by_slot(slot_count: int, topic: str = "T") -> tuple[str, str, str]:
    """Keys a, b, c: a and c share an index slot, b is in another."""
    slot = {n: index_key_hash(f"{topic}#{n}".encode()) % slot_count for n in map(str, range(64))}
    a = "0"
    c = next(n for n in slot if n != a and slot[n] == slot[a])
    b = next(n for n in slot if slot[n] != slot[a])
    return a, b, c


def test_a_replay_from_before_a_dead_batch_keeps_the_older_keys_of_its_slots(tmp_path):
    """A batch wrote its entry and slot, then the process died before the header counted
    it. Recovery cuts the index back to the checkpoint, before the batch, and replays from
    there: the replay's first entry takes the dead entry's number, so a slot still naming
    it led its chain into another key's, and the older key of that slot vanished from
    lookups (the SIGKILL test's lost unique key). Loading after a crash repairs the slot."""
    a, b, c = keys_by_slot(2)

    def row(key: str, physical: int) -> bytes:
        return INDEX_KEY.pack(physical, 100, T0, index_key_hash(f"T#{key}".encode()))

    directory = str(tmp_path / "index")
    service = IndexService(directory, slot_count=2, entry_count=100)
    service.put_records(row(a, 0) + row(b, 100))  # counted: the header ends at 200
    service.files[-1].put_all(row(c, 200))  # entry and slot written; dead before the header

    recovered = IndexService(directory, slot_count=2, entry_count=100)
    recovered.load(crashed=True)
    recovered.truncate_physical(100)  # the checkpoint said: indexed below 100
    recovered.put_records(row(b, 100))  # the replay, one plan per record
    recovered.put_records(row(c, 200))
    for key, physical in ((a, 0), (b, 100), (c, 200)):
        assert recovered.lookup("T", key, 0, 1 << 62, 10) == [physical], key


def test_recovery_replaying_in_several_plans_finds_every_key(tmp_path, monkeypatch):
    """The same through the store: a put dies after its index entries, before the index
    header; recovery replays from the checkpoint in several plans (as a long replay does,
    CATCH_UP_BATCH records each) and every unique key is found again."""
    a, b, c = keys_by_slot(2)
    config = StoreConfig(str(tmp_path / "store"), **{**SMALL, **QUIET, "index_slot_count": 2})
    store = MessageStore.open(config)
    assert store.put_message(Message.build("T", b"a", unique_key=a)).ok
    store.flush_log()
    store.flush_derived()  # the checkpoint: everything below here is durable
    assert store.put_message(Message.build("T", b"b", unique_key=b)).ok

    def crashing_write_header(self, end_physical_offset):
        raise _Crash

    monkeypatch.setattr(IndexFile, "write_header", crashing_write_header)
    with pytest.raises(_Crash):
        store.put_message(Message.build("T", b"c", unique_key=c))
    monkeypatch.undo()
    store.close_abruptly_for_tests()

    monkeypatch.setattr(dispatcher, "CATCH_UP_BATCH", 1)
    store = MessageStore.open(config)
    assert store.recovery_report.redispatched == 2
    found = {key: store.query_by_unique_key("T", key) for key in (a, b, c)}
    assert {key: m.body if m else None for key, m in found.items()} == {
        a: b"a",
        b: b"b",
        c: b"c",
    }
    store.shutdown()


def test_checkpoint_writes_from_several_threads_never_collide(tmp_path):
    """The flusher and a replica's truncation both write the checkpoint; one temporary
    file shared without a lock once made a write fail (renamed away by the other)."""
    store = MessageStore.open(StoreConfig(str(tmp_path / "data"), **SMALL))
    errors: list[BaseException] = []

    def write_many() -> None:
        try:
            for _ in range(300):
                store._write_checkpoint(store.dispatcher.dispatched_offset)
        except BaseException as error:  # reported below, not lost in the thread
            errors.append(error)

    threads = [threading.Thread(target=write_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    store.shutdown()
    assert errors == []


def test_a_read_during_a_cut_answers_nothing_new_yet_not_zeroed_bytes(tmp_path, monkeypatch):
    """A slave cuts its tail while a consumer reads it (no put lock on reads). Between the
    CommitLog's cut and the consume queue's, the queue's entries point at zeroed bytes: a
    read there must answer 'nothing new yet' at the same offset, never those bytes (the
    long ASYNC chaos run: a consumer got a zeroed record) nor skip past the entries."""
    store = open_store(tmp_path)
    try:
        for i in range(6):
            assert store.put_message(Message.build("t", b"m%d" % i)).ok
        cut_at = store.get_messages("t", 0, 3, 1).messages[0].physical_offset
        queue = store.consume_queues.get("t", 0)
        seen = []
        real_truncate = queue.truncate_physical

        def read_then_truncate(end: int) -> None:
            seen.append(store.get_records("t", 0, 2, 10, 1 << 20))
            seen.append(store.get_messages("t", 0, 2, 10))
            real_truncate(end)

        monkeypatch.setattr(queue, "truncate_physical", read_then_truncate)
        store.truncate_to(cut_at)
        for result in seen:
            assert (result.status, result.messages, result.next_begin_offset) == (
                GetStatus.OFFSET_OVERFLOW_ONE,
                [],
                2,
            )
        # Once the cut is over the same reads answer the kept messages.
        assert [m.body for m in store.get_messages("t", 0, 2, 10).messages] == [b"m2"]
        assert len(store.get_records("t", 0, 2, 10, 1 << 20).messages) == 1
    finally:
        store.shutdown()


def test_readers_beside_repeated_cuts_see_only_whole_consistent_pages(tmp_path):
    """Two threads: one appends a generation of messages and cuts it again, 300 times; the
    other reads the same queue offsets all the while. Every page read holds whole records
    of one generation at consecutive queue offsets from the one asked for."""
    store = open_store(tmp_path)
    stop = threading.Event()
    problems: list[str] = []
    pages = 0

    def read() -> None:
        nonlocal pages
        while not stop.is_set():
            try:
                raw = store.get_records("t", 0, 1, 16, 1 << 20).messages
                decoded = [record.decode(data, 0) for data in raw]
                for page in (decoded, store.get_messages("t", 0, 1, 16).messages):
                    generations = {m.body.split(b"-")[0] for m in page}
                    offsets = [m.queue_offset for m in page]
                    if len(generations) > 1 or offsets != list(range(1, len(page) + 1)):
                        problems.append(f"{generations} {offsets}")
                    pages += bool(page)
            except Exception as error:  # the reader must report, not die
                problems.append(repr(error))

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # interleave the two threads as often as possible
    reader = threading.Thread(target=read)
    try:
        assert store.put_message(Message.build("t", b"base")).ok
        cut_at = store.commitlog.write_offset
        reader.start()
        for generation in range(300):
            for i in range(8):
                assert store.put_message(Message.build("t", b"%d-%d" % (generation, i))).ok
            if generation % 10 == 0:
                # Every tenth generation stays until the reader has read a page of it, so the
                # check below cannot pass on a reader the host never scheduled (a busy host
                # once let all 300 cuts go by without one page read).
                seen = pages
                until(lambda seen=seen: pages > seen or problems, 10.0, "a page read", 0.001)
            store.truncate_to(cut_at)
    finally:
        stop.set()
        reader.join()
        sys.setswitchinterval(previous)
        store.shutdown()
    assert problems == []
    assert pages > 0
