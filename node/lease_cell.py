"""When this node's lease was last renewed: 16 bytes of memory shared by the node's process
(which reads it before every write) and its routing host (which writes it when routing
commits a heartbeat, ``node/routing_host.py``).

Why shared memory and not a message: a node's process that the host had kept alive
through a stall (a loaded host froze nodes' processes for 2-4 s) resumed with its requests
and its liveness thread racing, and the writes that won checked a lease the unread
messages had already renewed: refused for the lease while routing held it. In the cell a
renewal is visible to the node the moment the host makes it.

Layout: a sequence number (even when the cell is stable, odd while the host writes), the
renewal's ``time.monotonic()`` (one clock for every process of the host) and the time
until which the host counts itself starved of CPU (``starved_until``: its own wakeups came
late, so a lapse of the lease then is overload, not a cut from routing), each 8 bytes and
aligned. The host is the one writer; a reader retries while the number is odd or
moved under it (a seqlock), so it never takes half of one renewal and half of another.

Each field is read and written through a typed memoryview: one aligned 8-byte load or
store, which the CPU does whole. (``struct``'s little-endian formats copy byte by byte,
and a sequence number read half before and half after a renewal let the reader return
values out of order.) x86-64 keeps loads in order with loads and stores with stores, which
is all a seqlock asks of it.
"""

from __future__ import annotations

import mmap
import os

SIZE = 24


class LeaseCell:
    def __init__(self, fd: int | None = None, renewed_at: float = 0.0) -> None:
        """A new cell (``fd`` None: the node's side, holding ``renewed_at``), or the one
        whose memory ``fd`` names (the host's side)."""
        created = fd is None
        if fd is None:
            fd = os.memfd_create("ferrymq-lease")
            os.ftruncate(fd, SIZE)
        self.fd = fd
        self._memory = mmap.mmap(fd, SIZE)
        words = memoryview(self._memory)
        self._sequence = words.cast("Q")
        self._time = words.cast("d")
        words.release()
        if created:
            self.renew(renewed_at)

    def renew(self, renewed_at: float) -> None:
        """Record a renewal (the host's one writer)."""
        self._write(1, renewed_at)

    def mark_starved(self, until: float) -> None:
        """The host's wakeups come late: count it starved until ``until``."""
        self._write(2, until)

    def _write(self, slot: int, value: float) -> None:
        sequence = self._sequence[0]
        self._sequence[0] = sequence + 1
        self._time[slot] = value
        self._sequence[0] = sequence + 2

    @property
    def renewed_at(self) -> float:
        return self._read(1)

    @property
    def starved_until(self) -> float:
        return self._read(2)

    def _read(self, slot: int) -> float:
        while True:
            before = self._sequence[0]
            value = self._time[slot]
            if before % 2 == 0 and self._sequence[0] == before:
                return value

    def close(self) -> None:
        self._sequence.release()
        self._time.release()
        self._memory.close()
        os.close(self.fd)
