"""Transactional messages: half messages, EndTransaction, and orphan checks.

A transactional send stores a *half* message in ``%SYS%TRANS_HALF`` (durable, replicated,
invisible to consumers of the real topic) and answers a transaction id. EndTransaction
COMMIT appends the copy for the real topic together with a ``commit`` record in
``%SYS%TRANS_OP`` (one atomic batch: visible exactly once); ROLLBACK appends a
``rollback`` record. A resolved transaction answers a repeated resolution of the same kind
with OK and a contradicting one with INVALID_TRANSACTION_ID.

Every door ends a transaction here (``end``: RocketMQ 5 EndTransaction, 4.x
END_TRANSACTION), with PUBLISH on the half's topic as the node holds it.

Orphans: a half still pending after the check interval is offered to a producer
(``CheckTargets``): first to a 4.x producer of the half's producer group (the remoting door
sends CHECK_TRANSACTION_STATE over its connection), then to a RocketMQ 5 producer whose
settings name the topic (its door sends ``recover_orphaned_transaction_command`` on its
Telemetry stream), only ever to one that may publish to the half's topic; the producer
answers with EndTransaction or END_TRANSACTION, whichever protocol sent the half. Every check is a
``check`` record, so the count survives restarts; when the count reaches the maximum the
half is rolled back with the reason in the record. A check is counted whether or not a
producer was connected, so an orphan whose producers are gone for good is rolled back in
bounded time.

State (derived from the log, ``node.system_state``): pending = halves minus resolved halves,
rebuilt at start from both topics. In memory per pending half: transaction id, real topic,
store time, checks.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ferrymq.codec.commitlog_record import StoredMessage
from ferrymq.codec.properties import PROPERTY_TRANSACTION_ID
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ha.replicated_store import ReplicatedStore
from node.admission import store_refusal
from node.parked import park, real_topic_of, release
from node.rpc_status import OK, InvalidRequest
from node.services.caller import Caller
from node.services.permissions import Permissions, publish
from store.message import Message

log = logging.getLogger(__name__)

HALF_TOPIC = "%SYS%TRANS_HALF"
OP_TOPIC = "%SYS%TRANS_OP"
KIND_COMMIT = "commit"
KIND_ROLLBACK = "rollback"
KIND_CHECK = "check"
RESOLUTIONS = {pb.COMMIT: KIND_COMMIT, pb.ROLLBACK: KIND_ROLLBACK}
SOURCES = frozenset(pb.TransactionSource.values())
CHECK_SCAN_INTERVAL_S = 0.5
REPLAY_PAGE = 256
RESOLVED_MEMORY = 100_000  # resolved transaction ids remembered for idempotent answers

# Asks one producer about a half: (transaction id, the half record as stored) -> whether
# the producer was given the check (its door had room for it).
Offer = Callable[[str, StoredMessage], bool]
TOPICS_PER_PRODUCER_MAX = 1024  # a RocketMQ 5 producer's settings name its topics
GROUPS_PER_PRODUCER = 64  # a 4.x connection's producer groups by default (heartbeats, halves)
PRODUCER_GROUPS_MAX = 10_000  # 4.x producer groups with a producer registered here
PROPERTY_PRODUCER_GROUP = "PGROUP"  # a 4.x half's producer group


@dataclass
class Half:
    queue_offset: int  # in HALF_TOPIC
    transaction_id: str
    topic: str
    stored_ms: int
    checks: int = 0


@dataclass(eq=False)
class _Producer:
    caller: Caller
    offer: Offer
    topics: set[str] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)


class CheckTargets:
    """The producers a half may be asked about: RocketMQ 5 producers by the topics their
    settings name, 4.x producers by their producer groups. A producer is asked only about
    a half of a topic it may publish to (``permissions``): a client that names a topic or a
    group learns nothing of other users' halves. Each producer's registrations are bounded
    and leave in one step when it goes (``unregister``), whatever their number.

    Thread-safety: owned by the node's event loop."""

    def __init__(self, permissions: Permissions, max_groups: int = GROUPS_PER_PRODUCER) -> None:
        """``max_groups``: 4.x producer groups one producer may be registered for
        (``[messages] max_producer_groups_per_client``)."""
        self.permissions = permissions
        self.max_groups = max_groups
        self._producers: dict[object, _Producer] = {}  # by the door's key (stream, connection)
        self._by_topic: dict[str, dict[object, None]] = {}  # in round-robin order
        self._by_group: dict[str, dict[object, None]] = {}

    def register(
        self,
        key: object,
        caller: Caller,
        offer: Offer,
        topics: list[str] = (),  # type: ignore[assignment]
        groups: list[str] = (),  # type: ignore[assignment]
    ) -> None:
        """``key`` (a Telemetry stream, a connection) produces for ``topics`` (they replace
        the ones it named before: a settings update) and for ``groups`` too (added to its
        groups); ``InvalidRequest`` past a bound, registering nothing of the request."""
        producer = self._producers.get(key)
        if len(topics) > TOPICS_PER_PRODUCER_MAX:
            raise InvalidRequest(
                pb.BAD_REQUEST,
                f"publishing names {len(topics)} topics, the limit is {TOPICS_PER_PRODUCER_MAX}",
            )
        new_groups = set(groups) - (producer.groups if producer else set())
        held = len(producer.groups) if producer else 0
        if held + len(new_groups) > self.max_groups:
            raise InvalidRequest(
                pb.TOO_MANY_REQUESTS,
                f"a client may produce for {self.max_groups} producer groups here, "
                f"this one names {held + len(new_groups)}",
            )
        unknown = [g for g in new_groups if g not in self._by_group]
        if len(self._by_group) + len(unknown) > PRODUCER_GROUPS_MAX:
            raise InvalidRequest(
                pb.TOO_MANY_REQUESTS,
                f"this node has producers of {PRODUCER_GROUPS_MAX} producer groups, the limit",
            )
        if producer is None:
            producer = self._producers[key] = _Producer(caller, offer)
        producer.caller = caller
        if topics:
            self._leave(key, self._by_topic, producer.topics)
            producer.topics = set(topics)
            for topic in producer.topics:
                self._by_topic.setdefault(topic, {})[key] = None
        for group in new_groups:
            producer.groups.add(group)
            self._by_group.setdefault(group, {})[key] = None

    def unregister(self, key: object) -> None:
        producer = self._producers.pop(key, None)
        if producer is not None:
            self._leave(key, self._by_topic, producer.topics)
            self._leave(key, self._by_group, producer.groups)

    @staticmethod
    def _leave(key: object, table: dict[str, dict[object, None]], names: set[str]) -> None:
        for name in names:
            keys = table.get(name)
            if keys is not None:
                keys.pop(key, None)
                if not keys:
                    del table[name]

    @property
    def registered(self) -> bool:
        return bool(self._producers)

    def offer(self, transaction_id: str, half: StoredMessage) -> bool:
        """Ask the next producer of the half's 4.x producer group, else of its topic, that
        may publish to its topic (round robin); False when none took it."""
        topic = real_topic_of(half)
        group = half.properties.get(PROPERTY_PRODUCER_GROUP, "")
        for table, name in ((self._by_group, group), (self._by_topic, topic)):
            keys = table.get(name) if name else None
            for key in list(keys or ()):
                keys.pop(key)
                keys[key] = None  # to the back: the next check asks the next producer
                producer = self._producers[key]
                if not self.permissions.may(producer.caller, publish(topic)):
                    continue
                if producer.offer(transaction_id, half):
                    return True
        return False


@dataclass(slots=True)
class EndRequest:
    """A producer's resolution of one transaction, named by its id, or (4.x) by its half's
    commit log offset (the offset in its send's message id)."""

    transaction_id: str
    resolution: int | None  # pb.COMMIT, pb.ROLLBACK; None: not known yet (4.x, no change)
    source: int = pb.SOURCE_CLIENT
    topic: str = ""  # the topic the request names, if any
    half_offset: int = -1


class TransactionService:
    def __init__(
        self,
        store: ReplicatedStore,
        check_interval_ms: int,
        max_checks: int,
        permissions: Permissions,
        check_master: Callable[[], None] = lambda: None,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        is_master: Callable[[], bool] = lambda: True,
        max_producer_groups: int = GROUPS_PER_PRODUCER,
    ) -> None:
        self.store = store
        self.permissions = permissions
        self.check_master = check_master  # raises InvalidRequest HA_NOT_AVAILABLE on a slave
        self.is_master = is_master  # only the master checks (check_relay.py: the others)
        self.check_interval_ms = check_interval_ms
        self.max_checks = max_checks
        self.clock_ms = clock_ms
        self.targets = CheckTargets(permissions, max_producer_groups)
        self._pending: dict[str, Half] = {}  # by transaction id
        self._resolved: dict[str, str] = {}  # transaction id -> kind, bounded

    @property
    def pending(self) -> int:
        return len(self._pending)

    # ---- state ---------------------------------------------------------------------
    def reload(self) -> None:
        """Forget and rebuild from the log (a promoted slave)."""
        self._pending.clear()
        self._resolved.clear()
        self.load()

    def load(self) -> None:
        ops: dict[int, tuple[str, int]] = {}  # half offset -> (last kind, checks)
        for stored in self._records(OP_TOPIC):
            offset = int(stored.properties["half"])
            kind = stored.properties["kind"]
            checks = ops.get(offset, ("", 0))[1] + (kind == KIND_CHECK)
            ops[offset] = (kind, checks)
        for stored in self._records(HALF_TOPIC):
            kind, checks = ops.get(stored.queue_offset, ("", 0))
            transaction_id = stored.properties[PROPERTY_TRANSACTION_ID]
            if kind in (KIND_COMMIT, KIND_ROLLBACK):
                self._remember(transaction_id, kind)
                continue
            self._pending[transaction_id] = Half(
                stored.queue_offset,
                transaction_id,
                real_topic_of(stored),
                stored.store_timestamp_ms,
                checks,
            )

    def _records(self, topic: str):
        return self.store.walk_queue(topic, 0, page=REPLAY_PAGE)

    def _remember(self, transaction_id: str, kind: str) -> None:
        if len(self._resolved) >= RESOLVED_MEMORY:
            self._resolved.pop(next(iter(self._resolved)))
        self._resolved[transaction_id] = kind

    # ---- sending -------------------------------------------------------------------
    @staticmethod
    def half_of(message: Message) -> tuple[Message, str]:
        """The half record for a transactional message, and its new transaction id."""
        transaction_id = secrets.token_hex(16).upper()
        return park(message, HALF_TOPIC, {PROPERTY_TRANSACTION_ID: transaction_id}), transaction_id

    def sent(self, transaction_id: str, topic: str, half_queue_offset: int) -> None:
        """Track a half the store accepted."""
        self._pending[transaction_id] = Half(
            half_queue_offset, transaction_id, topic, self.clock_ms()
        )

    # ---- ending a transaction --------------------------------------------------------
    async def end(self, caller: Caller, request: EndRequest) -> pb.Status:
        """Commit or roll back the transaction ``request`` names (a resolution of None:
        the producer does not know yet, and nothing changes): OK, or the store's refusal;
        ``InvalidRequest`` before anything changed. Needs PUBLISH on the topic of the half
        (read from the node's own record of it, never from the request) and on the topic
        the request names, if it names one."""
        transaction_id = self.named(request.transaction_id, request.half_offset) or ""
        half = self._pending.get(transaction_id)
        needs = list(publish(half.topic)) if half is not None else []
        if request.topic and (half is None or request.topic != half.topic):
            needs += publish(request.topic)
        self.permissions.require(caller, needs)
        self.check_master()
        if request.resolution is None:
            return pb.Status(code=pb.OK, message="unknown: the half stays")
        kind = RESOLUTIONS.get(request.resolution)
        if kind is None:
            raise InvalidRequest(pb.BAD_REQUEST, "resolution must be COMMIT or ROLLBACK")
        if half is None:
            resolved = self._resolved.get(transaction_id)
            if resolved == kind:
                return OK  # a repeated resolution
            detail = (
                f"transaction already resolved as {resolved}"
                if resolved
                else "no pending transaction has this id"
            )
            raise InvalidRequest(pb.INVALID_TRANSACTION_ID, detail)
        if request.topic and request.topic != half.topic:
            raise InvalidRequest(
                pb.INVALID_TRANSACTION_ID, f"transaction belongs to topic {half.topic}"
            )
        # The source only labels the record: a number this node does not know is kept as is.
        source = request.source
        reason = pb.TransactionSource.Name(source) if source in SOURCES else f"source {source}"
        return await self._resolve(half, kind, reason=reason)

    async def _resolve(self, half: Half, kind: str, reason: str) -> pb.Status:
        # Taken out of pending before the append, so a concurrent resolution of the same
        # transaction cannot append a second copy; put back if the append fails.
        del self._pending[half.transaction_id]
        batch = [self._op(half, kind, reason)]
        if kind == KIND_COMMIT:
            stored = self._read_half(half)
            if stored is None:
                batch = [self._op(half, KIND_ROLLBACK, "half message removed by retention")]
            else:
                batch.insert(0, release(stored))  # keeps the transaction id
        result = await self.store.put_messages_async(batch)
        if not result.ok:
            self._pending[half.transaction_id] = half
            return store_refusal(result)
        self._remember(half.transaction_id, kind)
        return OK

    def _op(self, half: Half, kind: str, reason: str) -> Message:
        return Message(
            OP_TOPIC, b"", properties={"kind": kind, "half": str(half.queue_offset), "why": reason}
        )

    def _read_half(self, half: Half) -> StoredMessage | None:
        return self.store.message_at(HALF_TOPIC, 0, half.queue_offset)

    # ---- orphan checks -------------------------------------------------------------
    async def run_checks(self) -> None:
        """Check orphans until cancelled."""
        while True:
            try:
                await self.check_orphans()
            except Exception:  # one failed round must not end the checks
                log.exception("orphan transaction check failed")
            await asyncio.sleep(CHECK_SCAN_INTERVAL_S)

    def _offer_check(self, half: Half, stored: StoredMessage) -> bool:
        return self.targets.offer(half.transaction_id, stored)

    def knows(self, transaction_id: str) -> bool:
        """Whether ``transaction_id`` is pending or remembered as resolved."""
        return transaction_id in self._pending or transaction_id in self._resolved

    def named(self, transaction_id: str, half_physical_offset: int) -> str | None:
        """The transaction a 4.x END_TRANSACTION names: by its id when known here, else
        by its half's commit log offset (the offset in its send's message id)."""
        if self.knows(transaction_id):
            return transaction_id
        if half_physical_offset < 0:
            return None
        return self.transaction_of(half_physical_offset)

    def transaction_of(self, half_physical_offset: int) -> str | None:
        """The transaction id of the half stored at ``half_physical_offset`` (how a 4.x
        client names a transaction: the commit log offset in its send's message id)."""
        stored = self.store.look_message_by_offset(half_physical_offset)
        if stored is None or stored.topic != HALF_TOPIC:
            return None
        return stored.properties.get(PROPERTY_TRANSACTION_ID)

    async def check_orphans(self) -> int:
        """Offer every half whose next check is due to a producer; roll back those out of
        checks. Returns how many were checked or rolled back. Only the master checks: a
        slave's pending set is what it loaded at start (it could only offer stale checks,
        every round, since it cannot count them)."""
        if not self.is_master():
            return 0
        now = self.clock_ms()
        due = [
            h
            for h in self._pending.values()
            if now - h.stored_ms >= self.check_interval_ms * (h.checks + 1)
        ]
        for half in due:
            if self._pending.get(half.transaction_id) is not half:
                continue  # resolved meanwhile
            if half.checks >= self.max_checks:
                await self._resolve(
                    half, KIND_ROLLBACK, f"no resolution after {half.checks} checks"
                )
                continue
            stored = self._read_half(half)
            if stored is not None:
                self._offer_check(half, stored)
            result = await self.store.put_messages_async([self._op(half, KIND_CHECK, "check")])
            if result.ok:
                half.checks += 1
        return len(due)
