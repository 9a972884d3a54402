"""The master side of replication: streams this node's CommitLog to the slaves of its
broker group and knows how far each one has it (RocketMQ's HAService, AutoSwitch flavour).

Acknowledgement (``wait_replicated``): under SYNC replication a write is acknowledged once
*every* slave the master must count has acknowledged its end offset, and those slaves plus
the master are at least ``min_insync_replicas``. The slaves counted are the routing
state's in-sync set plus any slave the master has proposed to add and minus none it has
proposed to remove until routing commits the change (RocketMQ's union rule while an
in-sync change is pending). So every member of the committed in-sync set holds every
acknowledged write, and electing any of them loses none.

``confirmed_offset`` is how far that holds now: consumers of a SYNC group read only up to
it, so nothing they read can vanish in a failover.

How far behind a slave is, is a time (``EndTimeline``): the log's end is marked as it
grows, and an ack of offset X says the slave holds everything the master had at the last
mark at or below X ("caught up as of", Kafka's rule for its ISR). Measured against the
end of the moment instead, a slave under continuous load was never caught up (new appends
are always in flight) and left the in-sync set after ``max_lag_ms`` although it was
milliseconds behind. ``backlog_s`` is the same measure for the in-sync set as a whole
(the confirmed offset): ``ha/role.py`` refuses new writes with SYSTEM_BUSY while it is
past ``max_backlog_ms``, so a master never takes more than its slaves can confirm.

The reput: while a SYNC master has slaves to wait for, its appends leave their
consume-queue and index dispatch behind them (``MessageStore.dispatches_behind``), and the
master dispatches when the confirmed offset moves (the confirming ACK's intake, a smaller
in-sync set), after the answers it releases and before the read cap moves, or
``REPUT_TAIL_S`` after an append no confirmation followed (RocketMQ's ReputMessageService
runs behind its CommitLog the same way); behind by one append at most: a master busier
than one append per ACK dispatches right after each append's copies left, as without it.
Nothing is lost by it: consumers read only below the read cap, which moves only after the
dispatch (``on_confirmed``), and what a crash leaves undispatched is in the CommitLog,
which recovery dispatches again. What it gains: the master leaves the CPU right after its
DATA frames, so on two cores the second slave does not queue behind the master's own
dispatch; an ACK that confirms nothing costs only its count; and the dispatch runs after
the writers' answers left, while their clients read them.

Thread-safety: everything runs on the node's event loop.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import heapq
import logging
import os
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field

from ferrymq.codec.dead_peer import DEAD_LINK_S, SLOW_PEER_S, detect_dead_peer, unanswered_s
from ha.epochs import EpochHistory
from ha.expiries import CallLater, Expiries
from ha.link_auth import (
    MAC_BYTES,
    FrameMac,
    Handshake,
    LinkMacs,
    Role,
    is_nonce,
    new_nonce,
    proof,
    proof_matches,
    session_macs,
)
from ha.link_stream import LinkStream
from ha.silence import SilenceWatch
from ha.wire import (
    ACK,
    ACK_FRAME_BYTES,
    DATA_HEADER,
    FRAME_HEADER,
    PROTOCOL_VERSION,
    ForgedFrame,
    Kind,
    LinkError,
    control,
    data_frame,
    data_frame_parts,
    data_payload,
    read_plain,
    read_sealed_control,
    sealed_control,
    take_sealed,
    version_mismatch,
    write_frame,
    write_frame_parts,
)
from store import _speedups as store_speedups
from store.commitlog import LogWriter, Prepared, PreparedRun
from store.errors import DiskFullError
from store.message_store import MessageStore
from store.results import AppendedMessage, PutResult, PutStatus

try:
    from ha import _replica_lane as native
except ImportError:  # no libcrypto.so.3 to open: the store writes, ``_push`` sends
    native = None

# The links one native append sends to at most (``append_and_push``'s bound, named in C).
NATIVE_LINKS_MAX = native.LINKS_MAX if native is not None else 0

log = logging.getLogger("ferrymq.ha.master")

# A put's caller's preparation, given its ``PutResult`` when the put must wait for the
# in-sync replicas: it returns what runs the moment they hold it (a door's answer,
# encoded now and written then).
OnReplicated = Callable[[PutResult], Callable[[], None]]


def _prepared(prepare: Callable[[], Callable[[], None]]) -> Callable[[], None] | None:
    """A waiter's ``prepare()``; when it fails the waiter is answered as it returns (the
    failure is logged: the write is stored, its caller must still hear so)."""
    try:
        return prepare()
    except Exception:
        log.exception("preparing a confirmed write's callback failed (answered on return)")
        return None


def _not_replicated(result: PutResult) -> PutResult:
    """What a SYNC put that was not confirmed in time is answered."""
    return PutResult(
        PutStatus.FLUSH_SLAVE_TIMEOUT,
        result.appended,
        error=(
            "stored on the master but not acknowledged by the in-sync replicas in time: "
            "it may or may not survive a failover (retry; duplicates carry the same id)"
        ),
    )


def _run_on_confirmed(on_confirmed: Callable[[], None]) -> None:
    """A waiter's ``on_confirmed``: it runs inside an ACK's intake (or whatever moved the
    confirmed offset), so what it raises is logged, never raised into the link."""
    try:
        on_confirmed()
    except Exception:
        log.exception("a confirmed write's callback failed (its waiter still returns True)")


CHUNK_BYTES = 256 << 10
HEARTBEAT_S = 1.0
# A SYNC master's confirmed offset is what its slaves may serve; it rides on the next frame
# to each slave. A link left without one this long after the offset moved (nothing more was
# written) is sent a heartbeat carrying it, rather than waiting for the second of silence.
CONFIRM_NOTICE_S = 0.005
HANDSHAKE_TIMEOUT_S = 5.0
# A slave answers every frame, heartbeats included (one a second): one silent this long is
# gone or stuck, and its link is dropped (a node uses its max_lag_ms when that is longer).
SILENT_SLAVE_TIMEOUT_S = 10.0
# ``on_appended`` writes new records to a link at once while its transport holds less than
# this; past it the link's task waits for the slave to read (``drain``) and sends the rest.
PUSH_BUFFER_BYTES = 2 * CHUNK_BYTES
# A slave without a link is not lagging yet for this long after it was last connected (or
# after this node became master): a failover makes every slave reconnect.
DISCONNECT_GRACE_S = 1.0
# How often a link asks its kernel whether the path to the slave is cut (``_watch_path``).
PATH_CHECK_S = 0.25
# A SYNC master's appends are dispatched at the next ACK, or this long after the first append
# no ACK followed (a slave that stopped acknowledging): what stays undispatched is bounded.
REPUT_TAIL_S = 0.02
MARK_SPACING_S = 0.01  # the end timeline keeps at most one mark per this long
MARKS_MAX = 20_000  # 200 s of marks under continuous load; older ones are dropped


class EndTimeline:
    """The log's end over time, as marks (end, time): at ``time`` the end first moved past
    the previous mark's end, and ``end`` is as far as it got within ``MARK_SPACING_S`` of
    that (later moves in the window are folded into the mark); the last ``MARKS_MAX`` are
    kept. Between one mark's window and the next mark the end stood still, so an answer is
    older than the truth by less than one spacing, never newer.

    A mark dates when the end *left* an offset, not when it reached it: after a quiet
    spell the two are far apart, and the first write after a quiet second must not look a
    second behind (it was refused as REPLICATION_BACKLOG while its neighbour's copy was on
    its way)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._ends: list[int] = []
        self._times: list[float] = []

    def mark(self, end: int) -> None:
        if self._ends and end <= self._ends[-1]:
            return
        now = self.clock()
        if self._ends and now - self._times[-1] < MARK_SPACING_S:
            self._ends[-1] = end
            return
        self._ends.append(end)
        self._times.append(now)
        if len(self._ends) > 2 * MARKS_MAX:
            del self._ends[:MARKS_MAX], self._times[:MARKS_MAX]

    def reset(self, end: int) -> None:
        """A new term: nothing before ``end`` is anybody's backlog."""
        self._ends, self._times = [end], [self.clock()]

    def held_as_of(self, offset: int) -> float | None:
        """The latest time at which the log's end was at or below ``offset`` (whoever
        holds the log below ``offset`` held all of it then): when the end next moved past
        the last mark at or below ``offset``, or now if it has not; None if no kept mark is
        at or below ``offset``."""
        index = bisect_right(self._ends, offset) - 1
        if index < 0:
            return None
        if index + 1 == len(self._times):
            return self.clock()
        return self._times[index + 1]


@dataclass
class SlaveLink:
    node_id: str
    acked: int
    connected_at: float
    caught_up_at: float
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    # While streaming: where DATA frames go, what seals them, how far they were written.
    writer: LinkStream | None = None
    mac: FrameMac | None = None
    sent: int = 0
    sent_at: float = 0.0  # loop time of the last frame written (heartbeats fill silences)
    told_confirmed: int = 0  # the confirmed offset the last frame written carried
    path_cut: bool = False  # ended because its network path was gone (``_watch_path``)
    leaving: bool = False  # the slave said it stops following (LEAVING)


class ReplicationMaster:
    def __init__(
        self,
        store: MessageStore,
        epochs: EpochHistory,
        node_id: str,
        broker_group: str,
        secret: str,
        *,
        sync: bool,
        min_insync_replicas: int,
        is_member: Callable[[str], bool],
        clock: Callable[[], float] = time.monotonic,
        call_later: CallLater | None = None,
        handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
        silent_slave_timeout_s: float = SILENT_SLAVE_TIMEOUT_S,
    ) -> None:
        self.store = store
        self.epochs = epochs
        self.node_id = node_id
        self.broker_group = broker_group
        self.secret = secret
        self.sync = sync
        self.min_insync_replicas = min_insync_replicas
        self.is_member = is_member
        self.clock = clock
        self.handshake_timeout_s = handshake_timeout_s
        self.silent_slave_timeout_s = silent_slave_timeout_s
        self.active = False  # true while this node is its group's master
        self.links: dict[str, SlaveLink] = {}
        # Slaves whose acks count: the committed in-sync set with pending changes (union).
        self.counted: frozenset[str] = frozenset()
        self.confirmed_offset = 0
        self.activated_at = 0.0
        self._last_connected: dict[str, float] = {}  # slave -> when its link last ended
        self._gone: set[str] = set()  # slaves whose last link ended with no grace to give
        # (end offset, arrival, its future, what to run as it is confirmed), a heap.
        self._waiters: list[tuple[int, int, asyncio.Future[bool], Callable[[], None] | None]] = []
        self._waiter_seq = 0
        self._expiries = Expiries(clock, call_later)
        self._call_later = call_later
        self._confirm_notice: asyncio.TimerHandle | None = None
        self._confirm_notice_armed_at = 0.0
        self._reput_tail: asyncio.TimerHandle | None = None
        self.on_confirmed: Callable[[int], None] = lambda offset: None
        # A slave is gone for good (path cut, or it said it is leaving): it may leave the
        # in-sync set now, and the role's next check should not wait for its period.
        self.on_slave_gone: Callable[[], None] = lambda: None
        self._server: asyncio.base_events.Server | None = None
        self._link_tasks: set[asyncio.Task[None]] = set()  # one per connected slave
        self.timeline = EndTimeline(clock)

    # ---- lifecycle ---------------------------------------------------------------------
    async def listen(self, host: str, port: int) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: LinkStream(on_connected=self._accepted), host, port
        )
        return self._server.sockets[0].getsockname()[1]

    def _accepted(self, stream: LinkStream) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(stream))
        self._link_tasks.add(task)
        task.add_done_callback(self._link_tasks.discard)

    def activate(self, counted: frozenset[str], confirmed: int = 0) -> None:
        """This node became master (its epoch is already in the history). ``confirmed`` is
        what the previous master said its in-sync set held: readable from the start."""
        self.active = True
        self.activated_at = self.clock()
        self._gone.clear()  # from an earlier term: every slave gets its reconnection's grace
        self.counted = counted - {self.node_id}
        end = self.store.write_offset
        self.timeline.reset(end)
        self.confirmed_offset = end if not self.counted else min(confirmed, end)
        self._set_reput()
        self._reput()  # what the slave's own dispatch behind left, if anything
        self._recompute()

    def deactivate(self) -> None:
        """No longer master: drop every link (slaves reconnect to the new master) and fail
        every waiting write (it was not acknowledged as replicated)."""
        self.active = False
        if self.store.log_writer == self.write_log:
            self.store.set_log_writer(None)
        self._set_reput()  # a slave, or a node shutting down, dispatches in its appends
        if self._confirm_notice is not None:
            self._confirm_notice.cancel()
            self._confirm_notice = None
        for waiter in self._waiters:
            if not waiter[2].done():
                waiter[2].set_result(False)
        self._waiters.clear()
        for link in list(self.links.values()):
            link.wake.set()

    async def close(self) -> None:
        self.deactivate()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    # ---- acknowledgement ---------------------------------------------------------------
    async def acknowledge(
        self, result: PutResult, timeout_s: float, on_replicated: OnReplicated | None = None
    ) -> PutResult:
        """The SYNC acknowledgement of an appended batch: ``result`` once the counted
        slaves hold its end (at once under ASYNC, for a refused or empty put), else
        FLUSH_SLAVE_TIMEOUT after ``timeout_s`` -- never OK after that.
        ``on_replicated(result)`` prepares what runs the moment it is confirmed, when this
        has to wait for that (``wait_replicated``)."""
        if not result.ok or not self.sync or not result.appended:
            return result
        last = result.appended[-1]
        prepare = None if on_replicated is None else functools.partial(on_replicated, result)
        if await self.wait_replicated(last.physical_offset + last.size, timeout_s, prepare):
            return result
        return _not_replicated(result)

    def acknowledge_now(self, result: PutResult, timeout_s: float, answer: OnReplicated) -> None:
        """``acknowledge`` for a caller with no task (the produce lane,
        ``node/remoting/produce_lane.py``): ``answer(outcome)`` makes what answers the
        put and ``answer(outcome)()`` answers it. When the outcome is known now (ASYNC, a
        refused or empty put, an end confirmed already) both happen at once; else
        ``answer(result)`` is made now, while the slaves work, and runs the moment they
        hold the end, in the ACK's callback; after ``timeout_s`` or a lost mastership,
        ``answer`` of FLUSH_SLAVE_TIMEOUT runs instead -- never both, never OK after that."""
        if not result.ok or not self.sync or not result.appended:
            answer(result)()
            return
        last = result.appended[-1]
        end = last.physical_offset + last.size
        if not self.active or not self.enough_in_sync():
            answer(_not_replicated(result))()
        elif end <= self.confirmed_offset:
            answer(result)()
        else:
            write = _prepared(functools.partial(answer, result))
            future = self._wait_for(end, timeout_s, write)

            def answered(future: asyncio.Future[bool]) -> None:
                # True: the confirmation ran ``write`` (``_recompute``) before resolving it.
                if future.cancelled() or not future.result():
                    answer(_not_replicated(result))()
                elif write is None:  # making it failed (logged): answered now instead
                    answer(result)()

            future.add_done_callback(answered)

    def enough_in_sync(self) -> bool:
        return not self.sync or len(self.counted) + 1 >= self.min_insync_replicas

    async def wait_replicated(
        self,
        end_offset: int,
        timeout_s: float,
        prepare: Callable[[], Callable[[], None]] | None = None,
    ) -> bool:
        """Whether the slaves counted hold everything below ``end_offset`` within
        ``timeout_s`` (always true under ASYNC replication). When this has to wait,
        ``prepare()`` is called first, and what it returns runs the moment the offset is
        confirmed (never after a timeout or a lost mastership), in the callback of the
        ACK that confirmed it: a SYNC send's answer leaves from there
        (``RemotingConnection.answer_ahead``), where the waiting task would take a turn
        of the loop and its callers' returns first."""
        if not self.sync:
            return True
        if not self.active or not self.enough_in_sync():
            return False
        if end_offset <= self.confirmed_offset:
            return True
        on_confirmed = None if prepare is None else _prepared(prepare)
        return await self._wait_for(end_offset, timeout_s, on_confirmed)

    def _wait_for(
        self, end_offset: int, timeout_s: float, on_confirmed: Callable[[], None] | None
    ) -> asyncio.Future[bool]:
        """A waiter for ``end_offset``: True once confirmed (``on_confirmed`` run first),
        False after ``timeout_s`` or a lost mastership."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiter_seq += 1
        heapq.heappush(self._waiters, (end_offset, self._waiter_seq, future, on_confirmed))
        # A shared timer instead of wait_for(shield(...)), which adds three loop turns to
        # every acknowledgement, or a timer per wait (``Expiries``). A waiter cancelled or
        # timed out stays in the heap until the confirmed offset passes it (``_recompute``
        # skips futures already done).
        self._expiries.add(future, timeout_s)
        return future

    def set_counted(self, counted: frozenset[str]) -> None:
        self.counted = counted - {self.node_id}
        self._set_reput()
        self._recompute()
        for link in list(self.links.values()):
            if link.leaving and link.node_id not in self.counted and link.writer is not None:
                link.writer.close()  # the slave's answer: it is out of the in-sync set

    def on_appended(self) -> None:
        """New records were appended (not dispatched yet): each streaming link writes them
        now, in this call, so a SYNC write's copies leave before the master's own
        consume-queue and index work (which the reput leaves for the next ACK) and without
        a task switch per link; a link with a full buffer leaves the rest to its task.
        Without slaves to wait for, the new end is confirmed at once."""
        end = self.store.write_offset
        self.timeline.mark(end)
        reads: dict[tuple[int, int], bytes] = {}  # the links share each chunk's payload
        for link in self.links.values():
            if link.writer is not None:
                try:
                    self._push(link, reads)
                except ConnectionError:
                    link.writer = None  # closing: its task ends the link
            if link.sent < end:
                link.wake.set()
        if self.store.dispatches_behind and self._reput_tail is None:
            call_later = self._call_later or asyncio.get_running_loop().call_later
            self._reput_tail = call_later(REPUT_TAIL_S, self._reput_after_tail)
        # Inside the append (its put lock held): no dispatch here; the append's own
        # catch-up follows its listeners whenever an earlier append is undispatched.
        self._recompute(reput=False)

    def log_writer(self) -> LogWriter | None:
        """What writes this master's appends and sends them to its links in one native
        call (``write_log``), for ``CommitLog.log_writer`` while this node is master and its
        appends are pushed (``on_appended``, as ``ha.role`` wires it); None without the
        native lane, where the store writes and ``_push`` sends."""
        return self.write_log if native is not None else None

    def write_log(
        self,
        batch: list[Prepared],
        position: int,
        store_timestamp_ms: int,
        store_host: bytes,
        queue_offsets: dict[tuple[str, int], int],
        fd: int,
        file_position: int,
    ) -> tuple[int, list[AppendedMessage]]:
        """``CommitLog.log_writer`` while this node is master: the batch written at the
        log's end and its DATA frame sent to every link that is streaming, has sent all
        before it and buffers nothing, in one native call (``append_and_push``), so that
        the copies leave with no Python between the write and the last frame. The frames
        are what ``_push`` would send (one chunk of the records at ``position``, in the
        last epoch); a link it does not take, ``on_appended`` pushes as before."""
        entries = self.epochs.entries
        last = entries[-1] if entries else None
        links: list[SlaveLink] = []
        specs = []
        if last is not None and last.start_offset <= position:
            for link in self.links.values():
                writer, mac = link.writer, link.mac
                if writer is None or mac is None or link.sent != position:
                    continue
                transport = writer.transport
                if (
                    transport is None
                    or writer.socket_fd < 0
                    or transport.is_closing()
                    or transport.get_write_buffer_size()
                ):
                    continue
                links.append(link)
                specs.append((writer.socket_fd, mac.gmac, mac.sequence))
                if len(specs) == NATIVE_LINKS_MAX:
                    break  # the rest are pushed by ``on_appended``
        epoch, epoch_start = (last.epoch, last.start_offset) if last is not None else (0, 0)
        confirmed = self.confirmed_offset
        error, data, appended, sent, tags = native.append_and_push(
            store_speedups.encode_batch,
            batch,
            position,
            store_timestamp_ms,
            store_host,
            queue_offsets,
            AppendedMessage,
            PreparedRun,
            fd,
            file_position,
            tuple(specs),
            epoch,
            epoch_start,
            confirmed,
            CHUNK_BYTES,
        )
        if error:
            if error in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFullError(f"no space to write the batch at {position}")
            raise OSError(error, os.strerror(error))
        if sent:
            end = position + len(data)
            now = self.clock()
            whole = FRAME_HEADER.size + DATA_HEADER.size + len(data) + MAC_BYTES
            for link, taken, tag in zip(links, sent, tags, strict=True):
                link.mac.sequence += 1  # type: ignore[union-attr]
                link.sent, link.sent_at, link.told_confirmed = end, now, confirmed
                if taken < whole:  # the socket took part of it: the rest through the transport
                    frame = b"".join(
                        (
                            FRAME_HEADER.pack(Kind.DATA, whole - FRAME_HEADER.size),
                            DATA_HEADER.pack(position, epoch, epoch_start, confirmed),
                            data,
                            tag,
                        )
                    )
                    link.writer.transport.write(frame[taken:])  # type: ignore[union-attr]
        return len(data), appended

    def _push(self, link: SlaveLink, reads: dict[tuple[int, int], bytes]) -> None:
        """Write DATA frames from ``link.sent`` to this log's end while the link's transport
        buffers less than ``PUSH_BUFFER_BYTES``. Synchronous: the one writer of the link's
        frames is whoever calls this on the loop, so frames stay in log order. ``reads``
        keeps each chunk's payload (read from the log once) for the other links of the
        same call: within one call the DATA header is the same for every link."""
        store, writer, mac = self.store, link.writer, link.mac
        assert writer is not None and mac is not None, "push on a link that is not streaming"
        while link.sent < store.write_offset:
            if writer.transport.get_write_buffer_size() >= PUSH_BUFFER_BYTES:
                return
            offset = link.sent
            index = self._epoch_index(offset)
            entry = self.epochs.entries[index] if index >= 0 else None
            limit = CHUNK_BYTES
            if index >= 0 and index + 1 < len(self.epochs.entries):
                limit = min(limit, self.epochs.entries[index + 1].start_offset - offset)
            payload = reads.get((offset, limit))
            if payload is None:
                payload = reads[offset, limit] = data_payload(
                    offset,
                    entry.epoch if entry else 0,
                    entry.start_offset if entry else 0,
                    self.confirmed_offset,
                    store.read_records(offset, limit),
                )
            write_frame_parts(writer, data_frame_parts(mac, payload))
            link.sent = offset + len(payload) - DATA_HEADER.size
            link.sent_at = self.clock()
            link.told_confirmed = self.confirmed_offset  # what ``data_payload`` carried

    def _set_reput(self) -> None:
        """Appends dispatch behind them while there are slaves whose ACKs will come (see
        the module's docstring); otherwise in the append, and what was left is dispatched
        now. Never called inside an append (the store's put lock is held there)."""
        behind = self.active and self.sync and bool(self.counted)
        self.store.dispatches_behind = behind
        if not behind:
            if self._reput_tail is not None:
                self._reput_tail.cancel()
                self._reput_tail = None
            self._reput()

    def _reput(self, confirmed: int | None = None) -> None:
        """Dispatch what the appends left (``MessageStore.dispatch_behind``);
        ``confirmed``: the offset a confirmation moves the read cap to next."""
        store = self.store
        if store.dispatched_offset < store.write_offset:
            store.dispatch_behind(confirmed)  # nothing once the store is shut down

    def _reput_after_tail(self) -> None:
        self._reput_tail = None
        self._reput()

    def _recompute(self, *, reput: bool = True) -> None:
        """Move the confirmed offset to what the counted slaves hold. When it moves, the
        waiters it covers are answered first, then what the appends left behind is
        dispatched (``reput``: false only inside an append), and only then do the read cap
        and its readers move (``on_confirmed``)."""
        if not self.active:
            return
        end = self.store.write_offset
        if not self.sync or not self.counted:
            confirmed = end if self.enough_in_sync() else self.confirmed_offset
        else:
            acks = [self.links[n].acked if n in self.links else -1 for n in self.counted]
            confirmed = max(self.confirmed_offset, min(min(acks), end))
        if confirmed > self.confirmed_offset or confirmed == end:
            advanced = confirmed > self.confirmed_offset
            resumed: list[asyncio.Future[bool]] = []
            while self._waiters and self._waiters[0][0] <= confirmed:
                _, _, future, on_confirmed = heapq.heappop(self._waiters)
                if not future.done():
                    if on_confirmed is not None:
                        _run_on_confirmed(on_confirmed)  # a writer's answer leaves now
                    resumed.append(future)
            # Before the cap moves, so its readers find their entries (a full disk aside).
            if advanced and reput:
                self._reput(confirmed)  # readers parked at a queue's end answered in it
            self.confirmed_offset = confirmed
            # The readers this wakes (``on_confirmed``: long polls under the read cap) are
            # scheduled before the writers' tasks resume: a writer's answer has left already
            # when it was answered ahead, and what its task does after (its callers'
            # returns, metrics: ~30 µs here) would otherwise run before the reads.
            try:
                if advanced:
                    self.on_confirmed(confirmed)
                    if self.sync and self._confirm_notice is None:
                        self._arm_confirm_notice()
            finally:
                for future in resumed:
                    future.set_result(True)

    def _arm_confirm_notice(self) -> None:
        call_later = self._call_later or asyncio.get_running_loop().call_later
        self._confirm_notice = call_later(CONFIRM_NOTICE_S, self._notice_confirmed)
        self._confirm_notice_armed_at = self.clock()

    def _notice_confirmed(self) -> None:
        """Send the confirmed offset to each streaming slave whose last frame carried an
        older one and that wrote nothing since the notice was armed: without it, a record
        that a slave holds stayed unreadable there until the heartbeat after a second of
        silence. A busy link gets the offset on its next DATA frame; it is checked again."""
        self._confirm_notice = None
        if not self.active:
            return
        end, waiting = self.store.write_offset, False
        for link in self.links.values():
            if link.writer is None or link.told_confirmed >= self.confirmed_offset:
                continue
            if link.sent < end or link.sent_at > self._confirm_notice_armed_at:
                waiting = True
                continue
            try:
                self._heartbeat(link)
            except ConnectionError:
                link.writer = None  # closing: its task ends the link
        if waiting:
            self._arm_confirm_notice()

    def _heartbeat(self, link: SlaveLink) -> None:
        """An empty DATA frame: where the link is and what the in-sync set holds."""
        assert link.writer is not None and link.mac is not None, "heartbeat on an idle link"
        confirmed = self.confirmed_offset
        frame = data_frame(link.mac, link.sent, self.epochs.last_epoch, 0, confirmed, b"")
        write_frame(link.writer, frame)
        link.sent_at = self.clock()
        link.told_confirmed = confirmed

    # ---- one slave's link --------------------------------------------------------------
    async def _serve(self, stream: LinkStream) -> None:
        peer = stream.get_extra_info("peername")
        # It sends the bulk: a slave too busy to read closes its window, and is slow, not
        # dead (``SLOW_PEER_S``).
        detect_dead_peer(stream.get_extra_info("socket"), unanswered_s=SLOW_PEER_S)
        link: SlaveLink | None = None
        try:
            try:
                async with asyncio.timeout(self.handshake_timeout_s):
                    opened = await self._handshake(stream, stream)
            except TimeoutError:
                raise LinkError(
                    f"no complete handshake within {self.handshake_timeout_s:.1f} s"
                ) from None
            if opened is None:
                return
            link, macs = opened
            sender = asyncio.ensure_future(self._send(link, macs, stream))
            watcher = asyncio.ensure_future(self._watch_path(link, stream))
            try:
                await self._read_acks(link, macs, stream)
            finally:
                sender.cancel()
                watcher.cancel()
        except ForgedFrame as error:
            log.warning("replication link from %s dropped: %s", peer, error)
        except (LinkError, OSError) as error:
            # OSError: the kernel ended the link (ETIMEDOUT from the dead-peer probes, or
            # EINVAL/EHOSTUNREACH when a route to the slave is gone): a link end, not a bug.
            log.info("replication link from %s ended: %s", peer, error)
        except Exception:
            log.exception("replication link from %s failed", peer)
        finally:
            if link is not None and self.links.get(link.node_id) is link:
                del self.links[link.node_id]
                # A cut path or a slave that left is not a failover's reconnection: no
                # grace to wait out.
                self._last_connected[link.node_id] = self.clock()
                if link.path_cut or link.leaving:
                    self._gone.add(link.node_id)
                    self.on_slave_gone()
                self._recompute()
            stream.close()

    async def _handshake(self, reader, writer) -> tuple[SlaveLink, LinkMacs] | None:
        """Authenticate the slave (its HELLO proves the secret for this handshake), then
        send the sealed WELCOME and EPOCHS and take its sealed START. None: refused."""
        nonce = new_nonce()
        write_frame(
            writer,
            control(Kind.CHALLENGE, version=PROTOCOL_VERSION, nonce=nonce, group=self.broker_group),
        )
        await writer.drain()
        hello = await read_plain(reader, Kind.HELLO)
        node_id = hello.get("node_id")
        refusal = self._hello_refusal(hello, nonce)
        if refusal is not None:
            write_frame(writer, control(Kind.REFUSED, reason=refusal))
            await writer.drain()
            return None
        handshake = Handshake(self.broker_group, node_id, nonce, hello["nonce"])
        macs = session_macs(self.secret, handshake, Role.MASTER)
        end = self.store.write_offset
        write_frame(
            writer,
            sealed_control(
                macs.outgoing,
                Kind.WELCOME,
                proof=proof(self.secret, Role.MASTER, handshake),
                max_offset=end,
                min_offset=self.store.min_offset,
            ),
        )
        write_frame(
            writer,
            sealed_control(
                macs.outgoing,
                Kind.EPOCHS,
                epochs=[[e.epoch, e.start_offset] for e in self.epochs.entries],
            ),
        )
        await writer.drain()
        start = (await read_sealed_control(reader, macs.incoming, Kind.START)).get("offset")
        if not isinstance(start, int) or start < 0:
            raise LinkError(f"{node_id} sent START at {start!r}: not an offset")
        if start > self.store.write_offset:
            write_frame(
                writer,
                sealed_control(macs.outgoing, Kind.REFUSED, reason="slave is ahead of the master"),
            )
            await writer.drain()
            return None
        return self.open_link(node_id, start, end), macs

    def open_link(self, node_id: str, start: int, end: int) -> SlaveLink:
        """A slave authenticated and streams from ``start`` (``end``: this log's end when
        it asked); an older link of the same slave is told to end."""
        now = self.clock()
        link = SlaveLink(node_id, start, now, now if start >= end else 0.0)
        old = self.links.get(node_id)
        if old is not None:
            old.wake.set()
        self.links[node_id] = link
        self._gone.discard(node_id)
        log.info("replication: %s streams from %d", node_id, start)
        return link

    def _hello_refusal(self, hello: dict, nonce: str) -> str | None:
        """Why this HELLO is refused (None: accepted); a refusal that says something is
        wrong (not merely "not the master now") is logged. The version comes first: a
        peer of another protocol is told so, whatever else its HELLO holds."""
        version = hello.get("version", 1)  # protocol 1 had no version field
        node_id = hello.get("node_id")
        name = node_id if isinstance(node_id, str) and node_id else "?"
        problem = None
        if version != PROTOCOL_VERSION:
            problem = version_mismatch(f"slave {name}", version)
        elif not isinstance(node_id, str) or not node_id:
            problem = "HELLO names no node id"
        elif not is_nonce(hello.get("nonce")):
            problem = "HELLO's nonce is not 32 lowercase hex digits"
        elif not proof_matches(
            self.secret,
            Role.SLAVE,
            Handshake(self.broker_group, node_id, nonce, hello["nonce"]),
            hello.get("proof"),
        ):
            problem = "wrong cluster secret"
        if problem is not None:
            log.warning("replication: refused %s (%s)", name, problem)
            return problem
        if not self.active:
            return "not the master"
        if not self.is_member(node_id):
            return f"{node_id} is not a member of broker group {self.broker_group}"
        if hello.get("segment_bytes") != self.store.config.commitlog_segment_bytes:
            return "CommitLog segment sizes differ: replicas must be byte-identical"
        return None

    async def _send(self, link: SlaveLink, macs: LinkMacs, writer: LinkStream) -> None:
        """The link's task: catches the slave up (``_push`` until the log's end, waiting
        for the slave to read between), then sleeps while ``on_appended`` streams new
        records, and heartbeats a second of silence."""
        store = self.store
        link.sent, link.sent_at = link.acked, self.clock()
        link.mac, link.writer = macs.outgoing, writer
        try:
            while self.active and self.links.get(link.node_id) is link:
                link.wake.clear()
                self._push(link, {})
                if link.sent < store.write_offset:  # the buffer is full: let the slave read
                    await writer.drain()
                    continue
                try:
                    async with asyncio.timeout(HEARTBEAT_S):
                        await link.wake.wait()
                except TimeoutError:
                    if self.clock() - link.sent_at < HEARTBEAT_S:
                        continue  # frames went out meanwhile: no silence to fill
                    self._heartbeat(link)
                    await writer.drain()
        finally:
            link.writer = None
            writer.close()

    async def _watch_path(self, link: SlaveLink, writer: LinkStream) -> None:
        """End the link once its kernel says the path to the slave is gone (data resent,
        or held unsent by a route that drops it, and unanswered for ``DEAD_LINK_S``,
        ``unanswered_s``): a partitioned slave then leaves the in-sync set within ~2 s,
        where the link's own limits, sized for a slave that is slow (``SLOW_PEER_S`` for
        its window, ``silent_slave_timeout_s`` for its acks), held SYNC writes ~10 s."""
        sock = writer.get_extra_info("socket")
        while True:
            await asyncio.sleep(PATH_CHECK_S)
            unanswered = unanswered_s(sock)
            if unanswered >= DEAD_LINK_S:
                link.path_cut = True
                log.warning(
                    "replication link to %s cut: its TCP acknowledged nothing for %.1f s "
                    "(data resent or unsendable)",
                    link.node_id,
                    unanswered,
                )
                writer.transport.abort()
                return

    def _epoch_index(self, offset: int) -> int:
        entries = self.epochs.entries
        found = -1
        for index, entry in enumerate(entries):
            if entry.start_offset <= offset:
                found = index
            else:
                break
        return found

    async def _read_acks(self, link: SlaveLink, macs: LinkMacs, stream: LinkStream) -> None:
        """Count the slave's ACKs as they arrive, in the loop's callback (``take``), until
        this node is no longer master or the link ends; ``LinkError`` says why it ended."""
        # One silence timer for the link (ha/silence.py), as the slave's idle one: a slave
        # acknowledges every frame, heartbeats included, so silence means it is gone.
        silent = SilenceWatch(self.silent_slave_timeout_s, stream.abort)

        def take(unread: memoryview) -> int:
            used = 0
            while self.active:
                frame = take_sealed(unread[used:], macs.incoming, ACK_FRAME_BYTES)
                if frame is None:
                    return used
                kind, payload, size = frame
                used += size
                silent.heard()
                if kind is Kind.LEAVING:
                    link.leaving = True
                    log.info("replication: %s stops following this master", link.node_id)
                    if link.node_id not in self.counted:
                        raise LinkError(f"{link.node_id} left")
                    # Closed once the in-sync set lost it (``set_counted``): the slave
                    # waits for that, as its routing replica may be routing's leader.
                    self.on_slave_gone()
                    continue
                if kind is not Kind.ACK or len(payload) != ACK.size:
                    raise LinkError(f"expected an ACK, got {kind.name} ({len(payload)} bytes)")
                (offset,) = ACK.unpack(payload)
                self.record_ack(link, offset)
                silent.waiting()
            stream.finish()
            return used

        if not self.active:
            return
        silent.waiting()
        stream.deliver_to(take)
        try:
            await stream.ended()
        except (LinkError, ConnectionError) as error:
            if silent.expired:
                raise LinkError(
                    f"{link.node_id} sent nothing for {self.silent_slave_timeout_s:.1f} s "
                    "(it answers every heartbeat): dropped"
                ) from None
            if isinstance(error, LinkError):
                raise
            raise LinkError(f"link closed: {error}") from None
        finally:
            silent.close()

    def record_ack(self, link: SlaveLink, offset: int) -> None:
        """The slave of ``link`` holds this log below ``offset``: count it (an ACK that
        moves the confirmed offset also dispatches what the appends left, ``_recompute``)."""
        end = self.store.write_offset
        if offset > end or offset < link.acked:
            raise LinkError(f"{link.node_id} acknowledged {offset}: not a position it has")
        link.acked = offset
        if offset >= end:
            link.caught_up_at = self.clock()
        else:
            held = self.timeline.held_as_of(offset)
            if held is not None and held > link.caught_up_at:
                link.caught_up_at = held
        self._recompute()

    # ---- in-sync decisions (the node turns them into routing commands) -------------------
    def caught_up(self, node_id: str) -> bool:
        """Connected and holding everything acknowledged so far (may join the in-sync set)."""
        link = self.links.get(node_id)
        end = self.store.write_offset
        return (
            link is not None
            and not link.leaving
            and link.acked >= max(self.confirmed_offset, end - CHUNK_BYTES)
        )

    def backlog_s(self) -> float:
        """How long ago the in-sync set last held this log's whole end (0 when it holds
        it now, or when there is nobody to wait for)."""
        if not self.sync or not self.counted or not self.active:
            return 0.0
        if self.confirmed_offset >= self.store.write_offset:
            return 0.0
        held = self.timeline.held_as_of(self.confirmed_offset)
        since = self.activated_at if held is None else held
        return max(0.0, self.clock() - since)

    def lagging(self, node_id: str, max_lag_s: float, max_lag_bytes: int) -> bool:
        """Disconnected, or behind for longer than ``max_lag_s`` or by more than
        ``max_lag_bytes`` (must leave the in-sync set)."""
        link = self.links.get(node_id)
        if link is not None and link.leaving:
            return True  # it said it stops following
        if link is None:
            if node_id in self._gone:
                return True
            since = max(self.activated_at, self._last_connected.get(node_id, 0.0))
            return self.clock() - since > DISCONNECT_GRACE_S
        end = self.store.write_offset
        if end - link.acked > max_lag_bytes:
            return True
        behind_since = link.caught_up_at or link.connected_at
        return link.acked < end and self.clock() - behind_since > max_lag_s
