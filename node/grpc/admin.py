"""ferrymq's ``Admin`` door (``proto/ferrymq/admin.proto``), translated to the services:
topics, groups, cluster status, planned failover, consumer progress and offset resets,
dead-letter resends, message queries, users and ACL entries, a node's configuration.

Status codes follow google.rpc (``AdminRefused`` carries them); a refusal by the ACL aborts
the call with gRPC ``PERMISSION_DENIED`` or ``UNAUTHENTICATED``. A planned failover asked
of a node that is not its group's master is handed to the master over its client port
(``node/services/peer_admin.py``: signed as the caller's user), so the master decides on
the same user.

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

import dataclasses
import inspect

from ferrymq.codec.commitlog_record import StoredMessage
from ferrymq.protocol.ferrymq import admin_pb2 as api
from ferrymq.protocol.ferrymq import admin_pb2_grpc
from node.grpc.authentication import caller_of, refuse_call
from node.rpc_status import AccessDenied, InvalidRequest
from node.services.admin import (
    INVALID_ARGUMENT,
    UNAVAILABLE,
    AdminRefused,
    ClusterSnapshot,
    TopicSpec,
    refused,
)
from node.services.caller import Door
from node.services.dead_letter_resend import ResendRequest
from node.services.delivery_history import MessageHistory
from node.services.direct_consume import TIMEOUT_DEFAULT_MS, DirectRequest
from node.services.node_settings import NodeSettings
from node.services.offset_reset import PROTO_TARGETS, ResetRequest
from node.services.peer_admin import PeerAdmin
from node.services.registry import Services
from node.topics import MessageType, Permission, TopicError
from routing.acl import AclEntry, Action, Effect, ResourceKind, User
from routing.metadata import GroupConfig, Member, Role, TopicRoute

OK = api.Status(code=0, message="OK")
TYPES = {
    api.NORMAL: MessageType.NORMAL,
    api.FIFO: MessageType.FIFO,
    api.DELAY: MessageType.DELAY,
    api.TRANSACTION: MessageType.TRANSACTION,
    api.PRIORITY: MessageType.PRIORITY,
    api.LITE: MessageType.LITE,
}
TYPE_NAMES = {kind: api.MessageType.Name(number) for number, kind in TYPES.items()}
TYPE_NAMES[MessageType.UNSPECIFIED] = api.MessageType.Name(api.MESSAGE_TYPE_UNSPECIFIED)
PERMISSIONS = {
    api.READ: Permission.READ,
    api.WRITE: Permission.WRITE,
    api.READ_WRITE: Permission.READ_WRITE,
    api.PERMISSION_UNSPECIFIED: Permission.READ_WRITE,
}
EFFECTS = {api.ACL_ALLOW: Effect.ALLOW, api.ACL_DENY: Effect.DENY}
ACTIONS = {api.ACL_PUBLISH: Action.PUBLISH, api.ACL_SUBSCRIBE: Action.SUBSCRIBE}
KINDS = {api.ACL_TOPIC: ResourceKind.TOPIC, api.ACL_GROUP: ResourceKind.GROUP}
FAILOVER_TIMEOUT_S = 30
HISTORY_TIMEOUT_S = 10  # a history reads at most HISTORY_RECORDS_MAX records
RESET_TARGETS = {number: target for target, number in PROTO_TARGETS.items()}


def topic_spec(topic: api.Topic) -> TopicSpec:
    """INVALID_ARGUMENT for a message type or permission number this node does not know
    (proto3 enums take any number off the wire)."""
    if topic.message_type != api.MESSAGE_TYPE_UNSPECIFIED and topic.message_type not in TYPES:
        raise AdminRefused(INVALID_ARGUMENT, f"unknown message_type {topic.message_type}")
    if topic.permission not in PERMISSIONS:
        raise AdminRefused(INVALID_ARGUMENT, f"unknown permission {topic.permission}")
    return TopicSpec(
        topic.name,
        topic.queue_count,
        tuple(topic.broker_groups),
        TYPES.get(topic.message_type),
        PERMISSIONS[topic.permission],
        topic.lite_expiration_minutes if topic.HasField("lite_expiration_minutes") else None,
    )


def topic_message(route: TopicRoute) -> api.Topic:
    return api.Topic(
        name=route.name,
        queue_count=max((count for _, count in route.queues), default=0),
        message_type=api.MessageType.Value(TYPE_NAMES[route.message_type]),
        permission=api.Permission.Value(route.permission.value),
        broker_groups=[group for group, _ in route.queues],
        lite_expiration_minutes=route.lite_expiration_minutes,
    )


def group_message(config: GroupConfig) -> api.Group:
    return api.Group(
        name=config.name,
        max_delivery_attempts=config.max_delivery_attempts,
        fifo=config.fifo,
        lite_exclusive=config.lite_exclusive,
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


def history_fields(history: MessageHistory) -> dict:
    """A ``MessageHistory`` as the fields of ``api.MessageHistoryResponse``."""
    return {
        "topic": history.topic,
        "queue_id": history.queue_id,
        "offset": history.queue_offset,
        "store_timestamp_ms": history.store_timestamp_ms,
        "broker_group": history.broker_group,
        "records_scanned": history.records_scanned,
        "records_max": history.records_max,
        "truncated": history.truncated,
        "groups": [
            api.GroupHistory(
                group=g.group,
                model=g.model,
                state=g.state.value,
                state_text=g.state_text,
                committed_offset=g.committed_offset,
                pop_next_offset=g.pop_next_offset,
                events=[
                    api.HistoryEvent(
                        time_ms=e.time_ms,
                        kind=e.kind.value,
                        attempt=e.attempt,
                        delivery=e.delivery,
                        visible_at_ms=e.visible_at_ms,
                        detail=e.detail,
                    )
                    for e in g.events
                ],
            )
            for g in history.groups
        ],
    }


def entry_of(message: api.AclEntry) -> AclEntry:
    try:
        return AclEntry(
            EFFECTS[message.effect], ACTIONS[message.action], KINDS[message.kind], message.pattern
        )
    except KeyError:
        raise AdminRefused(
            INVALID_ARGUMENT,
            "ILLEGAL_ACL: an ACL entry needs an effect, an action and a resource kind",
        ) from None


def user_message(user: User) -> api.User:
    return api.User(
        access_key=user.access_key,
        admin=user.admin,
        acl=[
            api.AclEntry(
                effect=api.AclEffect.Value(f"ACL_{entry.effect.value}"),
                action=api.AclAction.Value(f"ACL_{entry.action.value}"),
                kind=api.AclResourceKind.Value(f"ACL_{entry.kind.value}"),
                pattern=entry.pattern,
            )
            for entry in user.acl
        ],
    )


def cluster_message(snapshot: ClusterSnapshot) -> api.ClusterStatusResponse:
    raft = snapshot.raft
    masters = {g.name: (g.master, g.epoch) for g in snapshot.broker_groups}
    nodes = []
    for m in sorted(snapshot.members, key=lambda m: (m.broker_group, m.node_id)):
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
                software_version=m.software_version,
                routing_format=m.routing_format,
            )
        )
    voters = [
        api.VoterStatus(address=address, reachable=reachable, leader=address == raft.leader)
        for address, reachable in raft.voters_connected
    ]
    if raft.voter:
        voters.append(
            api.VoterStatus(
                address=raft.self_address, reachable=True, leader=raft.self_address == raft.leader
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
        for g in sorted(snapshot.broker_groups, key=lambda g: g.name)
    ]
    return api.ClusterStatusResponse(
        status=OK,
        nodes=nodes,
        raft_leader=raft.leader,
        raft_term=raft.term,
        raft_commit_index=raft.commit_index,
        voters=voters,
        broker_groups=broker_groups,
        answered_by=snapshot.answered_by,
        routing_format=snapshot.routing_format,
    )


NODE_CONFIG_FIELDS = ("node_id", "broker_group", "settings", "broker_properties")


def node_config_fields(found: NodeSettings) -> dict:
    """The fields of a NodeConfigResponse saying ``found``."""
    return {
        "node_id": found.node_id,
        "broker_group": found.broker_group,
        "settings": [
            api.NodeSetting(section=s.section, name=s.name, value=s.value, redacted=s.redacted)
            for s in found.settings
        ],
        "broker_properties": [
            api.BrokerProperty(name=name, value=value) for name, value in found.broker_properties
        ],
    }


class AdminDoor(admin_pb2_grpc.AdminServicer):
    def __init__(
        self,
        services: Services,
        broker_group: str,
        peers: PeerAdmin,
    ) -> None:
        """``peers``: the calls this node makes to another node's Admin door as a user
        (a planned failover handed to its group's master)."""
        self.services = services
        self.admin = services.admin
        self.broker_group = broker_group
        self.peers = peers

    async def _serve(self, context, method: str, response_class, work) -> object:
        """``response_class`` with OK and the fields ``work(caller)`` returns, or with the
        refusal's status; an ACL refusal aborts the call."""
        caller = caller_of(context, Door.FERRY, method)
        try:
            fields = work(caller)
            if inspect.isawaitable(fields):
                fields = await fields
        except AccessDenied as denied:
            await refuse_call(context, denied)
        except AdminRefused as error:
            return response_class(status=api.Status(code=error.code, message=error.message))
        except InvalidRequest as error:  # a field out of range (a queue that does not exist)
            return response_class(status=api.Status(code=INVALID_ARGUMENT, message=str(error)))
        except TopicError as error:
            problem = refused(error)
            return response_class(status=api.Status(code=problem.code, message=problem.message))
        return response_class(status=OK, **(fields or {}))

    # ---- topics ----------------------------------------------------------------------
    async def CreateTopic(self, request, context):
        async def work(caller):
            route = await self.admin.create_topic(caller, topic_spec(request.topic))
            return {"topic": topic_message(route)}

        return await self._serve(context, "CreateTopic", api.CreateTopicResponse, work)

    async def UpdateTopic(self, request, context):
        async def work(caller):
            route = await self.admin.update_topic(caller, topic_spec(request.topic))
            return {"topic": topic_message(route)}

        return await self._serve(context, "UpdateTopic", api.UpdateTopicResponse, work)

    async def DeleteTopic(self, request, context):
        return await self._serve(
            context,
            "DeleteTopic",
            api.DeleteTopicResponse,
            lambda caller: self.admin.delete_topic(caller, request.name),
        )

    async def ListTopics(self, request, context):
        def work(caller):
            return {"topics": [topic_message(t) for t in self.admin.list_topics(caller)]}

        return await self._serve(context, "ListTopics", api.ListTopicsResponse, work)

    async def DescribeTopic(self, request, context):
        def work(caller):
            route, queues = self.admin.describe_topic(caller, request.name)
            return {
                "topic": topic_message(route),
                "queues": [
                    api.TopicQueue(
                        queue_id=q.queue_id,
                        broker_group=q.broker_group,
                        min_offset=q.min_offset,
                        max_offset=q.max_offset,
                    )
                    for q in queues
                ],
            }

        return await self._serve(context, "DescribeTopic", api.DescribeTopicResponse, work)

    # ---- groups ----------------------------------------------------------------------
    async def CreateGroup(self, request, context):
        group = request.group

        async def work(caller):
            config = await self.admin.create_group(
                caller, group.name, group.max_delivery_attempts, group.fifo, group.lite_exclusive
            )
            return {"group": group_message(config)}

        return await self._serve(context, "CreateGroup", api.CreateGroupResponse, work)

    async def UpdateGroup(self, request, context):
        def given(name: str):
            return getattr(request, name) if request.HasField(name) else None

        async def work(caller):
            config = await self.admin.update_group(
                caller,
                request.name,
                given("max_delivery_attempts"),
                given("fifo"),
                given("lite_exclusive"),
            )
            return {"group": group_message(config)}

        return await self._serve(context, "UpdateGroup", api.UpdateGroupResponse, work)

    async def DeleteGroup(self, request, context):
        return await self._serve(
            context,
            "DeleteGroup",
            api.DeleteGroupResponse,
            lambda caller: self.admin.delete_group(caller, request.name),
        )

    async def ListGroups(self, request, context):
        def work(caller):
            return {"groups": [group_message(g) for g in self.admin.list_groups(caller)]}

        return await self._serve(context, "ListGroups", api.ListGroupsResponse, work)

    async def GroupProgress(self, request, context):
        def work(caller):
            if request.topic:
                progress = self.admin.group_progress(caller, request.group, request.topic)
            else:  # every topic the group has a position in (admins only)
                progress = self.admin.group_progress_all(caller, request.group)
            return {
                "queues": [
                    api.QueueProgress(
                        topic=q.topic,
                        queue_id=q.queue_id,
                        broker_group=q.broker_group,
                        broker_offset=q.broker_offset,
                        consumer_offset=q.consumer_offset,
                        lag=q.lag,
                        in_flight=q.in_flight,
                    )
                    for q in progress
                ]
            }

        return await self._serve(context, "GroupProgress", api.GroupProgressResponse, work)

    async def GroupMembers(self, request, context):
        def work(caller):
            live = self.services.membership.live_members(caller, request.group, existing=True)
            return {
                "members": [
                    api.GroupMember(client_id=client_id, last_heartbeat_ms=seen)
                    for client_id, seen in live
                ]
            }

        return await self._serve(context, "GroupMembers", api.GroupMembersResponse, work)

    # ---- message queries -------------------------------------------------------------
    def _messages(self, found: list[StoredMessage]) -> dict:
        return {"messages": [stored_message(m, self.broker_group) for m in found]}

    async def QueryMessageById(self, request, context):
        def work(caller):
            found = self.services.queries.by_id(caller, request.message_id, request.topic)
            return self._messages([found] if found is not None else [])

        return await self._serve(context, "QueryMessageById", api.QueryMessagesResponse, work)

    async def QueryMessageByKey(self, request, context):
        def work(caller):
            found = self.services.queries.by_key(
                caller,
                request.topic,
                request.key,
                request.max_count or 32,
                request.begin_timestamp_ms,
                request.end_timestamp_ms,
            )
            return self._messages(found)

        return await self._serve(context, "QueryMessageByKey", api.QueryMessagesResponse, work)

    async def QueryMessageByOffset(self, request, context):
        def work(caller):
            found = self.services.queries.at_queue_offset(
                caller, request.topic, request.queue_id, request.offset
            )
            return self._messages([found] if found is not None else [])

        return await self._serve(context, "QueryMessageByOffset", api.QueryMessagesResponse, work)

    async def QueryOffsetByTime(self, request, context):
        async def work(caller):
            offset = await self.services.offsets.offset_by_time(
                caller, request.topic, request.queue_id, request.timestamp_ms
            )
            return {"offset": offset}

        return await self._serve(context, "QueryOffsetByTime", api.QueryOffsetByTimeResponse, work)

    async def MessageHistory(self, request, context):
        """Answered by the group's master: a slave's POP cursors and committed offsets are
        rebuilt only when it is promoted, so a slave hands the call to the master (signed
        as the caller's user, who the master's service decides on), as for Failover."""
        master = self._history_master()
        if master is not None:
            caller = caller_of(context, Door.FERRY, "MessageHistory")
            try:
                return await self.peers.call(
                    caller, master, "MessageHistory", request, HISTORY_TIMEOUT_S
                )
            except AccessDenied as denied:
                await refuse_call(context, denied)
            except AdminRefused as error:
                status = api.Status(code=error.code, message=error.message)
                return api.MessageHistoryResponse(status=status)

        async def work(caller):
            found = await self.services.delivery_history.history(
                caller, request.topic, request.queue_id, request.offset
            )
            return history_fields(found)

        return await self._serve(context, "MessageHistory", api.MessageHistoryResponse, work)

    def _history_master(self) -> Member | None:
        """Another node that is this broker group's master, when this node is not one."""
        if self.services.delivery_history.store.is_master:
            return None
        master = self.admin.routing.state.master_of(self.broker_group)
        return master if master is not None and master.node_id != self.admin.node_id else None

    # ---- the cluster -----------------------------------------------------------------
    async def ClusterStatus(self, request, context):
        caller = caller_of(context, Door.FERRY, "ClusterStatus")
        try:
            return cluster_message(self.admin.cluster(caller))
        except AccessDenied as denied:
            await refuse_call(context, denied)

    async def Failover(self, request, context):
        """Planned switchover: any node takes the request and hands it to the group's
        master, which decides it."""
        caller = caller_of(context, Door.FERRY, "Failover")
        try:
            master = self.admin.master_of(caller, request.broker_group)
        except AccessDenied as denied:
            await refuse_call(context, denied)
        except AdminRefused as error:
            return api.FailoverResponse(status=api.Status(code=error.code, message=error.message))
        if master is None:
            return api.FailoverResponse(
                status=api.Status(code=UNAVAILABLE, message="the group has no master now")
            )
        if master.node_id != self.admin.node_id:
            try:
                return await self.peers.call(
                    caller, master, "Failover", request, FAILOVER_TIMEOUT_S
                )
            except AccessDenied as denied:
                await refuse_call(context, denied)
            except AdminRefused as error:
                return api.FailoverResponse(
                    status=api.Status(code=error.code, message=error.message)
                )

        async def work(caller):
            new_master, epoch, paused_ms = await self.admin.failover(
                caller, request.target_node or None
            )
            return {
                "new_master": new_master,
                "epoch": epoch,
                "writes_unavailable_ms": int(paused_ms),
            }

        return await self._serve(context, "Failover", api.FailoverResponse, work)

    async def ResetOffsets(self, request, context):
        """A group's offsets on a topic, reset on every queue of it (the service hands the
        other broker groups' parts to their masters, as the caller's user)."""

        async def work(caller):
            if request.target not in RESET_TARGETS:
                raise AdminRefused(INVALID_ARGUMENT, f"unknown reset target {request.target}")
            reset = ResetRequest(
                request.group,
                request.topic,
                RESET_TARGETS[request.target],
                request.timestamp_ms,
                request.broker_group,
                request.dry_run,
            )
            outcome = await self.services.offset_reset.reset(caller, reset)
            return {
                "queues": [
                    api.QueueReset(
                        broker_group=q.broker_group,
                        queue_id=q.queue_id,
                        old_offset=q.old_offset,
                        new_offset=q.new_offset,
                    )
                    for q in outcome.queues
                ],
                "consuming": outcome.consuming,
            }

        return await self._serve(context, "ResetOffsets", api.ResetOffsetsResponse, work)

    async def ResendDeadLetters(self, request, context):
        """A group's dead letters resent on one broker group (the service hands the call
        to that group's master, as the caller's user)."""

        async def work(caller):
            resend = ResendRequest(
                request.group,
                request.broker_group,
                tuple(request.offsets),
                request.from_offset,
                request.to_offset,
                request.handed,
            )
            outcome = await self.services.dead_letter_resend.resend(caller, resend)
            return {
                "broker_group": outcome.broker_group,
                "resent": list(outcome.resent),
                "already_resent": list(outcome.already_resent),
                "not_yet": list(outcome.not_yet),
            }

        return await self._serve(context, "ResendDeadLetters", api.ResendDeadLettersResponse, work)

    async def ConsumeMessageDirectly(self, request, context):
        """A stored message consumed by one client of a group connected to this node."""

        async def work(caller):
            direct = DirectRequest(
                request.group,
                request.topic,
                request.message_id,
                request.physical_offset if request.HasField("physical_offset") else -1,
                request.client_id,
                request.timeout_ms or TIMEOUT_DEFAULT_MS,
            )
            return (await self.services.direct_consume.consume(caller, direct)).as_fields()

        return await self._serve(
            context, "ConsumeMessageDirectly", api.ConsumeMessageDirectlyResponse, work
        )

    async def ListDeadLetters(self, request, context):
        """A page of a group's dead-letter queue, read at its broker group's master."""

        async def work(caller):
            page = await self.services.dead_letter_resend.page(
                caller, request.group, request.broker_group, request.from_offset, request.limit
            )
            return {
                "broker_group": page.broker_group,
                "min_offset": page.min_offset,
                "max_offset": page.max_offset,
                "entries": [
                    api.DeadLetterEntry(
                        offset=e.offset,
                        message_id=e.message_id,
                        origin_topic=e.origin_topic,
                        tags=e.tags,
                        keys=e.keys,
                        attempts=e.attempts,
                        store_timestamp_ms=e.store_timestamp_ms,
                        body_bytes=e.body_bytes,
                        resent=e.resent,
                    )
                    for e in page.entries
                ],
            }

        return await self._serve(context, "ListDeadLetters", api.ListDeadLettersResponse, work)

    async def TopicConsumers(self, request, context):
        """The groups consuming a topic on this broker group (its master's answer is the
        current one)."""

        def work(caller):
            found = self.services.topic_consumers.consumers(caller, request.topic)
            return {"consumers": [api.TopicConsumer(**dataclasses.asdict(c)) for c in found]}

        return await self._serve(context, "TopicConsumers", api.TopicConsumersResponse, work)

    async def ListProducers(self, request, context):
        """The producer groups with live producers on this node, and their connections."""

        def work(caller):
            groups = self.services.membership.online_producers(caller)
            return {
                "groups": [
                    api.ProducerGroup(
                        group=group,
                        clients=[
                            api.ProducerClient(
                                client_id=c.client_id,
                                address=c.address,
                                language=c.language,
                                version=c.version,
                            )
                            for c in clients
                        ],
                    )
                    for group, clients in groups
                ]
            }

        return await self._serve(context, "ListProducers", api.ListProducersResponse, work)

    async def FinalizeUpgrade(self, request, context):
        async def work(caller):
            done = await self.admin.finalize_upgrade(caller, request.routing_format)
            return {"routing_format": done}

        return await self._serve(context, "FinalizeUpgrade", api.FinalizeUpgradeResponse, work)

    async def NodeConfig(self, request, context):
        """This node's configuration, or another node's: read at that node, as the
        caller's user (whom that node's service decides on again)."""
        node_settings = self.services.node_settings

        async def work(caller):
            member = node_settings.member(caller, request.node_id)
            if member is None:
                return node_config_fields(node_settings.settings(caller))
            asked = api.NodeConfigRequest(node_id=member.node_id)
            answer = await self.peers.call(caller, member, "NodeConfig", asked)
            return {name: getattr(answer, name) for name in NODE_CONFIG_FIELDS}

        return await self._serve(context, "NodeConfig", api.NodeConfigResponse, work)

    # ---- users and ACL entries ---------------------------------------------------------
    async def CreateUser(self, request, context):
        async def work(caller):
            user = await self.admin.create_user(
                caller, request.access_key, request.secret_key, request.admin
            )
            return {"user": user_message(user)}

        return await self._serve(context, "CreateUser", api.CreateUserResponse, work)

    async def UpdateUser(self, request, context):
        admin = request.admin if request.HasField("admin") else None  # unset: keep it

        async def work(caller):
            user = await self.admin.update_user(
                caller, request.access_key, request.secret_key, admin
            )
            return {"user": user_message(user)}

        return await self._serve(context, "UpdateUser", api.UpdateUserResponse, work)

    async def DeleteUser(self, request, context):
        return await self._serve(
            context,
            "DeleteUser",
            api.DeleteUserResponse,
            lambda caller: self.admin.delete_user(caller, request.access_key),
        )

    async def ListUsers(self, request, context):
        def work(caller):
            return {"users": [user_message(u) for u in self.admin.list_users(caller)]}

        return await self._serve(context, "ListUsers", api.ListUsersResponse, work)

    async def GrantAcl(self, request, context):
        async def work(caller):
            user = await self.admin.grant(caller, request.access_key, entry_of(request.entry))
            return {"user": user_message(user)}

        return await self._serve(context, "GrantAcl", api.GrantAclResponse, work)

    async def RevokeAcl(self, request, context):
        async def work(caller):
            user = await self.admin.revoke(caller, request.access_key, entry_of(request.entry))
            return {"user": user_message(user)}

        return await self._serve(context, "RevokeAcl", api.RevokeAclResponse, work)
