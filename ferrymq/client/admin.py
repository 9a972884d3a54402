"""Administration through the node's Admin service: topics, groups, progress, queries.

Topic and group changes and the cluster status go to the access point (any node: changes
go through the routing Raft group). What lives in a broker group's store (queue offsets,
consumer progress, stored messages) is asked of each master that holds part of the topic,
and the answers are merged."""

from __future__ import annotations

from dataclasses import dataclass

from ferrymq.client.connection import DEFAULT_ADDRESS, Connection
from ferrymq.client.errors import check_admin
from ferrymq.client.routes import Endpoints
from ferrymq.client.security import ClientSecurity
from ferrymq.protocol.ferrymq import admin_pb2 as api

MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "PRIORITY", "LITE")
PERMISSIONS = ("READ", "WRITE", "READ_WRITE")


@dataclass(frozen=True)
class TopicInfo:
    name: str
    queue_count: int  # per broker group
    message_type: str
    permission: str
    broker_groups: tuple[str, ...] = ()
    lite_expiration_minutes: int = -1  # LITE topics: a lite topic idle this long goes


@dataclass(frozen=True)
class NodeInfo:
    id: str
    broker_group: str
    role: str
    address: str
    alive: bool
    max_offset: int
    epoch: int
    last_heartbeat_ms: int
    # Its recovery cut its log after an invalid record, not refilled from a master yet.
    damaged_log: bool = False
    software_version: str = ""  # "" for a node of 0.1.0
    routing_format: int = 1  # the newest routing format its code reads


@dataclass(frozen=True)
class VoterInfo:
    address: str
    reachable: bool
    leader: bool


@dataclass(frozen=True)
class BrokerGroupInfo:
    name: str
    master: str
    epoch: int
    in_sync: tuple[str, ...]


@dataclass(frozen=True)
class ClusterInfo:
    answered_by: str
    raft_leader: str
    raft_term: int
    raft_commit_index: int
    voters: tuple[VoterInfo, ...]
    broker_groups: tuple[BrokerGroupInfo, ...]
    nodes: tuple[NodeInfo, ...]
    routing_format: int = 1  # what routing's log and snapshots are written in


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
    lite_exclusive: bool = False  # RocketMQ 5.5's Exclusive lite subscription model


def _group_info(group: api.Group) -> GroupInfo:
    return GroupInfo(group.name, group.max_delivery_attempts, group.fifo, group.lite_exclusive)


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
class QueueReset:
    """One queue of an offset reset: where the group was (-1: nowhere) and is now."""

    broker_group: str
    queue_id: int
    old_offset: int
    new_offset: int


RESET_TARGETS = {"earliest": api.RESET_TO_EARLIEST, "latest": api.RESET_TO_LATEST}


@dataclass(frozen=True)
class TopicConsumer:
    """A group consuming a topic on a broker group: a committed offset, a POP position or
    a live 4.x subscriber there."""

    group: str
    broker_group: str
    committed: bool
    popping: bool
    subscribed: bool


@dataclass(frozen=True)
class DeadLetterResend:
    """What a resend of dead letters did on one broker group: the DLQ offsets resent now,
    and those resent before (skipped: a resend is idempotent)."""

    broker_group: str
    resent: tuple[int, ...]
    already_resent: tuple[int, ...]
    not_yet: tuple[int, ...] = ()  # past the call's byte bound: resend them again


@dataclass(frozen=True)
class DirectConsumption:
    """What one client did with a message handed to it directly (``consume_directly``):
    ``outcome`` is consumed, later, failed, not_supported or timed_out; ``client_answer``
    the client's own word (CR_SUCCESS from a 4.x client, OK from a RocketMQ 5 one)."""

    client_id: str
    protocol: str
    outcome: str
    client_answer: str
    remark: str
    spent_ms: int
    waited_ms: int
    topic: str
    message_id: str
    broker_group: str


@dataclass(frozen=True)
class DeadLetter:
    """One entry of a group's dead-letter queue on a broker group."""

    offset: int
    message_id: str
    origin_topic: str
    tags: str
    keys: str
    attempts: int
    store_timestamp_ms: int
    body_bytes: int
    resent: bool


@dataclass(frozen=True)
class DeadLetterPage:
    broker_group: str
    min_offset: int
    max_offset: int  # one past the last entry
    entries: tuple[DeadLetter, ...]


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


@dataclass(frozen=True)
class HistoryEvent:
    """One step of a message's delivery to a group: ``kind`` delivered, acked,
    dead-lettered, invisibility changed, offsets reset, expired, retry copy or dead-letter
    copy; ``time_ms`` the store time of the record that says it."""

    time_ms: int
    kind: str
    attempt: int  # 0: does not apply
    delivery: str  # POP's delivery id
    visible_at_ms: int  # POP: the invisibility's end it set; 0: does not apply
    detail: str


@dataclass(frozen=True)
class GroupHistory:
    """A group's state for one message (``state``: not consumed yet, in flight, retrying,
    consumed, dead-lettered; ``state_text`` in words) and how it got there."""

    group: str
    model: str  # "pop" or "offsets" (pull, 4.x push)
    state: str
    state_text: str
    committed_offset: int  # -1: none
    pop_next_offset: int  # -1: no POP cursor
    events: tuple[HistoryEvent, ...]


@dataclass(frozen=True)
class MessageHistory:
    """A stored message's delivery history per consumer group, read at its broker group's
    master; ``truncated``: the bounded scan stopped after ``records_max`` records."""

    topic: str
    queue_id: int
    queue_offset: int
    store_timestamp_ms: int
    broker_group: str
    groups: tuple[GroupHistory, ...]
    records_scanned: int
    records_max: int
    truncated: bool


def _history(answer: api.MessageHistoryResponse) -> MessageHistory:
    return MessageHistory(
        answer.topic,
        answer.queue_id,
        answer.offset,
        answer.store_timestamp_ms,
        answer.broker_group,
        tuple(
            GroupHistory(
                g.group,
                g.model,
                g.state,
                g.state_text,
                g.committed_offset,
                g.pop_next_offset,
                tuple(
                    HistoryEvent(
                        e.time_ms, e.kind, e.attempt, e.delivery, e.visible_at_ms, e.detail
                    )
                    for e in g.events
                ),
            )
            for g in answer.groups
        ),
        answer.records_scanned,
        answer.records_max,
        answer.truncated,
    )


@dataclass(frozen=True)
class AclRule:
    """``effect`` ALLOW or DENY, ``action`` PUBLISH or SUBSCRIBE, ``kind`` TOPIC or GROUP;
    ``pattern`` a name, ``*`` or a prefix ending in ``*``."""

    effect: str
    action: str
    kind: str
    pattern: str

    def __str__(self) -> str:
        return f"{self.effect.lower()} {self.action.lower()} {self.kind.lower()}:{self.pattern}"

    def message(self) -> api.AclEntry:
        return api.AclEntry(
            effect=api.AclEffect.Value(f"ACL_{self.effect}"),
            action=api.AclAction.Value(f"ACL_{self.action}"),
            kind=api.AclResourceKind.Value(f"ACL_{self.kind}"),
            pattern=self.pattern,
        )


@dataclass(frozen=True)
class UserInfo:
    """A user as the cluster shows it: never its secret key."""

    access_key: str
    admin: bool
    acl: tuple[AclRule, ...]


def _user(u: api.User) -> UserInfo:
    rules = tuple(
        AclRule(
            api.AclEffect.Name(e.effect).removeprefix("ACL_"),
            api.AclAction.Name(e.action).removeprefix("ACL_"),
            api.AclResourceKind.Name(e.kind).removeprefix("ACL_"),
            e.pattern,
        )
        for e in u.acl
    )
    return UserInfo(u.access_key, u.admin, rules)


@dataclass(frozen=True)
class NodeSettingInfo:
    """One option of a node's ``node.toml`` as it runs; a secret (``redacted``) is shown
    only as ``(set, not shown)`` or "" (not set)."""

    section: str
    name: str
    value: str
    redacted: bool = False


@dataclass(frozen=True)
class NodeConfigInfo:
    """A node's configuration: its options by section, and the same settings under
    RocketMQ's broker property names (what ``mqadmin getBrokerConfig`` shows)."""

    node_id: str
    broker_group: str
    settings: tuple[NodeSettingInfo, ...]
    broker_properties: dict[str, str]

    def value(self, section: str, name: str) -> str:
        """The value of ``[section] name`` (KeyError: no such option)."""
        for setting in self.settings:
            if (setting.section, setting.name) == (section, name):
                return setting.value
        raise KeyError(f"[{section}] {name}")


# A topic created without a type takes every type (RocketMQ 5): shown as ANY.
ANY_TYPE = "ANY"


def type_name(number: int) -> str:
    if number == api.MESSAGE_TYPE_UNSPECIFIED:
        return ANY_TYPE
    return api.MessageType.Name(number)


def type_number(name: str) -> int:
    if name == ANY_TYPE:
        return api.MESSAGE_TYPE_UNSPECIFIED
    return api.MessageType.Value(name)


def _topic(t: api.Topic) -> TopicInfo:
    return TopicInfo(
        t.name,
        t.queue_count,
        type_name(t.message_type),
        api.Permission.Name(t.permission),
        tuple(t.broker_groups),
        t.lite_expiration_minutes if t.HasField("lite_expiration_minutes") else -1,
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
    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        timeout_s: float = 10.0,
        security: ClientSecurity | None = None,
    ) -> None:
        self.endpoints = Endpoints(address, timeout_s, security)
        self.connection: Connection = self.endpoints.access
        self.stub = self.connection.admin

    def _call(self, method, request):
        answer = self.connection.call(method, request)
        check_admin(answer.status)
        return answer

    def _each_master(self, topic: str, method_name: str, request) -> list:
        """``method_name`` on the master of every broker group holding ``topic`` (every
        master of the cluster when ``topic`` is empty): [(broker group, answer)]."""
        if topic:
            masters = self.endpoints.route(topic, refresh=True).masters
        else:
            status = self.cluster_status()
            addresses = {n.id: n.address for n in status.nodes}
            masters = {g.name: addresses[g.master] for g in status.broker_groups if g.master}
        answers = []
        for broker_group, address in sorted(masters.items()):
            connection = self.endpoints.connection(address)
            answer = connection.call(getattr(connection.admin, method_name), request)
            check_admin(answer.status)
            answers.append((broker_group, answer))
        return answers

    # ---- topics ----------------------------------------------------------------------
    def create_topic(
        self,
        name: str,
        queue_count: int = 8,
        message_type: str = "NORMAL",
        permission: str = "READ_WRITE",
        broker_groups: tuple[str, ...] = (),
        lite_expiration_minutes: int = -1,
    ) -> TopicInfo:
        """``queue_count`` queues on each of ``broker_groups`` (default: every group);
        ``message_type`` ``ANY`` takes every type, each message as the type it declares.
        ``lite_expiration_minutes`` (LITE topics, RocketMQ's ``lite.topic.expiration``): a
        lite topic that has had no new message for that long is deleted; -1: never."""
        topic = api.Topic(
            name=name,
            queue_count=queue_count,
            message_type=type_number(message_type),
            permission=api.Permission.Value(permission),
            broker_groups=list(broker_groups),
            lite_expiration_minutes=lite_expiration_minutes,
        )
        return _topic(self._call(self.stub.CreateTopic, api.CreateTopicRequest(topic=topic)).topic)

    def topic_consumers(self, topic: str) -> list[TopicConsumer]:
        """The groups consuming ``topic``, asked of every broker group's master (the groups
        the caller may consume as; admins: all), by group then broker group."""
        found = [
            TopicConsumer(c.group, c.broker_group, c.committed, c.popping, c.subscribed)
            for _, answer in self._each_master(
                topic, "TopicConsumers", api.TopicConsumersRequest(topic=topic)
            )
            for c in answer.consumers
        ]
        return sorted(found, key=lambda c: (c.group, c.broker_group))

    def update_topic(
        self,
        name: str,
        queue_count: int,
        permission: str = "READ_WRITE",
        lite_expiration_minutes: int | None = None,
    ) -> TopicInfo:
        """``lite_expiration_minutes`` None: unchanged."""
        current = self.describe_topic(name)[0]
        topic = api.Topic(
            name=name,
            queue_count=queue_count,
            message_type=type_number(current.message_type),
            permission=api.Permission.Value(permission),
            lite_expiration_minutes=lite_expiration_minutes,
        )
        return _topic(self._call(self.stub.UpdateTopic, api.UpdateTopicRequest(topic=topic)).topic)

    def delete_topic(self, name: str) -> None:
        self._call(self.stub.DeleteTopic, api.DeleteTopicRequest(name=name))

    def list_topics(self) -> list[TopicInfo]:
        return [_topic(t) for t in self._call(self.stub.ListTopics, api.ListTopicsRequest()).topics]

    def describe_topic(self, name: str) -> tuple[TopicInfo, list[QueueInfo]]:
        """The topic and its queues, with offsets from each broker group's master."""
        answers = self._each_master(name, "DescribeTopic", api.DescribeTopicRequest(name=name))
        queues = [
            QueueInfo(q.queue_id, q.broker_group, q.min_offset, q.max_offset)
            for broker_group, answer in answers
            for q in answer.queues
            if q.broker_group == broker_group
        ]
        return _topic(answers[0][1].topic), sorted(
            queues, key=lambda q: (q.broker_group, q.queue_id)
        )

    # ---- groups ----------------------------------------------------------------------
    def create_group(
        self,
        name: str,
        max_delivery_attempts: int = 16,
        fifo: bool = False,
        lite_exclusive: bool = False,
    ) -> GroupInfo:
        """``lite_exclusive``: each lite topic has one subscriber in the group, the newest
        (RocketMQ 5.5's ``lite.sub.model=Exclusive``)."""
        group = api.Group(
            name=name,
            max_delivery_attempts=max_delivery_attempts,
            fifo=fifo,
            lite_exclusive=lite_exclusive,
        )
        created = self._call(self.stub.CreateGroup, api.CreateGroupRequest(group=group)).group
        return _group_info(created)

    def update_group(
        self,
        name: str,
        max_delivery_attempts: int | None = None,
        fifo: bool | None = None,
        lite_exclusive: bool | None = None,
    ) -> GroupInfo:
        """Change an existing group in place (admin rights); each value None stays as it
        is. A lower ``max_delivery_attempts`` counts at a message's next delivery, ``fifo``
        from the next receive (docs/architecture.md, "Updating a consumer group")."""
        request = api.UpdateGroupRequest(
            name=name,
            max_delivery_attempts=max_delivery_attempts,
            fifo=fifo,
            lite_exclusive=lite_exclusive,
        )
        return _group_info(self._call(self.stub.UpdateGroup, request).group)

    def delete_group(self, name: str) -> None:
        self._call(self.stub.DeleteGroup, api.DeleteGroupRequest(name=name))

    def list_groups(self) -> list[GroupInfo]:
        answer = self._call(self.stub.ListGroups, api.ListGroupsRequest())
        return [_group_info(g) for g in answer.groups]

    def group_progress(self, group: str, topic: str) -> list[QueueProgress]:
        answers = self._each_master(
            topic, "GroupProgress", api.GroupProgressRequest(group=group, topic=topic)
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
            for _, answer in answers
            for q in answer.queues
        ]

    def reset_offsets(
        self, group: str, topic: str, to: int | str, dry_run: bool = False
    ) -> list[QueueReset]:
        """Reset ``group``'s offsets on every queue of ``topic`` (admin rights): ``to`` a
        time in ms since the epoch (each queue's first message stored at or after it),
        ``"earliest"`` or ``"latest"``. The node asked resets every broker group's queues;
        ``dry_run`` answers where they would go and changes nothing. Sorted by broker
        group and queue."""
        if isinstance(to, str):
            if to not in RESET_TARGETS:
                raise ValueError(f"reset to {to!r}: a time in ms, 'earliest' or 'latest'")
            target, timestamp_ms = RESET_TARGETS[to], 0
        elif isinstance(to, int) and not isinstance(to, bool):
            target, timestamp_ms = api.RESET_TO_TIME, to
        else:
            raise TypeError(f"reset to {to!r}: a time in ms, 'earliest' or 'latest'")
        request = api.ResetOffsetsRequest(
            group=group, topic=topic, target=target, timestamp_ms=timestamp_ms, dry_run=dry_run
        )
        answer = self.connection.call(self.stub.ResetOffsets, request, timeout_s=60)
        check_admin(answer.status)
        queues = [
            QueueReset(q.broker_group, q.queue_id, q.old_offset, q.new_offset)
            for q in answer.queues
        ]
        return sorted(queues, key=lambda q: (q.broker_group, q.queue_id))

    def consume_directly(
        self,
        group: str,
        topic: str,
        message_id: str = "",
        physical_offset: int | None = None,
        client_id: str = "",
        timeout_ms: int = 0,
    ) -> DirectConsumption:
        """Have one online client of ``group`` consume a stored message directly, as
        RocketMQ Dashboard's "resend message" to a group: ``client_id`` ("": any member
        that can), connected to the node this Admin talks to; the message by its id (or
        unique key) or by its CommitLog offset on that node's broker group. Nothing is
        stored: the client runs its listener and the answer says what it returned. Admin,
        or a user who may consume ``topic`` as ``group``."""
        request = api.ConsumeMessageDirectlyRequest(
            group=group,
            topic=topic,
            message_id=message_id,
            physical_offset=physical_offset,
            client_id=client_id,
            timeout_ms=timeout_ms,
        )
        seconds = (timeout_ms or 15_000) / 1000 + 10
        answer = self.connection.call(self.stub.ConsumeMessageDirectly, request, timeout_s=seconds)
        check_admin(answer.status)
        return DirectConsumption(
            answer.client_id,
            answer.protocol,
            answer.outcome,
            answer.client_answer,
            answer.remark,
            answer.spent_ms,
            answer.waited_ms,
            answer.topic,
            answer.message_id,
            answer.broker_group,
        )

    def resend_dead_letters(
        self,
        group: str,
        offsets: list[int] | tuple[int, ...] = (),
        from_offset: int = -1,
        to_offset: int = -1,
        broker_group: str = "",
    ) -> DeadLetterResend:
        """Give ``group``'s dead letters back to that group (its POP and 4.x push
        consumers, no other group), each with its message id and a fresh attempt count:
        the DLQ ``offsets`` of ``broker_group`` ("": the access point's), or every one from
        ``from_offset`` to ``to_offset`` (inclusive), at most 1000 a call. Admin, or a user
        who may consume as the group and read ``%DLQ%<group>``. Asked of any node: the
        broker group's master does it. A dead letter resent before is skipped; those past
        one call's 8 MiB of records come back in ``not_yet``, to ask again."""
        request = api.ResendDeadLettersRequest(
            group=group,
            broker_group=broker_group,
            offsets=list(offsets),
            from_offset=from_offset,
            to_offset=to_offset,
        )
        answer = self.connection.call(self.stub.ResendDeadLetters, request, timeout_s=60)
        check_admin(answer.status)
        return DeadLetterResend(
            answer.broker_group,
            tuple(answer.resent),
            tuple(answer.already_resent),
            tuple(answer.not_yet),
        )

    def dead_letters(
        self, group: str, broker_group: str = "", from_offset: int = -1, limit: int = 50
    ) -> DeadLetterPage:
        """Up to ``limit`` (1..200) entries of ``group``'s dead-letter queue on
        ``broker_group`` ("": the access point's) from ``from_offset`` (-1: the last ones),
        each saying whether it was resent."""
        request = api.ListDeadLettersRequest(
            group=group, broker_group=broker_group, from_offset=from_offset, limit=limit
        )
        answer = self._call(self.stub.ListDeadLetters, request)
        entries = tuple(
            DeadLetter(
                e.offset,
                e.message_id,
                e.origin_topic,
                e.tags,
                e.keys,
                e.attempts,
                e.store_timestamp_ms,
                e.body_bytes,
                e.resent,
            )
            for e in answer.entries
        )
        return DeadLetterPage(answer.broker_group, answer.min_offset, answer.max_offset, entries)

    def group_members(self, group: str) -> list[str]:
        answer = self._call(self.stub.GroupMembers, api.GroupMembersRequest(group=group))
        return [m.client_id for m in answer.members]

    # ---- users and ACL entries (admin rights needed) ---------------------------------
    def create_user(self, access_key: str, secret_key: str, admin: bool = False) -> UserInfo:
        request = api.CreateUserRequest(access_key=access_key, secret_key=secret_key, admin=admin)
        return _user(self._call(self.stub.CreateUser, request).user)

    def update_user(
        self, access_key: str, secret_key: str = "", admin: bool | None = None
    ) -> UserInfo:
        """A new secret key (empty: keep it) and the admin flag (None: keep it)."""
        request = api.UpdateUserRequest(access_key=access_key, secret_key=secret_key, admin=admin)
        return _user(self._call(self.stub.UpdateUser, request).user)

    def delete_user(self, access_key: str) -> None:
        self._call(self.stub.DeleteUser, api.DeleteUserRequest(access_key=access_key))

    def list_users(self) -> list[UserInfo]:
        return [_user(u) for u in self._call(self.stub.ListUsers, api.ListUsersRequest()).users]

    def grant(self, access_key: str, rule: AclRule) -> UserInfo:
        request = api.GrantAclRequest(access_key=access_key, entry=rule.message())
        return _user(self._call(self.stub.GrantAcl, request).user)

    def revoke(self, access_key: str, rule: AclRule) -> UserInfo:
        request = api.RevokeAclRequest(access_key=access_key, entry=rule.message())
        return _user(self._call(self.stub.RevokeAcl, request).user)

    # ---- queries ---------------------------------------------------------------------
    def _query(self, topic: str, method_name: str, request) -> list[StoredMessage]:
        found = [
            _message(m)
            for _, answer in self._each_master(topic, method_name, request)
            for m in answer.messages
        ]
        return sorted(found, key=lambda m: m.store_timestamp_ms, reverse=True)

    def query_by_id(self, message_id: str, topic: str = "") -> list[StoredMessage]:
        request = api.QueryMessageByIdRequest(topic=topic, message_id=message_id)
        return self._query(topic, "QueryMessageById", request)

    def query_by_key(self, topic: str, key: str, max_count: int = 32) -> list[StoredMessage]:
        request = api.QueryMessageByKeyRequest(topic=topic, key=key, max_count=max_count)
        return self._query(topic, "QueryMessageByKey", request)[:max_count]

    def query_by_offset(
        self, topic: str, queue_id: int, offset: int, broker_group: str = ""
    ) -> list[StoredMessage]:
        """The message at ``offset`` of queue ``queue_id`` (of ``broker_group``, or of every
        broker group that has such a queue)."""
        request = api.QueryMessageByOffsetRequest(topic=topic, queue_id=queue_id, offset=offset)
        found = self._query(topic, "QueryMessageByOffset", request)
        return [m for m in found if not broker_group or m.broker_group == broker_group]

    def message_history(
        self, topic: str, queue_id: int, offset: int, broker_group: str = ""
    ) -> MessageHistory:
        """The delivery history, per consumer group, of the message at ``offset`` of queue
        ``queue_id`` of ``broker_group`` (may be left out when one broker group holds the
        topic), asked of that group's master. ``AdminError`` NOT_FOUND when no message is
        there; SUBSCRIBE on the topic is needed."""
        masters = self.endpoints.route(topic, refresh=True).masters
        if not broker_group:
            if len(masters) != 1:
                raise ValueError(f"topic {topic} is on broker groups {sorted(masters)}: name one")
            (broker_group,) = masters
        if broker_group not in masters:
            raise ValueError(f"topic {topic} has no queues on broker group {broker_group}")
        connection = self.endpoints.connection(masters[broker_group])
        request = api.MessageHistoryRequest(topic=topic, queue_id=queue_id, offset=offset)
        answer = connection.call(connection.admin.MessageHistory, request)
        check_admin(answer.status)
        return _history(answer)

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        request = api.QueryOffsetByTimeRequest(
            topic=topic, queue_id=queue_id, timestamp_ms=timestamp_ms
        )
        return self._call(self.stub.QueryOffsetByTime, request).offset

    # ---- cluster ---------------------------------------------------------------------
    def cluster_status(self) -> ClusterInfo:
        answer = self._call(self.stub.ClusterStatus, api.ClusterStatusRequest())
        return ClusterInfo(
            answered_by=answer.answered_by,
            raft_leader=answer.raft_leader,
            raft_term=answer.raft_term,
            raft_commit_index=answer.raft_commit_index,
            voters=tuple(VoterInfo(v.address, v.reachable, v.leader) for v in answer.voters),
            broker_groups=tuple(
                BrokerGroupInfo(g.name, g.master, g.epoch, tuple(g.in_sync))
                for g in answer.broker_groups
            ),
            nodes=tuple(
                NodeInfo(
                    n.id,
                    n.broker_group,
                    n.role,
                    n.address,
                    n.alive,
                    n.max_offset,
                    n.epoch,
                    n.last_heartbeat_ms,
                    n.damaged_log,
                    n.software_version,
                    n.routing_format,
                )
                for n in answer.nodes
            ),
            routing_format=answer.routing_format or 1,
        )

    def node_config(self, node_id: str = "") -> NodeConfigInfo:
        """A node's configuration as it runs (admin rights): ``node_id`` "" is the node
        asked; another node's is read at that node, as this user. Nothing secret is in it
        (docs/security.md, "A node's configuration"). NOT_FOUND: no such node."""
        answer = self._call(self.stub.NodeConfig, api.NodeConfigRequest(node_id=node_id))
        return NodeConfigInfo(
            answer.node_id,
            answer.broker_group,
            tuple(NodeSettingInfo(s.section, s.name, s.value, s.redacted) for s in answer.settings),
            {p.name: p.value for p in answer.broker_properties},
        )

    def finalize_upgrade(self, routing_format: int = 0) -> int:
        """The last step of a rolling upgrade (every node upgraded): routing writes
        ``routing_format`` (0: the newest the answering node reads) from now on, and a
        node of an older release can no longer follow it. Returns the format."""
        answer = self._call(
            self.stub.FinalizeUpgrade, api.FinalizeUpgradeRequest(routing_format=routing_format)
        )
        return answer.routing_format

    def failover(self, broker_group: str, target_node: str = "") -> tuple[str, int, int]:
        """Planned switchover: (new master, its epoch, ms writes were paused)."""
        answer = self.connection.call(
            self.stub.Failover,
            api.FailoverRequest(broker_group=broker_group, target_node=target_node),
            timeout_s=60,
        )
        check_admin(answer.status)
        return answer.new_master, answer.epoch, answer.writes_unavailable_ms

    def close(self) -> None:
        self.endpoints.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
