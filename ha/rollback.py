"""What a deposed master had that its successor never received: the tail a rejoining node
cuts from its CommitLog, kept in ``<data>/rollback/`` before the cut.

Under ASYNC replication a failover loses the records the elected slave had not received
(docs/guarantees.md). They are gone from the cluster but were on the disk of the node that
wrote them: keeping them lets an operator see exactly which messages a failover dropped
(and send them again), and lets the chaos checker hold every deposition, also one the
controller made on its own, to the ASYNC bound. Under SYNC replication a tail holds only
writes that were never acknowledged as OK.

A file is ``<epoch>-<start offset>.log``: the CommitLog bytes ``[start, end)`` verbatim
(whole records; a segment's blank filler included), written under a temporary name,
forced to disk and renamed before the cut, so a crash leaves no file or a whole one.
Files older than the CommitLog's retention go like its segments (the node's housekeeping
and every keep call ``remove_expired``); a tail is kept only while the disk stays under the
store's high-water mark, and only its first GiB.

Thread-safety: ``keep_tail`` runs on an executor thread while the node follows no master
(nothing appends), one at a time; only it and the node's start remove half-written files,
so housekeeping running beside a keep never takes the file being written.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Iterator

from store import commitlog_record as record
from store.message import StoredMessage
from store.message_store import MessageStore

log = logging.getLogger("ferrymq.ha.rollback")
ROLLBACK_DIRECTORY = "rollback"
READ_CHUNK_BYTES = 4 << 20
# An ASYNC tail is bounded by the slaves' allowed lag (256 MiB by default); a node cutting
# far more (its whole older-term log) keeps the first part only, never a copy of its disk.
MAX_TAIL_BYTES = 1 << 30


def directory_of(data_dir: str) -> str:
    return os.path.join(data_dir, ROLLBACK_DIRECTORY)


def keep_tail(store: MessageStore, epoch: int, start: int) -> str | None:
    """Copy the log from ``start`` (a record boundary) to its end into a rollback file;
    its path, or None when there is nothing to keep or it could not be written (logged:
    the cut must go on, or this node could never follow its master again)."""
    commitlog = store.commitlog
    start = max(start, commitlog.min_offset)  # retention may have deleted the oldest part
    end = min(commitlog.write_offset, start + MAX_TAIL_BYTES)
    if start >= end:
        return None
    if end < commitlog.write_offset:
        log.warning(
            "the cut tail [%d, %d) is larger than %d bytes: only [%d, %d) is kept",
            start,
            commitlog.write_offset,
            MAX_TAIL_BYTES,
            start,
            end,
        )
    directory = directory_of(store.config.data_dir)
    path = os.path.join(directory, f"{epoch:010d}-{start:020d}.log")
    temporary = path + ".tmp"
    try:
        os.makedirs(directory, exist_ok=True)
        remove_expired(store.config.data_dir, store.config.retention_ms / 1000, partial=True)
        disk = shutil.disk_usage(directory)
        if disk.used + (end - start) > disk.total * store.config.disk_high_water_ratio:
            raise OSError(f"{end - start} bytes would pass the disk's high-water mark")
        with open(temporary, "wb") as f:
            position = start
            while position < end:
                chunk = commitlog.read_records(position, min(READ_CHUNK_BYTES, end - position))
                if not chunk:
                    raise OSError(f"no record at {position} of the log being cut")
                f.write(chunk)
                position += len(chunk)
            f.flush()
            os.fsync(f.fileno())
        end = position
        os.replace(temporary, path)
        _sync_directory(directory)
    except OSError as error:
        log.error("could not keep the cut tail [%d, %d) in %s: %s", start, end, path, error)
        with contextlib.suppress(OSError):
            os.unlink(temporary)  # a full disk must not stay fuller for it
        return None
    log.warning("kept the tail [%d, %d) this node cuts (epoch %d) in %s", start, end, epoch, path)
    return path


def records_in(path: str) -> Iterator[StoredMessage]:
    """The messages of a rollback file, in log order (blank fillers skipped)."""
    with open(path, "rb") as f:
        data = f.read()
    position = 0
    while position + record.BLANK_MIN_SIZE <= len(data):
        size, magic = record.SIZE_AND_MAGIC.unpack_from(data, position)
        if size <= 0 or position + size > len(data):
            raise ValueError(f"{path}: no whole record at byte {position}")
        if magic == record.MESSAGE_MAGIC:
            yield record.decode(data, position)
        elif magic != record.BLANK_MAGIC:
            raise ValueError(f"{path}: no record at byte {position} (magic {magic:#x})")
        position += size


def rollback_files(data_dir: str) -> list[str]:
    directory = directory_of(data_dir)
    if not os.path.isdir(directory):
        return []
    names = sorted(n for n in os.listdir(directory) if n.endswith(".log"))
    return [os.path.join(directory, n) for n in names]


def remove_expired(data_dir: str, retention_s: float, *, partial: bool = False) -> list[str]:
    """Remove the rollback files kept longer than the retention and, with ``partial``
    (only when no tail is being kept), the ones a crash left half-written. Returns the
    removed paths."""
    directory = directory_of(data_dir)
    if not os.path.isdir(directory):
        return []
    now = time.time()
    removed = []
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        with contextlib.suppress(FileNotFoundError):  # a keep beside us removed it first
            if (partial and name.endswith(".tmp")) or (
                name.endswith(".log") and now - os.path.getmtime(path) > retention_s
            ):
                os.unlink(path)
                removed.append(path)
    return removed


def _sync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
