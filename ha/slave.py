"""The slave side of replication: follow the master of this node's broker group.

On every (re)connect the slave and the master prove they know the cluster secret
(``ha/link_auth.py``); every frame after that carries a MAC, checked before the slave acts
on it. The slave compares its epoch history with the master's and truncates its CommitLog
(with consume queues and index) to the last point both agree on, then appends the
master's records verbatim, dispatches them with the same dispatcher a master uses, records
each new epoch it sees, and acknowledges its new end (after forcing it to disk under
SYNC_FLUSH). A cut tail is kept in a rollback file first (``ha/rollback.py``). A cut that
fails is logged with its error and tried again before anything else uses the log: before
the next link's truncation, and by ``stop``, which raises ``TailCutFailed`` when it fails
again (a promotion must not write at the end of a log that may still hold a diverged
tail). Bytes that
do not start where its log ends drop the link, which then handshakes again; so does a
frame that fails its MAC, a master silent for ``IDLE_TIMEOUT_S`` or a handshake not done
within ``HANDSHAKE_TIMEOUT_S``, and a master whose TCP stopped answering for
``ha.wire.DEAD_LINK_S`` (a cut network: the kernel ends the link). Reconnects back off up
to 1 s.

Thread-safety: runs on the node's event loop; disk work (truncation, fsync) goes to the
default executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable

from ferrymq.codec.dead_peer import detect_dead_peer
from ha import link_thread, rollback
from ha.epochs import EpochEntry, EpochHistory, truncation_point
from ha.link_auth import (
    Handshake,
    LinkMacs,
    Role,
    is_nonce,
    new_nonce,
    proof,
    proof_matches,
    session_macs,
)
from ha.link_stream import STAGED_BYTES, LinkStream, open_link
from ha.link_thread import Ended, LinkThread
from ha.replica_lane import Applied, Stop, apply_frames
from ha.silence import SilenceWatch
from ha.wire import (
    DATA_HEADER,
    FRAME_HEADER,
    MAX_FRAME_BYTES,
    PREAUTH_MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
    ForgedFrame,
    Kind,
    LinkError,
    ProtocolMismatch,
    ack_frame,
    check_length,
    control,
    json_object,
    leaving_frame,
    read_exactly,
    read_header,
    read_plain,
    read_sealed_body,
    read_sealed_control,
    refusal,
    sealed_control,
    take_sealed,
    version_mismatch,
    write_frame,
)
from store.config import FlushMode
from store.errors import ReplicaDiverged, ReplicaMismatch, StoreError
from store.message_store import MessageStore

log = logging.getLogger("ferrymq.ha.slave")
RECONNECT_MAX_S = 1.0
IDLE_TIMEOUT_S = 5.0  # the master heartbeats every second
HANDSHAKE_TIMEOUT_S = 5.0  # from connecting to the master's EPOCHS
CONNECT_TIMEOUT_S = 3.0
STOP_TIMEOUT_S = 5.0
# How long a slave that stops waits for its master to close the link after LEAVING.
LEAVE_WAIT_S = 1.0
# A slave's consume-queue and index dispatch (``DispatchBehind``): at most one per spacing
# while appends come, at once when this many bytes wait, the tail's after the last append.
DISPATCH_SPACING_S = 0.005
DISPATCH_AT_ONCE_BYTES = 1 << 20
DISPATCH_TAIL_S = 0.02


class Diverged(LinkError):
    """This log shares no epoch with the master's: an operator must decide (wipe it)."""


class TailCutFailed(Exception):
    """Cutting this log's diverged tail failed: the log may still hold records its master
    never had, and its consume queues, index or epoch history may be out of step with it.
    Nothing may write at its end (a promotion) until a cut succeeds."""

    def __init__(self, point: int, error: BaseException) -> None:
        super().__init__(f"cutting this log's tail from offset {point} failed: {error!r}")
        self.point = point


class ReplicationSlave:
    def __init__(
        self,
        store: MessageStore,
        epochs: EpochHistory,
        node_id: str,
        secret: str,
        master_address: Callable[[], str | None],
        *,
        on_confirmed: Callable[[], None] = lambda: None,
        on_refused: Callable[[], None] = lambda: None,
        handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
    ) -> None:
        self.store = store
        self.epochs = epochs
        self.node_id = node_id
        self.secret = secret
        self.master_address = master_address
        self.handshake_timeout_s = handshake_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.connected_to: str | None = None
        # The master's end when the current link began: a slave holding that much holds
        # everything its master had then (how a log cut by recovery counts as refilled).
        self.linked_master_end = 0
        # What the master last said its in-sync set holds; ``on_confirmed`` hears it after
        # every DATA frame (under SYNC replication a slave's readers, too, see only that).
        self.confirmed_offset = 0
        self.on_confirmed = on_confirmed
        # The master address whose last dial was refused (nothing listens there: its
        # process is gone), None once a dial did not end so; ``on_refused`` hears each.
        self.refused_by: str | None = None
        self.on_refused = on_refused
        self.last_error = ""
        self._task: asyncio.Task[None] | None = None
        self._cut: asyncio.Future[None] | None = None  # a tail being cut, on a thread
        # (epoch, point) of the last cut begun, until one is seen to succeed: a failed cut
        # is done again before this log is used (``_finish_cut``).
        self._unfinished_cut: tuple[int, int] | None = None
        self._tail_kept: tuple[int, int] | None = None  # a failed cut's tail, in rollback/
        self._last_cut_error = ""
        self._stopping = False
        self._leaving = False  # the node shuts down: say LEAVING to the master (``_leave``)
        self._poke = asyncio.Event()

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def master_changed(self) -> None:
        """Routing named a (possibly) new master: reconnect now, not after the backoff."""
        self._poke.set()

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._stopping = self._leaving = False
            self._task = asyncio.ensure_future(self._run())

    async def stop(self, *, leaving: bool = False) -> None:
        """End following, and wait until the log holds still: ``TailCutFailed`` when it
        may still hold a diverged tail (a cut failed, and failed again when tried once
        more here). The loop also checks a flag: asyncio.wait_for can swallow a
        cancellation that lands as its inner wait completes (Python 3.11), and a promotion
        must never wait on a loop that did not notice it was cancelled. ``leaving``: the
        node shuts down, and tells its master so (``_leave``); a promotion does not wait
        for a master that may be cut off."""
        if self._task is not None:
            self._stopping = True
            self._leaving = leaving
            self._poke.set()
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait({self._task}, timeout=STOP_TIMEOUT_S)
            self._task = None
        self.connected_to = None
        cut, self._cut = self._cut, None
        if cut is not None:
            # A cut runs on a thread that no cancellation stops: whatever this node does
            # next (a promotion writes at this log's end) waits until the log holds still.
            with contextlib.suppress(TailCutFailed):  # logged; tried once more below
                await self._outcome(cut)
        await self._finish_cut()

    async def _run(self) -> None:
        backoff, last_address = 0.05, None
        while not self._stopping:
            address = self.master_address()
            if address != last_address:
                backoff = 0.05  # a new master: try it at once and often
            last_address = address
            if address:
                try:
                    await self._follow(address)
                except ConnectionRefusedError as error:
                    if self.refused_by != address:
                        log.info("replication from %s refused: %s", address, error)
                    self.refused_by = address
                    self.on_refused()
                except (
                    LinkError,
                    ConnectionError,
                    OSError,
                    TimeoutError,
                    ReplicaMismatch,
                    TailCutFailed,  # logged with its error where the cut failed
                ) as error:
                    self.refused_by = None  # something answered the dial
                    repeated = str(error) == self.last_error
                    self.last_error = str(error)
                    if isinstance(error, Diverged | ReplicaDiverged | ProtocolMismatch):
                        if not repeated:
                            log.error("replication from %s refused: %s", address, error)
                    elif isinstance(error, ForgedFrame):  # every one: it may be an attack
                        log.warning("replication from %s dropped: %s", address, error)
                    elif not repeated:
                        log.info("replication from %s stopped: %s", address, error)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("replication from %s failed", address)
                finally:
                    self.connected_to = None
            self._poke.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poke.wait(), backoff)
            backoff = min(RECONNECT_MAX_S, backoff * 2)

    async def _follow(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        # One object reads and writes the link (ha/link_stream.py: DATA frames land in place).
        reader = writer = await asyncio.wait_for(open_link(host, int(port)), CONNECT_TIMEOUT_S)
        detect_dead_peer(writer.get_extra_info("socket"))
        macs: LinkMacs | None = None  # once the master streams: it then hears LEAVING
        try:
            try:
                async with asyncio.timeout(self.handshake_timeout_s):
                    macs, master_end, master_epochs = await self._handshake(address, reader, writer)
            except TimeoutError:
                raise LinkError(
                    f"{address} did not complete the handshake within "
                    f"{self.handshake_timeout_s:.1f} s"
                ) from None
            start = await self._truncate_to_common_point(master_end, master_epochs)
            self.linked_master_end = master_end
            write_frame(writer, sealed_control(macs.outgoing, Kind.START, offset=start))
            await writer.drain()
            self.connected_to, self.last_error, self.refused_by = address, "", None
            write_frame(writer, ack_frame(macs.outgoing, start))
            await writer.drain()
            await self._apply_stream(reader, macs, start)
        finally:
            leaving = self._leaving and self.connected_to == address and macs is not None
            if leaving and not writer.is_closing():
                await self._leave(writer, macs)
            writer.close()

    async def _leave(self, link: LinkStream, macs: LinkMacs) -> None:
        """Say LEAVING, and wait (``LEAVE_WAIT_S`` at most) for the master to close the
        link: it does once routing dropped this node from the in-sync set, or at once when
        it did not count this node. This node's routing replica, closed next, may lead
        routing; closed first, the in-sync change (and the SYNC writes that wait for it)
        waited for an election."""
        link.write(leaving_frame(macs.outgoing))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(LEAVE_WAIT_S):
                await link.closed_by_peer()

    async def _handshake(
        self, address: str, reader: LinkStream, writer: LinkStream
    ) -> tuple[LinkMacs, int, list[EpochEntry]]:
        """Prove the secret to the master and check its proof and the MAC of everything
        it says before any of it is believed: (the link's MACs, the master's end, its
        epochs)."""
        challenge = await read_plain(reader, Kind.CHALLENGE)
        version = challenge.get("version", 1)  # protocol 1 had no version field
        if version != PROTOCOL_VERSION:
            raise ProtocolMismatch(version_mismatch(f"master {address}", version))
        group, master_nonce = challenge.get("group"), challenge.get("nonce")
        if not isinstance(group, str) or not is_nonce(master_nonce):
            raise LinkError(f"{address} sent a malformed CHALLENGE")
        handshake = Handshake(group, self.node_id, master_nonce, new_nonce())
        write_frame(
            writer,
            control(
                Kind.HELLO,
                version=PROTOCOL_VERSION,
                node_id=self.node_id,
                nonce=handshake.slave_nonce,
                proof=proof(self.secret, Role.SLAVE, handshake),
                max_offset=self.store.write_offset,
                segment_bytes=self.store.config.commitlog_segment_bytes,
            ),
        )
        await writer.drain()
        macs = session_macs(self.secret, handshake, Role.SLAVE)
        # The answer is a plain refusal or the sealed WELCOME: small either way.
        kind, length = await read_header(reader, PREAUTH_MAX_FRAME_BYTES)
        if kind == Kind.REFUSED:
            raise refusal(Kind.REFUSED, await read_exactly(reader, length))
        if kind != Kind.WELCOME:
            raise LinkError(f"expected WELCOME, got frame kind {kind}")
        try:
            _, payload = await read_sealed_body(reader, macs.incoming, kind, length)
        except ForgedFrame as error:
            raise ForgedFrame(
                f"{address} did not prove it knows the cluster secret ({error})"
            ) from None
        welcome = json_object(Kind.WELCOME, payload)
        if not proof_matches(self.secret, Role.MASTER, handshake, welcome.get("proof")):
            raise ForgedFrame(f"{address} did not prove it knows the cluster secret")
        master_end = welcome.get("max_offset")
        if not isinstance(master_end, int) or master_end < 0:
            raise LinkError(f"{address} sent WELCOME with max_offset {master_end!r}")
        epochs = (await read_sealed_control(reader, macs.incoming, Kind.EPOCHS)).get("epochs")
        return macs, master_end, _epoch_entries(address, epochs)

    async def _truncate_to_common_point(self, master_end: int, master: list[EpochEntry]) -> int:
        await self._finish_cut()  # the point is judged on a log that holds still
        local_end = self.store.write_offset
        point = truncation_point(self.epochs.entries, local_end, master, master_end)
        if point is None:
            raise Diverged(
                f"this log (epochs {self.epochs.entries}, end {local_end}) shares no epoch "
                f"with the master's ({master}): wipe this node's data to re-copy it"
            )
        if point < local_end:
            log.warning("replication: truncating this log from %d to %d", local_end, point)
            entry = self.epochs.epoch_at(point)
            await self._cut_tail(entry.epoch if entry is not None else 0, point)
        return point

    async def _cut_tail(self, epoch: int, point: int) -> None:
        """Cut the tail from ``point`` on a thread; ``TailCutFailed`` when that fails."""
        self._unfinished_cut = (epoch, point)
        loop = asyncio.get_running_loop()
        cut = self._cut = loop.run_in_executor(None, self._keep_and_cut, epoch, point)
        await self._outcome(cut, shield=True)  # cancelled, the cut goes on: ``stop`` waits

    async def _finish_cut(self) -> None:
        """Do again a cut that failed; ``TailCutFailed`` when it fails again."""
        if self._unfinished_cut is not None:
            epoch, point = self._unfinished_cut
            log.warning("replication: cutting this log's tail from %d again", point)
            await self._cut_tail(epoch, point)

    async def _outcome(self, cut: asyncio.Future[None], *, shield: bool = False) -> None:
        """Wait for ``cut``: a success forgets the unfinished cut; a failure is logged with
        its error and raised as ``TailCutFailed``."""
        try:
            await (asyncio.shield(cut) if shield else cut)
        except Exception as error:
            point = self._unfinished_cut[1] if self._unfinished_cut else -1
            repeated, self._last_cut_error = repr(error) == self._last_cut_error, repr(error)
            log.error(
                "replication: cutting this log's tail from %d failed (%r); it may still "
                "hold records its master never had: no promotion until a cut succeeds",
                point,
                error,
                exc_info=None if repeated else error,  # the trace once, not every retry
            )
            raise TailCutFailed(point, error) from error
        finally:
            if cut.done() and self._cut is cut:
                self._cut = None
        self._unfinished_cut, self._tail_kept, self._last_cut_error = None, None, ""

    def _keep_and_cut(self, epoch: int, point: int) -> None:
        """Keep the tail in a rollback file (``ha/rollback.py``), cut it, and forget the
        terms that started in it: one step, also when following is stopped meanwhile.
        Done again after a failure: the tail is kept once (a second keep, of what a
        partial cut left, would replace the first one's file)."""
        if self._tail_kept != (epoch, point):
            rollback.keep_tail(self.store, epoch, point)
            self._tail_kept = (epoch, point)
        self.store.truncate_to(point)
        self.epochs.truncate_from(point)

    async def _apply_stream(self, link: LinkStream, macs: LinkMacs, acked: int) -> None:
        """Append the master's DATA frames as they arrive, each checked against its MAC
        before anything in it is used, and acknowledge them (a heartbeat with the last end
        acked, so that the master sees a live slave).

        Each arrival is handed to ``take`` in the loop's callback (``deliver_to``): the
        replica lane (``ha/replica_lane.py``, C) appends the whole DATA frames that continue
        the log, and a frame it declines is read by the Python path (``take_sealed`` and
        ``_append_data``), which gives the precise answer. One ACK covers an arrival's
        frames (under single sends the master pushes each append as a frame of its own).
        Under SYNC_FLUSH an ACK waits for the fsync that covers it, and the link appends on
        while a flush runs (``FlushBehind``). Otherwise the socket is lent to the link's
        thread (``ha/link_thread.py``) while every frame is common: it appends and
        acknowledges in C, ``thread_progress`` hears what it did, and the frame it
        declines comes back to ``take`` (``thread_ended``), which lends the socket again."""
        store = self.store
        thread: LinkThread | None = None

        def acknowledge(end: int) -> None:
            nonlocal acked
            acked = end
            # Acknowledged once the CommitLog holds the bytes; dispatched after.
            write_frame(link, ack_frame(macs.outgoing, acked))
            dispatcher.appended()

        def take(unread: memoryview) -> int:
            idle.heard()
            used, frames, appended = 0, 0, None
            while not self._stopping and len(unread) - used >= FRAME_HEADER.size:
                lane = self._lane_append(macs, unread[used:])
                used += lane.used
                frames += lane.appended + lane.heartbeats
                if lane.appended:
                    appended = lane.write_offset
                if lane.stop is Stop.WRITE_FAILED:
                    lane.raise_write_failure()
                if lane.stop is Stop.MORE:
                    break
                # Declined: this one frame through the Python path.
                taken = take_sealed(unread[used:], macs.incoming, MAX_FRAME_BYTES)
                if taken is None:
                    break
                kind, payload, size = taken
                end = self._append_data(kind, payload)
                used += size
                frames += 1
                if end is not None:
                    appended = end
            if self._stopping:
                link.finish()
                return used
            _gather_large_frame(link, unread[used:])
            if frames:
                if appended is None:
                    write_frame(link, ack_frame(macs.outgoing, acked))  # a heartbeat's
                elif flusher is not None:
                    flusher.appended()
                else:
                    acknowledge(appended)
            idle.waiting()
            if thread is not None and used:  # lend the socket again, the rest with it
                asyncio.get_running_loop().call_soon(start_thread)
            return used

        def start_thread() -> None:
            if thread is not None and not self._stopping:
                thread.start(acked)

        def thread_progress(end: int, confirmed: int) -> None:
            idle.heard()
            idle.waiting()
            if confirmed > self.confirmed_offset:
                self.confirmed_offset = confirmed
                self.on_confirmed()
            if end > store.dispatched_offset:
                dispatcher.appended()

        def thread_ended(ended: Ended) -> None:
            nonlocal acked
            acked = ended.acked
            error = ended.error()
            if error is not None:
                link.fail(error)
            else:
                link.take_back(ended.unread)  # the Python path reads on; ``take`` lends again

        def end_link() -> None:
            if thread is not None:
                thread.stop()
            link.abort()

        dispatcher = DispatchBehind(store, end_link)
        flusher = None
        if store.config.flush_mode is FlushMode.SYNC_FLUSH:
            flusher = FlushBehind(store, acknowledge, end_link)
        # One idle timer for the link (ha/silence.py): an arrival notes that the master was
        # heard, where moving an asyncio.timeout's deadline cost two loop timers a frame.
        idle = SilenceWatch(self.idle_timeout_s, end_link)
        idle.waiting()
        link.deliver_to(take)
        try:
            if flusher is None and link_thread.usable(macs):
                thread = LinkThread(
                    store,
                    macs,
                    link,
                    epoch=lambda: self.epochs.last_epoch,
                    on_progress=thread_progress,
                    on_ended=thread_ended,
                )
                start_thread()
            await link.ended()
        except (LinkError, ConnectionError) as error:  # the taker's, or the link's end
            for behind in (flusher, dispatcher):
                if behind is not None and behind.failure is not None:
                    raise behind.failure from None
            if idle.expired:
                raise LinkError(
                    f"the master sent nothing for {self.idle_timeout_s:.1f} s "
                    "(it heartbeats every second)"
                ) from None
            if isinstance(error, LinkError):
                raise
            raise LinkError(f"link closed: {error}") from None
        finally:
            if thread is not None:
                thread.close()
            idle.close()
            if flusher is not None:
                flusher.close()
            dispatcher.close()

    def _lane_append(self, macs: LinkMacs, unread: memoryview) -> Applied:
        """The replica lane's take of the frames at the start of ``unread``, under the put
        lock, with what it counted given to this follower (the MAC's count, the confirmed
        offset)."""
        incoming, epoch = macs.incoming, self.epochs.last_epoch
        applied: Applied | None = None

        def write(fd: int, position: int, room: int, write_offset: int) -> int:
            nonlocal applied
            applied = apply_frames(
                incoming.gmac, incoming.sequence, unread, fd, position, room, write_offset, epoch
            )
            return applied.write_offset

        self.store.append_replicated_with(write)
        assert applied is not None
        incoming.sequence = applied.sequence
        if applied.confirmed >= 0:
            self.confirmed_offset = max(self.confirmed_offset, applied.confirmed)
            self.on_confirmed()
        return applied

    def _append_data(self, kind: Kind, payload: bytes | memoryview) -> int | None:
        """Append one DATA frame's records: the log's end after them, or None for a
        heartbeat (no records) and once following is stopped."""
        if kind is not Kind.DATA or len(payload) < DATA_HEADER.size:
            raise LinkError(f"expected DATA, got {kind.name} ({len(payload)} bytes)")
        offset, epoch, epoch_start, confirmed = DATA_HEADER.unpack_from(payload)
        records = memoryview(payload)[DATA_HEADER.size :]  # no copy
        self.confirmed_offset = max(self.confirmed_offset, confirmed)
        self.on_confirmed()
        if not records or self._stopping:
            return None
        if epoch > self.epochs.last_epoch:
            self.epochs.append(epoch, epoch_start)
        return self.store.append_replicated_records(offset, records)


class FlushBehind:
    """A SYNC_FLUSH slave's fsyncs, one at a time on an executor thread, while its link
    reads and appends on: each flush covers what was appended before it began, its end is
    acknowledged when it completes, and what was appended meanwhile goes in the next one,
    as a master group-commits its writers. Awaiting each flush before reading the next
    frame held a busy link to one frame per fsync (a SYNC_FLUSH group's batch was a third
    of its ASYNC_FLUSH one's).

    ``acknowledge(end)`` is called in the loop with the log's end on disk; when it or a
    flush fails, ``failure`` holds the error and ``abort`` ends the link (its read fails,
    and the link's code raises ``failure``)."""

    def __init__(
        self,
        store: MessageStore,
        acknowledge: Callable[[int], None],
        abort: Callable[[], None],
    ) -> None:
        self._store = store
        self._acknowledge = acknowledge
        self._abort = abort
        self._running: asyncio.Future[int] | None = None
        self._closed = False
        self.failure: BaseException | None = None

    def appended(self) -> None:
        """Records were appended: flush them now, or after the flush running."""
        if self._running is None and not self._closed and self.failure is None:
            loop = asyncio.get_running_loop()
            self._running = loop.run_in_executor(None, self._store.flush_log)
            self._running.add_done_callback(self._flushed)

    def _flushed(self, flush: asyncio.Future[int]) -> None:
        self._running = None
        if flush.cancelled():
            return
        error = flush.exception()  # retrieved also when closed: asyncio logs it if not
        if self._closed:
            return
        if error is not None:  # a disk that fails
            self._fail(error)
            return
        end = flush.result()
        try:
            self._acknowledge(end)
        except Exception as failure:  # a link that closed meanwhile, a full disk's dispatch
            self._fail(failure)
            return
        if self._store.write_offset > end:
            self.appended()

    def _fail(self, error: BaseException) -> None:
        self.failure = error
        self._abort()

    def close(self) -> None:
        """No more acknowledgements. A flush still running finishes on its thread and
        acknowledges nothing; the link ends at once (a promotion does not wait for the
        old master's last fsync, and a cut of the tail waits for it on the log's flush
        lock)."""
        self._closed = True


class DispatchBehind:
    """A slave's consume-queue and index dispatch, after its ACKs: at most one per
    ``DISPATCH_SPACING_S`` while appends keep coming (done with the append that finds the
    spacing passed, in the same turn of the loop), at once when ``DISPATCH_AT_ONCE_BYTES``
    wait, and ``DISPATCH_TAIL_S`` after the last append for what it left. One dispatch per
    append cost each slave ~a fifth of its CPU under single sends (a plan, a consume-queue
    write, an index write and the listeners, for one record); a timer per dispatch woke
    the process as often again.

    Nothing waits on it: an ACK says the CommitLog holds the bytes, and what is not yet
    dispatched is in the CommitLog (a restart's recovery rebuilds it, a promoted node's
    first append dispatches it first, and the link's end dispatches it at once). A
    dispatch that fails (a full disk) ends the link: ``failure`` holds the error and
    ``abort`` ends the link's read, as ``FlushBehind``'s do."""

    def __init__(self, store: MessageStore, abort: Callable[[], None]) -> None:
        self._store = store
        self._abort = abort
        self._loop = asyncio.get_running_loop()
        self._last = self._loop.time()
        self._tail: asyncio.TimerHandle | None = None
        self.failure: BaseException | None = None

    def appended(self) -> None:
        """Records were appended (and acknowledged): dispatch them now, or soon."""
        store = self._store
        now = self._loop.time()
        waiting = store.write_offset - store.dispatched_offset
        if now - self._last >= DISPATCH_SPACING_S or waiting >= DISPATCH_AT_ONCE_BYTES:
            self.dispatch()
        elif self._tail is None and self.failure is None:
            self._tail = self._loop.call_at(self._last + DISPATCH_TAIL_S, self._on_tail)

    def _on_tail(self) -> None:
        self._tail = None
        store = self._store
        if store.is_open and store.write_offset > store.dispatched_offset:
            self.dispatch()

    def dispatch(self) -> None:
        self._last = self._loop.time()
        if self.failure is not None or not self._store.is_open:
            return  # a node shut down: its recovery dispatches at the next start
        try:
            self._store.dispatch_replicated()
        except StoreError as failure:
            self.failure = failure
            self._abort()

    def close(self) -> None:
        """The link ended: what waits is dispatched now (a promotion's reads find it). A
        failure here is the dispatcher's ``last_error``, which the next dispatch or
        append retries from the same record."""
        if self._tail is not None:
            self._tail.cancel()
            self._tail = None
        store = self._store
        if self.failure is not None or not store.is_open:
            return
        if store.write_offset > store.dispatched_offset:
            try:
                store.dispatch_replicated()
            except StoreError as failure:
                log.warning("replication: dispatch at the link's end failed: %s", failure)


def _gather_large_frame(link: LinkStream, rest: memoryview) -> None:
    """When ``rest`` (what an arrival left unread) begins a frame larger than the stream's
    staging buffer, have the stream gather it whole in a buffer of its own."""
    if len(rest) < FRAME_HEADER.size:
        return
    _, length = FRAME_HEADER.unpack_from(rest)
    check_length(length, MAX_FRAME_BYTES)  # before a buffer of that size is made
    if FRAME_HEADER.size + length > STAGED_BYTES:
        link.collect(FRAME_HEADER.size + length)


def _epoch_entries(address: str, raw: object) -> list[EpochEntry]:
    """The master's epoch history from its EPOCHS frame, in the order ``truncation_point``
    relies on (as ``EpochHistory`` keeps it), or ``LinkError``."""
    if not isinstance(raw, list):
        raise LinkError(f"{address} sent EPOCHS without a list of epochs")
    entries = []
    for item in raw:
        if not (
            isinstance(item, list)
            and len(item) == 2
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in item)
        ):
            raise LinkError(f"{address} sent an epoch entry that is not [epoch, start]: {item!r}")
        entries.append(EpochEntry(item[0], item[1]))
    for before, after in itertools.pairwise(entries):
        if not (before.epoch < after.epoch and before.start_offset <= after.start_offset):
            raise LinkError(f"{address} sent epochs out of order: {before} then {after}")
    return entries
