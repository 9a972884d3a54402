"""Clients of the broker role: HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP.

A heartbeat's consumers become live members of their groups in the same table the gRPC
doors use (``node/group_members.py``: the same ownership of client ids by identity, the
same bounds), for RocketMQ's 120 s (4.x clients heartbeat every 30 s), and their
subscriptions are registered for pulls that carry none (``subscriptions.py``). A
connection that closes takes its client's memberships with it, as RocketMQ's broker
unregisters a closed channel. What a heartbeat says of its client (address, language,
version, consumer settings, producer groups) is kept for mqadmin's connection lists
(``client_connections.py``). Every change of a group's members is told to its clients
(``consumer_notices.py``).

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import BROKER_VERSION, RequestCode, ResponseCode
from node.group_creation import GroupsOnFirstUse
from node.group_members import GroupMembers, MembershipRefused
from node.remoting.access_rules import VERIFIED_ACCESS_KEY
from node.remoting.client_connections import (
    ClientConnection,
    ClientConnections,
    ConnectionsFull,
    ConsumerSettings,
)
from node.remoting.consumer_notices import ConsumerNotices
from node.remoting.dispatch import Handler
from node.remoting.status_codes import refusal, response_code
from node.remoting.subscriptions import Subscription, SubscriptionRefused, Subscriptions
from node.rpc_status import InvalidRequest
from node.topics import TopicError, TopicTable

MEMBER_LIFETIME_MS = 120_000  # RocketMQ's channel expiry
MAX_CONSUMER_GROUPS = 1024  # per heartbeat
MAX_SUBSCRIPTIONS = 1024  # per group in a heartbeat
MAX_PRODUCER_GROUPS = 1024  # per heartbeat
MEMBERSHIPS = "memberships"  # connection attribute: {(group, client id)}
PRODUCING = "producing"  # connection attribute: {(producer group, client id)}


class BadHeartbeat(ValueError):
    """A heartbeat body that is not RocketMQ's HeartbeatData."""


def identity_of(connection) -> str:
    """Who owns the client ids a connection registers, as for a gRPC caller
    (``group_members.caller_identity``): with authentication on, the access key its
    requests were verified for (``access_rules``); else its peer's IP address."""
    access_key = connection.attributes.get(VERIFIED_ACCESS_KEY)
    if access_key:
        return "access key " + access_key
    return "address " + connection.peer_host


def _text(value: object, what: str, default: str | None = None) -> str:
    if value is None and default is not None:
        return default
    if type(value) is not str:
        raise BadHeartbeat(f"{what} is not a string")
    return value


def _list(value: object, what: str, limit: int) -> list:
    if value is None:
        return []
    if type(value) is not list:
        raise BadHeartbeat(f"{what} is not a list")
    if len(value) > limit:
        raise BadHeartbeat(f"{what} has {len(value)} entries, the limit is {limit}")
    return value


def _shown(value: object, default: str) -> str:
    """A consumer setting as mqadmin shows it. Only shown, never acted on: a client that
    sends one as a number (an enum's ordinal) is not refused for it."""
    if value is None:
        return default
    return value if type(value) is str else json.dumps(value)


@dataclass
class Heartbeat:
    """A HeartbeatData body: who, the consumer groups with their subscriptions and
    settings, the producer groups."""

    client_id: str
    consumers: dict[str, list[Subscription]] = field(default_factory=dict)
    consumer_settings: dict[str, ConsumerSettings] = field(default_factory=dict)
    producer_groups: list[str] = field(default_factory=list)


def parse_heartbeat(body: bytes) -> Heartbeat:
    """The heartbeat a HeartbeatData body states; BadHeartbeat when it is not one."""
    try:
        data = json.loads(body)
    except ValueError as error:
        raise BadHeartbeat(f"heartbeat body is not JSON: {error}") from None
    if type(data) is not dict:
        raise BadHeartbeat("heartbeat body is not a JSON object")
    heartbeat = Heartbeat(_text(data.get("clientID"), "clientID"))
    for consumer in _list(data.get("consumerDataSet"), "consumerDataSet", MAX_CONSUMER_GROUPS):
        if type(consumer) is not dict:
            raise BadHeartbeat("a consumerDataSet entry is not an object")
        group = _text(consumer.get("groupName"), "groupName")
        subscriptions = heartbeat.consumers.setdefault(group, [])
        defaults = ConsumerSettings()
        heartbeat.consumer_settings[group] = ConsumerSettings(
            consume_type=_shown(consumer.get("consumeType"), defaults.consume_type),
            message_model=_shown(consumer.get("messageModel"), defaults.message_model),
            consume_from_where=_shown(
                consumer.get("consumeFromWhere"), defaults.consume_from_where
            ),
        )
        for entry in _list(
            consumer.get("subscriptionDataSet"), "subscriptionDataSet", MAX_SUBSCRIPTIONS
        ):
            if type(entry) is not dict:
                raise BadHeartbeat("a subscriptionDataSet entry is not an object")
            version = entry.get("subVersion", 0)
            if type(version) is not int:
                raise BadHeartbeat("subVersion is not an integer")
            subscriptions.append(
                Subscription(
                    topic=_text(entry.get("topic"), "topic"),
                    expression=_text(entry.get("subString"), "subString", "*"),
                    expression_type=_text(entry.get("expressionType"), "expressionType", "TAG"),
                    version=version,
                )
            )
    for producer in _list(data.get("producerDataSet"), "producerDataSet", MAX_PRODUCER_GROUPS):
        if type(producer) is not dict:
            raise BadHeartbeat("a producerDataSet entry is not an object")
        heartbeat.producer_groups.append(_text(producer.get("groupName"), "groupName"))
    return heartbeat


class ClientHandlers:
    def __init__(
        self,
        topics: TopicTable,
        members: GroupMembers,
        subscriptions: Subscriptions,
        connections: ClientConnections,
        groups: GroupsOnFirstUse | None = None,
    ) -> None:
        self.topics = topics
        # A consumer group nobody created is created by its first heartbeat, as on the
        # gRPC door (``node.group_creation``; off with ``auto_create_groups = false``).
        self.groups = groups or GroupsOnFirstUse(topics, None, enabled=False)
        self.members = members
        self.subscriptions = subscriptions
        self.connections = connections
        self.notices = ConsumerNotices(members)

    def handlers(self) -> list[tuple[int, Handler]]:
        return [
            (RequestCode.HEART_BEAT, self.heartbeat),
            (RequestCode.UNREGISTER_CLIENT, self.unregister),
            (RequestCode.GET_CONSUMER_LIST_BY_GROUP, self.consumer_list),
        ]

    async def heartbeat(self, request: RemotingCommand, connection) -> RemotingCommand:
        try:
            heartbeat = parse_heartbeat(request.body)
        except BadHeartbeat as error:
            return request.reply(ResponseCode.SYSTEM_ERROR, str(error))
        client_id = heartbeat.client_id
        identity = identity_of(connection)
        client = ClientConnection(
            client_id, connection.peer_address, request.language, request.version
        )
        unknown = []
        for group, subscriptions in heartbeat.consumers.items():
            try:
                await self.groups.group(group)
                self.members.heartbeat(group, client_id, identity, MEMBER_LIFETIME_MS)
                self.subscriptions.register(group, subscriptions)
                self.connections.consumer_heard(group, client, heartbeat.consumer_settings[group])
            except TopicError as error:
                unknown.append(error.detail)
                continue
            except InvalidRequest as error:  # routing unavailable, too many creations
                return request.reply(*refusal(error))
            except MembershipRefused as refused:
                return request.reply(response_code(refused.code), str(refused))
            except (SubscriptionRefused, ConnectionsFull) as refused:
                return request.reply(ResponseCode.SYSTEM_BUSY, str(refused))
            self._remember(connection, MEMBERSHIPS, (group, client_id))
            self.notices.heard(group, client_id, connection)
        for group in heartbeat.producer_groups:
            try:
                self.connections.producer_heard(group, client)
            except ConnectionsFull as refused:
                return request.reply(ResponseCode.SYSTEM_BUSY, str(refused))
            self._remember(connection, PRODUCING, (group, client_id))
        if unknown:
            # Creation on first use is off (or the name is illegal): create groups with
            # `ferrymq group create` (or the Admin service).
            return request.reply(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                "; ".join(unknown),
                version=BROKER_VERSION,
            )
        return request.reply(ResponseCode.SUCCESS, version=BROKER_VERSION)

    def _remember(self, connection, kind: str, entry: tuple[str, str]) -> None:
        """What the connection joined (``kind``: MEMBERSHIPS or PRODUCING), to undo when
        it closes."""
        if MEMBERSHIPS not in connection.attributes:
            connection.attributes[MEMBERSHIPS] = set()
            connection.attributes[PRODUCING] = set()
            connection.add_close_callback(self._closed)
        connection.attributes[kind].add(entry)

    def _closed(self, connection) -> None:
        """The connection ended: its client leaves the groups it joined over it."""
        identity = identity_of(connection)
        for group, client_id in connection.attributes.get(MEMBERSHIPS, ()):
            self._leave(group, client_id, identity)
        for group, client_id in connection.attributes.get(PRODUCING, ()):
            self.connections.producer_left(group, client_id)

    def _leave(self, group: str, client_id: str, identity: str) -> None:
        try:
            self.members.leave(group, client_id, identity)
        except MembershipRefused:
            return  # the id is another identity's now: nothing of ours to end
        self.connections.consumer_left(group, client_id)
        if not self.members.live(group):
            self.subscriptions.forget(group)
        self.notices.left(group, client_id)

    async def unregister(self, request: RemotingCommand, connection) -> RemotingCommand:
        client_id = request.text("clientID")
        group = request.text("consumerGroup", "")
        producer_group = request.text("producerGroup", "")
        if producer_group:
            self.connections.producer_left(producer_group, client_id)
            producing = connection.attributes.get(PRODUCING)
            if producing is not None:
                producing.discard((producer_group, client_id))
        if group:
            identity = identity_of(connection)
            try:
                self.members.leave(group, client_id, identity)
            except MembershipRefused as refused:
                return request.reply(response_code(refused.code), str(refused))
            memberships = connection.attributes.get(MEMBERSHIPS)
            if memberships is not None:
                memberships.discard((group, client_id))
            self.connections.consumer_left(group, client_id)
            if not self.members.live(group):
                self.subscriptions.forget(group)
            self.notices.left(group, client_id)
        return request.reply(ResponseCode.SUCCESS)

    async def consumer_list(self, request: RemotingCommand, connection) -> RemotingCommand:
        group = request.text("consumerGroup")
        ids = [client_id for client_id, _ in self.members.live(group)]
        if not ids:
            return request.reply(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        body = json.dumps({"consumerIdList": ids}, separators=(",", ":")).encode()
        return request.reply(ResponseCode.SUCCESS, body=body)
