"""Transactional messages: half messages, EndTransaction, and orphan checks.

A transactional send stores a *half* message in ``%SYS%TRANS_HALF`` (durable, replicated,
invisible to consumers of the real topic) and answers a transaction id. EndTransaction
COMMIT appends the copy for the real topic together with a ``commit`` record in
``%SYS%TRANS_OP`` (one atomic batch: visible exactly once); ROLLBACK appends a
``rollback`` record. A resolved transaction answers a repeated resolution of the same kind
with OK and a contradicting one with INVALID_TRANSACTION_ID.

Orphans: a half still pending after the check interval is offered to a producer: first
to the check targets other doors add (the remoting port's ``CHECK_TRANSACTION_STATE`` to a
connection of the half's 4.x producer group, ``node/remoting/broker_transactions.py``),
then to one that publishes its topic through its Telemetry stream
(``recover_orphaned_transaction_command``); the producer answers with EndTransaction (or
the remoting port's END_TRANSACTION), whichever protocol sent the half. Every check is a
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
from dataclasses import dataclass

from ferrymq.codec.commitlog_record import StoredMessage
from ferrymq.codec.properties import PROPERTY_TRANSACTION_ID
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ha.replicated_store import ReplicatedStore
from node.admission import store_refusal
from node.convert import to_wire_message
from node.parked import as_sent, park, real_topic_of, release
from node.rpc_status import OK, InvalidRequest, status
from node.telemetry_outbox import TelemetryOutbox
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

# (transaction id, the half record as stored) -> whether a producer was given the check.
CheckTarget = Callable[[str, StoredMessage], bool]


@dataclass
class Half:
    queue_offset: int  # in HALF_TOPIC
    transaction_id: str
    topic: str
    stored_ms: int
    checks: int = 0


class OrphanCheckTarget:
    """Where orphan checks go: producer Telemetry streams by the topics they publish. A
    stream leaves every topic when it ends, and a topic no stream publishes is forgotten,
    so the registry holds only what open streams named."""

    def __init__(self) -> None:
        self._streams: dict[str, list[TelemetryOutbox]] = {}
        self._topics_of: dict[TelemetryOutbox, set[str]] = {}

    def register(self, outbox: TelemetryOutbox, topics: list[str]) -> None:
        self.unregister(outbox)
        self._topics_of[outbox] = set(topics)
        for topic in self._topics_of[outbox]:
            self._streams.setdefault(topic, []).append(outbox)

    def unregister(self, outbox: TelemetryOutbox) -> None:
        for topic in self._topics_of.pop(outbox, ()):
            streams = self._streams[topic]
            streams.remove(outbox)
            if not streams:
                del self._streams[topic]

    @property
    def topic_count(self) -> int:
        return len(self._streams)

    def offer(self, topic: str, command: rpc.TelemetryCommand) -> bool:
        """Give ``command`` to the next producer of ``topic`` (round robin) whose outbox
        has room; False when none has."""
        streams = self._streams.get(topic, [])
        for _ in range(len(streams)):
            streams.append(streams.pop(0))
            if streams[-1].offer(command):
                return True
        return False


class TransactionService:
    def __init__(
        self,
        store: ReplicatedStore,
        check_interval_ms: int,
        max_checks: int,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        is_master: Callable[[], bool] = lambda: True,
    ) -> None:
        self.store = store
        self.is_master = is_master  # only the master checks (node.check_relay: the others)
        self.check_interval_ms = check_interval_ms
        self.max_checks = max_checks
        self.clock_ms = clock_ms
        self.producers = OrphanCheckTarget()
        # Tried in order before the Telemetry streams (``check_orphans``).
        self.check_targets: list[CheckTarget] = []
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
        store = self.store
        offset = store.min_offset_in_queue(topic, 0)
        end = store.max_offset_in_queue(topic, 0)
        while offset < end:
            page = store.get_messages(topic, 0, offset, REPLAY_PAGE)
            yield from page.messages
            if page.next_begin_offset <= offset:
                break
            offset = page.next_begin_offset

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

    # ---- EndTransaction ------------------------------------------------------------
    async def end_transaction(self, request) -> rpc.EndTransactionResponse:
        try:
            kind = RESOLUTIONS.get(request.resolution)
            if kind is None:
                raise InvalidRequest(pb.BAD_REQUEST, "resolution must be COMMIT or ROLLBACK")
            half = self._pending.get(request.transaction_id)
            if half is None:
                resolved = self._resolved.get(request.transaction_id)
                if resolved == kind:
                    return rpc.EndTransactionResponse(status=OK)  # a repeated resolution
                detail = (
                    f"transaction already resolved as {resolved}"
                    if resolved
                    else "no pending transaction has this id"
                )
                raise InvalidRequest(pb.INVALID_TRANSACTION_ID, detail)
            if request.topic.name and request.topic.name != half.topic:
                raise InvalidRequest(
                    pb.INVALID_TRANSACTION_ID, f"transaction belongs to topic {half.topic}"
                )
        except InvalidRequest as error:
            return rpc.EndTransactionResponse(status=status(error.code, str(error)))
        # The source only labels the record: a number this node does not know is kept as is.
        source = request.source
        reason = pb.TransactionSource.Name(source) if source in SOURCES else f"source {source}"
        answer = await self._resolve(half, kind, reason=reason)
        return rpc.EndTransactionResponse(status=answer)

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
        if any(target(half.transaction_id, stored) for target in self.check_targets):
            return True
        return self.producers.offer(half.topic, check_command(stored))

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

    def pending_topic(self, transaction_id: str, half_physical_offset: int) -> str | None:
        """The topic of the pending transaction ``named`` finds (None: not pending)."""
        named = self.named(transaction_id, half_physical_offset)
        half = self._pending.get(named) if named is not None else None
        return half.topic if half is not None else None

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


def check_command(half: StoredMessage) -> rpc.TelemetryCommand:
    """The orphan check of a stored half, as a producer's Telemetry stream carries it."""
    return rpc.TelemetryCommand(
        recover_orphaned_transaction_command=rpc.RecoverOrphanedTransactionCommand(
            message=to_wire_message(as_sent(half)),
            transaction_id=half.properties[PROPERTY_TRANSACTION_ID],
        )
    )
