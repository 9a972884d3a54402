"""Raw gRPC calls against a node, as the tests write them: the stubs of an address, a topic
or group created through Admin, a message to send, a pull, a POP receive and its ack. Each
asserts the Admin call succeeded; the messaging calls return what the node answered."""

from __future__ import annotations

import grpc

from ferrymq.codec.headers import PINNED_QUEUE
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from ferrymq.protocol.ferrymq import admin_pb2_grpc


class _Details(grpc.ClientCallDetails):
    def __init__(self, details, metadata) -> None:
        self.method = details.method
        self.timeout = details.timeout
        self.metadata = metadata
        self.credentials = details.credentials
        self.wait_for_ready = details.wait_for_ready
        self.compression = details.compression


class PinnedQueues(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Every call says its messages go to the queues they name (``ferrymq.codec.headers``),
    as the SDK does: these tests read back the queues they wrote."""

    def _pinned(self, details):
        return _Details(details, [*(details.metadata or ()), PINNED_QUEUE])

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._pinned(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._pinned(details), request)

    def intercept_stream_stream(self, continuation, details, requests):
        return continuation(self._pinned(details), requests)


def stubs(address: str):
    """A channel whose SendMessage calls pin their queues, and its two stubs."""
    channel = grpc.intercept_channel(grpc.insecure_channel(address), PinnedQueues())
    return (
        channel,
        service_pb2_grpc.MessagingServiceStub(channel),
        admin_pb2_grpc.AdminStub(channel),
    )


def create_topic(admin, name: str, queues: int = 4, message_type=api.NORMAL) -> None:
    response = admin.CreateTopic(
        api.CreateTopicRequest(
            topic=api.Topic(name=name, queue_count=queues, message_type=message_type)
        )
    )
    assert response.status.code == 0, response.status


def message(topic: str, body: bytes, message_id: str, **system) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name=topic),
        body=body,
        system_properties=pb.SystemProperties(
            message_id=message_id, message_type=system.pop("message_type", pb.NORMAL), **system
        ),
    )


def queue_of(topic: str, queue_id: int) -> pb.MessageQueue:
    return pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id)


def pull(messaging, topic, queue_id, offset, group="G", wait_s=0, tags=""):
    request = rpc.PullMessageRequest(
        group=pb.Resource(name=group),
        message_queue=queue_of(topic, queue_id),
        offset=offset,
        batch_size=32,
        filter_expression=pb.FilterExpression(type=pb.TAG, expression=tags or "*"),
    )
    request.long_polling_timeout.seconds = wait_s
    parts = list(messaging.PullMessage(request, timeout=wait_s + 5))
    status = next(p.status for p in parts if p.WhichOneof("content") == "status")
    messages = [p.message for p in parts if p.WhichOneof("content") == "message"]
    next_offset = next(
        (p.next_offset for p in parts if p.WhichOneof("content") == "next_offset"), None
    )
    return status, messages, next_offset


def create_group(admin, name: str, **options) -> None:
    response = admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name=name, **options)))
    assert response.status.code == 0, response.status


def receive(messaging, topic, group="G", batch=32, invisible_s=30, wait_s=0, tags="*", **kw):
    request = rpc.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=queue_of(topic, 0),
        filter_expression=pb.FilterExpression(type=kw.pop("filter_type", pb.TAG), expression=tags),
        batch_size=batch,
        auto_renew=False,
    )
    if invisible_s is not None:
        request.invisible_duration.seconds = invisible_s
    request.long_polling_timeout.seconds = wait_s
    parts = list(
        messaging.ReceiveMessage(
            request, timeout=kw.pop("timeout", wait_s + 5), metadata=kw.pop("metadata", None)
        )
    )
    statuses = [p.status for p in parts if p.WhichOneof("content") == "status"]
    assert len(statuses) == 1, parts
    messages = [p.message for p in parts if p.WhichOneof("content") == "message"]
    return statuses[0], messages, parts


def ack(messaging, topic, handles, group="G"):
    return messaging.AckMessage(
        rpc.AckMessageRequest(
            group=pb.Resource(name=group),
            topic=pb.Resource(name=topic),
            entries=[rpc.AckMessageEntry(message_id="x", receipt_handle=h) for h in handles],
        )
    )
