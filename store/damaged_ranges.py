"""Ranges of the CommitLog that recovery cut after an invalid record, kept aside first.

Recovery ends the log at its first invalid record: appends must go on from a record
boundary, and nothing past a bad record can be trusted to be where its neighbours say.
But a flipped bit in one record used to take every later record with it (the whole log,
when it hit the first one). Now the bytes from the invalid record to where the data ended
are kept in ``<data>/damaged/<start>-<found ms>.log`` before the cut, with the
``kept_files`` writer that keeps a rejoining node's rollback tail (fsynced, renamed, the
directory fsynced), and described in a ``.json`` beside it (offsets, reason, time, and
whether the range was refilled from a master since). ``read_kept`` decodes what still
validates in such a file: records after a single bad one are usually intact.

A torn tail is not damage: a process that died while appending leaves a partial last
record and nothing valid after it, which was never acknowledged. A cut counts as damage
when the store had shut down cleanly, when the invalid record lies below the offset the
checkpoint named flushed, or when a valid record follows it.

The store reports a range not yet refilled (``unrefilled``): the node's metrics, its
routing heartbeat (elections avoid such a node) and ``cluster status`` show it, until a
slave has copied its master's log back past the cut (``mark_refilled``) or the kept file
expires with the CommitLog's retention.

Thread-safety: recovery adds ranges before the store serves; afterwards ``mark_refilled``
and ``remove_expired`` run on executor threads under a lock, and readers see an immutable
tuple.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace

from ferrymq.codec import commitlog_record as record
from ferrymq.codec.commitlog_record import StoredMessage
from ferrymq.codec.properties import PROPERTY_SEPARATOR
from store import kept_files
from store.errors import RecoveryRefused
from store.mapped_file_queue import MappedFileQueue

log = logging.getLogger("ferrymq.store")
DAMAGED_DIRECTORY = "damaged"
DESCRIPTION_SUFFIX = ".json"
DESCRIPTION_MAX_BYTES = 64 << 10
# How far recovery reads to tell a torn last record from damage: a torn write tears one
# record, and a record is far smaller than this (gRPC frames are at most 64 MiB).
TORN_RECORD_MAX_BYTES = 64 << 20
ZERO_PROBE_BYTES = 1 << 20
READ_CHUNK_BYTES = 4 << 20
PROPERTIES_END = PROPERTY_SEPARATOR.encode()  # what encoded properties end with
NOT_A_RECORD = "not a valid record (skipped to the next one that validates)"
_MAGICS = (
    record.MESSAGE_MAGIC.to_bytes(4, "big"),
    record.BLANK_MAGIC.to_bytes(4, "big"),
)


@dataclass(frozen=True)
class DamagedRange:
    """CommitLog bytes ``[start, end)`` recovery cut; ``[start, kept_end)`` of them are in
    ``file`` (all of them unless the range passed ``kept_files.MAX_KEPT_BYTES``)."""

    start: int
    end: int
    kept_end: int
    reason: str
    found_ms: int
    file: str
    refilled_to: int | None = None  # this log's end once a master's bytes covered the cut

    @property
    def cut_bytes(self) -> int:
        return self.end - self.start

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> DamagedRange:
        """``ValueError`` naming the field when ``data`` is not a description."""
        fields = json.loads(data)
        if not isinstance(fields, dict):
            raise ValueError("a description is a JSON object")
        ints = ("start", "end", "kept_end", "found_ms")
        for name in ints:
            if type(fields.get(name)) is not int or fields[name] < 0:
                raise ValueError(f"{name} must be a non-negative integer")
        for name in ("reason", "file"):
            if not isinstance(fields.get(name), str):
                raise ValueError(f"{name} must be a string")
        refilled = fields.get("refilled_to")
        if refilled is not None and type(refilled) is not int:
            raise ValueError("refilled_to must be an integer or null")
        if not fields["start"] <= fields["kept_end"] <= fields["end"]:
            raise ValueError("offsets must satisfy start <= kept_end <= end")
        if os.path.basename(fields["file"]) != fields["file"]:
            raise ValueError("file must be a file name")
        return cls(**{k: fields[k] for k in (*ints, "reason", "file")}, refilled_to=refilled)


@dataclass(frozen=True)
class Unreadable:
    """Bytes ``[start, end)`` of a kept range that hold no valid record."""

    start: int
    end: int
    reason: str


def directory_of(data_dir: str) -> str:
    return os.path.join(data_dir, DAMAGED_DIRECTORY)


# ---- reading a range ---------------------------------------------------------------------
def scan_range(buf, base: int, first_reason: str) -> Iterator[StoredMessage | Unreadable]:
    """The records of ``buf`` (log bytes from offset ``base``) that validate, in order,
    and the spans between them that do not (the first one, at ``base``, for
    ``first_reason``). A record counts only if ``check_at`` accepts it (magic, lengths,
    CRC32C) and its PHYSICALOFFSET field names where it lies, so bytes that merely look
    like a record inside a body are skipped. Trailing zeros are the end of the data."""
    limit = len(buf)
    position = 0
    bad_from: int | None = None
    reason = first_reason
    while position < limit:
        size = _record_at(buf, position, base)
        if size == 0:
            if bad_from is None:
                bad_from = position
            following = _next_candidate(buf, position + 1)
            if following is None:
                break
            position = following
            continue
        if bad_from is not None:
            yield Unreadable(base + bad_from, base + position, reason)
            bad_from, reason = None, NOT_A_RECORD
        if size > 0:
            yield record.decode(buf, position)  # validated by _record_at
        position += abs(size)
    if bad_from is not None:
        end = _data_end_in(buf, bad_from)
        if end > bad_from:
            yield Unreadable(base + bad_from, base + end, reason)


def _record_at(buf, position: int, base: int) -> int:
    """The size of the valid message record at ``position`` (positive), of a blank filler
    (negative; it may run past ``buf``: a segment's tail), or 0."""
    if len(buf) - position < record.SIZE_AND_MAGIC.size:
        return 0
    size, magic = record.SIZE_AND_MAGIC.unpack_from(buf, position)
    if magic == record.BLANK_MAGIC:
        # A filler is zeros to its segment's end, which may lie past ``buf``.
        end = min(position + size, len(buf))
        filler = buf[position + record.BLANK_MIN_SIZE : end]
        if size < record.BLANK_MIN_SIZE or filler.count(0) != len(filler):
            return 0
        return -(end - position)
    if magic != record.MESSAGE_MAGIC:
        return 0
    check = record.check_at(buf, position, len(buf))
    if check.size == 0:
        return 0
    physical = record.HEADER.unpack_from(buf, position)[6]
    return check.size if physical == base + position else 0


def _next_candidate(buf, start: int) -> int | None:
    """The first position from ``start`` whose magic field holds a magic code."""
    found = [p for magic in _MAGICS if (p := buf.find(magic, start + 4)) >= 0]
    return min(found) - 4 if found else None


def _data_end_in(buf, start: int) -> int:
    end = len(buf)
    while end > start:
        chunk_start = max(start, end - ZERO_PROBE_BYTES)
        stripped = len(buf[chunk_start:end].rstrip(b"\0"))
        if stripped:
            return chunk_start + stripped
        end = chunk_start
    return start


def read_kept(path: str, start: int, first_reason: str) -> list[StoredMessage | Unreadable]:
    """What a kept file holds: ``scan_range`` over it (``start`` is its first offset)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return []
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return list(scan_range(buf, start, first_reason))


class LogFiles:
    """Read-only access to the CommitLog files of a data directory, by offset: a running
    node's too (nothing is mapped or locked)."""

    def __init__(self, data_dir: str) -> None:
        self.directory = os.path.join(data_dir, "commitlog")
        names = (
            sorted(n for n in os.listdir(self.directory) if n.isdigit())
            if os.path.isdir(self.directory)
            else []
        )
        self.segment_bytes = os.path.getsize(os.path.join(self.directory, names[0])) if names else 0

    def holds(self, offset: int, data: bytes) -> bool:
        """True when the log holds exactly ``data`` at ``offset``: a record that came back
        from a master after the cut."""
        if self.segment_bytes <= 0:
            return False
        base = offset - offset % self.segment_bytes
        try:
            with open(os.path.join(self.directory, f"{base:020d}"), "rb") as f:
                f.seek(offset - base)
                return f.read(len(data)) == data
        except FileNotFoundError:
            return False


# ---- keeping a range ---------------------------------------------------------------------
def data_end(segments: MappedFileQueue, start: int) -> int:
    """Where the data of the log ended, at or after ``start``: past the last byte that is
    not zero. A record ends with its properties' separator, or, without properties, with
    a zero properties length after its topic (which never holds a zero byte or the
    separator): then two bytes more. Read backwards from the last segment; only when
    recovery found an invalid record."""
    for segment in reversed(segments.files):
        if segment.end_offset <= start:
            break
        low = max(start, segment.base_offset) - segment.base_offset
        high = segment.size
        while high > low:
            chunk_start = max(low, high - ZERO_PROBE_BYTES)
            stripped = len(segment.read(chunk_start, high - chunk_start).rstrip(b"\0"))
            if stripped:
                local = chunk_start + stripped
                if segment.read(local - 1, 1) != PROPERTIES_END:
                    local = min(segment.size, local + 2)  # maybe a record without properties
                return segment.base_offset + local
            high = chunk_start
    return start


def read_log(segments: MappedFileQueue, start: int, end: int) -> Iterator[bytes]:
    """The raw bytes ``[start, end)`` of the log, across segments, in bounded chunks."""
    position = start
    while position < end:
        segment = segments.find(position)
        if segment is None:
            raise OSError(f"no segment holds offset {position}")
        stop = min(end, segment.end_offset, position + READ_CHUNK_BYTES)
        yield segment.read(position - segment.base_offset, stop - position)
        position = stop


class DamagedRanges:
    """The damaged ranges of one store's data directory."""

    def __init__(self, data_dir: str) -> None:
        self.directory = directory_of(data_dir)
        self._lock = threading.Lock()
        self.ranges: tuple[DamagedRange, ...] = ()

    @property
    def unrefilled(self) -> bool:
        """True while a cut range has not been refilled from a master."""
        return any(r.refilled_to is None for r in self.ranges)

    @property
    def cut_bytes(self) -> int:
        """Bytes recovery cut, over the ranges still kept."""
        return sum(r.cut_bytes for r in self.ranges)

    def load(self) -> None:
        """Read the descriptions; one that cannot be read is logged and left out."""
        found = []
        for path in kept_files.files_in(self.directory, DESCRIPTION_SUFFIX):
            try:
                found.append(read_description(path))
            except (OSError, ValueError) as error:
                log.error("damaged range description %s is unreadable: %s", path, error)
        with self._lock:
            self.ranges = tuple(sorted(found, key=lambda r: (r.found_ms, r.start)))

    def keep(
        self,
        segments: MappedFileQueue,
        start: int,
        reason: str,
        *,
        may_be_torn: bool,
        high_water: float,
        now_ms: int,
    ) -> DamagedRange | None:
        """Keep the log from the invalid record at ``start`` to its data end, before the
        caller cuts it. None for a torn tail (``may_be_torn`` and nothing valid after the
        record). ``RecoveryRefused`` when the range cannot be kept."""
        end = max(data_end(segments, start), start + 1)
        for known in self.ranges:
            if (known.start, known.end, known.refilled_to) == (start, end, None):
                return known  # kept by an open that crashed before its cut: not again
        if may_be_torn and end - start <= TORN_RECORD_MAX_BYTES:
            tail = b"".join(read_log(segments, start, end))
            if not any(isinstance(item, StoredMessage) for item in scan_range(tail, start, reason)):
                return None
        kept_end = min(end, start + kept_files.MAX_KEPT_BYTES)
        name = f"{start:020d}-{now_ms:013d}"
        damaged = DamagedRange(start, end, kept_end, reason, now_ms, name + kept_files.LOG_SUFFIX)
        try:
            written = kept_files.keep(
                self.directory,
                damaged.file,
                read_log(segments, start, kept_end),
                kept_end - start,
                high_water,
            )
            if written != kept_end - start:
                raise OSError(f"wrote {written} of {kept_end - start} bytes")
            kept_files.write_atomically(
                os.path.join(self.directory, name + DESCRIPTION_SUFFIX), damaged.to_json()
            )
        except OSError as error:
            raise RecoveryRefused(
                f"recovery found an invalid record at CommitLog offset {start} ({reason}) "
                f"and could not keep the {end - start} bytes [{start}, {end}) after it in "
                f"{self.directory}: {error}. Nothing was cut. Free space on the data "
                "directory's disk (or copy its commitlog directory away) and start again"
            ) from error
        with self._lock:
            self.ranges = (*self.ranges, damaged)
        return damaged

    def mark_refilled(self, end_offset: int) -> list[DamagedRange]:
        """Record that this log holds its master's bytes up to ``end_offset``: every range
        not refilled yet is now. Returns those ranges."""
        with self._lock:
            changed = [
                replace(r, refilled_to=end_offset) for r in self.ranges if r.refilled_to is None
            ]
            for damaged in changed:
                kept_files.write_atomically(self._description_path(damaged), damaged.to_json())
            by_file = {r.file: r for r in changed}
            self.ranges = tuple(by_file.get(r.file, r) for r in self.ranges)
        return changed

    def remove_expired(self, retention_s: float, *, partial: bool = False) -> list[str]:
        """Remove ranges found longer than the retention ago (file and description) and,
        with ``partial``, half-written files of a keep a crash interrupted. Returns the
        removed paths."""
        now_ms = time.time() * 1000
        removed = kept_files.remove_expired(
            self.directory, retention_s, partial=partial, suffixes=(DESCRIPTION_SUFFIX,)
        )
        with self._lock:
            kept = []
            for damaged in self.ranges:
                if now_ms - damaged.found_ms <= retention_s * 1000 and os.path.exists(
                    os.path.join(self.directory, damaged.file)
                ):
                    kept.append(damaged)
                    continue
                for path in (
                    os.path.join(self.directory, damaged.file),
                    self._description_path(damaged),
                ):
                    if os.path.exists(path):
                        os.unlink(path)
                        removed.append(path)
            self.ranges = tuple(kept)
        return removed

    def _description_path(self, damaged: DamagedRange) -> str:
        stem = damaged.file.removesuffix(kept_files.LOG_SUFFIX)
        return os.path.join(self.directory, stem + DESCRIPTION_SUFFIX)


def read_description(path: str) -> DamagedRange:
    """A range's description; ``ValueError`` when it is not one."""
    with open(path, "rb") as f:
        data = f.read(DESCRIPTION_MAX_BYTES + 1)
    if len(data) > DESCRIPTION_MAX_BYTES:
        raise ValueError(f"larger than {DESCRIPTION_MAX_BYTES} bytes")
    return DamagedRange.from_json(data)


def described_ranges(data_dir: str) -> list[tuple[str, DamagedRange | None, str]]:
    """Every kept file of ``data_dir``'s damaged ranges: (path, its description or None,
    why it has none)."""
    directory = directory_of(data_dir)
    described = []
    for path in kept_files.files_in(directory):
        stem = path.removesuffix(kept_files.LOG_SUFFIX)
        try:
            described.append((path, read_description(stem + DESCRIPTION_SUFFIX), ""))
        except (OSError, ValueError) as error:
            described.append((path, None, f"description unreadable: {error}"))
    return described
