"""POP consumption: receive a batch that stays invisible to the group's other consumers,
then ack each message, or change how long it stays invisible (a nack is a short one)."""

from __future__ import annotations

import grpc

from ferrymq.client.connection import DEFAULT_ADDRESS, Connection, transport_error
from ferrymq.client.errors import check
from ferrymq.client.messages import ReceivedMessage
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
    ) -> None:
        self.connection = Connection(address, timeout_s)
        self.group = group
        self.topic = topic
        self.tags = tags

    def receive(
        self, max_messages: int = 16, invisible_s: float = 30.0, wait_s: float = 5.0
    ) -> list[ReceivedMessage]:
        """Up to ``max_messages`` (at most 32), waiting up to ``wait_s`` for any."""
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
                self.connection.messaging.ReceiveMessage(
                    request,
                    timeout=wait_s + self.connection.timeout_s,
                    metadata=self.connection.metadata,
                )
            )
        except grpc.RpcError as error:
            raise transport_error(error) from None
        status = next(p.status for p in parts if p.WhichOneof("content") == "status")
        check(status, pb.MESSAGE_NOT_FOUND)
        return [ReceivedMessage.from_wire(p.message) for p in parts if p.HasField("message")]

    def ack(self, message: ReceivedMessage) -> None:
        answer = self.connection.call(
            self.connection.messaging.AckMessage,
            rpc.AckMessageRequest(
                group=pb.Resource(name=self.group),
                topic=pb.Resource(name=message.topic),
                entries=[
                    rpc.AckMessageEntry(
                        message_id=message.message_id, receipt_handle=message.receipt_handle
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
        )
        request.invisible_duration.FromMilliseconds(int(invisible_s * 1000))
        answer = self.connection.call(self.connection.messaging.ChangeInvisibleDuration, request)
        check(answer.status)
        message.receipt_handle = answer.receipt_handle

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> SimpleConsumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
