"""Either end of a replication link: a stream whose large reads land in place, or whose
small frames are taken as they arrive.

A DATA frame of a busy link carries ~128 KiB of records. Through asyncio's streams each
byte was copied five times on its way from the socket to the CommitLog (the loop's bytes
of a read, the reader's buffer, its slice, the bytes of that slice, the payload's slice);
here it is copied once, by the kernel, into the buffer of the frame it belongs to, which
the slave hands on as it is.

``LinkStream`` is an ``asyncio.BufferedProtocol`` with the few stream methods the link's
code calls (``readexactly``, ``write``, ``writelines``, ``drain``, ``is_closing``,
``close``, ``abort``, ``get_extra_info``), so ``ha/wire.py``'s readers and writers take it
where they take an asyncio reader or writer.

After the handshake both ends take frames another way (``deliver_to``): each arrival hands
the unread bytes to the end's taker in the loop's own callback (the master's ACK parser,
the slave's replica lane). Through a read, every frame woke the link's task: a future, a
task step and the coroutines' frames resumed, for a few dozen or hundred bytes. A frame
larger than the staging buffer (a slave's DATA frame of a batch) is gathered whole in a
buffer of its own (``collect``) and handed to the taker alone.

Invariants:

- Bytes are delivered in the order they arrived, each once: the unread bytes are
  ``_staged[_start:_end]``, and a read of more than ``STAGED_BYTES`` takes those first,
  then has the kernel fill the rest of its own buffer (``_frame[_filled:]``).
- The staging buffer is never overwritten while it holds unread bytes: reading pauses
  when it is full and resumes when a read takes some.
- A read of ``n`` bytes allocates ``n`` bytes only once its caller asked for them, and the
  link's readers check a frame's length against their limit before they ask.
- Once bytes are delivered (``deliver_to``) no read is made again: every arrival goes to
  the taker, which leaves at most one partial frame unread, so the staging buffer never
  fills: a frame larger than ``STAGED_BYTES`` (a slave's DATA frame of a batch) is
  gathered in a buffer of its own (``collect``) and handed to the taker alone, whole.

A read that is cancelled or fails part way leaves the stream at no frame boundary: the
link's code ends the link on any such error, as it did with asyncio's streams.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

# Small frames (ACK-sized heartbeats, handshake JSON, single-message DATA frames) are read
# through this buffer, several per read; larger reads take at most this much from it.
STAGED_BYTES = 16 * 1024


class LinkStream(asyncio.BufferedProtocol):
    """One replication connection, as either end reads and writes it."""

    def __init__(self, on_connected: Callable[[LinkStream], None] | None = None) -> None:
        """``on_connected``: called with the stream once its connection is made (a server's
        streams start their link's task with it)."""
        self._staged = bytearray(STAGED_BYTES)
        self._start = 0
        self._end = 0
        self._frame: bytearray | None = None
        self._filled = 0
        self._waiter: asyncio.Future[None] | None = None
        self._eof = False
        self._error: BaseException | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._drained: asyncio.Future[None] | None = None
        self.transport: asyncio.Transport | None = None
        self._on_connected = on_connected
        self._take: Callable[[memoryview], int] | None = None  # deliver_to's taker
        self._collecting = 0  # the size of a large frame the taker asked for (``collect``)
        self._failure: Exception | None = None  # what the taker raised
        self._finished = False
        self._lent = False  # the socket read by a thread (``lend``) until ``take_back``
        # The connected socket's descriptor, for a native write of a whole frame while the
        # transport buffers nothing (ha/master.py's ``write_log``); -1 until connected.
        self.socket_fd = -1

    # ---- the protocol (called by the event loop) -----------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        raw = transport.get_extra_info("socket")
        plain = raw is not None and transport.get_extra_info("sslcontext") is None
        self.socket_fd = raw.fileno() if plain else -1
        if self._on_connected is not None:
            self._on_connected(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return memoryview(self._frame)[self._filled :]
        if self._start == self._end:
            self._start = self._end = 0
        elif self._end == STAGED_BYTES:  # unread bytes at the tail: move them to the front
            unread = self._end - self._start
            self._staged[:unread] = self._staged[self._start : self._end]
            self._start, self._end = 0, unread
        assert self._end < STAGED_BYTES, "reading while the staging buffer is full"
        return memoryview(self._staged)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is not None:
            self._filled += nbytes
            if self._filled == len(self._frame):
                # Full: the loop's next read goes to the staging buffer.
                frame, self._frame = self._frame, None
                if self._take is not None:  # a frame gathered for the taker (``collect``)
                    self._hand(memoryview(frame), whole=True)
                    return
        else:
            self._end += nbytes
            if self._take is not None:
                self._deliver()
                return  # nobody waits on an arrival: the taker has had it
            if self._end - self._start == STAGED_BYTES:
                self._pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        if exc is not None:
            self._error = exc
        self._wake()
        self._writing_paused = False
        self._release_drain()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._release_drain()

    # ---- reading -------------------------------------------------------------------------
    async def readexactly(self, n: int) -> bytes | bytearray:
        """The next ``n`` bytes; ``asyncio.IncompleteReadError`` when the peer ended the
        link first, ``ConnectionError`` when it broke. Up to ``STAGED_BYTES`` come as a
        copy; more come in a buffer of their own that the kernel filled."""
        if n <= STAGED_BYTES:
            while self._end - self._start < n:
                await self._more(n)
            data = bytes(memoryview(self._staged)[self._start : self._start + n])
            self._start += n
            self._resume_reading()
            return data
        frame = bytearray(n)
        taken = self._end - self._start
        frame[:taken] = memoryview(self._staged)[self._start : self._end]
        self._start = self._end = 0
        self._frame, self._filled = frame, taken
        self._resume_reading()
        try:
            while self._frame is not None:
                await self._more(n)
        finally:
            self._frame = None  # cancelled or failed: the link is of no more use either way
        return frame

    async def _more(self, wanted: int) -> None:
        """Wait for the next read, or raise if none can come."""
        if self._error is not None:
            raise self._broken()
        if self._eof:
            if self._frame is not None:
                partial = bytes(self._frame[: self._filled])
            else:
                partial = bytes(self._staged[self._start : self._end])
            self._start = self._end = 0  # consumed by the failed read, as asyncio's are
            raise asyncio.IncompleteReadError(partial, wanted)
        await self._next_event()

    async def _next_event(self) -> None:
        """Wait for the next arrival, end or failure of the link (one waiter at a time)."""
        assert self._waiter is None, "two reads or waits at once"
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _broken(self) -> ConnectionError:
        """The error a read, wait or drain raises once the transport failed: the kernel's
        words alone (the link's code says "link closed:" before them)."""
        return ConnectionError(str(self._error))

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._reading_paused and self.transport is not None and not self._eof:
            self._reading_paused = False
            self.transport.resume_reading()

    # ---- frames taken as they arrive -----------------------------------------------------
    def deliver_to(self, take: Callable[[memoryview], int]) -> None:
        """From now on, hand the unread bytes to ``take`` as they arrive, in the loop's
        callback, instead of to reads. ``take`` returns how many it used (whole frames: the
        rest waits for more) and raises to end the link; ``ended`` raises it then. No read
        may be waiting, and none may be made after."""
        assert self._waiter is None and self._frame is None, "deliver_to beside a read"
        self._take = take
        self._deliver()

    def collect(self, size: int) -> None:
        """From the taker, while it is handed bytes: the bytes it leaves unread begin a frame
        of ``size`` bytes, more than the staging buffer holds. They are gathered in a buffer
        of the frame's own, which the taker is handed alone once it is whole (and must
        use whole). The taker checks ``size`` against its limit before it asks."""
        assert self._take is not None and size > STAGED_BYTES, size
        self._collecting = size

    def _deliver(self) -> None:
        if self._start == self._end or self._take is None:
            return
        used = self._hand(memoryview(self._staged)[self._start : self._end])
        if used is None:
            return
        assert 0 <= used <= self._end - self._start, "the taker used bytes it was not given"
        self._start += used
        size, self._collecting = self._collecting, 0
        if size and self._take is not None:
            unread = self._end - self._start
            assert unread < size, "a frame to gather that has arrived whole"
            frame = bytearray(size)
            frame[:unread] = memoryview(self._staged)[self._start : self._end]
            self._start = self._end = 0
            self._frame, self._filled = frame, unread

    def _hand(self, unread: memoryview, *, whole: bool = False) -> int | None:
        """What the taker used of ``unread``; None when it raised, which ends the link."""
        try:
            used = self._take(unread)  # type: ignore[misc]  # set: the callers check
        except Exception as error:  # the taker's verdict on the link: it ends here
            self.fail(error)
            return None
        assert not whole or used == len(unread) or self._take is None, "a gathered frame half used"
        return used

    def fail(self, error: Exception) -> None:
        """End the link with ``error``, which ``ended`` raises: the taker's verdict, or a
        lent socket's (``lend``)."""
        self._take = None
        self._collecting = 0
        self._failure = error
        self._lent = False
        self.abort()
        self._wake()

    # ---- the socket lent to a thread (ha/link_thread.py) ---------------------------------
    def lend(self) -> bytes | None:
        """While bytes are delivered: stop reading, and give up the bytes not taken yet, for
        a thread that reads the socket itself from there on. None when the socket cannot be
        lent now: a large frame is being gathered, a write is still buffered (the thread
        writes the socket too), or the link is ending."""
        transport = self.transport
        if (
            self._take is None
            or self._frame is not None
            or self._collecting
            or self._eof
            or self._error is not None
            or transport is None
            or transport.is_closing()
            or transport.get_write_buffer_size()
        ):
            return None
        unread = bytes(memoryview(self._staged)[self._start : self._end])
        self._start = self._end = 0
        self._lent = True
        self._pause_reading()  # a read after the thread (``closed_by_peer``) resumes it
        return unread

    def take_back(self, unread: bytes) -> None:
        """The thread that was lent the socket has ended: deliver the bytes it left unread,
        then read on."""
        assert self._lent and self._start == self._end == 0, "taken back, not lent"
        self._lent = False
        if unread and self._take is not None:
            used = self._hand(memoryview(unread))
            if used is None:
                return
            rest = memoryview(unread)[used:]
            size, self._collecting = self._collecting, 0
            if self._take is None:  # the taker finished or failed: nothing more is read
                pass
            elif size:
                self._frame, self._filled = bytearray(size), len(rest)
                self._frame[: len(rest)] = rest
            else:
                assert len(rest) < STAGED_BYTES, "a partial frame larger than the staging buffer"
                self._staged[: len(rest)] = rest
                self._end = len(rest)
        if self.transport is not None and not self.transport.is_closing():
            self._resume_reading()

    async def closed_by_peer(self) -> None:
        """Discard whatever arrives (a frame half read included) until the other end
        closes the link: how a slave that said LEAVING hears its master's answer."""
        self._frame = None
        self._start = self._end = self._collecting = 0
        self._take = len  # every byte used, none kept
        self._resume_reading()
        while not self._eof and self._error is None:
            await self._next_event()

    def finish(self) -> None:
        """Stop delivering (a taker's way to end its link quietly): ``ended`` returns."""
        self._take = None
        self._finished = True
        self._wake()

    async def ended(self) -> None:
        """Wait, while bytes are delivered, for the link to end: returns after ``finish``;
        raises what the taker raised, else ``ConnectionError`` once the link is closed."""
        while True:
            if self._failure is not None:
                raise self._failure
            if self._finished:
                return
            if self._error is not None:
                raise self._broken()
            if self._eof:
                raise ConnectionError("the peer ended the link")
            await self._next_event()

    # ---- writing -------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def writelines(self, parts: tuple[bytes, ...] | list[bytes]) -> None:
        """One gathered write of ``parts`` (uvloop: one ``writev``, nothing joined first)."""
        assert self.transport is not None
        self.transport.writelines(parts)

    def is_closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    async def drain(self) -> None:
        """Return once the transport takes more writes; ``ConnectionError`` once closed."""
        if self._error is not None or self.is_closing():
            raise ConnectionError("the replication link is closed")
        while self._writing_paused:
            if self._drained is None:
                self._drained = asyncio.get_running_loop().create_future()
            await self._drained
        if self._error is not None:
            raise self._broken()

    def _release_drain(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """End the link now, unsent bytes dropped: a read waiting on it fails."""
        if self.transport is not None:
            self.transport.abort()

    def get_extra_info(self, name: str, default: object = None) -> object:
        if self.transport is None:
            return default
        return self.transport.get_extra_info(name, default)


async def open_link(host: str, port: int) -> LinkStream:
    """Connect to a master's replication port (the slave's end)."""
    _, stream = await asyncio.get_running_loop().create_connection(LinkStream, host, port)
    return stream
