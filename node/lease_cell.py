"""When this node's lease was last renewed: 16 bytes of memory shared by the node's process
(which reads it before every write) and its routing host (which writes it when routing
commits a heartbeat, ``node/routing_host.py``).

Why shared memory and not a message: a node's process that the host had kept alive
through a stall (a loaded host froze nodes' processes for 2-4 s) resumed with its requests
and its liveness thread racing, and the writes that won checked a lease the unread
messages had already renewed: refused for the lease while routing held it. In the cell a
renewal is visible to the node the moment the host makes it.

Layout: a sequence number (even when the cell is stable, odd while the host writes) and
the renewal's ``time.monotonic()`` (one clock for every process of the host), each 8 bytes
and aligned. The host is the one writer; a reader retries while the number is odd or
moved under it (a seqlock), so it never takes half of one renewal and half of another.
"""

from __future__ import annotations

import mmap
import os
import struct

SEQUENCE = struct.Struct("<Q")
TIME = struct.Struct("<d")
SIZE = 16


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
        if created:
            self.renew(renewed_at)

    def renew(self, renewed_at: float) -> None:
        """Record a renewal (the host's one writer)."""
        sequence = SEQUENCE.unpack_from(self._memory, 0)[0]
        SEQUENCE.pack_into(self._memory, 0, sequence + 1)
        TIME.pack_into(self._memory, 8, renewed_at)
        SEQUENCE.pack_into(self._memory, 0, sequence + 2)

    @property
    def renewed_at(self) -> float:
        while True:
            before = SEQUENCE.unpack_from(self._memory, 0)[0]
            renewed_at = TIME.unpack_from(self._memory, 8)[0]
            if before % 2 == 0 and SEQUENCE.unpack_from(self._memory, 0)[0] == before:
                return renewed_at

    def close(self) -> None:
        self._memory.close()
        os.close(self.fd)
