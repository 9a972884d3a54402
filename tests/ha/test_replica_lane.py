"""The replica lane (``ha/replica_lane.py``, its C in ``ha/_replica_lane.c``): the C's
frame MAC gives the cryptography package's tags, and ``apply_frames`` takes, declines,
writes and fails exactly as its Python twin does, on every stream of frames."""

from __future__ import annotations

import errno
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ha import replica_lane
from ha.link_auth import AesGcmMac, FrameMac, Role, frame_gmac
from ha.replica_lane import Stop, apply_frames, apply_frames_in_python, native
from ha.wire import DATA_HEADER, FRAME_HEADER, Kind, data_frame, sealed
from store.errors import DiskFullError
from tests.support.replica_frames import (
    KEY,
    MASTER,
    SAMPLE_RECORDS,
    SEGMENT_BYTES,
    LaneCase,
    SegmentFile,
    apply_both,
    case_from,
)


def test_the_lane_is_built_and_every_link_mac_uses_it():
    """The C is what runs: a link's MACs are the C's Gmac (libcrypto opened)."""
    assert native is not None
    assert isinstance(FrameMac(KEY, Role.MASTER).gmac, native.Gmac)
    assert isinstance(frame_gmac(KEY, Role.SLAVE), native.Gmac)


@pytest.mark.parametrize("key_bytes", [16, 24, 32])
@pytest.mark.parametrize("size", [0, 1, 15, 16, 17, 300, 70_000])
def test_the_c_gmac_gives_the_twins_tags(key_bytes, size):
    key = os.urandom(key_bytes)
    payload = os.urandom(size)
    for direction in (1, 2):
        c, twin = native.Gmac(key, direction), AesGcmMac(key, direction)
        for kind, sequence in ((Kind.DATA, 0), (Kind.ACK, 7), (Kind.LEAVING, (1 << 64) - 1)):
            tag = twin.seal(kind, sequence, payload)
            assert c.seal(kind, sequence, payload) == tag
            assert c.verify(kind, sequence, memoryview(payload), tag)
            altered = bytes([tag[0] ^ 0x80]) + tag[1:]
            other_count = sequence - 1 if sequence else 1
            for wrong in (
                (kind, other_count, payload, tag),
                (kind ^ 1, sequence, payload, tag),
                (kind, sequence, payload, altered),
                (kind, sequence, payload + b"x", tag),
                (kind, sequence, payload, tag[:15]),
            ):
                assert not c.verify(*wrong)
                assert not twin.verify(*wrong)


def test_a_gmac_refuses_a_key_of_another_length_and_a_count_out_of_range():
    with pytest.raises(ValueError, match="16, 24 or 32 bytes"):
        native.Gmac(b"k" * 31, 1)
    with pytest.raises(ValueError, match="direction byte"):
        native.Gmac(KEY, 256)
    with pytest.raises(OverflowError):
        native.Gmac(KEY, 1).seal(Kind.DATA, 1 << 64, b"")
    with pytest.raises(OverflowError):
        native.Gmac(KEY, 1).seal(Kind.DATA, -1, b"")


FILES: list[SegmentFile] = []  # the property's pair, made once (reset by every use)


@settings(max_examples=400, deadline=None)
@given(data=st.binary(max_size=400))
def test_the_lane_takes_declines_and_writes_exactly_as_its_twin(data):
    if not FILES:
        FILES.extend((SegmentFile(), SegmentFile()))
    c, twin = apply_both(case_from(data), *FILES)
    assert c == twin
    assert FILES[0].contents() == FILES[1].contents()


def test_a_stream_of_frames_that_continue_the_log_is_taken_whole(files):
    """Frames arriving together, each continuing the log where the one before left it:
    all taken, their records written one after the other, one count per frame; the bytes
    of a next frame not whole yet stay unread."""
    gmac = AesGcmMac(KEY, MASTER)
    start, position, frames = 10_000, 100, []
    offset = start
    for number, records in enumerate(SAMPLE_RECORDS):
        payload = DATA_HEADER.pack(offset, 3, 0, offset) + records
        frames.append(FRAME_HEADER.pack(Kind.DATA, len(payload) + 16) + payload)
        frames[-1] += gmac.seal(Kind.DATA, 5 + number, payload)
        offset += len(records)
    heartbeat = DATA_HEADER.pack(offset, 3, 0, offset)
    frames.append(
        FRAME_HEADER.pack(Kind.DATA, len(heartbeat) + 16)
        + heartbeat
        + gmac.seal(Kind.DATA, 5 + len(SAMPLE_RECORDS), heartbeat)
    )
    whole = b"".join(frames)
    case = LaneCase(whole + frames[0][:30], 5, position, SEGMENT_BYTES - position, start, 3)
    c, twin = apply_both(case, *files)
    assert c == twin
    assert (c.stop, c.used, c.sequence) == (Stop.MORE, len(whole), 5 + len(frames))
    assert (c.appended, c.heartbeats, c.write_offset) == (len(SAMPLE_RECORDS), 1, offset)
    assert c.confirmed == offset  # the greatest carried (the heartbeat's)
    records = b"".join(SAMPLE_RECORDS)
    assert files[0].contents()[position : position + len(records)] == records


def declined_cases() -> dict[str, tuple[bytes, int]]:
    """One good frame, then a frame the lane must leave to the Python path: (stream,
    room)."""
    gmac, records = AesGcmMac(KEY, MASTER), SAMPLE_RECORDS[0]

    def frame(sequence, offset=0, epoch=1, body=records, kind=Kind.DATA, tag_fault=False):
        payload = DATA_HEADER.pack(offset, epoch, 0, 0) + body
        tag = gmac.seal(kind, sequence, payload)
        if tag_fault:
            tag = bytes(16)
        return FRAME_HEADER.pack(kind, len(payload) + 16) + payload + tag

    good, after = frame(0), len(records)
    return {
        "a new epoch": (good + frame(1, after, epoch=2), SEGMENT_BYTES),
        "an offset past the log's end": (good + frame(1, after + 1), SEGMENT_BYTES),
        "records past the segment's end": (good + frame(1, after), 2 * len(records) - 1),
        "a tag that fails": (good + frame(1, after, tag_fault=True), SEGMENT_BYTES),
        "a repeated count": (good + frame(0, after), SEGMENT_BYTES),
        "records cut short": (good + frame(1, after, body=records[:-1]), SEGMENT_BYTES),
        "another kind": (good + sealed(FrameMac(KEY, Role.MASTER), Kind.REFUSED, b"{}"), 9999),
        "a length over the limit": (good + FRAME_HEADER.pack(Kind.DATA, (64 << 20) + 1), 9999),
    }


@pytest.mark.parametrize("name", sorted(declined_cases()))
def test_a_frame_the_lane_declines_is_left_unread_and_untouched(name, files):
    stream, room = declined_cases()[name]
    case = LaneCase(stream, 0, 0, room, 0, 1)
    c, twin = apply_both(case, *files)
    assert c == twin
    records = SAMPLE_RECORDS[0]
    first = FRAME_HEADER.size + DATA_HEADER.size + len(records) + 16
    assert (c.stop, c.used, c.sequence, c.write_offset) == (Stop.DECLINED, first, 1, len(records))
    contents = files[0].contents()
    assert contents[: len(records)] == records and not contents[len(records) :].strip(b"\x00")


def test_a_failed_write_is_reported_with_its_errno_and_leaves_nothing(tmp_path):
    """A descriptor the kernel refuses (here one opened for reading): the lane stops at
    the frame, writes nothing past the log's end, and says the errno; the twin alike."""
    path = tmp_path / "segment"
    path.write_bytes(bytes(4096))
    fd = os.open(path, os.O_RDONLY)
    try:
        gmac = AesGcmMac(KEY, MASTER)
        payload = DATA_HEADER.pack(0, 1, 0, 0) + SAMPLE_RECORDS[0]
        stream = FRAME_HEADER.pack(Kind.DATA, len(payload) + 16) + payload
        stream += gmac.seal(Kind.DATA, 0, payload)
        c = apply_frames(native.Gmac(KEY, MASTER), 0, stream, fd, 0, 4096, 0, 1)
        twin = apply_frames_in_python(gmac, 0, stream, fd, 0, 4096, 0, 1)
    finally:
        os.close(fd)
    assert c == twin
    assert (c.stop, c.used, c.error_number, c.appended) == (Stop.WRITE_FAILED, 0, errno.EBADF, 0)
    with pytest.raises(OSError, match="Bad file descriptor"):
        c.raise_write_failure()
    assert path.read_bytes() == bytes(4096)


def test_a_full_disk_stops_the_lane_with_nothing_written_and_is_a_disk_full_error(tmpfs_disk):
    """ENOSPC from the kernel (a real tmpfs filled to the last byte, the segment's pages not
    yet allocated): the part of the records written before the refusal is zeroed again,
    and the lane's failure is the store's DiskFullError, as the Python path's append."""
    disk = tmpfs_disk(512)
    records = b"".join(SAMPLE_RECORDS) * 8  # more than a page
    gmac = AesGcmMac(KEY, MASTER)
    payload = DATA_HEADER.pack(0, 1, 0, 0) + records
    stream = FRAME_HEADER.pack(Kind.DATA, len(payload) + 16) + payload
    stream += gmac.seal(Kind.DATA, 0, payload)
    outcomes = []
    for name, lane_gmac, apply in (
        ("c", native.Gmac(KEY, MASTER), apply_frames),
        ("twin", gmac, apply_frames_in_python),
    ):
        fd = os.open(disk.path / name, os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(fd, SEGMENT_BYTES)  # sparse: a write needs new pages
        os.pwrite(fd, b"\x01", 0)  # one page of it allocated before the disk fills
        filler = disk.fill(f"filler-{name}")
        try:
            outcomes.append(apply(lane_gmac, 0, stream, fd, 1, SEGMENT_BYTES - 1, 0, 1))
            assert os.pread(fd, SEGMENT_BYTES, 0) == b"\x01" + bytes(SEGMENT_BYTES - 1)
        finally:
            os.close(fd)
            filler.unlink()
    c, twin = outcomes
    assert c == twin
    assert (c.stop, c.error_number, c.used) == (Stop.WRITE_FAILED, errno.ENOSPC, 0)
    with pytest.raises(DiskFullError):
        c.raise_write_failure()


def test_without_the_c_the_lane_is_its_twin(monkeypatch, files):
    """A host where libcrypto cannot be opened: the same outcomes from the twin."""
    mac = FrameMac(KEY, Role.MASTER)
    first, second = SAMPLE_RECORDS[:2]
    stream = data_frame(mac, 0, 1, 0, 0, first) + data_frame(mac, len(first), 1, 0, 0, second)
    case = LaneCase(stream, 0, 0, SEGMENT_BYTES, 0, 1)
    expected, _ = apply_both(case, *files)
    monkeypatch.setattr(replica_lane, "native", None)
    found = apply_frames(native.Gmac(KEY, MASTER), 0, stream, files[1].fd, 0, SEGMENT_BYTES, 0, 1)
    assert found == expected and found.appended == 2


def test_a_frame_sealed_by_the_master_is_taken_by_the_lane(files):
    """The master's own DATA frame writer (ha/wire.py) and the lane agree on the layout."""
    mac = FrameMac(KEY, Role.MASTER)
    stream = data_frame(mac, 0, 1, 0, 0, SAMPLE_RECORDS[1])
    c, twin = apply_both(LaneCase(stream, 0, 0, SEGMENT_BYTES, 0, 1), *files)
    assert c == twin and (c.stop, c.appended, c.used) == (Stop.MORE, 1, len(stream))
