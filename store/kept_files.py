"""Bytes of the CommitLog kept aside before the log is cut, so that a cut never destroys
the only copy of a message: the tail a rejoining node cuts (``ha/rollback.py``) and the
range recovery cuts after an invalid record (``store/damaged_ranges.py``).

A kept file is written under a temporary name, forced to disk, renamed into place and its
directory forced too, so a crash leaves no file or a whole one. Every keep is bounded: at
most ``MAX_KEPT_BYTES``, and only while the disk stays under the store's high-water mark.
Files older than the CommitLog's retention expire like its segments.

Thread-safety: a keep writes only its own temporary file; ``remove_expired`` with
``partial`` takes every temporary file, so the owner calls it only when no keep runs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterable, Iterator

from ferrymq.codec import commitlog_record as record
from ferrymq.codec.commitlog_record import StoredMessage

LOG_SUFFIX = ".log"
TEMPORARY_SUFFIX = ".tmp"
# A keep never copies a whole disk: an ASYNC tail is bounded by the slaves' allowed lag
# (256 MiB by default), a damaged range by the segments recovery scans (one after a clean
# shutdown, 1 GiB by default).
MAX_KEPT_BYTES = 1 << 30


def keep(
    directory: str,
    name: str,
    chunks: Iterable[bytes],
    size: int,
    high_water: float,
    mode: int = 0o644,
) -> int:
    """Write ``chunks`` (about ``size`` bytes) to ``directory/name`` the crash-safe way,
    a new file of permissions ``mode``; the bytes written. ``OSError`` when it cannot be
    kept (nothing is left behind)."""
    path = os.path.join(directory, name)
    temporary = path + TEMPORARY_SUFFIX
    os.makedirs(directory, exist_ok=True)
    disk = shutil.disk_usage(directory)
    if disk.used + size > disk.total * high_water:
        raise OSError(f"{size} bytes would pass the disk's high-water mark")
    written = 0
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(descriptor, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
                written += len(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
        sync_directory(directory)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)  # a full disk must not stay fuller for it
        raise
    return written


def write_atomically(path: str, data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` (a file of permissions ``mode``): whole or not at
    all after a crash."""
    directory = os.path.dirname(path)
    keep(directory, os.path.basename(path), (data,), 0, 1.0, mode)


def sync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def files_in(directory: str, suffix: str = LOG_SUFFIX) -> list[str]:
    """The kept files of ``directory``, by name (names start with an offset or epoch)."""
    if not os.path.isdir(directory):
        return []
    names = sorted(n for n in os.listdir(directory) if n.endswith(suffix))
    return [os.path.join(directory, n) for n in names]


def remove_expired(
    directory: str, retention_s: float, *, partial: bool = False, suffixes: tuple[str, ...] = ()
) -> list[str]:
    """Remove the kept files (``.log`` and ``suffixes``) older than the retention and, with
    ``partial`` (only when no keep runs), the ones a crash left half-written. Returns the
    removed paths."""
    if not os.path.isdir(directory):
        return []
    now = time.time()
    kinds = (LOG_SUFFIX, *suffixes)
    removed = []
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        with contextlib.suppress(FileNotFoundError):  # a keep beside us removed it first
            if (partial and name.endswith(TEMPORARY_SUFFIX)) or (
                name.endswith(kinds) and now - os.path.getmtime(path) > retention_s
            ):
                os.unlink(path)
                removed.append(path)
    return removed


def records_in(path: str) -> Iterator[StoredMessage]:
    """The messages of a kept file of whole records, in log order (blank fillers
    skipped); ``ValueError`` naming the byte where it holds no whole record."""
    with open(path, "rb") as f:
        data = f.read()
    position = 0
    while position + record.BLANK_MIN_SIZE <= len(data):
        size, magic = record.SIZE_AND_MAGIC.unpack_from(data, position)
        if size <= 0 or position + size > len(data):
            raise ValueError(f"{path}: no whole record at byte {position}")
        if magic == record.MESSAGE_MAGIC:
            check = record.check_at(data, position, len(data))
            if check.size != size:  # validated here: ``decode`` trusts what it is given
                raise ValueError(f"{path}: invalid record at byte {position}: {check.reason}")
            yield record.decode(data, position)
        elif magic != record.BLANK_MAGIC:
            raise ValueError(f"{path}: no record at byte {position} (magic {magic:#x})")
        position += size
