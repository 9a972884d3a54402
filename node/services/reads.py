"""Offset-based reads of a queue, through every door: RocketMQ 5 PullMessage, RocketMQ 4.x
PULL_MESSAGE, ferrymq's Data.Fetch (gRPC and the SDK's FERRY_FETCH).

Each door reads its request into one ``ReadRequest``; this service decides, in order:

1. SUBSCRIBE on the topic and on the group (``%RETRY%<group>``: the group's own);
2. the topic exists and takes reads (a write-only topic is FORBIDDEN on every door);
3. the queue exists;
4. the group exists, or is created on first use (only the group step 1 allowed), or must
   exist already (``create_group`` False: Data.Fetch);
5. the filter compiles (TAG or SQL92);
6. an offset reset the group has not read since (``node/pending_resets.py``): a read from
   another offset is answered OFFSET_RESET with the reset offset as where to go on, once;
7. the read: the store's records (``records``: as stored, what 4.x pulls and fetches send)
   or decoded messages, SQL92 applied to each, waiting up to ``wait_s`` for something the
   door's ``answer`` takes (long polling, ``node/long_polling.py``), and the delivery
   metrics of what was answered.

The door decides what it answers for a read, OFFSET_RESET included (its codes differ:
RocketMQ 4.x's PULL_OFFSET_MOVED, RocketMQ 5's ILLEGAL_OFFSET, ...): ``answer(result)``
returns its answer, or None to go on waiting.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ferrymq.codec.commitlog_record import decode as decode_record
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ha.expiries import MIN_REARM_S  # a timer that fired early is armed at least this later
from ha.replicated_store import ReplicatedStore
from node.admission import check_queue
from node.filter_expression import Selection, selection
from node.group_creation import GroupsOnFirstUse
from node.long_polling import QueueWaiters, long_poll
from node.metrics_rpc import TrafficMetrics
from node.pending_resets import PendingResets
from node.rpc_status import AccessDenied, InvalidRequest, topic_error_status
from node.services.caller import Caller
from node.services.permissions import Permissions, consume, group_need
from node.tail_reads import ParkedRead, TailReads
from node.topics import Permission, TopicConfig, TopicError, TopicTable
from store.results import GetResult, GetStatus

log = logging.getLogger(__name__)

Answer = TypeVar("Answer")
# ferrymq's Fetch (the SDK, the Spark source): records per answer at most, and by default.
FETCH_MESSAGES_MAX = 4096
FETCH_MESSAGES_DEFAULT = 1024
FETCH_BYTES_DEFAULT = 4 << 20
# FERRY_FETCH's ``follow``: answers with records after the first, at most (the lane's).
FETCH_FOLLOW_MAX = 64


@dataclass(slots=True)
class ReadRequest:
    topic: str
    group: str
    queue_id: int
    offset: int
    max_messages: int
    max_bytes: int = 1 << 20
    expression: pb.FilterExpression | None = None  # None: every message (or ``tags``)
    tags: list[str] | None = None  # instead of an expression: these tags (Data.Fetch)
    records: bool = True  # the records as stored, else decoded messages
    wait_s: float = 0.0
    create_group: bool = True  # a group nobody created is created now (when allowed)


@dataclass(slots=True)
class FetchOutcome:
    """A fetch's answer (its fields are ``data.FetchResponse``'s, ``fields()``): the records
    as stored, where to read next, the queue's bounds at the last look. The records stay
    the store's list until a door encodes them (FERRY_FETCH appends them to the encoding
    as they are: ``ferrymq.codec.bytes_field``)."""

    code: int
    message: str
    records: list[bytes] = dataclasses.field(default_factory=list)
    count: int = 0
    next_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0

    def fields(self) -> dict:
        """As keyword arguments (not ``dataclasses.asdict``, which copies deeply), the
        records joined."""
        return {**self.head_fields(), "records": b"".join(self.records)}

    def head_fields(self) -> dict:
        """Every field but the records."""
        return {
            "code": self.code,
            "message": self.message,
            "count": self.count,
            "next_offset": self.next_offset,
            "min_offset": self.min_offset,
            "max_offset": self.max_offset,
        }


def fetch_outcome(code: int, message: str = "", **fields) -> FetchOutcome:
    return FetchOutcome(code, message or pb.Code.Name(code), **fields)


def fetch_answer(offset: int) -> Callable[[GetResult], FetchOutcome | None]:
    """What a fetch from ``offset`` answers for one look at the queue; None: nothing yet
    (it waits)."""

    def fetched(result: GetResult) -> FetchOutcome | None:
        bounds = {"min_offset": result.min_offset, "max_offset": result.max_offset}
        if result.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
            return fetch_outcome(
                pb.ILLEGAL_OFFSET,
                f"offset {offset} outside [{result.min_offset}, {result.max_offset}]",
                next_offset=result.next_begin_offset,
                **bounds,
            )
        if result.status is GetStatus.OFFSET_RESET:
            return fetch_outcome(
                pb.ILLEGAL_OFFSET,
                f"the group's offsets were reset: go on from {result.next_begin_offset}",
                next_offset=result.next_begin_offset,
                **bounds,
            )
        if result.messages or result.next_begin_offset > offset:
            return fetch_outcome(
                pb.OK if result.messages else pb.MESSAGE_NOT_FOUND,
                records=result.messages,
                count=len(result.messages),
                next_offset=result.next_begin_offset,
                **bounds,
            )
        return None

    return fetched


class ReadService:
    def __init__(
        self,
        store: ReplicatedStore,
        topics: TopicTable,
        waiters: QueueWaiters,
        groups: GroupsOnFirstUse,
        permissions: Permissions,
        metrics: TrafficMetrics,
        resets: PendingResets | None = None,
        tail_reads: TailReads | None = None,
    ) -> None:
        """``resets``: the offset resets the groups' readers have not come to yet;
        ``tail_reads``: where a read a door can answer from a callback parks at its queue's
        end, for the reput to answer (``node/tail_reads.py``)."""
        self.store = store
        self.resets = resets
        self.tail_reads = tail_reads
        self.topics = topics
        self.waiters = waiters
        self.groups = groups
        self.permissions = permissions
        self.metrics = metrics

    async def readable_queue(
        self, caller: Caller, topic_name: str, group: str, queue_id: int, create_group: bool
    ) -> TopicConfig:
        """Steps 1-4: the topic, once ``caller`` may read ``queue_id`` of it as ``group``;
        ``InvalidRequest`` or ``TopicError`` otherwise."""
        self.permissions.require(caller, consume(topic_name, group))
        topic = await self.topics.topic_caught_up(topic_name)
        _check_readable(topic, queue_id)
        if create_group:
            await self.groups.group(group)
        else:
            self.topics.group(group)
        return topic

    def readable_queue_now(
        self, caller: Caller, topic_name: str, group: str, queue_id: int
    ) -> TopicConfig:
        """``readable_queue`` of a group that must exist, with no wait: a topic this node
        has not heard of is TOPIC_NOT_FOUND here (``readable_queue`` catches up with
        routing first)."""
        self.permissions.require(caller, consume(topic_name, group))
        topic = self.topics.topic(topic_name)
        _check_readable(topic, queue_id)
        self.topics.group(group)
        return topic

    def check_filter(self, caller: Caller, group: str, expression: pb.FilterExpression) -> None:
        """Whether ``group`` could read with ``expression`` (a 4.x push consumer asks as it
        starts): ``InvalidRequest`` ILLEGAL_FILTER_EXPRESSION saying what is wrong."""
        self.permissions.require(caller, [group_need(group)])
        selection(expression)

    async def read(
        self,
        caller: Caller,
        request: ReadRequest,
        answer: Callable[[GetResult], Answer | None],
        ahead: Callable[[Answer], None] | None = None,
    ) -> tuple[Answer | None, GetResult | None]:
        """The door's answer to the first read it takes within ``wait_s``, and that read;
        (None, the last read) when none was taken in time. ``ahead(answer)``, when the
        door can write an answer from a callback: a read with no filter that waits may be
        answered by the dispatch of what it waits for (``TailReads``), through it."""
        topic = await self.readable_queue(
            caller, request.topic, request.group, request.queue_id, request.create_group
        )
        if request.expression is not None:
            chosen = selection(request.expression)
        else:
            chosen = Selection(tags=request.tags or None)
        name, queue_id, offset = topic.name, request.queue_id, request.offset
        reset_to = self.resets.take(request.group, name, queue_id) if self.resets else None
        if reset_to is not None and reset_to != offset:
            store = self.store
            moved = GetResult(
                GetStatus.OFFSET_RESET,
                [],
                reset_to,
                store.min_offset_in_queue(name, queue_id),
                store.max_offset_in_queue(name, queue_id),
            )
            return answer(moved), moved
        last: list[GetResult] = []
        given: list[Answer] = []  # the answer a tail read gave while it waited

        async def attempt() -> Answer | None:
            if given:
                return given[0]
            result = self._get(name, queue_id, offset, request, chosen)
            last[:] = [result]
            return answer(result)

        def from_tail(result: GetResult) -> bool:
            answered = answer(result)
            if answered is None or ahead is None:
                return False
            given.append(answered)
            last[:] = [result]
            ahead(answered)
            self.waiters.notify(name, queue_id)  # its task returns what was given
            return True

        parked = None
        if ahead is not None and request.records and chosen.sql is None and not chosen.tags:
            parked = ParkedRead(offset, request.max_messages, request.max_bytes, from_tail)
        answered = await long_poll(attempt, self._wait(name, queue_id, parked), request.wait_s)
        result = last[0] if last else None
        if answered is not None and result is not None and result.messages:
            self._delivered(name, request, result)
        return answered, result

    def _wait(
        self, topic: str, queue_id: int, parked: ParkedRead | None
    ) -> Callable[[float], Awaitable[None]]:
        """How a read waits: on its queue's waiters, and parked in ``tail_reads``
        meanwhile when it may be answered from there (``parked``)."""
        tail_reads = self.tail_reads
        if parked is None or tail_reads is None:
            return lambda wait_s: self.waiters.wait(topic, queue_id, wait_s)

        async def wait(wait_s: float) -> None:
            tail_reads.park(topic, queue_id, parked)
            try:
                await self.waiters.wait(topic, queue_id, wait_s)
            finally:
                tail_reads.unpark(topic, queue_id, parked)

        return wait

    async def fetch(
        self,
        caller: Caller,
        topic: str,
        group: str,
        queue_id: int,
        offset: int,
        max_messages: int,
        max_bytes: int,
        tags: list[str],
        wait_s: float,
        ahead: Callable[[FetchOutcome], None] | None = None,
        follow: int = 0,
    ) -> FetchOutcome:
        """ferrymq's Fetch, through either door (the SDK and the Spark source read with
        it): up to ``max_messages`` (0: ``FETCH_MESSAGES_DEFAULT``, at most
        ``FETCH_MESSAGES_MAX``) records and ``max_bytes`` (0: ``FETCH_BYTES_DEFAULT``) of
        them; the group must exist; an offset outside the queue is ILLEGAL_OFFSET with where
        to go on; nothing in ``wait_s`` is MESSAGE_NOT_FOUND at the same offset.
        ``ahead``: as ``read``'s (the remoting door's FERRY_FETCH). ``follow`` is only
        checked here (0..``FETCH_FOLLOW_MAX``): a fetch answered here is answered once; the
        fetch lane follows (``node/remoting/fetch_lane.py``).
        ``AccessDenied`` is left to the door (the gRPC door aborts the call); every other
        refusal is an outcome."""
        request = fetch_request(topic, group, queue_id, offset, max_messages, max_bytes, wait_s)
        if request is None:
            return fetch_outcome(pb.BAD_REQUEST, f"max_messages must be 0..{FETCH_MESSAGES_MAX}")
        if not 0 <= follow <= FETCH_FOLLOW_MAX:
            return fetch_outcome(pb.BAD_REQUEST, f"follow must be 0..{FETCH_FOLLOW_MAX}")
        request.tags = tags

        try:
            outcome, last = await self.read(caller, request, fetch_answer(offset), ahead)
        except AccessDenied:
            raise
        except TopicError as error:
            refused = topic_error_status(error)
            return fetch_outcome(refused.code, refused.message)
        except InvalidRequest as error:
            return fetch_outcome(error.code, str(error))
        if outcome is None:  # nothing came: the bounds of the last look
            bounds = {"min_offset": last.min_offset, "max_offset": last.max_offset} if last else {}
            return fetch_outcome(pb.MESSAGE_NOT_FOUND, next_offset=offset, **bounds)
        return outcome

    def fetch_now(
        self,
        caller: Caller,
        topic: str,
        group: str,
        queue_id: int,
        offset: int,
        max_messages: int,
        max_bytes: int,
        wait_s: float,
        ends: FetchEnds,
    ) -> bool:
        """``fetch`` with no task, for the fetch lane: True when it took the read, which
        ``ends`` then answers, at once or as the queue gets records (``WaitingFetch``);
        False when the read is not the common case (``fetch_read_now``), which ``fetch``
        then answers. A read with tags goes to ``fetch`` before this. The first look's
        failure is raised."""
        request = self.fetch_read_now(
            caller, topic, group, queue_id, offset, max_messages, max_bytes, wait_s
        )
        if request is None:
            return False
        self.start_fetch(request, ends)
        return True

    def fetch_read_now(
        self,
        caller: Caller,
        topic: str,
        group: str,
        queue_id: int,
        offset: int,
        max_messages: int,
        max_bytes: int,
        wait_s: float,
    ) -> ReadRequest | None:
        """The read a fetch with no task makes, the read service's rules applied now (a
        fetch the lane takes, and each next read of a followed fetch): None when it is not
        the common case (a refusal to say, a topic to catch up with, an offset reset to
        tell, a limit out of range), which ``fetch`` answers precisely."""
        if self.resets:
            return None
        request = fetch_request(topic, group, queue_id, offset, max_messages, max_bytes, wait_s)
        if request is None:
            return None
        try:
            request.topic = self.readable_queue_now(caller, topic, group, queue_id).name
        except (AccessDenied, TopicError, InvalidRequest):
            return None
        return request

    def start_fetch(self, request: ReadRequest, ends: FetchEnds) -> None:
        """Answer ``request`` (``fetch_read_now``'s) through ``ends``: at once when its
        first look finds records, else when they come or its wait ends. The first look's
        failure is raised."""
        WaitingFetch(self, request, ends).start()

    def _get(
        self, topic: str, queue_id: int, offset: int, request: ReadRequest, chosen: Selection
    ) -> GetResult:
        store, sql = self.store, chosen.sql
        if request.records:
            result = store.get_records(
                topic, queue_id, offset, request.max_messages, request.max_bytes, chosen.tags
            )
            if sql is not None and result.messages:
                kept = [r for r in result.messages if sql(decode_record(r, 0).properties)]
                result = dataclasses.replace(result, messages=kept)
            return result
        result = store.get_messages(topic, queue_id, offset, request.max_messages, chosen.tags)
        if sql is not None and result.messages:  # what it refuses is passed over, as tags are
            result = dataclasses.replace(
                result, messages=[m for m in result.messages if sql(m.properties)]
            )
        return result

    def _delivered(self, topic: str, request: ReadRequest, result: GetResult) -> None:
        messages = result.messages
        if request.records:
            size = sum(map(len, messages))
        else:
            size = sum(len(message.body) for message in messages)
        self.metrics.delivered(topic, request.group, len(messages), size)


def fetch_request(
    topic: str,
    group: str,
    queue_id: int,
    offset: int,
    max_messages: int,
    max_bytes: int,
    wait_s: float,
) -> ReadRequest | None:
    """A fetch's ``ReadRequest``, its limits' defaults applied (the group must exist);
    None when ``max_messages`` or ``max_bytes`` is out of range."""
    if not 0 <= max_messages <= FETCH_MESSAGES_MAX or max_bytes < 0:
        return None
    return ReadRequest(
        topic,
        group,
        queue_id,
        offset,
        max_messages or FETCH_MESSAGES_DEFAULT,
        max_bytes or FETCH_BYTES_DEFAULT,
        wait_s=wait_s,
        create_group=False,
    )


def _check_readable(topic: TopicConfig, queue_id: int) -> None:
    if topic.permission is Permission.WRITE:
        raise InvalidRequest(pb.FORBIDDEN, f"topic {topic.name} is write-only")
    check_queue(topic, queue_id)


class FetchEnds(Protocol):
    """How a read taken by ``ReadService.fetch_now`` ends: the door's."""

    def answer(self, outcome: FetchOutcome) -> ReadRequest | None:
        """Write ``outcome`` (once); the read to wait on as, when the fetch goes on from
        its queue's end (a followed fetch's next read, its rules applied), else None."""

    def fail(self, error: Exception) -> None:
        """A look at the queue raised ``error`` after the read was taken: answer it as
        a handler's failure."""

    def hold(self, read: WaitingFetch) -> bool:
        """``read`` waits: cancel it if the door's connection ends first (False: it has
        ended already)."""

    def release(self, read: WaitingFetch) -> None:
        """``read`` ended."""


_NO_FILTER = Selection()


class WaitingFetch:
    """A fetch with no task (``ReadService.fetch_now``): what ``long_poll`` does for a
    task, in callbacks. It looks at its queue now; when that finds nothing it waits up
    to its ``wait_s``, listening on its queue's waiters (``QueueWaiters.listen``) and
    parked in the tail reads (``TailReads``) meanwhile, looks again at each wake-up,
    and once more when its time is up (MESSAGE_NOT_FOUND then, with the bounds of that
    look). A look while the queue ends where it reads (``_at_queue_end``) is not made:
    it would find nothing, and a followed fetch's next read starts there after every
    answer and is woken once by the read cap that made that answer readable. It ends
    once: answered, failed, or cancelled (its connection ended); or, when its ends read
    on (``FetchEnds.answer``: a followed fetch's next read at its queue's end), it waits
    again from there as that read, its listener, parked read and timer kept and moved
    (``_read_on``) rather than taken down and made again for every message."""

    __slots__ = (
        "_deadline",
        "_ended",
        "_ends",
        "_fetched",
        "_listening",
        "_parked",
        "_request",
        "_service",
        "_timer",
        "_timer_at",
    )

    def __init__(self, service: ReadService, request: ReadRequest, ends: FetchEnds) -> None:
        self._service = service
        self._request = request
        self._ends = ends
        self._fetched = fetch_answer(request.offset)
        self._listening = False
        self._parked: ParkedRead | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0  # when ``_timer`` fires, by the loop's clock
        self._deadline = 0.0  # when the wait ends (a followed read moves it on)
        self._ended = False

    def start(self) -> None:
        """Look, or wait. The first look's failure is raised (the door answers it)."""
        request = self._request
        if request.wait_s <= 0 or not self._at_queue_end():
            last = self._look()
            if last is None:
                return
            if request.wait_s <= 0:
                self._not_found(last)
                return
        if not self._ends.hold(self):
            self._finish()  # nobody to answer
            return
        try:
            self._wait()
        except BaseException:  # the door answers the failure: nothing may answer again
            self._end()
            raise

    def _wait(self) -> None:
        """Listen, park and time the wait from now; what a followed read registered is
        kept, and moved to this read."""
        request, service = self._request, self._service
        if not self._listening:
            service.waiters.listen(request.topic, request.queue_id, self._woken)
            self._listening = True
        tail_reads = service.tail_reads
        if tail_reads is not None:
            parked = self._parked
            if parked is None:
                self._parked = ParkedRead(
                    request.offset, request.max_messages, request.max_bytes, self._from_tail
                )
                tail_reads.park(request.topic, request.queue_id, self._parked)
            else:  # still parked: ``TailReads.on_run`` leaves a read that reads on
                parked.offset = request.offset
                parked.max_count = request.max_messages
                parked.max_bytes = request.max_bytes
        loop = asyncio.get_running_loop()
        self._deadline = loop.time() + request.wait_s
        # A timer armed for an earlier time is kept: it fires, finds the deadline moved on
        # and arms again (``_expired``), once a wait, where a followed reader's every
        # message cancelled one timer and armed another.
        if self._timer is None or self._timer_at > self._deadline:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_later(request.wait_s, self._expired)
            self._timer_at = self._deadline

    def cancel(self) -> None:
        if not self._ended:
            self._ended = True
            self._stop_waiting()

    def _look(self) -> GetResult | None:
        """Answer from a look at the queue; None when answered, else the look."""
        request = self._request
        result = self._service._get(
            request.topic, request.queue_id, request.offset, request, _NO_FILTER
        )
        if not self._take(result):
            return result
        return None

    def _take(self, result: GetResult) -> bool:
        outcome = self._fetched(result)
        if outcome is None:
            return False
        self._ended = True  # answered: nothing answers it again unless it reads on
        if result.messages:
            self._service._delivered(self._request.topic, self._request, result)
        try:
            following = self._ends.answer(outcome)
        except BaseException:
            self._finish()
            raise
        if following is None:
            self._finish()
        else:
            self._read_on(following)
        return True

    def _read_on(self, request: ReadRequest) -> None:
        """Wait again as ``request``, its ends' next read at its queue's end; a failure
        is answered through the ends (where the first look's is raised to the door)."""
        self._request = request
        self._fetched = fetch_answer(request.offset)
        self._ended = False
        try:
            self.start()
        except Exception as error:
            if not self._ended:
                self._finish()
            self._ends.fail(error)

    def _from_tail(self, result: GetResult) -> bool:
        return not self._ended and self._take(result)

    def _woken(self) -> None:
        self._listening = False  # a wake-up takes its queue's listeners
        if self._ended:
            return
        try:
            if (self._at_queue_end() or self._look() is not None) and not self._listening:
                request = self._request
                self._service.waiters.listen(request.topic, request.queue_id, self._woken)
                self._listening = True
        except Exception as error:
            self._failed(error)

    def _at_queue_end(self) -> bool:
        """The queue ends where this read reads, so a look would find nothing: no entry
        is there, under the read cap or above it. Records, the cap, an offset out of
        range and a failed read each need the look. ~0.5 µs where a look costs ~3 here."""
        request = self._request
        return self._service.store.max_offset_in_queue(request.topic, request.queue_id) == (
            request.offset
        )

    def _expired(self) -> None:
        self._timer = None
        if self._ended:
            return
        loop = asyncio.get_running_loop()
        remaining = self._deadline - loop.time()
        if remaining > MIN_REARM_S:  # a followed read moved the deadline on
            self._timer = loop.call_later(remaining, self._expired)
            self._timer_at = self._deadline
            return
        try:
            last = self._look()
        except Exception as error:
            self._failed(error)
            return
        if last is not None:
            self._not_found(last)

    def _not_found(self, last: GetResult) -> None:
        self._end()
        self._ends.answer(
            fetch_outcome(
                pb.MESSAGE_NOT_FOUND,
                next_offset=self._request.offset,
                min_offset=last.min_offset,
                max_offset=last.max_offset,
            )
        )

    def _failed(self, error: Exception) -> None:
        if self._ended:  # its answer was being written: nothing more to say
            log.error("a fetch's answer failed", exc_info=error)
            return
        self._end()
        self._ends.fail(error)

    def _end(self) -> None:
        assert not self._ended, "a waiting fetch ends once"
        self._finish()

    def _finish(self) -> None:
        """Ended: its waits taken down, its connection no longer holding it."""
        self._ended = True
        self._stop_waiting()
        self._ends.release(self)

    def _stop_waiting(self) -> None:
        request, service = self._request, self._service
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._listening:
            service.waiters.unlisten(request.topic, request.queue_id, self._woken)
            self._listening = False
        if self._parked is not None and service.tail_reads is not None:
            service.tail_reads.unpark(request.topic, request.queue_id, self._parked)
            self._parked = None
