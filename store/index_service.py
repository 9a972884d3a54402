"""IndexService: the rolling set of IndexFiles and the queries over them.

Keys indexed per message: ``topic#key`` for each of KEYS and for UNIQ_KEY. The newest file
takes writes; a full file is closed and a new one named by the store time of the record
that overflowed it is created (names increase, so sorting names restores the order).

Invariants: files are ordered by creation and their physical ranges do not overlap; a
record whose offset is below the newest file's ``end_physical_offset`` is already indexed,
which makes ``put`` idempotent for the dispatcher's replays.

Thread-safety: written under the store's put lock; queries are lock-free on a snapshot.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from store import hashing
from store.hashing import index_key_hash
from store.index_file import INDEX_KEY, IndexFile, index_file_name


class IndexService:
    def __init__(self, directory: str, slot_count: int, entry_count: int) -> None:
        self.directory = directory
        self.slot_count = slot_count
        self.entry_count = entry_count
        self.files: tuple[IndexFile, ...] = ()
        os.makedirs(directory, exist_ok=True)

    def load(self, crashed: bool = False) -> None:
        """Open the files on disk. After a crash (``crashed``), no slot may keep naming an
        entry its file's header does not count (``IndexFile.repair_uncounted_slots``):
        the newest file can hold a batch whose header was never written, and a power loss
        can bring back any file's copy synced while it was the newest."""
        names = sorted(n for n in os.listdir(self.directory) if n.isdigit() and len(n) == 17)
        files = []
        for name in names:
            path = os.path.join(self.directory, name)
            if os.path.getsize(path) == 0:
                # The process died inside ``create_mapped``, between creating the file and
                # reserving its space: it holds nothing, and the replay from the checkpoint
                # creates it again. Opening it would refuse it (wrong size) and the store.
                os.unlink(path)
                continue
            index_file = IndexFile.open(path, self.slot_count, self.entry_count)
            if crashed:
                index_file.repair_uncounted_slots()
            files.append(index_file)
        self.files = tuple(files)

    @property
    def end_physical_offset(self) -> int:
        files = self.files
        return files[-1].end_physical_offset if files else 0

    def _writable(self, now_ms: int, indexed_below: int | None = None) -> IndexFile:
        """The file that takes the next entry. A new file's header starts at
        ``indexed_below`` (default: where the previous file ends): it claims no record
        at or past it until ``put_records`` writes its final header."""
        files = self.files
        if files and not files[-1].is_full:
            return files[-1]
        name_ms = now_ms
        while os.path.exists(os.path.join(self.directory, index_file_name(name_ms))):
            name_ms += 1
        created = IndexFile.create(
            os.path.join(self.directory, index_file_name(name_ms)),
            self.slot_count,
            self.entry_count,
        )
        if indexed_below is None and files:
            indexed_below = files[-1].end_physical_offset
        if indexed_below is not None:
            created.write_header(indexed_below)
        self.files = (*files, created)
        return created

    @staticmethod
    def key_hash_override() -> Callable[[bytes], int] | None:
        """The key hash when it is not ``hashing.index_key_hash`` (tests replace it to
        force collisions), for the dispatch plan; None: the plan hashes in C."""
        return None if index_key_hash is hashing.index_key_hash else index_key_hash

    def put_records(self, keys: bytes) -> None:
        """Index the keys of consecutive records (``INDEX_KEY`` rows, hashed by the
        dispatch plan), writing the header once at the end. Records below the newest
        file's end offset were indexed before and are skipped."""
        if not keys:
            return
        files = self.files
        skip_below = files[-1].end_physical_offset if files else 0
        if INDEX_KEY.unpack_from(keys, 0)[0] < skip_below:  # a replay: rows are in log order
            taken = next(
                (
                    i
                    for i, (physical, _, _, _) in enumerate(INDEX_KEY.iter_unpack(keys))
                    if physical >= skip_below
                ),
                len(keys) // INDEX_KEY.size,
            )
            keys = keys[taken * INDEX_KEY.size :]
            if not keys:
                return
        count = len(keys) // INDEX_KEY.size
        last_physical, last_size, _, _ = INDEX_KEY.unpack_from(keys, len(keys) - INDEX_KEY.size)
        if files and not files[-1].is_full:
            # The common case: every key fits the newest file, written in one pass
            # (``put_all``); rolling to a new file takes the careful path below.
            target = files[-1]
            if target.index_count + count - 1 <= target.entry_count:
                target.put_all(keys)
                target.write_header(last_physical + last_size)
                return
        target: IndexFile | None = None
        for physical, size, stored_ms, key_hash in INDEX_KEY.iter_unpack(keys):
            if target is None:
                target = self._writable(stored_ms)
            if not target.put(key_hash, physical, stored_ms):
                # The full file holds every key of the records before this one, and
                # maybe some of this one's. Its header claims only the former until
                # the next file exists: if creating that file fails (ENOSPC) or the
                # process dies first, the replay must not skip this record, or its
                # remaining keys are never indexed.
                target.write_header(physical)
                full = target
                # The new file must not claim this record before its final header:
                # after a crash in between, the replay (which skips records below
                # the newest file's end) would skip it and lose the keys that went
                # into the new file. Keys already in the full file are then indexed
                # twice; queries drop duplicate offsets.
                target = self._writable(stored_ms, indexed_below=physical)
                # Now the new file decides the replay; the full one keeps this record's
                # keys it holds until retention removes the record.
                full.write_header(physical + size)
                # Put, then checked: inside an ``assert`` (stripped under ``python
                # -O``) the put itself vanished, and this key was never indexed.
                put = target.put(key_hash, physical, stored_ms)
                assert put, "a new index file refused its first key"
        assert target is not None
        target.write_header(last_physical + last_size)

    def lookup(self, topic: str, key: str, begin_ms: int, end_ms: int, limit: int) -> list[int]:
        """Candidate physical offsets for ``topic#key`` in the time range, newest first.
        Unverified: the caller must check the record's real topic and keys."""
        key_hash = index_key_hash(f"{topic}#{key}".encode())
        # Every file is asked: a crash between a file filling up and the next one taking
        # over leaves a record's keys in both (see ``put_records``), so files are not
        # disjoint and a per-file cut-off could drop newer hits. Merged, deduplicated and
        # sorted, the answer is newest first whatever the files hold.
        found: set[int] = set()
        for f in self.files:
            if f.index_count <= 1:
                continue
            if f.end_timestamp_ms < begin_ms or f.begin_timestamp_ms > end_ms:
                continue
            found.update(f.lookup(key_hash, begin_ms, end_ms, limit))
        return sorted(found, reverse=True)[:limit]

    def truncate_physical(self, physical_end: int) -> None:
        """Forget index files that start at or past ``physical_end``. Entries of the last
        file that point past it stay but are harmless: lookups verify every hit.

        The lowered end is forced to disk at once: records of another history will be
        written past the cut, and a power loss that brought back an older header (which
        says they are indexed) made recovery skip indexing them (found by a random
        power-loss test)."""
        keep = [
            f for f in self.files if f.index_count <= 1 or f.begin_physical_offset < physical_end
        ]
        for f in self.files:
            if f not in keep:
                f.delete()
        if keep and keep[-1].end_physical_offset > physical_end:
            keep[-1].write_header(physical_end)
            keep[-1].flush()
        self.files = tuple(keep)

    def delete_expired_files(self, commitlog_min: int) -> int:
        files = self.files
        doomed = []
        for f in files[:-1]:  # oldest first; stop at the first file still needed
            if f.end_physical_offset > commitlog_min:
                break
            doomed.append(f)
        if doomed:
            self.files = files[len(doomed) :]
            for f in doomed:
                f.delete()
        return len(doomed)

    def flush(self) -> None:
        """Force every file changed since its last sync: several can be, when the index
        rolled more than once between two flushes."""
        for f in self.files:
            if f.changes != f.synced_changes:
                f.flush()
