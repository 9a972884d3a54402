"""Administration through the node's Admin service: topics, groups, progress, queries."""

from __future__ import annotations

from dataclasses import dataclass

from ferrymq.client.connection import DEFAULT_ADDRESS, Connection
from ferrymq.client.errors import check_admin
from ferrymq.protocol.ferrymq import admin_pb2 as api

MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION")
PERMISSIONS = ("READ", "WRITE", "READ_WRITE")


@dataclass(frozen=True)
class TopicInfo:
    name: str
    queue_count: int
    message_type: str
    permission: str


@dataclass(frozen=True)
class QueueInfo:
    queue_id: int
    broker_group: str
    min_offset: int
    max_offset: int


@dataclass(frozen=True)
class GroupInfo:
    name: str
    max_delivery_attempts: int
    fifo: bool


@dataclass(frozen=True)
class QueueProgress:
    topic: str
    queue_id: int
    broker_group: str
    broker_offset: int
    consumer_offset: int
    lag: int
    in_flight: int


@dataclass(frozen=True)
class StoredMessage:
    topic: str
    queue_id: int
    queue_offset: int
    message_id: str
    offset_message_id: str
    tag: str
    keys: list[str]
    properties: dict[str, str]
    body: bytes
    born_timestamp_ms: int
    store_timestamp_ms: int
    broker_group: str


def _topic(t: api.Topic) -> TopicInfo:
    return TopicInfo(
        t.name,
        t.queue_count,
        api.MessageType.Name(t.message_type),
        api.Permission.Name(t.permission),
    )


def _message(m: api.StoredMessage) -> StoredMessage:
    return StoredMessage(
        m.topic,
        m.queue_id,
        m.queue_offset,
        m.message_id,
        m.offset_message_id,
        m.tag,
        list(m.keys),
        dict(m.properties),
        m.body,
        m.born_timestamp_ms,
        m.store_timestamp_ms,
        m.broker_group,
    )


class Admin:
    def __init__(self, address: str = DEFAULT_ADDRESS, timeout_s: float = 10.0) -> None:
        self.connection = Connection(address, timeout_s)
        self.stub = self.connection.admin

    def _call(self, method, request):
        answer = self.connection.call(method, request)
        check_admin(answer.status)
        return answer

    # ---- topics ----------------------------------------------------------------------
    def create_topic(
        self,
        name: str,
        queue_count: int = 8,
        message_type: str = "NORMAL",
        permission: str = "READ_WRITE",
    ) -> TopicInfo:
        topic = api.Topic(
            name=name,
            queue_count=queue_count,
            message_type=api.MessageType.Value(message_type),
            permission=api.Permission.Value(permission),
        )
        return _topic(self._call(self.stub.CreateTopic, api.CreateTopicRequest(topic=topic)).topic)

    def update_topic(
        self, name: str, queue_count: int, permission: str = "READ_WRITE"
    ) -> TopicInfo:
        current = self.describe_topic(name)[0]
        topic = api.Topic(
            name=name,
            queue_count=queue_count,
            message_type=api.MessageType.Value(current.message_type),
            permission=api.Permission.Value(permission),
        )
        return _topic(self._call(self.stub.UpdateTopic, api.UpdateTopicRequest(topic=topic)).topic)

    def delete_topic(self, name: str) -> None:
        self._call(self.stub.DeleteTopic, api.DeleteTopicRequest(name=name))

    def list_topics(self) -> list[TopicInfo]:
        return [_topic(t) for t in self._call(self.stub.ListTopics, api.ListTopicsRequest()).topics]

    def describe_topic(self, name: str) -> tuple[TopicInfo, list[QueueInfo]]:
        answer = self._call(self.stub.DescribeTopic, api.DescribeTopicRequest(name=name))
        queues = [
            QueueInfo(q.queue_id, q.broker_group, q.min_offset, q.max_offset) for q in answer.queues
        ]
        return _topic(answer.topic), queues

    # ---- groups ----------------------------------------------------------------------
    def create_group(
        self, name: str, max_delivery_attempts: int = 16, fifo: bool = False
    ) -> GroupInfo:
        group = api.Group(name=name, max_delivery_attempts=max_delivery_attempts, fifo=fifo)
        created = self._call(self.stub.CreateGroup, api.CreateGroupRequest(group=group)).group
        return GroupInfo(created.name, created.max_delivery_attempts, created.fifo)

    def delete_group(self, name: str) -> None:
        self._call(self.stub.DeleteGroup, api.DeleteGroupRequest(name=name))

    def list_groups(self) -> list[GroupInfo]:
        answer = self._call(self.stub.ListGroups, api.ListGroupsRequest())
        return [GroupInfo(g.name, g.max_delivery_attempts, g.fifo) for g in answer.groups]

    def group_progress(self, group: str, topic: str) -> list[QueueProgress]:
        answer = self._call(
            self.stub.GroupProgress, api.GroupProgressRequest(group=group, topic=topic)
        )
        return [
            QueueProgress(
                q.topic,
                q.queue_id,
                q.broker_group,
                q.broker_offset,
                q.consumer_offset,
                q.lag,
                q.in_flight,
            )
            for q in answer.queues
        ]

    def group_members(self, group: str) -> list[str]:
        answer = self._call(self.stub.GroupMembers, api.GroupMembersRequest(group=group))
        return [m.client_id for m in answer.members]

    # ---- queries ---------------------------------------------------------------------
    def query_by_id(self, message_id: str, topic: str = "") -> list[StoredMessage]:
        request = api.QueryMessageByIdRequest(topic=topic, message_id=message_id)
        return [_message(m) for m in self._call(self.stub.QueryMessageById, request).messages]

    def query_by_key(self, topic: str, key: str, max_count: int = 32) -> list[StoredMessage]:
        request = api.QueryMessageByKeyRequest(topic=topic, key=key, max_count=max_count)
        return [_message(m) for m in self._call(self.stub.QueryMessageByKey, request).messages]

    def query_by_offset(self, topic: str, queue_id: int, offset: int) -> list[StoredMessage]:
        request = api.QueryMessageByOffsetRequest(topic=topic, queue_id=queue_id, offset=offset)
        return [_message(m) for m in self._call(self.stub.QueryMessageByOffset, request).messages]

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        request = api.QueryOffsetByTimeRequest(
            topic=topic, queue_id=queue_id, timestamp_ms=timestamp_ms
        )
        return self._call(self.stub.QueryOffsetByTime, request).offset

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
