"""Clients of the broker role: HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP,
and mqadmin's GET_CONSUMER_CONNECTION_LIST / GET_PRODUCER_CONNECTION_LIST, translated to
the membership service (``node/services/membership.py``: the same members, ownership of
client ids, bounds and ACL decisions as the gRPC doors).

A heartbeat's consumers become live members of their groups for RocketMQ's 120 s (4.x
clients heartbeat every 30 s), with their subscriptions registered for pulls that carry
none; its producer groups are listed for mqadmin and make the connection one their halves'
checks may go to (``broker_transactions.py``). A connection that closes takes its client's
memberships with it, as RocketMQ's broker unregisters a closed channel. Every change of a
group's members is told to its clients (``consumer_notices.py``).

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import BROKER_VERSION, RequestCode, ResponseCode
from node.client_registry import ClientConnection, ConnectionsFull, ConsumerSettings
from node.consumer_subscriptions import Subscription, SubscriptionRefused
from node.group_members import MembershipRefused
from node.remoting.authentication import DoorHandler
from node.remoting.broker_direct import RemotingDirectConsumers
from node.remoting.broker_transactions import TransactionDoor
from node.remoting.consumer_notices import ConsumerNotices
from node.remoting.status_codes import refusal, response_code
from node.rpc_status import InvalidRequest
from node.services.caller import Caller
from node.services.membership import ClientHeartbeat, ConsumerMembership
from node.services.offset_reset import QueueReset
from node.services.registry import Services
from node.topics import TopicError

MEMBER_LIFETIME_MS = 120_000  # RocketMQ's channel expiry
MAX_CONSUMER_GROUPS = 1024  # per heartbeat
MAX_SUBSCRIPTIONS = 1024  # per group in a heartbeat
MAX_PRODUCER_GROUPS = 1024  # per heartbeat
MEMBERSHIPS = "memberships"  # connection attribute: {(group, client id): identity}
PRODUCING = "producing"  # connection attribute: {(producer group, client id)}


class BadHeartbeat(ValueError):
    """A heartbeat body that is not RocketMQ's HeartbeatData."""


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
    def __init__(self, services: Services, transactions: TransactionDoor) -> None:
        self.services = services
        self.membership = services.membership
        self.transactions = transactions
        self.notices = ConsumerNotices(self.membership.members)
        direct = services.direct_consume
        self.direct = RemotingDirectConsumers(direct.consumers, direct.broker_group)
        services.offset_reset.reset_listeners.append(self._offsets_reset)

    def _offsets_reset(self, group: str, topic: str, queues: list[QueueReset]) -> None:
        """A reset by any door: the group's 4.x clients connected here take it."""
        table = [(q.broker_group, q.queue_id, q.new_offset) for q in queues]
        self.notices.offsets_reset(group, topic, table)

    def handlers(self) -> list[tuple[int, DoorHandler]]:
        return [
            (RequestCode.HEART_BEAT, self.heartbeat),
            (RequestCode.UNREGISTER_CLIENT, self.unregister),
            (RequestCode.GET_CONSUMER_LIST_BY_GROUP, self.consumer_list),
            (RequestCode.GET_CONSUMER_CONNECTION_LIST, self.consumer_connections),
            (RequestCode.GET_PRODUCER_CONNECTION_LIST, self.producer_connections),
        ]

    async def heartbeat(self, request: RemotingCommand, connection, caller: Caller):
        try:
            heard = parse_heartbeat(request.body)
        except BadHeartbeat as error:
            return request.reply(ResponseCode.SYSTEM_ERROR, str(error))
        client_id = heard.client_id
        heartbeat = ClientHeartbeat(
            client_id,
            {
                group: ConsumerMembership(subscriptions, heard.consumer_settings[group])
                for group, subscriptions in heard.consumers.items()
            },
            heard.producer_groups,
            MEMBER_LIFETIME_MS,
            ClientConnection(client_id, connection.peer_address, request.language, request.version),
        )
        try:
            outcome = await self.membership.heartbeat(caller, heartbeat)
            self.transactions.producing_for(connection, caller, heard.producer_groups)
        except (InvalidRequest, TopicError) as error:  # routing unavailable, creations
            return request.reply(*refusal(error))
        except MembershipRefused as refused:
            return request.reply(response_code(refused.code), str(refused))
        except (SubscriptionRefused, ConnectionsFull) as refused:
            return request.reply(ResponseCode.SYSTEM_BUSY, str(refused))
        memberships = self._remembered(connection, MEMBERSHIPS)
        for group in outcome.joined:
            memberships[(group, client_id)] = caller.identity
            self.notices.heard(group, client_id, connection)
            consume_type = heard.consumer_settings[group].consume_type
            self.direct.heard(connection, caller, client_id, group, consume_type)
        producing = self._remembered(connection, PRODUCING)
        for group in outcome.producing:
            producing[(group, client_id)] = caller.identity
        if outcome.unknown:
            # Creation on first use is off (or the name is illegal): create groups with
            # `ferrymq group create` (or the Admin service).
            return request.reply(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                "; ".join(error.detail for error in outcome.unknown),
                version=BROKER_VERSION,
            )
        return request.reply(ResponseCode.SUCCESS, version=BROKER_VERSION)

    def _remembered(self, connection, kind: str) -> dict[tuple[str, str], str]:
        """What the connection joined (``kind``: MEMBERSHIPS or PRODUCING), with the
        identity it joined as, to undo when it closes."""
        if MEMBERSHIPS not in connection.attributes:
            connection.attributes[MEMBERSHIPS] = {}
            connection.attributes[PRODUCING] = {}
            connection.add_close_callback(self._closed)
        return connection.attributes[kind]

    def _closed(self, connection) -> None:
        """The connection ended: its client leaves the groups it joined over it."""
        for (group, client_id), identity in connection.attributes.get(MEMBERSHIPS, {}).items():
            self._leave(identity, group, client_id)
        for group, client_id in connection.attributes.get(PRODUCING, {}):
            self.membership.producer_left(group, client_id)

    def _leave(self, identity: str, group: str, client_id: str) -> None:
        try:
            self.membership.left(identity, group, client_id)
        except MembershipRefused:
            return  # the id is another identity's now: nothing of ours to end
        self.notices.left(group, client_id)

    async def unregister(self, request: RemotingCommand, connection, caller: Caller):
        client_id = request.text("clientID")
        group = request.text("consumerGroup", "")
        producer_group = request.text("producerGroup", "")
        if producer_group:
            self.membership.producer_left(producer_group, client_id)
            connection.attributes.get(PRODUCING, {}).pop((producer_group, client_id), None)
        if group:
            try:
                self.membership.leave(caller, group, client_id)
            except (InvalidRequest, TopicError) as error:
                return request.reply(*refusal(error))
            except MembershipRefused as refused:
                return request.reply(response_code(refused.code), str(refused))
            connection.attributes.get(MEMBERSHIPS, {}).pop((group, client_id), None)
            self.notices.left(group, client_id)
        return request.reply(ResponseCode.SUCCESS)

    async def consumer_list(self, request: RemotingCommand, connection, caller: Caller):
        group = request.text("consumerGroup")
        ids = [client_id for client_id, _ in self.membership.live_members(caller, group)]
        if not ids:
            return request.reply(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return request.reply(ResponseCode.SUCCESS, body=_json({"consumerIdList": ids}))

    async def consumer_connections(self, request: RemotingCommand, connection, caller: Caller):
        group = request.text("consumerGroup")
        clients, settings, subscriptions = self.membership.consumers(caller, group)
        if not clients or settings is None:
            return request.reply(
                ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online"
            )
        table = {
            s.topic: {
                "classFilterMode": False,
                "codeSet": [],
                "expressionType": s.expression_type,
                "subString": s.expression,
                "subVersion": s.version,
                "tagsSet": [],
                "topic": s.topic,
            }
            for s in subscriptions
        }
        body = {
            "connectionSet": [connection_json(c) for c in clients],
            "consumeFromWhere": settings.consume_from_where,
            "consumeType": settings.consume_type,
            "messageModel": settings.message_model,
            "subscriptionTable": table,
        }
        return request.reply(ResponseCode.SUCCESS, body=_json(body))

    async def producer_connections(self, request: RemotingCommand, connection, caller: Caller):
        group = request.text("producerGroup")
        clients = self.membership.producers(caller, group)
        if not clients:
            return request.reply(
                ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist"
            )
        body = {"connectionSet": [connection_json(c) for c in clients]}
        return request.reply(ResponseCode.SUCCESS, body=_json(body))


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def connection_json(connection: ClientConnection) -> dict:
    return {
        "clientAddr": connection.address,
        "clientId": connection.client_id,
        "language": connection.language,
        "version": connection.version,
    }
