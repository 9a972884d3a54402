"""SocketFrames hands out the frames FrameSplitter cuts from the same bytes, whatever the
chunks they arrive in and whatever their size against its buffer."""

from __future__ import annotations

import socket
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.client.socket_frames import SocketFrames
from ferrymq.codec.remoting import FRAME_LENGTH, FrameSplitter, FrameTooLarge


def framed(payload: bytes) -> bytes:
    return FRAME_LENGTH.pack(len(payload)) + payload


def received_frames(stream: bytes, chunks: list[int], buffer_bytes: int, count: int) -> list:
    """``count`` frames read by a SocketFrames of ``buffer_bytes`` from ``stream`` sent in
    chunks of the given sizes (the rest at once), each chunk its own send."""
    ours, theirs = socket.socketpair()
    ours.settimeout(10)

    def send() -> None:
        position = 0
        for size in chunks:
            theirs.sendall(stream[position : position + size])
            position += size
        theirs.sendall(stream[position:])

    sender = threading.Thread(target=send)
    sender.start()
    try:
        frames = SocketFrames(buffer_bytes=buffer_bytes)
        return [frames.next_frame(ours) for _ in range(count)]
    finally:
        sender.join(10)
        ours.close()
        theirs.close()


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(min_size=4, max_size=300), min_size=1, max_size=12),
    chunks=st.lists(st.integers(1, 200), max_size=20),
    buffer_bytes=st.sampled_from([4, 7, 64, 256, 1 << 20]),
)
def test_the_frames_are_the_splitters_whatever_the_chunks_and_the_buffer(
    payloads, chunks, buffer_bytes
):
    stream = b"".join(framed(p) for p in payloads)
    expected = FrameSplitter().feed(stream)
    assert received_frames(stream, chunks, buffer_bytes, len(payloads)) == expected == payloads


def test_a_large_frame_among_small_ones_in_one_send():
    payloads = [b"a" * 10, bytes(range(256)) * 40, b"b" * 5, b"c" * 3000, b"d" * 4]
    stream = b"".join(framed(p) for p in payloads)
    assert received_frames(stream, [], 1024, len(payloads)) == payloads
    assert received_frames(stream, [3, 1, 2000], 1024, len(payloads)) == payloads


def test_a_frame_over_the_limit_is_refused_before_its_body_is_read():
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(FRAME_LENGTH.pack(1 << 30))  # and nothing more
        ours.settimeout(5)
        with pytest.raises(FrameTooLarge):
            SocketFrames(max_frame_bytes=1 << 20).next_frame(ours)
    finally:
        ours.close()
        theirs.close()


@pytest.mark.parametrize("buffer_bytes", [16, 1 << 20])
def test_a_connection_closed_inside_a_frame_is_a_connection_error(buffer_bytes):
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(framed(b"whole") + FRAME_LENGTH.pack(100) + b"part")
        theirs.close()
        ours.settimeout(5)
        frames = SocketFrames(buffer_bytes=buffer_bytes)
        assert frames.next_frame(ours) == b"whole"
        with pytest.raises(ConnectionError):
            frames.next_frame(ours)
    finally:
        ours.close()
