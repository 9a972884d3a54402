"""What a deposed master had that its successor never received: the tail a rejoining node
cuts from its CommitLog, kept in ``<data>/rollback/`` before the cut.

Under ASYNC replication a failover loses the records the elected slave had not received
(docs/guarantees.md). They are gone from the cluster but were on the disk of the node that
wrote them: keeping them lets an operator see exactly which messages a failover dropped
(and send them again), and lets the chaos checker hold every deposition, also one the
controller made on its own, to the ASYNC bound. Under SYNC replication a tail holds only
writes that were never acknowledged as OK.

A file is ``<epoch>-<start offset>.log``: the CommitLog bytes ``[start, end)`` verbatim
(whole records; a segment's blank filler included), written the crash-safe way of
``store/kept_files.py`` (the writer recovery's damaged ranges use too) before the cut.
Files older than the CommitLog's retention go like its segments (the node's housekeeping
and every keep call ``remove_expired``); a tail is kept only while the disk stays under the
store's high-water mark, and only its first GiB.

Thread-safety: ``keep_tail`` runs on an executor thread while the node follows no master
(nothing appends), one at a time; only it and the node's start remove half-written files,
so housekeeping running beside a keep never takes the file being written.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

from ferrymq.codec.commitlog_record import StoredMessage
from store import kept_files
from store.message_store import MessageStore

log = logging.getLogger("ferrymq.ha.rollback")
ROLLBACK_DIRECTORY = "rollback"
READ_CHUNK_BYTES = 4 << 20
# An ASYNC tail is bounded by the slaves' allowed lag (256 MiB by default); a node cutting
# far more (its whole older-term log) keeps the first part only, never a copy of its disk.
MAX_TAIL_BYTES = kept_files.MAX_KEPT_BYTES


def directory_of(data_dir: str) -> str:
    return os.path.join(data_dir, ROLLBACK_DIRECTORY)


def keep_tail(store: MessageStore, epoch: int, start: int) -> str | None:
    """Copy the log from ``start`` (a record boundary) to its end into a rollback file;
    its path, or None when there is nothing to keep or it could not be written (logged:
    the cut must go on, or this node could never follow its master again)."""
    start = max(start, store.min_offset)  # retention may have deleted the oldest part
    log_end = store.write_offset
    end = min(log_end, start + MAX_TAIL_BYTES)
    if start >= end:
        return None
    if end < log_end:
        log.warning(
            "the cut tail [%d, %d) is larger than %d bytes: only [%d, %d) is kept",
            start,
            log_end,
            MAX_TAIL_BYTES,
            start,
            end,
        )
    directory = directory_of(store.config.data_dir)
    name = f"{epoch:010d}-{start:020d}.log"
    path = os.path.join(directory, name)

    def chunks() -> Iterator[bytes]:
        position = start
        while position < end:
            chunk = store.read_records(position, min(READ_CHUNK_BYTES, end - position))
            if not chunk:
                raise OSError(f"no record at {position} of the log being cut")
            yield chunk
            position += len(chunk)

    try:
        remove_expired(store.config.data_dir, store.config.retention_ms / 1000, partial=True)
        written = kept_files.keep(
            directory, name, chunks(), end - start, store.config.disk_high_water_ratio
        )
    except OSError as error:
        log.error("could not keep the cut tail [%d, %d) in %s: %s", start, end, path, error)
        return None
    end = start + written
    log.warning("kept the tail [%d, %d) this node cuts (epoch %d) in %s", start, end, epoch, path)
    return path


def records_in(path: str) -> Iterator[StoredMessage]:
    """The messages of a rollback file, in log order (blank fillers skipped)."""
    return kept_files.records_in(path)


def rollback_files(data_dir: str) -> list[str]:
    return kept_files.files_in(directory_of(data_dir))


def remove_expired(data_dir: str, retention_s: float, *, partial: bool = False) -> list[str]:
    """Remove the rollback files kept longer than the retention and, with ``partial``
    (only when no tail is being kept), the ones a crash left half-written. Returns the
    removed paths."""
    return kept_files.remove_expired(directory_of(data_dir), retention_s, partial=partial)
