"""A slave's link on a thread of its own (``ha._replica_lane.Follower``, driven by
``ha/link_thread.py``): over a real socket, in whatever pieces the bytes arrive, the thread
takes, declines and writes exactly what the lane's twin does on the whole stream, leaves
the rest unread for the Python path, acknowledges each arrival with a sealed ACK before
Python hears of it, and stops at once when asked."""

from __future__ import annotations

import os
import socket
import tempfile
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ha.link_auth import FrameMac, Role
from ha.link_thread import Ended, Ending
from ha.wire import data_frame
from store.config import StoreConfig
from store.message import Message
from store.message_store import MessageStore
from tests.support.fetch_answers import record
from tests.support.replica_frames import (
    DEADLINE_S,
    KEY,
    Following,
    LaneCase,
    case_from,
    follow_both,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=600), cuts=st.lists(st.integers(1, 400), max_size=8))
def test_the_thread_takes_declines_and_writes_as_the_twin_does_on_the_whole_stream(
    data, cuts, files
):
    """In whatever pieces the stream arrives, the thread ends where the twin stops on the
    whole of it (declined: the same frame; the stream's end: the twin's "more"; a failed
    write), with the same log, MAC count and confirmed offset, the bytes after that left
    unread, and one sealed ACK per arrival that carried frames, the last for the end."""
    case = case_from(data)
    follow_both(case, cuts, *files)


def sealed_frames(count: int, records: bytes, start: int = 0) -> list[bytes]:
    mac = FrameMac(KEY, Role.MASTER)
    return [
        data_frame(mac, start + i * len(records), 0, 0, start + i * len(records), records)
        for i in range(count)
    ]


def test_each_arrival_is_acknowledged_before_python_hears_of_it(files):
    """When ``progress`` first shows an arrival's end, its ACK is in the master's socket
    already: Python's work on the records (the dispatch) comes after the ACK."""
    records = record(7, b"y" * 300, b"")
    following = Following()
    try:
        following.start(LaneCase(b"", 0, 0, 64 * 1024, 0, 0), files[0].fd)
        for number, frame in enumerate(sealed_frames(20, records)):
            following.master.sendall(frame)
            deadline = time.monotonic() + DEADLINE_S
            while following.follower.progress()[2] == number:
                assert time.monotonic() < deadline
            end = following.follower.progress()[0]
            assert end == (number + 1) * len(records)
            assert following.acks(number) == [end]
            following.master.setblocking(True)
        assert following.stop().ending is Ending.STOPPED
    finally:
        following.close()


def test_a_frame_larger_than_the_buffer_is_gathered_whole(tmp_path):
    """The thread's buffer starts at 1 MiB and grows to hold a larger frame (a batch)."""
    records = b"".join(record(i, b"z" * 4000, b"") for i in range(800))  # ~3.3 MiB
    assert len(records) > 3 << 20
    fd = os.open(tmp_path / "segment", os.O_RDWR | os.O_CREAT)
    os.ftruncate(fd, 8 << 20)
    following = Following()
    try:
        following.start(LaneCase(b"", 0, 0, 8 << 20, 0, 0), fd)
        for frame in sealed_frames(2, records):
            following.master.sendall(frame)
        following.master.shutdown(socket.SHUT_WR)
        assert following.ending() is Ending.CLOSED
        ended = following.stop()
        assert (ended.unread, following.end) == (b"", 2 * len(records))
        assert os.pread(fd, 2 * len(records), 0) == records * 2
    finally:
        following.close()
        os.close(fd)


def test_a_stop_ends_a_waiting_thread_at_once_and_loses_no_byte(files):
    """What the thread read of a partial frame comes back unread; what it had not read yet
    is still in the socket, for the transport to read next."""
    frame = sealed_frames(1, record(1, b"a" * 100, b""))[0]
    following = Following()
    try:
        following.start(LaneCase(b"", 0, 0, 64 * 1024, 0, 0), files[0].fd)
        following.master.sendall(frame[:-5])
        started = time.monotonic()
        ended = following.stop()
        assert time.monotonic() - started < 1.0
        assert (ended.ending, following.end) == (Ending.STOPPED, 0)
        assert ended.unread + following.left_in_socket() == frame[:-5]
        assert ended.error() is None
    finally:
        following.close()


def test_a_failed_write_ends_the_thread_with_its_errno_and_nothing_acknowledged():
    """A segment that cannot be written (here: opened read-only) ends the thread with the
    write's errno, which the link raises as the Python path's append would."""
    handle, path = tempfile.mkstemp()
    os.ftruncate(handle, 64 * 1024)
    read_only = os.open(path, os.O_RDONLY)
    following = Following()
    try:
        following.start(LaneCase(b"", 0, 0, 64 * 1024, 0, 0), read_only)
        following.master.sendall(sealed_frames(1, record(1, b"b" * 100, b""))[0])
        assert following.ending() is Ending.WRITE_FAILED
        ended = following.stop()
        assert following.end == 0 and following.acks() == []
        error = ended.error()
        assert isinstance(error, OSError) and error.errno == ended.error_number != 0
        assert os.pread(handle, 64 * 1024, 0) == bytes(64 * 1024)
    finally:
        following.close()
        os.close(read_only)
        os.close(handle)
        os.unlink(path)


def test_the_peer_ending_the_link_and_a_broken_socket_end_the_link():
    assert isinstance(Ended(Ending.CLOSED, 0, 0, b"").error(), ConnectionError)
    broken = Ended(Ending.BROKEN, 104, 0, b"").error()
    assert isinstance(broken, ConnectionError) and os.strerror(104) in str(broken)


def test_records_the_thread_wrote_before_python_counted_them_survive_a_crash(tmp_path):
    """kill -9 between the thread's write (and ACK) and Python's count of it: the records
    are in the CommitLog, and the next start's recovery finds and dispatches them."""
    config = {"commitlog_segment_bytes": 1 << 20, "max_message_body_bytes": 4096}
    source = MessageStore.open(StoreConfig(data_dir=str(tmp_path / "source"), **config))
    frames, mac = [], FrameMac(KEY, Role.MASTER)
    for i in range(20):
        start = source.commitlog.write_offset
        assert source.put_messages([Message("orders", b"body-%02d" % i)]).ok
        records = source.commitlog.read_records(start, source.commitlog.write_offset - start)
        frames.append(data_frame(mac, start, 0, 0, start, records))
    end = source.commitlog.write_offset
    source.shutdown()
    slave = MessageStore.open(StoreConfig(data_dir=str(tmp_path / "slave"), **config))
    assert slave.put_messages([Message("orders", b"seed")]).ok  # an active segment
    slave.truncate_to(0)
    following = Following()
    try:

        def start_at(fd: int, position: int, room: int, write_offset: int) -> int:
            following.start(LaneCase(b"", 0, position, room, write_offset, 0), fd)
            return write_offset

        slave.append_replicated_with(start_at)
        following.master.sendall(b"".join(frames))
        deadline = time.monotonic() + DEADLINE_S
        while following.follower.progress()[0] != end:
            assert time.monotonic() < deadline, "the thread did not take the frames"
        assert following.acks()[-1] == end
        following.stop()
        assert slave.commitlog.write_offset == 0  # never counted: the crash comes first
        slave.close_abruptly_for_tests()
    finally:
        following.close()
    recovered = MessageStore.open(StoreConfig(data_dir=str(tmp_path / "slave"), **config))
    try:
        assert recovered.commitlog.write_offset == end
        assert recovered.consume_queues.get("orders", 0).max_offset == 20
    finally:
        recovered.shutdown()
