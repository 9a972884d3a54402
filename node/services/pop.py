"""POP consumption through every door: RocketMQ 5 ReceiveMessage, AckMessage,
ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue, and RocketMQ 5's remoting
POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME and BATCH_ACK_MESSAGE: the model of
the official RocketMQ 5 clients.

Every call first asks SUBSCRIBE on the topic and on the group (``%RETRY%<group>``: the
group's own), then finds the topic (a receive: one that takes reads) and the group,
created on first use only after that decision.

A receive pops the whole topic on this node (as the Java proxy does; the request's queue id
is ignored), queue after queue from a rotating start: first the group's deliveries whose
invisibility expired (redelivered with ``delivery_attempt`` + 1, or moved to
``%DLQ%<group>`` once the group's max attempts are used up), then new messages from the
cursor, filtered by the group's tag expression (what the filter skips is consumed for the
group). FIFO groups take nothing from a queue while any delivery of it is invisible, so a
message group is delivered in order with at most one batch in flight.

Every decision is applied to ``PopState`` synchronously and its record appended before the
client hears of it (see ``node.system_state``); a failed append is answered with the store's
status, and undone in memory only when nothing was written (a refusal): a record written
but not confirmed in time stays applied, as it is in the log that any replica replays.
A new group starts at its committed offset (set through UpdateOffset) or else at the
beginning of each queue.

A receive of a topic also serves the group's dead letters of that topic that were resent
(``node/services/dead_letter_resend.py``): they are in flight on the group's key
``(group, %DLQ%<group>, RESENT_QUEUE_ID)``, visible, with attempt 0, and go out before new
messages as the dead-lettered message (its topic, properties and message id; its queue id
``RESENT_QUEUE_ID`` and queue offset the dead-letter queue's, which is what its receipt
handle names), counting attempts afresh. Acks, changes and forwards of such a handle act on
that key.

A LITE topic's consumers receive by lite topic (``pop_lite``): the lite topics their client
subscribed to (``node/lite_subscriptions.py``), each one a queue of its own named
``%LMQ%$<topic>$<lite topic>`` whose offsets are CommitLog offsets (``node/lite_index.py``),
with the same cursors, deliveries, handles and records as any queue (queue id 0). A lite
topic is delivered in order: nothing more of it while a delivery of it is invisible.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ferrymq.codec.commitlog_record import StoredMessage
from ferrymq.codec.properties import PROPERTY_LITE_TOPIC
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ha.replicated_store import ReplicatedStore
from node.admission import store_refusal
from node.consumer_offsets import ConsumerOffsets
from node.dead_letters import (
    PROPERTY_DLQ_ORIGIN_OFFSET,
    PROPERTY_DLQ_ORIGIN_QUEUE,
    PROPERTY_DLQ_ORIGIN_TOPIC,
    dead_letter_copy,
)
from node.filter_expression import selection
from node.group_creation import GroupsOnFirstUse
from node.lite_index import LiteIndex
from node.lite_names import is_lmq, lmq_name
from node.lite_subscriptions import LiteClient
from node.long_polling import QueueWaiters, long_poll
from node.metrics_rpc import NoTrafficMetrics, TrafficMetrics
from node.pop_state import (
    KIND_DLQ,
    KIND_POP,
    RESENT_QUEUE_ID,
    CursorKey,
    InFlight,
    PopCursor,
    PopState,
)
from node.receipt_handle import (
    MalformedReceiptHandle,
    ReceiptHandle,
    ReceiptHandles,
    new_delivery_id,
)
from node.rpc_status import OK, InvalidRequest, status
from node.services.caller import Caller
from node.services.permissions import Permissions, consume
from node.sql_filter import Filter
from node.topics import GroupConfig, MessageType, Permission, TopicConfig, TopicTable
from routing.metadata import dead_letter_topic_of
from store.message import Message
from store.results import GetStatus

RECEIVE_BATCH_MAX = 32
# One ack decodes and checks every entry in one turn of the event loop: a bound keeps that
# turn short. A client acks what it received, at most RECEIVE_BATCH_MAX per receive.
ACK_ENTRIES_MAX = 1024
# An SQL filter reads at most this many messages per receive, over all queues (in chunks):
# a long run of messages it refuses is passed over a receive at a time, each one's
# event-loop turn bounded; the receive's long poll then reads on at once.
SQL_SCAN_MAX = 1024
SQL_SCAN_CHUNK = 128
RESENT_ORIGINS_MAX = 100_000  # the resent dead letters whose topic is kept (_resent_picks)
DEFAULT_INVISIBLE_MS = 60_000  # clients that ask the node to choose (auto_renew)
INVISIBLE_MIN_MS = 1_000
INVISIBLE_MAX_MS = 12 * 3600 * 1000
log = logging.getLogger("ferrymq.pop")
STALE = "the receipt handle is stale: the message was acked, dead-lettered or redelivered since"


@dataclass
class ScanProgress:
    """Set by a receive whose filter stopped reading a queue at ``SQL_SCAN_MAX`` with
    messages left, so its long poll reads on at once instead of waiting."""

    cut: bool = False


@dataclass
class PopDecision:
    """What one pop of one queue decided, enough to give it back if no consumer gets
    it: its offsets, its delivery id, and the earlier in-flight entries of the
    redelivered ones."""

    key: CursorKey
    offsets: list[int]
    delivery: str
    redelivered: dict[int, InFlight]


@dataclass
class Delivery:
    stored: StoredMessage
    handle: str
    attempt: int
    decision: PopDecision


class PopFailed(Exception):
    """The records of a POP decision could not be appended; ``status`` says why."""

    def __init__(self, answer: pb.Status) -> None:
        super().__init__(answer.message)
        self.status = answer


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class PopService:
    def __init__(
        self,
        store: ReplicatedStore,
        topics: TopicTable,
        offsets: ConsumerOffsets,
        state: PopState,
        waiters: QueueWaiters,
        handles: ReceiptHandles,
        permissions: Permissions,
        clock_ms: Callable[[], int] = now_ms,
        groups: GroupsOnFirstUse | None = None,
        metrics: TrafficMetrics | None = None,
        lite_index: LiteIndex | None = None,
    ) -> None:
        self.permissions = permissions
        self.metrics = metrics or NoTrafficMetrics()
        self.groups = groups or GroupsOnFirstUse(topics, None, enabled=False)
        self.store = store
        self.handles = handles
        self.topics = topics
        self.offsets = offsets
        self.state = state
        self.waiters = waiters
        self.clock_ms = clock_ms
        self._rotation: dict[tuple[str, str], int] = {}
        # (group, DLQ offset) -> the topic of that resent dead letter: a receive of one
        # topic passes over the group's others without reading them again (a DLQ offset
        # names one message for good, so an entry never goes stale; cleared when full).
        self._resent_origins: dict[tuple[str, int], str] = {}
        self._background: set[asyncio.Task] = set()
        self.lite_index = lite_index or LiteIndex(store)
        # A lite topic's delivery ended or shortened (it may be free again): wake its
        # consumers' long polls (the lite service's).
        self.on_lite_change: Callable[[str], None] = lambda lmq: None

    # ---- receive ------------------------------------------------------------------
    async def pop(
        self,
        caller: Caller,
        group_name: str,
        topic_name: str,
        filter_expression: pb.FilterExpression,
        batch_size: int,
        invisible_ms: int | None,
        wait_s: float,
    ) -> list[Delivery]:
        """One receive of any door: up to ``batch_size`` deliveries (0: the most), waiting
        up to ``wait_s`` for the first; [] when none came. Raises ``TopicError``,
        ``InvalidRequest`` (not allowed, a write-only topic, a bad filter or invisible
        duration) and ``PopFailed``. ``invisible_ms`` None: ``DEFAULT_INVISIBLE_MS``."""
        self.permissions.require(caller, consume(topic_name, group_name))
        topic = await self.topics.topic_caught_up(topic_name)
        selected = selection(filter_expression)
        group, invisible_ms, batch = await self._receive_terms(
            group_name, topic, invisible_ms, batch_size
        )
        progress = ScanProgress()

        async def pop() -> list[Delivery] | None:
            progress.cut = False
            return (
                await self.receive(
                    group,
                    topic,
                    selected.tags,
                    batch,
                    invisible_ms,
                    sql=selected.sql,
                    progress=progress,
                )
                or None
            )

        def wait(remaining_s: float) -> Awaitable[None]:
            if progress.cut:  # the filter stopped reading with messages left: read on now
                return asyncio.sleep(0)
            # Also until an invisible message comes back: nothing wakes the queue then.
            visible_in_s = self._next_visible_in_ms(group.name, topic) / 1000
            return self.waiters.wait_any(
                topic.name, range(topic.queue_count), min(remaining_s, visible_in_s)
            )

        return self._counted(topic, group, await long_poll(pop, wait, wait_s) or [])

    async def _receive_terms(
        self,
        group_name: str,
        topic: TopicConfig,
        invisible_ms: int | None,
        batch_size: int,
    ) -> tuple[GroupConfig, int, int]:
        """A receive's rules, whatever it reads, once the caller may consume the topic as
        the group (checked before the topic was looked up): the topic takes reads, the
        invisible duration is lawful; (the group, the invisible duration, the batch)."""
        if topic.permission is Permission.WRITE:
            raise InvalidRequest(pb.FORBIDDEN, f"topic {topic.name} is write-only")
        if invisible_ms is None:
            invisible_ms = DEFAULT_INVISIBLE_MS
        check_invisible_ms(invisible_ms)
        group = await self.groups.group(group_name)
        return group, invisible_ms, max(1, min(batch_size or RECEIVE_BATCH_MAX, RECEIVE_BATCH_MAX))

    def _counted(
        self, topic: TopicConfig, group: GroupConfig, deliveries: list[Delivery]
    ) -> list[Delivery]:
        if deliveries:
            size = sum(len(d.stored.body) for d in deliveries)
            self.metrics.delivered(topic.name, group.name, len(deliveries), size)
        return deliveries

    async def receive(
        self,
        group: GroupConfig,
        topic: TopicConfig,
        tags: list[str] | None,
        batch: int,
        invisible_ms: int,
        sql: Filter | None = None,
        progress: ScanProgress | None = None,
    ) -> list[Delivery]:
        """Pop up to ``batch`` messages of ``topic`` for ``group``; [] if none is ready.
        ``tags`` and ``sql`` select what is delivered; what they pass over is consumed."""
        now = self.clock_ms()
        records: list[Message] = []
        deliveries: list[Delivery] = []
        undo: list[Callable[[], None]] = []
        decisions: list[PopDecision] = []
        scan_budget = SQL_SCAN_MAX  # messages an SQL filter may read in this receive
        # One delivery id for every queue of this receive (each queue's entries are its
        # own): the remoting door names it once per answer (node/remoting/broker_pop.py).
        delivery = new_delivery_id()
        visible_at = now + invisible_ms
        key, picked, redelivered = self._resent_picks(group, topic, batch, now, records, undo)
        if picked:
            taken = self._taken(key, picked, self.state.cursor(key).next_offset, redelivered)
            deliveries.extend(taken(delivery, visible_at, records, undo, decisions))
        for queue_id in self._queue_order(group, topic):
            if len(deliveries) >= batch:
                break
            key = (group.name, topic.name, queue_id)
            cursor = self._cursor(key)
            if group.fifo and cursor.invisible_count(now):
                continue
            picked: list[tuple[StoredMessage, int]] = []
            redelivered: dict[int, InFlight] = {}
            for offset in sorted(o for o, f in cursor.in_flight.items() if f.visible_at_ms <= now):
                if len(deliveries) + len(picked) >= batch:
                    break
                stored = self._read(topic.name, key[2], offset)
                self._come_back(group, key, offset, stored, picked, redelivered, records, undo)
            next_offset = cursor.next_offset
            want = batch - len(deliveries) - len(picked)
            if want > 0 and sql is not None and scan_budget <= 0:
                want = 0  # this receive read all its filter may read: the next reads on
                if progress is not None:
                    progress.cut = True
            if want > 0:
                fresh, next_offset, scanned = self._new_messages(
                    topic.name, key[2], next_offset, want, tags, sql, scan_budget
                )
                scan_budget -= scanned
                if scan_budget <= 0 and progress is not None:
                    progress.cut = True  # maybe more to read: the long poll reads on now
                picked.extend((stored, 1) for stored in fresh)
            if not picked and next_offset == cursor.next_offset:
                continue
            taken = self._taken(key, picked, next_offset, redelivered)
            deliveries.extend(taken(delivery, visible_at, records, undo, decisions))
        if records:
            await self._append(records, undo, decisions)
        return deliveries

    def _taken(
        self,
        key: CursorKey,
        picked: list[tuple[StoredMessage, int]],
        next_offset: int,
        redelivered: dict[int, InFlight],
        handle_topic: Callable[[StoredMessage], str] = lambda stored: stored.topic,
    ) -> Callable[..., list[Delivery]]:
        """The step of a receive that takes ``picked`` of ``key`` under one delivery id:
        called with the delivery id, the visible time and the receive's lists, it adds the
        pop record, its undo and its decision, and answers the deliveries (each handle
        for ``handle_topic(message)``, what the client's calls on it will name)."""

        def take(
            delivery: str,
            visible_at_ms: int,
            records: list[Message],
            undo: list[Callable[[], None]],
            decisions: list[PopDecision],
        ) -> list[Delivery]:
            pairs = [(stored.queue_offset, attempt) for stored, attempt in picked]
            records.append(self.state.pop(key, pairs, next_offset, delivery, visible_at_ms))
            undo.append(lambda: self._unpop(key, pairs, delivery, redelivered))
            decision = PopDecision(key, [offset for offset, _ in pairs], delivery, redelivered)
            decisions.append(decision)
            return [
                Delivery(
                    stored,
                    self._handle(key, stored.queue_offset, delivery, handle_topic(stored)),
                    a,
                    decision,
                )
                for stored, a in picked
            ]

        return take

    def _resent_picks(
        self,
        group: GroupConfig,
        topic: TopicConfig,
        room: int,
        now: int,
        records: list[Message],
        undo: list[Callable[[], None]],
        wanted: Callable[[StoredMessage], bool] | None = None,
    ) -> tuple[CursorKey, list[tuple[StoredMessage, int]], dict[int, InFlight]]:
        """The group's resent dead letters of ``topic`` that are visible, up to ``room``
        (and, with ``wanted``, that it wants: a lite consumer's lite topics): picked with
        their next attempt; one out of attempts is dead-lettered again (a new dead letter,
        which may be resent again); one that retention removed ends."""
        key = resent_key(group.name)
        cursor = self.state.cursor(key)
        picked: list[tuple[StoredMessage, int]] = []
        redelivered: dict[int, InFlight] = {}
        if cursor is None:
            return key, picked, redelivered
        for offset in sorted(o for o, f in cursor.in_flight.items() if f.visible_at_ms <= now):
            if len(picked) >= room:
                break
            entry = cursor.in_flight[offset]
            known = self._resent_origins.get((group.name, offset))
            if known is not None and known != topic.name:
                continue  # another topic's: its receive serves it
            raw = self.store.message_at(key[1], 0, offset)
            if raw is None:
                if offset < self.store.min_offset_in_queue(key[1], 0):
                    records.append(self.state.ack(key, [(offset, entry.delivery)]))
                continue
            if len(self._resent_origins) >= RESENT_ORIGINS_MAX:
                self._resent_origins.clear()
            origin = raw.properties.get(PROPERTY_DLQ_ORIGIN_TOPIC, "")
            self._resent_origins[(group.name, offset)] = origin
            if origin != topic.name or (wanted is not None and not wanted(raw)):
                continue
            if entry.attempt >= group.max_delivery_attempts:
                records.extend(self._dead_letter(key, offset, entry, resent_view(raw)))
                undo.append(lambda o=offset, e=entry: self._restore(key, {o: e}))
                continue
            picked.append((resent_view(raw), entry.attempt + 1))
            redelivered[offset] = entry
        return key, picked, redelivered

    # ---- lite topics -----------------------------------------------------------------
    async def pop_lite(
        self,
        group_name: str,
        topic: TopicConfig,
        client: Callable[[str], LiteClient | None],
        batch_size: int,
        invisible_ms: int | None,
        wait_s: float,
        wait: Callable[[LiteClient | None, float], Awaitable[None]],
    ) -> list[Delivery]:
        """``pop`` for a lite consumer of the LITE ``topic``, once its caller may consume it
        as the group (``LiteService`` checks): from the lite topics its client subscribed
        to (``client(group)`` reads them at every try: a subscription may arrive while it
        waits); ``wait(client, seconds)`` until one may have more."""
        group, invisible_ms, batch = await self._receive_terms(
            group_name, topic, invisible_ms, batch_size
        )

        async def pop() -> list[Delivery] | None:
            subscribed = client(group.name)
            if subscribed is None or subscribed.topic != topic.name:
                return None
            return await self.receive_lite(group, subscribed, batch, invisible_ms) or None

        def waiting(remaining_s: float) -> Awaitable[None]:
            subscribed = client(group.name)
            visible_in_s = self._next_lite_visible_in_ms(group.name, subscribed) / 1000
            return wait(subscribed, min(remaining_s, visible_in_s))

        return self._counted(topic, group, await long_poll(pop, waiting, wait_s) or [])

    async def receive_lite(
        self, group: GroupConfig, client: LiteClient, batch: int, invisible_ms: int
    ) -> list[Delivery]:
        """Pop up to ``batch`` messages of ``client``'s lite topics for ``group``; [] if
        none is ready. Each lite topic in order: one whose delivery is invisible gives
        nothing, one whose delivery came back is given that again first (and whatever
        follows it), from a rotating start so that no lite topic waits behind others."""
        now = self.clock_ms()
        records: list[Message] = []
        deliveries: list[Delivery] = []
        undo: list[Callable[[], None]] = []
        decisions: list[PopDecision] = []
        delivery = new_delivery_id()
        topic = self.topics.topics.get(client.topic)
        if topic is not None:  # first its resent dead letters of the lite topics it wants

            def lite_queue(stored: StoredMessage) -> str:  # what its acks name
                return lmq_name(topic.name, stored.properties.get(PROPERTY_LITE_TOPIC, ""))

            key, picked, redelivered = self._resent_picks(
                group, topic, batch, now, records, undo, lambda raw: lite_queue(raw) in client.lmqs
            )
            if picked:
                cursor_end = self.state.cursor(key).next_offset
                taken = self._taken(key, picked, cursor_end, redelivered, lite_queue)
                deliveries.extend(taken(delivery, now + invisible_ms, records, undo, decisions))
        for lmq in self._lite_order(group.name, client):
            if len(deliveries) >= batch:
                break
            key = (group.name, lmq, 0)
            if self._lite_idle(key):
                client.ready.discard(lmq)  # until a message arrives or it is synced
                continue
            found = self._lite_picks(group, key, batch - len(deliveries), now, records, undo)
            if found is None:
                continue
            picked, redelivered, next_offset = found
            pairs = [(stored.physical_offset, attempt) for stored, attempt in picked]
            records.append(self.state.pop(key, pairs, next_offset, delivery, now + invisible_ms))
            undo.append(lambda k=key, p=pairs, d=delivery, r=redelivered: self._unpop(k, p, d, r))
            decision = PopDecision(key, [offset for offset, _ in pairs], delivery, redelivered)
            decisions.append(decision)
            deliveries.extend(
                Delivery(_as_lite(stored), self._handle(key, offset, delivery), attempt, decision)
                for (stored, attempt), (offset, _) in zip(picked, pairs, strict=True)
            )
        if records:
            await self._append(records, undo, decisions)
        return deliveries

    def _lite_picks(
        self,
        group: GroupConfig,
        key: CursorKey,
        want: int,
        now: int,
        records: list[Message],
        undo: list[Callable[[], None]],
    ) -> tuple[list[tuple[StoredMessage, int]], dict[int, InFlight], int] | None:
        """What one lite topic that is not idle gives a receive of up to ``want``: (messages
        and their attempts, the in-flight entries they redeliver, the cursor after them), or
        None. Deliveries out of attempts (or of messages retention removed) end here, their
        records added to ``records``."""
        lmq = key[1]
        cursor = self.state.cursor(key)
        if cursor is not None and cursor.invisible_count(now):
            return None
        cursor = self._cursor(key)
        picked: list[tuple[StoredMessage, int]] = []
        redelivered: dict[int, InFlight] = {}
        for offset in sorted(cursor.in_flight)[:want]:  # all visible: none is invisible
            stored = self.lite_index.message_at(lmq, offset)
            self._come_back(group, key, offset, stored, picked, redelivered, records, undo)
        next_offset = cursor.next_offset
        if len(redelivered) == len(cursor.in_flight):  # in order: new ones after them only
            cap = self.store.read_cap()
            for offset in self.lite_index.offsets_from(lmq, next_offset, want - len(picked)):
                stored = self.lite_index.message_at(lmq, offset)
                if stored is not None and cap is not None and offset + stored.size > cap:
                    break  # not confirmed (or not on disk) yet
                if stored is not None:  # else removed by retention (or a cut): passed over
                    picked.append((stored, 1))
                next_offset = offset + 1
        if not picked and next_offset == cursor.next_offset:
            return None
        return picked, redelivered, next_offset

    def _come_back(
        self,
        group: GroupConfig,
        key: CursorKey,
        offset: int,
        stored: StoredMessage | None,
        picked: list[tuple[StoredMessage, int]],
        redelivered: dict[int, InFlight],
        records: list[Message],
        undo: list[Callable[[], None]],
    ) -> None:
        """A visible in-flight delivery at ``offset`` met by a receive (POP or lite): its
        message gone (retention), it ends; out of attempts, it is dead-lettered; else it is
        picked again."""
        entry = self.state.cursor(key).in_flight[offset]
        if stored is None:
            if self._gone(key, offset):
                records.append(self.state.ack(key, [(offset, entry.delivery)]))
        elif entry.attempt >= group.max_delivery_attempts:
            records.extend(self._dead_letter(key, offset, entry, stored))
            undo.append(lambda k=key, o=offset, e=entry: self._restore(k, {o: e}))
        else:
            picked.append((stored, entry.attempt + 1))
            redelivered[offset] = entry

    def _lite_idle(self, key: CursorKey) -> bool:
        """Whether the lite topic of ``key`` has nothing new and nothing in flight."""
        cursor = self.state.cursor(key)
        if cursor is not None and cursor.in_flight:
            return False
        return not self.lite_index.has_after(key[1], cursor.next_offset if cursor else 0)

    def _lite_order(self, group: str, client: LiteClient) -> list[str]:
        """The client's ready lite topics, from a rotating start."""
        lmqs = sorted(client.ready)
        if not lmqs:
            return []
        rotation_key = (group, client.topic)  # not per client: client ids come and go
        start = self._rotation.get(rotation_key, 0) % len(lmqs)
        self._rotation[rotation_key] = start + 1
        return lmqs[start:] + lmqs[:start]

    def _next_lite_visible_in_ms(self, group: str, client: LiteClient | None) -> float:
        """Milliseconds until the earliest invisible delivery of the client's lite topics
        comes back (inf: none); a lite topic with a delivery in flight stays ready."""
        if client is None:
            return float("inf")
        now = self.clock_ms()
        earliest = float("inf")
        for lmq in client.ready:
            cursor = self.state.cursor((group, lmq, 0))
            if cursor is not None:
                for entry in cursor.in_flight.values():
                    earliest = min(earliest, entry.visible_at_ms)
        return max(0.0, earliest - now)

    def _new_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        want: int,
        tags: list[str] | None,
        sql: Filter | None = None,
        scan_budget: int = SQL_SCAN_MAX,
    ) -> tuple[list[StoredMessage], int, int]:
        """Messages from the cursor on, where the cursor goes next, and how many messages
        ``sql`` read. With ``sql``, the messages it refuses are passed over (consumed for
        the group, as the tag filter's are), reading on until ``want`` match or
        ``scan_budget`` were read: a run of refused messages neither reaches the client
        nor holds the queue up."""
        result = self.store.get_messages(topic, queue_id, offset, want, tags)
        if result.status is GetStatus.OFFSET_TOO_SMALL:  # retention passed the cursor
            offset = result.min_offset
            result = self.store.get_messages(topic, queue_id, offset, want, tags)
        if result.status not in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE):
            return [], offset, 0
        if sql is None:
            return result.messages, result.next_begin_offset, 0
        matched: list[StoredMessage] = []
        scanned = 0
        while True:
            for stored in result.messages:
                scanned += 1
                if sql(stored.properties):
                    matched.append(stored)
                    if len(matched) == want:
                        return matched, stored.queue_offset + 1, scanned
            offset = result.next_begin_offset
            if not result.messages or scanned >= scan_budget:
                return matched, offset, scanned
            result = self.store.get_messages(
                topic, queue_id, offset, max(want, SQL_SCAN_CHUNK), tags
            )
            if result.status not in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE):
                return matched, offset, scanned

    def _queue_order(self, group: GroupConfig, topic: TopicConfig) -> range | list[int]:
        """The queues a receive reads, in turn: a PRIORITY topic's from the highest
        priority (queue) down, so a batch holds the highest priority messages ready (a FIFO
        group's order is per message group, not priority: it takes turns as any other);
        otherwise starting one queue further at each receive, so that no queue waits."""
        count = topic.queue_count
        if topic.message_type is MessageType.PRIORITY and not group.fifo:
            return range(count - 1, -1, -1)
        rotation_key = (group.name, topic.name)
        start = self._rotation.get(rotation_key, 0) % count
        self._rotation[rotation_key] = start + 1
        return [(start + step) % count for step in range(count)]

    def _next_visible_in_ms(self, group: str, topic: TopicConfig) -> float:
        """Milliseconds until the earliest invisible delivery of the group comes back."""
        now = self.clock_ms()
        earliest = min(
            (
                f.visible_at_ms
                for q in range(topic.queue_count)
                if (c := self.state.cursor((group, topic.name, q))) is not None
                for f in c.in_flight.values()
            ),
            default=None,
        )
        return float("inf") if earliest is None else max(1, earliest - now)

    def _cursor(self, key: CursorKey) -> PopCursor:
        cursor = self.state.cursor(key)
        if cursor is None and is_lmq(key[1]):  # a lite topic: from its first message
            cursor = self.state.cursors[key] = PopCursor(0)
        elif cursor is None:
            group, topic, queue_id = key
            committed = self.offsets.get(group, topic, queue_id)
            if committed is None:
                committed = self.store.min_offset_in_queue(topic, queue_id)
            cursor = self.state.cursors[key] = PopCursor(committed)
        return cursor

    def _read(self, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
        if queue_id == RESENT_QUEUE_ID:  # a resent dead letter, as its consumer sees it
            raw = self.store.message_at(topic, 0, offset)
            return None if raw is None else resent_view(raw)
        if is_lmq(topic):  # a lite topic's offsets are CommitLog offsets
            return self.lite_index.message_at(topic, offset)
        return self.store.message_at(topic, queue_id, offset)

    def _gone(self, key: CursorKey, offset: int) -> bool:
        """Whether an in-flight message that cannot be read is gone for good: below its
        queue's first offset (removed by retention), or, for a lite topic, another record
        stands at its CommitLog offset (a cut replaced it), so its delivery ends. Anywhere
        else it stays in flight and is tried again at the next receive: ending the delivery
        of a message the queue still holds (its entry not readable for a moment) would lose
        it for the group, whose cursor is past it."""
        group, topic, queue_id = key
        if is_lmq(topic):
            if self.store.read_message(offset) is not None:  # not this lite topic's
                return True
            first, end = self.store.min_offset, self.store.write_offset
        else:
            first = self.store.min_offset_in_queue(topic, queue_id)
            end = self.store.max_offset_in_queue(topic, queue_id)
        if offset < first:
            return True
        log.warning(
            "POP %s %s/%d: in-flight offset %d not readable, queue holds [%d, %d): kept",
            group,
            topic,
            queue_id,
            offset,
            first,
            end,
        )
        return False

    # ---- ack ----------------------------------------------------------------------
    def require_consuming(self, caller: Caller, pairs: list[tuple[str, str]]) -> None:
        """``AccessDenied`` unless ``caller`` may consume every (topic, group) of a request
        that acts on several (a 4.x batch ack): decided before any of them is acted on."""
        self.permissions.require(
            caller, [need for topic, group in pairs for need in consume(topic, group)]
        )

    async def _consuming(
        self, caller: Caller, group_name: str, topic_name: str
    ) -> tuple[TopicConfig, GroupConfig]:
        """The topic and group of a call that acts on deliveries, once ``caller`` may
        consume the one as the other."""
        self.permissions.require(caller, consume(topic_name, group_name))
        topic = await self.topics.topic_caught_up(topic_name)
        return topic, await self.groups.group(group_name)

    async def ack(
        self,
        caller: Caller,
        group_name: str,
        topic_name: str,
        handles: list[str],
        lite_topic: str | None = None,
    ) -> list[pb.Status]:
        """Ack the deliveries ``handles`` name (of ``lite_topic`` in a LITE topic): one
        answer each (a stale, forged or malformed handle is INVALID_RECEIPT_HANDLE, the
        others acked in one append)."""
        topic, group = await self._consuming(caller, group_name, topic_name)
        topic = _scope(topic, lite_topic)
        if not handles:
            raise InvalidRequest(pb.BAD_REQUEST, "no entries to ack")
        if len(handles) > ACK_ENTRIES_MAX:
            raise InvalidRequest(
                pb.BAD_REQUEST, f"{len(handles)} entries to ack, the limit is {ACK_ENTRIES_MAX}"
            )
        answers: list[pb.Status] = []
        by_queue: dict[CursorKey, dict[int, InFlight]] = {}
        for text in handles:
            try:
                key, handle, current = self._current(group.name, topic, text)
            except InvalidRequest as error:
                answers.append(status(error.code, str(error)))
                continue
            by_queue.setdefault(key, {})[handle.queue_offset] = current
            answers.append(OK)
        if by_queue:
            records = [
                self.state.ack(key, [(o, f.delivery) for o, f in entries.items()])
                for key, entries in by_queue.items()
            ]
            undo = [lambda k=k, e=e: self._restore(k, e) for k, e in by_queue.items()]
            try:
                await self._append(records, undo)
            except PopFailed as failed:
                answers = [failed.status if a.code == pb.OK else a for a in answers]
        return answers

    # ---- change of invisibility -----------------------------------------------------
    async def change_invisible(
        self,
        caller: Caller,
        group_name: str,
        topic_name: str,
        handle_text: str,
        invisible_ms: int,
        lite_topic: str | None = None,
        suspend: bool = False,
    ) -> tuple[pb.Status, str]:
        """Make the delivery ``handle_text`` names invisible for ``invisible_ms`` from now:
        OK and its new handle, or a refusal (``InvalidRequest`` before anything changed).
        A nack of the last allowed attempt dead-letters the message instead, unless it is
        a ``suspend`` (RocketMQ 5.5: the delivery is not counted as an attempt, so the
        message comes back with the attempt it had)."""
        topic, group = await self._consuming(caller, group_name, topic_name)
        topic = _scope(topic, lite_topic)
        check_invisible_ms(invisible_ms)
        key, handle, current = self._current(group.name, topic, handle_text)
        offset, before = handle.queue_offset, dataclasses.replace(current)
        if current.attempt >= group.max_delivery_attempts and not suspend:
            # A nack of the last allowed attempt (the official push consumer's failure
            # path): it can never be delivered again, so it goes to the DLQ now.
            return await self._forward(key, offset, current), handle_text
        delivery = new_delivery_id()
        record = self.state.change(
            key, offset, current.delivery, delivery, self.clock_ms() + invisible_ms, suspend
        )
        undo = [lambda: self.state.restore_change(key, offset, delivery, before)]
        try:
            await self._append([record], undo)
        except PopFailed as failed:
            return failed.status, handle_text
        return OK, self._handle(key, offset, delivery, topic.name)

    # ---- dead-lettering ----------------------------------------------------------------
    async def forward_to_dead_letters(
        self,
        caller: Caller,
        group_name: str,
        topic_name: str,
        handle_text: str,
        lite_topic: str | None = None,
    ) -> pb.Status:
        """Dead-letter the message of a handle. Idempotent: the official FIFO consumer
        repeats this until it hears OK, so a handle whose message is no longer in flight
        (acked or dead-lettered already) answers OK and changes nothing. A handle that
        does not verify, or whose message was redelivered since, is refused like an ack."""
        topic, group = await self._consuming(caller, group_name, topic_name)
        topic = _scope(topic, lite_topic)
        handle = self._decode(group.name, topic, handle_text)
        key = handle_key_of(group.name, topic.name, handle.queue_id)
        cursor = self.state.cursor(key)
        current = cursor.in_flight.get(handle.queue_offset) if cursor else None
        if current is None:
            return OK
        if current.delivery != handle.delivery:
            raise InvalidRequest(pb.INVALID_RECEIPT_HANDLE, STALE)
        return await self._forward(key, handle.queue_offset, current)

    async def _forward(self, key: CursorKey, offset: int, current: InFlight) -> pb.Status:
        stored = self._read(key[1], key[2], offset)
        if stored is None:
            records = [self.state.ack(key, [(offset, current.delivery)])]
        else:
            records = self._dead_letter(key, offset, current, stored)
        try:
            await self._append(records, [lambda: self._restore(key, {offset: current})])
        except PopFailed as failed:
            return failed.status
        return OK

    # ---- the remoting door's handles ----------------------------------------------------
    def handle_of_current(
        self,
        caller: Caller,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        visible_at_ms: int,
        tag: int,
    ) -> str:
        """The receipt handle of the delivery in flight at ``offset`` that becomes visible
        at ``visible_at_ms`` and whose id has ``delivery_tag`` ``tag``: how a RocketMQ 5
        remoting client names a delivery (its ``extraInfo`` holds numbers only). Needs what
        an ack needs (SUBSCRIBE on the topic and the group); TopicError for an unknown
        topic, INVALID_RECEIPT_HANDLE (stale) when no such delivery is in flight."""
        self.permissions.require(caller, consume(topic, group))
        self.topics.topic(topic)  # an unknown topic says so, not "stale"
        key = handle_key_of(group, topic, queue_id)
        cursor = self.state.cursor(key)
        current = cursor.in_flight.get(offset) if cursor else None
        if (
            current is None
            or current.visible_at_ms != visible_at_ms
            or delivery_tag(current.delivery) != tag
        ):
            raise InvalidRequest(pb.INVALID_RECEIPT_HANDLE, STALE)
        return self._handle(key, offset, current.delivery, topic)

    def in_flight(self, group: str, topic: str, handle: str) -> tuple[ReceiptHandle, InFlight]:
        """The delivery a handle this node issued names, and its entry (for the remoting
        door's answer to a change of invisibility)."""
        decoded = self.handles.decode(handle, topic, group)
        cursor = self.state.cursor(handle_key_of(group, topic, decoded.queue_id))
        return decoded, cursor.in_flight[decoded.queue_offset]

    # ---- shared ----------------------------------------------------------------------
    def _handle(self, key: CursorKey, offset: int, delivery: str, topic: str = "") -> str:
        """The handle of a delivery of ``key`` (of a resent dead letter: for ``topic``,
        its origin, which the client names)."""
        group, key_topic, queue_id = key
        if queue_id == RESENT_QUEUE_ID:
            key_topic = topic
        return self.handles.encode(ReceiptHandle(queue_id, offset, delivery), key_topic, group)

    def _decode(self, group: str, topic: TopicConfig, text: str) -> ReceiptHandle:
        """The handle ``text`` names if this cluster issued it for ``group`` and ``topic``;
        INVALID_RECEIPT_HANDLE saying why otherwise."""
        try:
            handle = self.handles.decode(text, topic.name, group)
        except MalformedReceiptHandle as error:
            raise InvalidRequest(pb.INVALID_RECEIPT_HANDLE, str(error)) from None
        if handle.queue_id >= topic.queue_count and handle.queue_id != RESENT_QUEUE_ID:
            raise InvalidRequest(
                pb.INVALID_RECEIPT_HANDLE, f"the receipt handle names no queue of {topic.name}"
            )
        return handle

    def _current(
        self, group: str, topic: TopicConfig, text: str
    ) -> tuple[CursorKey, ReceiptHandle, InFlight]:
        """The in-flight delivery a handle names; INVALID_RECEIPT_HANDLE unless current."""
        handle = self._decode(group, topic, text)
        key = handle_key_of(group, topic.name, handle.queue_id)
        cursor = self.state.cursor(key)
        current = cursor.in_flight.get(handle.queue_offset) if cursor else None
        if current is None or current.delivery != handle.delivery:
            raise InvalidRequest(pb.INVALID_RECEIPT_HANDLE, STALE)
        return key, handle, current

    def _dead_letter(
        self, key: CursorKey, offset: int, entry: InFlight, stored: StoredMessage
    ) -> list[Message]:
        """The copy for ``%DLQ%<group>`` and the record ending the delivery: appended in
        one batch, so the message is in exactly one of the two places after any crash."""
        group = key[0]
        copy = dead_letter_copy(self.topics.dead_letter_topic(group), stored, entry.attempt)
        if key[2] == RESENT_QUEUE_ID:  # a resent dead letter: its origin, as first recorded
            raw = self.store.message_at(key[1], 0, offset)
            for name in (PROPERTY_DLQ_ORIGIN_QUEUE, PROPERTY_DLQ_ORIGIN_OFFSET):
                if raw is not None and name in raw.properties:
                    copy.properties[name] = raw.properties[name]
        return [copy, self.state.ack(key, [(offset, entry.delivery)], kind=KIND_DLQ)]

    def _restore(self, key: CursorKey, entries: dict[int, InFlight]) -> None:
        self.state.restore_in_flight(key, entries)

    def _unpop(
        self,
        key: CursorKey,
        pairs: list[tuple[int, int]],
        delivery: str,
        redelivered: dict[int, InFlight],
    ) -> None:
        """Undo a pop whose record was refused: it reached nobody and the log never had
        it. A redelivered message gets its earlier delivery back (so a refusal does not use
        up an attempt, and the client's handle stays current); a new one, past a cursor
        that other pops may have moved on since, stays in flight as delivered to nobody
        (attempt 0, visible now)."""
        cursor = self.state.cursor(key)
        unlogged = []
        for offset, _ in pairs:
            entry = cursor.in_flight.get(offset) if cursor else None
            if entry is None or entry.delivery != delivery:
                continue  # decided about again since
            if offset in redelivered:
                cursor.in_flight[offset] = redelivered[offset]
            else:
                entry.visible_at_ms, entry.attempt = 0, 0
                unlogged.append(offset)
        self.state.keep_unlogged(key, unlogged)

    def _hand_back_records(self, pops: list[PopDecision]) -> list[Message]:
        """Pop records that give the messages of ``pops`` back as they were before, for
        deliveries the log holds but no consumer received: a redelivered message gets its
        earlier delivery (id, visibility, attempts), a new one is in flight to nobody
        (attempt 0, visible now). Built, not applied: memory follows only if the log
        takes them. Offsets decided about since (not current any more) are left alone."""
        records = []
        for pop in pops:
            cursor = self.state.cursor(pop.key)
            current = [
                offset
                for offset in pop.offsets
                if cursor is not None
                and (entry := cursor.in_flight.get(offset)) is not None
                and entry.delivery == pop.delivery
            ]
            if not current:
                continue
            earlier: dict[tuple[str, int], list[tuple[int, int]]] = {}
            fresh = [offset for offset in current if offset not in pop.redelivered]
            for offset in current:
                if offset in pop.redelivered:
                    entry = pop.redelivered[offset]
                    earlier.setdefault((entry.delivery, entry.visible_at_ms), []).append(
                        (offset, entry.attempt)
                    )
            groups = [(d, v, pairs) for (d, v), pairs in earlier.items()]
            if fresh:
                groups.append((new_delivery_id(), 0, [(offset, 0) for offset in fresh]))
            records.extend(
                self.state.pop_record(pop.key, pairs, cursor.next_offset, delivery, visible)
                for delivery, visible, pairs in groups
            )
        return records

    async def hand_back(self, deliveries: list[Delivery]) -> None:
        """Give back deliveries no consumer received (the receive failed, or its caller
        was gone before the answer): counting them would use up delivery attempts nobody
        saw. Only the pops whose deliveries are still current change."""
        decisions = {id(d.decision): d.decision for d in deliveries}
        await self._hand_back(list(decisions.values()))

    async def _hand_back(self, pops: list[PopDecision]) -> None:
        """Undo pops in the log and then in memory (a master cut off from its slaves for
        a few receives, or consumers whose calls timed out, dead-lettered messages never
        delivered). If the log refuses the hand-back too, memory stays as the log has it:
        the attempts count."""
        records = self._hand_back_records(pops)
        if not records:
            return
        result = await self.state.append(records)
        if result.appended:
            for record in records:
                self.state.apply(record.properties, record.body)

    def _hand_back_after(
        self,
        appending: asyncio.Future,
        undo: list[Callable[[], None]],
        pops: list[PopDecision],
    ) -> None:
        """The append of a receive whose caller left has ended: nobody gets its answer,
        so its pops are undone (refused) or given back (written)."""
        if appending.cancelled() or appending.exception() is not None:
            return
        if not appending.result().appended:
            for step in undo:
                step()
        else:
            self.in_background(self._hand_back(pops))

    def in_background(self, work: Awaitable[None]) -> None:
        """Run ``work`` past the call that started it (a hand-back after the caller
        left); kept referenced until done, its failure logged."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("POP hand-back failed: %r", task.exception())

    async def _append(
        self,
        records: list[Message],
        undo: list[Callable[[], None]],
        pops: list[PopDecision] | None = None,
    ) -> None:
        """Append a decision's records. Refused (the log never had them): ``undo``
        restores memory. Written but not confirmed: the ``pops`` are handed back (the
        receive answers an error); other records stand, as the log holds them. The
        append of pops outlives a cancelled caller (a receive whose client left), and
        hands them back when it ends."""
        if not pops:
            result = await self.state.append(records)
        else:
            appending = asyncio.ensure_future(self.state.append(records))
            try:
                result = await asyncio.shield(appending)
            except asyncio.CancelledError:
                appending.add_done_callback(lambda done: self._hand_back_after(done, undo, pops))
                raise
        if not result.ok:
            if not result.appended:  # refused: the log never had the records
                for step in undo:
                    step()
            elif pops:
                await self._hand_back(pops)
            raise PopFailed(store_refusal(result))
        # An ended or shortened delivery may free a FIFO queue: wake its long polls.
        for record in records:
            if record.topic == self.state.topic and record.properties["kind"] != KIND_POP:
                name = record.properties["topic"]
                if is_lmq(name):
                    self.on_lite_change(name)
                else:
                    self.waiters.notify(name, int(record.properties["queue"]))


def resent_key(group: str) -> CursorKey:
    """The key of ``group``'s resent dead letters (``node/pop_state.py``)."""
    return (group, dead_letter_topic_of(group), RESENT_QUEUE_ID)


def handle_key_of(group: str, topic: str, queue_id: int) -> CursorKey:
    """The key a receipt handle of ``topic`` names: its queue's, or the group's resent
    dead letters' (``RESENT_QUEUE_ID``)."""
    if queue_id == RESENT_QUEUE_ID:
        return resent_key(group)
    return (group, topic, queue_id)


DEAD_LETTER_MARKS = (
    PROPERTY_DLQ_ORIGIN_TOPIC,
    PROPERTY_DLQ_ORIGIN_QUEUE,
    PROPERTY_DLQ_ORIGIN_OFFSET,
)


def resent_view(raw: StoredMessage) -> StoredMessage:
    """A dead letter resent, as the group's consumer receives it: the topic it was sent
    to and its properties without the dead-letter marks (so its message id, ``UNIQ_KEY``,
    is the producer's); queue ``RESENT_QUEUE_ID`` at the dead-letter queue's offset, which
    its receipt handle names."""
    properties = {k: v for k, v in raw.properties.items() if k not in DEAD_LETTER_MARKS}
    return dataclasses.replace(
        raw,
        topic=raw.properties.get(PROPERTY_DLQ_ORIGIN_TOPIC, raw.topic),
        queue_id=RESENT_QUEUE_ID,
        properties=properties,
        reconsume_times=0,
    )


def _as_lite(stored: StoredMessage) -> StoredMessage:
    """A lite topic's message as its consumer sees it: its offset is the lite topic's (the
    CommitLog offset, ``node/lite_index.py``), not its queue's in the topic."""
    return dataclasses.replace(stored, queue_offset=stored.physical_offset)


def _scope(topic: TopicConfig, lite_topic: str | None) -> TopicConfig:
    """What a call on a delivery acts on: ``topic``'s queues, or one lite topic's (a queue
    of its own, named for it: its handles verify for it alone)."""
    if lite_topic is None:
        return topic
    if topic.message_type is not MessageType.LITE:
        raise InvalidRequest(pb.BAD_REQUEST, f"topic {topic.name} is not a LITE topic")
    return TopicConfig(lmq_name(topic.name, lite_topic), 1, MessageType.LITE, topic.permission)


def delivery_tag(delivery: str) -> int:
    """31 bits of a delivery id, a Java int that is never negative."""
    return int(delivery[:8], 16) & 0x7FFFFFFF


def check_invisible_ms(invisible_ms: int) -> None:
    if not INVISIBLE_MIN_MS <= invisible_ms <= INVISIBLE_MAX_MS:
        raise InvalidRequest(
            pb.ILLEGAL_INVISIBLE_TIME,
            f"invisible duration {invisible_ms} ms is outside "
            f"[{INVISIBLE_MIN_MS}, {INVISIBLE_MAX_MS}] ms",
        )


def overall(answers: list[pb.Status]) -> pb.Status:
    """One status for per-entry answers: theirs when they agree, else MULTIPLE_RESULTS."""
    codes = {a.code for a in answers}
    if len(codes) == 1:
        return answers[0]
    return status(pb.MULTIPLE_RESULTS, "entries have different results; see each entry")
