"""One fixed-size, memory-mapped segment file.

Invariant: a mapped file is named after its base offset (20 zero-padded digits) and covers
the logical byte range ``[base_offset, base_offset + size)`` of the queue it belongs to.
Its space is reserved with ``posix_fallocate`` when it is created, so a full disk is
reported as ``DiskFullError`` at creation, never as a SIGBUS while writing into the map.
Bytes past the written position read as zeros; recovery relies on that to find the end.

Thread-safety: one writer (the owner of the store's put lock, or recovery) at a time;
readers may slice concurrently. The map stays valid for as long as anyone holds a
reference, so deleting a file never invalidates a read in progress.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os

from store import sync_ledger
from store.errors import DiskFullError

PAGE_SIZE = mmap.PAGESIZE
OFFSET_NAME_DIGITS = 20
WARM_CHUNK_BYTES = 1 << 20


def file_name_of(offset: int) -> str:
    """The 20-digit name of the file whose base offset is ``offset``."""
    return f"{offset:0{OFFSET_NAME_DIGITS}d}"


_LIBC = ctypes.CDLL(None, use_errno=True)
_FALLOCATE = getattr(_LIBC, "fallocate64", None) or _LIBC.fallocate
_FALLOCATE.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
_FALLOCATE.restype = ctypes.c_int
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02


def punch_zeros(fd: int, start: int, length: int) -> None:
    """Make ``length`` bytes from ``start`` read as zeros without changing the file's size:
    a hole punched (the kernel drops the pages at once), or zeros written where the file
    system cannot punch holes. Never by shortening the file: a page past a file's end is
    SIGBUS for a thread reading it through a map, and other threads may be."""
    if _FALLOCATE(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, start, length) == 0:
        return
    error = ctypes.get_errno()
    if error not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
        raise OSError(error, os.strerror(error))
    zeros = bytes(min(length, WARM_CHUNK_BYTES))
    for position in range(start, start + length, len(zeros)):
        os.pwrite(fd, zeros[: start + length - position], position)


def reserve_space(fd: int, start: int, length: int) -> None:
    try:
        os.posix_fallocate(fd, start, length)
    except OSError as error:
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(f"no space to reserve {length} bytes") from error
        if error.errno in (errno.EOPNOTSUPP, errno.EINVAL):
            # File systems without fallocate: fall back to a sparse extension.
            os.ftruncate(fd, start + length)
            return
        raise


def create_mapped(path: str, size: int, *, warm: bool = False) -> mmap.mmap:
    """Create ``path`` with ``size`` bytes reserved on disk and map it; on any failure
    (``DiskFullError`` among them) no file is left behind.

    ``warm`` writes real zeros over the whole file and waits for them to reach the disk
    (RocketMQ's warm-up of mapped files). Later fsyncs then rewrite blocks that already
    exist instead of converting reserved ("unwritten") extents, which the file system
    must journal: measured here, a sustained fdatasync of 70 KB drops from ~1.0 ms to
    ~0.56 ms. It costs one extra write of the file to the disk, done off the hot path but
    not free (the host's writeback of the zeros): only a store whose sends wait for
    fdatasync (SYNC_FLUSH) asks for it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        reserve_space(fd, 0, size)
        if warm:
            zeros = bytes(min(size, WARM_CHUNK_BYTES))
            for position in range(0, size, len(zeros)):
                os.pwrite(fd, zeros[: size - position], position)
            os.fdatasync(fd)
        return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(fd)


class MappedFile:
    """A segment of a :class:`~store.mapped_file_queue.MappedFileQueue`."""

    __slots__ = (
        "_write_fd",
        "base_offset",
        "flushed_position",
        "map",
        "path",
        "size",
        "wrote_position",
    )

    def __init__(self, path: str, base_offset: int, size: int, map_: mmap.mmap) -> None:
        self.path = path
        self.base_offset = base_offset
        self.size = size
        self.map = map_
        # Positions are relative to base_offset; owned by the writer / flusher.
        self.wrote_position = 0
        self.flushed_position = 0
        self._write_fd: int | None = None  # opened by the first append_at, for the writer

    @classmethod
    def create(
        cls, directory: str, base_offset: int, size: int, *, warm: bool = False
    ) -> MappedFile:
        """Create and reserve a new, zero-filled file. Raises ``DiskFullError``."""
        path = os.path.join(directory, file_name_of(base_offset))
        return cls(path, base_offset, size, create_mapped(path, size, warm=warm))

    @classmethod
    def open(cls, path: str, size: int) -> MappedFile:
        """Map an existing file; a short file (crash during creation) is extended."""
        base_offset = int(os.path.basename(path))
        fd = os.open(path, os.O_RDWR)
        try:
            actual = os.fstat(fd).st_size
            if actual < size:
                reserve_space(fd, actual, size - actual)
            map_ = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        return cls(path, base_offset, size, map_)

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.size

    def write_at(self, position: int, data: bytes | memoryview) -> None:
        """Copy ``data`` at ``position``; the caller owns the write position."""
        end = position + len(data)
        assert position >= 0 and end <= self.size, (position, len(data), self.size)
        self.map[position:end] = data

    def append_at(self, position: int, data: bytes | memoryview) -> None:
        """Copy ``data`` at ``position`` with ``pwrite`` rather than through the map: for
        the large sequential appends of a log. A store through the map faults each new page
        in first, and for a reserved (unwritten) extent the kernel zeroes it (readahead
        zeroes a whole large folio) before the copy overwrites it; ``pwrite`` copies into
        the page cache, zeroing only the part of a page the write does not cover. Readers
        see the bytes through the map at once (one page cache). A disk that is full after
        all (no ``fallocate`` here) is ``DiskFullError``, never SIGBUS. The caller owns the
        write position; the descriptor stays open until :meth:`release_writer` (the queue
        releases it when it rolls to the next file)."""
        end = position + len(data)
        assert position >= 0 and end <= self.size, (position, len(data), self.size)
        fd = self.writer_fd()
        view = memoryview(data)
        start = position
        try:
            while view:
                written = os.pwrite(fd, view, position)
                view = view[written:]
                position += written
        except OSError as error:
            if error.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            # Nothing of a refused append may stay past the write position: a part written
            # before the disk filled is zeroed again (its pages exist, so this cannot fail).
            os.pwrite(fd, bytes(position - start), start)
            raise DiskFullError(f"no space to write {len(data)} bytes") from error

    def writer_fd(self) -> int:
        """The descriptor appends write through (opened on first use, closed by
        :meth:`release_writer`): ``append_at``'s, and a slave's replica lane's."""
        if self._write_fd is None:
            self._write_fd = os.open(self.path, os.O_WRONLY)
        return self._write_fd

    def drop_cached(self, start: int, end: int) -> None:
        """Give ``[start, end)`` (flushed bytes) back to the kernel's free memory: unmapped
        from this process, then dropped from the page cache. The bytes stay on disk; a read
        of them afterwards faults them in again. Pages still dirty are not dropped (the
        kernel keeps them), so this never loses a write; callers pass flushed ranges so that
        it frees them."""
        assert 0 <= start <= end <= self.size, (start, end, self.size)
        start -= start % PAGE_SIZE
        if start == end:
            return
        self.map.madvise(mmap.MADV_DONTNEED, start, end - start)
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return  # deleted by retention meanwhile: its pages go with the last map
        try:
            os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)

    def release_writer(self) -> None:
        """Close the descriptor :meth:`append_at` opened; the next append reopens it."""
        fd, self._write_fd = self._write_fd, None
        if fd is not None:
            os.close(fd)

    def read(self, position: int, length: int) -> bytes:
        assert position >= 0 and position + length <= self.size, (position, length)
        return self.map[position : position + length]

    def flush(self, up_to: int | None = None) -> int:
        """Force ``[flushed_position, up_to)`` to disk; returns the new flushed position.

        Uses ``fdatasync`` on the file rather than ``mmap.flush``: CPython runs ``msync``
        while holding the GIL, which would stall every other thread (and the node's event
        loop) for the whole fsync. On Linux pages written through a shared map are page-cache
        pages of the file, so ``fdatasync`` forces them just as ``msync(MS_SYNC)`` does."""
        target = self.wrote_position if up_to is None else up_to
        if target > self.flushed_position:
            try:
                fd = os.open(self.path, os.O_RDWR)
            except FileNotFoundError:
                return self.flushed_position  # deleted by retention meanwhile
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
            sync_ledger.record(self.path, target)
            self.flushed_position = target
        return self.flushed_position

    def zero_from(self, position: int) -> None:
        """Discard every byte from ``position`` to the end (truncation after a crash or a
        diverged replica): a hole punched and reserved again, O(1) instead of writing a
        segment's worth of zeros. The file never gets shorter, not even for an instant:
        a slave cuts its tail while consumers may still be reading it through the map,
        and cutting the file then extending it again killed such nodes with SIGBUS."""
        assert 0 <= position <= self.size
        fd = os.open(self.path, os.O_RDWR)
        try:
            if position < self.size:
                punch_zeros(fd, position, self.size - position)
                reserve_space(fd, position, self.size - position)
            os.fsync(fd)
        finally:
            os.close(fd)
        sync_ledger.record(self.path, position)
        self.wrote_position = min(self.wrote_position, position)
        self.flushed_position = min(self.flushed_position, position)

    def is_zero_at(self, position: int, length: int) -> bool:
        chunk = self.map[position : position + length]
        return chunk.count(0) == len(chunk)

    def delete(self) -> None:
        """Unlink the file. The map itself is released when the last reader drops it."""
        self.release_writer()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
