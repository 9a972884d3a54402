"""Administration, through every door: ferrymq's Admin service (gRPC) and the requests
``mqadmin`` sends to a broker (4.x remoting): topics and groups, cluster status, planned
failover, consumer progress, users and ACL entries, the node's runtime figures.

Who may: every change, listing and the node's figures need admin rights; a topic's
description needs PUBLISH or SUBSCRIBE on it; a group's progress SUBSCRIBE on the topic and
the group; the cluster's status only valid credentials (it names the nodes' addresses, as
routes do). Decided here, for every door, before anything is read or changed.

Topic and group changes are routing commands: checked against the local routing state
first (a precise error costs no Raft round), then committed through Raft, so they are the
same on every node once the call returns. A refusal raises ``AdminRefused`` with a
google.rpc code: 3 INVALID_ARGUMENT, 5 NOT_FOUND, 6 ALREADY_EXISTS, 9 FAILED_PRECONDITION,
14 UNAVAILABLE (no routing quorum: nothing changed, or an unknown outcome, which the
message says).

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ha.replicated_store import ReplicatedStore
from ha.role import ReplicationRole, SwitchoverError
from node.broker_stats import BrokerStats, DailyTotals
from node.consumer_offsets import ConsumerOffsets
from node.lite_index import LiteIndex
from node.lite_names import is_lmq, parent_topic
from node.pop_state import RESENT_QUEUE_ID, PopState
from node.secret_box import SecretBox
from node.services.caller import Caller
from node.services.permissions import Permissions, consume, describe
from node.topics import MessageType, Permission, TopicError, TopicTable
from routing.acl import AclEntry, User
from routing.commands import (
    CommandResult,
    CreateGroup,
    CreateTopic,
    CreateUser,
    DeleteGroup,
    DeleteTopic,
    DeleteUser,
    GrantAcl,
    RevokeAcl,
    SetRoutingFormat,
    UpdateGroup,
    UpdateTopic,
    UpdateUser,
)
from routing.formats import NEWEST_FORMAT
from routing.metadata import BrokerGroup, GroupConfig, Member, TopicRoute, check_group_config
from routing.replica import RaftStatus, RoutingReplica, RoutingUnavailable
from routing.state import updated_group
from store.results import LogFigures

INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION, UNAVAILABLE = 3, 5, 6, 9, 14
CODES = {
    "TOPIC_NOT_FOUND": NOT_FOUND,
    "CONSUMER_GROUP_NOT_FOUND": NOT_FOUND,
    "TOPIC_EXISTS": ALREADY_EXISTS,
    "GROUP_EXISTS": ALREADY_EXISTS,
    "UNKNOWN_BROKER_GROUP": NOT_FOUND,
    "NO_BROKER_GROUP": FAILED_PRECONDITION,
    "USER_EXISTS": ALREADY_EXISTS,
    "USER_NOT_FOUND": NOT_FOUND,
    "ACL_NOT_FOUND": NOT_FOUND,
    "NODES_NOT_UPGRADED": FAILED_PRECONDITION,
    "FORMAT_DOWNGRADE": FAILED_PRECONDITION,
    "UPGRADE_NOT_FINALIZED": FAILED_PRECONDITION,
}
SECRET_MIN_LENGTH = 8
DEFAULT_MAX_DELIVERY_ATTEMPTS = 16


class AdminRefused(Exception):
    """An admin request refused; ``code`` is the google.rpc code to answer."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def refused(error: TopicError) -> AdminRefused:
    return AdminRefused(CODES.get(error.reason, INVALID_ARGUMENT), str(error))


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic as an admin asks for it (``message_type`` None: the node's default;
    ``lite_expiration_minutes`` None: -1 on create, unchanged on update)."""

    name: str
    queue_count: int
    broker_groups: tuple[str, ...] = ()
    message_type: MessageType | None = None
    permission: Permission = Permission.READ_WRITE
    lite_expiration_minutes: int | None = None


@dataclass(frozen=True, slots=True)
class QueueBounds:
    queue_id: int
    broker_group: str
    min_offset: int  # -1: another broker group's queue (its offsets live on its nodes)
    max_offset: int


@dataclass(frozen=True, slots=True)
class QueueProgress:
    topic: str
    queue_id: int
    broker_group: str
    broker_offset: int
    consumer_offset: int
    in_flight: int

    @property
    def lag(self) -> int:
        return max(0, self.broker_offset - self.consumer_offset)


@dataclass(frozen=True, slots=True)
class RuntimeFigures:
    """What this node reports of itself to RocketMQ's tools (``node/broker_stats.py``)."""

    is_master: bool
    put_rates: tuple[float, ...]  # messages per second over 10 s, 1 min, 10 min
    got_rates: tuple[float, ...]
    put_total: int  # since the node started
    put_bytes: int
    got_total: int
    daily: DailyTotals
    sends_open: int
    oldest_send_wait_ms: int
    max_open_sends: int
    log: LogFigures


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    members: list[Member]
    broker_groups: list[BrokerGroup]
    raft: RaftStatus
    answered_by: str
    routing_format: int


class AdminService:
    def __init__(
        self,
        store: ReplicatedStore,
        topics: TopicTable,
        offsets: ConsumerOffsets,
        pop_state: PopState,
        broker_group: str,
        routing: RoutingReplica,
        permissions: Permissions,
        node_id: str = "",
        replication: ReplicationRole | None = None,
        *,
        secret_box: SecretBox | None = None,
        untyped_topics: MessageType = MessageType.UNSPECIFIED,
        stats: BrokerStats | None = None,
        max_open_sends: int = 0,
        lite_index: LiteIndex | None = None,
    ) -> None:
        """``untyped_topics``: what a topic created without a type becomes (UNSPECIFIED
        takes every type, as in RocketMQ 5; ``[messages] untyped_topics_take_any_type``);
        ``stats``: the traffic the services count (``RpcMetrics.stats``); ``max_open_sends``:
        how many requests the node holds open before refusing more; ``lite_index``: where
        the LITE topics' lite topics are (their groups' progress)."""
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.pop_state = pop_state
        self.broker_group = broker_group
        self.routing = routing
        self.permissions = permissions
        self.node_id = node_id
        self.replication = replication
        self.secret_box = secret_box
        self.untyped_topics = untyped_topics
        self.stats = stats or BrokerStats()
        self.max_open_sends = max_open_sends
        self.lite_index = lite_index

    async def _change(self, caller: Caller, command: object) -> CommandResult:
        """An admin's ``command``, checked locally, then committed through Raft."""
        self.permissions.require_admin(caller)
        try:
            self.routing.read(lambda state: state.check(command))
            result = await self.routing.submit(command)
        except TopicError as error:
            raise refused(error) from None
        except RoutingUnavailable as error:
            raise AdminRefused(UNAVAILABLE, f"ROUTING_UNAVAILABLE: {error}") from None
        if not result.ok:
            raise refused(TopicError(result.reason, result.detail))
        return result

    # ---- topics ------------------------------------------------------------------------
    async def create_topic(self, caller: Caller, spec: TopicSpec) -> TopicRoute:
        message_type = self.untyped_topics if spec.message_type is None else spec.message_type
        command = CreateTopic(
            name=spec.name,
            queue_count=spec.queue_count,
            broker_groups=spec.broker_groups,
            message_type=message_type,
            permission=spec.permission,
        )
        if spec.lite_expiration_minutes is not None:
            command = replace(command, lite_expiration_minutes=spec.lite_expiration_minutes)
        return (await self._change(caller, command)).value

    async def update_topic(self, caller: Caller, spec: TopicSpec) -> TopicRoute:
        command = UpdateTopic(
            name=spec.name,
            queue_count=spec.queue_count,
            broker_groups=spec.broker_groups,
            permission=spec.permission,
            lite_expiration_minutes=spec.lite_expiration_minutes,
        )
        return (await self._change(caller, command)).value

    async def delete_topic(self, caller: Caller, name: str) -> None:
        await self._change(caller, DeleteTopic(name))

    def route(self, name: str) -> TopicRoute | None:
        """``name``'s route, None when it is no topic (mqadmin's codes ask before they
        decide between creating and updating; the change itself is decided above)."""
        try:
            return self.routing.read(lambda state: state.topic(name))
        except TopicError:
            return None

    def list_topics(self, caller: Caller) -> list[TopicRoute]:
        self.permissions.require_admin(caller)
        return self.routing.read(lambda state: sorted(state.topics.values(), key=_by_name))

    def describe_topic(self, caller: Caller, name: str) -> tuple[TopicRoute, list[QueueBounds]]:
        """The topic and its queues, with this broker group's offsets."""
        self.permissions.require(caller, describe(name))
        try:
            route = self.routing.read(lambda state: state.topic(name))
        except TopicError as error:
            raise refused(error) from None
        queues = []
        for broker_group, count in route.queues:
            local = broker_group == self.broker_group
            for q in range(count):
                low = self.store.min_offset_in_queue(route.name, q) if local else -1
                high = self.store.max_offset_in_queue(route.name, q) if local else -1
                queues.append(QueueBounds(q, broker_group, low, high))
        return route, queues

    def local_topic(self, caller: Caller, name: str) -> tuple[int, Permission] | None:
        """mqadmin's topic config on this broker group: its queues here and permission;
        None when the group hosts none of it. Admins only."""
        self.permissions.require_admin(caller)
        route = self.route(name)
        queues = route.queue_count_in(self.broker_group) if route is not None else 0
        return (queues, route.permission) if route is not None and queues else None

    def topic_stats(self, caller: Caller, name: str) -> list[tuple[int, int, int, int]]:
        """mqadmin's topicStatus of this broker group's queues: (queue, min offset, max
        offset, store time of the newest message or 0); [] when the group hosts none."""
        self.permissions.require_admin(caller)
        route = self.route(name)
        queues = route.queue_count_in(self.broker_group) if route is not None else 0
        store = self.store
        stats = []
        for queue_id in range(queues):
            newest = store.max_offset_in_queue(name, queue_id)
            last = store.message_at(name, queue_id, newest - 1) if newest > 0 else None
            low = store.min_offset_in_queue(name, queue_id)
            stats.append((queue_id, low, newest, last.store_timestamp_ms if last else 0))
        return stats

    # ---- groups ------------------------------------------------------------------------
    async def create_group(
        self,
        caller: Caller,
        name: str,
        max_delivery_attempts: int = 0,
        fifo: bool = False,
        lite_exclusive: bool = False,
    ) -> GroupConfig:
        attempts = max_delivery_attempts or DEFAULT_MAX_DELIVERY_ATTEMPTS
        command = CreateGroup(name, attempts, fifo, lite_exclusive=lite_exclusive)
        return (await self._change(caller, command)).value

    async def update_group(
        self,
        caller: Caller,
        name: str,
        max_delivery_attempts: int | None = None,
        fifo: bool | None = None,
        lite_exclusive: bool | None = None,
    ) -> GroupConfig:
        """Change an existing group in place (admins, every door): each value None stays
        as it is, the rest held to create's checks. An update that changes nothing is
        answered from routing without a Raft round, so a tool that sends a group's whole
        config to every broker (mqadmin's updateSubGroup) still succeeds while an upgrade
        waits to be finalized, when a real change is refused (``UPGRADE_NOT_FINALIZED``).
        What it means for deliveries in flight: docs/architecture.md, "Updating a
        consumer group"."""
        self.permissions.require_admin(caller)
        command = UpdateGroup(name, max_delivery_attempts, fifo, lite_exclusive)

        def unchanged(state) -> GroupConfig | None:
            current = state.group(name)
            updated = updated_group(current, command)
            check_group_config(updated)
            return current if updated == current else None

        try:
            current = self.routing.read(unchanged)
        except TopicError as error:
            raise refused(error) from None
        if current is not None:
            return current
        return (await self._change(caller, command)).value

    async def delete_group(self, caller: Caller, name: str) -> None:
        await self._change(caller, DeleteGroup(name))

    def list_groups(self, caller: Caller) -> list[GroupConfig]:
        self.permissions.require_admin(caller)
        return self.routing.read(lambda state: sorted(state.groups.values(), key=_by_name))

    def group_progress(self, caller: Caller, group: str, topic_name: str) -> list[QueueProgress]:
        """Where ``group`` is in each of the topic's queues here. A group consumes by
        offsets (pull) or by POP; POP's position, when it has one, is where everything
        below is acked, dead-lettered or filtered out."""
        self.permissions.require(caller, consume(topic_name, group))
        try:
            self.topics.group(group)
            topic = self.topics.topic(topic_name)
        except TopicError as error:
            raise refused(error) from None
        if topic.message_type is MessageType.LITE and self.lite_index is not None:
            return self._lite_progress(group, topic.name)
        progress = []
        for queue_id in range(topic.queue_count):
            cursor = self.pop_state.cursor((group, topic.name, queue_id))
            committed = self.offsets.get(group, topic.name, queue_id)
            if cursor is not None:
                consumer_offset, in_flight = cursor.consumed_below, len(cursor.in_flight)
            else:
                consumer_offset, in_flight = (committed if committed is not None else 0), 0
            progress.append(
                QueueProgress(
                    topic.name,
                    queue_id,
                    self.broker_group,
                    self.store.max_offset_in_queue(topic.name, queue_id),
                    consumer_offset,
                    in_flight,
                )
            )
        return progress

    def _lite_progress(self, group: str, topic: str) -> list[QueueProgress]:
        """A LITE topic's progress, one row per lite topic here (its queue name, queue 0):
        its offsets count its messages, since a lite topic's own offsets are CommitLog
        offsets (``node/lite_index.py``) and a lag in bytes would mean nothing. A lite
        topic the group never received from counts whole, as a lite consumer's first
        receive starts at its first message."""
        index = self.lite_index
        progress = []
        for lmq in index.lite_queues_of(topic):
            cursor = self.pop_state.cursor((group, lmq, 0))
            consumed = 0 if cursor is None else index.count_below(lmq, cursor.consumed_below)
            in_flight = 0 if cursor is None else len(cursor.in_flight)
            total = index.count_below(lmq, index.end(lmq))
            progress.append(QueueProgress(lmq, 0, self.broker_group, total, consumed, in_flight))
        return progress

    def topics_consumed_by(self, caller: Caller, group: str) -> list[str]:
        """The topics ``group`` committed offsets of here (mqadmin's consumer stats)."""
        self.permissions.require_admin(caller)
        return self.offsets.topics_of(group)

    def group_progress_all(self, caller: Caller, group: str) -> list[QueueProgress]:
        """Where ``group`` is in every topic it has a position in here (committed offsets
        or POP positions): Admin GroupProgress without a topic, so a node that is not
        this group's master (its tables are rebuilt on promotion) can ask the master.
        Admins only; a topic deleted since is left out; a LITE topic's progress is one row
        per lite topic (named by its queue, ``%LMQ%$<topic>$<lite topic>``); the group's
        resent dead letters (``node/services/dead_letter_resend.py``) are no position."""
        self.permissions.require_admin(caller)
        topics = set(self.offsets.topics_of(group))
        topics.update(
            parent_topic(topic) if is_lmq(topic) else topic
            for g, topic, queue_id in self.pop_state.cursors
            if g == group and queue_id != RESENT_QUEUE_ID
        )
        progress = []
        for topic in sorted(topics):
            try:
                progress += self.group_progress(caller, group, topic)
            except AdminRefused:
                continue
        return progress

    def groups_consuming(self, caller: Caller, topic: str) -> list[str]:
        """The groups that committed offsets of ``topic`` here."""
        self.permissions.require_admin(caller)
        return self.offsets.groups_of(topic)

    # ---- the cluster -------------------------------------------------------------------
    def cluster(self, caller: Caller) -> ClusterSnapshot:
        """Nodes, broker groups and Raft voters (valid credentials: where the SDK learns
        the nodes' remoting addresses, as routes already name the masters)."""
        self.permissions.require(caller, ())

        def snapshot(state):
            members, groups = list(state.members.values()), list(state.broker_groups.values())
            return members, groups, state.routing_format

        members, groups, routing_format = self.routing.read(snapshot)
        return ClusterSnapshot(members, groups, self.routing.status(), self.node_id, routing_format)

    async def finalize_upgrade(self, caller: Caller, routing_format: int) -> int:
        """Routing writes ``routing_format`` (0: the newest this code reads) from now on."""
        wanted = routing_format or NEWEST_FORMAT
        await self._change(caller, SetRoutingFormat(wanted))
        return wanted

    def runtime(self, caller: Caller) -> RuntimeFigures:
        """This node's role, traffic and log (mqadmin's runtime figures: admins only)."""
        self.permissions.require_admin(caller)
        stats = self.stats
        put_rates, got_rates = stats.rates()
        return RuntimeFigures(
            self.store.is_master,
            put_rates,
            got_rates,
            stats.put_total,
            stats.put_bytes,
            stats.got_total,
            stats.daily,
            stats.sends.size,
            stats.sends.oldest_wait_ms(),
            self.max_open_sends,
            self.store.log_figures(),
        )

    def put_rate(self, caller: Caller, topic: str) -> float:
        """Messages per second stored in ``topic`` here over the last minute (topicStatus)."""
        self.permissions.require_admin(caller)
        return self.stats.topics_put.rate(topic)

    def consume_rate(self, caller: Caller, group: str) -> float:
        """Messages per second delivered to ``group`` here over the last minute
        (consumerProgress)."""
        self.permissions.require_admin(caller)
        return self.stats.groups_got.rate(group)

    def master_of(self, caller: Caller, broker_group: str) -> Member | None:
        """The master a planned failover of ``broker_group`` is handed to (None: no master
        now); ``AdminRefused`` NOT_FOUND for a group nobody knows."""
        self.permissions.require_admin(caller)
        group = self.routing.state.broker_groups.get(broker_group)
        if group is None:
            raise AdminRefused(NOT_FOUND, f"broker group {broker_group} is not known")
        return self.routing.state.master_of(group.name)

    async def failover(self, caller: Caller, target: str | None) -> tuple[str, int, float]:
        """Planned switchover of this node's broker group (``ferrymq failover``): the
        master pauses writes, waits until the target has its whole log, and has routing
        elect it: (new master, epoch, ms writes were paused)."""
        self.permissions.require_admin(caller)
        if self.replication is None:
            raise AdminRefused(FAILED_PRECONDITION, "this node does not replicate")
        try:
            return await self.replication.switchover(target)
        except SwitchoverError as error:
            code = (
                UNAVAILABLE
                if error.reason in ("TIMEOUT", "ROUTING_UNAVAILABLE")
                else FAILED_PRECONDITION
            )
            raise AdminRefused(code, str(error)) from None

    # ---- users and ACL entries -----------------------------------------------------------
    def _sealed(self, access_key: str, secret_key: str) -> bytes:
        """A secret key sealed here, on the node that takes the request
        (``node.secret_box``), so only the sealed form enters the Raft log."""
        if self.secret_box is None:
            raise AdminRefused(
                FAILED_PRECONDITION,
                "users need a cluster secret (cluster.secret) to encrypt their keys",
            )
        if len(secret_key) < SECRET_MIN_LENGTH:
            raise AdminRefused(
                INVALID_ARGUMENT,
                f"ILLEGAL_USER: a secret key has {SECRET_MIN_LENGTH} characters or more",
            )
        return self.secret_box.seal(access_key, secret_key)

    async def create_user(
        self, caller: Caller, access_key: str, secret_key: str, admin: bool
    ) -> User:
        self.permissions.require_admin(caller)
        sealed = self._sealed(access_key, secret_key)
        return (await self._change(caller, CreateUser(access_key, sealed, admin))).value

    async def update_user(
        self, caller: Caller, access_key: str, secret_key: str, admin: bool | None
    ) -> User:
        """A new secret key (empty: keep it) and admin flag (None: keep it)."""
        self.permissions.require_admin(caller)
        sealed = self._sealed(access_key, secret_key) if secret_key else b""
        return (await self._change(caller, UpdateUser(access_key, sealed, admin))).value

    async def delete_user(self, caller: Caller, access_key: str) -> None:
        await self._change(caller, DeleteUser(access_key))

    def list_users(self, caller: Caller) -> list[User]:
        self.permissions.require_admin(caller)
        return self.routing.read(
            lambda state: sorted(state.users.values(), key=lambda u: u.access_key)
        )

    async def grant(self, caller: Caller, access_key: str, entry: AclEntry) -> User:
        return (await self._change(caller, GrantAcl(access_key, entry))).value

    async def revoke(self, caller: Caller, access_key: str, entry: AclEntry) -> User:
        return (await self._change(caller, RevokeAcl(access_key, entry))).value


def _by_name(record) -> str:
    return record.name
