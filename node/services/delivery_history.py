"""A stored message's delivery history per consumer group, from what the log already holds
(issue 42; RocketMQ Dashboard's "message track").

Nothing is written for it: the history is read back from

- the ``%SYS%POP`` records of the message's queue (``node/pop_state.py``): each POP
  delivery (its attempt and invisibility end), then its ack, change of invisibility,
  move to the dead-letter topic, the queue's offset reset or its lite topic's expiry;
- the copies RocketMQ 4.x consumers leave in ``%RETRY%<group>`` (``ORIGIN_MESSAGE_ID``
  names the original, ``node/consumer_retry.py``) and the dead-letter copy in
  ``%DLQ%<group>`` (``DLQ_ORIGIN_*``, ``node/dead_letters.py``);
- the group's committed offset of the queue and its POP cursor now (memory, as the log
  says);
- once it was dead-lettered, its dead letter's resends (``resend`` records of ``%SYS%POP``,
  ``node/services/dead_letter_resend.py``) and what the group's POP consumers did with the
  resent message (the records of the key ``(group, %DLQ%<group>, RESENT_QUEUE_ID)`` naming
  the dead letter's offset), and the resend's copy in ``%RETRY%<group>`` for 4.x consumers.

Every group with a position in the queue (a committed offset, a POP cursor, or a POP
record of the queue in the scanned range) gets a row. The scan is bounded: it starts at
the first record stored at or after the message (a POP record of it cannot be older: a
message is delivered after it is stored), reads at most ``records_max`` records in all
(the ``%SYS%POP`` queue, then each group's retry and dead-letter queues from the same
time), and the answer says when it was cut (``truncated``). A copy still waiting for its
retry delay in the timer topic is not in ``%RETRY%<group>`` yet, so not shown.

Read on the broker group's master: a slave's POP cursors and committed offsets are
rebuilt only when it is promoted (callers go through ``node/console/masters.py``).

Who may see it: SUBSCRIBE on the message's topic, as every message read
(``permissions.read``).

Thread-safety: owned by the node's event loop. A history yields the loop every
``WALK_PAGE`` records it reads; the state it reports (cursor, committed offset) is read
after the scan, so it may be newer than the last record read, never older.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ferrymq.codec.commitlog_record import StoredMessage
from ferrymq.codec.properties import PROPERTY_UNIQ_KEY
from ha.replicated_store import ReplicatedStore
from node.consumer_offsets import ConsumerOffsets
from node.consumer_retry import PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RETRY_TOPIC
from node.dead_letters import (
    PROPERTY_DLQ_ORIGIN_OFFSET,
    PROPERTY_DLQ_ORIGIN_QUEUE,
    PROPERTY_DLQ_ORIGIN_TOPIC,
)
from node.pop_state import (
    KIND_ACK,
    KIND_CHANGE,
    KIND_DLQ,
    KIND_EXPIRE,
    KIND_POP,
    KIND_RESEND,
    KIND_RESET,
    POP_TOPIC,
    RESENT_QUEUE_ID,
    PopState,
)
from node.services.admin import INVALID_ARGUMENT, NOT_FOUND, AdminRefused, refused
from node.services.caller import Caller
from node.services.permissions import Permissions, read
from node.services.pop import resent_key
from node.topics import TopicError, TopicTable
from routing.metadata import dead_letter_topic_of, retry_topic_of

RESENT_QUEUE_TEXT = str(RESENT_QUEUE_ID)
HISTORY_RECORDS_MAX = 10_000  # records read per history, all queues together
WALK_PAGE = 256


class EventKind(enum.Enum):
    DELIVERED = "delivered"  # a POP delivery (attempt, invisible until)
    ACKED = "acked"
    DEAD_LETTERED = "dead-lettered"  # POP: moved to %DLQ%<group>
    INVISIBILITY_CHANGED = "invisibility changed"  # a nack or an extension
    RESET = "offsets reset"
    EXPIRED = "expired"  # its lite topic expired
    RETRY_COPY = "retry copy"  # 4.x: a copy in %RETRY%<group>
    DEAD_LETTER_COPY = "dead-letter copy"  # its copy in %DLQ%<group>
    RESENT = "resent"  # its dead letter given back to the group (dead_letter_resend.py)


class GroupState(enum.Enum):
    NOT_CONSUMED = "not consumed yet"
    IN_FLIGHT = "in flight"
    RETRYING = "retrying"
    CONSUMED = "consumed"
    DEAD_LETTERED = "dead-lettered"


@dataclass(frozen=True, slots=True)
class HistoryEvent:
    time_ms: int  # the store time of the record that says it
    kind: EventKind
    attempt: int = 0  # the delivery's attempt (POP), the copy's reconsume times; 0: n/a
    delivery: str = ""  # POP's delivery id (a receipt handle's), "" for the others
    visible_at_ms: int = 0  # POP: the end of the invisibility it set; 0: n/a
    detail: str = ""
    # The CommitLog offset of that record: events are in the log's order, which store
    # times (milliseconds) cannot give when several records share one.
    log_offset: int = -1


def _event(
    record: StoredMessage,
    kind: EventKind,
    attempt: int = 0,
    delivery: str = "",
    visible_at_ms: int = 0,
    detail: str = "",
) -> HistoryEvent:
    """The event ``record`` says, at its store time and place in the log."""
    return HistoryEvent(
        record.store_timestamp_ms,
        kind,
        attempt,
        delivery,
        visible_at_ms,
        detail,
        record.physical_offset,
    )


@dataclass(frozen=True, slots=True)
class GroupHistory:
    group: str
    model: str  # "pop" (a POP cursor or records) or "offsets" (pull, 4.x push)
    state: GroupState
    state_text: str  # the state in words a person reads
    committed_offset: int  # -1: none
    pop_next_offset: int  # the POP cursor's next offset; -1: no cursor
    events: tuple[HistoryEvent, ...]


@dataclass(frozen=True, slots=True)
class MessageHistory:
    topic: str
    queue_id: int
    queue_offset: int
    store_timestamp_ms: int
    broker_group: str
    groups: tuple[GroupHistory, ...]
    records_scanned: int
    records_max: int
    truncated: bool  # the cap stopped the scan: later records were not read

    @property
    def note(self) -> str:
        if self.truncated:
            return f"history truncated after {self.records_max} records"
        return ""


@dataclass
class _Budget:
    """The records a history may still read (shared by every queue it scans)."""

    left: int
    scanned: int = 0
    truncated: bool = False

    async def pause(self) -> None:
        """Let the event loop run other work every ``WALK_PAGE`` records: a whole history
        reads for 0.08 to 0.22 s on a busy 2-core host, in slices of a few ms."""
        if self.scanned % WALK_PAGE == 0:
            await asyncio.sleep(0)

    def take(self) -> bool:
        if self.left <= 0:
            self.truncated = True
            return False
        self.left -= 1
        self.scanned += 1
        return True


@dataclass
class _PopTrail:
    """One group's POP records of the message, replayed: the current delivery."""

    events: list[HistoryEvent] = field(default_factory=list)
    current: str | None = None  # delivery id in flight per the records read
    attempt: int = 0
    ending: EventKind | None = None  # the last ack / dlq / expiry / reset that ended one


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _pairs(body: bytes) -> list[tuple[str, str]]:
    if not body:
        return []
    return [item.partition(":")[::2] for item in body.decode().split(",")]


class DeliveryHistoryService:
    def __init__(
        self,
        store: ReplicatedStore,
        topics: TopicTable,
        offsets: ConsumerOffsets,
        pop_state: PopState,
        permissions: Permissions,
        broker_group: str,
        records_max: int = HISTORY_RECORDS_MAX,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        assert records_max > 0, records_max
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.pop_state = pop_state
        self.permissions = permissions
        self.broker_group = broker_group
        self.records_max = records_max
        self.clock_ms = clock_ms

    async def history(
        self, caller: Caller, topic: str, queue_id: int, offset: int
    ) -> MessageHistory:
        """The history of the message at ``offset`` of ``topic``'s queue ``queue_id`` here.
        NOT_FOUND for an unknown topic or no message there; INVALID_ARGUMENT for a queue
        the topic does not have here."""
        self.permissions.require(caller, read(topic))
        try:
            config = self.topics.topic(topic)
        except TopicError as error:
            raise refused(error) from None
        if not 0 <= queue_id < config.queue_count:
            raise AdminRefused(
                INVALID_ARGUMENT,
                f"topic {topic} has queues 0..{config.queue_count - 1} here, not {queue_id}",
            )
        message = None
        if offset >= 0:  # read as every message read is (the read cap of a new master holds)
            page = self.store.get_messages(topic, queue_id, offset, 1)
            message = next((m for m in page.messages if m.queue_offset == offset), None)
        if message is None:
            raise AdminRefused(NOT_FOUND, f"no message at {topic} queue {queue_id} offset {offset}")
        budget = _Budget(self.records_max)
        trails, resends = await self._pop_trails(message, budget)
        groups = set(trails)
        groups.update(g for g in self.offsets.groups_of(topic) if self._committed(g, message))
        groups.update(g for g, t, q in self.pop_state.cursors if t == topic and q == queue_id)
        rows = [
            await self._group(group, message, trails.get(group), resends.get(group, []), budget)
            for group in sorted(groups)
        ]
        return MessageHistory(
            topic,
            queue_id,
            offset,
            message.store_timestamp_ms,
            self.broker_group,
            tuple(rows),
            budget.scanned,
            self.records_max,
            budget.truncated,
        )

    # ---- the POP records -----------------------------------------------------------------
    async def _pop_trails(
        self, message: StoredMessage, budget: _Budget
    ) -> tuple[dict[str, _PopTrail], dict[str, list[StoredMessage]]]:
        """Per group, the message's POP trail; and the records of the group's resent dead
        letters (replayed once the group's dead letters of the message are known)."""
        trails: dict[str, _PopTrail] = {}
        resends: dict[str, list[StoredMessage]] = {}
        queue = str(message.queue_id)
        start = self.store.offset_by_time(POP_TOPIC, 0, message.store_timestamp_ms)
        for record in self.store.walk_queue(POP_TOPIC, 0, start, WALK_PAGE):
            if not budget.take():
                break
            await budget.pause()
            fields = record.properties
            if fields.get("queue") == RESENT_QUEUE_TEXT and "group" in fields:
                if fields.get("topic") == dead_letter_topic_of(fields["group"]):
                    resends.setdefault(fields["group"], []).append(record)
                continue
            if fields.get("topic") != message.topic or fields.get("queue") != queue:
                continue  # another queue's, or a snapshot
            kind = fields.get("kind")
            if kind not in (KIND_POP, KIND_ACK, KIND_DLQ, KIND_CHANGE, KIND_RESET, KIND_EXPIRE):
                continue
            trail = trails.get(fields["group"])
            if trail is None:
                trail = trails[fields["group"]] = _PopTrail()
            _replay(trail, kind, fields, record, message.queue_offset)
        return trails, resends

    # ---- one group -------------------------------------------------------------------------
    def _committed(self, group: str, message: StoredMessage) -> bool:
        return self.offsets.get(group, message.topic, message.queue_id) is not None

    async def _group(
        self,
        group: str,
        message: StoredMessage,
        trail: _PopTrail | None,
        resend_records: list[StoredMessage],
        budget: _Budget,
    ) -> GroupHistory:
        committed = self.offsets.get(group, message.topic, message.queue_id)
        cursor = self.pop_state.cursor((group, message.topic, message.queue_id))
        copies, retried_consumed, dead_offsets = await self._copies(group, message, budget)
        resent = _resent_trail(resend_records, dead_offsets)
        pop_events = trail.events if trail is not None else []
        resent_events = resent.events if resent is not None else []
        events = sorted(pop_events + resent_events + copies, key=lambda e: e.log_offset)
        pop = cursor is not None or trail is not None
        state, text = self._state(
            group, message, trail, cursor, committed, copies, retried_consumed, budget.truncated
        )
        if resent is not None and state is GroupState.DEAD_LETTERED:
            state, text = self._after_resend(group, resent, dead_offsets, copies, retried_consumed)
        return GroupHistory(
            group,
            "pop" if pop else "offsets",
            state,
            text,
            -1 if committed is None else committed,
            -1 if cursor is None else cursor.next_offset,
            tuple(events),
        )

    def _state(
        self, group, message, trail, cursor, committed, copies, retried_consumed, truncated
    ) -> tuple[GroupState, str]:
        offset = message.queue_offset
        dead = [e for e in copies if e.kind is EventKind.DEAD_LETTER_COPY]
        ending = trail.ending if trail is not None else None
        if cursor is not None:
            flight = cursor.in_flight.get(offset)
            if flight is not None:
                if flight.visible_at_ms > self.clock_ms():
                    until = _iso(flight.visible_at_ms)
                    return GroupState.IN_FLIGHT, (
                        f"in flight: attempt {flight.attempt}, invisible until {until}"
                    )
                return GroupState.IN_FLIGHT, (
                    f"in flight: attempt {flight.attempt} timed out, waiting for redelivery"
                )
            if offset < cursor.next_offset:
                return self._ended(group, trail, ending, dead, truncated)
            return GroupState.NOT_CONSUMED, (
                f"not consumed yet (the group's POP position is {cursor.next_offset})"
            )
        if dead or ending is EventKind.DEAD_LETTERED:
            return self._ended(group, trail, EventKind.DEAD_LETTERED, dead, truncated)
        if ending is EventKind.EXPIRED:  # its cursor went with the lite topic
            return self._ended(group, trail, ending, dead, truncated)
        retries = [e for e in copies if e.kind is EventKind.RETRY_COPY]
        if retries:
            if retried_consumed:
                return GroupState.CONSUMED, f"consumed after {len(retries)} retries"
            return GroupState.RETRYING, (
                f"retrying: copy {len(retries)} waits in {retry_topic_of(group)}"
            )
        if committed is not None and committed > offset:
            return GroupState.CONSUMED, f"consumed (committed offset {committed})"
        if committed is None:
            return GroupState.NOT_CONSUMED, "not consumed yet (the group has no position now)"
        return GroupState.NOT_CONSUMED, f"not consumed yet (committed offset {committed})"

    def _after_resend(
        self,
        group: str,
        resent: _PopTrail,
        dead_offsets: list[int],
        copies: list[HistoryEvent],
        retried_consumed: bool,
    ) -> tuple[GroupState, str]:
        """The state of a message whose dead letter was resent: what the group's POP
        consumers did with it, or its 4.x consumers with the resend's retry copy."""
        dead_topic = dead_letter_topic_of(group)
        # The copies after its first dead letter: a resend's, and a 4.x consumer's after it.
        dead_at = min(e.log_offset for e in copies if e.kind is EventKind.DEAD_LETTER_COPY)
        if resent.ending is EventKind.ACKED:
            return GroupState.CONSUMED, (
                f"consumed after a resend from {dead_topic}: acked at attempt {resent.attempt}"
            )
        if resent.ending is EventKind.DEAD_LETTERED:
            return GroupState.DEAD_LETTERED, (
                f"dead-lettered to {dead_topic} again after a resend and {resent.attempt} attempts"
            )
        retried = [e for e in copies if e.kind is EventKind.RETRY_COPY and e.log_offset > dead_at]
        if retried and retried_consumed:
            return GroupState.CONSUMED, (
                f"consumed after a resend from {dead_topic} (its copy in {retry_topic_of(group)})"
            )
        cursor = self.pop_state.cursor(resent_key(group))
        flights = [cursor.in_flight[o] for o in dead_offsets if cursor and o in cursor.in_flight]
        if flights and flights[-1].attempt > 0:
            flight = flights[-1]
            if flight.visible_at_ms > self.clock_ms():
                until = _iso(flight.visible_at_ms)
                return GroupState.IN_FLIGHT, (
                    f"in flight after a resend: attempt {flight.attempt}, invisible until {until}"
                )
            return GroupState.IN_FLIGHT, (
                f"in flight after a resend: attempt {flight.attempt} timed out, waiting for "
                "redelivery"
            )
        return GroupState.RETRYING, (
            f"resent from {dead_topic}: waits for the group's next receive"
        )

    @staticmethod
    def _ended(group, trail, ending, dead, truncated) -> tuple[GroupState, str]:
        attempt = trail.attempt if trail is not None else 0
        if ending is EventKind.DEAD_LETTERED or dead:
            tries = attempt or (dead[-1].attempt if dead else 0)
            return GroupState.DEAD_LETTERED, (
                f"dead-lettered to {dead_letter_topic_of(group)} after {tries} attempts"
            )
        if ending is EventKind.ACKED:
            return GroupState.CONSUMED, f"consumed: acked at attempt {attempt}"
        if ending is EventKind.EXPIRED:
            return GroupState.CONSUMED, "ended: its lite topic expired"
        if truncated:
            return GroupState.CONSUMED, "consumed (how: after the records read)"
        if trail is None or not any(e.kind is EventKind.DELIVERED for e in trail.events):
            return GroupState.CONSUMED, (
                "consumed: passed without a delivery in the history (filtered out by the "
                "group's tags, moved past by an offset reset, or before the records read)"
            )
        return GroupState.CONSUMED, "consumed"

    # ---- retry and dead-letter copies ------------------------------------------------------
    async def _copies(
        self, group: str, message: StoredMessage, budget: _Budget
    ) -> tuple[list[HistoryEvent], bool, list[int]]:
        """The group's copies of ``message`` in its retry and dead-letter topics, stored
        after it (each queue walked from the message's store time, within ``budget``),
        whether the group consumed its newest retry copy, and the dead-letter copies'
        offsets (in ``%DLQ%<group>``'s queue 0, which a resend names)."""
        consumed = False
        names = {message.offset_message_id}
        if message.unique_key:
            names.add(message.unique_key)
        retry_topic, dead_topic = retry_topic_of(group), dead_letter_topic_of(group)
        found: list[HistoryEvent] = []
        async for copy in self._walk(retry_topic, message.store_timestamp_ms, budget):
            fields = copy.properties
            if not _retry_copy_of(fields, message, names):
                continue
            if fields.get(PROPERTY_RETRY_TOPIC, message.topic) != message.topic:
                continue
            position = self.offsets.get(group, retry_topic, copy.queue_id)
            consumed = position is not None and position > copy.queue_offset  # the newest wins
            where = f"{retry_topic} queue {copy.queue_id} offset {copy.queue_offset}"
            detail = f"{where} ({'consumed' if consumed else 'not consumed yet'})"
            found.append(_event(copy, EventKind.RETRY_COPY, copy.reconsume_times, detail=detail))
        dead_offsets: list[int] = []
        async for copy in self._walk(dead_topic, message.store_timestamp_ms, budget):
            if _dead_letter_of(copy, message, names):
                if copy.queue_id == 0:
                    dead_offsets.append(copy.queue_offset)
                where = f"{dead_topic} queue {copy.queue_id} offset {copy.queue_offset}"
                found.append(
                    _event(copy, EventKind.DEAD_LETTER_COPY, copy.reconsume_times, detail=where)
                )
        return found, consumed, dead_offsets

    async def _walk(self, topic: str, since_ms: int, budget: _Budget):
        for queue_id in self.store.queue_ids(topic):
            start = self.store.offset_by_time(topic, queue_id, since_ms)
            for stored in self.store.walk_queue(topic, queue_id, start, WALK_PAGE):
                if not budget.take():
                    return
                await budget.pause()
                yield stored


def _retry_copy_of(fields: dict[str, str], message: StoredMessage, names: set[str]) -> bool:
    """A 4.x consumer's copy names the original (``ORIGIN_MESSAGE_ID``); a resend's copy
    carries the producer's message id (``UNIQ_KEY``) as the dead letter did."""
    if fields.get(PROPERTY_ORIGIN_MESSAGE_ID) in names:
        return True
    return bool(message.unique_key) and fields.get(PROPERTY_UNIQ_KEY) == message.unique_key


def _resent_trail(records: list[StoredMessage], dead_offsets: list[int]) -> _PopTrail | None:
    """The records of a group's resent dead letters that name ``dead_offsets`` (this
    message's dead letters), replayed in log order; None when none was resent."""
    if not dead_offsets:
        return None
    trail = _PopTrail()
    for record in records:
        kind = record.properties.get("kind")
        for offset in dead_offsets:
            _replay(trail, kind, record.properties, record, offset)
    if not any(e.kind is EventKind.RESENT for e in trail.events):
        return None
    return trail


def _dead_letter_of(copy: StoredMessage, message: StoredMessage, names: set[str]) -> bool:
    fields = copy.properties
    if fields.get(PROPERTY_DLQ_ORIGIN_TOPIC) != message.topic:
        return False
    if fields.get(PROPERTY_ORIGIN_MESSAGE_ID) in names:  # a 4.x retry copy's dead letter
        return True
    return fields.get(PROPERTY_DLQ_ORIGIN_QUEUE) == str(message.queue_id) and fields.get(
        PROPERTY_DLQ_ORIGIN_OFFSET
    ) == str(message.queue_offset)


def _replay(trail: _PopTrail, kind: str, fields: dict, record: StoredMessage, offset: int) -> None:
    """One ``%SYS%POP`` record of the message's queue, as ``PopState.apply`` reads it,
    for the one offset: an event when it concerns the message's delivery."""
    wanted = str(offset)
    if kind == KIND_POP:
        _replay_pop(trail, fields, record, wanted)
    elif kind in (KIND_ACK, KIND_DLQ):
        for item, delivery in _pairs(record.body):
            if item == wanted and delivery == trail.current and delivery:
                ended = EventKind.ACKED if kind == KIND_ACK else EventKind.DEAD_LETTERED
                detail = f"attempt {trail.attempt}"
                trail.events.append(_event(record, ended, trail.attempt, delivery, 0, detail))
                trail.current, trail.ending = None, ended
    elif kind == KIND_CHANGE:
        if fields.get("offset") == wanted and fields.get("delivery") == trail.current:
            _replay_change(trail, fields, record)
    elif kind == KIND_RESEND:
        if wanted in record.body.decode().split(","):
            detail = f"from {fields['topic']} offset {offset}; attempts count afresh"
            trail.events.append(_event(record, EventKind.RESENT, 0, fields["delivery"], 0, detail))
            trail.current, trail.attempt, trail.ending = fields["delivery"], 0, None
    elif kind == KIND_RESET:
        detail = "the group's offsets of the queue were reset"
        if trail.current is not None:
            detail += f"; delivery of attempt {trail.attempt} ended"
        trail.events.append(_event(record, EventKind.RESET, trail.attempt, "", 0, detail))
        trail.current, trail.ending = None, EventKind.RESET
    elif kind == KIND_EXPIRE and trail.current is not None and int(fields["upto"]) >= offset:
        trail.events.append(
            _event(record, EventKind.EXPIRED, trail.attempt, "", 0, "its lite topic expired")
        )
        trail.current, trail.ending = None, EventKind.EXPIRED


def _replay_pop(trail: _PopTrail, fields: dict, record: StoredMessage, wanted: str) -> None:
    """A ``pop`` record: a delivery of the message when the record names its offset (and
    is not a restatement of the delivery in flight, ``PopState.append``)."""
    for item, attempt in _pairs(record.body):
        if item != wanted:
            continue
        delivery = fields["delivery"]
        if delivery == trail.current:
            return
        trail.current, trail.attempt = delivery, int(attempt)
        visible = int(fields["visible"])
        detail = f"attempt {attempt}, invisible until {_iso(visible)}"
        trail.events.append(
            _event(record, EventKind.DELIVERED, int(attempt), delivery, visible, detail)
        )


def _replay_change(trail: _PopTrail, fields: dict, record: StoredMessage) -> None:
    """A ``change`` of the current delivery's invisibility (a suspended one does not count
    as an attempt)."""
    visible = int(fields["visible"])
    suspended = fields.get("suspend") == "1"
    if suspended:
        trail.attempt = max(trail.attempt - 1, 0)
    detail = f"invisible until {_iso(visible)}"
    if suspended:
        detail += "; suspended: this delivery does not count as an attempt"
    trail.events.append(
        _event(
            record, EventKind.INVISIBILITY_CHANGED, trail.attempt, fields["new"], visible, detail
        )
    )
    trail.current = fields["new"]
