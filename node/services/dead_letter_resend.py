"""Resending a consumer group's dead letters, through every door that serves it: Admin
ResendDeadLetters (the SDK's ``Admin.resend_dead_letters``, ``ferrymq group resend-dlq``,
the console's group page) and Admin ListDeadLetters (what the group's dead-letter queue
holds, each entry saying whether it was resent).

What a resend is: each dead letter named (DLQ offsets of one broker group: a selection, or
every one from A to B) is given back to the group that dead-lettered it, and to no other
group of its topic, with its properties and message id and a fresh count of attempts. The
two kinds of consumers get a redelivery differently, so a resend writes, in ONE CommitLog
batch on the broker group's master:

- for RocketMQ 4.x push consumers, which subscribe ``%RETRY%<group>`` beside their topics
  (``node/consumer_retry.py``): a copy in ``%RETRY%<group>`` (its queue on this broker
  group), ``RETRY_TOPIC`` naming the topic it was sent to (the clients deliver it as a
  message of that topic), ``UNIQ_KEY`` (its message id) kept, ``reconsume_times`` 0;
- for POP consumers (RocketMQ 5 SimpleConsumer and PushConsumer, the SDK's
  SimpleConsumer; of a LITE topic, the lite consumers subscribed to the message's lite
  topic), which do not read ``%RETRY%<group>`` here: a ``resend`` record of ``%SYS%POP``
  (``node/pop_state.py``) that puts the dead letter in flight for the group, visible now
  with attempt 0, so the group's next receive of its topic delivers it
  (``node/services/pop.py``); it also marks the offsets resent for good.

A group with consumers of both kinds gets the message once through each (at least once).
The log is the record of the resend: replayed at a restart after kill -9, copied to the
replicas and replayed by a promoted one. A second resend of a dead letter already resent is
**idempotent**: it is skipped and answered as ``already_resent`` (so "resend all" can be
asked again after a failure without duplicates); a dead letter that comes back to the DLQ
after a resend is a new entry there, which may be resent again.

The order of every call: who may (``node/services/permissions.py``: admin, or a user who
may consume as the group and read its dead-letter topic; a listing: read it); the group
exists; the request's shape (a selection or a range, at most ``RESEND_MAX`` messages); the
cluster's upgrade is finalized (``UPGRADE_NOT_FINALIZED``: a node of 0.1.0 cannot read a
POP snapshot that holds resent offsets); the broker group ("" is this node's); then, on
that group's master (another node hands the call to it through ``PeerAdmin`` as the
caller's user, once: the master serves it or refuses), the DLQ is not empty
(``DLQ_EMPTY``) and every offset is in it
(``ILLEGAL_OFFSET``), then the batch.

Thread-safety: owned by the node's event loop; one resend at a time per node (the check
of what was resent and the append are one step).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from ferrymq.codec.commitlog_record import StoredMessage
from ferrymq.codec.properties import PROPERTY_LITE_TOPIC
from ferrymq.protocol.ferrymq import admin_pb2 as api
from ha.replicated_store import ReplicatedStore
from node.consumer_retry import PROPERTY_DELAY, PROPERTY_RETRY_TOPIC
from node.dead_letters import PROPERTY_DLQ_ORIGIN_TOPIC
from node.lite_names import is_lmq, lmq_name
from node.long_polling import QueueWaiters
from node.pop_state import PopState
from node.receipt_handle import new_delivery_id
from node.services.admin import (
    FAILED_PRECONDITION,
    INVALID_ARGUMENT,
    UNAVAILABLE,
    AdminRefused,
    refused,
)
from node.services.caller import Caller
from node.services.peer_admin import PeerAdmin
from node.services.permissions import Need, Permissions, read, resend_dead_letters
from node.services.pop import DEAD_LETTER_MARKS, resent_key
from node.topics import TopicError, TopicTable
from routing.metadata import dead_letter_topic_of
from routing.replica import RoutingReplica
from store.message import Message

RESEND_MAX = 1000  # dead letters per call: one batch, one event-loop turn to build it
# The batch's records, in bytes (at least one message): it must fit a CommitLog segment and
# not hold the replication link for long. What does not fit is answered ``not_yet``.
RESEND_BYTES_MAX = 8 << 20
LIST_MAX = 200  # entries per ListDeadLetters page
NOT_COPIED = (*DEAD_LETTER_MARKS, PROPERTY_DELAY)  # properties a resent copy drops


@dataclass(frozen=True, slots=True)
class ResendRequest:
    group: str
    broker_group: str = ""  # "": this node's
    offsets: tuple[int, ...] = ()  # a selection of DLQ offsets ...
    from_offset: int = -1  # ... or every one from ``from_offset`` to ``to_offset``
    to_offset: int = -1  # (inclusive)
    handed: bool = False  # handed over by another node: served here or refused


@dataclass(frozen=True, slots=True)
class ResendOutcome:
    broker_group: str
    resent: tuple[int, ...]
    already_resent: tuple[int, ...]
    not_yet: tuple[int, ...] = ()  # named, but past the call's byte bound: ask again


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One entry of a group's dead-letter queue, as the console lists it."""

    offset: int
    message_id: str
    origin_topic: str
    tags: str
    keys: str
    attempts: int
    store_timestamp_ms: int
    body_bytes: int
    resent: bool


@dataclass(frozen=True, slots=True)
class DeadLetterPage:
    broker_group: str
    min_offset: int
    max_offset: int  # one past the last entry
    entries: tuple[DeadLetter, ...]


def request_message(request: ResendRequest) -> api.ResendDeadLettersRequest:
    return api.ResendDeadLettersRequest(
        group=request.group,
        broker_group=request.broker_group,
        offsets=list(request.offsets),
        from_offset=request.from_offset,
        to_offset=request.to_offset,
        handed=request.handed,
    )


def outcome_of(answer: api.ResendDeadLettersResponse) -> ResendOutcome:
    return ResendOutcome(
        answer.broker_group,
        tuple(answer.resent),
        tuple(answer.already_resent),
        tuple(answer.not_yet),
    )


def retry_copy(retry_topic: str, raw: StoredMessage) -> Message:
    """The copy of the dead letter ``raw`` for the group's 4.x consumers: as the producer
    sent it (the dead-letter marks and any delay level dropped), ``RETRY_TOPIC`` its topic,
    no attempts yet."""
    properties = {k: v for k, v in raw.properties.items() if k not in NOT_COPIED}
    properties[PROPERTY_RETRY_TOPIC] = raw.properties.get(PROPERTY_DLQ_ORIGIN_TOPIC, raw.topic)
    return Message(
        retry_topic,
        raw.body,
        0,
        properties,
        raw.flag,
        0,
        raw.born_timestamp_ms,
        raw.born_host,
        0,
    )


class DeadLetterResendService:
    def __init__(
        self,
        store: ReplicatedStore,
        topics: TopicTable,
        pop_state: PopState,
        waiters: QueueWaiters,
        routing: RoutingReplica,
        permissions: Permissions,
        broker_group: str,
        peers: PeerAdmin,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        lite_changed: Callable[[str], None] | None = None,
    ) -> None:
        """``peers``: how a call reaches another node's Admin door;
        ``lite_changed(lmq)``: wakes the lite consumers of a lite topic (``LiteService``)."""
        self.store = store
        self.topics = topics
        self.pop_state = pop_state
        self.waiters = waiters
        self.routing = routing
        self.permissions = permissions
        self.broker_group = broker_group
        self.peers = peers
        self.clock_ms = clock_ms
        self.lite_changed = lite_changed
        self._one_at_a_time = asyncio.Lock()

    # ---- the checks ----------------------------------------------------------------------
    def _checked_group(self, caller: Caller, group: str, needs: tuple[Need, ...]) -> str:
        """The group's dead-letter topic, once the caller holds ``needs`` and the group
        exists."""
        self.permissions.require(caller, needs)
        try:
            self.topics.group(group)
            return self.topics.dead_letter_topic(group).name
        except TopicError as error:
            raise refused(error) from None

    @staticmethod
    def _check_shape(request: ResendRequest) -> None:
        ranged = request.from_offset >= 0 or request.to_offset >= 0
        if bool(request.offsets) == ranged:
            raise AdminRefused(
                INVALID_ARGUMENT,
                "ILLEGAL_SELECTION: name the dead letters either by offsets or by a range "
                "from_offset..to_offset, one of the two",
            )
        if ranged and not 0 <= request.from_offset <= request.to_offset:
            raise AdminRefused(
                INVALID_ARGUMENT,
                f"ILLEGAL_RANGE: {request.from_offset}..{request.to_offset} is not a range of "
                "offsets (0 <= from_offset <= to_offset)",
            )
        count = request.to_offset - request.from_offset + 1 if ranged else len(set(request.offsets))
        if count > RESEND_MAX:
            raise AdminRefused(
                INVALID_ARGUMENT,
                f"TOO_MANY: {count} dead letters in one resend, the limit is {RESEND_MAX}: "
                "resend them in parts",
            )
        if any(offset < 0 for offset in request.offsets):
            raise AdminRefused(INVALID_ARGUMENT, "ILLEGAL_OFFSET: an offset is negative")

    def _check_offsets(self, dead_letters: str, request: ResendRequest) -> list[int]:
        """The offsets the request names, once every one is in the dead-letter queue."""
        low = self.store.min_offset_in_queue(dead_letters, 0)
        high = self.store.max_offset_in_queue(dead_letters, 0)
        if high <= low:
            raise AdminRefused(
                FAILED_PRECONDITION,
                f"DLQ_EMPTY: {dead_letters} holds no message on broker group "
                f"{self.broker_group}: nothing to resend",
            )
        if request.offsets:
            offsets = sorted(set(request.offsets))
        else:
            offsets = list(range(request.from_offset, request.to_offset + 1))
        outside = [offset for offset in offsets if not low <= offset < high]
        if outside:
            raise AdminRefused(
                INVALID_ARGUMENT,
                f"ILLEGAL_OFFSET: {dead_letters} on broker group {self.broker_group} holds "
                f"offsets {low}..{high - 1}; {outside[0]} is outside"
                + (f" (and {len(outside) - 1} more)" if len(outside) > 1 else ""),
            )
        return offsets

    # ---- the requests --------------------------------------------------------------------
    async def resend(self, caller: Caller, request: ResendRequest) -> ResendOutcome:
        """Resend the dead letters ``request`` names (module docstring)."""
        dead_letters = self._checked_group(
            caller, request.group, resend_dead_letters(request.group)
        )
        self._check_shape(request)
        if self.routing.read(lambda state: state.awaits_finalize):
            # A node of 0.1.0 cannot read a POP snapshot that holds resent offsets.
            raise AdminRefused(
                FAILED_PRECONDITION,
                "UPGRADE_NOT_FINALIZED: dead-letter resends wait until every node runs this "
                "release and the upgrade is finalized (ferrymq cluster finalize-upgrade)",
            )
        broker_group = request.broker_group or self.broker_group
        if broker_group != self.broker_group or not self.store.is_master:
            if request.handed:
                raise AdminRefused(
                    UNAVAILABLE,
                    f"NOT_MASTER: this node is not the master of broker group {broker_group} "
                    "now: ask its master",
                )
            answer = await self._ask_master(
                caller,
                broker_group,
                "ResendDeadLetters",
                request_message(replace(request, broker_group=broker_group, handed=True)),
            )
            return outcome_of(answer)
        async with self._one_at_a_time:
            return await self._resend_here(request.group, dead_letters, request)

    async def _resend_here(
        self, group: str, dead_letters: str, request: ResendRequest
    ) -> ResendOutcome:
        offsets = self._check_offsets(dead_letters, request)
        key = resent_key(group)
        done = self.pop_state.resent(key)
        already = tuple(offset for offset in offsets if offset in done)
        chosen = [offset for offset in offsets if offset not in done]
        if not chosen:
            return ResendOutcome(self.broker_group, (), already)
        retry_topic = self.topics.retry_topic(group).name
        copies, origins, size = [], set(), 0
        for offset in chosen:
            raw = self.store.message_at(dead_letters, 0, offset)
            if raw is None:
                raise AdminRefused(
                    UNAVAILABLE,
                    f"{dead_letters} offset {offset} is not readable now; resend again",
                )
            if copies and size + raw.size > RESEND_BYTES_MAX:
                break
            size += raw.size
            copies.append(retry_copy(retry_topic, raw))
            origin = raw.properties.get(PROPERTY_DLQ_ORIGIN_TOPIC, "")
            lite_topic = raw.properties.get(PROPERTY_LITE_TOPIC)
            origins.add(origin if lite_topic is None else lmq_name(origin, lite_topic))
        chosen, not_yet = chosen[: len(copies)], tuple(chosen[len(copies) :])
        delivery = new_delivery_id()
        record = self.pop_state.resend(key, chosen, delivery, self.clock_ms())
        result = await self.pop_state.append([*copies, record])
        if result.appended:  # in the log, confirmed or not: it stands
            self._wake(origins)
        else:
            self.pop_state.restore_resend(key, chosen, delivery)
        if not result.ok:
            how = "not confirmed (it may have taken effect)" if result.appended else "refused"
            raise AdminRefused(
                UNAVAILABLE,
                f"the resend on broker group {self.broker_group} was {how}: "
                f"{result.status.name}; resend again (what was resent is skipped)",
            )
        return ResendOutcome(self.broker_group, tuple(chosen), already, not_yet)

    def _wake(self, origins: set[str]) -> None:
        """Wake the receives waiting on the resent messages' topics: the POP receives of a
        topic, the lite consumers of a lite topic (named by its queue, ``%LMQ%...``)."""
        for name in origins:
            if is_lmq(name):
                if self.lite_changed is not None:
                    self.lite_changed(name)
                continue
            config = self.topics.topics.get(name)
            for queue_id in range(config.queue_count if config is not None else 0):
                self.waiters.notify(name, queue_id)

    async def page(
        self, caller: Caller, group: str, broker_group: str, from_offset: int, limit: int
    ) -> DeadLetterPage:
        """Up to ``limit`` (at most ``LIST_MAX``) entries of the group's dead-letter queue
        from ``from_offset`` (-1: the last ``limit`` ones), read on the broker group's
        master (which knows what was resent). Who may: whoever may read ``%DLQ%<group>``."""
        dead_letters = self._checked_group(caller, group, read(dead_letter_topic_of(group)))
        if not 1 <= limit <= LIST_MAX:
            raise AdminRefused(
                INVALID_ARGUMENT, f"ILLEGAL_LIMIT: {limit} entries, between 1 and {LIST_MAX}"
            )
        broker_group = broker_group or self.broker_group
        if broker_group != self.broker_group or not self.store.is_master:
            request = api.ListDeadLettersRequest(
                group=group, broker_group=broker_group, from_offset=from_offset, limit=limit
            )
            answer = await self._ask_master(caller, broker_group, "ListDeadLetters", request)
            return page_of(answer)
        return self._page(group, dead_letters, from_offset, limit)

    def _page(self, group: str, dead_letters: str, from_offset: int, limit: int) -> DeadLetterPage:
        low = self.store.min_offset_in_queue(dead_letters, 0)
        high = self.store.max_offset_in_queue(dead_letters, 0)
        start = max(low, high - limit) if from_offset < 0 else max(low, from_offset)
        done = self.pop_state.resent(resent_key(group))
        entries = []
        for offset in range(start, min(high, start + limit)):
            raw = self.store.message_at(dead_letters, 0, offset)
            if raw is None:
                continue
            entries.append(
                DeadLetter(
                    offset,
                    raw.unique_key or raw.offset_message_id,
                    raw.properties.get(PROPERTY_DLQ_ORIGIN_TOPIC, ""),
                    raw.tags or "",
                    " ".join(raw.keys),
                    raw.reconsume_times,
                    raw.store_timestamp_ms,
                    len(raw.body),
                    offset in done,
                )
            )
        return DeadLetterPage(self.broker_group, low, high, tuple(entries))

    async def _ask_master(self, caller: Caller, broker_group: str, method: str, request):
        return await self.peers.call_master(caller, broker_group, method, request)


def page_of(answer: api.ListDeadLettersResponse) -> DeadLetterPage:
    entries = tuple(
        DeadLetter(
            e.offset,
            e.message_id,
            e.origin_topic,
            e.tags,
            e.keys,
            e.attempts,
            e.store_timestamp_ms,
            e.body_bytes,
            e.resent,
        )
        for e in answer.entries
    )
    return DeadLetterPage(answer.broker_group, answer.min_offset, answer.max_offset, entries)
