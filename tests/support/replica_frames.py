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

import contextlib
import os
import socket
import tempfile
import time
from dataclasses import dataclass

from ha.link_auth import AesGcmMac
from ha.link_thread import Ended, Ending
from ha.replica_lane import Applied, Stop, apply_frames, apply_frames_in_python, native
from ha.wire import ACK, DATA_HEADER, FRAME_HEADER, MAC_BYTES, MAX_FRAME_BYTES, Kind
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


ACK_KEY = bytes(range(100, 132))
SLAVE = 2  # ha.link_auth.Role.SLAVE's direction byte
DEADLINE_S = 10.0


class Following:
    """A Follower on one end of a socket pair; the test is the master on the other."""

    def __init__(self) -> None:
        self.master, self.slave = socket.socketpair()
        self.slave.setblocking(False)  # as the event loop's transports leave it
        self.follower = native.Follower(native.Gmac(KEY, MASTER), native.Gmac(ACK_KEY, SLAVE))

    def start(self, case: LaneCase, fd: int, *, acked: int = 0, out_sequence: int = 0) -> None:
        self.follower.start(
            self.slave.fileno(),
            case.sequence,
            out_sequence,
            fd,
            case.position,
            case.room,
            case.write_offset,
            case.epoch,
            acked,
            b"",
        )

    def ending(self) -> Ending:
        """Poll until the thread ended on its own."""
        deadline = time.monotonic() + DEADLINE_S
        while (ending := Ending(self.follower.progress()[3])) is Ending.RUNNING:
            assert time.monotonic() < deadline, "the thread did not end"
            time.sleep(0.001)
        return ending

    def stop(self) -> Ended:
        ending, error_number, sequence, out_sequence, end, confirmed, acked, unread = (
            self.follower.stop()
        )
        self.sequence, self.out_sequence, self.end, self.confirmed = (
            sequence,
            out_sequence,
            end,
            confirmed,
        )
        return Ended(Ending(ending), error_number, acked, unread)

    def acks(self, first_sequence: int = 0) -> list[int]:
        """The offsets of the ACKs the thread sent, each checked against its tag."""
        self.master.setblocking(False)
        received = b""
        while True:
            try:
                part = self.master.recv(1 << 16)
            except BlockingIOError:
                break
            if not part:
                break
            received += part
        mac, offsets, at = AesGcmMac(ACK_KEY, SLAVE), [], 0
        while at < len(received):
            kind, length = FRAME_HEADER.unpack_from(received, at)
            body = received[at + FRAME_HEADER.size : at + FRAME_HEADER.size + length]
            assert kind == Kind.ACK and length == ACK.size + MAC_BYTES
            assert mac.verify(kind, first_sequence + len(offsets), body[:-MAC_BYTES], body[-16:])
            offsets.append(ACK.unpack_from(body)[0])
            at += FRAME_HEADER.size + length
        return offsets

    def left_in_socket(self) -> bytes:
        """What the thread did not read (the transport's to read next)."""
        left = b""
        with contextlib.suppress(BlockingIOError):
            while part := self.slave.recv(1 << 16):
                left += part
        return left

    def close(self) -> None:
        self.master.close()
        self.slave.close()


def follow_both(
    case: LaneCase, cuts: list[int], thread_file: SegmentFile, twin_file: SegmentFile
) -> None:
    """The link's thread (``ha._replica_lane.Follower``) fed ``case``'s bytes over a real
    socket in pieces of ``cuts`` against the twin on the whole stream: the thread ends
    where the twin stops (declined: the same frame; the stream's end: the twin's "more"; a
    failed write), with the same log, MAC count and confirmed offset, the bytes after that
    left unread (what it read of them; the rest is still in the socket), and one sealed
    ACK per arrival that carried frames, the last for the end."""
    thread_file.reset()
    twin_file.reset()
    twin = apply_frames_in_python(
        AesGcmMac(KEY, MASTER),
        case.sequence,
        case.unread,
        twin_file.fd,
        case.position,
        case.room,
        case.write_offset,
        case.epoch,
    )
    following = Following()
    try:
        following.start(case, thread_file.fd, acked=case.write_offset)
        at = 0
        for cut in [*cuts, len(case.unread)]:
            following.master.sendall(case.unread[at : at + cut])
            at = min(len(case.unread), at + cut)
        following.master.shutdown(socket.SHUT_WR)
        expected = {
            Stop.MORE: Ending.CLOSED,
            Stop.DECLINED: Ending.DECLINED,
            Stop.WRITE_FAILED: Ending.WRITE_FAILED,
        }[twin.stop]
        assert following.ending() is expected
        ended = following.stop()
        assert ended.ending is expected
        assert ended.unread + following.left_in_socket() == case.unread[twin.used :]
        assert (following.sequence, following.end, following.confirmed) == (
            twin.sequence,
            twin.write_offset,
            twin.confirmed,
        )
        assert thread_file.contents() == twin_file.contents()
        acks = following.acks()
        assert acks == sorted(acks)
        assert following.out_sequence == len(acks)
        if twin.appended or twin.heartbeats:
            assert acks and acks[-1] == ended.acked == twin.write_offset
        else:
            assert acks == [] and ended.acked == case.write_offset
    finally:
        following.close()
