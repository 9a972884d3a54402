"""Who is connected, per group, as ``mqadmin consumerConnection`` and ``producerConnection``
show it: GET_CONSUMER_CONNECTION_LIST (203) and GET_PRODUCER_CONNECTION_LIST (204).

What a 4.x client says of itself comes with its heartbeats (``broker_clients.py``): its
client id, its language and version (the request's header), the address it connects from,
and per consumer group its consume type, message model and where a new group starts. A
consumer is listed while it is a live member of the group (``node/group_members.py``: the
one table of liveness, shared with the gRPC doors); a producer while its heartbeats are
younger than RocketMQ's 120 s and its connection is open. Clients of the gRPC doors are
not here (Admin ``GroupMembers`` lists them). A group with nobody connected is answered
CONSUMER_NOT_ONLINE with a remark, as RocketMQ's broker does.

Soft state: a restarted node learns it from the next heartbeats. Bounded: at most
``MAX_GROUPS`` groups of each kind and ``MAX_CLIENTS_PER_GROUP`` clients in each; a
heartbeat past a bound is refused (``ConnectionsFull``).

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from node.group_members import GroupMembers
from node.remoting.dispatch import Handler
from node.remoting.subscriptions import Subscriptions

MAX_GROUPS = 10_000
MAX_CLIENTS_PER_GROUP = 1024
PRODUCER_LIFETIME_MS = 120_000  # RocketMQ's channel expiry


class ConnectionsFull(Exception):
    """A heartbeat past a bound of the table."""


@dataclass(frozen=True)
class ClientConnection:
    """RocketMQ's ``Connection``: one client as the broker sees it."""

    client_id: str
    address: str  # host:port it connects from
    language: str  # LanguageCode's name
    version: int  # MQVersion's ordinal


@dataclass(frozen=True)
class ConsumerSettings:
    """What a consumer's heartbeat says of its group, as its own strings."""

    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def connection_json(connection: ClientConnection) -> dict:
    return {
        "clientAddr": connection.address,
        "clientId": connection.client_id,
        "language": connection.language,
        "version": connection.version,
    }


class ClientConnections:
    def __init__(
        self,
        members: GroupMembers,
        subscriptions: Subscriptions,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.members = members
        self.subscriptions = subscriptions
        self.clock_ms = clock_ms
        self._consumers: dict[str, dict[str, tuple[ClientConnection, ConsumerSettings]]] = {}
        self._producers: dict[str, dict[str, tuple[ClientConnection, int]]] = {}

    # ---- what heartbeats tell ---------------------------------------------------------
    def consumer_heard(
        self, group: str, connection: ClientConnection, settings: ConsumerSettings
    ) -> None:
        clients = self._slot(self._consumers, group, connection.client_id)
        clients.pop(connection.client_id, None)  # the newest heartbeat last
        clients[connection.client_id] = (connection, settings)

    def producer_heard(self, group: str, connection: ClientConnection) -> None:
        clients = self._slot(self._producers, group, connection.client_id)
        clients[connection.client_id] = (connection, self.clock_ms() + PRODUCER_LIFETIME_MS)

    def consumer_left(self, group: str, client_id: str) -> None:
        self._drop(self._consumers, group, client_id)

    def producer_left(self, group: str, client_id: str) -> None:
        self._drop(self._producers, group, client_id)

    def _slot(self, table: dict, group: str, client_id: str) -> dict:
        clients = table.get(group)
        if clients is None:
            if len(table) >= MAX_GROUPS:
                raise ConnectionsFull(f"this node lists the clients of {MAX_GROUPS} groups")
            clients = table[group] = {}
        if client_id not in clients and len(clients) >= MAX_CLIENTS_PER_GROUP:
            self._expire_producers(group)  # make room of the expired first
            if len(clients) >= MAX_CLIENTS_PER_GROUP:
                raise ConnectionsFull(
                    f"group {group} has {MAX_CLIENTS_PER_GROUP} clients listed, the limit"
                )
        return clients

    @staticmethod
    def _drop(table: dict, group: str, client_id: str) -> None:
        clients = table.get(group)
        if clients is not None:
            clients.pop(client_id, None)
            if not clients:
                del table[group]

    def _expire_producers(self, group: str) -> None:
        clients = self._producers.get(group, {})
        now = self.clock_ms()
        for client_id in [c for c, (_, expires) in clients.items() if expires <= now]:
            self._drop(self._producers, group, client_id)

    # ---- what mqadmin asks ------------------------------------------------------------
    def consumers(self, group: str) -> tuple[list[ClientConnection], ConsumerSettings | None]:
        """The group's live consumers (a member of the group the heartbeats described),
        and the settings the newest of them stated."""
        live = {client_id for client_id, _ in self.members.live(group)}
        known = self._consumers.get(group, {})
        for client_id in [c for c in known if c not in live]:
            self._drop(self._consumers, group, client_id)  # expired or gone since
        listed = self._consumers.get(group, {})
        settings = next(reversed(listed.values()))[1] if listed else None
        return [connection for connection, _ in listed.values()], settings

    def producers(self, group: str) -> list[ClientConnection]:
        self._expire_producers(group)
        return [connection for connection, _ in self._producers.get(group, {}).values()]


class ConnectionHandlers:
    def __init__(self, connections: ClientConnections) -> None:
        self.connections = connections

    def handlers(self) -> list[tuple[int, Handler]]:
        return [
            (RequestCode.GET_CONSUMER_CONNECTION_LIST, self.consumer_connections),
            (RequestCode.GET_PRODUCER_CONNECTION_LIST, self.producer_connections),
        ]

    async def consumer_connections(self, request: RemotingCommand, connection) -> RemotingCommand:
        group = request.text("consumerGroup")
        clients, settings = self.connections.consumers(group)
        if not clients or settings is None:
            return request.reply(
                ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online"
            )
        subscriptions = {
            s.topic: {
                "classFilterMode": False,
                "codeSet": [],
                "expressionType": s.expression_type,
                "subString": s.expression,
                "subVersion": s.version,
                "tagsSet": [],
                "topic": s.topic,
            }
            for s in self.connections.subscriptions.of(group)
        }
        body = {
            "connectionSet": [connection_json(c) for c in clients],
            "consumeFromWhere": settings.consume_from_where,
            "consumeType": settings.consume_type,
            "messageModel": settings.message_model,
            "subscriptionTable": subscriptions,
        }
        return request.reply(ResponseCode.SUCCESS, body=_json(body))

    async def producer_connections(self, request: RemotingCommand, connection) -> RemotingCommand:
        group = request.text("producerGroup")
        clients = self.connections.producers(group)
        if not clients:
            return request.reply(
                ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist"
            )
        body = {"connectionSet": [connection_json(c) for c in clients]}
        return request.reply(ResponseCode.SUCCESS, body=_json(body))
