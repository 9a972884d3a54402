"""MessageStore: one node's storage engine, one facade (docs/architecture.md, "Storage engine").

Layers, each with one job: this facade → CommitLog / ConsumeQueue / IndexService →
MappedFileQueue → MappedFile. ``put_messages`` validates outside the put lock, appends and
dispatches under it, and waits for the group commit outside it again (SYNC_FLUSH).

Lifecycle: ``MessageStore.open(config)`` recovers (normal or abnormal, decided by the
``abort`` file) and starts the flush threads; ``shutdown()`` flushes everything, writes the
checkpoint and removes ``abort``. A process killed at any instruction in between leaves a
store that the next ``open`` repairs: the torn tail of the CommitLog is cut, consume queues
and index are truncated to the valid end and re-dispatched from the checkpoint.

Thread-safety: every public method may be called from any thread. Writers serialise on the
put lock; readers take no lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterator

from ferrymq.codec.commitlog_record import NO_HOST, StoredMessage, chunk_problem, encode_host
from ferrymq.codec.commitlog_record import decode as record_decode
from ferrymq.codec.errors import InvalidMessageError
from ferrymq.codec.message_id import parse_offset_message_id
from ferrymq.codec.properties import check_encoded_properties, encode_properties
from store.checkpoint import Checkpoint
from store.commitlog import (
    CODEC,
    NO_QUEUE_OFFSET_BIT,
    CommitLog,
    LogWriter,
    Prepared,
    PreparedMessage,
    PreparedRun,
    prepare,
    topic_prefix_of,
)
from store.config import FlushMode, StoreConfig
from store.consume_queue import BLANK_SIZE, ConsumeQueue
from store.damaged_ranges import DamagedRange, DamagedRanges
from store.dispatch_request import QueueRun
from store.dispatcher import ConsumeQueueTable, Dispatcher, DispatchListener, RunReader
from store.errors import DiskFullError, ReplicaDiverged, ReplicaMismatch
from store.flush_service import BackgroundFlusher, GroupCommitService, enough_dirty
from store.hashing import tag_hash_code
from store.index_service import IndexService
from store.message import TIMER_TOPIC, Message, validate_header_fields, validate_topic
from store.results import (
    GetResult,
    GetStatus,
    LogFigures,
    PutResult,
    PutStatus,
    RecoveryReport,
)

log = logging.getLogger("ferrymq.store")
ABORT_FILE = "abort"
CHECKPOINT_FILE = "checkpoint"
LOCK_FILE = "lock"


REQUESTS_PER_APPEND = 64
TOPIC_CACHE_MAX = 10_000
# A consumer read that overlapped this many cuts in a row answers "nothing new yet".
READS_PER_CUT = 3


def _refused(error: InvalidMessageError) -> PutResult:
    status = (
        PutStatus.PROPERTIES_SIZE_EXCEEDED
        if error.reason == "PROPERTIES_TOO_LARGE"
        else PutStatus.MESSAGE_ILLEGAL
    )
    return PutResult(status, error=str(error), reason=error.reason)


class _AppendCombiner:
    """Combines the puts of one event loop iteration into CommitLog batches.

    The first put of an iteration is appended at once, so a lone request (light load)
    waits for no batch; the ones after it in the same iteration are appended together at
    its end (one lock, one dispatch pass, one group-commit wait).

    Owned by one event loop; everything but the group-commit callback runs on it. The
    callback arrives on the flusher thread and hands the results back with one
    ``call_soon_threadsafe`` per flush, however many requests it covers."""

    def __init__(self, store: MessageStore, loop: asyncio.AbstractEventLoop) -> None:
        self._store = store
        self.loop = loop
        # (messages, already prepared?, future), in submission order.
        self._pending: list[tuple[list, bool, asyncio.Future[PutResult]]] = []
        self._requests_per_append = REQUESTS_PER_APPEND
        # True from an iteration's first put until the iteration ends.
        self._iteration_has_put = False
        self._flushed_lock = threading.Lock()
        self._flushed: list[
            tuple[list[tuple[asyncio.Future[PutResult], PutResult]], bool, asyncio.TimerHandle]
        ] = []

    def submit(self, messages: list, prepared: bool = False) -> asyncio.Future[PutResult]:
        future: asyncio.Future[PutResult] = self.loop.create_future()
        if not messages:
            future.set_result(PutResult(PutStatus.OK))
            return future
        if self._pending:
            self._pending.append((messages, prepared, future))
        elif self._iteration_has_put:
            self._pending.append((messages, prepared, future))
            self.loop.call_soon(self._drain)
        else:
            self._iteration_has_put = True
            self.loop.call_soon(self._end_iteration)
            self._pending.append((messages, prepared, future))
            self._drain()
        return future

    def turn_free(self) -> bool:
        """Whether a put now would be this turn's first (nothing waits to be appended and
        no put came before it in this turn)."""
        return not self._pending and not self._iteration_has_put

    def take_turn(self) -> bool:
        """For a put appended by its caller now (``MessageStore.append_now``): True when
        it may be, as this turn's first put (``turn_free``); the puts after it in the turn
        are then combined."""
        if not self.turn_free():
            return False
        self._iteration_has_put = True
        self.loop.call_soon(self._end_iteration)
        return True

    def _end_iteration(self) -> None:
        self._iteration_has_put = False

    def _drain(self) -> None:
        # At most ``_requests_per_append`` requests per loop turn, so one turn's work (and
        # the latency it adds to other tasks on the loop) stays bounded.
        take = self._requests_per_append
        pending, self._pending = self._pending[:take], self._pending[take:]
        if self._pending:
            self.loop.call_soon(self._drain)
        store = self._store
        limit = store.config.max_batch_bytes
        chunk: list[tuple[asyncio.Future[PutResult], list[Prepared]]] = []
        chunk_bytes = 0
        for messages, is_prepared, future in pending:
            if is_prepared:
                prepared = messages
            else:
                try:
                    prepared = store._prepare(messages)
                except InvalidMessageError as error:
                    if not future.done():
                        future.set_result(_refused(error))
                    continue
            size = prepared[0].size if len(prepared) == 1 else sum(p.size for p in prepared)
            if chunk and chunk_bytes + size > limit:
                self._append(chunk)
                chunk, chunk_bytes = [], 0
            chunk.append((future, prepared))
            chunk_bytes += size
        if chunk:
            self._append(chunk)

    def _append(self, chunk: list[tuple[asyncio.Future[PutResult], list[Prepared]]]) -> None:
        store = self._store
        result, end = store._append_prepared([p for _, group in chunk for p in group])
        if not result.ok:
            for future, _ in chunk:
                if not future.done():  # a caller cancelled meanwhile: the others still wait
                    future.set_result(result)
            return
        outcomes = []
        start = 0
        for future, group in chunk:
            count = group[0].count if len(group) == 1 else sum(p.count for p in group)
            outcomes.append(
                (future, PutResult(PutStatus.OK, result.appended[start : start + count]))
            )
            start += count
        if end is None:
            for future, outcome in outcomes:
                if not future.done():
                    future.set_result(outcome)
            return
        assert store._group_commit is not None
        timer = self.loop.call_later(
            store.config.sync_flush_timeout_ms / 1000, self._settle, outcomes, False
        )
        store._group_commit.request(
            end, lambda on_disk: self._flushed_soon(outcomes, on_disk, timer)
        )

    def _flushed_soon(self, outcomes, on_disk: bool, timer: asyncio.TimerHandle) -> None:
        # Runs on the flusher thread. The timeout timer is the loop's: it is cancelled on
        # the loop (``_drain_flushed``), never here. A timer handle is not thread-safe:
        # uvloop stops the libuv timer inside ``cancel``, and a call from this thread
        # crashed a node (SIGSEGV in the chaos suite); a timer that fires meanwhile finds
        # its futures settled or settles them as not flushed, as it would have anyway.
        with self._flushed_lock:
            self._flushed.append((outcomes, on_disk, timer))
            first = len(self._flushed) == 1
        if first and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._drain_flushed)

    def _drain_flushed(self) -> None:
        with self._flushed_lock:
            batch, self._flushed = self._flushed, []
        for outcomes, on_disk, timer in batch:
            timer.cancel()
            self._settle(outcomes, on_disk)
        for listener in self._store._flush_listeners:  # the read cap moved
            listener()

    @staticmethod
    def _settle(outcomes, on_disk: bool) -> None:
        for future, outcome in outcomes:
            if not future.done():
                future.set_result(outcome if on_disk else MessageStore._not_flushed(outcome))


class MessageStore:
    def __init__(self, config: StoreConfig, *, clock_ms: Callable[[], int] | None = None) -> None:
        self.config = config
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        root = config.data_dir
        os.makedirs(root, exist_ok=True)
        self.commitlog = CommitLog(
            os.path.join(root, "commitlog"),
            config.commitlog_segment_bytes,
            encode_host(config.store_host, config.store_port),
            preallocate=config.preallocate_segments,
            # Warming writes each segment twice (zeros, then records) so that a send's
            # fdatasync rewrites blocks rather than converting extents: worth it only where
            # a send waits for that fdatasync, and off the append only when preallocated.
            warm=config.preallocate_segments and config.flush_mode is FlushMode.SYNC_FLUSH,
            cache_bytes=config.commitlog_cache_bytes,
        )
        self.consume_queues = ConsumeQueueTable(
            os.path.join(root, "consumequeue"), config.consume_queue_entries_per_file
        )
        self.index = IndexService(
            os.path.join(root, "index"), config.index_slot_count, config.index_entry_count
        )
        self.dispatcher = Dispatcher(self.commitlog, self.consume_queues, self.index)
        # Ranges recovery cut after an invalid record, kept aside (store/damaged_ranges.py).
        self.damage = DamagedRanges(root)
        self._put_lock = threading.Lock()
        self._append_listeners: list[Callable[[], None]] = []
        # The flusher and a truncation both write the checkpoint through one temporary file.
        self._checkpoint_lock = threading.Lock()
        # Below this offset the last checkpoint named consume queues and index durable; a
        # truncation may lower it, never raise it (only a flush of those files does).
        self._derived_durable = 0
        self._truncations = 0  # a flush that began before a truncation claims nothing
        # A sequence lock for readers: odd while truncate_to runs. Consumers read without
        # the put lock, and bytes read during a cut may be zeros or another epoch's.
        self._cut_generation = 0
        self._last_store_timestamp_ms = 0
        self._closed = True
        # Why puts are refused, None when they are not: a flag the replication role
        # (``ha/role.py``, the one judge of "may this node write?") sets, so that no path
        # can append on a slave.
        self.writes_refused: str | None = None
        self._group_commit: GroupCommitService | None = None
        self._flush_listeners: list[Callable[[], None]] = []
        self._cut_listeners: list[Callable[[int], None]] = []
        self._flusher: BackgroundFlusher | None = None
        self._last_full_flush = time.monotonic()
        self._last_retention_check = 0.0
        self.recovery_report: RecoveryReport | None = None
        # Under SYNC readers see what replicas confirmed (docs/architecture.md, "Replication");
        # None means "everything dispatched is visible". Written only by
        # ``set_confirmed_offset``.
        self._confirmed_offset: int | None = None
        self._written_when_confirmed = 0  # the write offset at the cap's last change
        # Whether an append leaves its consume-queue and index dispatch behind it, for
        # ``dispatch_behind`` to do: a SYNC master's reput, at its slaves' ACKs (ha/master.py,
        # "reput"); one append at most (``_append_prepared``). Written only by
        # ``ReplicationMaster``.
        self.dispatches_behind = False
        self.disk_usage: Callable[[str], tuple[int, int, int]] = shutil.disk_usage
        self._last_combiner: _AppendCombiner | None = None
        self._topic_prefixes: dict[str, bytes] = {}
        self._combiners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _AppendCombiner] = (
            weakref.WeakKeyDictionary()
        )

    # ---- lifecycle -----------------------------------------------------------------
    @classmethod
    def open(cls, config: StoreConfig, **kwargs) -> MessageStore:
        store = cls(config, **kwargs)
        store._recover()
        store._start_services()
        return store

    def _path(self, name: str) -> str:
        return os.path.join(self.config.data_dir, name)

    def _recover(self) -> None:
        clean = not os.path.exists(self._path(ABORT_FILE))
        checkpoint = Checkpoint.read(self._path(CHECKPOINT_FILE))
        self._create_abort_file()
        self.commitlog.load()
        self.consume_queues.load()
        self.index.load(crashed=not clean)
        segments = self.commitlog.segments
        first = segments.files[0].base_offset if segments.files else 0
        durable = first if checkpoint is None else max(first, checkpoint.recovery_start_offset)
        # Scan from the start of the segment holding the last durable point: recovery
        # costs what must be checked, never the whole log.
        scan_start = max(first, durable - durable % self.config.commitlog_segment_bytes)
        scan = self.commitlog.scan(scan_start)
        end = scan.end_offset
        self.damage.load()
        damaged = None
        if scan.corrupt_offset is not None:
            flushed = checkpoint.commitlog_flushed_offset if checkpoint is not None else 0
            damaged = self._keep_damaged(scan.corrupt_offset, scan.corruption, clean, flushed)
        self.commitlog.set_end(end, flushed_from=min(durable, end))
        for queue in self.consume_queues.queues.values():
            queue.truncate_physical(end)
            queue.correct_min_offset(self.commitlog.min_offset)
        # Re-dispatch what derived files may miss: everything past the durable point.
        redispatch_from = min(durable, end)
        redispatch_from = max(redispatch_from, self.commitlog.min_offset)
        # The index is trusted only below that point: a power loss can bring back an index
        # file's older synced copy whose header claims records it never indexed (consume
        # queues need no cut: their entries are checked and rewritten by the re-dispatch).
        self.index.truncate_physical(redispatch_from)
        self.dispatcher.dispatched_offset = redispatch_from
        redispatched = self.dispatcher.catch_up()
        if self.dispatcher.last_error is not None:
            raise self.dispatcher.last_error
        self._rebuild_queue_offsets_locked()
        self.recovery_report = RecoveryReport(
            clean_shutdown=clean,
            scan_start_offset=scan_start,
            end_offset=end,
            records_scanned=scan.records,
            redispatched=redispatched,
            corrupt_offset=scan.corrupt_offset,
            corruption=scan.corruption,
            damaged=damaged,
        )
        # What was re-dispatched sits in the page cache only: durable below the old point.
        self._write_checkpoint(redispatch_from)

    def _keep_damaged(
        self, start: int, reason: str | None, clean: bool, flushed: int
    ) -> DamagedRange | None:
        """Keep the log from the invalid record at ``start`` aside before recovery cuts it
        there, and say so loudly; None for a torn tail (a write the previous run never
        finished: nothing valid after it, and not below what it had forced to disk)."""
        reason = reason or "invalid record"
        damaged = self.damage.keep(
            self.commitlog.segments,
            start,
            reason,
            may_be_torn=not clean and start >= flushed,
            high_water=self.config.disk_high_water_ratio,
            now_ms=self._clock_ms(),
        )
        if damaged is None:
            log.warning(
                "recovery: cut a torn record at CommitLog offset %d (%s): the previous run "
                "stopped while writing it",
                start,
                reason,
            )
            return None
        log.error(
            "recovery: invalid record at CommitLog offset %d (%s): the log now ends there; "
            "the %d bytes [%d, %d) from it are kept in %s (list them with "
            "`ferrymq rollback --data %s`)",
            start,
            reason,
            damaged.cut_bytes,
            start,
            damaged.end,
            os.path.join(self.damage.directory, damaged.file),
            self.config.data_dir,
        )
        if damaged.kept_end < damaged.end:
            log.error(
                "recovery: the damaged range is larger than %d bytes: [%d, %d) is cut "
                "without a copy",
                damaged.kept_end - damaged.start,
                damaged.kept_end,
                damaged.end,
            )
        return damaged

    # ---- replication: the same log on every replica ------------------------------------
    def append_replicated(self, physical_offset: int, data: bytes) -> int:
        """Append records a master wrote at ``physical_offset`` verbatim and dispatch
        them; returns the new write offset. ``ReplicaMismatch`` when ``physical_offset`` is
        not where this log ends (the link must re-handshake)."""
        end = self.append_replicated_records(physical_offset, data)
        self.dispatch_replicated()
        return end

    def dispatch_replicated(self) -> None:
        """Dispatch what ``append_replicated_records`` appended (consume-queue and index
        entries); the dispatcher's error (a full disk) when it cannot, in which case the
        next call, or the next append of a master, resumes from the same record."""
        with self._put_lock:
            self.dispatcher.catch_up()
            if self.dispatcher.last_error is not None:
                raise self.dispatcher.last_error

    def dispatch_behind(self, confirmed: int | None = None) -> None:
        """Dispatch what appends left behind them (``dispatches_behind``). A failure (a full
        disk) stays the dispatcher's ``last_error``: the next append reports it and resumes
        from the same record, as after an append's own dispatch. ``confirmed``: the
        replication cap the caller sets next (a confirmation's reput): the dispatcher's
        ``run_reader`` hears each run with the read cap that cap makes."""
        readable = None if confirmed is None else self.read_cap_at(confirmed)
        with self._put_lock:
            if not self._closed:
                self.dispatcher.catch_up(readable)

    def append_replicated_records(self, physical_offset: int, data: bytes | memoryview) -> int:
        """``append_replicated`` without the dispatch: a slave acknowledges once the
        CommitLog holds the bytes (what a failover needs; the consume queues and the index
        are rebuilt from it) and dispatches after, as RocketMQ's slaves reput after
        their HA append. Returns the new write offset."""
        with self._put_lock:
            if physical_offset != self.commitlog.write_offset:
                raise ReplicaMismatch(
                    f"master sent bytes at {physical_offset}, this log ends at "
                    f"{self.commitlog.write_offset}"
                )
            problem = chunk_problem(data)
            if problem is not None:
                # The master's records do not start where this log's end is: the two logs
                # differ below this point although their epochs agree. Refused, never
                # stored: a replica that silently differs is worse than one that stops.
                raise ReplicaDiverged(
                    f"bytes from the master at {physical_offset} are not whole records "
                    f"({problem}): the logs diverged below this point"
                )
            self.commitlog.append_raw(physical_offset, data)
            return self.commitlog.write_offset

    def append_replicated_with(self, write: Callable[[int, int, int, int], int]) -> int:
        """A slave's replica lane (``ha/replica_lane.py``) appending a master's records
        itself, as ``append_replicated_records`` would: ``write(fd, position, room,
        write_offset)`` writes whole records at the log's end, into the active segment's
        file ``fd`` at ``position`` and at most ``room`` bytes (no file and no room when the
        log ends at a segment's end: the next records roll through
        ``append_replicated_records``), and returns the log's new end, which the log then
        counts. Under the put lock: the lane is the log's one writer while it writes."""
        with self._put_lock:
            start = self.commitlog.write_offset
            target = self.commitlog.raw_append_target()
            if target is None:
                return write(-1, 0, 0, start)
            segment, position = target
            end = write(segment.writer_fd(), position, segment.size - position, start)
            if end != start:
                self.commitlog.appended_raw(segment, end)
            return end

    def truncate_to(self, physical_offset: int) -> None:
        """Discard the log from ``physical_offset`` (a record boundary) on, with the
        consume-queue and index entries that point there: a slave cutting a tail its
        master never had (epoch histories decide where)."""
        with self._put_lock:
            self._cut_generation += 1
            try:
                end = min(physical_offset, self.commitlog.write_offset)
                self.commitlog.truncate_to(end)
                for queue in self.consume_queues.queues.values():
                    queue.truncate_physical(end)
                self.index.truncate_physical(end)
                self.dispatcher.dispatched_offset = min(self.dispatcher.dispatched_offset, end)
                for listener in self._cut_listeners:  # what others derive from the cut tail
                    listener(end)
                # A cut is the one fall of the write offset: a new history for the cap too.
                cap = self._confirmed_offset
                self.set_confirmed_offset(None if cap is None else min(cap, end), new_epoch=True)
                self._rebuild_queue_offsets_locked()
                with self._checkpoint_lock:
                    self._truncations += 1
                # Queues this cut did not touch may hold unflushed entries below the cut.
                self._write_checkpoint(min(self._derived_durable, end))
            finally:
                self._cut_generation += 1

    def rebuild_queue_offsets(self) -> None:
        """Next queue offset of every queue from its consume queue, and the newest store
        time: after recovery, a truncation, or replicated bytes (a promoted slave assigns
        offsets and store times from here). Every record of the log is dispatched first:
        a slave acknowledges replicated records before it dispatches them, and one
        promoted in between (its link stopped while it fsynced them) took its next queue
        offsets from consume queues that missed them, and handed out the same queue
        offsets again (found by a 30-minute sync-sync-flush chaos run)."""
        with self._put_lock:
            self._rebuild_queue_offsets_locked()

    def _rebuild_queue_offsets_locked(self) -> None:
        if self.dispatcher.dispatched_offset < self.commitlog.write_offset:
            self.dispatcher.catch_up()
            if self.dispatcher.last_error is not None:
                raise self.dispatcher.last_error
        assert self.dispatcher.dispatched_offset >= self.commitlog.write_offset, (
            self.dispatcher.dispatched_offset,
            self.commitlog.write_offset,
        )
        offsets = self.commitlog.queue_offsets
        offsets.clear()
        for (topic, queue_id), queue in self.consume_queues.queues.items():
            offsets[(topic, queue_id)] = queue.max_offset
        if self.commitlog.segments.files:
            self._last_store_timestamp_ms = max(
                self._last_store_timestamp_ms, self._newest_store_timestamp()
            )

    def _newest_store_timestamp(self) -> int:
        newest = 0
        for queue in self.consume_queues.queues.values():
            if queue.max_offset > queue.min_offset:
                entry = queue.entry_at(queue.max_offset - 1)
                if entry and entry[1] != BLANK_SIZE:
                    newest = max(newest, self.commitlog.store_timestamp_at(entry[0]) or 0)
        return newest

    def _create_abort_file(self) -> None:
        fd = os.open(self._path(ABORT_FILE), os.O_WRONLY | os.O_CREAT, 0o644)
        os.fsync(fd)
        os.close(fd)

    def _prepare_active_segment(self) -> None:
        """Create (and under SYNC_FLUSH warm) the segment the next append goes to, so that
        no put pays for it, and arm the preallocation of the one after."""
        segments = self.commitlog.segments
        with contextlib.suppress(DiskFullError):  # the first put reports it
            segments.file_for_write(self.commitlog.write_offset)
        segments.arm_preallocation()

    def _start_services(self) -> None:
        config = self.config
        self._prepare_active_segment()
        self._closed = False
        if config.flush_mode is FlushMode.SYNC_FLUSH:
            self._group_commit = GroupCommitService(
                self.commitlog.flush, self.commitlog.flushed_offset
            )
            flush_commitlog = None
        else:
            flush_commitlog = self._flush_commitlog_async
        self._flusher = BackgroundFlusher(
            flush_commitlog=flush_commitlog,
            flush_derived=self.flush_derived,
            housekeeping=self._housekeeping,
            interval_ms=config.flush_interval_ms,
            derived_interval_ms=config.derived_flush_interval_ms,
        )

    def shutdown(self) -> None:
        """Flush everything, write the checkpoint and mark the shutdown as clean."""
        if self._closed:
            return
        with self._put_lock:
            self._closed = True
        if self._flusher is not None:
            self._flusher.stop()
        if self._group_commit is not None:
            self._group_commit.stop()
        self.commitlog.flush()
        self.flush_derived()
        self.commitlog.segments.discard_preallocated()
        self.commitlog.close()
        self.consume_queues.close()
        os.unlink(self._path(ABORT_FILE))

    def close_abruptly_for_tests(self) -> None:
        """Stop threads without flushing or removing ``abort``, as a crash would."""
        self._closed = True
        if self._flusher is not None:
            self._flusher.stop()
        if self._group_commit is not None:
            self._group_commit.stop()
        self.commitlog.close()

    # ---- flushing ------------------------------------------------------------------
    def _flush_commitlog_async(self, force: bool) -> None:
        now = time.monotonic()
        full = force or now - self._last_full_flush >= self.config.flush_full_interval_ms / 1000
        if full or enough_dirty(
            self.commitlog.write_offset, self.commitlog.flushed_offset, self.config.flush_min_pages
        ):
            self.commitlog.flush()
            if full:
                self._last_full_flush = now

    def flush_derived(self) -> None:
        """Flush consume queues and index, then record in the checkpoint what is durable."""
        truncations = self._truncations
        dispatched = self.dispatcher.dispatched_offset
        self.consume_queues.flush()
        self.index.flush()
        self._write_checkpoint(dispatched, truncations)

    def _write_checkpoint(self, derived: int, truncations: int | None = None) -> None:
        """Record that the CommitLog is durable to its flushed offset and consume queues
        and index below ``derived``; skipped when a truncation happened since the caller
        read ``truncations`` (its ``derived`` may name entries of a discarded tail)."""
        now = self._clock_ms()
        checkpoint = Checkpoint(
            commitlog_flushed_offset=self.commitlog.flushed_offset,
            consume_queue_flushed_offset=derived,
            index_flushed_offset=derived,
            commitlog_flushed_timestamp_ms=now,
            consume_queue_flushed_timestamp_ms=now,
            index_flushed_timestamp_ms=now,
        )
        with self._checkpoint_lock:
            if truncations is not None and truncations != self._truncations:
                return
            checkpoint.write(self._path(CHECKPOINT_FILE))
            self._derived_durable = derived

    def _housekeeping(self) -> None:
        interval = self.config.retention_check_interval_ms / 1000
        now = time.monotonic()
        if now - self._last_retention_check >= interval:
            self._last_retention_check = now
            self.delete_expired()

    # ---- writing -------------------------------------------------------------------
    def put_message(self, message: Message) -> PutResult:
        return self.put_messages([message])

    def put_messages(self, messages: list[Message]) -> PutResult:
        """Append ``messages`` as one atomic batch and, under SYNC_FLUSH, block until it is
        on disk. The status says exactly what happened. For threads."""
        result, end = self.append_messages(messages)
        if end is None:
            return result
        assert self._group_commit is not None
        if self._group_commit.wait_flushed(end, self.config.sync_flush_timeout_ms / 1000):
            return result
        return self._not_flushed(result)

    async def put_messages_async(self, messages: list[Message]) -> PutResult:
        """``put_messages`` for asyncio callers. Requests submitted in the same loop
        iteration are appended as one batch (one lock, one dispatch pass, one group-commit
        wait) while each keeps its own validation and result; no thread is parked."""
        return await self._combiner().submit(messages)

    async def put_prepared_async(self, batch: list[Prepared]) -> PutResult:
        """``put_messages_async`` for messages that already passed ``prepare`` (each
        refused one was answered on its own by the caller): one atomic batch."""
        try:
            self.check_batch_size(batch)
        except InvalidMessageError as error:
            return _refused(error)
        return await self._combiner().submit(batch, prepared=True)

    def appends_now(self) -> bool:
        """Whether ``append_now`` would append a put made now (checked before a caller
        reads one: a put it would decline is read again by the usual way)."""
        return self._group_commit is None and self._combiner().turn_free()

    def append_now(self, batch: list[Prepared]) -> PutResult | None:
        """``put_prepared_async`` for a caller with no task (the produce lane): the batch
        appended now, as the turn's first put would be, when its result is final now (no
        flush to wait for under SYNC_FLUSH); None, with nothing written, when it cannot be
        (a flush to wait for, puts of this turn before it or waiting, a batch over the
        limit): the caller puts it the usual way, which gives every answer."""
        if self._group_commit is not None:
            return None
        try:
            self.check_batch_size(batch)
        except InvalidMessageError:
            return None
        if not self._combiner().take_turn():
            return None
        result, end = self._append_prepared(batch)
        assert end is None, "a flush to wait for with no group commit"
        return result

    def _combiner(self) -> _AppendCombiner:
        loop = asyncio.get_running_loop()
        combiner = self._last_combiner
        if combiner is None or combiner.loop is not loop:
            combiner = self._combiners.get(loop)
            if combiner is None:
                combiner = self._combiners[loop] = _AppendCombiner(self, loop)
            self._last_combiner = combiner
        return combiner

    def on_disk(self, end: int) -> bool:
        """Whether the log below ``end`` is on disk as a put's answer would require: at
        once under ASYNC_FLUSH, else once the flusher forced it (False after the flush
        timeout). Blocks: for threads."""
        if self._group_commit is None:
            return True
        return self._group_commit.wait_flushed(end, self.config.sync_flush_timeout_ms / 1000)

    @staticmethod
    def _not_flushed(result: PutResult) -> PutResult:
        return PutResult(
            PutStatus.FLUSH_DISK_TIMEOUT,
            result.appended,
            "written but not confirmed on disk in time",
        )

    def append_messages(self, messages: list[Message]) -> tuple[PutResult, int | None]:
        """Append and dispatch without waiting for the disk. Returns the result and, when
        the flush mode requires a wait before the result may be reported, the offset the
        disk must reach; ``None`` when the result is final."""
        if not messages:
            return PutResult(PutStatus.OK), None
        try:
            batch = self._prepare(messages)
        except InvalidMessageError as error:
            return _refused(error), None
        return self._append_prepared(batch)

    def _append_prepared(self, batch: list[Prepared]) -> tuple[PutResult, int | None]:
        with self._put_lock:
            if self._closed:
                return PutResult(
                    PutStatus.SERVICE_NOT_AVAILABLE, error="the store is shut down"
                ), None
            if self.writes_refused is not None:
                return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, error=self.writes_refused), None
            start, dispatcher = self.commitlog.write_offset, self.dispatcher
            behind = self.dispatches_behind and dispatcher.last_error is None
            if dispatcher.dispatched_offset != start and not behind:
                dispatcher.catch_up()
                if dispatcher.last_error is not None:
                    return PutResult(PutStatus.DISK_FULL, error=str(dispatcher.last_error)), None
            now = max(self._clock_ms(), self._last_store_timestamp_ms)
            self._last_store_timestamp_ms = now
            try:
                appended = self.commitlog.append(batch, now)
            except DiskFullError as error:
                return PutResult(PutStatus.DISK_FULL, error=str(error)), None
            for listener in self._append_listeners:
                listener()
            # Behind the appends (``dispatches_behind``) by one append at most: when an
            # earlier one is still undispatched (no ACK came between: a busy master), this
            # one dispatches all after its listeners wrote its copies, as without it.
            if not behind or dispatcher.dispatched_offset < start:
                dispatcher.catch_up()
            end = self.commitlog.write_offset
        return PutResult(PutStatus.OK, appended), (end if self._group_commit is not None else None)

    def _prepare(self, messages: list[Message]) -> list[PreparedMessage]:
        batch = [self.prepare(message) for message in messages]
        self.check_batch_size(batch)
        return batch

    def check_batch_size(self, batch: list[Prepared]) -> None:
        total = sum(p.size for p in batch)
        if total > self.config.max_batch_bytes:
            raise InvalidMessageError(
                "BATCH_TOO_LARGE",
                f"batch is {total} bytes, the limit is {self.config.max_batch_bytes}",
            )

    def prepare(self, message: Message, encoded_properties: bytes | None = None) -> PreparedMessage:
        """Validate one message as every put does (topic, body size, queue id, header
        fields, properties) and encode its variable part; ``InvalidMessageError`` says
        what is wrong. ``encoded_properties``, when the caller holds them already, must be
        ``message.properties`` encoded; they are checked instead of encoded again (in C,
        ``CODEC``, except where ``prepare_in_python`` refuses the message)."""
        topic_prefix = self._topic_prefixes.get(message.topic) or self._topic_prefix(message.topic)
        if encoded_properties is not None:
            prepared = CODEC.prepare(
                message, topic_prefix, encoded_properties, self.config.max_message_body_bytes
            )
            if prepared is not None:
                return prepared
        return self.prepare_in_python(message, topic_prefix, encoded_properties)

    def prepare_run(
        self, topic: str, queue_id: int, born_host: bytes, records: bytes, spans: bytes
    ) -> PreparedRun:
        """The records of one Produce request to one queue as one ``PreparedRun``: their
        checks were made with ``spans`` (``node.message_rules.produce_spans``, against this
        store's body limit); what is the store's alone is checked here, once for all of
        them. ``InvalidMessageError`` where ``prepare`` would refuse each record."""
        if topic == TIMER_TOPIC:
            raise InvalidMessageError("TOPIC_INVALID", "timer records are not produced in runs")
        if not 0 <= queue_id < 1 << 31:
            raise InvalidMessageError("QUEUE_ID_INVALID", f"queue id {queue_id}")
        if len(born_host) != len(NO_HOST):
            raise InvalidMessageError(
                "FIELD_OUT_OF_RANGE", f"born_host {born_host!r} does not fit its record field"
            )
        return PreparedRun.of(topic, self._topic_prefix(topic), queue_id, born_host, records, spans)

    def _topic_prefix(self, topic: str) -> bytes:
        """TOPICLENGTH + TOPIC of a valid topic name (``InvalidMessageError`` otherwise)."""
        topics = self._topic_prefixes
        topic_prefix = topics.get(topic)
        if topic_prefix is None:
            # Validated once per topic name; bounded so hostile names cannot grow it.
            if len(topics) >= TOPIC_CACHE_MAX:
                topics.clear()
            topic_prefix = topics[topic] = topic_prefix_of(validate_topic(topic))
        return topic_prefix

    def prepare_in_python(
        self, message: Message, topic_prefix: bytes, encoded_properties: bytes | None
    ) -> PreparedMessage:
        """``prepare`` after the topic check: the specification ``CODEC.prepare`` is
        tested against, and the path of every refusal."""
        limit = self.config.max_message_body_bytes
        if len(message.body) > limit:
            raise InvalidMessageError(
                "BODY_TOO_LARGE", f"body is {len(message.body)} bytes, the limit is {limit}"
            )
        if not 0 <= message.queue_id < 1 << 31:
            raise InvalidMessageError("QUEUE_ID_INVALID", f"queue id {message.queue_id}")
        validate_header_fields(message)
        if encoded_properties is None:
            encoded_properties = encode_properties(message.properties)
        else:
            check_encoded_properties(encoded_properties, message.properties)
        return prepare(message, topic_prefix, encoded_properties)

    # ---- reading -------------------------------------------------------------------
    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tags: Collection[str] | None = None,
    ) -> GetResult:
        """Up to ``max_count`` messages of one queue from ``offset``; ``tags`` None means
        every tag ("*"). Filtering uses the queue's tag hashes, then the real tag."""
        read = self.commitlog.read

        def decoded(physical: int, size: int) -> StoredMessage | None:
            stored = read(physical)
            if stored is None:
                return None  # removed by retention while we read
            if tags is not None and stored.tags not in tags:
                return None  # a hash collision: the real tag decides
            return stored

        return self._scan_queue(topic, queue_id, offset, max_count, tags, decoded)

    def walk_queue(
        self, topic: str, queue_id: int, start: int | None = None, page: int = 256
    ) -> Iterator[StoredMessage]:
        """Every message of one queue the log holds, from queue offset ``start`` (the
        queue's first when None) to the queue's end when the walk began, ``page`` at a
        time: how a replay or a rebuild reads a queue. Past the read cap too: state is
        what every record of the log says, confirmed or not, flushed or not. A promoted
        SYNC_FLUSH slave's replay once stopped at its flushed offset, missed the last
        records its old master wrote (a dead letter's end among them), and copied that
        message to the dead-letter queue a second time (found by chaos)."""
        offset = self.min_offset_in_queue(topic, queue_id) if start is None else start
        end = self.max_offset_in_queue(topic, queue_id)
        read_record = self.commitlog.read

        def record(physical: int, size: int) -> StoredMessage | None:
            return read_record(physical)  # None: removed by retention while we read

        while offset < end:
            read = self._scan_queue(
                topic, queue_id, offset, min(page, end - offset), None, record, capped=False
            )
            yield from read.messages
            if read.next_begin_offset <= offset:
                break
            offset = read.next_begin_offset

    def message_at(self, topic: str, queue_id: int, queue_offset: int) -> StoredMessage | None:
        """The message at one queue offset, confirmed by the in-sync set or not; None when
        there is none (never written, or removed by retention). For state the node already
        holds about that message (a half being resolved, a delivery being retried): a
        promoted master's read cap starts at the old master's last confirmed offset, and
        such a read must not mistake a held message for a missing one."""
        queue = self.consume_queues.get(topic, queue_id)
        entry = queue.entry_at(queue_offset) if queue is not None else None
        if entry is None:
            return None
        stored = self.commitlog.read(entry[0])
        if stored is None or stored.topic != topic or stored.queue_offset != queue_offset:
            return None  # removed by retention while we read
        return stored

    def get_records(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        max_bytes: int,
        tags: Collection[str] | None = None,
    ) -> GetResult:
        """``get_messages`` returning each record's stored bytes (``messages`` holds
        ``bytes``), at most ``max_bytes`` of them unless the first alone is larger: a bulk
        read that decodes nothing unless a tag filter needs the real tag."""
        if tags is None:  # every record: one C pass (``CommitLog.gather``)
            return self._scan_queue(topic, queue_id, offset, max_count, None, None, max_bytes)
        read_bytes = self.commitlog.read_bytes

        def raw(physical: int, size: int) -> bytes | None:
            data = read_bytes(physical, size)
            if len(data) != size:
                return None  # removed by retention while we read
            if tags is not None and record_decode(data, 0).tags not in tags:
                return None
            return data

        return self._scan_queue(topic, queue_id, offset, max_count, tags, raw, max_bytes)

    def _scan_queue(
        self, topic, queue_id, offset, max_count, tags, fetch, max_bytes=None, capped=True
    ):
        """One consistent read of a queue. A slave may cut its tail (``truncate_to``, on
        another thread) while a consumer reads it: queue entries then point at zeroed
        bytes, or at another epoch's records once new ones are appended there. A read that
        overlapped a cut is read again; while a cut lasts, the queue has nothing new yet
        (the consumer asks again, at the same offset)."""
        for _ in range(READS_PER_CUT):
            generation = self._cut_generation
            if generation & 1:
                break
            try:
                result = self._scan_queue_once(
                    topic, queue_id, offset, max_count, tags, fetch, max_bytes, capped
                )
            except Exception:
                if self._cut_generation == generation:
                    raise  # not a torn read: a real fault
                continue
            if self._cut_generation == generation:
                return result
        queue = self.consume_queues.get(topic, queue_id)
        low, high = (queue.min_offset, queue.max_offset) if queue is not None else (0, 0)
        return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, [], offset, low, high)

    def _scan_queue_once(
        self, topic, queue_id, offset, max_count, tags, fetch, max_bytes, capped=True
    ):
        queue = self.consume_queues.get(topic, queue_id)
        if queue is None or queue.max_offset == 0:
            # As RocketMQ: only a queue that never had a message is "no message in queue";
            # one emptied by retention answers by offset like any other.
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, [], 0, 0, 0)
        low, high = queue.min_offset, queue.max_offset
        if offset < low:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, [], low, low, high)
        if offset == high:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, [], offset, low, high)
        if offset > high:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, [], high, low, high)
        limit = self.read_cap() if capped else None
        if fetch is None:  # get_records of every record
            first, entries = queue.entry_bytes(offset, max(max_count, 1) * 16)
            found, next_offset = self.commitlog.gather(
                entries, first, limit, max_count, max_bytes, offset
            )
        else:
            found, next_offset = self._scan_entries(
                queue, offset, max_count, tags, fetch, max_bytes, limit
            )
        status = GetStatus.FOUND if found else GetStatus.NO_MATCHED_MESSAGE
        if not found and next_offset == offset:
            status = GetStatus.OFFSET_OVERFLOW_ONE
        return GetResult(status, found, next_offset, low, high)

    @staticmethod
    def _scan_entries(queue, offset, max_count, tags, fetch, max_bytes, limit):
        """What each entry from ``offset`` gives through ``fetch`` (tags filtered by their
        queue hash first), as ``CommitLog.gather`` takes records: (found, next offset)."""
        wanted = {tag_hash_code(t) for t in tags} if tags is not None else None
        found: list = []
        used = 0
        next_offset = offset
        # Scan a bounded window of entries, so a filter that matches little still returns.
        for queue_offset, (physical, size, tag_code) in queue.entries(
            offset, max(max_count, 1) * 16
        ):
            if limit is not None and physical + size > limit:
                break
            if max_bytes is not None and found and used + size > max_bytes:
                break
            next_offset = queue_offset + 1
            if wanted is not None and tag_code not in wanted:
                continue
            item = fetch(physical, size)
            if item is None:
                continue
            found.append(item)
            used += size
            if len(found) >= max_count:
                break
        return found, next_offset

    def read_run(
        self, run: QueueRun, readable: int, max_count: int, max_bytes: int
    ) -> GetResult | None:
        """What ``get_records`` from ``run``'s first offset with no filter would find
        under read cap ``readable``, read from the run's own entries (a dispatch's, just
        written: ``set_run_reader``) rather than the consume queue's; None when none of
        its records ends at or below the cap. Called under the put lock, which a cut of
        the tail (``truncate_to``) takes too: no cut overlaps it, unlike ``_scan_queue``."""
        topic, queue_id, first_offset, entries = run
        found, next_offset = self.commitlog.gather(
            entries, first_offset, readable, max_count, max_bytes, first_offset
        )
        if not found:
            return None
        queue = self.consume_queues.get(topic, queue_id)
        low, high = (queue.min_offset, queue.max_offset) if queue is not None else (0, 0)
        return GetResult(GetStatus.FOUND, found, next_offset, low, high)

    def set_run_reader(self, reader: RunReader) -> None:
        """``reader(run, read cap)`` hears each queue's run of new entries that a
        confirmation's dispatch writes (``dispatch_behind`` with ``confirmed``), once its
        consume-queue entries are written and before the index and the dispatch
        listeners; on the thread of that dispatch (a master's event loop)."""
        self.dispatcher.run_reader = reader

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        queue = self.consume_queues.get(topic, queue_id)
        return queue.min_offset if queue else 0

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        queue = self.consume_queues.get(topic, queue_id)
        return queue.max_offset if queue else 0

    def queue_ids(self, topic: str) -> list[int]:
        return [q.queue_id for q in self.consume_queues.of_topic(topic)]

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        queue = self.consume_queues.get(topic, queue_id)
        if queue is None:
            return 0
        return queue.offset_by_time(timestamp_ms, self.commitlog.store_timestamp_at)

    def set_store_host(self, ip: str, port: int) -> None:
        """The STOREHOST of records appended from now on, so of their offset message ids:
        the address a client that decodes an id asks for the message (a node sets its
        remoting address once that port is bound, before it appends anything)."""
        self.commitlog.store_host = encode_host(ip, port)

    def look_message_by_offset(self, physical_offset: int) -> StoredMessage | None:
        """The message whose record starts at ``physical_offset``, or None. Only a real
        record answers: bytes that pass every check (magic, lengths, body CRC:
        ``CommitLog.read_verified``) and that their consume queue points at (the entry of
        the topic, queue and queue offset they claim holds exactly this offset and size).
        Bytes shaped like a record inside another record's body (a header a producer
        forged in its message, with a length that spans other topics' records) claim an
        entry that points elsewhere, so they are never read as one. Records that take no
        queue offset (PREPARED or ROLLBACK transaction records of the store API; the node
        writes none) have no entry to vouch for them and are not returned either."""
        stored = self.commitlog.read_verified(physical_offset)
        if stored is None or stored.sys_flag & NO_QUEUE_OFFSET_BIT:
            return None
        queue = self.consume_queues.get(stored.topic, stored.queue_id)
        entry = queue.entry_at(stored.queue_offset) if queue is not None else None
        if entry is None or entry[0] != physical_offset or entry[1] != stored.size:
            return None
        return stored

    def look_message_by_id(self, message_id: str) -> StoredMessage | None:
        """The message of an offset message id (``look_message_by_offset``), or None for
        a malformed id, a position where no real record starts, or a record another host
        wrote there. The id's host is the one in the record, not this store's: a replica
        holds its master's records at the same offsets, with that master's host, so a
        slave, or a slave promoted after a failover, finds them by the ids the clients
        were given."""
        try:
            host, physical = parse_offset_message_id(message_id)
        except ValueError:
            return None
        found = self.look_message_by_offset(physical)
        return found if found is not None and found.store_host == host else None

    def query_by_key(
        self,
        topic: str,
        key: str,
        max_count: int = 32,
        begin_ms: int = 0,
        end_ms: int = 1 << 62,
    ) -> list[StoredMessage]:
        """Messages of ``topic`` with ``key`` among their KEYS or as UNIQ_KEY, newest
        first. Each hit is verified on the record itself, so colliding hashes never leak."""
        return self._query(topic, key, max_count, begin_ms, end_ms, unique_only=False)

    def query_by_unique_key(self, topic: str, unique_key: str) -> StoredMessage | None:
        found = self._query(topic, unique_key, 1, 0, 1 << 62, unique_only=True)
        return found[0] if found else None

    def _query(
        self, topic: str, key: str, max_count: int, begin_ms: int, end_ms: int, unique_only: bool
    ) -> list[StoredMessage]:
        found: list[StoredMessage] = []
        seen: set[int] = set()
        low, high = self.commitlog.min_offset, self.commitlog.write_offset
        for physical in self.index.lookup(topic, key, begin_ms, end_ms, max_count * 4 + 16):
            if physical in seen or not low <= physical < high:
                continue
            seen.add(physical)
            # Index hits are candidates: the record is read as a lookup by id reads it.
            stored = self.look_message_by_offset(physical)
            if stored is None or stored.topic != topic:
                continue
            if not begin_ms <= stored.store_timestamp_ms <= end_ms:
                continue
            matches = (
                stored.unique_key == key
                if unique_only
                else (key in stored.keys or stored.unique_key == key)
            )
            if matches:
                found.append(stored)
                if len(found) >= max_count:
                    break
        return found

    # ---- retention -----------------------------------------------------------------
    def delete_expired(self, now_ms: int | None = None) -> int:
        """Delete CommitLog segments past retention, or the oldest ones while the disk is
        above its high-water mark, with the queue and index files that point only into
        them. Returns how many segments went. The active segment always stays."""
        now = self._clock_ms() if now_ms is None else now_ms
        config = self.config
        total, used, _ = self.disk_usage(config.data_dir)
        over_high_water = total > 0 and used / total > config.disk_high_water_ratio
        files = self.commitlog.segments.files

        def expired(index: int) -> bool:
            if over_high_water:
                return True
            # A segment's newest record is older than the next segment's first one.
            following = files[index + 1]
            stored = self.commitlog.store_timestamp_at(following.base_offset)
            return stored is not None and stored > 0 and now - stored > config.retention_ms

        with self._put_lock:
            deleted = self.commitlog.delete_segments_before(
                expired, config.max_segments_deleted_per_run
            )
            if deleted:
                floor = self.commitlog.min_offset
                for queue in list(self.consume_queues.queues.values()):
                    queue.delete_expired_files(floor)
                self.index.delete_expired_files(floor)
        return deleted

    # ---- the read cap under sync replication ------------------------------------------
    def read_cap(self) -> int | None:
        """Consumers read only records that end at or below this (None: no cap): the
        replication cap (``confirmed_offset``) and, under SYNC_FLUSH, what is on disk.
        Why the second: a message read before its fsync, then lost with every node's
        power, was delivered and is gone (the chaos suite found one); a SYNC_FLUSH slave
        fsyncs before it acknowledges, so its cap is its confirmed offset."""
        confirmed = self._confirmed_offset
        if confirmed is not None:
            return self.read_cap_at(confirmed)
        return self.commitlog.flushed_offset if self._group_commit is not None else None

    def read_cap_at(self, confirmed: int) -> int:
        """``read_cap`` once the replication cap is ``confirmed``: at most what is on disk
        under SYNC_FLUSH."""
        if self._group_commit is not None:
            return min(confirmed, self.commitlog.flushed_offset)
        return confirmed

    def add_flush_listener(self, listener: Callable[[], None]) -> None:
        """``listener()`` runs on the event loop after a SYNC_FLUSH fsync covered asyncio
        puts: the read cap moved (readers waiting for new records may read now)."""
        self._flush_listeners.append(listener)

    @property
    def confirmed_offset(self) -> int | None:
        """Consumers read only records that end at or below this offset (None: no cap)."""
        return self._confirmed_offset

    def set_confirmed_offset(self, offset: int | None, *, new_epoch: bool = False) -> None:
        """The one writer of the read cap. Invariants of our own code, asserted: the cap
        never passes the write offset, and within one epoch both only grow. ``new_epoch``
        (a promotion, a demotion, a cut tail) is the one place either may fall, or the cap
        be lifted."""
        written = self.commitlog.write_offset
        if offset is not None:
            assert offset <= written, (offset, written)
            current = self._confirmed_offset
            assert new_epoch or current is None or offset >= current, (offset, current)
        assert new_epoch or written >= self._written_when_confirmed, (
            written,
            self._written_when_confirmed,
        )
        self._confirmed_offset = offset
        self._written_when_confirmed = written

    # ---- accessors for replication (``ha/``) and the node ------------------------------
    @property
    def write_offset(self) -> int:
        """Where the CommitLog's next byte goes (its end)."""
        return self.commitlog.write_offset

    @property
    def min_offset(self) -> int:
        """The CommitLog's first byte still on disk (retention moves it)."""
        return self.commitlog.min_offset

    @property
    def flushed_offset(self) -> int:
        """How far the CommitLog is on disk: what a power loss would keep."""
        return self.commitlog.flushed_offset

    @property
    def segment_count(self) -> int:
        """How many CommitLog segment files there are (retention removes the oldest)."""
        return len(self.commitlog.segments.files)

    @property
    def dispatched_offset(self) -> int:
        """How far consume queues and index follow the CommitLog."""
        return self.dispatcher.dispatched_offset

    def log_figures(self) -> LogFigures:
        """The log's offsets, its first record's store time and the disk's room."""
        low, high = self.min_offset, self.write_offset
        earliest = self.commitlog.store_timestamp_at(low) if high > low else None
        try:
            total, _, free = self.disk_usage(self.config.data_dir)
        except OSError:
            total = free = 0
        return LogFigures(
            low, high, self.flushed_offset, self.dispatched_offset, earliest or 0, total, free
        )

    def read_records(self, physical_offset: int, max_length: int) -> bytes:
        """Whole records from ``physical_offset``, at most ``max_length`` bytes of them and
        none past a segment's end (what a replication DATA frame carries)."""
        return self.commitlog.read_records(physical_offset, max_length)

    def read_message(self, physical_offset: int) -> StoredMessage | None:
        """The record at ``physical_offset`` decoded, or None (removed by retention)."""
        return self.commitlog.read(physical_offset)

    def flush_log(self) -> int:
        """Force the CommitLog to disk (a SYNC_FLUSH slave before it acknowledges); the
        offset below which it is on disk."""
        return self.commitlog.flush()

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """One queue's entries (``entries``, ``entry_at``, its offsets), None if it has
        never had one. For replaying a system topic by its entries' tag slots."""
        return self.consume_queues.get(topic, queue_id)

    def active_segment_base(self) -> int | None:
        """The base offset of the segment appends go to, None before the first one."""
        last = self.commitlog.segments.last
        return None if last is None else last.base_offset

    def set_log_writer(self, writer: LogWriter | None) -> None:
        """What writes an append that fits the active segment in place of the log's own
        encode and write (``CommitLog.log_writer``): a replication master's, which sends
        the records to its slaves in the same native call (``ReplicationMaster.write_log``);
        None: the log's own. Set and cleared on the event loop, never inside an append."""
        self.commitlog.log_writer = writer

    @property
    def log_writer(self) -> LogWriter | None:
        return self.commitlog.log_writer

    def add_append_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every append of new records to the CommitLog, before
        they are dispatched, on the appending thread under the put lock (it must not
        block): what copies the log elsewhere (a master's replication links) starts
        while the consume-queue and index work is still to be done, as RocketMQ's HA
        transfer reads the CommitLog independently of its reput."""
        self._append_listeners.append(listener)

    def add_cut_listener(self, listener: Callable[[int], None]) -> None:
        """Call ``listener(end)`` when a cut discards the log from ``end`` on (``truncate_to``),
        on the cutting thread under the put lock (it must not block): what is derived from
        the log outside the store (an index by CommitLog offset) drops the same tail before
        any record is appended there again."""
        self._cut_listeners.append(listener)

    def add_dispatch_listener(
        self,
        listener: DispatchListener,
        topics: tuple[str, ...] = (),
        properties: tuple[str, ...] = (),
    ) -> None:
        """Call ``listener`` with every dispatched batch, in log order, on the thread that
        dispatched it (under the put lock: it must not block); its records are those of
        ``topics`` and those with a property named in ``properties``."""
        with self._put_lock:
            self.dispatcher.add_listener(listener, topics, properties)

    # ---- introspection -------------------------------------------------------------
    @property
    def is_open(self) -> bool:
        return not self._closed
