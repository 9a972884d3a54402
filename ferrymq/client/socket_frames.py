"""Whole remoting frames from a blocking socket, each copied once out of its receive buffer.

The SDK's blocking channel (``RemotingChannel``) reads its answers here. A frame is
received into one buffer that is reused, and a frame too large for it gets a buffer of its
own size. ``FrameSplitter`` (the codec's, for streams fed chunk by chunk) served here
before. Its growing buffer, its slices and a fresh buffer for every ``recv`` copied each
byte of an answer four times, plus the ``recv``: 15 % of a reader's CPU went to memmove
when it read a backlog in fetches of 512 KiB.
"""

from __future__ import annotations

import socket

from ferrymq.codec.remoting import DEFAULT_MAX_FRAME_BYTES, FRAME_LENGTH, frame_length

BUFFER_BYTES = 1 << 20  # holds a fetch answer of 512 records of 1 KiB


class SocketFrames:
    """Not thread-safe: one per connection, read by whoever receives on it."""

    def __init__(
        self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, buffer_bytes: int = BUFFER_BYTES
    ) -> None:
        assert buffer_bytes >= FRAME_LENGTH.size
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray(buffer_bytes)
        self._view = memoryview(self._buffer)
        self._start = 0  # the first byte not handed out yet
        self._end = 0  # the end of what was received

    @property
    def buffered(self) -> int:
        """Bytes received and not handed out yet (a part of the next frame, or more)."""
        return self._end - self._start

    def holds_whole_frame(self) -> bool:
        """Whether a whole frame is buffered (``next_frame`` would not read the socket)."""
        buffered = self._end - self._start
        if buffered < FRAME_LENGTH.size:
            return False
        length = frame_length(self._view[self._start : self._end], self.max_frame_bytes)
        return buffered >= FRAME_LENGTH.size + length

    def next_frame(self, sock: socket.socket) -> bytes:
        """The next whole frame without its total length (what ``decode`` takes), read
        from ``sock`` as far as needed. The socket's timeout and errors reach the caller,
        which closes the connection: what was buffered is not used again. A frame that
        announces a length over ``max_frame_bytes`` raises ``FrameTooLarge`` before any
        of it is read."""
        while self._end - self._start < FRAME_LENGTH.size:  # (not ``buffered``: a call)
            self._receive(sock, FRAME_LENGTH.size)
        length = frame_length(self._view[self._start : self._end], self.max_frame_bytes)
        total = FRAME_LENGTH.size + length
        if total > len(self._buffer):
            return self._large_frame(sock, length)
        while self._end - self._start < total:
            self._receive(sock, total)
        begin = self._start + FRAME_LENGTH.size
        self._start = begin + length
        if self._start == self._end:
            self._start = self._end = 0
        return bytes(self._view[begin : begin + length])

    def _receive(self, sock: socket.socket, wanted: int) -> None:
        """Receive more, after moving what is buffered to the front when fewer than
        ``wanted`` bytes from ``_start`` would fit."""
        if self._start + wanted > len(self._buffer):
            held = self.buffered
            self._view[:held] = self._view[self._start : self._end]
            self._start, self._end = 0, held
        self._end += _received_into(sock, self._view[self._end :])

    def _large_frame(self, sock: socket.socket, length: int) -> bytes:
        """A frame larger than the buffer: what is buffered of it, then the rest received
        straight into a buffer of the frame's size."""
        frame = bytearray(length)
        view = memoryview(frame)
        held = self.buffered - FRAME_LENGTH.size
        begin = self._start + FRAME_LENGTH.size
        view[:held] = self._view[begin : self._end]
        self._start = self._end = 0
        while held < length:
            held += _received_into(sock, view[held:])
        return bytes(frame)


def _received_into(sock: socket.socket, view: memoryview) -> int:
    """Bytes received into ``view`` (at least one); the node's close is an error."""
    received = sock.recv_into(view)
    if not received:
        raise ConnectionError("the node closed the connection")
    return received
