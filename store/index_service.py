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

from store.dispatch_request import DispatchRequest
from store.hashing import index_key_hash
from store.index_file import IndexFile, index_file_name


class IndexService:
    def __init__(self, directory: str, slot_count: int, entry_count: int) -> None:
        self.directory = directory
        self.slot_count = slot_count
        self.entry_count = entry_count
        self.files: tuple[IndexFile, ...] = ()
        os.makedirs(directory, exist_ok=True)

    def load(self) -> None:
        names = sorted(n for n in os.listdir(self.directory) if n.isdigit() and len(n) == 17)
        self.files = tuple(
            IndexFile.open(os.path.join(self.directory, n), self.slot_count, self.entry_count)
            for n in names
        )

    @property
    def end_physical_offset(self) -> int:
        files = self.files
        return files[-1].end_physical_offset if files else 0

    def _writable(self, now_ms: int) -> IndexFile:
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
        if files:
            created.write_header(files[-1].end_physical_offset)
        self.files = (*files, created)
        return created

    def put_batch(self, requests: list[DispatchRequest]) -> None:
        """Index every key of consecutive records, writing the header once at the end.
        Records below the newest file's end offset were indexed before and are skipped."""
        files = self.files
        skip_below = files[-1].end_physical_offset if files else 0
        target: IndexFile | None = None
        last = None
        for request in requests:
            if not request.keys or request.physical_offset < skip_below:
                continue
            if target is None:
                target = self._writable(request.store_timestamp_ms)
            prefix = request.topic + "#"
            for key in request.keys:
                key_hash = index_key_hash((prefix + key).encode())
                if not target.put(key_hash, request.physical_offset, request.store_timestamp_ms):
                    # The full file holds entries up to this record (maybe some of its keys).
                    target.write_header(request.physical_offset + request.size)
                    target = self._writable(request.store_timestamp_ms)
                    assert target.put(key_hash, request.physical_offset, request.store_timestamp_ms)
            last = request
        if target is not None and last is not None:
            target.write_header(last.physical_offset + last.size)

    def lookup(self, topic: str, key: str, begin_ms: int, end_ms: int, limit: int) -> list[int]:
        """Candidate physical offsets for ``topic#key`` in the time range, newest first.
        Unverified: the caller must check the record's real topic and keys."""
        key_hash = index_key_hash(f"{topic}#{key}".encode())
        found: list[int] = []
        for f in reversed(self.files):
            if len(found) >= limit:
                break
            if f.index_count <= 1:
                continue
            if f.end_timestamp_ms < begin_ms or f.begin_timestamp_ms > end_ms:
                continue
            found.extend(f.lookup(key_hash, begin_ms, end_ms, limit - len(found)))
        return found

    def truncate_physical(self, physical_end: int) -> None:
        """Forget index files that start at or past ``physical_end``. Entries of the last
        file that point past it stay but are harmless: lookups verify every hit."""
        keep = [
            f for f in self.files if f.index_count <= 1 or f.begin_physical_offset < physical_end
        ]
        for f in self.files:
            if f not in keep:
                f.delete()
        if keep and keep[-1].end_physical_offset > physical_end:
            keep[-1].write_header(physical_end)
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
        for f in self.files[-2:]:
            f.flush()
