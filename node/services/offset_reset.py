"""Resetting a consumer group's offsets on a topic, through every door: ferrymq's Admin
ResetOffsets (the SDK's ``Admin.reset_offsets``, ``ferrymq group reset-offsets``) and
mqadmin's INVOKE_BROKER_TO_RESET_OFFSET (``resetOffsetByTime``).

Where to: per queue, the first message stored at or after a time (the search of
QueryOffsetByTime and SEARCH_OFFSET_BY_TIMESTAMP: the queue's max offset when nothing was
stored since), the queue's min offset (earliest) or its max offset (latest).

Where the queues are: a topic's queues live in several broker groups, and a group's
committed offset of a queue lives on that queue's group master. A client's request, asked
of any node, covers every queue of the topic: the node resets its own group's queues when
it is their master and hands every other part to that part's master
(``node/services/peer_admin.py``, as the caller's user, so each master decides on the same
user), first to see each queue's position, then to reset it. The answer names each queue:
broker group, queue id, old offset (-1: none), new offset. mqadmin asks every master
itself, so its request covers the receiving master's queues only.

The order of every call: admin rights; the group exists; the topic exists (and is not a
LITE topic, whose lite topics keep positions of their own); the time is one (0 up to the
year 9999, in ms); the group has a position (a committed offset or a POP cursor) on at
least one queue the request covers, or a live 4.x consumer subscribed to the topic there
(GROUP_NEVER_CONSUMED otherwise: nothing to reset is more likely a misspelt name than an
intent); then the reset, one broker group at a
time. A part that fails leaves the parts before it reset; the refusal names its broker
group (asking again resets it, and the others again to the same point).

What a reset does on a queue: the committed offset becomes the new one (a batch of
``%SYS%CONSUMER_OFFSETS`` records: replicated and replayed like any commit), and the
group's POP cursor of the queue ends with every delivery in flight on it (a ``reset``
record of ``%SYS%POP``): their receipt handles are stale from then on, and the next
receive starts from the new offset. RocketMQ 5's broker (``useServerSideResetOffset``)
also commits the offset itself and makes the next POP start there; it lets the old
checkpoints revive their messages later, which here would deliver messages from before
the reset point after it, so ferrymq ends them instead. The 4.x clients of the group
connected to the master are told (RESET_CONSUMER_CLIENT_OFFSET, ``reset_listeners``) so a
running push consumer adopts the new offsets instead of committing its cached ones over
them; and the reset queues are kept pending (``node/pending_resets.py``), so the group's
next read of one from another offset, on any door, is moved to the reset offset.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, replace

from ferrymq.protocol.ferrymq import admin_pb2 as api
from ha.replicated_store import ReplicatedStore
from node.consumer_offsets import ConsumerOffsets
from node.consumer_subscriptions import Subscriptions
from node.pending_resets import PendingResets
from node.pop_state import PopState
from node.services.admin import (
    FAILED_PRECONDITION,
    INVALID_ARGUMENT,
    NOT_FOUND,
    UNAVAILABLE,
    AdminRefused,
    refused,
)
from node.services.caller import Caller
from node.services.peer_admin import PeerAdmin
from node.services.permissions import Permissions
from node.topics import MessageType, TopicError, TopicTable
from routing.metadata import TopicRoute
from routing.replica import RoutingReplica
from store.results import PutResult

MAX_TIME_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
NO_POSITION = -1


class ResetTarget(enum.Enum):
    TIME = "time"
    EARLIEST = "earliest"
    LATEST = "latest"
    OFFSET = "offset"  # one queue to a given offset (mqadmin's -b/-q/-o)


PROTO_TARGETS = {
    ResetTarget.TIME: api.RESET_TO_TIME,
    ResetTarget.EARLIEST: api.RESET_TO_EARLIEST,
    ResetTarget.LATEST: api.RESET_TO_LATEST,
}


@dataclass(frozen=True, slots=True)
class ResetRequest:
    group: str
    topic: str
    target: ResetTarget
    timestamp_ms: int = 0  # TIME only
    broker_group: str = ""  # only this group's queues ("": every queue of the topic)
    dry_run: bool = False  # positions and where they would go; nothing changes
    queue_id: int = -1  # only this queue of the broker group (-1: all of them)
    offset: int = -1  # OFFSET only


@dataclass(frozen=True, slots=True)
class QueueReset:
    broker_group: str
    queue_id: int
    old_offset: int  # NO_POSITION: the group had none
    new_offset: int


@dataclass(frozen=True, slots=True)
class ResetOutcome:
    queues: list[QueueReset]
    consuming: bool  # the group has a position or a live subscriber on one of them


# (group, topic, the queues reset here) -> None; the remoting door tells 4.x clients.
ResetListener = Callable[[str, str, list[QueueReset]], None]


def request_message(request: ResetRequest) -> api.ResetOffsetsRequest:
    return api.ResetOffsetsRequest(
        group=request.group,
        topic=request.topic,
        target=PROTO_TARGETS[request.target],
        timestamp_ms=request.timestamp_ms,
        broker_group=request.broker_group,
        dry_run=request.dry_run,
    )


class OffsetResetService:
    def __init__(
        self,
        store: ReplicatedStore,
        topics: TopicTable,
        offsets: ConsumerOffsets,
        pop_state: PopState,
        routing: RoutingReplica,
        permissions: Permissions,
        broker_group: str,
        peers: PeerAdmin,
        pending: PendingResets | None = None,
        subscriptions: Subscriptions | None = None,
    ) -> None:
        """``peers``: how a part of a request reaches another broker group's master;
        ``pending``: where the resets the
        groups' readers have not come to yet are kept (the read service's);
        ``subscriptions``: what the groups' live 4.x consumers subscribe to here."""
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.pop_state = pop_state
        self.routing = routing
        self.permissions = permissions
        self.broker_group = broker_group
        self.peers = peers
        self.pending = pending
        self.subscriptions = subscriptions
        self.reset_listeners: list[ResetListener] = []

    # ---- the checks ----------------------------------------------------------------------
    def _checked(self, caller: Caller, request: ResetRequest) -> TopicRoute:
        """The topic's route, once the caller, the group, the topic and the time pass."""
        self.permissions.require_admin(caller)
        try:
            self.topics.group(request.group)
            route = self.routing.read(lambda state: state.topic(request.topic))
        except TopicError as error:
            raise refused(error) from None
        if route.message_type is MessageType.LITE:
            raise AdminRefused(
                FAILED_PRECONDITION,
                f"LITE_TOPIC: {route.name} is a LITE topic: its lite topics keep positions "
                "of their own, which are not reset by time",
            )
        if request.target is ResetTarget.TIME and not 0 <= request.timestamp_ms <= MAX_TIME_MS:
            raise AdminRefused(
                INVALID_ARGUMENT,
                f"ILLEGAL_TIMESTAMP: {request.timestamp_ms} is not a time (ms since the "
                f"epoch, 0 to {MAX_TIME_MS})",
            )
        if request.broker_group and route.queue_count_in(request.broker_group) == 0:
            raise AdminRefused(
                NOT_FOUND,
                f"UNKNOWN_BROKER_GROUP: topic {route.name} has no queues on broker group "
                f"{request.broker_group}",
            )
        if request.queue_id >= 0:
            self._check_queue(route, request)
        return route

    def _check_queue(self, route: TopicRoute, request: ResetRequest) -> None:
        """A request for one queue (of this broker group): it exists, and an offset
        given is within it."""
        count = route.queue_count_in(self.broker_group)
        if request.queue_id >= count:
            raise AdminRefused(
                INVALID_ARGUMENT,
                f"ILLEGAL_QUEUE: topic {route.name} has queues 0..{count - 1} on broker group "
                f"{self.broker_group}, not {request.queue_id}",
            )
        if request.target is ResetTarget.OFFSET:
            low = self.store.min_offset_in_queue(route.name, request.queue_id)
            high = self.store.max_offset_in_queue(route.name, request.queue_id)
            if not low <= request.offset <= high:
                raise AdminRefused(
                    INVALID_ARGUMENT,
                    f"ILLEGAL_OFFSET: offset {request.offset} is outside [{low}, {high}] of "
                    f"queue {request.queue_id}",
                )

    def _consuming(self, request: ResetRequest, queues: list[QueueReset]) -> bool:
        """Whether the group consumes the topic on this broker group: a position on one
        of ``queues``, or a live 4.x consumer of the group subscribed to it here (a push
        consumer commits every 5 s: it may not have yet)."""
        if any(q.old_offset != NO_POSITION for q in queues):
            return True
        subscriptions = self.subscriptions
        return subscriptions is not None and bool(subscriptions.get(request.group, request.topic))

    def _require_consumed(self, request: ResetRequest, consuming: bool) -> None:
        if not consuming:
            where = f" on broker group {request.broker_group}" if request.broker_group else ""
            raise AdminRefused(
                FAILED_PRECONDITION,
                f"GROUP_NEVER_CONSUMED: group {request.group} has no committed offset, POP "
                f"position or live subscriber on any queue of topic {request.topic}{where}: "
                "nothing to reset",
            )

    # ---- the requests --------------------------------------------------------------------
    async def reset(self, caller: Caller, request: ResetRequest) -> ResetOutcome:
        """A client's reset (every queue of the topic; a node's: the part it names, which
        the asking node checks for a position over every part)."""
        route = self._checked(caller, request)
        if request.broker_group:  # a node's part: served here or refused, never handed on
            if request.broker_group != self.broker_group:
                raise AdminRefused(
                    UNAVAILABLE,
                    f"NOT_MASTER: this node serves broker group {self.broker_group}, not "
                    f"{request.broker_group}",
                )
            self._require_master()
            return await self._here(route, request)
        parts = [replace(request, broker_group=group) for group, _ in route.queues]
        planned = [await self._part(caller, route, part, True) for part in parts]
        consuming = any(outcome.consuming for outcome in planned)
        self._require_consumed(request, consuming)
        if not request.dry_run:
            planned = [await self._part(caller, route, part) for part in parts]
        return ResetOutcome([q for outcome in planned for q in outcome.queues], consuming)

    async def reset_broker_group(self, caller: Caller, request: ResetRequest) -> list[QueueReset]:
        """mqadmin's reset of one broker (this node's group): its queues of the topic,
        refused GROUP_NEVER_CONSUMED when the group does not consume it here."""
        request = replace(request, broker_group=self.broker_group)
        route = self._checked(caller, request)
        self._require_master()
        self._require_consumed(request, self._consuming(request, self._plan(route, request)))
        return await self._reset_here(route, request)

    def _require_master(self) -> None:
        if not self.store.is_master:
            raise AdminRefused(
                UNAVAILABLE,
                f"NOT_MASTER: this node is not the master of broker group {self.broker_group} "
                "now: ask its master",
            )

    async def _here(self, route: TopicRoute, part: ResetRequest) -> ResetOutcome:
        """This broker group's part, planned (a dry run) or reset."""
        planned = self._plan(route, part)
        consuming = self._consuming(part, planned)
        if not part.dry_run:
            planned = await self._reset_here(route, part)
        return ResetOutcome(planned, consuming)

    async def _part(
        self, caller: Caller, route: TopicRoute, part: ResetRequest, dry_run: bool = False
    ) -> ResetOutcome:
        """One broker group's queues: reset (or planned) here when this node is their
        master, else by their master."""
        part = replace(part, dry_run=part.dry_run or dry_run)
        if part.broker_group == self.broker_group and self.store.is_master:
            return await self._here(route, part)
        return await self._ask_master(caller, part)

    async def _ask_master(self, caller: Caller, part: ResetRequest) -> ResetOutcome:
        """``part`` as its broker group's master answers it (AdminRefused with its code
        when it refuses; UNAVAILABLE when there is none to ask or it does not answer)."""
        request = request_message(part)
        answer = await self.peers.call_master(caller, part.broker_group, "ResetOffsets", request)
        queues = [
            QueueReset(q.broker_group, q.queue_id, q.old_offset, q.new_offset)
            for q in answer.queues
        ]
        return ResetOutcome(queues, answer.consuming)

    # ---- this broker group's queues ------------------------------------------------------
    def _position(self, group: str, topic: str, queue_id: int) -> int:
        """Where the group is on the queue: its POP cursor's consumed point, else its
        committed offset, else NO_POSITION (as GroupProgress reads it)."""
        cursor = self.pop_state.cursor((group, topic, queue_id))
        if cursor is not None:
            return cursor.consumed_below
        committed = self.offsets.get(group, topic, queue_id)
        return NO_POSITION if committed is None else committed

    def _target(self, topic: str, queue_id: int, request: ResetRequest) -> int:
        store = self.store
        if request.target is ResetTarget.EARLIEST:
            return store.min_offset_in_queue(topic, queue_id)
        if request.target is ResetTarget.LATEST:
            return store.max_offset_in_queue(topic, queue_id)
        if request.target is ResetTarget.OFFSET:
            return request.offset
        return store.offset_by_time(topic, queue_id, request.timestamp_ms)

    def _plan(self, route: TopicRoute, request: ResetRequest) -> list[QueueReset]:
        return [
            QueueReset(
                self.broker_group,
                queue_id,
                self._position(request.group, route.name, queue_id),
                self._target(route.name, queue_id, request),
            )
            for queue_id in range(route.queue_count_in(self.broker_group))
            if request.queue_id in (-1, queue_id)
        ]

    async def _reset_here(self, route: TopicRoute, request: ResetRequest) -> list[QueueReset]:
        """Commit the new offsets, then end the POP cursors: a receive after the reset
        starts a cursor at the committed offset."""
        self._require_master()
        planned = self._plan(route, request)
        group, topic = request.group, route.name
        result = await self.offsets.reset(group, topic, {q.queue_id: q.new_offset for q in planned})
        if not result.ok:
            raise AdminRefused(
                UNAVAILABLE,
                f"the reset of broker group {self.broker_group}'s offsets was "
                f"{_how(result)}: {result.status.name}; reset again",
            )
        keys = [(group, topic, q.queue_id) for q in planned]
        ended = [(key, self.pop_state.reset(key)) for key in keys if self.pop_state.cursor(key)]
        if ended:
            outcome = await self.pop_state.append([record for _, (record, _) in ended])
            if not outcome.appended:
                for key, (_, before) in ended:
                    self.pop_state.restore_reset(key, before)
            if not outcome.ok:
                raise AdminRefused(
                    UNAVAILABLE,
                    f"offsets reset on broker group {self.broker_group}; the end of its POP "
                    f"positions was {_how(outcome)}: {outcome.status.name}; reset again",
                )
        if self.pending is not None:
            self.pending.mark(group, topic, {q.queue_id: q.new_offset for q in planned})
        for listener in self.reset_listeners:
            listener(group, topic, planned)
        return planned


def _how(result: PutResult) -> str:
    """A failed append: refused (the log never had it), or written but not confirmed."""
    return "not confirmed (it may have taken effect)" if result.appended else "refused"
