"""Sends, through every door: RocketMQ 5 SendMessage, RocketMQ 4.x SEND_MESSAGE /
SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE, ferrymq's Data.Produce (gRPC and the SDK's
FERRY_PRODUCE).

Each door reads its frame into one ``SendRequest`` (or ``ProduceRequest``: the SDK's
records, already in the store's encoding) and this service decides everything on that
request, in the order of ``node/services/__init__.py``:

1. PUBLISH on the request's topic (``%RETRY%<group>``: SUBSCRIBE on the group);
2. the master (``Admission.check_master``);
3. the topic exists and takes writes;
4. the batch: 1..``SEND_MESSAGES_MAX`` messages (Produce: ``MAX_PRODUCE_RECORDS``
   records), bodies within the batch limit;
5. each message: its body (not empty, within the body limit, a compressed one inflates),
   its type against the topic's (``message_kind``), no property only the node sets
   (``NODE_PROPERTIES``), a tag without ``|``, keys without whitespace, a message group
   that is not empty;
6. its queue (``Admission.send_queue``: one round-robin position per topic for every door);
7. what the node makes of it: a retry topic's copy (``node/consumer_retry.py``), a delayed
   message parked in the timer topic (a delivery time, or a 4.x delay level), a
   transaction half parked in ``%SYS%TRANS_HALF``;
8. the append through the ``ReplicatedStore`` (SYNC replication acknowledges it), then the
   send metrics (``rocketmq_messages_in_total`` and the rest, for every door alike).

Refusals before the store raise ``InvalidRequest`` or ``TopicError`` and store nothing; a
store refusal comes back in the outcome with its status (a FLUSH timeout still carries
what was written: the 4.x door answers it as a result).

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from time import perf_counter

from ferrymq.codec.commitlog_record import NO_HOST
from ferrymq.codec.errors import InvalidMessageError
from ferrymq.codec.produce_records import MAX_PRODUCE_RECORDS, MalformedRecords, produce_record_at
from ferrymq.codec.properties import (
    PROPERTY_DELIVERY_TIME_MS,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_MESSAGE_TYPE,
    PROPERTY_UNIQ_KEY,
)
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.ferrymq import data_pb2 as api
from ha.replicated_store import ReplicatedStore
from node.admission import (
    Admission,
    check_batch_bytes,
    check_batch_count,
    check_body_size,
    check_compressed_body,
    check_queue,
    fifo_queue,
    invalid_message_code,
    message_kind,
    queue_exists,
    store_refusal,
)
from node.consumer_retry import PROPERTY_DELAY, ConsumerRetries, is_retry_topic
from node.lite_names import check_lite_topic
from node.message_rules import (
    MESSAGE_TYPE_TEXT,
    NODE_PROPERTIES,
    check_properties,
    produce_spans,
    read_produce_record,
    scan_produce_records,
)
from node.metrics_rpc import TrafficMetrics
from node.parked import real_topic_of
from node.recall_handle import RecallHandles, RecallTarget
from node.rpc_status import InvalidRequest, topic_error_status
from node.services.caller import Caller
from node.services.permissions import Permissions, publish
from node.services.transactions import TransactionService
from node.timer_service import TimerService
from node.topics import MessageType, TopicConfig, TopicError
from store.commitlog import PreparedRun
from store.message import TIMER_TOPIC, Message
from store.results import AppendedMessage, PutResult

# Every message of a request is checked in one turn of the event loop: the bound keeps that
# turn short. The SDK sends at most 128 per request, the official clients one or a few.
SEND_MESSAGES_MAX = 1024
# What a sent message may not carry: the node's own properties, and its type, which the
# node stamps from what the message declares (a produce record's, already encoded, must
# state its topic's type instead: ``check_produce_properties``).
SENT_NODE_PROPERTIES = NODE_PROPERTIES | {PROPERTY_MESSAGE_TYPE}
# Produce writes records as they are: the topic types whose messages need no rewriting.
# An untyped topic takes Produce records as NORMAL messages in the queue they name.
PRODUCE_TYPES = {
    MessageType.NORMAL: pb.NORMAL,
    MessageType.FIFO: pb.FIFO,
    MessageType.UNSPECIFIED: pb.NORMAL,
}
_CODE_NAMES = {value: name for name, value in pb.Code.items()}
# Every stored send's status, shared (never changed: the doors copy it into their answers).
STATUS_OK = pb.Status(code=pb.OK, message="OK")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class OutgoingMessage:
    """One message as its door read it, before the node's rules."""

    body: bytes
    # The message's properties in the store's names (TAGS, KEYS, UNIQ_KEY, the message
    # group, the user's own), as the door's protocol carries them.
    properties: dict[str, str]
    declared_type: int  # the apache.rocketmq.v2.MessageType the message declares
    message_group: str | None = None
    pinned_queue: int | None = None  # the queue its sender named on purpose
    delivery_ms: int | None = None  # a DELAY message's due time (RocketMQ 5)
    delay_level: int = 0  # a RocketMQ 4.x delay level (1..n)
    priority: int | None = None  # a PRIORITY message's priority (its queue)
    lite_topic: str | None = None  # a LITE message's lite topic (its queue)
    flag: int = 0
    sys_flag: int = 0
    born_ms: int = 0
    born_host: bytes = NO_HOST  # BORNHOST: the sender's address record
    reconsume_times: int = 0
    # Store the declared type as ``__MSG_TYPE`` (RocketMQ 5's readers show it; a 4.x
    # record carries none).
    stamp_type: bool = False


@dataclass(slots=True)
class SendRequest:
    topic: str
    messages: list[OutgoingMessage]
    max_reconsume_times: int | None = None  # a 4.x retry's limit (the client's)
    batch: bool = False  # a 4.x batch: one queue for all, no transaction halves
    # Sent again after an answer that was lost (a forwarded send whose master died): what
    # is already stored under the same message ids is answered, not stored twice.
    resend: bool = False


@dataclass(slots=True)
class SendOutcome:
    """The store's answer for the admitted messages (``stored``: as appended)."""

    result: PutResult
    stored: list[Message]
    status: pb.Status
    transaction_ids: list[str | None] = field(default_factory=list)
    queues: list[int] = field(default_factory=list)  # each message's queue in its topic
    recall_handles: list[str] = field(default_factory=list)  # "" for no delayed message

    @property
    def appended(self) -> list[AppendedMessage]:
        return self.result.appended


@dataclass(slots=True)
class ProduceRequest:
    """Data.Produce: ``count`` produce records (``ferrymq/codec/produce_records.py``)."""

    topic: str
    queue_id: int
    count: int
    records: bytes | memoryview  # a view of the request's frame on the remoting door
    atomic: bool = False
    born_host: bytes = NO_HOST


@dataclass(slots=True)
class ProduceFailure:
    index: int
    code: int
    message: str


@dataclass(slots=True)
class ProduceOutcome:
    """A queue offset per record (-1 for one not stored), and each refusal."""

    code: int
    message: str
    offsets: list[int]
    failures: list[ProduceFailure] = field(default_factory=list)


def produce_response(outcome: ProduceOutcome) -> api.ProduceResponse:
    """The Data API's answer of ``outcome`` (``Data.Produce``, and the SDK's FERRY_PRODUCE
    on the remoting door)."""
    return api.ProduceResponse(
        code=outcome.code,
        message=outcome.message,
        offsets=outcome.offsets,
        failures=[
            api.ProduceFailure(index=f.index, code=f.code, message=f.message)
            for f in outcome.failures
        ],
    )


def stored_outcome(
    count: int, result: PutResult, stored_indexes: list[int], failures: list[ProduceFailure]
) -> ProduceOutcome:
    """A produce's outcome once the store answered the put of the records at
    ``stored_indexes``, ``failures`` being the others' refusals (neither list changed)."""
    if not result.ok:
        refused = store_refusal(result)
        every = failures + [
            ProduceFailure(i, refused.code, refused.message) for i in stored_indexes
        ]
        every.sort(key=lambda failure: failure.index)
        return ProduceOutcome(every[0].code, every[0].message, [-1] * count, every)
    if not failures:
        return ProduceOutcome(pb.OK, "OK", [a.queue_offset for a in result.appended])
    offsets = [-1] * count
    for index, appended in zip(stored_indexes, result.appended, strict=True):
        offsets[index] = appended.queue_offset
    return ProduceOutcome(failures[0].code, failures[0].message, offsets, list(failures))


def produce_refused(count: int, code: int, message: str) -> ProduceOutcome:
    """Every record refused for the same reason (the request as a whole is wrong)."""
    message = message or pb.Code.Name(code)
    count = count if 0 <= count <= MAX_PRODUCE_RECORDS else 0
    return ProduceOutcome(
        code, message, [-1] * count, [ProduceFailure(i, code, message) for i in range(count)]
    )


def refusal_status(error: InvalidRequest | TopicError) -> pb.Status:
    if isinstance(error, TopicError):
        return topic_error_status(error)
    return pb.Status(code=error.code, message=str(error))


class SendService:
    def __init__(
        self,
        store: ReplicatedStore,
        admission: Admission,
        permissions: Permissions,
        transactions: TransactionService,
        retries: ConsumerRetries,
        metrics: TrafficMetrics,
        max_delay_ms: int,
        recall_handles: RecallHandles,
        broker_group: str,
        clock_ms: Callable[[], int] = now_ms,
        lite_quota: Callable[[str, str], None] = lambda topic, lite_topic: None,
    ) -> None:
        """``lite_quota(topic, lite_topic)`` refuses (``InvalidRequest``) a message that
        would make one lite topic too many."""
        self.store = store
        self.lite_quota = lite_quota
        self.recall_handles = recall_handles
        self.broker_group = broker_group
        self.admission = admission
        self.permissions = permissions
        self.transactions = transactions
        self.retries = retries
        self.metrics = metrics
        self.max_delay_ms = max_delay_ms
        self.clock_ms = clock_ms
        # The produce lane's snapshot (``lane_topics``) and the topic table's version it
        # was started at.
        self._lane_topics: dict[str, tuple[bytes, int, str]] = {}
        self._lane_topics_version = -1

    # ---- messages --------------------------------------------------------------------
    async def send(self, caller: Caller, request: SendRequest) -> SendOutcome:
        """Admit and append ``request``'s messages; ``InvalidRequest`` or ``TopicError``
        for a refusal before the store (nothing written)."""
        started = perf_counter()
        self.permissions.require(caller, publish(request.topic))
        try:
            topic = await self._admit(request.topic)
            stored, transaction_ids, queues = self._messages(topic, request)
        except (InvalidRequest, TopicError) as error:
            self.metrics.send_answered(refusal_status(error).code, perf_counter() - started)
            raise
        open_send = self.metrics.sends_open.enter()
        try:
            put = self.store.put_again_async if request.resend else self.store.put_messages_async
            result = await put(stored)
        finally:
            self.metrics.sends_open.leave(open_send)
        status = STATUS_OK if result.ok else store_refusal(result)
        recall_handles: list[str] = []
        if result.ok:
            for message, appended, transaction_id in zip(
                stored, result.appended, transaction_ids, strict=True
            ):
                if transaction_id is not None:
                    self.transactions.sent(
                        transaction_id, real_topic_of(message), appended.queue_offset
                    )
            recall_handles = [self._recall_handle(message) for message in stored]
            self.metrics.stored(topic.name, len(stored), sum(len(m.body) for m in stored))
        self.metrics.send_answered(status.code, perf_counter() - started)
        return SendOutcome(result, stored, status, transaction_ids, queues, recall_handles)

    def _recall_handle(self, record: Message) -> str:
        """The handle that recalls ``record`` if it waits in the timer for its delivery
        time (RocketMQ: not a retry's, not a 4.x delay level's), else ""."""
        if record.topic != TIMER_TOPIC or record.properties.get(PROPERTY_DELAY):
            return ""
        properties = record.properties
        real_topic = real_topic_of(record)
        message_id = properties.get(PROPERTY_UNIQ_KEY, "")
        due = properties.get(PROPERTY_DELIVERY_TIME_MS, "")
        if is_retry_topic(real_topic) or not message_id or not due.isdigit():
            return ""
        target = RecallTarget(real_topic, self.broker_group, int(due), message_id)
        return self.recall_handles.issue(target)

    async def _admit(self, topic_name: str) -> TopicConfig:
        """Steps 2-3 (after step 1, the caller's permission): the master, the topic."""
        self.admission.check_master()
        return await self.admission.writable_topic(topic_name)

    def _messages(
        self, topic: TopicConfig, request: SendRequest
    ) -> tuple[list[Message], list[str | None], list[int]]:
        """Steps 4-7 for every message: what to append, each half's transaction id, and
        each message's queue in its topic."""
        admission = self.admission
        check_batch_count(len(request.messages), SEND_MESSAGES_MAX)
        check_batch_bytes(sum(len(m.body) for m in request.messages), admission.batch_limit)
        stored: list[Message] = []
        transaction_ids: list[str | None] = []
        queues: list[int] = []
        for message in request.messages:
            kind = self._check_message(topic, message)
            pinned = queues[0] if request.batch and queues else message.pinned_queue
            queue_id = admission.send_queue(
                topic, kind, message.message_group, pinned, message.priority, message.lite_topic
            )
            record = Message(
                topic.name,
                message.body,
                queue_id,
                message.properties,
                message.flag,
                message.sys_flag,
                message.born_ms,
                message.born_host,
                message.reconsume_times,
            )
            transaction_id = None
            if is_retry_topic(topic.name):
                record = self.retries.resent(record, request.max_reconsume_times)
            if record.topic == topic.name:  # not a retry dead-lettered now: as it is then
                record, transaction_id = self._parked(record, kind, message, request.batch)
            stored.append(record)
            transaction_ids.append(transaction_id)
            queues.append(queue_id)
        return stored, transaction_ids, queues

    def _parked(
        self, record: Message, kind: MessageType, message: OutgoingMessage, batch: bool
    ) -> tuple[Message, str | None]:
        """Step 7: a delayed message parked in the timer topic, a transaction half in its
        own (with its new transaction id); any other as it is."""
        if kind is MessageType.DELAY:
            return self._delayed(record, message), None
        if kind is MessageType.TRANSACTION:
            if batch:
                raise InvalidRequest(
                    pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                    "a batch cannot carry transaction half messages",
                )
            return TransactionService.half_of(record)
        return record, None

    def _check_message(self, topic: TopicConfig, message: OutgoingMessage) -> MessageType:
        """Step 5: one message's rules; how the topic handles it."""
        limit = self.admission.body_limit
        check_body_size(len(message.body), limit)
        if message.sys_flag:
            check_compressed_body(message.body, message.sys_flag, limit)
        kind = message_kind(topic, message.declared_type)
        properties = message.properties
        check_properties(properties, SENT_NODE_PROPERTIES)
        if message.message_group == "":
            raise InvalidRequest(pb.ILLEGAL_MESSAGE_GROUP, "message_group is empty")
        if message.priority is not None and kind is not MessageType.PRIORITY:
            raise InvalidRequest(
                pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                f"a priority is for PRIORITY messages, not {kind.value} ones",
            )
        if kind is MessageType.LITE or message.lite_topic is not None:
            self._check_lite(topic, kind, message.lite_topic)
        if message.stamp_type:
            declared = message.declared_type
            properties[PROPERTY_MESSAGE_TYPE] = MESSAGE_TYPE_TEXT.get(declared) or str(declared)
        return kind

    def _check_lite(self, topic: TopicConfig, kind: MessageType, lite_topic: str | None) -> None:
        """A lite topic goes with a LITE topic and back, has a lawful name, and is one
        more lite topic only within the node's quota (``LiteIndex.check_quota``)."""
        if kind is not MessageType.LITE:
            raise InvalidRequest(
                pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                f"a lite topic is for LITE messages, not {kind.value} ones",
            )
        if lite_topic is None:
            raise InvalidRequest(
                pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                f"topic {topic.name} is a LITE topic: each message names its lite topic",
            )
        check_lite_topic(lite_topic)
        self.lite_quota(topic.name, lite_topic)

    def _delayed(self, record: Message, message: OutgoingMessage) -> Message:
        """A DELAY message parked in the timer topic until due: by its delivery time
        (RocketMQ 5) or its delay level (4.x)."""
        if message.delivery_ms is None:
            if message.delay_level > 0:
                return self.retries.delayed(record, message.delay_level)
            raise InvalidRequest(pb.ILLEGAL_DELIVERY_TIME, "DELAY messages need a delivery time")
        due_ms = message.delivery_ms
        if due_ms < 0:
            # Far enough before 1970 it would not convert back to a Timestamp, and every
            # pull or receive of its queue would fail on it.
            raise InvalidRequest(
                pb.ILLEGAL_DELIVERY_TIME, f"delivery time {due_ms} ms is before 1970"
            )
        now = self.clock_ms()
        if due_ms - now > self.max_delay_ms:
            raise InvalidRequest(
                pb.ILLEGAL_DELIVERY_TIME,
                f"delivery time is {due_ms - now} ms ahead, the limit is {self.max_delay_ms} ms",
            )
        record.properties[PROPERTY_DELIVERY_TIME_MS] = str(due_ms)
        return record if due_ms <= now else TimerService.park(record, due_ms)

    # ---- produce records -------------------------------------------------------------
    async def produce(
        self,
        caller: Caller,
        request: ProduceRequest,
        answer_ahead: Callable[[ProduceOutcome], Callable[[], None]] | None = None,
    ) -> ProduceOutcome:
        """Data.Produce for either door: each record its own answer; an ``atomic``
        request stores all or nothing. ``AccessDenied`` refuses the request whole.
        ``answer_ahead(outcome)``, when the put has to wait for the in-sync replicas, is
        given the outcome this will return and returns what runs the moment they hold
        the records (a door's answer: ``RemotingConnection.answer_ahead``)."""
        started = perf_counter()
        self.permissions.require(caller, publish(request.topic))
        open_send = self.metrics.sends_open.enter()
        try:
            outcome = await self._produce(request, answer_ahead)
        finally:
            self.metrics.sends_open.leave(open_send)
        if outcome.code == pb.OK:
            stored = request.count
        else:
            stored = sum(1 for offset in outcome.offsets if offset >= 0)
        if stored:
            size = len(request.records) * stored // max(request.count, 1)
            self.metrics.stored(request.topic, stored, size)
        self.metrics.send_answered(outcome.code, perf_counter() - started)
        return outcome

    def takes_now(self) -> bool:
        """Whether ``produce_now`` could take a request now (this node is the master and
        its store can append at once): asked before a request is read, so that one it
        would decline anyway is not read twice."""
        return self.store.is_master and self.store.appends_now()

    def produce_now(
        self,
        caller: Caller,
        request: ProduceRequest,
        answer: Callable[[ProduceOutcome], Callable[[], None]],
    ) -> bool:
        """``produce`` for a caller with no task (the produce lane,
        ``node/remoting/produce_lane.py``), for the common request only: records that all
        pass, to a queue of a NORMAL (or untyped) topic this node knows and takes writes
        for, from a caller who may publish there, appended now (``put_prepared_now``).
        ``answer(outcome)`` makes the answer and what it returns writes it: at once, or
        (SYNC) made now and written the moment the in-sync replicas hold the records.
        False, with nothing written and nothing counted, for anything else: the caller
        sends it through ``produce``, which gives every refusal its precise answer. The
        rules are the ones ``produce`` applies, read from the same services; the metrics
        are the same, counted as the answer leaves."""
        started = perf_counter()
        count = request.count
        if not 1 <= count <= MAX_PRODUCE_RECORDS:
            return False
        if not self.permissions.may(caller, publish(request.topic)):
            return False
        topic = self.admission.known_writable_topic(request.topic)
        if topic is None or not self.store.is_master:
            return False
        message_type = PRODUCE_TYPES.get(topic.message_type)
        if message_type is None or topic.message_type is MessageType.FIFO:
            return False
        if not queue_exists(topic, request.queue_id):
            return False
        type_text = MESSAGE_TYPE_TEXT[message_type]
        run = self._prepared_run(topic, request, type_text)
        if run is None:
            return False
        if not self.permissions.enabled:  # every caller may publish: the lane may take it
            self.lane_topics()[topic.name] = (run.topic_prefix, topic.queue_count, type_text)
        return self.produce_run_now(run, answer, started)

    def lane_topics(self) -> dict[str, tuple[bytes, int, str]]:
        """The produce lane's snapshot of the topics it may take a request for natively
        (``node.remoting.ferry_data.produce_run``): name -> (TOPICLENGTH + TOPIC, queue
        count, message type text), each entry written by ``produce_now`` once every one of
        its rules passed for that topic, with authentication off (any caller may publish).
        Started again, empty, whenever the topic table changes, so an entry never outlives
        the topic config it was decided from; with authentication on it stays empty."""
        version = self.admission.topics.version
        if version != self._lane_topics_version:
            self._lane_topics, self._lane_topics_version = {}, version
        return self._lane_topics

    def produce_run_now(
        self,
        run: PreparedRun,
        answer: Callable[[ProduceOutcome], Callable[[], None]],
        started: float | None = None,
    ) -> bool:
        """``produce_now`` for a request already read and checked as one run (the produce
        lane's C read, ``node.remoting.ferry_data.produce_run``, or ``produce_now``'s
        rules): appended now and answered through ``answer``, or False with nothing
        written. ``started``: when the request's handling began (the send latency's)."""
        started = perf_counter() if started is None else started
        count = run.count
        metrics = self.metrics
        indexes = list(range(count))
        open_send = metrics.sends_open.enter()

        def answered(result: PutResult) -> Callable[[], None]:
            outcome = stored_outcome(count, result, indexes, [])
            write = answer(outcome)

            def counted() -> None:
                write()
                metrics.sends_open.leave(open_send)
                if outcome.code == pb.OK:
                    metrics.stored(run.topic, count, len(run.records))
                metrics.send_answered(outcome.code, perf_counter() - started)

            return counted

        if not self.store.put_prepared_now([run], answered):
            metrics.sends_open.leave(open_send)
            return False
        return True

    async def _produce(
        self,
        request: ProduceRequest,
        answer_ahead: Callable[[ProduceOutcome], Callable[[], None]] | None,
    ) -> ProduceOutcome:
        count = request.count
        try:
            check_batch_count(count, MAX_PRODUCE_RECORDS)
            topic = await self._admit(request.topic)
            message_type = PRODUCE_TYPES.get(topic.message_type)
            if message_type is None:
                raise InvalidRequest(
                    pb.UNSUPPORTED,
                    f"topic {topic.name} is {topic.message_type.value}: send with SendMessage",
                )
            if topic.message_type is not MessageType.FIFO:
                check_queue(topic, request.queue_id)
        except (InvalidRequest, TopicError) as error:
            refused = refusal_status(error)
            return produce_refused(count, refused.code, refused.message)
        prepared, stored_indexes, failures, trailing = self._prepared_records(
            topic, request, MESSAGE_TYPE_TEXT[message_type]
        )
        if trailing:
            return produce_refused(
                count,
                pb.BAD_REQUEST,
                f"{trailing} bytes after the {count} records the count names",
            )
        if failures and request.atomic and prepared:
            first = failures[0]
            reason = f"not stored: record {first.index} of this atomic request was refused"
            failures.extend(ProduceFailure(i, first.code, reason) for i in stored_indexes)
            failures.sort(key=lambda failure: failure.index)
            prepared, stored_indexes = [], []
        if not prepared:
            first = failures[0]
            return ProduceOutcome(first.code, first.message, [-1] * count, failures)
        on_replicated = None
        if answer_ahead is not None:

            def on_replicated(result: PutResult) -> Callable[[], None]:
                return answer_ahead(stored_outcome(count, result, stored_indexes, failures))

        result = await self.store.put_prepared_async(prepared, on_replicated)
        return stored_outcome(count, result, stored_indexes, failures)

    def _prepared_run(
        self, topic: TopicConfig, request: ProduceRequest, type_text: str
    ) -> PreparedRun | None:
        """The request's records as one run when all of them pass (the common case: one C
        pass, no object per record); None when any does not, and each is then read on its
        own for its own answer."""
        spans = produce_spans(request.records, request.count, self.admission.body_limit, type_text)
        if spans is None:
            return None
        try:
            return self.store.prepare_run(
                topic.name, request.queue_id, request.born_host, request.records, spans
            )
        except InvalidMessageError:
            return None

    def _prepared_records(
        self, topic: TopicConfig, request: ProduceRequest, type_text: str
    ) -> tuple[list, list[int], list[ProduceFailure], int]:
        """Each record checked and prepared for the store: (prepared, their indexes,
        refusals, bytes left after the last record). The C pass reads every record that
        passes; each one it leaves (an int: where it starts) is read again in Python,
        which raises the precise error."""
        count = request.count
        fifo = topic.message_type is MessageType.FIFO
        body_limit = self.admission.body_limit
        if not fifo:
            run = self._prepared_run(topic, request, type_text)
            if run is not None:
                return [run], list(range(count)), [], 0
        # Record by record, each body its own bytes: a view of the frame is copied once.
        records = bytes(request.records)
        prepare = self.store.prepare
        prepared, stored_indexes, failures = [], [], []
        position = 0
        scanned = scan_produce_records(records, count, body_limit, type_text)
        queue_id = request.queue_id
        for index in range(count):
            try:
                item = scanned[index]
                if type(item) is int:
                    # Past this record even when it is refused: the next one starts there,
                    # and the last one's end is checked against the request's length.
                    position = produce_record_at(records, item)[0]
                    item = read_produce_record(records, item, body_limit, type_text)
                position, body, raw, born_ms, properties = item
                if fifo:
                    queue_id = fifo_queue(properties.get(PROPERTY_MESSAGE_GROUP), topic.queue_count)
                message = Message(
                    topic.name, body, queue_id, properties, 0, 0, born_ms, request.born_host
                )
                prepared.append(prepare(message, raw))
                stored_indexes.append(index)
            except InvalidRequest as error:
                failures.append(ProduceFailure(index, error.code, str(error)))
            except InvalidMessageError as error:
                failures.append(
                    ProduceFailure(index, invalid_message_code(error.reason), str(error))
                )
            except MalformedRecords as error:
                failures.extend(
                    ProduceFailure(i, pb.BAD_REQUEST, str(error)) for i in range(index, count)
                )
                return prepared, stored_indexes, failures, 0
        return prepared, stored_indexes, failures, len(records) - position


def code_name(code: int) -> str:
    return _CODE_NAMES.get(code, "UNKNOWN")
