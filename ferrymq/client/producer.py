"""Producer: sync, asyncio and batch sends, with retries on retriable outcomes.

Each request goes to the master of the broker group that holds its queue (``routes``):
requests spread round-robin over every queue of the topic across the cluster, and a FIFO
message group always goes to the same broker group. A failure that may mean a stale route
(node down, a slave answering) refreshes the route before the retry, which is how a
producer follows a failover.

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
from ferrymq.client.routes import ROUTE_STALE_CODES, Endpoints
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
        self.endpoints = Endpoints(address, timeout_s)
        self.max_attempts = max_attempts
        self._next_queue = itertools.count()

    @property
    def connection(self) -> Connection:
        """The access point's connection."""
        return self.endpoints.access

    # ---- requests --------------------------------------------------------------------
    def _request(
        self, messages: Sequence[Message], refresh: bool = False
    ) -> tuple[Connection, rpc.SendMessageRequest]:
        """The request for ``messages`` and the master it goes to."""
        if not messages:
            raise ValueError("nothing to send")
        topic = messages[0].topic
        if any(m.topic != topic for m in messages):
            raise ValueError("a batch goes to one topic")
        route = self.endpoints.route(topic, refresh)
        if not route.queues:
            raise FerryError(pb.TOPIC_NOT_FOUND, "TOPIC_NOT_FOUND", f"{topic} has no queues")
        group = messages[0].message_group
        if group:
            # The node picks the queue of a message group inside its broker group.
            queue = next(q for q in route.queues if q.broker_group == route.broker_for_key(group))
        else:
            # One queue per request: a batch stays together; requests spread round-robin.
            queue = route.queues[next(self._next_queue) % len(route.queues)]
        wire = []
        for message in messages:
            sent = message.to_wire(route.message_type)
            sent.system_properties.queue_id = queue.queue_id
            wire.append(sent)
        connection = self.endpoints.connection(route.masters[queue.broker_group])
        return connection, rpc.SendMessageRequest(messages=wire)

    def _retry(self, error: FerryError, attempt: int) -> bool:
        if attempt >= self.max_attempts:
            return False
        # A topic just created is known to the master a heartbeat after the node that
        # created it: one more try after a fresh route, no more.
        return error.retriable or (error.code == pb.TOPIC_NOT_FOUND and attempt == 1)

    @staticmethod
    def _receipts(answer: rpc.SendMessageResponse) -> list[SendReceipt]:
        check(answer.status)
        return [SendReceipt(e.message_id, e.offset, e.transaction_id) for e in answer.entries]

    # ---- sync --------------------------------------------------------------------------
    def send(self, message: Message) -> SendReceipt:
        return self.send_batch([message])[0]

    def send_batch(self, messages: Sequence[Message]) -> list[SendReceipt]:
        """Send messages of one topic in one request: stored atomically, in order."""
        stale = False
        for attempt in range(1, self.max_attempts + 1):
            try:
                connection, request = self._request(messages, refresh=stale)
                answer = connection.call(connection.messaging.SendMessage, request)
                return self._receipts(answer)
            except FerryError as error:
                if not self._retry(error, attempt):
                    raise
                stale = error.code in ROUTE_STALE_CODES
                time.sleep(BACKOFF_S * 2 ** (attempt - 1))
        raise AssertionError("unreachable")

    # ---- asyncio -----------------------------------------------------------------------
    async def send_async(self, message: Message) -> SendReceipt:
        return (await self.send_batch_async([message]))[0]

    async def send_batch_async(self, messages: Sequence[Message]) -> list[SendReceipt]:
        stale = False
        for attempt in range(1, self.max_attempts + 1):
            try:
                # A cached route makes this non-blocking; a refresh is one unary call.
                connection, request = self._request(messages, refresh=stale)
                try:
                    answer = await connection.aio_messaging.SendMessage(
                        request, timeout=connection.timeout_s, metadata=connection.metadata
                    )
                except grpc.RpcError as error:
                    raise transport_error(error) from None
                return self._receipts(answer)
            except FerryError as error:
                if not self._retry(error, attempt):
                    raise
                stale = error.code in ROUTE_STALE_CODES
                await asyncio.sleep(BACKOFF_S * 2 ** (attempt - 1))
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.endpoints.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
