"""ConsumeQueue: the per-(topic, queue) array of 20-byte pointers into the CommitLog.

Entry layout (big-endian): ``physical offset 8 | size 4 | tag hash code 8``. Entry *i*
sits at logical byte *i * 20*, so a queue offset is an array index and files hold
``entries_per_file`` entries each (default 300,000), named by their first byte offset.

Invariants: entries are appended in CommitLog order, so physical offsets strictly increase
along a queue; ``min_offset <= max_offset``; every entry below ``max_offset`` is written.
A *blank* entry (size ``BLANK_SIZE``) fills offsets that have no message (a queue that
restarts after retention removed all of it); readers skip blanks.

Thread-safety: appended and truncated under the store's put lock (or by recovery);
readers are lock-free and read only below ``max_offset``, which is published last.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable, Iterator

from store.mapped_file_queue import MappedFileQueue

ENTRY = struct.Struct(">qiq")
ENTRY_SIZE = ENTRY.size
assert ENTRY_SIZE == 20
BLANK_SIZE = 0x7FFFFFFF
BLANK_ENTRY = ENTRY.pack(0, BLANK_SIZE, 0)

Entry = tuple[int, int, int]  # (physical offset, size, tag hash code)
LOAD_CHECKED_FILES = 3  # newest files checked entry by entry when a queue is loaded


def first_unwritten_entry(data: bytes | bytearray | mmap.mmap) -> int | None:
    """Index of the first entry of a file's bytes whose size field is zero (never
    written: a record is never empty and a blank's size is ``BLANK_SIZE``); None when
    every entry is written. Works on the four size bytes of all entries at once."""
    count = len(data) // ENTRY_SIZE
    sizes = 0
    with memoryview(data) as view:  # strided views: only the size bytes are copied
        for byte in range(8, 12):
            sizes |= int.from_bytes(view[byte::ENTRY_SIZE][:count].tobytes(), "big")
    found = sizes.to_bytes(count, "big").find(0)
    return None if found < 0 else found


class ConsumeQueue:
    def __init__(self, root: str, topic: str, queue_id: int, entries_per_file: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.directory = os.path.join(root, topic, str(queue_id))
        self.files = MappedFileQueue(self.directory, entries_per_file * ENTRY_SIZE)
        self.min_offset = 0
        self.max_offset = 0
        self.max_physical_end = 0  # end (offset + size) of the last entry's record

    # ---- loading -------------------------------------------------------------------
    def load(self) -> None:
        """Map the files and find where the written entries end: at the first entry never
        written (size 0) in the newest ``LOAD_CHECKED_FILES`` files (as RocketMQ's recovery
        does) or in an older file whose last entry is unwritten. A power loss takes what
        was not synced: the tail of a file that filled after the last flush, with later
        files begun (found by chaos: the lost entries then read as pointers to offset 0),
        or any page of the unsynced range. So neither "every earlier file is full" nor
        "entries end at the last non-zero byte" holds; entries past the first unwritten
        one are discarded, and recovery re-dispatches them from the CommitLog where it
        still holds their records."""
        self.files.load()
        files = self.files.files
        if not files:
            return
        end = files[-1].end_offset
        checked_whole_from = len(files) - LOAD_CHECKED_FILES
        for number, f in enumerate(files):
            if number < checked_whole_from and not f.is_zero_at(f.size - ENTRY_SIZE, ENTRY_SIZE):
                continue  # an older file whose last entry is written: full
            unwritten = first_unwritten_entry(f.map)
            if unwritten is not None:
                end = f.base_offset + unwritten * ENTRY_SIZE
                break
        holder = self.files.find(end)
        if holder is not None and (
            holder is not files[-1] or not holder.is_zero_at(end - holder.base_offset, holder.size)
        ):
            self.files.truncate_to(end)  # later files, and entries after a hole
        for f in self.files.files:
            f.wrote_position = min(f.size, max(0, end - f.base_offset))
        # What was read back is not known to be on disk (after a SIGKILL it may be in the
        # page cache only): the next flush forces every file once. Counting it as flushed
        # let a checkpoint claim entries that a power loss then took (found by chaos).
        for f in self.files.files:
            f.flushed_position = 0
        self.files.write_offset = end
        self.files.flushed_offset = self.files.min_offset
        self.max_offset = end // ENTRY_SIZE
        self.min_offset = self.files.min_offset // ENTRY_SIZE
        self._refresh_physical_end()

    def _refresh_physical_end(self) -> None:
        self.max_physical_end = 0
        for offset in range(self.max_offset - 1, self.min_offset - 1, -1):
            entry = self.entry_at(offset)
            if entry is not None and entry[1] != BLANK_SIZE:
                self.max_physical_end = entry[0] + entry[1]
                return

    # ---- writing -------------------------------------------------------------------
    def put(self, queue_offset: int, physical_offset: int, size: int, tag_code: int) -> None:
        """Record that message ``queue_offset`` of this queue is at ``physical_offset``.

        Idempotent, so the dispatcher can replay the CommitLog over a queue that already
        has some of the entries (recovery, catch-up after a failed dispatch)."""
        if queue_offset < self.max_offset:
            if queue_offset >= self.min_offset and self.entry_at(queue_offset) == (
                physical_offset,
                size,
                tag_code,
            ):
                return
            # A different history (the CommitLog was truncated): rewrite from here.
            self.truncate_to_offset(queue_offset)
        if queue_offset > self.max_offset:
            self._fill_blanks_to(queue_offset)
        self._append(ENTRY.pack(physical_offset, size, tag_code))
        self.max_physical_end = physical_offset + size

    def put_run(self, entries: bytes, first_queue_offset: int) -> None:
        """Append consecutive entries, packed as the file stores them (a dispatch plan's
        run), starting at ``first_queue_offset``, with one copy per file touched: the
        dispatcher's fast path. Falls back to ``put`` per entry when the run does not
        start exactly at the end of the queue."""
        if not entries:
            return
        if first_queue_offset != self.max_offset or (
            self.max_offset == self.min_offset == 0 and first_queue_offset
        ):
            for i, entry in enumerate(ENTRY.iter_unpack(entries)):
                self.put(first_queue_offset + i, *entry)
            return
        view = memoryview(entries)
        while view:
            position = self.files.write_offset
            target = self.files.file_for_write(position)
            local = position - target.base_offset
            chunk = view[: target.size - local]
            target.write_at(local, chunk)
            target.wrote_position = local + len(chunk)
            self.files.write_offset = position + len(chunk)
            self.max_offset += len(chunk) // ENTRY_SIZE
            view = view[len(chunk) :]
        physical_offset, size, _ = ENTRY.unpack_from(entries, len(entries) - ENTRY_SIZE)
        self.max_physical_end = physical_offset + size

    def _append(self, entry: bytes) -> None:
        position = self.files.write_offset
        target = self.files.file_for_write(position)
        local = position - target.base_offset
        target.write_at(local, entry)
        target.wrote_position = local + ENTRY_SIZE
        self.files.write_offset = position + ENTRY_SIZE
        self.max_offset += 1

    def _fill_blanks_to(self, queue_offset: int) -> None:
        if self.max_offset == self.min_offset:
            # Empty queue: start its files at the file holding queue_offset.
            start = queue_offset * ENTRY_SIZE
            base = start - start % self.files.file_size
            self.files.delete_all()
            self.files.write_offset = self.files.flushed_offset = base
            self.max_offset = self.min_offset = base // ENTRY_SIZE
            while self.max_offset < queue_offset:
                self._append(BLANK_ENTRY)
            self.min_offset = queue_offset
            return
        while self.max_offset < queue_offset:
            self._append(BLANK_ENTRY)

    # ---- reading -------------------------------------------------------------------
    def entry_at(self, queue_offset: int) -> Entry | None:
        if not self.min_offset <= queue_offset < self.max_offset:
            return None
        position = queue_offset * ENTRY_SIZE
        f = self.files.find(position)
        if f is None:
            return None
        return ENTRY.unpack_from(f.map, position - f.base_offset)

    def entries(self, queue_offset: int, max_count: int) -> Iterator[tuple[int, Entry]]:
        """Yield ``(queue offset, entry)`` from ``queue_offset``, at most ``max_count``,
        reading whole runs of a file at a time."""
        end = min(self.max_offset, queue_offset + max_count)
        offset = max(queue_offset, self.min_offset)
        while offset < end:
            position = offset * ENTRY_SIZE
            f = self.files.find(position)
            if f is None:
                return
            stop = min(end * ENTRY_SIZE, f.end_offset)
            chunk = f.map[position - f.base_offset : stop - f.base_offset]
            for entry in ENTRY.iter_unpack(chunk):
                if entry[1] != BLANK_SIZE:
                    yield offset, entry
                offset += 1

    def entry_bytes(self, queue_offset: int, max_count: int) -> tuple[int, bytes]:
        """``entries`` as the files hold them: the queue offset of the first, and the
        packed entries (blank ones among them) from there, at most ``max_count``."""
        end = min(self.max_offset, queue_offset + max_count)
        first = offset = max(queue_offset, self.min_offset)
        chunks = []
        while offset < end:
            position = offset * ENTRY_SIZE
            f = self.files.find(position)
            if f is None:
                break
            stop = min(end * ENTRY_SIZE, f.end_offset)
            chunks.append(f.map[position - f.base_offset : stop - f.base_offset])
            offset = stop // ENTRY_SIZE
        return first, chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def offset_by_time(self, timestamp_ms: int, store_time_of: Callable[[int], int | None]) -> int:
        """The first queue offset whose message was stored at or after ``timestamp_ms``
        (``max_offset`` when none was); binary search, since store times do not decrease."""
        low, high = self.min_offset, self.max_offset
        while low < high:
            middle = (low + high) // 2
            entry = self.entry_at(middle)
            stored = None if entry is None or entry[1] == BLANK_SIZE else store_time_of(entry[0])
            if stored is None or stored < timestamp_ms:
                low = middle + 1
            else:
                high = middle
        return low

    # ---- truncation and retention --------------------------------------------------
    def truncate_to_offset(self, queue_offset: int) -> None:
        queue_offset = max(queue_offset, self.min_offset)
        self.files.truncate_to(queue_offset * ENTRY_SIZE)
        self.max_offset = queue_offset
        self._refresh_physical_end()

    def truncate_physical(self, physical_end: int) -> None:
        """Drop the entries whose record does not end by ``physical_end``."""
        offset = self.max_offset
        while offset > self.min_offset:
            entry = self.entry_at(offset - 1)
            assert entry is not None
            if entry[1] != BLANK_SIZE and entry[0] + entry[1] <= physical_end:
                break
            offset -= 1
        if offset < self.max_offset:
            self.truncate_to_offset(offset)

    def correct_min_offset(self, commitlog_min: int) -> None:
        """Move ``min_offset`` to the first entry whose record still exists."""
        low, high = self.min_offset, self.max_offset
        while low < high:
            middle = (low + high) // 2
            entry = self.entry_at(middle)
            assert entry is not None
            if entry[1] == BLANK_SIZE or entry[0] < commitlog_min:
                low = middle + 1
            else:
                high = middle
        self.min_offset = low

    def delete_expired_files(self, commitlog_min: int) -> int:
        """Delete files all of whose entries point below ``commitlog_min``."""
        doomed = 0
        files = self.files.files
        for f in files[:-1]:
            last = ENTRY.unpack_from(f.map, f.size - ENTRY_SIZE)
            if last[1] != BLANK_SIZE and last[0] + last[1] <= commitlog_min:
                doomed += 1
            else:
                break
        if doomed:
            self.files.delete_first(doomed)
            self.min_offset = max(self.min_offset, self.files.min_offset // ENTRY_SIZE)
        self.correct_min_offset(commitlog_min)
        return doomed

    def flush(self) -> None:
        self.files.flush()

    def close(self) -> None:
        self.files.close()
