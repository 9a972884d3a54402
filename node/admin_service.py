"""ferrymq's ``Admin`` service: topics, groups, consumer progress and message queries.

Status codes follow google.rpc: 0 OK, 3 INVALID_ARGUMENT, 5 NOT_FOUND, 6 ALREADY_EXISTS.
"""

from __future__ import annotations

from ferrymq.protocol.ferrymq import admin_pb2 as api
from ferrymq.protocol.ferrymq import admin_pb2_grpc
from node.consumer_offsets import ConsumerOffsets
from node.group_members import GroupMembers
from node.pop_state import PopState
from node.topics import GroupConfig, MessageType, Permission, TopicConfig, TopicError, TopicTable
from store.message import StoredMessage
from store.message_store import MessageStore

OK = api.Status(code=0, message="OK")
CODES = {
    "TOPIC_NOT_FOUND": 5,
    "CONSUMER_GROUP_NOT_FOUND": 5,
    "TOPIC_EXISTS": 6,
    "GROUP_EXISTS": 6,
}
TYPES = {
    api.NORMAL: MessageType.NORMAL,
    api.FIFO: MessageType.FIFO,
    api.DELAY: MessageType.DELAY,
    api.TRANSACTION: MessageType.TRANSACTION,
    api.MESSAGE_TYPE_UNSPECIFIED: MessageType.NORMAL,
}
PERMISSIONS = {
    api.READ: Permission.READ,
    api.WRITE: Permission.WRITE,
    api.READ_WRITE: Permission.READ_WRITE,
    api.PERMISSION_UNSPECIFIED: Permission.READ_WRITE,
}


def failure(error: TopicError) -> api.Status:
    return api.Status(code=CODES.get(error.reason, 3), message=str(error))


def topic_message(config: TopicConfig) -> api.Topic:
    return api.Topic(
        name=config.name,
        queue_count=config.queue_count,
        message_type=api.MessageType.Value(config.message_type.value),
        permission=api.Permission.Value(config.permission.value),
    )


def stored_message(stored: StoredMessage, broker_group: str) -> api.StoredMessage:
    return api.StoredMessage(
        topic=stored.topic,
        queue_id=stored.queue_id,
        queue_offset=stored.queue_offset,
        physical_offset=stored.physical_offset,
        offset_message_id=stored.offset_message_id,
        message_id=stored.unique_key or stored.offset_message_id,
        tag=stored.tags or "",
        keys=stored.keys,
        properties=stored.properties,
        body=stored.body,
        born_timestamp_ms=stored.born_timestamp_ms,
        store_timestamp_ms=stored.store_timestamp_ms,
        broker_group=broker_group,
    )


class AdminService(admin_pb2_grpc.AdminServicer):
    def __init__(
        self,
        store: MessageStore,
        topics: TopicTable,
        offsets: ConsumerOffsets,
        pop_state: PopState,
        members: GroupMembers,
        broker_group: str,
    ) -> None:
        self.members = members
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.pop_state = pop_state
        self.broker_group = broker_group

    def _config_of(self, topic: api.Topic) -> TopicConfig:
        return TopicConfig(
            name=topic.name,
            queue_count=topic.queue_count or 8,
            message_type=TYPES[topic.message_type],
            permission=PERMISSIONS[topic.permission],
        )

    async def CreateTopic(self, request, context):
        try:
            created = self.topics.create_topic(self._config_of(request.topic))
        except TopicError as error:
            return api.CreateTopicResponse(status=failure(error))
        return api.CreateTopicResponse(status=OK, topic=topic_message(created))

    async def UpdateTopic(self, request, context):
        try:
            updated = self.topics.update_topic(self._config_of(request.topic))
        except TopicError as error:
            return api.UpdateTopicResponse(status=failure(error))
        return api.UpdateTopicResponse(status=OK, topic=topic_message(updated))

    async def DeleteTopic(self, request, context):
        try:
            self.topics.delete_topic(request.name)
        except TopicError as error:
            return api.DeleteTopicResponse(status=failure(error))
        return api.DeleteTopicResponse(status=OK)

    async def ListTopics(self, request, context):
        topics = [
            topic_message(t) for t in sorted(self.topics.topics.values(), key=lambda t: t.name)
        ]
        return api.ListTopicsResponse(status=OK, topics=topics)

    async def DescribeTopic(self, request, context):
        try:
            topic = self.topics.topic(request.name)
        except TopicError as error:
            return api.DescribeTopicResponse(status=failure(error))
        queues = [
            api.TopicQueue(
                queue_id=q,
                broker_group=self.broker_group,
                min_offset=self.store.min_offset_in_queue(topic.name, q),
                max_offset=self.store.max_offset_in_queue(topic.name, q),
            )
            for q in range(topic.queue_count)
        ]
        return api.DescribeTopicResponse(status=OK, topic=topic_message(topic), queues=queues)

    async def CreateGroup(self, request, context):
        group = request.group
        try:
            created = self.topics.create_group(
                GroupConfig(group.name, group.max_delivery_attempts or 16, group.fifo)
            )
        except TopicError as error:
            return api.CreateGroupResponse(status=failure(error))
        return api.CreateGroupResponse(
            status=OK,
            group=api.Group(
                name=created.name,
                max_delivery_attempts=created.max_delivery_attempts,
                fifo=created.fifo,
            ),
        )

    async def DeleteGroup(self, request, context):
        try:
            self.topics.delete_group(request.name)
        except TopicError as error:
            return api.DeleteGroupResponse(status=failure(error))
        return api.DeleteGroupResponse(status=OK)

    async def ListGroups(self, request, context):
        groups = [
            api.Group(name=g.name, max_delivery_attempts=g.max_delivery_attempts, fifo=g.fifo)
            for g in sorted(self.topics.groups.values(), key=lambda g: g.name)
        ]
        return api.ListGroupsResponse(status=OK, groups=groups)

    async def GroupProgress(self, request, context):
        try:
            self.topics.group(request.group)
            topic = self.topics.topic(request.topic)
        except TopicError as error:
            return api.GroupProgressResponse(status=failure(error))
        queues = []
        for queue_id in range(topic.queue_count):
            broker_offset = self.store.max_offset_in_queue(topic.name, queue_id)
            # A group consumes by offsets (pull) or by POP; POP's position, when it has
            # one, is where everything below is acked, dead-lettered or filtered out.
            cursor = self.pop_state.cursor((request.group, topic.name, queue_id))
            committed = self.offsets.get(request.group, topic.name, queue_id)
            if cursor is not None:
                consumer_offset, in_flight = cursor.consumed_below, len(cursor.in_flight)
            else:
                consumer_offset, in_flight = (committed if committed is not None else 0), 0
            queues.append(
                api.QueueProgress(
                    topic=topic.name,
                    queue_id=queue_id,
                    broker_group=self.broker_group,
                    broker_offset=broker_offset,
                    consumer_offset=consumer_offset,
                    lag=max(0, broker_offset - consumer_offset),
                    in_flight=in_flight,
                )
            )
        return api.GroupProgressResponse(status=OK, queues=queues)

    async def GroupMembers(self, request, context):
        try:
            self.topics.group(request.group)
        except TopicError as error:
            return api.GroupMembersResponse(status=failure(error))
        members = [
            api.GroupMember(client_id=client_id, last_heartbeat_ms=seen)
            for client_id, seen in self.members.live(request.group)
        ]
        return api.GroupMembersResponse(status=OK, members=members)

    async def QueryMessageById(self, request, context):
        found = self.store.look_message_by_id(request.message_id)
        if found is None and request.topic:
            found = self.store.query_by_unique_key(request.topic, request.message_id)
        messages = [stored_message(found, self.broker_group)] if found else []
        return api.QueryMessagesResponse(status=OK, messages=messages)

    async def QueryMessageByKey(self, request, context):
        found = self.store.query_by_key(
            request.topic,
            request.key,
            max_count=request.max_count or 32,
            begin_ms=request.begin_timestamp_ms,
            end_ms=request.end_timestamp_ms or (1 << 62),
        )
        return api.QueryMessagesResponse(
            status=OK, messages=[stored_message(m, self.broker_group) for m in found]
        )

    async def QueryMessageByOffset(self, request, context):
        page = self.store.get_messages(request.topic, request.queue_id, request.offset, 1)
        messages = [
            stored_message(m, self.broker_group)
            for m in page.messages
            if m.queue_offset == request.offset
        ]
        return api.QueryMessagesResponse(status=OK, messages=messages)

    async def QueryOffsetByTime(self, request, context):
        offset = self.store.offset_by_time(request.topic, request.queue_id, request.timestamp_ms)
        return api.QueryOffsetByTimeResponse(status=OK, offset=offset)
