"""The slave side of replication: follow the master of this node's broker group.

On every (re)connect the slave and the master prove they know the cluster secret, compares its epoch
history with the master's and truncates its CommitLog (with consume queues and index) to
the last point both agree on, then appends the master's records verbatim, dispatches them
with the same dispatcher a master uses, records each new epoch it sees, and acknowledges
its new end (after forcing it to disk under SYNC_FLUSH). A cut tail is kept in a rollback
file first (``ha/rollback.py``). Bytes that do not start where its log ends drop the link,
which then handshakes again. Reconnects back off up to 1 s.

Thread-safety: runs on the node's event loop; disk work (truncation, fsync) goes to the
default executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable

from ha import rollback
from ha.epochs import EpochEntry, EpochHistory, truncation_point
from ha.wire import (
    DATA_HEADER,
    MASTER_IDENTITY,
    Kind,
    LinkError,
    ack_frame,
    control,
    proof,
    proof_matches,
    read_control,
    read_frame,
)
from store.config import FlushMode
from store.errors import ReplicaDiverged, ReplicaMismatch
from store.message_store import MessageStore

log = logging.getLogger("ferrymq.ha.slave")
RECONNECT_MAX_S = 1.0
IDLE_TIMEOUT_S = 5.0  # the master heartbeats every second
STOP_TIMEOUT_S = 5.0


class Diverged(LinkError):
    """This log shares no epoch with the master's: an operator must decide (wipe it)."""


class ReplicationSlave:
    def __init__(
        self,
        store: MessageStore,
        epochs: EpochHistory,
        node_id: str,
        secret: str,
        master_address: Callable[[], str | None],
    ) -> None:
        self.store = store
        self.epochs = epochs
        self.node_id = node_id
        self.secret = secret
        self.master_address = master_address
        self.connected_to: str | None = None
        # The master's end when the current link began: a slave holding that much holds
        # everything its master had then (how a log cut by recovery counts as refilled).
        self.linked_master_end = 0
        self.confirmed_offset = 0
        # Under SYNC replication a slave's readers, too, see only what the master's
        # in-sync set confirmed.
        self.caps_reads = False
        self.last_error = ""
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._poke = asyncio.Event()

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def master_changed(self) -> None:
        """Routing named a (possibly) new master: reconnect now, not after the backoff."""
        self._poke.set()

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._stopping = False
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """End following. The loop also checks a flag: asyncio.wait_for can swallow a
        cancellation that lands as its inner wait completes (Python 3.11), and a promotion
        must never wait on a loop that did not notice it was cancelled."""
        if self._task is not None:
            self._stopping = True
            self._poke.set()
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait({self._task}, timeout=STOP_TIMEOUT_S)
            self._task = None
        self.connected_to = None

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
                except (
                    LinkError,
                    ConnectionError,
                    OSError,
                    TimeoutError,
                    ReplicaMismatch,
                ) as error:
                    repeated = str(error) == self.last_error
                    self.last_error = str(error)
                    if isinstance(error, Diverged | ReplicaDiverged) and not repeated:
                        log.error("replication from %s refused: %s", address, error)
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
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 3)
        try:
            challenge = await read_control(reader, Kind.CHALLENGE)
            nonce = secrets.token_hex(16)
            writer.write(
                control(
                    Kind.HELLO,
                    node_id=self.node_id,
                    nonce=nonce,
                    proof=proof(self.secret, str(challenge.get("nonce", "")), self.node_id),
                    max_offset=self.store.commitlog.write_offset,
                    segment_bytes=self.store.config.commitlog_segment_bytes,
                )
            )
            await writer.drain()
            welcome = await read_control(reader, Kind.WELCOME)
            if not proof_matches(self.secret, nonce, MASTER_IDENTITY, str(welcome.get("proof"))):
                log.warning("replication: %s does not know the cluster secret", address)
                raise LinkError(f"{address} did not prove it knows the cluster secret")
            start = await self._truncate_to_common_point(welcome)
            self.linked_master_end = int(welcome["max_offset"])
            writer.write(control(Kind.START, offset=start))
            await writer.drain()
            self.connected_to, self.last_error = address, ""
            writer.write(ack_frame(start))
            await writer.drain()
            await self._apply_stream(reader, writer)
        finally:
            writer.close()

    async def _truncate_to_common_point(self, welcome: dict) -> int:
        master = [EpochEntry(int(e), int(s)) for e, s in welcome.get("epochs", [])]
        master_end = int(welcome["max_offset"])
        local_end = self.store.commitlog.write_offset
        point = truncation_point(self.epochs.entries, local_end, master, master_end)
        if point is None:
            raise Diverged(
                f"this log (epochs {self.epochs.entries}, end {local_end}) shares no epoch "
                f"with the master's ({master}): wipe this node's data to re-copy it"
            )
        if point < local_end:
            log.warning("replication: truncating this log from %d to %d", local_end, point)
            loop = asyncio.get_running_loop()
            entry = self.epochs.epoch_at(point)
            epoch = entry.epoch if entry is not None else 0
            await loop.run_in_executor(None, self._keep_and_cut, epoch, point)
            self.epochs.truncate_from(point)
        return point

    def _keep_and_cut(self, epoch: int, point: int) -> None:
        """Keep the tail in a rollback file (``ha/rollback.py``), then cut it."""
        rollback.keep_tail(self.store, epoch, point)
        self.store.truncate_to(point)

    async def _apply_stream(self, reader, writer) -> None:
        store = self.store
        sync_flush = store.config.flush_mode is FlushMode.SYNC_FLUSH
        loop = asyncio.get_running_loop()
        # One idle deadline, moved before every read: wait_for would create a task and
        # add loop turns for every frame, on the path of every SYNC acknowledgement.
        async with asyncio.timeout(None) as idle:
            while not self._stopping:
                idle.reschedule(loop.time() + IDLE_TIMEOUT_S)
                kind, payload = await read_frame(reader)
                idle.reschedule(None)
                if kind is not Kind.DATA:
                    raise LinkError(f"expected DATA, got {kind.name}")
                offset, epoch, epoch_start, confirmed = DATA_HEADER.unpack_from(payload)
                records = payload[DATA_HEADER.size :]
                self.confirmed_offset = max(self.confirmed_offset, confirmed)
                if self.caps_reads:
                    store.confirmed_offset = min(
                        self.confirmed_offset, store.commitlog.write_offset
                    )
                if not records:
                    continue  # a heartbeat
                if self._stopping:
                    return  # promoted meanwhile: this log takes no more of the old master's
                if epoch > self.epochs.last_epoch:
                    self.epochs.append(epoch, epoch_start)
                end = store.append_replicated(offset, records)
                if sync_flush:
                    await loop.run_in_executor(None, store.commitlog.flush)
                writer.write(ack_frame(end))
                await writer.drain()
