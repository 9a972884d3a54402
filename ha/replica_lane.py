"""The replica lane: a slave takes the common DATA frame of its link in C (stage 1 of
docs/native-lane.md).

Under single sends a slave spent ~140 µs of CPU per frame, most of it the interpreter
around a few hundred bytes of records: a read's future and task step, the frame's checks,
the append's layers. ``apply_frames`` takes every whole DATA frame at the start of the bytes
that arrived, as long as each continues the log where it ends (its MAC right, its epoch the
log's last, its records whole and inside the active segment), writes their records to the
segment's file and says how far it got. At the first frame that is anything else it
declines and leaves the frame unread; ``ha/slave.py`` then reads that one frame through the
Python path (``take_sealed`` and ``_append_data``), which gives every precise answer (a
forged frame, a new epoch, a segment's roll, a mismatch, a divergence, a refusal).

Invariants (checked pairwise against the twin, tests/ha/test_replica_lane.py, and by the
fuzz target ``replica_frames``):

- The lane decides nothing the Python path would decide differently: what it takes, the
  Python path would have taken with the same outcome; what it declines, it has not touched
  (no byte written, the MAC's count not moved).
- A frame's records are written only after its MAC checked out, and only at the log's end.
- A write that fails leaves nothing past the log's end (the part written is zeroed again,
  as ``MappedFile.append_at`` does), and the error is raised as the Python path's
  (``DiskFullError`` for a full disk).

``apply_frames_in_python`` is the specification; ``apply_frames`` runs the C
(``ha/_replica_lane.c``) when it loaded and the MAC is its ``Gmac``, else the twin.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import os
from dataclasses import dataclass

from ferrymq.codec.commitlog_record import chunk_problem_in_python
from ha.link_auth import MAC_BYTES, Gmac
from ha.wire import DATA_HEADER, FRAME_HEADER, MAX_FRAME_BYTES, Kind
from store.errors import DiskFullError

try:
    from ha import _replica_lane as native
except ImportError:  # no libcrypto.so.3 to open: the twin takes the frames
    native = None


class Stop(enum.IntEnum):
    """Why ``apply_frames`` stopped."""

    MORE = 0  # at a frame not whole yet, or at the end of the bytes
    DECLINED = 1  # at a frame for the Python path
    WRITE_FAILED = 2  # a write to the segment failed: ``error_number``


_STOPS = tuple(Stop)  # by value: Stop(n) runs enum's Python, a call per arrival


@dataclass(frozen=True)
class Applied:
    """What one call took: ``used`` bytes of whole frames, the MAC's next ``sequence``, the
    log's end after their records, the greatest confirmed offset they carried (-1 without
    any), and how many frames carried records and how many were heartbeats."""

    stop: Stop
    used: int
    sequence: int
    write_offset: int
    confirmed: int
    appended: int
    heartbeats: int
    error_number: int = 0

    def raise_write_failure(self) -> None:
        """The error of a failed write, as the Python path's append raises it."""
        raise write_failure(self.error_number)


def write_failure(error_number: int) -> Exception:
    """The error of a write to the segment that failed with ``error_number``."""
    if error_number in (errno.ENOSPC, errno.EDQUOT):
        return DiskFullError("no space to append the master's records")
    return OSError(error_number, os.strerror(error_number))


def apply_frames(
    gmac: Gmac,
    sequence: int,
    unread: memoryview,
    fd: int,
    position: int,
    room: int,
    write_offset: int,
    epoch: int,
) -> Applied:
    """Append the whole DATA frames at the start of ``unread`` that continue the log
    (ending at ``write_offset``, at ``position`` of the active segment's file ``fd`` with
    ``room`` bytes left, its last epoch ``epoch``), their MACs checked with ``gmac`` from
    frame number ``sequence``. The caller holds the store's put lock (the lane writes the
    log's end)."""
    if native is not None and isinstance(gmac, native.Gmac):
        stop, *figures = native.apply_frames(
            gmac, sequence, unread, fd, position, room, write_offset, epoch
        )
        return Applied(_STOPS[stop], *figures)
    return apply_frames_in_python(gmac, sequence, unread, fd, position, room, write_offset, epoch)


def apply_frames_in_python(
    gmac: Gmac,
    sequence: int,
    unread: memoryview | bytes,
    fd: int,
    position: int,
    room: int,
    write_offset: int,
    epoch: int,
) -> Applied:
    """What ``ha._replica_lane.apply_frames`` (C) does, in Python: the specification."""
    view = memoryview(unread)
    used, confirmed, appended, heartbeats = 0, -1, 0, 0

    def applied(stop: Stop, error_number: int = 0) -> Applied:
        return Applied(
            stop, used, sequence, write_offset, confirmed, appended, heartbeats, error_number
        )

    while len(view) - used >= FRAME_HEADER.size:
        kind, body = FRAME_HEADER.unpack_from(view, used)
        if kind != Kind.DATA or body > MAX_FRAME_BYTES or body < DATA_HEADER.size + MAC_BYTES:
            return applied(Stop.DECLINED)
        start = used + FRAME_HEADER.size
        if len(view) - start < body:
            break  # not whole yet
        split = start + body - MAC_BYTES
        payload, tag = view[start:split], view[split : start + body]
        if not gmac.verify(Kind.DATA, sequence, payload, tag):
            return applied(Stop.DECLINED)
        offset, frame_epoch, _, frame_confirmed = DATA_HEADER.unpack_from(payload)
        records = payload[DATA_HEADER.size :]
        if records:
            if (
                frame_epoch != epoch
                or offset != write_offset
                or len(records) > room
                or chunk_problem_in_python(records) is not None
            ):
                return applied(Stop.DECLINED)
            written = 0
            try:
                while written < len(records):
                    count = os.pwrite(fd, records[written:], position + written)
                    if count == 0:
                        raise OSError(errno.EIO, "a write of no bytes")
                    written += count
            except OSError as error:
                if written:  # nothing past the log's end (its pages exist: cannot fail)
                    with contextlib.suppress(OSError):
                        os.pwrite(fd, bytes(written), position)
                return applied(Stop.WRITE_FAILED, error.errno or errno.EIO)
            position += len(records)
            room -= len(records)
            write_offset += len(records)
            appended += 1
        else:
            heartbeats += 1
        confirmed = max(confirmed, frame_confirmed)
        sequence += 1
        used += FRAME_HEADER.size + body
    return applied(Stop.MORE)
