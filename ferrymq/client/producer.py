"""Producer: sync, asyncio and batch sends, with retries on retriable outcomes.

A retried send carries the same message id, so if the first attempt was stored after all
(a timeout after the write, say) the duplicate is recognisable by id. Non-retriable
statuses (bad input, unknown topic) raise at once.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence

import grpc

from ferrymq.client.connection import DEFAULT_ADDRESS, Connection, transport_error
from ferrymq.client.errors import FerryError, check
from ferrymq.client.messages import Message, SendReceipt
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc

DEFAULT_ATTEMPTS = 3
BACKOFF_S = 0.05


class Producer:
    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        *,
        max_attempts: int = DEFAULT_ATTEMPTS,
        timeout_s: float = 10.0,
    ) -> None:
        self.connection = Connection(address, timeout_s)
        self.max_attempts = max_attempts
        self._routes: dict[str, tuple[int, int]] = {}  # topic -> (queues, message type)
        self._next_queue = itertools.count()

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

    def _request(self, messages: Sequence[Message]) -> rpc.SendMessageRequest:
        if not messages:
            raise ValueError("nothing to send")
        topic = messages[0].topic
        if any(m.topic != topic for m in messages):
            raise ValueError("a batch goes to one topic")
        queue_count, message_type = self._route(topic)
        # One queue per request: a batch stays together, and requests spread round-robin.
        queue_id = next(self._next_queue) % max(queue_count, 1)
        wire = []
        for message in messages:
            sent = message.to_wire(message_type)
            sent.system_properties.queue_id = queue_id
            wire.append(sent)
        return rpc.SendMessageRequest(messages=wire)

    @staticmethod
    def _receipts(answer: rpc.SendMessageResponse) -> list[SendReceipt]:
        check(answer.status)
        return [SendReceipt(e.message_id, e.offset, e.transaction_id) for e in answer.entries]

    # ---- sync --------------------------------------------------------------------------
    def send(self, message: Message) -> SendReceipt:
        return self.send_batch([message])[0]

    def send_batch(self, messages: Sequence[Message]) -> list[SendReceipt]:
        """Send messages of one topic in one request: stored atomically, in order."""
        request = self._request(messages)
        for attempt in range(1, self.max_attempts + 1):
            try:
                answer = self.connection.call(self.connection.messaging.SendMessage, request)
                return self._receipts(answer)
            except FerryError as error:
                if not error.retriable or attempt == self.max_attempts:
                    raise
                time.sleep(BACKOFF_S * 2 ** (attempt - 1))
        raise AssertionError("unreachable")

    # ---- asyncio -----------------------------------------------------------------------
    async def send_async(self, message: Message) -> SendReceipt:
        return (await self.send_batch_async([message]))[0]

    async def send_batch_async(self, messages: Sequence[Message]) -> list[SendReceipt]:
        request = self._request(messages)  # a cached route makes this non-blocking
        stub = self.connection.aio_messaging
        for attempt in range(1, self.max_attempts + 1):
            try:
                try:
                    answer = await stub.SendMessage(
                        request,
                        timeout=self.connection.timeout_s,
                        metadata=self.connection.metadata,
                    )
                except grpc.RpcError as error:
                    raise transport_error(error) from None
                return self._receipts(answer)
            except FerryError as error:
                if not error.retriable or attempt == self.max_attempts:
                    raise
                await asyncio.sleep(BACKOFF_S * 2 ** (attempt - 1))
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
