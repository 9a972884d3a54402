"""Delayed messages: parked in ``%SYS%TIMER`` at once, copied to their topic when due.

A delayed send is stored immediately (durable and replicated like any record) in the timer
topic, with its real topic and queue in properties; the timer topic's consume-queue tag
slot holds the delivery time (``store.commitlog.queue_tag_code``). When a message is due,
its copy for the real topic and a ``%SYS%TIMER_DONE`` record naming the timer entry are
appended in one atomic batch, so after any crash a due message is in its topic exactly once
or still pending, never both and never neither.

State (derived from the log, ``node.system_state``): pending = timer entries minus those
named by done records, rebuilt at start from 20-byte queue entries and the done records. In
memory, pending entries sit in buckets per due millisecond (an ``array`` of timer queue
offsets each, in arrival order, with a cursor past the delivered ones) ordered by a heap of
due times: a million messages due in the same second are one bucket of 8 MB.

Delivery never holds the event loop for long: each batch is bounded (``DELIVERY_CHUNK``
messages, ``DELIVERY_CHUNK_BYTES``), always taken from the earliest due bucket, and
after every few ms of batches the loop really sleeps (``RELEASE_PAUSE_S``). Yielding
alone (``sleep(0)``) is not enough: the loop would never block, so gRPC's own threads
would get the GIL only when the interpreter forces a switch (every 5 ms), several times per
RPC. When nothing is due, the service sleeps until the earliest due time, or until an
earlier one arrives.

Retention deletes old segments while a message may wait up to the maximum delay (40 days
by default), so entries older than half the retention are rolled forward: re-appended as a
new timer record together with the done record of the old one, again one atomic batch.

Recall (RocketMQ 5.3.2's cancel of a scheduled message, ``recall``): a marker record in
``%SYS%TIMER_RECALL`` names the delivery time and the message id; delivery skips a timer
entry a marker names (its offset still goes in the done record, so it is never pending
again). The marker is durable and replicated before the recall is answered, and while it
is being appended the bucket of its delivery time is not delivered: a recall answered OK
is never delivered, one refused leaves the message as it was. Markers are rebuilt with the
pending set (those of a delivery time still pending), dropped with their bucket, and rolled
forward with the entries they name.

Thread-safety: owned by the node's event loop; the dispatch listener hands entries over
with ``call_soon_threadsafe`` when it runs on another thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import threading
import time
from array import array
from collections.abc import Callable, Sequence

from ferrymq.codec.commitlog_record import StoredMessage
from ferrymq.codec.properties import PROPERTY_DELIVERY_TIME_MS, PROPERTY_UNIQ_KEY
from ha.replicated_store import ReplicatedStore
from node.parked import park, real_topic_of, release
from store.consume_queue import Entry
from store.dispatch_request import DispatchBatch
from store.message import TIMER_TOPIC, Message

log = logging.getLogger(__name__)

TIMER_DONE_TOPIC = "%SYS%TIMER_DONE"
TIMER_RECALL_TOPIC = "%SYS%TIMER_RECALL"  # body: "<delivery ms> <message id>"


class NotRecallable(Exception):
    """The delayed message cannot be recalled: its delivery time has come (it is being
    delivered, or was), or nothing is pending at that time."""


# One batch: ~20 µs of CPU per message to read, copy and append it, so ~1.3 ms of loop
# time for the copies and as much for their append; its done record is ~500 bytes.
DELIVERY_CHUNK = 64
DELIVERY_CHUNK_BYTES = 1 << 20  # stored bytes per batch (one message always goes)
COPY_GROWTH_BYTES = 256  # a copy may name a longer topic than %SYS%TIMER
# A backlog is released in slices of batches, each slice followed by a real sleep of the
# loop: gRPC's threads get the GIL during it, other requests run. Measured on two cores
# (bench/timer.py): sends on another topic during a release went from p50 12 ms / p99
# 490 ms (batches of 256 with only sleep(0) between them) to 3.4 ms / 17 ms; the release
# rate from 47k to 39k messages/s.
RELEASE_SLICE_S = 0.004
RELEASE_PAUSE_S = 0.001
IDLE_CHECK_S = 1.0
RETRY_AFTER_FAILURE_S = 1.0
REPLAY_PAGE = 256
REPLAY_ENTRIES = 4096
ROLL_CHECK_INTERVAL_MS = 60_000  # a check may walk every pending entry: not every second


class _Bucket:
    """Timer queue offsets due at one millisecond, in arrival order; ``start`` is the first
    not yet delivered (delivering moves a cursor: no copying of a million-entry array)."""

    __slots__ = ("offsets", "start")

    def __init__(self) -> None:
        self.offsets = array("q")
        self.start = 0

    def __len__(self) -> int:
        return len(self.offsets) - self.start


class TimerService:
    def __init__(
        self,
        store: ReplicatedStore,
        topic_exists: Callable[[str], bool],
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.store = store
        self.topic_exists = topic_exists
        self.clock_ms = clock_ms
        self._buckets: dict[int, _Bucket] = {}
        self._due_heap: list[int] = []
        self._pending = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._wakeup: asyncio.Event | None = None
        self.delivered = 0
        self._next_roll_check_ms = 0
        self._chunk_bytes = min(DELIVERY_CHUNK_BYTES, store.config.max_batch_bytes // 2)
        # delivery ms -> {recalled message id: its marker's offset in the recall topic}
        self._recalled: dict[int, dict[str, int]] = {}
        self._recalling: dict[int, int] = {}  # delivery ms -> markers being appended

    # ---- state ---------------------------------------------------------------------
    @property
    def pending(self) -> int:
        return self._pending

    def load(self, loop: asyncio.AbstractEventLoop) -> None:
        """Rebuild the pending set, then follow new timer records as they are dispatched."""
        self._rebuild()
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._wakeup = asyncio.Event()
        self.store.add_dispatch_listener(self._on_dispatch, topics=(TIMER_TOPIC,))

    def reload(self) -> None:
        """Forget and rebuild the pending set from the log (a promoted slave)."""
        self._buckets.clear()
        self._due_heap.clear()
        self._recalled.clear()
        self._pending = 0
        self._rebuild()
        if self._wakeup is not None:
            self._wakeup.set()

    def _rebuild(self) -> None:
        done = self._done_offsets()
        queue = self.store.consume_queue(TIMER_TOPIC, 0)
        if queue is not None:
            offset, end = queue.min_offset, queue.max_offset
            while offset < end:
                for queue_offset, (_, _, due_ms) in queue.entries(offset, REPLAY_ENTRIES):
                    if queue_offset not in done:
                        self._add(due_ms, queue_offset)
                offset += REPLAY_ENTRIES  # also past blank entries or a missing file
        for queue_offset, body in self._records(TIMER_RECALL_TOPIC):
            due_ms, message_id = _marker_fields(body)
            if due_ms in self._buckets:  # else nothing is pending that it could name
                self._recalled.setdefault(due_ms, {})[message_id] = queue_offset

    def _records(self, topic: str):
        """(queue offset, body) of every record of ``topic``'s queue 0 the log holds."""
        for stored in self.store.walk_queue(topic, 0, page=REPLAY_PAGE):
            yield stored.queue_offset, stored.body

    def _done_offsets(self) -> set[int]:
        done: set[int] = set()
        for _, body in self._records(TIMER_DONE_TOPIC):
            done.update(int(o) for o in body.split(b",") if o)
        return done

    def _add(self, due_ms: int, queue_offset: int) -> None:
        bucket = self._buckets.get(due_ms)
        if bucket is None:
            bucket = self._buckets[due_ms] = _Bucket()
            heapq.heappush(self._due_heap, due_ms)
        bucket.offsets.append(queue_offset)
        self._pending += 1

    def _on_dispatch(self, batch: DispatchBatch) -> None:
        on_loop = threading.get_ident() == self._loop_thread
        for request in batch.records:
            if request.topic != TIMER_TOPIC:
                continue
            if on_loop:
                self._arrived(request.tag_code, request.queue_offset)
            else:
                self._loop.call_soon_threadsafe(
                    self._arrived, request.tag_code, request.queue_offset
                )

    def _arrived(self, due_ms: int, queue_offset: int) -> None:
        earliest = self._due_heap[0] if self._due_heap else None
        self._add(due_ms, queue_offset)
        if earliest is None or due_ms < earliest:
            self._wakeup.set()

    # ---- parking -------------------------------------------------------------------
    @staticmethod
    def park(message: Message, due_ms: int) -> Message:
        """The timer record for ``message``, due at ``due_ms``."""
        return park(message, TIMER_TOPIC, {PROPERTY_DELIVERY_TIME_MS: str(due_ms)})

    # ---- delivery ------------------------------------------------------------------
    async def run(self) -> None:
        """Deliver due messages until cancelled."""
        assert self._wakeup is not None, "load() first"
        while True:
            try:
                delivered_all = await self.deliver_due()
            except Exception:  # a bug or a bad record must not end delivery for good
                log.exception("timer delivery failed; retrying")
                delivered_all = False
            if not delivered_all:
                await asyncio.sleep(RETRY_AFTER_FAILURE_S)
                continue
            wait_s = IDLE_CHECK_S
            if self._due_heap:
                wait_s = min(wait_s, (self._due_heap[0] - self.clock_ms()) / 1000)
            self._wakeup.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), max(wait_s, 0))

    async def deliver_due(self) -> bool:
        """Deliver every message due by now, earliest due first, one bounded batch at a
        time; False if an append failed (what it did not deliver stays pending)."""
        slice_started = time.perf_counter()
        while self._due_heap and self._due_heap[0] <= self.clock_ms():
            if self._due_heap[0] in self._recalling:  # a recall of it is being stored
                await asyncio.sleep(RELEASE_PAUSE_S)
                continue
            if not await self._deliver_chunk(self._due_heap[0]):
                return False
            if time.perf_counter() - slice_started >= RELEASE_SLICE_S:
                # More may be due: let the loop sleep once so other work runs promptly.
                await asyncio.sleep(RELEASE_PAUSE_S)
                slice_started = time.perf_counter()
        return True

    async def _deliver_chunk(self, due_ms: int) -> bool:
        """Deliver the next batch of the bucket due at ``due_ms``; False if the append
        failed (the batch stays pending, in its place)."""
        bucket = self._buckets[due_ms]
        if not bucket:  # its last batch is still being appended
            return True
        chunk, entries = self._next_chunk(bucket)
        bucket.start += len(chunk)
        self._pending -= len(chunk)
        try:
            appended = await self._append_copies(chunk, entries, self._copy_for_topic)
        except Exception:  # e.g. a record that does not convert: keep the batch pending
            log.exception("timer batch due at %d failed; retrying", due_ms)
            appended = False
        if not appended:
            # Not delivered: back in front of its bucket, since order per queue is the
            # order of arrival (the bucket may have grown meanwhile).
            if self._buckets.get(due_ms) is bucket:
                bucket.start -= len(chunk)
                self._pending += len(chunk)
            else:  # emptied and dropped meanwhile (roll-forward): pending again anyway
                for queue_offset in chunk:
                    self._add(due_ms, queue_offset)
            return False
        self.delivered += len(chunk)
        if not bucket and self._buckets.get(due_ms) is bucket:
            self._drop_bucket(due_ms)
        return True

    def _next_chunk(self, bucket: _Bucket) -> tuple[array, list[Entry | None]]:
        """The next batch of ``bucket``: at most ``DELIVERY_CHUNK`` entries and
        ``_chunk_bytes`` of stored records, at least one entry."""
        queue = self.store.consume_queue(TIMER_TOPIC, 0)
        offsets = bucket.offsets[bucket.start : bucket.start + DELIVERY_CHUNK]
        entries: list[Entry | None] = []
        size = 0
        for queue_offset in offsets:
            entry = queue.entry_at(queue_offset) if queue is not None else None
            if entry is not None:
                size += entry[1] + COPY_GROWTH_BYTES
                if size > self._chunk_bytes and entries:
                    break
            entries.append(entry)
        return offsets[: len(entries)], entries

    def _drop_bucket(self, due_ms: int) -> None:
        del self._buckets[due_ms]
        self._recalled.pop(due_ms, None)
        if self._due_heap[0] == due_ms:
            heapq.heappop(self._due_heap)
        else:  # an earlier time arrived while this bucket was being delivered
            self._due_heap.remove(due_ms)
            heapq.heapify(self._due_heap)

    def _copy_for_topic(self, stored: StoredMessage) -> Message | None:
        # The copy keeps the delivery time: consumers get it back.
        if self._recalled and self._is_recalled(stored):
            return None
        if not self.topic_exists(real_topic_of(stored)):
            log.warning("delayed message for deleted topic %r dropped", real_topic_of(stored))
            return None
        return release(stored)

    async def _append_copies(
        self,
        queue_offsets: Sequence[int],
        entries: Sequence[Entry | None],
        make: Callable[[StoredMessage], Message | None],
    ) -> bool:
        """Append ``make(record)`` for each timer entry plus one done record naming them
        all, as one atomic batch."""
        assert len(queue_offsets) == len(entries)
        read = self.store.read_message
        batch: list[Message] = []
        for entry in entries:
            stored = read(entry[0]) if entry is not None else None
            if stored is None:
                continue  # removed by retention before it was rolled: nothing to deliver
            copy = make(stored)
            if copy is not None:
                batch.append(copy)
        batch.append(Message(TIMER_DONE_TOPIC, ",".join(map(str, queue_offsets)).encode()))
        result = await self.store.put_messages_async(batch)
        if not result.ok:
            log.error("timer append failed (%s); retrying", result.error or result.status)
        return result.ok

    # ---- recall --------------------------------------------------------------------
    async def recall(self, due_ms: int, message_id: str) -> None:
        """Cancel the delayed message ``message_id`` due at ``due_ms``: answered only once
        its marker is stored (and replicated as the store's writes are); ``NotRecallable``
        when its time has come or nothing is pending then; the store's refusal as
        ``RecallNotStored``. Recalling it again is answered the same."""
        if due_ms <= self.clock_ms():
            raise NotRecallable(f"its delivery time ({due_ms} ms) has come")
        if due_ms not in self._buckets:
            raise NotRecallable(f"no delayed message is pending for {due_ms} ms")
        if message_id in self._recalled.get(due_ms, ()):
            return
        # Nothing due at ``due_ms`` is delivered before the marker is stored or refused.
        self._recalling[due_ms] = self._recalling.get(due_ms, 0) + 1
        try:
            result = await self.store.put_messages_async([_marker(due_ms, message_id)])
            if not result.ok:
                raise RecallNotStored(result)
            if due_ms in self._buckets:  # else delivered meanwhile: it cannot be
                self._recalled.setdefault(due_ms, {})[message_id] = result.appended[0].queue_offset
        finally:
            left = self._recalling[due_ms] - 1
            if left:
                self._recalling[due_ms] = left
            else:
                del self._recalling[due_ms]

    def _is_recalled(self, stored: StoredMessage) -> bool:
        properties = stored.properties
        try:
            due_ms = int(properties.get(PROPERTY_DELIVERY_TIME_MS, ""))
        except ValueError:
            return False
        return properties.get(PROPERTY_UNIQ_KEY, "") in self._recalled.get(due_ms, ())

    async def _roll_markers(self, older_than_ms: int) -> None:
        """Re-append the recall markers stored before ``older_than_ms`` whose messages are
        still pending (retention would delete a marker before its message is due)."""
        cutoff = self.store.offset_by_time(TIMER_RECALL_TOPIC, 0, older_than_ms)
        for due_ms, markers in list(self._recalled.items()):
            for message_id, queue_offset in list(markers.items()):
                if queue_offset >= cutoff:
                    continue
                result = await self.store.put_messages_async([_marker(due_ms, message_id)])
                if not result.ok:
                    return  # tried again at the next check
                if due_ms in self._recalled:
                    self._recalled[due_ms][message_id] = result.appended[0].queue_offset

    # ---- retention -----------------------------------------------------------------
    async def roll_forward(self, older_than_ms: int) -> int:
        """Re-append pending entries stored before ``older_than_ms`` (retention would
        delete them before they are due). Returns how many were rolled. Checks at most
        once a minute; retention is hours or days."""
        now = self.clock_ms()
        if now < self._next_roll_check_ms:
            return 0
        self._next_roll_check_ms = now + ROLL_CHECK_INTERVAL_MS
        if self._recalled:
            await self._roll_markers(older_than_ms)
        cutoff = self.store.offset_by_time(TIMER_TOPIC, 0, older_than_ms)
        if cutoff <= self.store.min_offset_in_queue(TIMER_TOPIC, 0) or not self._pending:
            return 0  # nothing stored that long ago: the common case, checked in O(log n)
        old = [
            (due_ms, queue_offset)
            for due_ms, bucket in self._buckets.items()
            for queue_offset in bucket.offsets[bucket.start :]
            if queue_offset < cutoff
        ]
        queue = self.store.consume_queue(TIMER_TOPIC, 0)
        rolled = 0
        for start in range(0, len(old), DELIVERY_CHUNK):
            chunk = old[start : start + DELIVERY_CHUNK]
            for due_ms, queue_offset in chunk:
                self._remove(due_ms, queue_offset)
            # The new records arrive through dispatch like any timer record.
            offsets = [o for _, o in chunk]
            entries = [queue.entry_at(o) if queue is not None else None for o in offsets]
            if not await self._append_copies(offsets, entries, self._same_record):
                for due_ms, queue_offset in chunk:
                    self._add(due_ms, queue_offset)
                break
            rolled += len(chunk)
            await asyncio.sleep(RELEASE_PAUSE_S)
        return rolled

    @staticmethod
    def _same_record(stored: StoredMessage) -> Message:
        return Message(
            TIMER_TOPIC,
            stored.body,
            properties=dict(stored.properties),
            flag=stored.flag,
            sys_flag=stored.sys_flag,
            born_timestamp_ms=stored.born_timestamp_ms,
            born_host=stored.born_host,
            reconsume_times=stored.reconsume_times,
        )

    def _remove(self, due_ms: int, queue_offset: int) -> None:
        bucket = self._buckets[due_ms]
        offsets = bucket.offsets
        del offsets[offsets.index(queue_offset, bucket.start)]
        self._pending -= 1
        if not bucket:
            self._drop_bucket(due_ms)


class RecallNotStored(Exception):
    """The store refused the recall's marker (not the master, a full disk...): nothing
    changed, the message is delivered at its time unless recalled again."""

    def __init__(self, result) -> None:
        super().__init__(result.error or str(result.status))
        self.result = result


def _marker(due_ms: int, message_id: str) -> Message:
    """The recall marker of ``message_id`` due at ``due_ms`` (read by ``_marker_fields``)."""
    return Message(TIMER_RECALL_TOPIC, f"{due_ms} {message_id}".encode())


def _marker_fields(body: bytes) -> tuple[int, str]:
    due, _, message_id = body.decode().partition(" ")
    return int(due), message_id
