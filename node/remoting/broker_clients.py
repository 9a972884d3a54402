"""Clients of the broker role: HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP.

A heartbeat's consumers become live members of their groups in the same table the gRPC
doors use (``node/group_members.py``: the same ownership of client ids by identity, the
same bounds), for RocketMQ's 120 s (4.x clients heartbeat every 30 s), and their
subscriptions are registered for pulls that carry none (``subscriptions.py``). A
connection that closes takes its client's memberships with it, as RocketMQ's broker
unregisters a closed channel. Producer groups are only answered. Every change of a
group's members is told to its clients (``consumer_notices.py``).

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

import json

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import BROKER_VERSION, RequestCode, ResponseCode
from node.group_members import GroupMembers, MembershipRefused
from node.remoting.access_rules import VERIFIED_ACCESS_KEY
from node.remoting.consumer_notices import ConsumerNotices
from node.remoting.dispatch import Handler
from node.remoting.status_codes import response_code
from node.remoting.subscriptions import Subscription, SubscriptionRefused, Subscriptions
from node.topics import TopicError, TopicTable

MEMBER_LIFETIME_MS = 120_000  # RocketMQ's channel expiry
MAX_CONSUMER_GROUPS = 1024  # per heartbeat
MAX_SUBSCRIPTIONS = 1024  # per group in a heartbeat
MEMBERSHIPS = "memberships"  # connection attribute: {(group, client id)}


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


def parse_heartbeat(body: bytes) -> tuple[str, dict[str, list[Subscription]]]:
    """(client id, {consumer group: its subscriptions}) of a HeartbeatData body."""
    try:
        data = json.loads(body)
    except ValueError as error:
        raise BadHeartbeat(f"heartbeat body is not JSON: {error}") from None
    if type(data) is not dict:
        raise BadHeartbeat("heartbeat body is not a JSON object")
    client_id = _text(data.get("clientID"), "clientID")
    consumers: dict[str, list[Subscription]] = {}
    for consumer in _list(data.get("consumerDataSet"), "consumerDataSet", MAX_CONSUMER_GROUPS):
        if type(consumer) is not dict:
            raise BadHeartbeat("a consumerDataSet entry is not an object")
        group = _text(consumer.get("groupName"), "groupName")
        subscriptions = consumers.setdefault(group, [])
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
    return client_id, consumers


class ClientHandlers:
    def __init__(
        self, topics: TopicTable, members: GroupMembers, subscriptions: Subscriptions
    ) -> None:
        self.topics = topics
        self.members = members
        self.subscriptions = subscriptions
        self.notices = ConsumerNotices(members)

    def handlers(self) -> list[tuple[int, Handler]]:
        return [
            (RequestCode.HEART_BEAT, self.heartbeat),
            (RequestCode.UNREGISTER_CLIENT, self.unregister),
            (RequestCode.GET_CONSUMER_LIST_BY_GROUP, self.consumer_list),
        ]

    async def heartbeat(self, request: RemotingCommand, connection) -> RemotingCommand:
        try:
            client_id, consumers = parse_heartbeat(request.body)
        except BadHeartbeat as error:
            return request.reply(ResponseCode.SYSTEM_ERROR, str(error))
        identity = identity_of(connection)
        unknown = []
        for group, subscriptions in consumers.items():
            try:
                self.topics.group(group)
                self.members.heartbeat(group, client_id, identity, MEMBER_LIFETIME_MS)
                self.subscriptions.register(group, subscriptions)
            except TopicError as error:
                unknown.append(error.detail)
                continue
            except MembershipRefused as refused:
                return request.reply(response_code(refused.code), str(refused))
            except SubscriptionRefused as refused:
                return request.reply(ResponseCode.SYSTEM_BUSY, str(refused))
            self._remember(connection, group, client_id)
            self.notices.heard(group, client_id, connection)
        if unknown:
            # Create groups with `ferrymq group create` (or the Admin service): a consumer of
            # a group the cluster does not know has nothing to pull.
            return request.reply(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                "; ".join(unknown),
                version=BROKER_VERSION,
            )
        return request.reply(ResponseCode.SUCCESS, version=BROKER_VERSION)

    def _remember(self, connection, group: str, client_id: str) -> None:
        memberships = connection.attributes.get(MEMBERSHIPS)
        if memberships is None:
            memberships = connection.attributes[MEMBERSHIPS] = set()
            connection.add_close_callback(self._closed)
        memberships.add((group, client_id))

    def _closed(self, connection) -> None:
        """The connection ended: its client leaves the groups it joined over it."""
        identity = identity_of(connection)
        for group, client_id in connection.attributes.get(MEMBERSHIPS, ()):
            self._leave(group, client_id, identity)

    def _leave(self, group: str, client_id: str, identity: str) -> None:
        try:
            self.members.leave(group, client_id, identity)
        except MembershipRefused:
            return  # the id is another identity's now: nothing of ours to end
        if not self.members.live(group):
            self.subscriptions.forget(group)
        self.notices.left(group, client_id)

    async def unregister(self, request: RemotingCommand, connection) -> RemotingCommand:
        client_id = request.text("clientID")
        group = request.text("consumerGroup", "")
        if group:
            identity = identity_of(connection)
            try:
                self.members.leave(group, client_id, identity)
            except MembershipRefused as refused:
                return request.reply(response_code(refused.code), str(refused))
            memberships = connection.attributes.get(MEMBERSHIPS)
            if memberships is not None:
                memberships.discard((group, client_id))
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
