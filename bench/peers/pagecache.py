"""Reading a backlog cold: the systems' data files out of the page cache first.

Every system here maps its log files (ferrymq's and Apache RocketMQ's CommitLog, Kafka's
indexes) and the kernel never evicts a page a process has mapped: neither
``/proc/sys/vm/drop_caches`` nor ``posix_fadvise(DONTNEED)`` touch them. So a cold read
stops the system's nodes first (gracefully, so that each writes what it keeps in
memory), then evicts their files with ``posix_fadvise(POSIX_FADV_DONTNEED)`` after
``fdatasync`` (no root needed, only files this user can open; dirty pages are never
dropped, hence the sync), falling back on ``drop_caches`` (root, and a /proc/sys that is
not read-only; the whole machine's cache) only when pages remain, then restarts the
nodes. ``resident_fraction`` (the
``mincore`` of each file) says how much of the data was still in memory when the read
began, so that the figure is labelled with what it measured.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from collections.abc import Iterable

DROP_CACHES = "/proc/sys/vm/drop_caches"


def data_files(directories: Iterable[str]) -> list[str]:
    """Every regular file under ``directories``."""
    found = []
    for directory in directories:
        for root, _, names in os.walk(directory):
            for name in names:
                path = os.path.join(root, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    found.append(path)
    return sorted(found)


def drop_caches(path: str = DROP_CACHES) -> str:
    """Write ``1`` (the page cache) to ``drop_caches`` after a ``sync``: "" when done,
    else why not, in one line."""
    os.sync()
    try:
        with open(path, "w", encoding="ascii") as f:
            f.write("1\n")
        return ""
    except OSError as error:
        return f"{path} not writable here ({error.strerror or error})"


def fadvise_dontneed(paths: Iterable[str]) -> tuple[int, int]:
    """``fdatasync`` then ``POSIX_FADV_DONTNEED`` on each file: (files done, bytes)."""
    files = size = 0
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            files += 1
            size += os.fstat(fd).st_size
        except OSError:
            pass
        finally:
            os.close(fd)
    return files, size


_libc = None


def _mincore():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _libc.mmap.restype = ctypes.c_void_p
        _libc.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        ]
        _libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    return _libc


def resident_pages(path: str) -> tuple[int, int]:
    """(pages of ``path`` in the page cache, pages in all), by ``mincore`` on a mapping
    that is never touched."""
    size = os.path.getsize(path)
    if size == 0:
        return 0, 0
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    libc = _mincore()
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            return 0, pages
        try:
            vector = ctypes.create_string_buffer(pages)
            if libc.mincore(address, size, vector) != 0:
                return 0, pages
            return sum(byte & 1 for byte in vector.raw), pages
        finally:
            libc.munmap(address, size)
    finally:
        os.close(fd)


def resident(paths: Iterable[str]) -> tuple[int, int]:
    """(pages of the files in the page cache, pages in all)."""
    cached = total = 0
    for path in paths:
        try:
            found, pages = resident_pages(path)
        except OSError:
            continue
        cached += found
        total += pages
    return cached, total


def resident_fraction(paths: Iterable[str]) -> float | None:
    """The fraction of the files' pages in the page cache (None when there are none)."""
    cached, total = resident(paths)
    return round(cached / total, 3) if total else None


def resident_mb(paths: Iterable[str]) -> float:
    """MB of the files in the page cache."""
    return round(resident(paths)[0] * mmap.PAGESIZE / 1e6, 1)


def evict(directories: Iterable[str], residue: float = 0.01) -> dict:
    """Out of the page cache, the nodes stopped first: ``posix_fadvise`` on every file
    (only these files, nothing else of the machine's), and ``drop_caches`` only when more
    than ``residue`` of the pages are still resident after it. What was done, and the
    fraction of the files' pages resident afterwards."""
    files = data_files(list(directories))
    done, size = fadvise_dontneed(files)
    resident = resident_fraction(files)
    dropped = "not needed"
    if resident is not None and resident > residue:
        dropped = drop_caches() or "done"
        resident = resident_fraction(files)
    return {
        "fadvise_dontneed_files": done,
        "data_bytes": size,
        "drop_caches": dropped,
        "resident_after_evict": resident,
    }
