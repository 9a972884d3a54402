"""Coalescing of one topic's ``send_async`` calls into ``Data.Produce`` requests.

The Kafka producer's idea with no linger: a send goes out at once when fewer than
``max_in_flight`` requests are outstanding; sends made meanwhile wait in ``pending`` and
leave together, up to ``max_batch_messages`` / ``max_batch_bytes`` per request, as soon as
a request slot frees. A request that carries sends of unrelated callers is not atomic
(``atomic=False``): the node stores the valid records and refuses the others one by one,
and each caller gets its own receipt or its own ``FerryError``.

Order: a message group is in at most one request at a time. A send whose group is in
flight waits (with every later send of that group, which stay behind it in ``pending``)
until that request has its answer and retries, so a group's messages are stored in send
order even when a request is retried. Messages without a group have no order.

Retries: a transport failure or a retriable code resends the records it concerns with the
same message ids, after the producer's backoff, up to its ``max_attempts``; a failure that
may mean a stale route (the master failed over) asks for the route again first. Every
request goes to the current master of this coalescer's broker group.

Thread-safety: owned by one event loop; everything runs on it.

A coalescer sees its producer only through ``Sender`` (the limits, the route, the channels
of the running loop), so this module does not import ``producer.py``, which imports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from typing import Protocol

import grpc

from ferrymq.client.connection import transport_error
from ferrymq.client.errors import RETRIABLE_CODES, FerryError
from ferrymq.client.messages import Message, SendReceipt
from ferrymq.client.produce_records import ProduceCall, RecordError, encode_records
from ferrymq.client.remoting_channel import AsyncRemotingChannel, produce_answer
from ferrymq.client.routes import ROUTE_STALE_CODES, QueueRef, TopicRoute
from ferrymq.codec.remoting_codes import FerryRequestCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb


class LoopChannels(Protocol):
    """The producer's channels on the running event loop."""

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]: ...

    def stubs(self, address: str) -> tuple: ...

    def channel(self, remoting_address: str | None) -> AsyncRemotingChannel | None: ...


class Sender(Protocol):
    """What a coalescer uses of its producer (``Producer`` is one)."""

    max_in_flight: int
    max_batch_messages: int
    max_batch_bytes: int
    max_pending_bytes: int
    max_attempts: int
    timeout_s: float

    def loop_state(self) -> LoopChannels: ...

    def route(self, topic: str, refresh: bool = False) -> TopicRoute: ...

    def next_queue(self, route: TopicRoute, broker_group: str | None = None) -> QueueRef: ...

    def remoting_address(self, address: str) -> str | None: ...

    def reachable(self, address: str) -> str: ...

    def failed(self, address: str | None, error: FerryError) -> None: ...


BACKOFF_S = 0.05  # before attempt n + 1: BACKOFF_S * 2 ** (n - 1)


class _Send:
    __slots__ = ("future", "group", "message_id", "record")

    def __init__(self, message: Message, record: bytes, future: asyncio.Future) -> None:
        self.message_id = message.message_id
        self.group = message.message_group
        self.record = record
        self.future = future


def _error(code: int, message: str) -> FerryError:
    try:
        name = pb.Code.Name(code)
    except ValueError:
        name = str(code)
    return FerryError(code, name, message)


class Coalescer:
    def __init__(self, producer: Sender, topic: str, broker_group: str, message_type: int) -> None:
        self.producer = producer
        self.topic = topic
        self.broker_group = broker_group
        self.message_type = message_type
        self.loop = asyncio.get_running_loop()
        self.pending: deque[_Send] = deque()
        self.pending_bytes = 0  # the records in ``pending``
        self.max_pending_bytes = producer.max_pending_bytes
        self._room_waiters: deque[asyncio.Future[None]] = deque()
        self.in_flight = 0
        self.groups_in_flight: set[str] = set()
        self._flush_scheduled = False

    def submit(self, message: Message, waited: bool = False) -> asyncio.Future[SendReceipt] | None:
        """``message`` queued: the future of its receipt; None, queuing nothing, while the
        queue holds ``max_pending_bytes`` or callers wait for room (``queue_when_room``
        queues it then). A plain call, not a coroutine: a send that finds room pays no
        coroutine to enter the queue. ``waited``: the caller's turn came in line."""
        if not waited and (self._room_waiters or self.pending_bytes >= self.max_pending_bytes):
            return None
        future: asyncio.Future[SendReceipt] = self.loop.create_future()
        try:
            record = encode_records([message], self.message_type, time.time_ns() // 1_000_000)
        except RecordError as error:
            future.set_exception(FerryError(pb.BAD_REQUEST, "BAD_REQUEST", str(error)))
            return future
        self.pending.append(_Send(message, record, future))
        self.pending_bytes += len(record)
        self._schedule()
        return future

    async def queue_when_room(self, message: Message) -> asyncio.Future[SendReceipt]:
        """``message`` queued once the queue has room, in line behind the callers already
        waiting (as Kafka's producer blocks its caller on a full buffer): a caller ahead
        of the node waits here instead of growing the queue without bound."""
        await self._wait_for_room()
        return self.submit(message, waited=True)

    async def _wait_for_room(self) -> None:
        """In line behind the callers already waiting. Only the first in line is woken
        (when sends leave the queue), and it stays first until it has room, so sends are
        queued in the order their callers came (a message group's order among them)."""
        waiters = self._room_waiters
        waiter: asyncio.Future[None] = self.loop.create_future()
        waiters.append(waiter)
        try:
            while True:
                await waiter
                assert waiters[0] is waiter, "only the first in line is woken"
                if self.pending_bytes < self.max_pending_bytes:
                    return
                waiter = self.loop.create_future()
                waiters[0] = waiter
        finally:  # out of line: queued next, or given up
            if waiters and waiters[0] is waiter:
                waiters.popleft()
                self._wake_for_room()
            else:
                with contextlib.suppress(ValueError):
                    waiters.remove(waiter)

    def _wake_for_room(self) -> None:
        """Wake the first in line (it checks the room, and wakes the next once queued)."""
        if self._room_waiters and not self._room_waiters[0].done():
            self._room_waiters[0].set_result(None)

    def _schedule(self) -> None:
        # call_soon, not now: every send of this loop turn joins the same request.
        if (
            not self._flush_scheduled
            and self.pending
            and self.in_flight < self.producer.max_in_flight
        ):
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        while self.pending and self.in_flight < self.producer.max_in_flight:
            batch = self._take()
            if not batch:
                return  # what is pending waits for its group's request to finish
            groups = {s.group for s in batch if s.group is not None}
            self.groups_in_flight |= groups
            self.in_flight += 1
            self.loop.create_task(self._send(batch, groups))

    def _take(self) -> list[_Send]:
        """The next request's sends, in order: those whose group is not in flight. It
        walks the sends it takes and those it passes over, never the rest of the queue:
        a caller sending faster than the node answers makes the queue long, and copying
        it per request made each request cost the queue's length (a SYNC group offered
        50,000 msgs/s acknowledged ~15,000)."""
        producer = self.producer
        batch: list[_Send] = []
        kept: list[_Send] = []
        size = 0
        busy = self.groups_in_flight
        pending = self.pending
        while pending:
            send = pending[0]
            if len(batch) >= producer.max_batch_messages or (
                batch and size + len(send.record) > producer.max_batch_bytes
            ):
                break
            pending.popleft()
            if send.future.done():
                self.pending_bytes -= len(send.record)
                continue  # the caller gave up (cancelled): nothing to send
            if send.group is not None and send.group in busy:
                kept.append(send)
                continue
            batch.append(send)
            size += len(send.record)
        pending.extendleft(reversed(kept))  # back at the front, in their order
        self.pending_bytes -= size
        self._wake_for_room()  # what left (taken, or given up by its caller) made room
        return batch

    async def _send(self, batch: list[_Send], groups: set[str]) -> None:
        try:
            await self._send_with_retries(batch)
        except asyncio.CancelledError:  # the loop is closing: never leave a caller waiting
            for send in batch:
                send.future.cancel()
            raise
        except Exception as error:
            for send in batch:
                if not send.future.done():
                    send.future.set_exception(error)
        finally:
            self.in_flight -= 1
            self.groups_in_flight -= groups
            self._schedule()

    async def _send_with_retries(self, batch: list[_Send]) -> None:
        producer = self.producer
        state = producer.loop_state()
        attempts = producer.max_attempts
        stale = False
        for attempt in range(1, attempts + 1):
            last = attempt == attempts
            address = None
            try:
                route = producer.route(self.topic, refresh=stale)
                master = route.masters.get(self.broker_group)
                if master is None:
                    raise FerryError(
                        pb.HA_NOT_AVAILABLE,
                        "HA_NOT_AVAILABLE",
                        f"{self.broker_group} has no master",
                    )
                address = producer.reachable(master)
                request = ProduceCall(
                    topic=self.topic,
                    queue_id=producer.next_queue(route, self.broker_group).queue_id,
                    atomic=False,
                    count=len(batch),
                    records=b"".join([s.record for s in batch]),
                )
                channel = state.channel(producer.remoting_address(address))
                if channel is not None:
                    answer = produce_answer(
                        await channel.call(FerryRequestCode.FERRY_PRODUCE, request.body())
                    )
                else:
                    try:
                        answer = await state.stubs(address)[1].Produce(
                            request.message(), timeout=producer.timeout_s, metadata=state.metadata
                        )
                    except grpc.RpcError as error:
                        raise transport_error(error) from None
            except FerryError as failure:
                producer.failed(address, failure)
                if last or not (failure.retriable or failure.code in ROUTE_STALE_CODES):
                    for send in batch:
                        if not send.future.done():
                            send.future.set_exception(failure)
                    return
                stale = failure.code in ROUTE_STALE_CODES
                await asyncio.sleep(producer_backoff(attempt))
                continue
            offsets = answer.offsets
            if len(offsets) != len(batch):
                # The request was refused as a whole without per-record answers.
                failure = _error(answer.code, answer.message)
                for send in batch:
                    if not send.future.done():
                        send.future.set_exception(failure)
                return
            retry: list[_Send] = []
            failures = {f.index: f for f in answer.failures}
            for index, send in enumerate(batch):
                offset = offsets[index]
                if offset >= 0:
                    if not send.future.done():
                        send.future.set_result(SendReceipt(send.message_id, offset))
                    continue
                failed = failures.get(index)
                code = failed.code if failed is not None else answer.code
                detail = failed.message if failed is not None else answer.message
                if code in RETRIABLE_CODES and not last:
                    retry.append(send)
                    stale = stale or code in ROUTE_STALE_CODES
                elif not send.future.done():
                    send.future.set_exception(_error(code, detail))
            if not retry:
                return
            batch = retry
            await asyncio.sleep(producer_backoff(attempt))


def producer_backoff(attempt: int) -> float:
    return BACKOFF_S * 2 ** (attempt - 1)
