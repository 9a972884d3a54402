"""ferrymq's ``Admin`` service: topics, groups, cluster status, consumer progress and
message queries.

Topic and group changes are routing commands: checked against the local routing state
first (a precise error costs no Raft round), then committed through Raft, so they are the
same on every node once the call returns OK. Status codes follow google.rpc: 0 OK,
3 INVALID_ARGUMENT, 5 NOT_FOUND, 6 ALREADY_EXISTS, 9 FAILED_PRECONDITION, 14 UNAVAILABLE
(no routing quorum: nothing changed, or an unknown outcome, which the message says).
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from ferrymq.codec.commitlog_record import StoredMessage
from ferrymq.protocol.ferrymq import admin_pb2 as api
from ferrymq.protocol.ferrymq import admin_pb2_grpc
from ha.replicated_store import ReplicatedStore
from ha.role import ReplicationRole, SwitchoverError
from node.authentication import SIGNED_HEADER
from node.consumer_offsets import ConsumerOffsets
from node.group_members import GroupMembers
from node.pop_state import PopState
from node.secret_box import SecretBox
from node.topics import MessageType, Permission, TopicError, TopicTable
from node.user_admin import UserAdmin
from routing.commands import (
    CommandResult,
    CreateGroup,
    CreateTopic,
    DeleteGroup,
    DeleteTopic,
    UpdateTopic,
)
from routing.metadata import GroupConfig, Role, TopicRoute
from routing.replica import RoutingReplica, RoutingUnavailable

OK = api.Status(code=0, message="OK")
CODES = {
    "TOPIC_NOT_FOUND": 5,
    "CONSUMER_GROUP_NOT_FOUND": 5,
    "TOPIC_EXISTS": 6,
    "GROUP_EXISTS": 6,
    "UNKNOWN_BROKER_GROUP": 5,
    "NO_BROKER_GROUP": 9,
    "USER_EXISTS": 6,
    "USER_NOT_FOUND": 5,
    "ACL_NOT_FOUND": 5,
}
UNAVAILABLE = 14
TYPES = {
    api.NORMAL: MessageType.NORMAL,
    api.FIFO: MessageType.FIFO,
    api.DELAY: MessageType.DELAY,
    api.TRANSACTION: MessageType.TRANSACTION,
    api.MESSAGE_TYPE_UNSPECIFIED: MessageType.UNSPECIFIED,
}
TYPE_NAMES = {kind: api.MessageType.Name(number) for number, kind in TYPES.items()}
PERMISSIONS = {
    api.READ: Permission.READ,
    api.WRITE: Permission.WRITE,
    api.READ_WRITE: Permission.READ_WRITE,
    api.PERMISSION_UNSPECIFIED: Permission.READ_WRITE,
}


def unknown_enum(topic: api.Topic) -> api.Status | None:
    """INVALID_ARGUMENT for a message type or permission number this node does not know
    (proto3 enums take any number off the wire)."""
    if topic.message_type not in TYPES:
        return api.Status(code=3, message=f"unknown message_type {topic.message_type}")
    if topic.permission not in PERMISSIONS:
        return api.Status(code=3, message=f"unknown permission {topic.permission}")
    return None


def failure(error: TopicError) -> api.Status:
    return api.Status(code=CODES.get(error.reason, 3), message=str(error))


def forwarded_credentials(context) -> tuple[tuple[str, str], ...]:
    """The caller's signature headers, so the node a call is handed to authorizes the
    same user (the signature is valid for the clock-skew window on any node)."""
    return tuple(
        (key, value)
        for key, value in context.invocation_metadata()
        if key in ("authorization", SIGNED_HEADER)
    )


def topic_message(route: TopicRoute) -> api.Topic:
    return api.Topic(
        name=route.name,
        queue_count=max((count for _, count in route.queues), default=0),
        message_type=api.MessageType.Value(TYPE_NAMES[route.message_type]),
        permission=api.Permission.Value(route.permission.value),
        broker_groups=[group for group, _ in route.queues],
    )


def group_message(config: GroupConfig) -> api.Group:
    return api.Group(
        name=config.name, max_delivery_attempts=config.max_delivery_attempts, fifo=config.fifo
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
        store: ReplicatedStore,
        topics: TopicTable,
        offsets: ConsumerOffsets,
        pop_state: PopState,
        members: GroupMembers,
        broker_group: str,
        routing: RoutingReplica,
        node_id: str = "",
        replication: ReplicationRole | None = None,
        *,
        secret_box: SecretBox | None = None,
        peer_channel: Callable[[str], grpc.aio.Channel] = grpc.aio.insecure_channel,
        untyped_topics: MessageType = MessageType.UNSPECIFIED,
    ) -> None:
        """``untyped_topics``: what a topic created without a type becomes (UNSPECIFIED
        takes every type, as in RocketMQ 5; ``[messages] untyped_topics_take_any_type``)."""
        self.untyped_topics = untyped_topics
        self.users = UserAdmin(routing, secret_box, self._change)
        self.peer_channel = peer_channel
        self.routing = routing
        self.replication = replication
        self.node_id = node_id
        self.members = members
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.pop_state = pop_state
        self.broker_group = broker_group

    async def _change(self, command: object) -> tuple[api.Status, CommandResult | None]:
        """Check ``command`` locally, then commit it through Raft."""
        try:
            self.routing.read(lambda state: state.check(command))
            result = await self.routing.submit(command)
        except TopicError as error:
            return failure(error), None
        except RoutingUnavailable as error:
            return api.Status(code=UNAVAILABLE, message=f"ROUTING_UNAVAILABLE: {error}"), None
        if not result.ok:
            return failure(TopicError(result.reason, result.detail)), None
        return OK, result

    async def CreateTopic(self, request, context):
        topic = request.topic
        if (refused := unknown_enum(topic)) is not None:
            return api.CreateTopicResponse(status=refused)
        status, result = await self._change(
            CreateTopic(
                name=topic.name,
                queue_count=topic.queue_count,
                broker_groups=tuple(topic.broker_groups),
                message_type=TYPES[topic.message_type]
                if topic.message_type != api.MESSAGE_TYPE_UNSPECIFIED
                else self.untyped_topics,
                permission=PERMISSIONS[topic.permission],
            )
        )
        if result is None:
            return api.CreateTopicResponse(status=status)
        return api.CreateTopicResponse(status=OK, topic=topic_message(result.value))

    async def UpdateTopic(self, request, context):
        topic = request.topic
        if (refused := unknown_enum(topic)) is not None:
            return api.UpdateTopicResponse(status=refused)
        status, result = await self._change(
            UpdateTopic(
                name=topic.name,
                queue_count=topic.queue_count,
                broker_groups=tuple(topic.broker_groups),
                permission=PERMISSIONS[topic.permission],
            )
        )
        if result is None:
            return api.UpdateTopicResponse(status=status)
        return api.UpdateTopicResponse(status=OK, topic=topic_message(result.value))

    async def DeleteTopic(self, request, context):
        status, _ = await self._change(DeleteTopic(request.name))
        return api.DeleteTopicResponse(status=status)

    async def ListTopics(self, request, context):
        routes = self.routing.read(
            lambda state: sorted(state.topics.values(), key=lambda t: t.name)
        )
        return api.ListTopicsResponse(status=OK, topics=[topic_message(t) for t in routes])

    async def DescribeTopic(self, request, context):
        try:
            route = self.routing.read(lambda state: state.topic(request.name))
        except TopicError as error:
            return api.DescribeTopicResponse(status=failure(error))
        queues = []
        for broker_group, count in route.queues:
            local = broker_group == self.broker_group
            for q in range(count):
                # Offsets of another broker group's queues live on its nodes: -1 here.
                queues.append(
                    api.TopicQueue(
                        queue_id=q,
                        broker_group=broker_group,
                        min_offset=self.store.min_offset_in_queue(route.name, q) if local else -1,
                        max_offset=self.store.max_offset_in_queue(route.name, q) if local else -1,
                    )
                )
        return api.DescribeTopicResponse(status=OK, topic=topic_message(route), queues=queues)

    async def CreateGroup(self, request, context):
        group = request.group
        status, result = await self._change(
            CreateGroup(group.name, group.max_delivery_attempts or 16, group.fifo)
        )
        if result is None:
            return api.CreateGroupResponse(status=status)
        return api.CreateGroupResponse(status=OK, group=group_message(result.value))

    async def DeleteGroup(self, request, context):
        status, _ = await self._change(DeleteGroup(request.name))
        return api.DeleteGroupResponse(status=status)

    async def ListGroups(self, request, context):
        groups = self.routing.read(
            lambda state: sorted(state.groups.values(), key=lambda g: g.name)
        )
        return api.ListGroupsResponse(status=OK, groups=[group_message(g) for g in groups])

    async def ClusterStatus(self, request, context):
        raft = self.routing.status()

        def snapshot(state):
            return list(state.members.values()), list(state.broker_groups.values())

        members, groups = self.routing.read(snapshot)
        masters = {g.name: (g.master, g.epoch) for g in groups}
        nodes = []
        for m in sorted(members, key=lambda m: (m.broker_group, m.node_id)):
            master, epoch = masters.get(m.broker_group, (None, 0))
            nodes.append(
                api.NodeStatus(
                    id=m.node_id,
                    broker_group=m.broker_group,
                    role=(Role.MASTER if master == m.node_id else Role.SLAVE).value,
                    address=m.grpc_address,
                    remoting_address=m.remoting_address,
                    max_offset=m.max_offset,
                    epoch=epoch,
                    alive=m.alive,
                    last_heartbeat_ms=m.last_heartbeat_ms,
                    damaged_log=m.damaged_log,
                )
            )
        voters = [
            api.VoterStatus(address=address, reachable=reachable, leader=address == raft.leader)
            for address, reachable in raft.voters_connected
        ]
        if raft.voter:
            voters.append(
                api.VoterStatus(
                    address=raft.self_address,
                    reachable=True,
                    leader=raft.self_address == raft.leader,
                )
            )
        voters.sort(key=lambda v: v.address)
        broker_groups = [
            api.BrokerGroupStatus(
                name=g.name,
                master=g.master or "",
                epoch=g.epoch,
                in_sync=sorted(g.in_sync),
                in_sync_epoch=g.in_sync_epoch,
            )
            for g in sorted(groups, key=lambda g: g.name)
        ]
        return api.ClusterStatusResponse(
            status=OK,
            nodes=nodes,
            raft_leader=raft.leader,
            raft_term=raft.term,
            raft_commit_index=raft.commit_index,
            voters=voters,
            broker_groups=broker_groups,
            answered_by=self.node_id,
        )

    async def Failover(self, request, context):
        """Planned switchover of a broker group's master (``ferrymq failover``): the
        master pauses writes, waits until the target has its whole log, and has routing
        elect it. Any node takes the request and hands it to the group's master."""
        group = self.routing.state.broker_groups.get(request.broker_group)
        if group is None:
            return api.FailoverResponse(
                status=api.Status(
                    code=5, message=f"broker group {request.broker_group} is not known"
                )
            )
        if group.master != self.node_id:
            master = self.routing.state.master_of(group.name)
            if master is None:
                return api.FailoverResponse(
                    status=api.Status(code=UNAVAILABLE, message="the group has no master now")
                )
            async with self.peer_channel(master.grpc_address) as channel:
                return await admin_pb2_grpc.AdminStub(channel).Failover(
                    request, timeout=30, metadata=forwarded_credentials(context)
                )
        try:
            new_master, epoch, paused_ms = await self.replication.switchover(
                request.target_node or None
            )
        except SwitchoverError as error:
            code = UNAVAILABLE if error.reason in ("TIMEOUT", "ROUTING_UNAVAILABLE") else 9
            return api.FailoverResponse(status=api.Status(code=code, message=str(error)))
        return api.FailoverResponse(
            status=OK, new_master=new_master, epoch=epoch, writes_unavailable_ms=int(paused_ms)
        )

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
        """An offset id answers with the record that really starts there (the store checks
        it); a caller who names a topic (and was authorized on it) gets it only when that
        is the record's stored topic. A transaction half or a delayed message waiting in
        its system topic is not its real topic's message until it is committed or due: it
        is then a record of that topic, with an id of its own. Admins may omit the topic
        and see every record, system ones included."""
        found = self.store.look_message_by_id(request.message_id)
        if found is not None and request.topic not in ("", found.topic):
            found = None  # access to the topic named says nothing about another one
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

    # ---- users and ACL entries (node.user_admin) ---------------------------------------
    async def CreateUser(self, request, context):
        return await self.users.create(request)

    async def UpdateUser(self, request, context):
        return await self.users.update(request)

    async def DeleteUser(self, request, context):
        return await self.users.delete(request)

    async def ListUsers(self, request, context):
        return self.users.list()

    async def GrantAcl(self, request, context):
        return await self.users.grant(request)

    async def RevokeAcl(self, request, context):
        return await self.users.revoke(request)
