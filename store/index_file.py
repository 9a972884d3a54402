"""IndexFile: a hash index from ``topic#key`` to CommitLog offsets (docs/architecture.md,
"Files on disk").

Layout: a 40-byte header (begin/end store timestamp, begin/end physical offset, used slot
count, index count), ``slot_count`` slots of 4 bytes, then ``entry_count`` entries of 20
bytes (``key hash 4 | physical offset 8 | seconds since begin timestamp 4 | previous entry
in this slot 4``).

Invariants: entry numbers start at 1, so 0 means "empty slot" / "end of chain"; a slot
holds its chain's newest entry; every ``previous`` link points to a smaller number, so a
chain walk ends. Entries follow CommitLog order. The hash is only a hint: the store
re-checks the real topic and key of every hit, so two keys of one hash never return each
other's messages.

Write order per key is entry, then slot, then header, so a crash at any instruction leaves
at worst an entry that is overwritten later, and slots naming it: a lookup may miss it, never
return a wrong one. Recovery points those slots back at their chains' counted entries before
it writes anything (``repair_uncounted_slots``), or the replay's entries, taking the dead
ones' numbers, would cut the older keys of those slots off their chains.

Thread-safety: written under the store's put lock; lookups are lock-free.
"""

from __future__ import annotations

import array
import contextlib
import functools
import mmap
import os
import struct
import sys
import threading
from datetime import UTC, datetime

from store import _speedups as speedups
from store import sync_ledger
from store.mapped_file import create_mapped

HEADER = struct.Struct(">qqqqii")
# One key to index (``put_all``, ``IndexService.put_records``): its record's physical
# offset, size and store time (ms), and the key's hash; a dispatch plan's keys are these
# rows back to back in log order (so by physical offset), made and read in C with no
# Python object per key.
INDEX_KEY = struct.Struct("<qiqI")
HEADER_SIZE = HEADER.size
assert HEADER_SIZE == 40
SLOT = struct.Struct(">i")
SLOT_SIZE = 4
ENTRY = struct.Struct(">iqii")
ENTRY_SIZE = ENTRY.size
assert ENTRY_SIZE == 20


@functools.lru_cache(maxsize=256)
def entries_struct(count: int) -> struct.Struct:
    """``count`` entries back to back: ``put_all`` packs a batch's entries in one call."""
    return struct.Struct(">" + "iqii" * count)


def index_file_name(timestamp_ms: int) -> str:
    moment = datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC)
    return moment.strftime("%Y%m%d%H%M%S") + f"{timestamp_ms % 1000:03d}"


class IndexFile:
    __slots__ = (
        "begin_physical_offset",
        "begin_timestamp_ms",
        "changes",
        "end_physical_offset",
        "end_timestamp_ms",
        "entry_count",
        "index_count",
        "map",
        "path",
        "slot_count",
        "sync_lock",
        "synced_changes",
        "used_slot_count",
    )

    def __init__(self, path: str, map_, slot_count: int, entry_count: int) -> None:
        self.path = path
        self.map = map_
        self.slot_count = slot_count
        self.entry_count = entry_count
        (
            self.begin_timestamp_ms,
            self.end_timestamp_ms,
            self.begin_physical_offset,
            self.end_physical_offset,
            self.used_slot_count,
            self.index_count,
        ) = HEADER.unpack_from(map_, 0)
        if self.index_count == 0:
            self.index_count = 1
        # Every change ends with a header write, which counts it; a file differs from its
        # last sync while the counts differ. A file read back may be page cache only (after
        # a SIGKILL): it counts as changed until its first sync.
        self.changes = 1
        self.synced_changes = 0
        self.sync_lock = threading.Lock()

    @staticmethod
    def file_size(slot_count: int, entry_count: int) -> int:
        return HEADER_SIZE + slot_count * SLOT_SIZE + (entry_count + 1) * ENTRY_SIZE

    @classmethod
    def create(cls, path: str, slot_count: int, entry_count: int) -> IndexFile:
        size = cls.file_size(slot_count, entry_count)
        return cls(path, create_mapped(path, size), slot_count, entry_count)

    @classmethod
    def open(cls, path: str, slot_count: int, entry_count: int) -> IndexFile:
        size = cls.file_size(slot_count, entry_count)
        fd = os.open(path, os.O_RDWR)
        try:
            if os.fstat(fd).st_size != size:
                raise ValueError(f"{path} is not an index file of {slot_count}/{entry_count}")
            map_ = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return cls(path, map_, slot_count, entry_count)

    @property
    def is_full(self) -> bool:
        return self.index_count > self.entry_count

    def put(self, key_hash: int, physical_offset: int, store_timestamp_ms: int) -> bool:
        """Add one key; False when the file is full (the caller rolls a new one)."""
        if self.index_count > self.entry_count:
            return False
        if self.index_count == 1:
            self.begin_timestamp_ms = store_timestamp_ms
            self.begin_physical_offset = physical_offset
        slot_at = HEADER_SIZE + (key_hash % self.slot_count) * SLOT_SIZE
        (previous,) = SLOT.unpack_from(self.map, slot_at)
        number = self.index_count
        if previous >= number:
            previous = self._last_counted(previous)
        if previous <= 0:
            previous = 0
            self.used_slot_count += 1
        delta_s = max(0, (store_timestamp_ms - self.begin_timestamp_ms) // 1000)
        ENTRY.pack_into(
            self.map,
            HEADER_SIZE + self.slot_count * SLOT_SIZE + number * ENTRY_SIZE,
            key_hash - (1 << 32) if key_hash & 0x80000000 else key_hash,
            physical_offset,
            delta_s,
            previous,
        )
        SLOT.pack_into(self.map, slot_at, number)
        self.index_count = number + 1
        self.end_timestamp_ms = store_timestamp_ms
        return True

    def put_all(self, keys: bytes) -> None:
        """``put`` for many keys at once (``INDEX_KEY`` rows): every entry is written
        with one copy, then each slot touched once (its newest entry), so the write order
        stays entries, slots, header (written by the caller, who has checked that they
        all fit). The loop is C (``index_put_all``, whose twin is ``put_all_in_python``)."""
        if not keys:
            return
        if self.index_count == 1:
            self.begin_physical_offset, _, self.begin_timestamp_ms, _ = INDEX_KEY.unpack_from(
                keys, 0
            )
        self.index_count, self.used_slot_count = speedups.index_put_all(
            self.map,
            self.slot_count,
            self.entry_count,
            self.index_count,
            self.used_slot_count,
            self.begin_timestamp_ms,
            keys,
        )
        self.end_timestamp_ms = INDEX_KEY.unpack_from(keys, len(keys) - INDEX_KEY.size)[2]

    def put_all_in_python(self, keys: bytes) -> None:
        """What ``put_all`` does, in Python: the specification its C loop is tested against."""
        entries = [
            (key_hash, physical, stored_ms)
            for physical, _, stored_ms, key_hash in INDEX_KEY.iter_unpack(keys)
        ]
        count = len(entries)
        assert self.index_count + count - 1 <= self.entry_count, "index file overflow"
        if not count:
            return
        if self.index_count == 1:
            _, self.begin_physical_offset, self.begin_timestamp_ms = entries[0]
        buffer = self.map
        slot_count = self.slot_count
        entries_at = HEADER_SIZE + slot_count * SLOT_SIZE
        begin_ms = self.begin_timestamp_ms
        read_slot = SLOT.unpack_from
        first = number = self.index_count
        used = self.used_slot_count
        newest: dict[int, int] = {}  # slot position -> newest entry number written here
        values: list[int] = []
        add = values.extend
        for key_hash, physical_offset, store_timestamp_ms in entries:
            slot_at = HEADER_SIZE + (key_hash % slot_count) * SLOT_SIZE
            previous = newest.get(slot_at)
            if previous is None:
                (previous,) = read_slot(buffer, slot_at)
                if previous >= first:  # past the counted entries: see _last_counted
                    previous = self._last_counted(previous)
                if previous <= 0:
                    previous = 0
                    used += 1
            newest[slot_at] = number
            delta_s = (store_timestamp_ms - begin_ms) // 1000
            if delta_s > 0x7FFFFFFF:
                raise OverflowError("an entry's seconds do not fit 32 bits")
            add(
                (
                    key_hash - (1 << 32) if key_hash & 0x80000000 else key_hash,
                    physical_offset,
                    delta_s if delta_s > 0 else 0,
                    previous,
                )
            )
            number += 1
        buffer[entries_at + first * ENTRY_SIZE : entries_at + number * ENTRY_SIZE] = entries_struct(
            count
        ).pack(*values)
        write_slot = SLOT.pack_into
        for slot_at, entry_number in newest.items():
            write_slot(buffer, slot_at, entry_number)
        self.index_count = number
        self.used_slot_count = used
        self.end_timestamp_ms = entries[-1][2]

    def _last_counted(self, number: int) -> int:
        """A slot can point past ``index_count`` when a process died after writing a
        batch's entries but before its header: those entries are rewritten by the replay.
        Their ``previous`` links still lead to older, counted entries of the chain — follow
        them rather than cut the chain, which would lose every older key in this slot."""
        entries_at = HEADER_SIZE + self.slot_count * SLOT_SIZE
        while number >= self.index_count:
            if number > self.entry_count:
                return 0  # not an entry number at all: the link is garbage
            previous = ENTRY.unpack_from(self.map, entries_at + number * ENTRY_SIZE)[3]
            if not 0 <= previous < number:
                return 0
            number = previous
        return number

    def repair_uncounted_slots(self) -> int:
        """After a crash: point every slot that names an uncounted entry at the newest
        counted entry of its chain (``_last_counted``); returns how many were repaired.

        Why it must happen before the next write: recovery may replay from a point
        before the dead batch (the checkpoint), so the replay's first entries take the
        dead entries' numbers. A slot still naming one of those numbers would then lead
        its chain into another slot's, and every older key of that slot would vanish
        from lookups (found by the SIGKILL test: a unique key the index no longer found).
        ``put`` and ``put_all`` only follow such a link while its number is still past
        the count, which a replay of more than one batch soon makes untrue."""
        count = self.index_count
        slots = array.array("i", self.map[HEADER_SIZE : HEADER_SIZE + self.slot_count * SLOT_SIZE])
        if sys.byteorder == "little":
            slots.byteswap()  # slots are big-endian on disk
        if not slots or max(slots) < count:
            return 0  # the common case, one pass in C: no slot names a dead entry
        repaired = 0
        for slot, number in enumerate(slots):
            if number >= count:
                SLOT.pack_into(self.map, HEADER_SIZE + slot * SLOT_SIZE, self._last_counted(number))
                repaired += 1
        return repaired

    def write_header(self, end_physical_offset: int) -> None:
        self.end_physical_offset = end_physical_offset
        self.changes += 1
        HEADER.pack_into(
            self.map,
            0,
            self.begin_timestamp_ms,
            self.end_timestamp_ms,
            self.begin_physical_offset,
            self.end_physical_offset,
            self.used_slot_count,
            self.index_count,
        )

    def lookup(self, key_hash: int, begin_ms: int, end_ms: int, limit: int) -> list[int]:
        """Physical offsets of entries whose hash matches, newest first (unverified)."""
        signed = key_hash - (1 << 32) if key_hash & 0x80000000 else key_hash
        (number,) = SLOT.unpack_from(self.map, HEADER_SIZE + (key_hash % self.slot_count) * 4)
        entries_at = HEADER_SIZE + self.slot_count * SLOT_SIZE
        found: list[int] = []
        bound = self.index_count
        while 0 < number < bound and len(found) < limit:
            entry_hash, physical, delta_s, previous = ENTRY.unpack_from(
                self.map, entries_at + number * ENTRY_SIZE
            )
            stored_ms = self.begin_timestamp_ms + delta_s * 1000
            if stored_ms + 1000 <= begin_ms:
                break  # the chain is newest-first: everything further is older
            if entry_hash == signed and stored_ms <= end_ms:
                found.append(physical)
            bound = number
            number = previous
        return found

    def flush(self) -> None:
        """Sync the file. One sync at a time per file (``sync_lock``): the flusher and a
        truncation both sync, and the chaos ledger's copy of the file must be the one
        taken before the sync that finished last (two at once renamed one copy twice)."""
        # fdatasync, not mmap.flush: see MappedFile.flush (msync holds the GIL).
        with self.sync_lock:
            changes = self.changes  # read first: a change during the sync stays unsynced
            try:
                fd = os.open(self.path, os.O_RDWR)
            except FileNotFoundError:
                return  # deleted by retention meanwhile: nothing to keep
            pending = sync_ledger.copy_before_sync(self.path)  # the chaos suite's power loss
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
            sync_ledger.copy_synced(pending)
            self.synced_changes = changes

    def delete(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
