"""POP consumption: receive a batch that stays invisible to the group's other consumers,
then ack each message, or change how long it stays invisible (a nack is a short one).

A receive pops one broker group's master (the topic's whole share there); receives take
turns over the broker groups of the topic, asking each without waiting first and long
polling only when none had anything. Acks go to the master the message came from."""

from __future__ import annotations

import grpc

from ferrymq.client.connection import DEFAULT_ADDRESS, Connection, transport_error
from ferrymq.client.errors import FerryError, check
from ferrymq.client.messages import ReceivedMessage
from ferrymq.client.routes import ROUTE_STALE_CODES, Endpoints
from ferrymq.client.security import ClientSecurity
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc


class SimpleConsumer:
    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        group: str = "",
        topic: str = "",
        *,
        tags: str = "*",
        timeout_s: float = 10.0,
        security: ClientSecurity | None = None,
    ) -> None:
        self.endpoints = Endpoints(address, timeout_s, security)
        self.group = group
        self.topic = topic
        self.tags = tags
        self._turn = 0

    @property
    def connection(self) -> Connection:
        """The access point's connection."""
        return self.endpoints.access

    def receive(
        self, max_messages: int = 16, invisible_s: float = 30.0, wait_s: float = 5.0
    ) -> list[ReceivedMessage]:
        """Up to ``max_messages`` (at most 32), waiting up to ``wait_s`` for any."""
        groups = self.endpoints.route(self.topic).broker_groups
        for step in range(len(groups)):
            broker_group = groups[(self._turn + step) % len(groups)]
            received = self._receive(broker_group, max_messages, invisible_s, 0)
            if received:
                self._turn += step + 1
                return received
        broker_group = groups[self._turn % len(groups)]
        self._turn += 1
        return self._receive(broker_group, max_messages, invisible_s, wait_s)

    def _receive(
        self, broker_group: str, max_messages: int, invisible_s: float, wait_s: float
    ) -> list[ReceivedMessage]:
        try:
            master = self.endpoints.master(self.topic, broker_group)
            return self._pop(master, broker_group, max_messages, invisible_s, wait_s)
        except FerryError as error:
            if error.code in ROUTE_STALE_CODES:
                self.endpoints.forget(self.topic)
            raise

    def _pop(
        self,
        master: Connection,
        broker_group: str,
        max_messages: int,
        invisible_s: float,
        wait_s: float,
    ) -> list[ReceivedMessage]:
        request = rpc.ReceiveMessageRequest(
            group=pb.Resource(name=self.group),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=self.topic), id=-1),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression=self.tags),
            batch_size=max_messages,
            auto_renew=False,
        )
        request.invisible_duration.FromMilliseconds(int(invisible_s * 1000))
        request.long_polling_timeout.FromMilliseconds(int(wait_s * 1000))
        try:
            parts = list(
                master.messaging.ReceiveMessage(
                    request, timeout=wait_s + master.timeout_s, metadata=master.metadata
                )
            )
        except grpc.RpcError as error:
            raise transport_error(error) from None
        status = next(p.status for p in parts if p.WhichOneof("content") == "status")
        check(status, pb.MESSAGE_NOT_FOUND)
        return [
            ReceivedMessage.from_wire(p.message, broker_group)
            for p in parts
            if p.HasField("message")
        ]

    def _master_of(self, message: ReceivedMessage) -> Connection:
        groups = self.endpoints.route(self.topic).broker_groups
        return self.endpoints.master(self.topic, message.broker_group or groups[0])

    def ack(self, message: ReceivedMessage) -> None:
        master = self._master_of(message)
        answer = master.call(
            master.messaging.AckMessage,
            rpc.AckMessageRequest(
                group=pb.Resource(name=self.group),
                topic=pb.Resource(name=message.topic),
                entries=[
                    rpc.AckMessageEntry(
                        message_id=message.message_id,
                        receipt_handle=message.receipt_handle,
                        lite_topic=message.lite_topic,
                    )
                ],
            ),
        )
        check(answer.status)

    def change_invisible_duration(self, message: ReceivedMessage, invisible_s: float) -> None:
        """Keep ``message`` invisible ``invisible_s`` from now; its handle is replaced."""
        request = rpc.ChangeInvisibleDurationRequest(
            group=pb.Resource(name=self.group),
            topic=pb.Resource(name=message.topic),
            receipt_handle=message.receipt_handle,
            message_id=message.message_id,
            lite_topic=message.lite_topic,  # a lite topic's message: named (None: unset)
        )
        request.invisible_duration.FromMilliseconds(int(invisible_s * 1000))
        master = self._master_of(message)
        answer = master.call(master.messaging.ChangeInvisibleDuration, request)
        check(answer.status)
        message.receipt_handle = answer.receipt_handle

    def close(self) -> None:
        self.endpoints.close()

    def __enter__(self) -> SimpleConsumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
