"""Producer: sync, asyncio and batch sends, with retries on retriable outcomes.

Each request goes to the master of the broker group that holds its queue (``routes``):
requests spread round-robin over every queue of the topic across the cluster, and a FIFO
message group always goes to the same broker group. A failure that may mean a stale route
(node down, a slave answering) refreshes the route before the retry, which is how a
producer follows a failover.

NORMAL and FIFO topics are written with ferrymq's ``Data.Produce`` (records encoded here,
``produce_records.py``); DELAY and TRANSACTION topics with the official SendMessage.

NORMAL and FIFO sends travel on the remoting port (``FERRY_PRODUCE``, the same request
and answer as ``Data.Produce``) when the client uses that door (``transport``, see
``routes.py``); DELAY and TRANSACTION sends stay on gRPC.

``send_async`` coalesces (``coalescer.py``): sends made while earlier requests to the same
broker group are in flight travel together in the next request, Kafka-producer style (no
linger, at most ``max_in_flight`` requests and ``max_batch_messages`` per request). Each
send keeps its own receipt or its own error, and a message group is never in two requests
at once, so a group's messages are stored in the order they were sent. A send waits while
``max_pending_bytes`` of sends are queued before it (``enqueue_async`` returns once queued,
with the future of the receipt).

A retried send carries the same message id, so if the first attempt was stored after all
(a timeout after the write, say) the duplicate is recognisable by id. Non-retriable
statuses (bad input, unknown topic) raise at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import weakref
from collections.abc import Awaitable, Sequence

import grpc

from ferrymq.client.coalescer import Coalescer, producer_backoff
from ferrymq.client.connection import (
    DEFAULT_ADDRESS,
    MAX_MESSAGE_BYTES,
    Connection,
    transport_error,
)
from ferrymq.client.errors import TRANSPORT, FerryError, check
from ferrymq.client.messages import Message, SendReceipt
from ferrymq.client.produce_records import ProduceCall, RecordError, encode_records
from ferrymq.client.remoting_channel import AsyncRemotingChannel, produce_answer
from ferrymq.client.routes import ROUTE_STALE_CODES, Endpoints, QueueRef, TopicRoute
from ferrymq.client.security import ClientSecurity, Signer
from ferrymq.codec.headers import PINNED_QUEUE
from ferrymq.codec.remoting_codes import FerryRequestCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from ferrymq.protocol.ferrymq import data_pb2 as data
from ferrymq.protocol.ferrymq import data_pb2_grpc

DEFAULT_ATTEMPTS = 3
PRODUCE_TYPES = frozenset({pb.NORMAL, pb.FIFO})  # what Data.Produce takes
DEFAULT_MAX_IN_FLIGHT = 4
DEFAULT_MAX_BATCH_MESSAGES = 128
DEFAULT_MAX_BATCH_BYTES = 1 << 20
# What ``send_async`` callers may have queued per topic and broker group before a send waits
# (Kafka's producer: buffer.memory).
DEFAULT_MAX_PENDING_BYTES = 32 << 20


async def _only(receipts: Awaitable[list[SendReceipt]]) -> SendReceipt:
    return (await receipts)[0]


def no_master(broker_group: str) -> FerryError:
    return FerryError(
        pb.HA_NOT_AVAILABLE, "HA_NOT_AVAILABLE", f"broker group {broker_group} has no master now"
    )


class Producer:
    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        *,
        max_attempts: int = DEFAULT_ATTEMPTS,
        timeout_s: float = 10.0,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_batch_messages: int = DEFAULT_MAX_BATCH_MESSAGES,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        security: ClientSecurity | None = None,
        transport: str = "remoting",
    ) -> None:
        """``address``: one node's gRPC address, or several separated by commas;
        ``security``: credentials and TLS (default: from the environment); ``transport``:
        "remoting" or "grpc" (``routes.py``); ``max_pending_bytes``: what ``send_async``
        callers may have queued per topic and broker group before a send waits."""
        limits = (max_in_flight, max_batch_messages, max_batch_bytes, max_pending_bytes)
        if min(limits) < 1:
            raise ValueError(
                "max_in_flight, max_batch_messages, max_batch_bytes, max_pending_bytes must be >= 1"
            )
        self.endpoints = Endpoints(address, timeout_s, security, transport)
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self.max_in_flight = max_in_flight
        self.max_batch_messages = max_batch_messages
        self.max_batch_bytes = max_batch_bytes
        self.max_pending_bytes = max_pending_bytes
        self._next_queue = itertools.count()
        # Per event loop: its channels' stubs and one coalescer per (topic, broker group).
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def connection(self) -> Connection:
        """The access point's connection."""
        return self.endpoints.access

    # ---- where a request goes ----------------------------------------------------------
    def route(self, topic: str, refresh: bool = False) -> TopicRoute:
        """The topic's route; a failure to get one is ``unsent``: no send left for it."""
        try:
            route = self.endpoints.route(topic, refresh)
        except FerryError as error:
            cached = self.endpoints.cached_route(topic)
            if not refresh or cached is None:
                raise FerryError(error.code, error.code_name, error.detail, unsent=True) from None
            route = cached  # nobody answers routes now: the cached master may still be up
        if not route.queues:
            raise FerryError(pb.TOPIC_NOT_FOUND, "TOPIC_NOT_FOUND", f"{topic} has no queues")
        return route

    def remoting_address(self, address: str) -> str | None:
        """Where the node at gRPC ``address`` takes sends (None: on gRPC)."""
        return self.endpoints.remoting_address(address)

    def reachable(self, address: str) -> str:
        """Where a produce meant for the master at ``address`` goes now
        (``Endpoints.reachable``)."""
        return self.endpoints.reachable(address, self.endpoints.uses_remoting)

    def failed(self, address: str | None, error: FerryError) -> None:
        """A request to ``address`` failed: a connection that failed (not a node's
        refusal, not a deadline: a slow node is not avoided) makes it avoided; a refusal
        as no master makes its routes distrusted (``Endpoints.mark_stale``)."""
        if address is None:
            return
        if error.code == TRANSPORT and error.code_name == "UNAVAILABLE":
            self.endpoints.mark_unreachable(address)
        elif error.code == pb.HA_NOT_AVAILABLE:
            self.endpoints.mark_stale(address)

    def next_queue(self, route: TopicRoute, broker_group: str | None = None) -> QueueRef:
        """Round-robin over the topic's queues (of one broker group, when named), one step
        per request."""
        queues = route.queues
        if broker_group is not None:
            queues = tuple(q for q in queues if q.broker_group == broker_group)
            if not queues:
                raise no_master(broker_group)
        return queues[next(self._next_queue) % len(queues)]

    def _target(self, topic: str, group: str | None, refresh: bool) -> tuple[TopicRoute, QueueRef]:
        route = self.route(topic, refresh)
        # A message group always goes to one broker group (whose node picks its queue).
        broker_group = route.broker_for_key(group) if group else None
        return route, self.next_queue(route, broker_group)

    @staticmethod
    def _topic_of(messages: Sequence[Message]) -> str:
        if not messages:
            raise ValueError("nothing to send")
        topic = messages[0].topic
        if len(messages) > 1 and any(m.topic != topic for m in messages):
            raise ValueError("a batch goes to one topic")
        return topic

    def _requests(self, messages: Sequence[Message]):
        """A function of ``refresh`` giving (master address, produce or send request)
        for the next attempt; the records are encoded once."""
        topic = self._topic_of(messages)
        route = self.route(topic)
        message_type = route.message_type
        records = None
        if message_type in PRODUCE_TYPES:
            born_ms = time.time_ns() // 1_000_000
            try:
                records = encode_records(messages, message_type, born_ms)
            except RecordError as error:
                raise FerryError(pb.BAD_REQUEST, "BAD_REQUEST", str(error)) from None
        else:
            try:
                wire = [message.to_wire(message_type) for message in messages]
            except UnicodeEncodeError as error:  # a lone surrogate in a string field
                raise FerryError(
                    pb.BAD_REQUEST,
                    "BAD_REQUEST",
                    f"{error.object[error.start : error.end]!r} is not valid Unicode "
                    f"({error.reason})",
                ) from None

        def attempt(refresh: bool):
            route, queue = self._target(topic, messages[0].message_group, refresh)
            # Data.Produce over gRPC is served by the master only: not sent elsewhere.
            forwardable = records is None or self.endpoints.uses_remoting
            address = self.endpoints.reachable(route.masters[queue.broker_group], forwardable)
            if records is not None:
                return address, ProduceCall(
                    topic=topic,
                    queue_id=queue.queue_id,
                    atomic=True,
                    count=len(messages),
                    records=records,
                )
            for sent in wire:
                sent.system_properties.queue_id = queue.queue_id
            return address, rpc.SendMessageRequest(messages=wire)

        return attempt

    def _retry(self, error: FerryError, attempt: int) -> bool:
        if attempt >= self.max_attempts:
            return False
        # A topic just created is known to the master a heartbeat after the node that
        # created it: one more try after a fresh route, no more.
        return error.retriable or (error.code == pb.TOPIC_NOT_FOUND and attempt == 1)

    @staticmethod
    def _receipts(messages, answer) -> list[SendReceipt]:
        if isinstance(answer, data.ProduceResponse):
            if answer.code != pb.OK:
                check(pb.Status(code=answer.code, message=answer.message))
            return [
                SendReceipt(m.message_id, offset)
                for m, offset in zip(messages, answer.offsets, strict=True)
            ]
        check(answer.status)
        return [SendReceipt(e.message_id, e.offset, e.transaction_id) for e in answer.entries]

    # ---- sync --------------------------------------------------------------------------
    def send(self, message: Message) -> SendReceipt:
        return self.send_batch([message])[0]

    def send_batch(self, messages: Sequence[Message]) -> list[SendReceipt]:
        """Send messages of one topic in one request: stored atomically, in order."""
        requests = self._requests(messages)
        stale = False
        for attempt in range(1, self.max_attempts + 1):
            address = None
            try:
                address, request = requests(stale)
                channel = self.endpoints.channel(address)
                if isinstance(request, ProduceCall) and channel is not None:
                    answer = produce_answer(
                        channel.call(FerryRequestCode.FERRY_PRODUCE, request.body())
                    )
                elif isinstance(request, ProduceCall):
                    connection = self.endpoints.connection(address)
                    answer = connection.call(connection.data.Produce, request.message())
                else:
                    connection = self.endpoints.connection(address)
                    answer = connection.call(connection.messaging.SendMessage, request)
                return self._receipts(messages, answer)
            except FerryError as error:
                self.failed(address, error)
                if not self._retry(error, attempt):
                    raise
                stale = error.code in ROUTE_STALE_CODES
                time.sleep(producer_backoff(attempt))
        raise AssertionError("unreachable")

    # ---- asyncio -----------------------------------------------------------------------
    def loop_state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            state = self._loops[loop] = _LoopState(
                self.endpoints.client_id, self.endpoints.security, self.timeout_s
            )
        return state

    async def send_async(self, message: Message) -> SendReceipt:
        """Send one message; sends made while earlier ones are in flight share a request
        (see the module docstring). Its own receipt, or its own ``FerryError``."""
        coalescer = self._coalescer(message)
        if coalescer is None:
            return (await self.send_batch_async([message]))[0]
        receipt = coalescer.submit(message) or await coalescer.queue_when_room(message)
        return await receipt

    async def enqueue_async(self, message: Message) -> asyncio.Future[SendReceipt]:
        """Queue one message as ``send_async`` sends it, returning once it is queued: the
        future of its receipt. It waits while the queue of its topic and broker group
        holds ``max_pending_bytes`` (Kafka's producer blocks its caller on a full buffer),
        so a caller that sends faster than the node answers is held back here; and many
        sends need no task each."""
        coalescer = self._coalescer(message)
        if coalescer is None:
            return asyncio.ensure_future(_only(self.send_batch_async([message])))
        return coalescer.submit(message) or await coalescer.queue_when_room(message)

    def _coalescer(self, message: Message) -> Coalescer | None:
        """The queue of ``message``'s topic and broker group on this loop; None for the
        topic types ``Data.Produce`` does not take (sent alone, as a batch of one)."""
        route = self.route(message.topic)  # a cached route makes this non-blocking
        if route.message_type not in PRODUCE_TYPES:
            return None
        if message.message_group:
            broker_group = route.broker_for_key(message.message_group)
        else:
            broker_group = self.next_queue(route).broker_group
        state = self.loop_state()
        key = (message.topic, broker_group)
        coalescer = state.coalescers.get(key)
        if coalescer is None:
            coalescer = state.coalescers[key] = Coalescer(
                self, message.topic, broker_group, route.message_type
            )
        return coalescer

    async def send_batch_async(self, messages: Sequence[Message]) -> list[SendReceipt]:
        """``send_batch`` for asyncio callers: one request, stored atomically, in order."""
        requests = self._requests(messages)  # a cached route makes this non-blocking
        state = self.loop_state()
        stale = False
        for attempt in range(1, self.max_attempts + 1):
            address = None
            try:
                address, request = requests(stale)
                channel = state.channel(self.remoting_address(address))
                messaging, data_stub = state.stubs(address)
                try:
                    if isinstance(request, ProduceCall) and channel is not None:
                        answer = produce_answer(
                            await channel.call(FerryRequestCode.FERRY_PRODUCE, request.body())
                        )
                    elif isinstance(request, ProduceCall):
                        answer = await data_stub.Produce(
                            request.message(), timeout=self.timeout_s, metadata=state.metadata
                        )
                    else:
                        answer = await messaging.SendMessage(
                            request, timeout=self.timeout_s, metadata=state.metadata
                        )
                except grpc.RpcError as error:
                    raise transport_error(error) from None
                return self._receipts(messages, answer)
            except FerryError as error:
                self.failed(address, error)
                if not self._retry(error, attempt):
                    raise
                stale = error.code in ROUTE_STALE_CODES
                await asyncio.sleep(producer_backoff(attempt))
        raise AssertionError("unreachable")

    def close(self) -> None:
        for state in list(self._loops.values()):
            state.close_channels()
        self.endpoints.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _LoopState:
    """What a Producer keeps per event loop (grpc.aio channels belong to one loop): one
    channel per master address, and the coalescers."""

    def __init__(self, client_id: str, security: ClientSecurity, timeout_s: float) -> None:
        self.security = security
        fixed = (("x-mq-client-id", client_id), ("x-mq-language", "PYTHON"), PINNED_QUEUE)
        self.signer = Signer(security, fixed)
        self._stubs: dict[str, tuple] = {}
        self._channels: dict[str, AsyncRemotingChannel] = {}
        self.timeout_s = timeout_s
        self.coalescers: dict[tuple[str, str], Coalescer] = {}

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The headers of a call made now (signed, with credentials)."""
        return self.signer.metadata()

    def channel(self, remoting_address: str | None) -> AsyncRemotingChannel | None:
        """This loop's channel to a remoting address (None: the node is reached on gRPC)."""
        if remoting_address is None:
            return None
        found = self._channels.get(remoting_address)
        if found is None:
            found = self._channels[remoting_address] = AsyncRemotingChannel(
                remoting_address, self.timeout_s, self.security
            )
        return found

    def close_channels(self) -> None:
        """Close the remoting connections (those of a loop already closed are gone)."""
        for channel in self._channels.values():
            with contextlib.suppress(RuntimeError):  # the loop is closed
                channel.close()
        self._channels.clear()

    def stubs(self, address: str) -> tuple:
        found = self._stubs.get(address)
        if found is None:
            options = [
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ]
            channel = self.security.aio_channel(address, options)
            found = self._stubs[address] = (
                service_pb2_grpc.MessagingServiceStub(channel),
                data_pb2_grpc.DataStub(channel),
            )
        return found
