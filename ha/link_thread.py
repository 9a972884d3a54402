"""A slave's link on a thread of its own: the replica lane's C reads the socket, appends
and acknowledges, and the interpreter is not on the path of a frame.

In the loop's callback (``ha/slave.py``'s ``take``) every arrival still cost a slave ~90
Python calls around the lane's C: the transport's callbacks, the put lock, the ACK, the
timers. The replicated no-op floor's slaves in C answer ~60 µs sooner than its Python ones
(docs/native-lane.md, "The native floor"), and on two cores the second slave's work queues
behind the first's on a single send's path. So while every frame is common, the link's
socket is lent to a thread (``ha._replica_lane.Follower``) that waits for it, takes the
whole DATA frames with the lane's ``apply_run`` (the code ``apply_frames`` runs, checked
against its twin), and seals and sends each arrival's ACK, all without the GIL. Python
hears what it needs a few milliseconds later, many arrivals at once (``TICK_S``): the log's
end to count, the confirmed offset, that the master was heard, the dispatch behind.

The thread ends on its own at the first frame it declines (a new epoch, a segment's roll,
anything not common), at a failed write, and when the link ends or breaks; the Python path
then reads on from exactly the byte and MAC count where it stopped (``LinkStream.take_back``)
and lends the socket again once it has taken what the thread left (``ha/slave.py``).

Invariants:

- While the thread runs it is the only user of the link's socket, of both directions'
  MACs and of the log's end: the transport is paused and nothing writes the link
  (``LinkStream.lend`` refuses while a write is buffered), and a slave has no other
  appender. ``stop`` joins the thread before anything else uses them, and gives back the
  MACs' counts.
- The log counts (``MessageStore.append_replicated_with``) only records the thread wrote,
  at or below the end it published after writing them, and inside the segment it was
  given; a reader of this node sees them after that, as after the callback lane's append.
- kill -9 at any instruction leaves what the callback lane left: records the log had not
  counted yet are in the CommitLog, which recovery scans and dispatches.

Not for a SYNC_FLUSH slave, whose ACK waits for an fsync that ``FlushBehind`` runs beside
the appends; it keeps the callback lane.

Thread-safety: everything here runs on the link's event loop; the thread touches no
Python object.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
from collections.abc import Callable
from dataclasses import dataclass

from ha import replica_lane
from ha.link_auth import LinkMacs
from ha.link_stream import LinkStream
from ha.replica_lane import write_failure
from store.message_store import MessageStore

# How soon Python counts what the thread appended after an arrival (the slaves' dispatch
# spacing, ha/slave.py's DISPATCH_SPACING_S): it then looks again every tick while frames
# come, and sleeps (``Follower.arm``) once a tick found none.
TICK_S = 0.005


class Ending(enum.IntEnum):
    """Why the thread ended (``ha/_replica_lane.c``'s END_*)."""

    RUNNING = 0
    STOPPED = 1  # ``stop`` asked
    DECLINED = 2  # at a frame for the Python path
    WRITE_FAILED = 3  # a write to the segment failed: ``error_number``
    CLOSED = 4  # the master ended the link
    BROKEN = 5  # the socket failed: ``error_number``
    MAC_FAILED = 6  # libcrypto failed to compute a tag


@dataclass(frozen=True)
class Ended:
    """How a thread ended: why, the errno of a failed write or socket, the end it last
    acknowledged and the bytes it left unread (the Python path's to read next)."""

    ending: Ending
    error_number: int
    acked: int
    unread: bytes

    def error(self) -> Exception | None:
        """What ends the link after this ending; None when the Python path reads on."""
        if self.ending in (Ending.STOPPED, Ending.DECLINED):
            return None
        if self.ending is Ending.CLOSED:
            return ConnectionError("the peer ended the link")
        if self.ending is Ending.MAC_FAILED:
            return RuntimeError("libcrypto failed to compute a GMAC")
        if self.ending is Ending.WRITE_FAILED:
            return write_failure(self.error_number)
        return ConnectionError(os.strerror(self.error_number))


def usable(macs: LinkMacs) -> bool:
    """Whether the thread can follow a link with these MACs (the C loaded: libcrypto's)."""
    native = replica_lane.native  # looked up at each link: tests take the C away
    return (
        native is not None
        and isinstance(macs.incoming.gmac, native.Gmac)
        and isinstance(macs.outgoing.gmac, native.Gmac)
    )


class LinkThread:
    """One link's thread, lent the socket again and again while the link lives.

    ``on_progress(end, confirmed)``: what the thread appended and heard, counted in the
    log (the confirmed offset -1 when no frame carried one); ``on_ended(ended)``: the thread
    ended on its own (``stop`` was not called)."""

    def __init__(
        self,
        store: MessageStore,
        macs: LinkMacs,
        link: LinkStream,
        *,
        epoch: Callable[[], int],
        on_progress: Callable[[int, int], None],
        on_ended: Callable[[Ended], None],
    ) -> None:
        native = replica_lane.native
        assert native is not None
        self._store = store
        self._macs = macs
        self._link = link
        self._epoch = epoch
        self._on_progress = on_progress
        self._on_ended = on_ended
        self._follower = native.Follower(macs.incoming.gmac, macs.outgoing.gmac)
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._follower.event_fd, self._on_event)
        self._tick: asyncio.TimerHandle | None = None
        self._arrivals = 0
        self.running = False
        self.closed = False

    def start(self, acked: int) -> bool:
        """Lend the link's socket to the thread from the log's end (``acked``: the end last
        acknowledged): False when it cannot be now (the socket cannot be lent, or the log
        ends at a segment's end, which the Python path rolls)."""
        if self.running or self.closed:
            return self.running
        unread = self._link.lend()
        if unread is None:
            return False
        socket_fd = self._link.get_extra_info("socket").fileno()
        macs = self._macs

        def start_at(fd: int, position: int, room: int, write_offset: int) -> int:
            if room > 0:
                self._follower.start(
                    socket_fd,
                    macs.incoming.sequence,
                    macs.outgoing.sequence,
                    fd,
                    position,
                    room,
                    write_offset,
                    self._epoch(),
                    acked,
                    unread,
                )
                self.running = True
            return write_offset  # nothing appended here

        try:
            self._store.append_replicated_with(start_at)
        finally:
            if not self.running:  # no room, or the thread could not start: read on here
                self._link.take_back(unread)
        return self.running

    def stop(self) -> Ended | None:
        """End the thread and join it (at once: it waits only on the socket), count what it
        appended and give the MACs' counts back: how it ended, None when it was not
        running."""
        if not self.running:
            return None
        ending, error_number, sequence, out_sequence, end, confirmed, acked, unread = (
            self._follower.stop()
        )
        self.running = False
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None
        self._macs.incoming.sequence = sequence
        self._macs.outgoing.sequence = out_sequence
        self._count(end, confirmed)
        return Ended(Ending(ending), error_number, acked, unread)

    def close(self) -> None:
        """The link ends: stop the thread, and hear nothing more of it."""
        self.stop()
        if not self.closed:
            self.closed = True
            self._loop.remove_reader(self._follower.event_fd)

    def _on_event(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self._follower.event_fd, 8)
        if not self.running:
            return
        self._catch_up()
        if self._follower.progress()[3] != Ending.RUNNING:
            ended = self.stop()
            assert ended is not None
            self._on_ended(ended)
        elif self._tick is None:
            self._tick = self._loop.call_later(TICK_S, self._on_tick)

    def _on_tick(self) -> None:
        self._tick = None
        if not self.running:
            return
        if not self._catch_up():
            self._follower.arm()  # sleep until the next arrival wakes ``_on_event``
            if not self._catch_up():  # none came between the look and the arming
                return
        self._tick = self._loop.call_later(TICK_S, self._on_tick)

    def _catch_up(self) -> bool:
        """Count what the thread appended since the last look: whether anything arrived."""
        end, confirmed, arrivals, _ = self._follower.progress()
        if arrivals == self._arrivals:
            return False
        self._arrivals = arrivals
        self._count(end, confirmed)
        return True

    def _count(self, end: int, confirmed: int) -> None:
        store = self._store
        if end > store.write_offset:

            def written(fd: int, position: int, room: int, write_offset: int) -> int:
                assert write_offset <= end <= write_offset + room, "counted past the segment"
                return end

            store.append_replicated_with(written)
        self._on_progress(end, confirmed)
