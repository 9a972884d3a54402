"""Producer: sync, asyncio and batch sends, with retries on retriable outcomes.

NORMAL and FIFO topics are written with ferrymq's ``Data.Produce`` (records encoded here,
``produce_records.py``); DELAY and TRANSACTION topics with the official SendMessage.

``send_async`` coalesces (``coalescer.py``): sends made while earlier requests of the same
topic are in flight travel together in the next request, Kafka-producer style (no linger,
at most ``max_in_flight`` requests and ``max_batch_messages`` per request). Each send keeps
its own receipt or its own error, and a message group is never in two requests at once,
so a group's messages are stored in the order they were sent.

A retried send carries the same message id, so if the first attempt was stored after all
(a timeout after the write, say) the duplicate is recognisable by id. Non-retriable
statuses (bad input, unknown topic) raise at once.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import weakref
from collections.abc import Sequence

import grpc

from ferrymq.client.coalescer import Coalescer, producer_backoff
from ferrymq.client.connection import (
    DEFAULT_ADDRESS,
    MAX_MESSAGE_BYTES,
    Connection,
    transport_error,
)
from ferrymq.client.errors import FerryError, check
from ferrymq.client.messages import Message, SendReceipt
from ferrymq.client.produce_records import RecordError, encode_record
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
    ) -> None:
        if max_in_flight < 1 or max_batch_messages < 1 or max_batch_bytes < 1:
            raise ValueError("max_in_flight, max_batch_messages, max_batch_bytes must be >= 1")
        self.connection = Connection(address, timeout_s)
        self.max_attempts = max_attempts
        self.max_in_flight = max_in_flight
        self.max_batch_messages = max_batch_messages
        self.max_batch_bytes = max_batch_bytes
        self._routes: dict[str, tuple[int, int]] = {}  # topic -> (queues, message type)
        self._next_queue = itertools.count()
        # Per event loop: its channel's stubs and one coalescer per topic.
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
            weakref.WeakKeyDictionary()
        )

    # ---- requests --------------------------------------------------------------------
    def _route(self, topic: str) -> tuple[int, int]:
        route = self._routes.get(topic)
        if route is None:
            answer = self.connection.call(
                self.connection.messaging.QueryRoute,
                rpc.QueryRouteRequest(topic=pb.Resource(name=topic)),
            )
            check(answer.status)
            queues = answer.message_queues
            route = (len(queues), queues[0].accept_message_types[0] if queues else pb.NORMAL)
            self._routes[topic] = route
        return route

    def next_queue(self, topic: str) -> int:
        """Round-robin over the topic's queues, one step per request."""
        queue_count, _ = self._route(topic)
        return next(self._next_queue) % max(queue_count, 1)

    @staticmethod
    def _topic_of(messages: Sequence[Message]) -> str:
        if not messages:
            raise ValueError("nothing to send")
        topic = messages[0].topic
        if any(m.topic != topic for m in messages):
            raise ValueError("a batch goes to one topic")
        return topic

    def _request(self, messages: Sequence[Message]) -> rpc.SendMessageRequest:
        topic = self._topic_of(messages)
        _, message_type = self._route(topic)
        # One queue per request: a batch stays together, and requests spread round-robin.
        queue_id = self.next_queue(topic)
        wire = []
        for message in messages:
            sent = message.to_wire(message_type)
            sent.system_properties.queue_id = queue_id
            wire.append(sent)
        return rpc.SendMessageRequest(messages=wire)

    def _produce_request(self, messages: Sequence[Message]) -> data.ProduceRequest | None:
        """A Data.Produce request for the batch (atomic), or None when the topic's type
        goes through SendMessage."""
        topic = self._topic_of(messages)
        _, message_type = self._route(topic)
        if message_type not in PRODUCE_TYPES:
            return None
        born_ms = time.time_ns() // 1_000_000
        try:
            records = b"".join([encode_record(m, message_type, born_ms) for m in messages])
        except RecordError as error:
            raise FerryError(pb.BAD_REQUEST, "BAD_REQUEST", str(error)) from None
        return data.ProduceRequest(
            topic=topic,
            queue_id=self.next_queue(topic),
            atomic=True,
            count=len(messages),
            records=records,
        )

    @staticmethod
    def _receipts(answer: rpc.SendMessageResponse) -> list[SendReceipt]:
        check(answer.status)
        return [SendReceipt(e.message_id, e.offset, e.transaction_id) for e in answer.entries]

    @staticmethod
    def _produced(messages: Sequence[Message], answer: data.ProduceResponse) -> list[SendReceipt]:
        if answer.code != pb.OK:
            check(pb.Status(code=answer.code, message=answer.message))
        return [
            SendReceipt(m.message_id, offset)
            for m, offset in zip(messages, answer.offsets, strict=True)
        ]

    # ---- sync --------------------------------------------------------------------------
    def send(self, message: Message) -> SendReceipt:
        return self.send_batch([message])[0]

    def send_batch(self, messages: Sequence[Message]) -> list[SendReceipt]:
        """Send messages of one topic in one request: stored atomically, in order."""
        produce = self._produce_request(messages)
        request = self._request(messages) if produce is None else None
        for attempt in range(1, self.max_attempts + 1):
            try:
                if produce is not None:
                    answer = self.connection.call(self.connection.data.Produce, produce)
                    return self._produced(messages, answer)
                answer = self.connection.call(self.connection.messaging.SendMessage, request)
                return self._receipts(answer)
            except FerryError as error:
                if not error.retriable or attempt == self.max_attempts:
                    raise
                time.sleep(producer_backoff(attempt))
        raise AssertionError("unreachable")

    # ---- asyncio -----------------------------------------------------------------------
    def _loop_state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            state = self._loops[loop] = _LoopState(self.connection.address)
        return state

    async def send_async(self, message: Message) -> SendReceipt:
        """Send one message; sends made while earlier ones are in flight share a request
        (see the module docstring). Its own receipt, or its own ``FerryError``."""
        _, message_type = self._route(message.topic)  # a cached route makes this non-blocking
        if message_type not in PRODUCE_TYPES:
            return (await self.send_batch_async([message]))[0]
        state = self._loop_state()
        coalescer = state.coalescers.get(message.topic)
        if coalescer is None:
            coalescer = state.coalescers[message.topic] = Coalescer(
                self, message.topic, message_type, state.data
            )
        return await coalescer.submit(message)

    async def send_batch_async(self, messages: Sequence[Message]) -> list[SendReceipt]:
        """``send_batch`` for asyncio callers: one request, stored atomically, in order."""
        produce = self._produce_request(messages)  # a cached route makes this non-blocking
        request = self._request(messages) if produce is None else None
        state = self._loop_state()
        metadata = self.connection.metadata
        for attempt in range(1, self.max_attempts + 1):
            try:
                try:
                    if produce is not None:
                        answer = await state.data.Produce(
                            produce, timeout=self.connection.timeout_s, metadata=metadata
                        )
                        return self._produced(messages, answer)
                    answer = await state.messaging.SendMessage(
                        request, timeout=self.connection.timeout_s, metadata=metadata
                    )
                except grpc.RpcError as error:
                    raise transport_error(error) from None
                return self._receipts(answer)
            except FerryError as error:
                if not error.retriable or attempt == self.max_attempts:
                    raise
                await asyncio.sleep(producer_backoff(attempt))
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _LoopState:
    """What a Producer keeps per event loop: grpc.aio channels belong to one loop."""

    def __init__(self, address: str) -> None:
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ]
        self.channel = grpc.aio.insecure_channel(address, options=options)
        self.messaging = service_pb2_grpc.MessagingServiceStub(self.channel)
        self.data = data_pb2_grpc.DataStub(self.channel)
        self.coalescers: dict[str, Coalescer] = {}
