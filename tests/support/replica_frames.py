"""Streams of a replication link's frames, as a slave's link receives them, for the replica
lane's pairwise checks (``ha/replica_lane.py``: the C's ``apply_frames`` against its
twin): the unit tests and the fuzz target ``replica_frames`` build them from bytes.

A stream is mostly DATA frames sealed right, each continuing the log where the one before
it left it, with every way a frame can be one the lane must decline or stop at mixed in:
another kind, a tag that fails, a new epoch, an offset that is not the log's end, records
that are not whole or overrun the segment, an oversize length, a frame cut short. The
bytes also choose the log's end, its epoch, the room left in its segment and the MAC's
count.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

from ha.link_auth import AesGcmMac
from ha.replica_lane import Applied, apply_frames, apply_frames_in_python, native
from ha.wire import DATA_HEADER, FRAME_HEADER, MAX_FRAME_BYTES, Kind
from tests.support.fetch_answers import record

KEY = bytes(range(32))
MASTER = 1  # ha.link_auth.Role.MASTER's direction byte
SEGMENT_BYTES = 64 * 1024
SAMPLE_RECORDS = [
    record(1000 + i, b"x" * (i * 37), b"UNIQ_KEY\x01id\x02" if i % 2 else b"", topic=topic)
    for i, topic in enumerate(["T", "topic-b", "T", "%SYS%TIMER"])
]
BLANK = (16).to_bytes(4, "big") + (0xCBD43194).to_bytes(4, "big") + bytes(8)


@dataclass(frozen=True)
class LaneCase:
    """What ``apply_frames`` is given: the bytes that arrived and the log they continue."""

    unread: bytes
    sequence: int
    position: int
    room: int
    write_offset: int
    epoch: int


def _records(spec: int, rest: bytearray) -> bytes:
    """A frame's records, as the spec's low bits ask: none (a heartbeat), one or two
    sample records, a run closed by a blank record, or bytes of the fuzzer's own."""
    choice = spec & 0x7
    pick = rest.pop(0) if rest else 0
    if choice == 0:
        return b""
    if choice in (1, 2, 3):
        return b"".join(SAMPLE_RECORDS[(pick + i) % len(SAMPLE_RECORDS)] for i in range(choice))
    if choice == 4:
        return SAMPLE_RECORDS[pick % len(SAMPLE_RECORDS)] + BLANK
    taken = bytes(rest[:pick])
    del rest[:pick]
    return taken


def case_from(data: bytes) -> LaneCase:
    """A stream and its log from the fuzzer's (or a test's) bytes: four bytes of setting,
    then two bytes per frame (what it is, what goes wrong with it) and what its records
    take."""
    head, rest = data[:4].ljust(4, b"\x00"), bytearray(data[4:])
    epoch = head[0] % 4
    sequence = head[1] * 1_000_003 if head[0] & 0x80 else head[1]
    position = (head[2] * 97) % SEGMENT_BYTES
    room = SEGMENT_BYTES - position if head[3] & 1 else (head[3] * 211) % (SEGMENT_BYTES - position)
    write_offset = (1 << 33) + position if head[0] & 0x40 else position
    if head[0] & 0x20:  # the fuzzer's bytes as they are
        return LaneCase(bytes(rest), sequence, position, room, write_offset, epoch)
    gmac = AesGcmMac(KEY, MASTER)
    frames, offset, count = [], write_offset, sequence
    while len(rest) >= 2 and len(frames) < 12:
        spec, fault = rest.pop(0), rest.pop(0)
        records = _records(spec, rest)
        kind = Kind.DATA if not fault & 0x01 else Kind(1 + spec % 9)
        frame_offset = offset + (fault & 0x02) * 8 - (fault & 0x04)
        frame_epoch = epoch + (1 if fault & 0x08 else 0)
        payload = DATA_HEADER.pack(frame_offset, frame_epoch, 0, spec * 1000 + fault) + records
        if fault & 0x10:
            payload = payload[: spec % len(payload)]  # shorter than a DATA header, mostly
        tag = gmac.seal(kind, count, payload)
        if fault & 0x20:
            tag = bytes([tag[0] ^ 1]) + tag[1:]
        length = len(payload) + len(tag)
        if fault & 0x40 and fault & 0x80:
            length = MAX_FRAME_BYTES + 1 + spec
        frames.append(FRAME_HEADER.pack(kind, length) + payload + tag)
        if not fault & 0x80:  # sealed as the next frame (else its count repeats: forged)
            count += 1
        offset += len(records)
    unread = b"".join(frames)
    if head[0] & 0x10:
        unread = unread[: len(unread) - 1 - head[3] % 64]  # the last frame cut short
    return LaneCase(unread, sequence, position, room, write_offset, epoch)


class SegmentFile:
    """A scratch file of ``SEGMENT_BYTES`` for the lane to write, zeroed between uses."""

    def __init__(self) -> None:
        handle, self.path = tempfile.mkstemp(prefix="replica-lane-")
        self.fd = handle
        os.ftruncate(handle, SEGMENT_BYTES)

    def reset(self) -> None:
        os.pwrite(self.fd, bytes(SEGMENT_BYTES), 0)

    def contents(self) -> bytes:
        return os.pread(self.fd, SEGMENT_BYTES, 0)

    def close(self) -> None:
        os.close(self.fd)
        os.unlink(self.path)


def apply_both(
    case: LaneCase, c_file: SegmentFile, twin_file: SegmentFile
) -> tuple[Applied, Applied]:
    """The C's outcome and the twin's on ``case``, each writing its own file (their bytes
    are compared by the caller)."""
    assert native is not None, "ha._replica_lane did not build"
    c_file.reset()
    twin_file.reset()
    log = (case.position, case.room, case.write_offset, case.epoch)
    c = apply_frames(native.Gmac(KEY, MASTER), case.sequence, case.unread, c_file.fd, *log)
    twin = apply_frames_in_python(
        AesGcmMac(KEY, MASTER), case.sequence, case.unread, twin_file.fd, *log
    )
    return c, twin
