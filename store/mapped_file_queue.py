"""A contiguous sequence of equally sized mapped files forming one logical byte space.

Invariants: files are sorted by base offset, each base is a multiple of ``file_size``,
and consecutive files are adjacent (``next.base == prev.base + file_size``), so the file
holding an offset is found by arithmetic, in O(1). Everything below ``write_offset`` is
written; everything below ``flushed_offset`` is on disk.

Thread-safety: one writer mutates (append, roll, truncate, delete) while holding the
owner's lock; readers use ``find`` on an immutable snapshot of the file tuple, so a roll
or a deletion never shows them a half-updated list. Flushes (any thread) and truncations
serialise on the queue's flush lock, so ``flushed_offset <= write_offset`` always.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from store.mapped_file import MappedFile

NEVER = 1 << 63  # an offset no file reaches: preallocation not armed
# Flushed bytes leave the page cache in steps this large: one madvise and one fadvise
# every few flushes rather than two syscalls per flush.
DROP_STEP_BYTES = 8 << 20


class MappedFileQueue:
    def __init__(
        self,
        directory: str,
        file_size: int,
        *,
        preallocate: bool = False,
        warm: bool = False,
        cache_bytes: int = 0,
    ) -> None:
        """``preallocate``: create the next file in the background before it is needed (the
        CommitLog does; consume queues, small and many, do not). ``warm``: write real
        zeros over each new file first (see ``MappedFile.create``). ``cache_bytes``: how
        much of what lies below the flushed offset stays in the page cache; older flushed
        bytes are dropped from it after each flush (0: the kernel decides, nothing is
        dropped). See :meth:`_drop_cached_behind`."""
        assert cache_bytes >= 0
        assert file_size > 0
        self.directory = directory
        self.file_size = file_size
        self.files: tuple[MappedFile, ...] = ()
        self.write_offset = 0
        self.flushed_offset = 0
        self._preallocates = preallocate
        self._warm = warm
        self._preallocate_at = NEVER
        self._allocator: ThreadPoolExecutor | None = None
        self._preallocated: tuple[int, Future[MappedFile]] | None = None
        self._flush_lock = threading.Lock()
        self._cache_bytes = cache_bytes
        self._cached_from = 0  # below it (and below the first file) nothing is kept cached
        os.makedirs(directory, exist_ok=True)

    # ---- loading -------------------------------------------------------------------
    def load(self) -> None:
        """Map every file of the directory; positions are set later by recovery."""
        names = sorted(n for n in os.listdir(self.directory) if n.isdigit())
        files = []
        for name in names:
            path = os.path.join(self.directory, name)
            if len(name) != 20:
                raise ValueError(f"unexpected file name in {self.directory}: {name}")
            files.append(MappedFile.open(path, self.file_size))
        for prev, nxt in itertools.pairwise(files):
            if nxt.base_offset != prev.base_offset + self.file_size:
                raise ValueError(f"gap between {prev.path} and {nxt.path}: files must be adjacent")
        for f in files:
            if f.base_offset % self.file_size:
                raise ValueError(f"{f.path} is not aligned to the file size {self.file_size}")
        self.files = tuple(files)

    # ---- lookup --------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        files = self.files
        return files[0].base_offset if files else self.write_offset

    def find(self, offset: int) -> MappedFile | None:
        """The file holding ``offset``, or None when it is outside every file."""
        files = self.files
        if not files:
            return None
        index = (offset - files[0].base_offset) // self.file_size
        if index < 0 or index >= len(files):
            return None
        found = files[index]
        assert found.base_offset <= offset < found.end_offset, (offset, found.path)
        return found

    @property
    def last(self) -> MappedFile | None:
        files = self.files
        return files[-1] if files else None

    # ---- writing -------------------------------------------------------------------
    def file_for_write(self, offset: int) -> MappedFile:
        """The file that will take bytes at ``offset``, rolling to a new file when the
        offset is at the end of the last one. Raises ``DiskFullError``."""
        last = self.last
        if last is not None and last.base_offset <= offset < last.end_offset:
            if offset >= self._preallocate_at:
                self._preallocate(last.end_offset)
            return last
        base = offset - offset % self.file_size
        assert last is None or base == last.end_offset, (offset, last.path if last else None)
        created = self._take_preallocated(base) or MappedFile.create(
            self.directory, base, self.file_size, warm=self._warm
        )
        if last is not None:
            last.wrote_position = last.size
            last.release_writer()
        self.files = (*self.files, created)
        self.arm_preallocation()
        return created

    def arm_preallocation(self) -> None:
        """Prepare the next file once the last one is half written: early enough that it
        is ready when needed, late enough that warming it does not compete with the
        first writes of the file just opened."""
        last = self.last
        if self._preallocates and last is not None:
            self._preallocate_at = last.base_offset + self.file_size // 2
        else:
            self._preallocate_at = NEVER

    def _take_preallocated(self, base: int) -> MappedFile | None:
        pending = self._preallocated
        self._preallocated = None
        if pending is None:
            return None
        pending_base, future = pending
        try:
            made = future.result()
        except Exception:
            return None  # e.g. the disk was full then; creating it now reports the error
        if pending_base == base:
            return made
        made.delete()
        return None

    def _preallocate(self, base: int) -> None:
        self._preallocate_at = NEVER
        if self._allocator is None:
            self._allocator = ThreadPoolExecutor(1, thread_name_prefix="allocate-segment")
        future = self._allocator.submit(
            MappedFile.create, self.directory, base, self.file_size, warm=self._warm
        )
        self._preallocated = (base, future)

    def discard_preallocated(self) -> None:
        pending = self._preallocated
        self._preallocated = None
        if pending is not None:
            with contextlib.suppress(Exception):
                pending[1].result().delete()

    # ---- flushing ------------------------------------------------------------------
    def flush(self, up_to: int | None = None) -> int:
        """Force written bytes up to ``up_to`` (default: all written) to disk."""
        with self._flush_lock:
            target = self.write_offset if up_to is None else min(up_to, self.write_offset)
            # Retention may have deleted files below the flushed offset's file (never
            # flushed, right after a restart): flushing starts at the first file left.
            start = max(self.flushed_offset, self.min_offset)
            if target <= start:
                return start
            offset = start
            while offset < target:
                f = self.find(offset)
                if f is None:
                    break
                end = min(target, f.end_offset)
                if f.flushed_position < offset - f.base_offset:
                    f.flushed_position = offset - f.base_offset
                f.flush(end - f.base_offset)
                offset = end
            assert offset <= self.write_offset, (offset, self.write_offset)
            self.flushed_offset = offset
            self._drop_cached_behind(offset)
            return offset

    def _drop_cached_behind(self, flushed: int) -> None:
        """Drop from the page cache the flushed bytes more than ``cache_bytes`` behind
        ``flushed``, in whole steps of ``DROP_STEP_BYTES``. Why: a log written without end
        otherwise takes a new page of memory for every 4 KiB it writes until the machine's
        memory is full, and where new memory is dear (a virtual machine whose free pages go
        back to its host: here 15 µs a page, against 1 µs for a page used before) that alone
        cost more CPU per message than the rest of the write. Pages given back are reused
        by the next writes. Readers of older bytes read them from disk, as they would once
        the kernel evicted them. Runs under the flush lock, after the flush, on the flushing
        thread."""
        if not self._cache_bytes:
            return
        target = flushed - self._cache_bytes
        target -= target % DROP_STEP_BYTES
        offset = max(self._cached_from, self.min_offset)
        while offset < target:
            f = self.find(offset)
            if f is None:
                break
            end = min(target, f.end_offset)
            f.drop_cached(offset - f.base_offset, end - f.base_offset)
            offset = end
        self._cached_from = max(self._cached_from, offset)

    # ---- truncation and deletion ---------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        """Drop every byte at or after ``offset``: later files are deleted, the file
        holding ``offset`` is zeroed from there. A file starting exactly at ``offset``
        stays, empty: when it was the only one, deleting it left no file to say where
        the data ends, and the next open started the offsets again from 0.

        Holds the flush lock: a flush whose target was read before the cut otherwise
        finished after it and set ``flushed_offset`` past the new end, so bytes later
        written there counted as flushed before any sync (found by chaos: a checkpoint
        then named an offset inside a record, and SYNC_FLUSH acknowledged unsynced
        sends)."""
        with self._flush_lock:
            self.discard_preallocated()
            keep = []
            for f in self.files:
                if f.base_offset <= offset:
                    keep.append(f)
                else:
                    f.delete()
            if keep:
                tail = keep[-1]
                if offset < tail.end_offset:
                    tail.zero_from(offset - tail.base_offset)
                    tail.wrote_position = offset - tail.base_offset
            self.files = tuple(keep)
            self.write_offset = offset
            self.flushed_offset = min(self.flushed_offset, offset)
            self._cached_from = min(self._cached_from, offset)

    def delete_first(self, count: int) -> list[MappedFile]:
        """Delete the ``count`` oldest files (retention); the last file always stays."""
        count = min(count, len(self.files) - 1)
        if count <= 0:
            return []
        doomed = list(self.files[:count])
        self.files = self.files[count:]
        for f in doomed:
            f.delete()
        return doomed

    def delete_all(self) -> None:
        self.discard_preallocated()
        for f in self.files:
            f.delete()
        self.files = ()

    def close(self) -> None:
        self.discard_preallocated()
        for f in self.files:
            f.release_writer()
        if self._allocator is not None:
            self._allocator.shutdown(wait=True)
            self._allocator = None
